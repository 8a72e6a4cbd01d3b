"""The GPU host's documentation promises what the deploy flow builds, in the order a person runs it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "deploy.md").read_text()
STEPS = (
    "Check that containers see the GPU",
    "Write the secrets",
    "Build the images",
    "Export on this GPU",
    "Start the stack",
    "Check that it serves",
    "Put load on it",
    "Measure batching on this GPU",
    "Stop",
)
ENV_FILES = "--env-file deploy/versions.env --env-file deploy/secrets.env"


def _paragraph_of(text: str, needle: str) -> str:
    start = text.index(needle)
    end = text.find("\n\n", start)
    return text[text.rfind("\n\n", 0, start) : end]


def _step(number: int) -> str:
    """The text of a numbered step of section 2, its commands included."""
    section = GUIDE[GUIDE.index("## 2. docker compose on a GPU host") :]
    start = section.index(f"\n{number}. **")
    end = section.find(f"\n{number + 1}. **", start)
    return section[start : end if end != -1 else section.index("\n\n", start)]


def _commands(text: str) -> list[str]:
    """The lines of the sh blocks in ``text``."""
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_guide_brings_a_gpu_host_up_in_the_order_a_person_runs_it() -> None:
    for number, step in enumerate(STEPS, start=1):
        assert _step(number).startswith(f"\n{number}. **{step}**"), f"step {number} is not {step!r}"
    assert _commands(_step(4)) == [f"docker compose {ENV_FILES} run --rm export"]
    assert _commands(_step(8)) == [f"docker compose {ENV_FILES} run --rm bench-gpu"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["export"]["deploy"]["resources"]["reservations"]["devices"], "it needs the GPU"


def test_every_compose_command_of_the_docs_reads_the_versions_and_the_secrets() -> None:
    """Compose reads every required variable of the file on every command, build and export included:
    a command without the secrets fails with 'required variable TRITON_ADMIN_KEY is missing a value'."""
    assert len([c for c in _commands(GUIDE) if c.startswith("docker compose")]) >= 8
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        commands = [c for c in _commands(text) if c.startswith("docker compose")]
        inline = [" ".join(c.split()) for c in re.findall(r"`(docker compose [^`]*)`", text)]
        for command in commands + [c for c in inline if "..." not in c and c != "docker compose version"]:
            assert command.startswith(f"docker compose {ENV_FILES} "), f"{path.name}: {command}"


def test_the_guides_stop_names_every_profile_so_no_container_is_left() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    profiles = {name for service in compose["services"].values() for name in service.get("profiles", [])}
    (down,) = _commands(_step(9))
    named = set(re.findall(r"--profile (\S+)", down))
    assert named == profiles, f"`down` leaves the containers of {sorted(profiles - named)} running"
    assert down.endswith(" down")


def test_the_secrets_step_writes_every_variable_compose_requires_beyond_the_versions() -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    required = set(re.findall(r"\$\{(\w+):\?", compose))
    versions = (ROOT / "deploy" / "versions.env").read_text()
    pinned = set(re.findall(r"^(\w+)=", versions, re.M))
    (write,) = _commands(_step(2))
    written = set(re.findall(r"([A-Z][A-Z_]+)=%s", write))
    assert written == required - pinned, "compose would stop on the variables the step does not write"
    assert write.startswith("test -f deploy/secrets.env ||"), "a second run keeps the secrets in use"
    assert "umask 077" in write


def test_the_guide_never_exports_for_the_cpu_into_a_gpu_deployment_nor_bakes_files_into_an_image() -> None:
    assert "--served-on here" not in GUIDE
    for match in re.finditer(r"--served-on cpu", GUIDE):
        assert "Without a GPU" in GUIDE[max(0, match.start() - 400) : match.start()], "only the CPU override"
    for match in re.finditer(r"python -m export\b[^`\n]*", GUIDE):
        if GUIDE.startswith("` writes files", match.end()):  # what the export does, not a command to run
            continue
        assert "--served-on gpu" in match[0] or "text_warmup" in match[0], match[0]
    assert not re.search(r"\bbak(e|ed|ing)\b[^.]{0,60}\b(export|repository)", GUIDE, re.I)


def test_the_guide_says_what_a_gpu_host_serves_on_each_device() -> None:
    served = _paragraph_of(GUIDE, "What a GPU host serves:")
    served += GUIDE[GUIDE.index("What a GPU host serves:") :][:2000]
    for model in ("minilm_onnx", "efficientnet_lite0_onnx", "minilm_torchscript", "text_tokenizer"):
        assert f"`{model}`" in served
    assert "never int8" in served and "compute capability 8.0" in served


@pytest.mark.parametrize(
    "option,reason",
    [
        ("TensorRT provider with an engine cache", "engine per input-shape profile"),
        ("Pinned memory", "pinned pool"),
        ("DALI for image decoding", "nvJPEG"),
        ("CUDA graphs", "do not fit ragged batches"),
    ],
)
def test_the_guide_names_each_gpu_option_not_used_yet_and_why(option: str, reason: str) -> None:
    section = GUIDE[GUIDE.index("### GPU options this repository does not use yet") :]
    section = section[: section.index("\n## ")]
    assert option in section and reason in section


def test_configs_and_readme_promise_a_gpu_precision_only_as_gated_on_the_serving_gpu() -> None:
    sources = [*sorted((ROOT / "model_repository").glob("*/config.pbtxt")), ROOT / "README.md"]
    for path in sources:
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            if re.search(r"\b(fp16|bf16)\b", line) and re.search(r"on (a|the) GPU", line):
                window = " ".join(lines[max(0, index - 2) : index + 3])
                assert "gate" in window, f"{path.name}:{index + 1} promises a GPU precision: {line.strip()}"
