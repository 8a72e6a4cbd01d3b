"""The onnxruntime that serves the exported ONNX files, used to gate them a second time.

NVIDIA's Triton container (24.10, deploy/versions.env) serves ONNX files with onnxruntime 1.19.2, while
the export runs the local onnxruntime; their kernels differ (the int8 text graph's outputs move by 5e-4
between the two). So every ONNX variant that passes its gate locally is gated again with the serving
version's outputs, and fails, named, if they do not pass
(:func:`export.precision.selection.select_and_write`).

The serving version runs in its own small environment, ``build/serving-runtime`` (onnxruntime 1.19.2 and
numpy<2; ``make venv`` creates it), in a worker process (export/precision/serving_worker.py) fed batches
through a pipe. Where the local onnxruntime is the serving version already (the export image), the local gate
is that gate and no worker starts.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np
import onnxruntime

from export.common import ExportError
from export.precision.gates import GateResult
from tritonrepo.paths import SERVING_RUNTIME

SERVING_ONNXRUNTIME = "1.19.2"  # Triton 24.10's onnxruntime backend
LABEL = f"onnxruntime {SERVING_ONNXRUNTIME} (the serving runtime)"
WORKER = Path(__file__).with_name("serving_worker.py")
CREATE = (
    f"`make venv` creates it, or: python3.11 -m venv {SERVING_RUNTIME} && "
    f"{SERVING_RUNTIME}/bin/python -m pip "
    f"install onnxruntime=={SERVING_ONNXRUNTIME} 'numpy<2'"
)
_HEADER = struct.Struct(">cQ")  # status (b"0" ok, b"1" error), payload length

Runner = Callable[[Any], Any]
Feed = Callable[[Any], dict[str, np.ndarray]]


def needed(local_version: str = onnxruntime.__version__) -> bool:
    """Whether the serving onnxruntime differs from the local one (then files are gated with both)."""
    return local_version != SERVING_ONNXRUNTIME


def interpreter(runtime_dir: Path = SERVING_RUNTIME) -> Path:
    python = Path(runtime_dir) / "bin" / "python"
    if not python.is_file():
        raise ExportError(
            f"the serving onnxruntime {SERVING_ONNXRUNTIME} is not installed in {runtime_dir} (every ONNX "
            f"file is gated with it as well as with the local {onnxruntime.__version__}): {CREATE}"
        )
    return python


def write_message(stream: IO[bytes], payload: bytes, status: bytes = b"0") -> None:
    stream.write(_HEADER.pack(status, len(payload)) + payload)
    stream.flush()


def read_message(stream: IO[bytes]) -> tuple[bytes, bytes]:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the other side closed the pipe")
    status, length = _HEADER.unpack(header)
    return status, stream.read(length)


class ServingSession:
    """An onnxruntime session on ``model`` in the serving runtime's process (a context manager); on
    "cuda", the CUDA provider gets ``cuda_options`` (those the model's config serves, and use_tf32)."""

    def __init__(
        self,
        model: Path,
        device: str,
        *,
        cuda_options: Mapping[str, str] | None = None,
        runtime_dir: Path = SERVING_RUNTIME,
    ) -> None:
        self._log = tempfile.TemporaryFile()
        options = json.dumps(dict(cuda_options or {}))
        self._process = subprocess.Popen(
            [str(interpreter(runtime_dir)), "-I", str(WORKER), str(model), device, options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        try:
            self.info = json.loads(self._receive().decode())
        except ExportError:
            self.close()
            raise
        if self.info["onnxruntime"] != SERVING_ONNXRUNTIME:
            self.close()
            raise ExportError(
                f"{runtime_dir} runs onnxruntime {self.info['onnxruntime']}, not the serving "
                f"{SERVING_ONNXRUNTIME}: {CREATE}"
            )

    def _receive(self) -> bytes:
        assert self._process.stdout is not None
        try:
            status, payload = read_message(self._process.stdout)
        except EOFError:
            self._process.wait(timeout=30)
            self._log.seek(0)
            tail = self._log.read().decode(errors="replace")[-2000:]
            raise ExportError(
                f"the serving onnxruntime worker exited ({self._process.returncode}): {tail}"
            ) from None
        if status != b"0":
            raise ExportError(f"onnxruntime {SERVING_ONNXRUNTIME} (the serving runtime): {payload.decode()}")
        return payload

    @property
    def outputs(self) -> list[str]:
        """The graph's output names, in its order (the order :meth:`run` answers them in)."""
        return list(self.info["outputs"])

    def run(self, feed: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """Every output of the model for ``feed``, in the graph's order."""
        assert self._process.stdin is not None
        buffer = io.BytesIO()
        np.savez(buffer, **feed)
        write_message(self._process.stdin, buffer.getvalue())
        with np.load(io.BytesIO(self._receive()), allow_pickle=False) as answer:
            outputs = tuple(answer[f"arr_{index}"] for index in range(len(answer.files)))
        if len(outputs) != len(self.outputs):
            raise ExportError(
                f"{LABEL} answered {len(outputs)} outputs, the graph has {len(self.outputs)} ({self.outputs})"
            )
        return outputs

    def runner(self, feed: Feed) -> Runner:
        """A runner on this session, answering as the export's own runners do: a graph's one output as
        its array, several as a tuple in the graph's order (so that the gate compares every output)."""

        def run(batch: Any) -> Any:
            outputs = self.run(feed(batch))
            return outputs[0] if len(outputs) == 1 else outputs

        return run

    def close(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()  # the worker exits at the end of its input
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._log.close()

    def __enter__(self) -> ServingSession:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def serving_gate(
    model: Path,
    device: str,
    feed: Feed,
    gate: Callable[[Runner], GateResult],
    *,
    cuda_options: Mapping[str, str] | None = None,
    runtime_dir: Path = SERVING_RUNTIME,
) -> GateResult | None:
    """``gate`` applied to ``model`` run by the serving onnxruntime, every output of it (``feed`` turns a
    runner's input into the session's feed; on "cuda" with ``cuda_options``); None where the local
    onnxruntime is the serving version."""
    if not needed():
        return None
    with ServingSession(model, device, cuda_options=cuda_options, runtime_dir=runtime_dir) as session:
        return gate(session.runner(feed))
