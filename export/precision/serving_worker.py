"""Worker run by the serving onnxruntime's own Python (export/precision/serving_runtime.py): one session on a
file.

``python -I serving_worker.py MODEL DEVICE [CUDA_OPTIONS_JSON]`` (the CUDA provider's options, as a JSON
object). It imports only numpy and onnxruntime (it runs in build/serving-runtime, not in the project's
environment). Messages on stdin/stdout are a status byte,
an 8-byte big-endian length and a payload: first it sends its onnxruntime version, providers and the
graph's output names (JSON), then for each feed it reads (an ``.npz`` of named arrays) it answers every
output, in the graph's order (an ``.npz`` of ``arr_0``, ``arr_1``, ...), or an error message; it exits at
the end of its input.
"""

from __future__ import annotations

import io
import json
import struct
import sys

import numpy as np
import onnxruntime

_HEADER = struct.Struct(">cQ")  # the same framing as export.precision.serving_runtime


def _send(payload: bytes, status: bytes = b"0") -> None:
    sys.stdout.buffer.write(_HEADER.pack(status, len(payload)) + payload)
    sys.stdout.buffer.flush()


def _session(model: str, device: str, cuda_options: dict[str, str]) -> onnxruntime.InferenceSession:
    if device == "cuda" and "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        raise RuntimeError(
            f"this onnxruntime {onnxruntime.__version__} has no CUDA provider: gate a file for CUDA where "
            f"the onnxruntime-gpu build of {onnxruntime.__version__} is installed (the export image)"
        )
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    providers = [("CUDAExecutionProvider", cuda_options)] if device == "cuda" else ["CPUExecutionProvider"]
    return onnxruntime.InferenceSession(model, options, providers=providers)


def main(model: str, device: str, cuda_options: str = "{}") -> int:
    try:
        session = _session(model, device, json.loads(cuda_options))
    except Exception as e:  # the file does not load in this runtime: say why, then stop
        _send(f"{type(e).__name__}: {e}".encode(), b"1")
        return 1
    info = {
        "onnxruntime": onnxruntime.__version__,
        "providers": session.get_providers(),
        "outputs": [output.name for output in session.get_outputs()],
    }
    _send(json.dumps(info).encode())
    while True:
        header = sys.stdin.buffer.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return 0
        _, length = _HEADER.unpack(header)
        try:
            with np.load(io.BytesIO(sys.stdin.buffer.read(length)), allow_pickle=False) as arrays:
                feed = {name: arrays[name] for name in arrays.files}
            outputs = session.run(None, feed)
        except Exception as e:  # a feed this file refuses: the caller fails the variant with this message
            _send(f"{type(e).__name__}: {e}".encode(), b"1")
            continue
        buffer = io.BytesIO()
        np.savez(buffer, *outputs)
        _send(buffer.getvalue())


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
