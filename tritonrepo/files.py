"""Where exported files live in a model repository and which runtime runs each.

The names the exporter writes and the native backends load, the manifest written beside each exported
file, and the platforms whose models load one.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo.errors import RepositoryError

ONNX_FILENAME = "model.onnx"
TORCHSCRIPT_FILENAME = "model.pt"
# The manifest `python -m export` writes beside each exported file (what it was built from, where gated).
EXPORT_MANIFEST = ".export.json"
WARMUP_FOLDER = "warmup"  # Triton's kWarmupDataFolder, beside config.pbtxt: the data model_warmup reads
# What the export writes into a repository beside the committed configs and code (and Python's caches):
# left out where a copy of a repository's configs is made.
EXPORT_OUTPUTS = ("*.onnx", "*.pt", "tokenizer.json", EXPORT_MANIFEST, "__pycache__")
# A Python-backend model names each file it reads from its version folder in a parameter ending in this
# (tokenizer_file, labels_file): a model whose file is missing is not served locally (tritonrepo/derive.py).
FILE_PARAMETER_SUFFIX = "_file"
# The runtime that runs an exported file outside its native backend, and the file's default name.
EXPORTED_FILENAMES = {"onnxruntime": ONNX_FILENAME, "torchscript": TORCHSCRIPT_FILENAME}
# Platforms and backends that run an exported file natively in NVIDIA's container, with the runtime
# that runs the same file inside a Python-backend model here and the file's default name.
NATIVE_RUNTIMES = {
    "onnxruntime_onnx": ("onnxruntime", ONNX_FILENAME),
    "onnxruntime": ("onnxruntime", ONNX_FILENAME),
    "pytorch_libtorch": ("torchscript", TORCHSCRIPT_FILENAME),
    "pytorch": ("torchscript", TORCHSCRIPT_FILENAME),
}


def exported_filename(config: ModelConfig) -> str | None:
    """The exported file a native model loads: its config's default_model_filename, else the default name
    for its platform (model.onnx for ONNX Runtime, model.pt for libtorch); None for other models."""
    kind = config.platform or config.backend
    if kind not in NATIVE_RUNTIMES:
        return None
    return config.default_model_filename or NATIVE_RUNTIMES[kind][1]


def exported_file(model_dir: Path, config: ModelConfig, *, version: int = 1) -> Path:
    """Where a native model's exported file lives in ``model_dir``."""
    filename = exported_filename(config)
    if filename is None:
        raise RepositoryError(
            f"model {config.name!r} runs on {config.platform or config.backend!r}, which loads no exported "
            f"file; expected one of {sorted(NATIVE_RUNTIMES)}"
        )
    return Path(model_dir) / str(version) / filename
