"""Run an exported ONNX or TorchScript file with onnxruntime or torch.jit: session, threads and feeds.

The one runner of the exported files outside NVIDIA's native backends. The local server runs them through
it: the derivation (``python -m tritonrepo derive``) links this file beside ``native_runner.py`` into each
native model's version folder, where the runner imports it by its bare name. The benchmark's baselines run
the same files through it in-process as ``tritonrepo.exported_runtime``. So it imports neither Triton nor
any module of this project: numpy, and onnxruntime or torch once a runner of that runtime is made.

Both runners take their feeds by name (:attr:`input_names`, in the order the file takes them) and return
every output as a numpy array, on the GPU where one is present and the runtime can use it, else on the CPU.
:func:`batch_input_values` computes a config's ``batch_input`` as Triton's backends fill it in, for the
runner and for the repository check (tritonrepo/contract/), which feeds the file what the server would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np

RUNTIMES = ("onnxruntime", "torchscript")


def _item_shapes(shapes: Sequence[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """One entry per batch item: a request of shape [n, *dims] contributes n items of shape dims."""
    return [tuple(shape[1:]) for shape in shapes for _ in range(shape[0])]


def _element_counts(shapes: Sequence[tuple[int, ...]]) -> np.ndarray:
    return np.array([int(np.prod(shape)) for shape in shapes], dtype=np.int64)


# The batch input kinds of Triton's model configuration, computed as the backends compute them.
BATCH_INPUT_KINDS = {
    "BATCH_ELEMENT_COUNT": lambda shapes: _element_counts(shapes),
    "BATCH_ACCUMULATED_ELEMENT_COUNT": lambda shapes: np.cumsum(_element_counts(shapes)),
    "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO": lambda shapes: np.concatenate(
        [[0], np.cumsum(_element_counts(shapes))]
    ),
    "BATCH_ITEM_SHAPE": lambda shapes: np.array(_item_shapes(shapes), dtype=np.int64),
    "BATCH_ITEM_SHAPE_FLATTEN": lambda shapes: np.array(_item_shapes(shapes), dtype=np.int64).reshape(-1),
}


def batch_input_values(kind: str, shapes: Sequence[tuple[int, ...]], dtype: np.dtype | type) -> np.ndarray:
    """The values Triton gives a batch input of ``kind`` (a name in :data:`BATCH_INPUT_KINDS`) for a batch
    of requests whose source input has ``shapes`` (each request's shape, its batch axis first)."""
    return BATCH_INPUT_KINDS[kind](shapes).astype(dtype)


class OnnxRunner:
    """An ONNX file in an onnxruntime session: ``threads`` intra-op threads, one inter-op thread.

    ``outputs``: the outputs :meth:`run` returns, in order (None: all of them); ``memory_pattern``: the
    onnxruntime backend's ``enable_mem_pattern`` (off, a new batch shape does not keep another planned
    allocation; bounded growth measured with many shapes, docs/deploy.md); ``profile_prefix``: where
    onnxruntime's profiler writes its trace (``session.end_profiling()`` ends it), None for no profiling.
    """

    def __init__(
        self,
        path: Path,
        *,
        threads: int,
        outputs: Sequence[str] | None = None,
        memory_pattern: bool = True,
        spinning: bool = True,
        profile_prefix: str | None = None,
    ) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.enable_mem_pattern = memory_pattern
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if profile_prefix:
            options.enable_profiling = True
            options.profile_file_prefix = profile_prefix
        available = ort.get_available_providers()
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        self.session = ort.InferenceSession(str(path), sess_options=options, providers=providers)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.outputs = list(outputs) if outputs is not None else None

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(self.outputs, dict(feeds)))


class TorchScriptRunner:
    """A TorchScript file loaded with ``torch.jit.load``, run under ``torch.inference_mode``.

    ``feed_order``: the feed bound to each argument of ``forward()``, in order (None: the argument names
    of ``forward()`` itself); ``instance_kind``: Triton's ``model_instance_kind`` (``"CPU"`` keeps a
    GPU machine's instance on the CPU); ``optimized``: off, as the libtorch backend's
    ``DISABLE_OPTIMIZED_EXECUTION``, the module runs under ``torch.jit.optimized_execution(False)``;
    ``profiling``: the profiling executor on or off, as the libtorch backend's ``ENABLE_JIT_PROFILING``
    (None: the process's setting stays as it is).
    """

    def __init__(
        self,
        path: Path,
        *,
        threads: int,
        feed_order: Sequence[str] | None = None,
        instance_kind: str | None = None,
        optimized: bool = True,
        profiling: bool | None = None,
    ) -> None:
        import torch

        self.torch = torch
        self.threads = threads
        if profiling is not None:
            torch._C._jit_set_profiling_mode(profiling)
        use_gpu = torch.cuda.is_available() and instance_kind != "CPU"
        self.device = torch.device("cuda" if use_gpu else "cpu")
        self.module = torch.jit.load(str(path), map_location=self.device).eval()
        arguments = [argument.name for argument in self.module.forward.schema.arguments[1:]]  # after self
        self.input_names = list(feed_order) if feed_order is not None else arguments
        self.optimized = optimized

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        torch = self.torch
        # torch's thread count is process-wide (and OpenMP's per calling thread): set at each call, so that
        # runners of different counts in one process, or calls from another thread, run with their own.
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        execution: AbstractContextManager = (
            nullcontext() if self.optimized else torch.jit.optimized_execution(False)
        )
        with torch.inference_mode(), execution:
            tensors = (
                torch.from_numpy(np.ascontiguousarray(feeds[name])).to(self.device)
                for name in self.input_names
            )
            result = self.module(*tensors)
        results = result if isinstance(result, (tuple, list)) else (result,)
        return [r.detach().cpu().numpy() for r in results]
