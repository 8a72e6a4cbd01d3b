"""An offline contract check of a Triton model repository, this project's or anyone's: what NVIDIA's
container would refuse or serve otherwise than meant, found without a server.

    python -m tritonrepo check model_repository     # one line per finding, exit 1 on any error

- :mod:`tritonrepo.contract.repository`: the whole check, model by model (platform, version folders and
  files), and each exported file once;
- :mod:`tritonrepo.contract.config`: a config's own rules (dims, preferred sizes, batch and ragged inputs,
  warm-ups); :mod:`tritonrepo.contract.ensembles`: an ensemble against its steps;
- :mod:`tritonrepo.contract.onnx_file`, :mod:`tritonrepo.contract.torchscript_file`: an exported file
  against its config, as the onnxruntime and libtorch backends bind them;
- :mod:`tritonrepo.contract.release_notes`: behaviour changes of the Triton release that will serve it;
- :mod:`tritonrepo.contract.finding`: a finding, its severity and its one line.
"""

from tritonrepo.contract.finding import Finding
from tritonrepo.contract.repository import Report, check_repository

__all__ = ["Finding", "Report", "check_repository"]
