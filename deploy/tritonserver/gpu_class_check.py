"""Start-up check of the model repository against this server's GPU, run before tritonserver starts.

Every exported file's manifest (``<model>/<version>/.export.json``, written by ``python -m export``) says
where the file was gated: on a CPU, or on a GPU of a given class (its name and compute capability). A
file gated on another class was chosen and checked for other kernels (bf16 where this GPU has none, or
timings of another GPU), and a file gated on a CPU may hold int8 products that would run on the CPU
beside the GPU. So the server refuses to start on such a repository, and says to re-export it on a GPU of
this class. A CPU export is what a server without a GPU (the CPU override) serves.

Run as the server's command, in NVIDIA's container (stdlib only, Python 3.10), with tritonserver's
command line after it; it reads ``--model-repository`` from that line, checks, and then becomes the
server (``exec``), so signals reach tritonserver as before:

    python3 /opt/tritonserver/gpu_class_check.py tritonserver --model-repository=/models ...

or on its own: ``python3 gpu_class_check.py --repository /models``. This host's GPUs come from
``nvidia-smi`` (none where it is missing). It is a start-up check, not part of the per-model probe.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MANIFEST_NAME = ".export.json"
EXPORTED_SUFFIXES = (".onnx", ".pt", ".plan")
REPOSITORY_FLAGS = ("--model-repository", "--model-store")
RE_EXPORT = (
    "Re-export the repository on this server's {target} (python -m export --served-on {served_on}, as the "
    "deployment's export step runs it) before serving it."
)


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str | None  # "8.0"; None where nvidia-smi cannot report it (then names are compared)


def host_gpus(nvidia_smi: str = "nvidia-smi") -> list[Gpu]:
    """The GPUs this container sees, from nvidia-smi (none where it is missing or fails)."""
    executable = shutil.which(nvidia_smi)
    if executable is None:
        return []
    for fields in ("name,compute_cap", "name"):
        try:
            out = subprocess.run(
                [executable, f"--query-gpu={fields}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue  # an older driver has no compute_cap field: ask for names only
        rows = [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]
        return [Gpu(name=row[0], compute_capability=row[1] if len(row) > 1 else None) for row in rows]
    return []


def exported_manifests(repository: Path) -> dict[Path, dict | None]:
    """Each exported file of the repository and its manifest (None where it has none or it is unreadable)."""
    found: dict[Path, dict | None] = {}
    for version in sorted(p for p in repository.glob("*/*") if p.is_dir()):
        files = [p for p in version.iterdir() if p.suffix in EXPORTED_SUFFIXES]
        try:
            manifest = json.loads((version / MANIFEST_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            manifest = None
        for path in files:
            if manifest is not None and manifest.get("artifact") == path.name:
                found[path] = manifest
            else:
                found[path] = None
    return found


def _where(gated_on: dict) -> str:
    if gated_on.get("device") != "cuda":
        return "a CPU (a CPU export)"
    return f"{gated_on.get('gpu_name')} (compute capability {gated_on.get('compute_capability')})"


def _matches(gated_on: dict, gpu: Gpu) -> bool:
    if gpu.compute_capability is not None:
        return gated_on.get("compute_capability") == gpu.compute_capability
    return gated_on.get("gpu_name") == gpu.name


def problems(manifests: dict[Path, dict | None], gpus: list[Gpu]) -> list[str]:
    """Why each exported file may not be served on a host with ``gpus`` (none: every file may)."""
    here = (
        ", ".join(f"{g.name} (compute capability {g.compute_capability or 'unknown'})" for g in gpus)
        if gpus
        else "no GPU"
    )
    found = []
    for path, manifest in manifests.items():
        gated_on = (manifest or {}).get("gated_on")
        if not isinstance(gated_on, dict):
            found.append(f"{path}: its manifest does not say where it was gated (exported before this check)")
            continue
        on_gpu = gated_on.get("device") == "cuda"
        if gpus and not on_gpu:
            found.append(f"{path} was gated on {_where(gated_on)}, but this server has {here}")
        elif not gpus and on_gpu:
            found.append(f"{path} was gated on {_where(gated_on)}, but this server has no GPU")
        elif gpus and not all(_matches(gated_on, gpu) for gpu in gpus):
            found.append(f"{path} was gated on {_where(gated_on)}, but this server's GPU is {here}")
    return found


def check(repository: Path, gpus: list[Gpu]) -> list[str]:
    """The problems of ``repository`` on this host, each a line, with what to do at the end."""
    if not repository.is_dir():
        return [f"model repository {repository} does not exist"]
    found = problems(exported_manifests(repository), gpus)
    if found:
        target, served_on = ("GPU class", "gpu") if gpus else ("CPU (no GPU here)", "cpu")
        found.append(RE_EXPORT.format(target=target, served_on=served_on))
    return found


def repository_of(command: list[str]) -> Path:
    """The ``--model-repository`` of a tritonserver command line."""
    for index, arg in enumerate(command):
        for flag in REPOSITORY_FLAGS:
            if arg.startswith(flag + "="):
                return Path(arg.split("=", 1)[1])
            if arg == flag and index + 1 < len(command):
                return Path(command[index + 1])
    raise SystemExit(f"gpu_class_check: the command {command[:1]} has no {REPOSITORY_FLAGS[0]}=PATH to check")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command: list[str] = []
    if argv and not argv[0].startswith("-"):
        command, repository = argv, repository_of(argv)
    else:
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        parser.add_argument("--repository", type=Path, required=True)
        repository = parser.parse_args(argv).repository
    gpus = host_gpus()
    found = check(repository, gpus)
    if found:
        print("REFUSED to serve " + str(repository) + ":", file=sys.stderr)
        for line in found:
            print(f"  {line}", file=sys.stderr)
        return 1
    where = ", ".join(sorted({g.compute_capability or g.name for g in gpus})) or "CPU"
    print(
        f"gpu_class_check: every exported file in {repository} was gated for this host ({where})", flush=True
    )
    if command:
        os.execvp(command[0], command)  # becomes tritonserver: same process, same signals
    return 0


if __name__ == "__main__":
    sys.exit(main())
