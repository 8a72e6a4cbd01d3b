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
    "Build the images",
    "Export on this GPU",
    "Start the stack",
)


def _paragraph_of(text: str, needle: str) -> str:
    start = text.index(needle)
    end = text.find("\n\n", start)
    return text[text.rfind("\n\n", 0, start) : end]


def test_the_guide_brings_a_gpu_host_up_in_the_order_a_person_runs_it() -> None:
    positions = [GUIDE.index(f"**{step}**") for step in STEPS]
    assert positions == sorted(positions)
    export_step = _paragraph_of(GUIDE, "**Export on this GPU**")
    assert "docker compose --env-file deploy/versions.env run --rm export" in export_step
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["export"]["deploy"]["resources"]["reservations"]["devices"], "it needs the GPU"


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
