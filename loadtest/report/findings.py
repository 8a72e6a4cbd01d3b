"""From results.json to the verdicts: targets met or missed, and the published claims beside this run.

Targets, each a ratio inside one run where it can be: the text ensemble at concurrency 32 at least 2x
the unoptimised configuration (the `ragged` experiment), with a p99 of at most 250 ms; at concurrency 1 a
median of at most 10 ms; dynamic batching on vs off at least 2x with encoder batches of 8 or more (the
`batching` experiment); served throughput at least 85% of the in-process figure of the served file (the
`ragged` experiment's in-process rounds, between its served ones, where the run has them; else the
`inprocess` experiment); the image classifier at least 1.3x its unoptimised configuration (the `ragged`
experiment), serving a file that passed its gate. Against the simplest alternative (the `minimal`
experiment), each held to the faster of its deployments (one process, one worker process per core) at
each concurrency: the text ensemble at least 1.0x at 1 in flight and 1.4x at 32, the image classifier at
least 1.0x at 1, 8 and 32; the tabular model's ratios are reported, with no target. The measured causes of
where the run stands are :mod:`loadtest.report.causes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadtest.experiments.registry import TARGET_CONCURRENCY
from loadtest.report.figures import (
    IMAGE_MODEL,
    against_unoptimised,
    arm_summary,
    batching_arms,
    inprocess_reference,
    rate,
    shipped_arm,
)
from loadtest.report.records import ArmSummary, inprocess_arm
from loadtest.report.rounds import (
    MinimalComparison,
    best_alternative,
    central_comparison,
    client_comparison,
    down,
    minimal_comparisons,
    number_text,
    ratio_text,
    share_text,
    times_text,
    up,
)

TARGET_GAIN = 2.0  # over the unoptimised configuration, batching on vs off
TARGET_P99_MS = 250.0
TARGET_LONE_P50_MS = 10.0
TARGET_BATCH = 8.0
TARGET_INPROCESS_SHARE = 0.85
TARGET_IMAGE_GAIN = 1.3
# Triton against the faster deployment of the simplest alternative: (service, concurrency) -> at least.
ALTERNATIVE_TARGETS = {
    ("text", 1): 1.0,
    ("text", 32): 1.4,
    ("image", 1): 1.0,
    ("image", 8): 1.0,
    ("image", 32): 1.0,
}
REPORTED_SERVICES = ("tabular",)  # against the simplest alternative, ratios reported with no target
PUBLISHED = {  # the claims the report sets its measurements beside: claim -> published figure (source)
    "dynamic batching vs one request per call": "~2.5x (BERT, ab -n 1000 -c 32)",
    "batching gain": "+26.5% (TorchServe, ResNet-152)",
    "central server vs per-job model loading": ">2x (TorchServe, 1,000 images, 8 vCPUs)",
    "more workers / instances": "+36% (TorchServe)",
    "overlapped async requests": "+27% (Infery)",
    "cost of batch 32 vs batch 1": "2-3x",
}


@dataclass(kw_only=True)
class Verdict:
    name: str
    required: str
    measured: str
    met: bool | None  # None: not measured in this run, or no target
    target: bool = True  # False: the figure is reported, held to no bound

    @property
    def verdict(self) -> str:
        """What the report's verdict column says."""
        if self.met is not None:
            return "met" if self.met else "**missed**"
        return (
            "reported, no target" if not self.target and self.measured != "not measured" else "not measured"
        )


@dataclass(kw_only=True)
class Claim:
    claim: str
    published: str
    measured: str


def _verdict(name: str, required: str, value: float | None, text: str, met: bool | None) -> Verdict:
    return Verdict(
        name=name, required=required, measured=text if value is not None else "not measured", met=met
    )


