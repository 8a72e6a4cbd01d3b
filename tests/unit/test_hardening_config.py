"""Hardening settings that need no server: queue policies, input limits, access flags, stub bookkeeping,"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from tritonlocal.config import ServerConfig
from tritonlocal.health import ModelHealth, expected_stub_instances
from tritonrepo.access import ADMIN_HEADER, RESTRICTED_GRPC_PROTOCOLS, RESTRICTED_HTTP_APIS
from tritonrepo.configs import load_model_config
from tritonrepo.served_code import load_served_module

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "model_repository"
RESTRICTED = ("model-repository", "model-config", "shared-memory", "logging", "trace")


def _config(model: str) -> model_config_pb2.ModelConfig:
    return load_model_config(REPOSITORY / model)


BATCHING_MODELS = sorted(
    p.parent.name
    for p in REPOSITORY.glob("*/config.pbtxt")
    if _config(p.parent.name).HasField("dynamic_batching")
)


@pytest.mark.parametrize("model", BATCHING_MODELS)
def test_every_batching_model_bounds_its_queue_and_rejects_past_it(model: str) -> None:
    policy = _config(model).dynamic_batching.default_queue_policy
    assert 0 < policy.max_queue_size <= 256
    assert 0 < policy.default_timeout_microseconds <= 2_000_000
    assert policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
    assert policy.allow_timeout_override
    text = (REPOSITORY / model / "config.pbtxt").read_text()
    lines = text[: text.index("default_queue_policy {")].splitlines()[:-1]
    above = len(lines) - next(i for i, line in enumerate(reversed(lines)) if not line.strip().startswith("#"))
    comment = "\n".join(lines[above:])  # the comment right above the queue policy
    assert "# Overload" in comment and re.search(r"\d ?(ms|s)\b", comment), f"{model}: explain the numbers"


def test_the_slow_steps_hold_less_than_the_fast_ones() -> None:
    size = {m: _config(m).dynamic_batching.default_queue_policy.max_queue_size for m in BATCHING_MODELS}
    assert size["image_preprocess"] < size["minilm_onnx"] < size["text_tokenizer"]
    assert size["minilm_onnx"] == size["minilm_torchscript"]
    assert size["efficientnet_lite0_onnx"] == size["efficientnet_lite0_torchscript"]


def _load_preprocess_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    name = "_hardening_image_preprocess"
    monkeypatch.delitem(sys.modules, name, raising=False)  # forgets the module after the test
    return load_served_module(REPOSITORY / "image_preprocess" / "1" / "model.py", name=name)


def test_image_limits_come_from_the_config_and_refuse_oversized_bytes_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = _load_preprocess_module(monkeypatch)
    as_json = json.loads(
        json_format.MessageToJson(_config("image_preprocess"), preserving_proto_field_name=True)
    )
    settings = module.PreprocessSettings.from_model_config(as_json)
    assert (settings.max_image_bytes, settings.max_image_pixels) == (16 * 1024 * 1024, 50_000_000)
    with pytest.raises(module.ImageInputError, match="16777219 bytes is over the limit of 16777216"):
        module.decode_and_crop(b"\xff\xd8\xff" + bytes(16 * 1024 * 1024), settings)


def test_the_tokenizer_limits_text_bytes_and_truncates_tokens() -> None:
    parameters = _config("text_tokenizer").parameters
    assert int(parameters["max_text_bytes"].string_value) == 65536
    assert int(parameters["max_length"].string_value) == 256


def test_a_generated_key_is_not_in_the_config_until_start() -> None:
    config = ServerConfig(
        model_repository=Path("r"), generate_admin_key=True, http_port=1, grpc_port=2, metrics_port=3
    )
    assert config.admin_key is None  # the server makes one per start (LocalTritonServer.admin_key)
    keyed = ServerConfig(model_repository=Path("r"), admin_key="k", http_port=1, grpc_port=2, metrics_port=3)
    command = keyed.command(Path("tritonserver"), Path("backends"))
    assert f"--http-restricted-api={','.join(RESTRICTED)}:{ADMIN_HEADER}=k" in command
    assert f"--grpc-restricted-protocol={','.join(RESTRICTED)}:{ADMIN_HEADER}=k" in command
    assert "--model-control-mode=none" in command and "--http-address=127.0.0.1" in command


def _flags(command: list[str]) -> dict[str, str]:
    return dict(arg.split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)


def _deployed_commands() -> dict[str, list[str]]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["tritonserver"]["command"]
    found = {"docker-compose.yml": [str(a) for a in compose]}
    for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            containers = (doc or {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
            for container in containers:
                command = [*container.get("command", []), *container.get("args", [])]
                if any("tritonserver" in str(a) for a in command):
                    found[f"{path.name}:{container['name']}"] = [str(a) for a in command]
    return found


@pytest.mark.parametrize("where", sorted(_deployed_commands()))
def test_every_deployed_server_restricts_the_admin_apis_and_disables_model_control(where: str) -> None:
    flags = _flags(_deployed_commands()[where])
    for flag, apis in (
        ("--http-restricted-api", RESTRICTED_HTTP_APIS),
        ("--grpc-restricted-protocol", RESTRICTED_GRPC_PROTOCOLS),
    ):
        listed, restriction = flags[flag].split(":", 1)
        assert set(listed.split(",")) >= set(RESTRICTED) == set(apis), (where, flag)
        key = restriction.split("=", 1)[1]
        assert restriction.startswith(f"{ADMIN_HEADER}=") and "$" in key, (
            f"{where}: the key must come from a secret"
        )
    assert flags.get("--model-control-mode", "none") == "none", where
    assert "--exit-timeout-secs" in flags, f"{where}: SIGTERM must drain for a bounded time"


def test_expected_stub_instances_follow_tritons_naming(tmp_path: Path) -> None:
    for name, groups in {
        "pre": "instance_group [{ count: 2 kind: KIND_CPU }]",
        "named": 'instance_group [{ name: "g" count: 1 kind: KIND_CPU }]',
        "ens": None,
    }.items():
        (tmp_path / name).mkdir()
        backend = 'platform: "ensemble"' if groups is None else f'backend: "python"\n{groups}'
        (tmp_path / name / "config.pbtxt").write_text(f'name: "{name}"\n{backend}\n')
    assert expected_stub_instances(tmp_path) == {"pre_0_0": "pre", "pre_0_1": "pre", "g_0": "named"}


def test_every_python_backend_model_of_the_repository_is_watched_and_nothing_else() -> None:
    expected = expected_stub_instances(REPOSITORY)
    python_models = {
        p.parent.name for p in REPOSITORY.glob("*/config.pbtxt") if _config(p.parent.name).backend == "python"
    }
    assert set(expected.values()) == python_models >= {"l2_normalize", "image_preprocess", "text_tokenizer"}
    assert expected["l2_normalize_0_0"] == "l2_normalize" and "minilm_onnx_0_0" not in expected


def test_model_health_names_the_dead_instances_and_their_models() -> None:
    health = ModelHealth(
        server_running=True,
        expected={"a_0_0": "a", "a_0_1": "a", "b_0_0": "b"},
        alive={"a_0_0": 10, "b_0_0": 11},
    )
    assert (health.healthy, health.dead_instances, health.dead_models) == (False, ["a_0_1"], ["a"])
    assert "a_0_1" in health.describe()
    assert not ModelHealth(server_running=False, expected={}, alive={}).healthy
