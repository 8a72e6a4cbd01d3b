"""An output on an axis that varies from one check batch to the next is compared batch by batch: the
largest difference and the lowest cosine over every batch, the share of agreeing rows over every row."""

from __future__ import annotations

import numpy as np

from description.module_spec import OutputDecl
from export.torch_module.checks import measure_all


def _output(name: str, dims: tuple[int, ...], metric: str) -> OutputDecl:
    return OutputDecl(
        name=name, datatype="FP32", dims=dims, metric=metric, tolerance=0.5, variant_tolerance=0.5
    )


def test_outputs_whose_variable_axis_differs_between_batches_are_measured_over_every_batch() -> None:
    outputs = (
        _output("SCORES", (-1,), "max_abs_diff"),
        _output("EMBEDDING", (-1,), "cosine"),
        _output("LOGITS", (3,), "top1_agreement"),
    )
    short, long = np.ones((2, 3), np.float32), np.ones((6, 7), np.float32)
    logits_2, logits_6 = np.eye(3, dtype=np.float32)[[0, 1]], np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1, 2]]
    reference = [(short, short, logits_2), (long, long, logits_6)]
    moved = long.copy()
    moved[4, 5] += 0.25  # one value of the longer batch, in the scores and in one embedding row
    flipped = logits_6.copy()
    flipped[5] = np.eye(3)[0]  # one row of six disagrees
    candidate = [(short, short, logits_2), (moved, moved, flipped)]
    measured = measure_all(outputs, reference, candidate)
    assert measured["SCORES"] == 0.25
    expected_cosine = float((moved[4] @ long[4]) / (np.linalg.norm(moved[4]) * np.linalg.norm(long[4])))
    assert np.isclose(measured["EMBEDDING"], expected_cosine) and measured["EMBEDDING"] < 1
    assert measured["LOGITS"] == 7 / 8  # rows, not batches: 2 of 2 and 5 of 6 agree
