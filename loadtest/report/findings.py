"""From results.json to the verdicts: targets met or missed (with measured causes) and published claims.

Targets, each a ratio inside one run where it can be: the text ensemble at concurrency 32 at least 2x
the previous configuration (the `ragged` experiment) and 2x the simplest alternative deployed as a user
would, one worker process per core (the `minimal` experiment, which also measures it as one process),
with a p99 of at most 250 ms; at concurrency 1 a median of at most 10 ms; dynamic batching on vs off at
least 2x with encoder batches of 8 or more (the `batching` experiment); served throughput at least 85%
of the in-process figure of the served file (the `ragged` experiment's in-process rounds, between its served
ones, where the run has them; else the `inprocess` experiment); the image classifier at least 1.3x its
previous configuration (the `ragged` experiment), serving a file that passed its gate.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from loadtest.experiments.inprocess import ARRIVAL, ONE_LENGTH
from loadtest.experiments.registry import PAD_NODES_FILE_ARM, TARGET_CONCURRENCY
from loadtest.report.cpu import cost_line, cpu_per_item, per_core_line
from loadtest.report.records import ArmSummary, ModelStats, ServedRun, inprocess_arm, served_runs
from loadtest.report.rounds import (
    central_comparison,
    client_comparison,
    deployed_alternative,
    down,
    minimal_comparisons,
    ratio_text,
    share_text,
    times_text,
    up,
)

TEXT_MODEL, IMAGE_MODEL = "text_embedder", "image_classifier"
TEXT_ENCODER = "the encoder"  # plots label the batch of whichever exported encoder the ensemble called
# The arms of the `ragged` experiment whose label starts with this reproduce the old configuration.
BASELINE_ARM_PREFIX = "previous"
TARGET_GAIN = 2.0  # over the previous configuration, over the simplest alternative, batching on vs off
TARGET_P99_MS = 250.0
TARGET_LONE_P50_MS = 10.0
TARGET_BATCH = 8.0
TARGET_INPROCESS_SHARE = 0.85
TARGET_IMAGE_GAIN = 1.3
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
    met: bool | None  # None: not measured in this run


@dataclass(kw_only=True)
class Claim:
    claim: str
    published: str
    measured: str


def point_at(
    points: list[ServedRun], *, model: str, protocol: str, concurrency: int, arm: str | None = None
) -> ServedRun | None:
    for p in points:
        if (
            p.served_model == model
            and p.perf.protocol == protocol
            and p.perf.concurrency == concurrency
            and (arm is None or p.arm == arm)
            and p.measured
        ):
            return p
    return None


def best_inprocess(results: dict, pipeline: str = "text", runtime: str = "onnxruntime") -> dict | None:
    """The fastest in-process point of ``pipeline`` on real traffic: the control with every sentence of one
    length is not traffic the service gets, so it is left out."""
    rows = [
        p
        for p in results.get("inprocess", [])
        if p["pipeline"] == pipeline and p["runtime"] == runtime and p.get("order") != ONE_LENGTH
    ]
    return max(rows, key=lambda p: p["items_per_s"]) if rows else None


def beside_inprocess_cells(results: dict) -> list[dict]:
    """The `ragged` experiment's in-process rounds (the served text file between its served rounds at c=32),
    one row per cell (layout, order, batch size) in the order measured: the cell at its median round, with its
    rounds."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for p in results.get("ragged_inprocess", []):
        cells[(p["layout"], p["order"], p["batch_size"])].append(p)
    return [
        cell[0]
        | {
            "items_per_s": statistics.median(p["items_per_s"] for p in cell),
            "rounds": [p["items_per_s"] for p in cell],
        }
        for cell in cells.values()
    ]


def beside_inprocess(results: dict) -> dict | None:
    """The fastest of :func:`beside_inprocess_cells`."""
    return max(beside_inprocess_cells(results), key=lambda p: p["items_per_s"], default=None)


