"""The main job, ``python -m demo``, as ``make demo`` runs it, at tiny counts: it serves the image and text
ensembles beside their clones without batching on a real tritonserver of its own, classifies the real
photographs, embeds the sentences and compares the arms."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

REQUESTS, IN_FLIGHT = 12, 4


def test_the_demo_classifies_embeds_and_compares_batching_off_and_on(
    triton_repository: Path, run_python: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    # triton_repository: the exported files are there and up to date.
    args = ("--requests", str(REQUESTS), "--in-flight", str(IN_FLIGHT), "--rounds", "2")
    printed = run_python("-m", "demo", *args, timeout_s=600).stdout
    # It exports what its two ensembles serve (here up to date: make test exported them) and nothing else.
    exported = re.findall(r"^  (\w+): up to date \(", printed, re.M)
    assert sorted(exported) == ["efficientnet_lite0_onnx", "minilm_onnx", "text_tokenizer"], printed
    assert re.search(
        r"^tritonserver 2\.51 ready on http://127\.0\.0\.1:\d+ and grpc 127\.0\.0\.1:\d+$", printed, re.M
    )
    assert re.search(r"^  coffee\.png +espresso 0\.\d\d", printed, re.M), printed
    assert re.search(r"^  chelsea\.png +(tiger cat|tabby|Egyptian cat) ", printed, re.M), printed
    similarities = [float(x) for x in re.findall(r"^  cos\(.*\) = (-?\d\.\d{3})$", printed, re.M)]
    assert len(similarities) == 3 and similarities[0] > similarities[1], (
        printed
    )  # cat~kitten over cat~revenue
    for ensemble in ("image_classifier", "text_embedder"):
        section = printed.split(f"\n{ensemble} (", 1)[1].split("\n\n", 1)[0]
        rows = dict(re.findall(r"^  (.+?) +\d+\.\d +(\d+\.\d\d)$", section, re.M))
        assert list(rows) == [
            "one request at a time",
            f"{IN_FLIGHT} in flight, batching off",
            f"{IN_FLIGHT} in flight, batching on",
        ], section
        # The clone without dynamic batching runs every request alone; the statistics say so.
        assert float(rows[f"{IN_FLIGHT} in flight, batching off"]) == 1.0, section
        assert f"{REQUESTS} requests)" in section and "(in 2 alternating rounds)" in section, section
