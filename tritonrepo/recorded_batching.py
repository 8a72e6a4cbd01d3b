"""The dynamic batcher's settings that the export chose from its measured batch-cost curve.

Where a model's description states a latency budget (``dynamic_batching.latency_budget_ms``), the export
records beside each served file's timings (``build/precision/<model>.json``, ``batching``) the preferred
batch sizes and queue delay its curve calls for on the device it was timed for, each with its reason
(description/batching.py). The derivation (tritonrepo/derive.py) writes them into the derived config
with those reasons as comments, unless the value is stated by hand: on a machine without a GPU in the
model's ``local_cpu.pbtxt`` (tritonrepo/cpu_overlay.py), on a GPU host in the description (its
config.pbtxt). Without a record for the device, the config's values stay as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

PREFERRED = "dynamic_batching.preferred_batch_size"
DELAY = "dynamic_batching.max_queue_delay_microseconds"
MAX_BATCH_SIZE = "max_batch_size"


@dataclass(frozen=True, kw_only=True)
class RecordedBatching:
    """The recorded choice for one model on one device, and why each number is what it is."""

    preferred_batch_sizes: tuple[int, ...]
    max_queue_delay_us: int
    reasons: dict[str, str]  # preferred_batch_sizes, max_queue_delay_us, max_batch_size -> why
    latency_budget_ms: float
    variant: str


@dataclass(frozen=True, kw_only=True)
class HandStated:
    """Where each of the batcher's values was stated by hand ("" where it was not)."""

    preferred: str = ""
    delay: str = ""


def read_recorded(model: str, records: Path, *, device: str) -> RecordedBatching | None:
    """The choice recorded for ``model`` under ``records`` for ``device`` ("cpu" or "cuda"), or None: no
    record, no budget in its description, no curve, or a curve timed for another device."""
    path = Path(records) / f"{model}.json"
    if not path.is_file():
        return None
    batching = json.loads(path.read_text(encoding="utf-8")).get("batching")
    if not batching or batching.get("device") != device:
        return None
    return RecordedBatching(
        preferred_batch_sizes=tuple(int(size) for size in batching["preferred_batch_sizes"]),
        max_queue_delay_us=int(batching["max_queue_delay_us"]),
        reasons=dict(batching["reasons"]),
        latency_budget_ms=float(batching["latency_budget_ms"]),
        variant=str(batching["variant"]),
    )


def apply_recorded(config: ModelConfig, recorded: RecordedBatching, hand: HandStated) -> dict[str, str]:
    """Set in ``config`` (in place) each recorded value not stated by hand; the comment for each of the
    batcher's numbers, keyed by its field's path in the config (:data:`PREFERRED`, :data:`DELAY`,
    :data:`MAX_BATCH_SIZE`)."""
    origin = f"the {recorded.variant} curve, budget {recorded.latency_budget_ms:g} ms"
    reasons = recorded.reasons
    preferred = [size for size in recorded.preferred_batch_sizes if size <= config.max_batch_size]
    comments = {}
    if hand.preferred or not preferred:
        stated = hand.preferred or "the config, since none recorded fits its max_batch_size"
        comments[PREFERRED] = (
            f"preferred_batch_size: stated by hand in {stated}; {origin} would choose "
            f"{list(recorded.preferred_batch_sizes)} ({reasons['preferred_batch_sizes']})"
        )
    else:
        del config.dynamic_batching.preferred_batch_size[:]
        config.dynamic_batching.preferred_batch_size.extend(preferred)
        comments[PREFERRED] = (
            f"preferred_batch_size {preferred} from {origin}: {reasons['preferred_batch_sizes']}"
        )
    if hand.delay:
        comments[DELAY] = (
            f"max_queue_delay_microseconds: stated by hand in {hand.delay}; {origin} would choose "
            f"{recorded.max_queue_delay_us} ({reasons['max_queue_delay_us']})"
        )
    else:
        config.dynamic_batching.max_queue_delay_microseconds = recorded.max_queue_delay_us
        comments[DELAY] = (
            f"max_queue_delay_microseconds {recorded.max_queue_delay_us} from {origin}: "
            f"{reasons['max_queue_delay_us']}"
        )
    comments[MAX_BATCH_SIZE] = f"max_batch_size {config.max_batch_size}: {reasons['max_batch_size']}"
    return comments