def inprocess_reference(results: dict, pipeline: str = "text") -> tuple[dict | None, str]:
    """The in-process figure served throughput is held to, and where it was measured: for text, the
    `ragged` experiment's rounds between the served ones where the run has them; else the best of the
    `inprocess` experiment."""
    beside = beside_inprocess(results) if pipeline == "text" else None
    if beside:
        rounds = len(beside["rounds"])
        return beside, f"experiment `ragged`, median of {rounds} rounds between the served ones"
    runtime = results.get("text_runtime", "onnxruntime") if pipeline == "text" else "onnxruntime"
    return best_inprocess(results, pipeline=pipeline, runtime=runtime), "experiment `inprocess`"


def _verdict(name: str, required: str, value: float | None, text: str, met: bool | None) -> Verdict:
    return Verdict(
        name=name, required=required, measured=text if value is not None else "not measured", met=met
    )


def _at_least(value: float | None, bound: float) -> bool | None:
    return None if value is None else value >= bound


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def _rate(row: ArmSummary | None) -> float | None:
    return row.throughput_per_s if row else None


def verdicts(results: dict) -> list[Verdict]:
    (shipped, previous), lone = against_previous(results), shipped_arm(results, 1)
    return [
        _previous_verdict(shipped, previous),
        _at_most_ms("text c=32 p99", TARGET_P99_MS, shipped.p99_ms if shipped else None, 0),
        _alternative_verdict(results),
        _at_most_ms("text c=1 median latency", TARGET_LONE_P50_MS, lone.p50_ms if lone else None, 1),
        _batching_verdict(results),
        _share_verdict(results, shipped),
        _image_verdict(results),
    ]


