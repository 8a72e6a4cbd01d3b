"""From results.json to the verdicts: targets met or missed (with measured causes) and published claims.

Targets (the text ensemble at concurrency 32 on this CPU): at least 2x the plain FastAPI
one-forward-per-request figure of about 90 req/s, at least 85% of the best in-process figure of the
same run, and a p99 no worse than about 520 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadtest.report.records import ArmSummary, ServedRun, served_runs

TEXT_MODEL = "text_embedder"
TEXT_ENCODER = "minilm_onnx"
TARGET_CONCURRENCY = 32
FASTAPI_BASELINE_PER_S = 90.0
TARGET_THROUGHPUT_PER_S = 2 * FASTAPI_BASELINE_PER_S
TARGET_INPROCESS_SHARE = 0.85
TARGET_P99_MS = 520.0


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
    rows = [p for p in results.get("inprocess", []) if p["pipeline"] == pipeline and p["runtime"] == runtime]
    return max(rows, key=lambda p: p["items_per_s"]) if rows else None


def target_point(results: dict) -> ServedRun | None:
    """The text ensemble at concurrency 32: gRPC from the sweep or experiment 1, else HTTP."""
    served = served_runs(results, "batching") + served_runs(results, "sweeps")
    for protocol in ("grpc", "http"):
        found = point_at(served, model=TEXT_MODEL, protocol=protocol, concurrency=TARGET_CONCURRENCY)
        if found:
            return found
    return None


def verdicts(results: dict) -> list[Verdict]:
    point = target_point(results)
    best = best_inprocess(results)
    if point is None:
        return [
            Verdict(
                name="text ensemble at concurrency 32", required="measured", measured="not measured", met=None
            )
        ]
    perf = point.perf
    where = f"{perf.protocol}, c={perf.concurrency}"
    found = [
        Verdict(
            name="throughput",
            required=f">= {TARGET_THROUGHPUT_PER_S:.0f} req/s (2x FastAPI ~90)",
            measured=f"{perf.throughput_per_s:.1f} req/s ({where})",
            met=perf.throughput_per_s >= TARGET_THROUGHPUT_PER_S,
        )
    ]
    if best:
        share = perf.throughput_per_s / best["items_per_s"]
        found.append(
            Verdict(
                name="share of the in-process limit",
                required=f">= {TARGET_INPROCESS_SHARE:.0%}",
                measured=f"{share:.0%} ({perf.throughput_per_s:.1f} of {best['items_per_s']:.1f}/s "
                f"in-process "
                f"at batch {best['batch_size']})",
                met=share >= TARGET_INPROCESS_SHARE,
            )
        )
    else:
        found.append(
            Verdict(
                name="share of the in-process limit", required=">= 85%", measured="not measured", met=None
            )
        )
    p99 = perf.p99_ms
    found.append(
        Verdict(
            name="p99 latency",
            required=f"<= {TARGET_P99_MS:.0f} ms",
            measured=f"{p99:.0f} ms" if p99 else "not measured",
            met=(p99 <= TARGET_P99_MS) if p99 else None,
        )
    )
    return found


def causes(results: dict) -> list[str]:
    """Measured reasons the text ensemble is where it is: compute saturation, queueing, batch sizes, load."""
    point = target_point(results)
    lines: list[str] = []
    if point is None:
        return lines
    cores = results.get("machine", {}).get("logical_cores") or 1
    used = point.server_cpu_cores
    load = max((results.get(k) or [0.0])[0] for k in ("load_average_start", "load_average_end"))
    if used is not None:
        verdict = "."
        if used / cores > 0.85:
            verdict = ": the CPU is saturated."
        elif load > cores:
            verdict = ": the rest of the CPU went to other processes (see the load average below)."
        lines.append(
            f"CPU: the server and its Python-backend stubs used {used:.2f} of {cores} cores during the run "
            f"({used / cores:.0%}){verdict}"
        )
    encoder = point.stats_of(TEXT_ENCODER)
    if encoder and point.wall_s:
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
                " An average batch this small means the batcher rarely found several queued requests of "
                "one length bucket: it only merges requests whose shapes match."
            )
        lines.append(text)
    for name, stats in sorted(point.server.items()):
        if stats.executions and name != point.served_model:
            lines.append(
                f"{name}: queue {stats.queue_us / 1000:.1f} ms vs compute "
                f"{stats.compute_infer_us / 1000:.1f} ms per request, average batch "
                f"{stats.average_batch_size:.1f}."
            )
    bucketing = bucketing_line(results)
    if bucketing:
        lines.append(bucketing)
    start, end = results.get("load_average_start"), results.get("load_average_end")
    if start and end and start[0] > 0.5 * cores:  # at the end it includes the benchmark's own load
        lines.append(
            f"Background load: the 1-minute load average was {start[0]} before the run on {cores} cores "
            f"({end[0]} at the end, this run included), so other processes shared the CPU."
        )
    return lines


def bucketing_summary(results: dict) -> list[ArmSummary]:
    """Experiment 8 per (concurrency, arm), over its rounds: mean throughput and p99; the encoder's batch
    (its inferences / executions, all rounds together) and queue and compute time per request."""
    groups: dict[tuple[int, str], list[ServedRun]] = {}
    for p in served_runs(results, "bucketing"):
        if p.measured:
            groups.setdefault((p.perf.concurrency, p.arm), []).append(p)
    rows = []
    for (concurrency, arm), points in groups.items():
        encoders = [e for e in (p.stats_of(TEXT_ENCODER) for p in points) if e and e.executions]
        p99s = [p.perf.p99_ms for p in points if p.perf.p99_ms]
        executions = sum(e.executions for e in encoders)
        rows.append(
            ArmSummary(
                concurrency=concurrency,
                arm=arm,
                served_model=points[0].served_model,
                runs=len(points),
                throughput_per_s=_mean([p.perf.throughput_per_s for p in points]),
                p99_ms=_mean(p99s),
                encoder_batch=sum(e.inferences for e in encoders) / executions if executions else None,
                encoder_queue_ms=_mean([e.queue_us / 1000 for e in encoders]),
                encoder_compute_ms=_mean([e.compute_infer_us / 1000 for e in encoders]),
            )
        )
    return rows


def bucketing_line(results: dict) -> str | None:
    """One sentence: the first arm of experiment 8 (length buckets) against the others at c=32."""
    rows = [r for r in bucketing_summary(results) if r.concurrency == TARGET_CONCURRENCY]
    if len(rows) < 2:
        return None
    first, others = rows[0], rows[1:]
    compared = "; ".join(
        f"{r.arm} {_number(r.throughput_per_s, '.1f')} req/s, batch {_number(r.encoder_batch)} (throughput "
        f"{first.arm} / {r.arm}: {ratio_text(first.throughput_per_s, r.throughput_per_s)})"
        for r in others
    )
    return (
        f"Length bucketing (experiment 8, c={TARGET_CONCURRENCY}, mean of {first.runs} alternating "
        f"runs): {first.arm} {_number(first.throughput_per_s, '.1f')} req/s with encoder batches of "
        f"{_number(first.encoder_batch)}; {compared}."
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _number(value: float | None, spec: str = ".2f") -> str:
    return format(value, spec) if value is not None else "-"


def throughput(point: ServedRun | None) -> float | None:
    return point.perf.throughput_per_s if point else None


def ratio_text(numerator: float | None, denominator: float | None) -> str:
    if not numerator or not denominator:
        return "not measured"
    return f"{numerator / denominator:.2f}x"


def claims(results: dict) -> list[Claim]:
    batching = served_runs(results, "batching")
    on = point_at(batching, model=TEXT_MODEL, protocol="grpc", concurrency=32, arm="batching on")
    off = point_at(
        batching, model=TEXT_MODEL + "__nobatch", protocol="grpc", concurrency=32, arm="batching off"
    )
    batching_ratio = ratio_text(throughput(on), throughput(off))
    instances = {
        p.arm: p.perf.throughput_per_s
        for p in served_runs(results, "instances")
        if p.perf.concurrency == 32 and p.measured
    }
    one = instances.get("1 instance")
    more = max((v for k, v in instances.items() if k != "1 instance"), default=None)
    central = results.get("central") or {}
    central_ratio = "not measured"
    if central:
        server_rate = central["images"] / central["server"]["run"]["wall_s"]
        pool_rate = central["images"] / central["pool"]["wall_s"]
        central_ratio = ratio_text(server_rate, pool_rate)
    clients = {c["in_flight"]: c["items"] / c["wall_s"] for c in results.get("clients", []) if c["wall_s"]}
    sync_rate = clients.get(1)
    async_rate = max((v for k, v in clients.items() if k > 1), default=None)
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
    return [
        Claim(
            claim="dynamic batching vs one request per call",
            published="~2.5x (BERT, ab -n 1000 -c 32)",
            measured=f"{batching_ratio} (text ensemble, c=32)",
        ),
        Claim(
            claim="batching gain",
            published="+26.5% (TorchServe, ResNet-152)",
            measured=f"{batching_ratio} (same measurement)",
        ),
        Claim(
            claim="central server vs per-job model loading",
            published=">2x (TorchServe, 1,000 images, 8 vCPUs)",
            measured=f"{central_ratio} ({central.get('images', 0)} images)",
        ),
        Claim(
            claim="more workers / instances",
            published="+36% (TorchServe)",
            measured=f"{ratio_text(more, one)} (best of 2/4 instances vs 1, c=32)",
        ),
        Claim(
            claim="overlapped async requests",
            published="+27% (Infery)",
            measured=f"{ratio_text(async_rate, sync_rate)} (asyncio vs sequential)",
        ),
        Claim(claim="cost of batch 32 vs batch 1", published="2-3x", measured=cost_text),
    ]