def _at_least(value: float | None, bound: float) -> bool | None:
    return None if value is None else value >= bound


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def verdicts(results: dict) -> list[Verdict]:
    (shipped, unoptimised), lone = against_unoptimised(results), shipped_arm(results, 1)
    return [
        _unoptimised_verdict(shipped, unoptimised),
        _at_most_ms("text c=32 p99", TARGET_P99_MS, shipped.p99_ms if shipped else None, 0),
        *(_alternative_verdict(results, "text", c) for c in (1, 32)),
        _at_most_ms("text c=1 median latency", TARGET_LONE_P50_MS, lone.p50_ms if lone else None, 1),
        _batching_verdict(results),
        _share_verdict(results, shipped),
        _image_verdict(results),
        *(_alternative_verdict(results, "image", c) for c in (1, 8, 32)),
        *(_reported_alternative(results, service) for service in REPORTED_SERVICES),
    ]


def _unoptimised_verdict(shipped: ArmSummary | None, unoptimised: ArmSummary | None) -> Verdict:
    gain = _ratio(rate(shipped), rate(unoptimised))
    return _verdict(
        "text c=32 vs the unoptimised configuration",
        f">= {TARGET_GAIN:.0f}x (experiment `ragged`)",
        gain,
        f"{times_text(gain)} ({number_text(rate(shipped), '.1f')} vs "
        f"{number_text(rate(unoptimised), '.1f')} req/s)",
        _at_least(gain, TARGET_GAIN),
    )


def _at_most_ms(name: str, limit_ms: float, value_ms: float | None, digits: int) -> Verdict:
    return _verdict(
        name,
        f"<= {limit_ms:.0f} ms",
        value_ms,
        f"{up(value_ms, digits):.{digits}f} ms",
        None if value_ms is None else value_ms <= limit_ms,
    )


def _alternative_verdict(results: dict, service: str, concurrency: int) -> Verdict:
    """Held to the faster deployment of the alternative at ``concurrency``; the other deployments
    measured are named beside it."""
    bound = ALTERNATIVE_TARGETS[service, concurrency]
    comparisons = minimal_comparisons(results)
    best = best_alternative(comparisons, service, concurrency)
    over_simple = _ratio(best.triton_per_s, best.alternative_per_s) if best else None
    others = [
        f"against {c.alternative}: {times_text(_ratio(c.triton_per_s, c.alternative_per_s))}"
        for c in comparisons
        if (c.service, c.concurrency) == (service, concurrency) and c is not best
    ]
    return _verdict(
        f"{service} c={concurrency} vs the simplest alternative",
        f">= {bound:.1f}x vs its faster deployment, one process or one per core (experiment `minimal`)",
        over_simple,
        (_against(best) if best else "") + "".join(f"; {other}" for other in others),
        _at_least(over_simple, bound),
    )


def _against(c: MinimalComparison) -> str:
    """Triton's ratio over one deployment of the alternative, with both medians and the rounds' range."""
    return (
        f"{times_text(_ratio(c.triton_per_s, c.alternative_per_s))} against {c.alternative} "
        f"({number_text(c.triton_per_s, '.1f')} vs {number_text(c.alternative_per_s, '.1f')} req/s"
        + (f", medians of {c.rounds} rounds; {c.range_text()} by round)" if c.rounds > 1 else ")")
    )


def _reported_alternative(results: dict, service: str) -> Verdict:
    """``service`` against the faster deployment of its alternative at every concurrency measured."""
    comparisons = minimal_comparisons(results)
    concurrencies = sorted({c.concurrency for c in comparisons if c.service == service})
    best = [best_alternative(comparisons, service, c) for c in concurrencies]
    measured = "; ".join(f"c={c.concurrency}: {_against(c)}" for c in best if c is not None)
    return Verdict(
        name=f"{service} vs the simplest alternative",
        required="reported against its faster deployment at each concurrency (experiment `minimal`)",
        measured=measured or "not measured",
        met=None,
        target=False,
    )