def _previous_verdict(shipped: ArmSummary | None, previous: ArmSummary | None) -> Verdict:
    gain = _ratio(_rate(shipped), _rate(previous))
    return _verdict(
        "text c=32 vs the previous configuration",
        f">= {TARGET_GAIN:.0f}x (experiment `ragged`)",
        gain,
        f"{times_text(gain)} ({_number(_rate(shipped), '.1f')} vs {_number(_rate(previous), '.1f')} req/s)",
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


def _alternative_verdict(results: dict) -> Verdict:
    """Held to the alternative as a user would deploy it (one worker process per core); every other
    deployment measured is named beside it."""
    comparisons = minimal_comparisons(results)
    deployed = deployed_alternative(comparisons, TARGET_CONCURRENCY)
    triton, simple = (deployed.triton_per_s, deployed.alternative_per_s) if deployed else (None, None)
    over_simple = _ratio(triton, simple)
    others = [
        f"against {c.alternative}: {times_text(_ratio(c.triton_per_s, c.alternative_per_s))}"
        for c in comparisons
        if c.concurrency == TARGET_CONCURRENCY and c is not deployed
    ]
    return _verdict(
        "text c=32 vs the simplest alternative",
        f">= {TARGET_GAIN:.0f}x vs one worker process per core (experiment `minimal`)",
        over_simple,
        f"{times_text(over_simple)} against {deployed.alternative if deployed else '-'} "
        f"({_number(triton, '.1f')} vs {_number(simple, '.1f')} req/s"
        + (
            f", medians of {deployed.rounds} rounds; {deployed.range_text()} by round)"
            if deployed and deployed.rounds > 1
            else ")"
        )
        + "".join(f"; {other}" for other in others),
        _at_least(over_simple, TARGET_GAIN),
    )


def _batching_verdict(results: dict) -> Verdict:
    on, off = batching_arms(results, TARGET_CONCURRENCY)
    on_off = _ratio(_rate(on), _rate(off))
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
    share = _ratio(_rate(shipped), best_rate)
    return _verdict(
        "served vs in-process (same file)",
        f">= {TARGET_INPROCESS_SHARE:.0%}",
        share,
        f"{share_text(share)} ({_number(_rate(shipped), '.1f')} of {_number(best_rate, '.1f')}/s "
        f"at batch {best['batch_size']}, {inprocess_arm(best)}; {where})"
        if best
        else "-)",
        _at_least(share, TARGET_INPROCESS_SHARE),
    )


def _image_verdict(results: dict) -> Verdict:
    image, image_previous = against_previous(results, IMAGE_MODEL)
    image_gain = _ratio(_rate(image), _rate(image_previous))
    served_precision = results.get("image_precision", "fp32")
    image_text = (
        f"{times_text(image_gain)} ({_number(_rate(image), '.1f')} vs "
        f"{_number(_rate(image_previous), '.1f')} img/s), serving {served_precision}"
        + (": no reduced precision passed its gate" if served_precision == "fp32" else ", gate passed")
    )
    return _verdict(
        "image c=32 vs the previous configuration",
        f">= {TARGET_IMAGE_GAIN}x, served file gated (experiment `ragged`)",
        image_gain,
        image_text,
        _at_least(image_gain, TARGET_IMAGE_GAIN),
    )


def target_point(results: dict) -> ServedRun | None:
    """The text ensemble at concurrency 32: gRPC from the `batching` experiment or the sweep, else HTTP."""
    served = served_runs(results, "batching") + served_runs(results, "sweeps")
    for protocol in ("grpc", "http"):
        found = point_at(served, model=TEXT_MODEL, protocol=protocol, concurrency=TARGET_CONCURRENCY)
        if found:
            return found
    return None


def causes(results: dict) -> list[str]:
    """Measured reasons the text ensemble is where it is: compute saturation, queueing, batch sizes, load."""
    point = target_point(results)
    if point is None:
        return []
    cores = results.get("machine", {}).get("logical_cores") or 1
    lines = _cpu_causes(results, point, cores)
    encoder = _encoder_line(point)
    if encoder:
        lines.append(encoder)
    for name, stats in sorted(point.server.items()):
        if stats.executions and name != point.served_model:
            lines.append(
                f"{name}: queue {stats.queue_us / 1000:.1f} ms vs compute "
                f"{stats.compute_infer_us / 1000:.1f} ms per request, average batch "
                f"{stats.average_batch_size:.1f}."
            )
    lines.extend(line for line in (ragged_line(results), batching_ceiling_line(results)) if line)
    start, end = results.get("load_average_start"), results.get("load_average_end")
    if start and end and start[0] > 0.5 * cores:  # at the end it includes the benchmark's own load
        lines.append(
            f"Background load: the 1-minute load average was {start[0]} before the run on {cores} cores "
            f"({end[0]} at the end, this run included), so other processes shared the CPU."
        )
    return lines


def _cpu_causes(results: dict, point: ServedRun, cores: int) -> list[str]:
    """Where the CPU went at the target concurrency, text and image; a whole-server figure for a record
    from before the per-process figures."""
    on_runs = [
        run
        for run in served_runs(results, "batching")
        if run.arm == "batching on"
        and run.perf.concurrency == TARGET_CONCURRENCY
        and run.model in ("", TEXT_MODEL)
    ]
    lines = _cpu_lines(results, on_runs, cores, f"text c={TARGET_CONCURRENCY}, batching on", "text", "req/s")
    image_runs = [
        run
        for run in served_runs(results, "ragged")
        if run.served_model == IMAGE_MODEL and run.perf.concurrency == TARGET_CONCURRENCY
    ]
    lines.extend(_cpu_lines(results, image_runs, cores, f"image c={TARGET_CONCURRENCY}", "image", "img/s"))
    used = point.server_cpu_cores
    if used is not None and not lines:
        load = max((results.get(k) or [0.0])[0] for k in ("load_average_start", "load_average_end"))
        verdict = "."
        if used / cores > 0.85:
            verdict = ": the CPU is saturated."
        elif load > cores:
            verdict = ": the rest of the CPU went to other processes (see the load average below)."
        lines.append(
            f"CPU: the server and its Python-backend stubs used {used:.2f} of {cores} cores during the run "
            f"({used / cores:.0%}){verdict}"
        )
    return lines


def _encoder_line(point: ServedRun) -> str | None:
    encoder = encoder_stats(point)
    if not (encoder and point.wall_s):
        return None
    busy_s = encoder.compute_infer_us * encoder.executions / 1e6
    share = busy_s / point.wall_s
    text = (
        f"The encoder ({encoder.model}) ran {encoder.executions} executions of "
        f"{encoder.average_batch_size:.1f} requests on average, computing for about {busy_s:.1f} s "
        f"of the {point.wall_s:.1f} s run (~{share:.0%}; Triton reports compute per request, so this "
        "is approximate)."
    )
    if encoder.average_batch_size < 4:
        text += (
            " An average batch this small means few requests were queued when the encoder became free: "
            "the instances kept up with the load, or the steps before it held requests back."
        )
    return text


def _cpu_lines(
    results: dict, runs: list[ServedRun], cores: int, what: str, pipeline: str, unit: str
) -> list[str]:
    """The CPU per request of ``runs`` by process and the models' rate per core against in-process."""
    cost = cpu_per_item(runs)
    if cost is None:
        return []
    lines = [cost_line(cost, cores, what, unit)]
    best, _ = inprocess_reference(results, pipeline)
    line = per_core_line(cost, float(best["items_per_s"]), cores, unit) if best else None
    if line:
        lines.append(line)
    return lines


def batching_ceiling_line(results: dict, batch: int = 8) -> str | None:
    """What a batch buys the served text file in one process, in the served layout (one single-thread
    pipeline per core, arrival order): items/s in batches of ``batch`` over one at a time, beside the
    served on/off ratio. Served batching cannot buy the encoder's own work more than that; the served
    ratio can exceed it by the per-execution serving work a batch also saves. Where the run measured
    the control (every sentence of one length), its ratio too: whether mixed lengths are what limits it."""
    cores = results.get("machine", {}).get("logical_cores") or 1
    runtime = results.get("text_runtime", "onnxruntime")
    layout = f"{cores} x 1 thread" if cores > 1 else "1 x 1 thread"

    def rates(order: str) -> dict[int, float]:
        return {
            p["batch_size"]: p["items_per_s"]
            for p in results.get("inprocess", [])
            if p["pipeline"] == "text"
            and p["runtime"] == runtime
            and inprocess_arm(p) == f"{layout}, {order}"
        }

    arrival, one_length = rates(ARRIVAL), rates(ONE_LENGTH)
    if not arrival.get(1) or not arrival.get(batch):
        return None
    on, off = batching_arms(results, TARGET_CONCURRENCY)
    control = (
        f"; with every sentence of one length (the inputs' mean length; nothing ragged, no padding) "
        f"{one_length[batch]:.1f}/s against {one_length[1]:.1f}/s: "
        f"{ratio_text(one_length[batch], one_length[1])}"
        if one_length.get(1) and one_length.get(batch)
        else ""
    )
    return (
        f"What a batch can buy the encoder here: in one process, in the served layout ({layout}, "
        f"arrival order), the served file ran {arrival[batch]:.1f}/s in batches of {batch} against "
        f"{arrival[1]:.1f}/s one at a time: {ratio_text(arrival[batch], arrival[1])}{control}; served "
        f"batching on vs off at c={TARGET_CONCURRENCY}: {ratio_text(_rate(on), _rate(off))}."
    )


def encoder_stats(point: ServedRun) -> ModelStats | None:
    return point.encoder_stats()


def arm_summary(results: dict, key: str, model: str | None = None) -> list[ArmSummary]:
    """An arms experiment per (model, concurrency, arm), over its rounds: mean throughput, p50 and p99; the
    encoder's batch (its inferences / executions, all rounds together), queue and compute per request.
    ``model``: that model's runs alone (and those of a record from before runs named their model)."""
    groups: dict[tuple[str, int, str], list[ServedRun]] = {}
    for p in served_runs(results, key):
        if p.measured and model in (None, p.model or model):
            groups.setdefault((p.model, p.perf.concurrency, p.arm), []).append(p)
    rows = []
    for (_, concurrency, arm), points in groups.items():
        encoders = [e for e in map(encoder_stats, points) if e]
        executions = sum(e.executions for e in encoders)
        rows.append(
            ArmSummary(
                concurrency=concurrency,
                arm=arm,
                served_model=points[0].served_model,
                runs=len(points),
                throughput_per_s=_mean([p.perf.throughput_per_s for p in points]),
                p50_ms=_mean([p.perf.p50_ms for p in points if p.perf.p50_ms]),
                p99_ms=_mean([p.perf.p99_ms for p in points if p.perf.p99_ms]),
                encoder_batch=sum(e.inferences for e in encoders) / executions if executions else None,
                encoder_queue_ms=_mean([e.queue_us / 1000 for e in encoders]),
                encoder_compute_ms=_mean([e.compute_infer_us / 1000 for e in encoders]),
            )
        )
    return rows


def batching_arms(results: dict, concurrency: int) -> tuple[ArmSummary | None, ArmSummary | None]:
    """The `batching` experiment at ``concurrency``: the 'batching on' and 'batching off' arms over their
    rounds."""
    rows = {r.arm: r for r in arm_summary(results, "batching", TEXT_MODEL) if r.concurrency == concurrency}
    return rows.get("batching on"), rows.get("batching off")


def ragged_arm(results: dict, concurrency: int, prefix: str, model: str = TEXT_MODEL) -> ArmSummary | None:
    """The `ragged` experiment's arm of ``model`` whose label starts with ``prefix`` at ``concurrency``."""
    for row in arm_summary(results, "ragged"):
        if (
            row.concurrency == concurrency
            and row.arm.startswith(prefix)
            and row.served_model.startswith(model)
        ):
            return row
    return None


def shipped_arm(results: dict, concurrency: int, model: str = TEXT_MODEL) -> ArmSummary | None:
    for row in arm_summary(results, "ragged"):
        if row.concurrency == concurrency and row.served_model == model:
            return row
    return None


def against_previous(results: dict, model: str = TEXT_MODEL) -> tuple[ArmSummary | None, ArmSummary | None]:
    """The `ragged` experiment at the target concurrency: ``model`` as shipped, and its previous
    configuration."""
    return (
        shipped_arm(results, TARGET_CONCURRENCY, model),
        ragged_arm(results, TARGET_CONCURRENCY, BASELINE_ARM_PREFIX, model),
    )


def image_line(results: dict) -> str | None:
    """One sentence: the shipped image classifier against its previous configuration at c=32, and
    against the previous file alone where that arm ran."""
    shipped, previous = against_previous(results, IMAGE_MODEL)
    if not shipped or not previous:
        return None
    line = (
        f"The image classifier served {_number(shipped.throughput_per_s, '.1f')} img/s at "
        f"c={TARGET_CONCURRENCY}, its previous configuration {_number(previous.throughput_per_s, '.1f')}: "
        f"{ratio_text(shipped.throughput_per_s, previous.throughput_per_s)}"
    )
    file_alone = ragged_arm(results, TARGET_CONCURRENCY, PAD_NODES_FILE_ARM, IMAGE_MODEL)
    if file_alone:
        line += (
            f"; against the previous file alone behind today's batchers "
            f"({_number(file_alone.throughput_per_s, '.1f')} img/s): "
            f"{ratio_text(shipped.throughput_per_s, file_alone.throughput_per_s)}"
        )
    return line + "."


def ragged_line(results: dict) -> str | None:
    """One sentence: the shipped text ensemble against the previous configuration at c=32."""
    shipped, previous = against_previous(results)
    if not shipped or not previous:
        return None
    return (
        f"At c={TARGET_CONCURRENCY} (mean of {shipped.runs} alternating runs) the shipped text ensemble "
        f"served {_number(shipped.throughput_per_s, '.1f')} req/s with encoder batches of "
        f"{_number(shipped.encoder_batch)}, the previous configuration "
        f"{_number(previous.throughput_per_s, '.1f')} req/s with batches of "
        f"{_number(previous.encoder_batch)}: "
        f"{ratio_text(shipped.throughput_per_s, previous.throughput_per_s)}."
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _number(value: float | None, spec: str = ".2f") -> str:
    return format(value, spec) if value is not None else "-"


def claims(results: dict) -> list[Claim]:
    on, off = batching_arms(results, TARGET_CONCURRENCY)
    batching_ratio = ratio_text(_rate(on), _rate(off))
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
