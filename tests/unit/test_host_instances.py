"""The image preprocessing's instances follow the server's cores at start-up (tritonrepo/host_instances.py):
the rule on the committed configs, the cgroup quota, the repository copy the server's command serves, and
the local derivation and the CPU copy that share the rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo import host_instances
from tritonrepo.configs import load_repository, parse_config
from tritonrepo.container_cpu import cpu_config
from tritonrepo.derive import derive_local_config
from tritonrepo.host_instances import (
    PARAMETER,
    scaled_config_text,
    scaled_repository,
    usable_cores,
    with_repository,
)
from tritonrepo.paths import REPOSITORY

SCALED = ("image_preprocess", "image_preprocess_lite2", "image_preprocess_mobilenet_v2")


def _count(text: str) -> int:
    return text_format.Parse(text, ModelConfig()).instance_group[0].count


@pytest.mark.parametrize("model", SCALED)
@pytest.mark.parametrize(("cores", "expected"), [(1, 2), (2, 2), (4, 2), (5, 3), (16, 14), (64, 62)])
def test_each_image_preprocessing_takes_the_cores_less_two_never_below_its_count(
    model: str, cores: int, expected: int
) -> None:
    text = (REPOSITORY / model / "config.pbtxt").read_text()
    assert parse_config(REPOSITORY / model / "config.pbtxt").parameters[PARAMETER].string_value == "2"
    scaled = scaled_config_text(text, cores)
    assert scaled is not None
    assert _count(scaled) == expected
    # Only the count changes: the rest of the config (and its comments) is the committed one.
    assert [line for line in scaled.splitlines() if "count:" not in line] == [
        line for line in text.splitlines() if "count:" not in line
    ]


def test_only_the_configs_that_ask_for_it_follow_the_cores() -> None:
    asking = {
        name for name, entry in load_repository(REPOSITORY).items() if PARAMETER in entry.config.parameters
    }
    assert asking == set(SCALED)
    postprocess = (REPOSITORY / "image_postprocess" / "config.pbtxt").read_text()
    assert scaled_config_text(postprocess, 64) is None


def test_a_config_that_asks_but_is_not_in_the_generators_form_is_refused_with_the_fix() -> None:
    text = (REPOSITORY / "image_preprocess" / "config.pbtxt").read_text()
    hand_written = text.replace("count: 2\n  kind: KIND_CPU", "kind: KIND_CPU\n  count: 2")
    with pytest.raises(ValueError, match=r"host_cores_reserved.*0 instance_group.*export --configs-only"):
        scaled_config_text(hand_written, 16)


def _cgroup(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"cpu.max": "300000 100000\n"}, 3),  # cgroup v2: --cpus 3 / a pod's limit of 3
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 cores: rounded up
        ({"cpu.max": "max 100000\n"}, None),  # no limit
        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2),  # cgroup v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no limit
        ({}, None),  # no cgroup files
    ],
)
def test_the_cores_are_the_affinity_capped_by_the_cgroup_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str], limit: int | None
) -> None:
    monkeypatch.setattr(host_instances.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert usable_cores(_cgroup(tmp_path, files)) == (16 if limit is None else limit)


def test_the_servers_repository_is_a_copy_with_only_the_scaled_configs_rewritten(tmp_path: Path) -> None:
    source = tmp_path / "models"
    for model in ("image_preprocess", "image_postprocess"):
        (source / model / "1").mkdir(parents=True)
        (source / model / "config.pbtxt").write_text((REPOSITORY / model / "config.pbtxt").read_text())
        (source / model / "1" / "model.py").write_text("# the model\n")
    target = tmp_path / "served"
    counts = scaled_repository(source, target, cores=16)
    assert counts == {"image_preprocess": 14}
    assert _count((target / "image_preprocess" / "config.pbtxt").read_text()) == 14
    assert not (target / "image_preprocess" / "config.pbtxt").is_symlink()
    # Everything else is the mounted repository itself, linked: no model file is copied.
    assert (target / "image_postprocess" / "config.pbtxt").resolve() == (
        source / "image_postprocess" / "config.pbtxt"
    ).resolve()
    assert (target / "image_preprocess" / "1").resolve() == (source / "image_preprocess" / "1").resolve()
    assert _count((source / "image_preprocess" / "config.pbtxt").read_text()) == 2  # the source is untouched


@pytest.mark.parametrize(
    "command",
    [
        ["tritonserver", "--model-repository=/models", "--exit-on-error=false"],
        ["tritonserver", "--model-repository", "/models", "--exit-on-error=false"],
        ["tritonserver", "--model-store=/models", "--exit-on-error=false"],
    ],
)
def test_the_server_command_is_pointed_at_the_copy(command: list[str]) -> None:
    replaced, named = with_repository(command, Path("/tmp/x/models"))
    assert named == Path("/models")
    assert "/models" not in " ".join(replaced).replace("/tmp/x/models", "")
    assert replaced[0] == "tritonserver" and replaced[-1] == "--exit-on-error=false"
    assert any(arg.endswith("/tmp/x/models") for arg in replaced)


def test_a_command_without_a_repository_is_refused() -> None:
    with pytest.raises(ValueError, match="no --model-repository"):
        with_repository(["tritonserver", "--strict-readiness=false"], Path("/tmp/x"))
    assert host_instances.main([]) == 2


def test_the_local_derivation_on_a_gpu_host_and_the_cpu_copy_share_the_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = load_repository(REPOSITORY)["image_preprocess"]
    monkeypatch.setattr("tritonrepo.derive.usable_cores", lambda: 16)
    on_gpu = derive_local_config(entry, gpu_available=True, intra_op_threads=None)
    assert [g.count for g in on_gpu.instance_group] == [14]
    # Served on a CPU, the classifier needs those cores: the committed count, and the parameter is gone so
    # that no later step applies the rule.
    on_cpu = derive_local_config(entry, gpu_available=False, intra_op_threads=None)
    cpu_copy = cpu_config(entry, cores=16)
    for config in (on_cpu, cpu_copy):
        assert [g.count for g in config.instance_group] == [2]
        assert PARAMETER not in config.parameters
