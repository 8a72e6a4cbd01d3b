"""Correctness gates a reduced-precision variant must pass before it may be served.

Each gate compares a variant's outputs with eager float32 PyTorch on the same real inputs and returns
every number it computed, the thresholds, and which of them failed. A variant that fails is reported with
those numbers and never served (see :mod:`export.precision.selection`).

- Text (sentence embeddings): mean and minimum cosine to fp32, and retrieval agreement: for each sentence,
  the share of its ``k`` nearest fp32 neighbours in the corpus that are still among its ``k`` nearest
  with the variant's embeddings, averaged over the corpus. And batch invariance: a sentence embedded in a
  batch of others must get the embedding it gets alone (a variant whose numbers depend on its batch
  neighbours, such as int8 with activation ranges computed per batch, would make a request's answer
  depend on the traffic around it).
- Images (class logits): top-1 agreement and mean top-5 overlap with fp32.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

TEXT_MIN_MEAN_COSINE = 0.995
TEXT_MIN_COSINE = 0.99
TEXT_MIN_NEIGHBOUR_RECALL = 0.95
TEXT_NEIGHBOURS = 5
# Measured on the corpus, batched vs alone: fp32 1 - 1e-6, bf16 1 - 3e-5 (rounding in kernels blocked by
# batch size), dynamic int8 0.99 and below (activation ranges taken per batch): the line between them.
TEXT_MIN_BATCHED_VS_ALONE_COSINE = 0.9999
IMAGE_MIN_TOP1_AGREEMENT = 0.99
IMAGE_MIN_TOP5_OVERLAP = 0.95
IMAGE_TOP_K = 5


@dataclass(frozen=True, kw_only=True)
class GateResult:
    """A gate's measurements, its thresholds (each metric must be >= its threshold) and the verdict."""

    gate: str
    samples: int
    metrics: dict[str, float]
    thresholds: dict[str, float]
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        missing = sorted(set(self.thresholds) - set(self.metrics))
        if missing:
            raise ValueError(f"gate {self.gate!r}: thresholds {missing} have no measured metric")

    @property
    def passed(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        numbers = ", ".join(f"{name} {value:.5f}" for name, value in self.metrics.items())
        verdict = "pass" if self.passed else "FAIL: " + "; ".join(self.failures)
        return f"{numbers} ({self.samples} inputs) -> {verdict}"

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def _judge(
    gate: str,
    samples: int,
    metrics: dict[str, float],
    thresholds: dict[str, float],
    minimums: Mapping[str, float] | None = None,
) -> GateResult:
    """Each metric against its threshold; ``minimums`` (a model description's ``gates``) replaces some."""
    unknown = sorted(set(minimums or {}) - set(thresholds))
    if unknown:
        raise ValueError(f"{gate} gate: unknown thresholds {unknown}; the gate has {sorted(thresholds)}")
    thresholds = thresholds | dict(minimums or {})
    failures = [
        f"{name} {metrics[name]:.5f} < {minimum}"
        for name, minimum in thresholds.items()
        if not metrics[name] >= minimum  # NaN fails
    ]
    return GateResult(gate=gate, samples=samples, metrics=metrics, thresholds=thresholds, failures=failures)


def _check_pair(reference: np.ndarray, candidate: np.ndarray, what: str) -> None:
    if reference.ndim != 2 or reference.shape != candidate.shape:
        raise ValueError(
            f"{what}: reference and candidate must be 2-D arrays of one shape, "
            f"got {reference.shape} and {candidate.shape}"
        )


def _unit_rows(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)


def nearest_neighbours(embeddings: np.ndarray, k: int) -> np.ndarray:
    """Indices [N, k] of each row's k most cosine-similar other rows (itself excluded), best first."""
    if not 0 < k < len(embeddings):
        raise ValueError(f"k must be in 1..{len(embeddings) - 1} for {len(embeddings)} rows, got {k}")
    unit = _unit_rows(embeddings)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, the share of ``a``'s entries that also appear in ``b``'s row ([N, k] index arrays)."""
    return np.array([len(set(x) & set(y)) / len(x) for x, y in zip(a.tolist(), b.tolist(), strict=True)])


def text_gate(
    reference: np.ndarray,
    candidate: np.ndarray,
    *,
    alone: np.ndarray | None = None,
    k: int = TEXT_NEIGHBOURS,
    minimums: Mapping[str, float] | None = None,
) -> GateResult:
    """Gate sentence embeddings [N, H] of a variant (computed in batches) against the fp32 ones of the same
    sentences; ``alone``: the variant's embeddings of the same sentences, one sentence per batch."""
    _check_pair(reference, candidate, "text gate")
    cosines = (_unit_rows(reference) * _unit_rows(candidate)).sum(axis=1)
    recall = overlap(nearest_neighbours(reference, k), nearest_neighbours(candidate, k))
    metrics = {
        "mean_cosine": float(cosines.mean()),
        "min_cosine": float(cosines.min()),
        f"neighbour_recall_at_{k}": float(recall.mean()),
        f"min_neighbour_recall_at_{k}": float(recall.min()),
    }
    thresholds = {
        "mean_cosine": TEXT_MIN_MEAN_COSINE,
        "min_cosine": TEXT_MIN_COSINE,
        f"neighbour_recall_at_{k}": TEXT_MIN_NEIGHBOUR_RECALL,
    }
    if alone is not None:
        _check_pair(candidate, alone, "text gate (batched vs alone)")
        metrics["min_cosine_batched_vs_alone"] = float(
            (_unit_rows(candidate) * _unit_rows(alone)).sum(1).min()
        )
        thresholds["min_cosine_batched_vs_alone"] = TEXT_MIN_BATCHED_VS_ALONE_COSINE
    return _judge("text", len(reference), metrics, thresholds, minimums)


def top_k(logits: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-logits, axis=1, kind="stable")[:, :k]


def image_gate(
    reference: np.ndarray,
    candidate: np.ndarray,
    *,
    k: int = IMAGE_TOP_K,
    minimums: Mapping[str, float] | None = None,
) -> GateResult:
    """Gate class logits [N, C] of a variant against the fp32 logits of the same images. A classifier of
    fewer than ``k`` classes is gated on the overlap of all of them (``top{C}_overlap``)."""
    _check_pair(reference, candidate, "image gate")
    k = min(k, reference.shape[1])
    expected, actual = top_k(reference, k), top_k(candidate, k)
    metrics = {
        "top1_agreement": float(np.mean(expected[:, 0] == actual[:, 0])),
        f"top{k}_overlap": float(overlap(expected, actual).mean()),
        "max_abs_logit_diff": float(np.max(np.abs(reference - candidate))),
    }
    thresholds = {"top1_agreement": IMAGE_MIN_TOP1_AGREEMENT, f"top{k}_overlap": IMAGE_MIN_TOP5_OVERLAP}
    return _judge("image", len(reference), metrics, thresholds, minimums)
