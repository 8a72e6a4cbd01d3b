"""Before the GPU benchmark starts: can this environment run it on a GPU?

``make bench-gpu`` runs this first. It checks that torch is a CUDA build that sees a device, and that
onnxruntime has its CUDA provider and a session really runs on it (onnxruntime-gpu falls back to the CPU,
with a warning only, when it cannot load the CUDA libraries). When one of them fails it names what, and
gives the one command that runs the benchmark where all of them hold: the export image's ``bench``
target, which has the CUDA builds of the serving container's runtimes (compose service ``bench-gpu``,
docs/benchmarks.md, "On a CUDA machine").

    python -m loadtest.bench.gpu.preflight   # exit 0: ready; 1: not ready, and what to run instead
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

CUDA_PROVIDER = "CUDAExecutionProvider"
# From the repository root on the GPU host (docs/deploy.md writes deploy/secrets.env); the first run
# builds the image.
INSTEAD = "docker compose --env-file deploy/versions.env --env-file deploy/secrets.env run --rm bench-gpu"
EXIT_READY, EXIT_NOT_READY = 0, 1


@dataclass(frozen=True, kw_only=True)
class Runtimes:
    """What the GPU benchmark needs to know of this environment's torch and onnxruntime."""

    torch_version: str
    torch_cuda: str | None  # torch.version.cuda: None for a CPU build
    cuda_devices: int  # devices torch can use (0 where torch.cuda.is_available() is False)
    onnxruntime_version: str
    onnxruntime_providers: tuple[str, ...]
    onnxruntime_runs_on_cuda: bool  # a session that asks for CUDA first really got it


def probe() -> Runtimes:
    """This environment's runtimes: imports torch and onnxruntime, and opens one tiny CUDA session
    where torch sees a device and onnxruntime lists the CUDA provider."""
    import onnxruntime
    import torch

    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    providers = tuple(onnxruntime.get_available_providers())
    return Runtimes(
        torch_version=torch.__version__,
        torch_cuda=torch.version.cuda,
        cuda_devices=devices,
        onnxruntime_version=onnxruntime.__version__,
        onnxruntime_providers=providers,
        onnxruntime_runs_on_cuda=devices > 0 and CUDA_PROVIDER in providers and _session_on_cuda(),
    )


def _session_on_cuda() -> bool:
    """Whether an onnxruntime session asked for the CUDA provider first keeps it (an Identity graph)."""
    import onnxruntime
    from onnx import TensorProto, helper

    tensors = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1]) for name in ("X", "Y")]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])], "preflight", [tensors[0]], [tensors[1]]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=[CUDA_PROVIDER, "CPUExecutionProvider"]
    )
    return session.get_providers()[0] == CUDA_PROVIDER


def problems(runtimes: Runtimes) -> list[str]:
    """What stops the GPU benchmark here, one line each; empty when it can run."""
    found = []
    torch_name = f"torch {runtimes.torch_version}"
    if runtimes.torch_cuda is None:
        found.append(f"{torch_name} is a CPU build (torch.version.cuda is None)")
    elif runtimes.cuda_devices == 0:
        found.append(
            f"{torch_name} (CUDA {runtimes.torch_cuda}) sees no CUDA device: no NVIDIA GPU or driver "
            "here, or a container started without the GPU"
        )
    ort_name = f"onnxruntime {runtimes.onnxruntime_version}"
    if CUDA_PROVIDER not in runtimes.onnxruntime_providers:
        found.append(
            f"{ort_name} has no {CUDA_PROVIDER} (it has {', '.join(runtimes.onnxruntime_providers)}): "
            "the CUDA build is the onnxruntime-gpu package"
        )
    elif runtimes.cuda_devices and not runtimes.onnxruntime_runs_on_cuda:
        found.append(
            f"{ort_name} lists {CUDA_PROVIDER}, but a session asked for it ran on the CPU: it could not "
            "load the CUDA or cuDNN libraries it was built for"
        )
    return found


def report(runtimes: Runtimes) -> str:
    """What the preflight prints: the runtimes when ready, else each problem and what to run instead."""
    found = problems(runtimes)
    if not found:
        return (
            f"GPU preflight: torch {runtimes.torch_version} (CUDA {runtimes.torch_cuda}, "
            f"{runtimes.cuda_devices} device(s)), onnxruntime {runtimes.onnxruntime_version} on "
            f"{CUDA_PROVIDER}: ready"
        )
    lines = ["GPU preflight: the GPU benchmark cannot run in this environment:"]
    lines += [f"  - {problem}" for problem in found]
    lines += [
        "Run it in the export image instead, which has the CUDA builds of the serving container's "
        'runtimes, from the repository root on the GPU host (docs/benchmarks.md, "On a CUDA machine"):',
        f"  {INSTEAD}",
    ]
    if runtimes.torch_cuda is not None and runtimes.cuda_devices == 0:
        lines.append(
            "If that is where this ran, the container got no GPU: check that the host's driver and the "
            "NVIDIA Container Toolkit work (docs/deploy.md, step 1)."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None, *, runtimes: Callable[[], Runtimes] = probe) -> int:
    if argv:
        print(f"usage: python -m loadtest.bench.gpu.preflight (no arguments; got {argv})", file=sys.stderr)
        return 2
    found = runtimes()
    ready = not problems(found)
    print(report(found), file=sys.stdout if ready else sys.stderr)
    return EXIT_READY if ready else EXIT_NOT_READY


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
