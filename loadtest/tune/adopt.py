"""Write a winner where the derivation of the local repository reads it.

The winner's CPU-side settings become ``model_repository/<model>/local_cpu.pbtxt``
(tritonrepo/cpu_overlay.py); config.pbtxt, the deployable GPU configuration, is not touched. A model
whose shipped configuration won keeps whatever it has now (that is what was measured as shipped).
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from loadtest.tune.results import Measurement, ModelOutcome
from tritonrepo import cpu_overlay
from tritonrepo.configs import load_model_config


def overlay_for(winner: Measurement) -> ModelConfig:
    """The partial configuration that reproduces ``winner``'s settings in the derived repository."""
    overlay = ModelConfig()
    overlay.instance_group.add(kind=ModelInstanceGroup.KIND_CPU, count=winner.settings.instances)
    overlay.dynamic_batching.max_queue_delay_microseconds = winner.settings.max_queue_delay_us
    overlay.dynamic_batching.preferred_batch_size.extend(winner.settings.preferred_batch_sizes)
    return overlay


def check_fits(winner: Measurement, max_batch_size: int) -> None:
    """Refuse a winner preferring a batch size above the model's ``max_batch_size``: Triton refuses to
    load such a configuration, so the derived repository would no longer serve the model."""
    too_large = [size for size in winner.settings.preferred_batch_sizes if size > max_batch_size]
    if too_large:
        raise ValueError(
            f"{winner.model}: the winner {winner.variant} prefers batch sizes {too_large}, above the "
            f"model's max_batch_size {max_batch_size}, which Triton refuses to load; nothing was adopted. "
            "Tune with a sweep whose preferred sizes fit (--sweep), or raise the model's max_batch_size"
        )


def adopt(results: list[ModelOutcome], source: Path, *, command: str, latency_budget_ms: float) -> list[Path]:
    """Write an overlay for every model whose winner is not its shipped configuration; write none when
    one of them would not load (:func:`check_fits`)."""
    winners = [(o.model, o.winner) for o in results if o.winner is not None and not o.winner.shipped]
    for model, winner in winners:
        check_fits(winner, load_model_config(Path(source) / model).max_batch_size)
    written = []
    for model, winner in winners:
        # The measurements stay in the tuning's report; the config says what chose it and why.
        note = (
            f"Chosen by `{command}`: the most throughput within a p99 of {latency_budget_ms:g} ms "
            "(the tuning's report.md holds the measurements)."
        )
        folder = Path(source) / model
        written.append(cpu_overlay.write_overlay(folder, overlay_for(winner), note=note))
    return written