def _batching_verdict(results: dict) -> Verdict:
    on, off = batching_arms(results, TARGET_CONCURRENCY)
    on_off = _ratio(rate(on), rate(off))
    batch = on.encoder_batch if on else None
    return _verdict(
        "dynamic batching on vs off, c=32",
        f">= {TARGET_GAIN:.0f}x, encoder batch >= {TARGET_BATCH:.0f}",
        on_off,
        f"{times_text(on_off)}, encoder batch {down(batch, 1):.1f}"
        + (f" (means of {on.runs} alternating rounds)" if on and on.runs > 1 else ""),
        None if on_off is None else on_off >= TARGET_GAIN and (batch or 0) >= TARGET_BATCH,
    )


def _share_verdict(results: dict, shipped: ArmSummary | None) -> Verdict:
    best, where = inprocess_reference(results)
    best_rate = float(best["items_per_s"]) if best else None
    share = _ratio(rate(shipped), best_rate)
    return _verdict(
        "served vs in-process (same file)",
        f">= {TARGET_INPROCESS_SHARE:.0%}",
        share,
        f"{share_text(share)} ({number_text(rate(shipped), '.1f')} of {number_text(best_rate, '.1f')}/s "
        f"at batch {best['batch_size']}, {inprocess_arm(best)}; {where})"
        if best
        else "-)",
        _at_least(share, TARGET_INPROCESS_SHARE),
    )


def _image_verdict(results: dict) -> Verdict:
    image, image_unoptimised = against_unoptimised(results, IMAGE_MODEL)
    image_gain = _ratio(rate(image), rate(image_unoptimised))
    served_precision = results.get("image_precision", "fp32")
    image_text = (
        f"{times_text(image_gain)} ({number_text(rate(image), '.1f')} vs "
        f"{number_text(rate(image_unoptimised), '.1f')} img/s), serving {served_precision}"
        + (": no reduced precision passed its gate" if served_precision == "fp32" else ", gate passed")
    )
    return _verdict(
        "image c=32 vs the unoptimised configuration",
        f">= {TARGET_IMAGE_GAIN}x, served file gated (experiment `ragged`)",
        image_gain,
        image_text,
        _at_least(image_gain, TARGET_IMAGE_GAIN),
    )


def claims(results: dict) -> list[Claim]:
    on, off = batching_arms(results, TARGET_CONCURRENCY)
    batching_ratio = ratio_text(rate(on), rate(off))
    instance_rows = [r for r in arm_summary(results, "instances") if r.concurrency == TARGET_CONCURRENCY]
    instances = {r.arm: r.throughput_per_s for r in instance_rows if r.throughput_per_s is not None}
    instance_runs = min((r.runs for r in instance_rows), default=0)
    one = instances.get("1 instance")
    more = max((v for k, v in instances.items() if k != "1 instance"), default=None)
    central = results.get("central") or {}
    costs = [c for c in results.get("inprocess_batch_costs", [])]
    costs += [c["cost"] for c in results.get("served_batch_costs", [])]
    cost_text = (
        "; ".join(
            f"{c['model']} {c['where']}: {c['ms_batch_32'] / c['ms_batch_1']:.1f}x"
            for c in costs
            if c["ms_batch_1"]
        )
        or "not measured"
    )
    measured = [
        ("dynamic batching vs one request per call", f"{batching_ratio} (text ensemble, c=32)"),
        ("batching gain", f"{batching_ratio} (same measurement)"),
        (
            "central server vs per-job model loading",
            f"{central_comparison(results).text()} ({central.get('images', 0)} images)",
        ),
        (
            "more workers / instances",
            f"{ratio_text(more, one)} (best of 2/4 instances vs 1, c=32"
            + (f", means of {instance_runs} rounds)" if instance_runs > 1 else ")"),
        ),
        ("overlapped async requests", f"{client_comparison(results).text()} (asyncio vs sequential)"),
        ("cost of batch 32 vs batch 1", cost_text),
    ]
    return [Claim(claim=claim, published=PUBLISHED[claim], measured=value) for claim, value in measured]
