"""Instance counts that follow the server's cores, set when the server starts.

A model whose config carries the parameter ``host_cores_reserved`` (the image preprocessing: decoding is
the image service's CPU-bound step on a GPU host) gets ``max(count, cores - host_cores_reserved)``
instances in its ``KIND_CPU`` instance group, where ``cores`` is what this process may run on: its CPU
affinity, capped by the cgroup's CPU quota (a container's ``--cpus`` or a Kubernetes pod's CPU limit). The
committed ``count`` is the floor, so a small host keeps it and a config served without this step is
still valid. The reserved cores are left to Triton's front ends and the other steps' instances.

Two callers, one rule:

- NVIDIA's container (compose and Kubernetes): run as the server's command, before tritonserver and with
  its command line after it (stdlib only, so it runs on the container's own ``python3``)::

      python3 host_instances.py tritonserver --model-repository=/models ...

  It writes a copy of the repository under ``$TMPDIR`` (every model folder's entries linked, each
  ``config.pbtxt`` whose count changes rewritten), points ``--model-repository`` at the copy and becomes
  tritonserver (``exec``), so signals reach tritonserver as before.
- The local server's derivation (:mod:`tritonrepo.derive`) on a GPU host applies the same rule to the
  parsed config (:func:`scale_parsed_config`).

A CPU-served repository (the CPU copy, the local derivation without a GPU) drops the parameter: there the
model's own threads need the same cores.
"""

from __future__ import annotations

import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

PARAMETER = "host_cores_reserved"
REPOSITORY_FLAGS = ("--model-repository", "--model-store")
_RESERVED = re.compile(r'key: "host_cores_reserved"\s*value \{\s*string_value: "(\d+)"\s*\}')
# A generated config's CPU instance group, as protobuf's text format writes it.
_CPU_GROUP = re.compile(r"(instance_group \{\s*count: )(\d+)(\s*kind: KIND_CPU\s*\})")


def usable_cores(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup CPU quota (v2 or v1)."""
    cores = len(os.sched_getaffinity(0))
    quota = _cgroup_quota(cgroup_root)
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def _cgroup_quota(root: Path) -> float | None:
    """The CPU quota in cores (``cpu.max`` of cgroup v2, ``cfs_quota_us`` of v1); None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def host_count(count: int, reserved: int, cores: int) -> int:
    """The instance count on a host of ``cores``: the cores less ``reserved``, never below ``count``."""
    return max(count, cores - reserved)


def scale_parsed_config(config: Any, cores: int | None) -> None:
    """Apply the rule to a parsed config (a ``ModelConfig``) in place; ``cores=None`` (a CPU-served copy)
    drops the parameter and keeps the count."""
    if PARAMETER not in config.parameters:
        return
    reserved = int(config.parameters[PARAMETER].string_value)
    if cores is None:
        del config.parameters[PARAMETER]
        return
    for group in config.instance_group:
        if group.kind == group.KIND_CPU:
            group.count = host_count(group.count, reserved, cores)


def scaled_config_text(text: str, cores: int) -> str | None:
    """``text`` (a config.pbtxt) with its CPU instance count set for ``cores``; None when it does not ask
    for it (no ``host_cores_reserved``). ValueError when it asks but its instance group is not one
    ``count: N`` / ``kind: KIND_CPU`` block, as the generator writes it."""
    reserved = _RESERVED.search(text)
    if reserved is None:
        return None
    groups = _CPU_GROUP.findall(text)
    if len(groups) != 1:
        raise ValueError(
            f"the config sets {PARAMETER} but has {len(groups)} instance_group blocks of the form "
            "'count: N  kind: KIND_CPU' (one is needed); regenerate it from its description "
            "(python -m export --configs-only)"
        )
    count = host_count(int(groups[0][1]), int(reserved.group(1)), cores)
    return _CPU_GROUP.sub(lambda m: f"{m.group(1)}{count}{m.group(3)}", text)


def scaled_repository(source: Path, target: Path, cores: int) -> dict[str, int]:
    """Write ``target``: each model folder of ``source`` with its entries linked and its config.pbtxt
    rewritten where the count follows the cores. Returns model -> the count it got there."""
    counts: dict[str, int] = {}
    target.mkdir(parents=True, exist_ok=True)
    for model in sorted(p for p in source.iterdir() if p.is_dir()):
        folder = target / model.name
        folder.mkdir(exist_ok=True)
        config = model / "config.pbtxt"
        scaled = scaled_config_text(config.read_text(), cores) if config.is_file() else None
        for entry in model.iterdir():
            if scaled is not None and entry.name == "config.pbtxt":
                (folder / entry.name).write_text(scaled)
                counts[model.name] = int(_CPU_GROUP.findall(scaled)[0][1])
            else:
                (folder / entry.name).symlink_to(entry.resolve())
    return counts


def with_repository(command: list[str], repository: Path) -> tuple[list[str], Path]:
    """``command`` with its model repository replaced by ``repository``, and the one it named."""
    for i, argument in enumerate(command):
        for flag in REPOSITORY_FLAGS:
            if argument.startswith(flag + "="):
                named = Path(argument.split("=", 1)[1])
                return [*command[:i], f"{flag}={repository}", *command[i + 1 :]], named
            if argument == flag and i + 1 < len(command):
                return [*command[: i + 1], str(repository), *command[i + 2 :]], Path(command[i + 1])
    raise ValueError(f"no --model-repository=PATH in the server's command line: {' '.join(command)}")


def main(argv: list[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        print("usage: python3 host_instances.py tritonserver --model-repository=PATH ...", file=sys.stderr)
        return 2
    cores = usable_cores()
    target = Path(tempfile.mkdtemp(prefix="host-instances-")) / "models"
    try:
        command, source = with_repository(command, target)
        counts = scaled_repository(source, target, cores)
    except (OSError, ValueError) as e:
        print(f"host_instances: {e}", file=sys.stderr)
        return 1
    for model, count in counts.items():
        print(f"host_instances: {model}: {count} instances on {cores} cores", file=sys.stderr, flush=True)
    os.execvp(command[0], command)  # becomes tritonserver: same process, same signals
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
