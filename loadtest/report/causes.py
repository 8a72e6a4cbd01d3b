"""The measured causes the report gives for where the text ensemble stands: where the CPU went, how full
the encoder's batches were, queueing against compute in each step, what a batch buys the file in one
process, and the shipped ensembles against their unoptimised configurations in one sentence each.
"""

from __future__ import annotations

from loadtest.experiments.inprocess import ARRIVAL, ONE_LENGTH
from loadtest.experiments.registry import PAD_NODES_FILE_ARM, TARGET_CONCURRENCY
from loadtest.report.cpu import cost_line, cpu_per_item, per_core_line
from loadtest.report.figures import (
    IMAGE_MODEL,
    TEXT_MODEL,
    against_unoptimised,
    batching_arms,
    inprocess_reference,
    ragged_arm,
    rate,
    target_point,
)
from loadtest.report.records import ServedRun, inprocess_arm, served_runs
from loadtest.report.rounds import number_text, ratio_text


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
    encoder = point.encoder_stats()
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
        f"batching on vs off at c={TARGET_CONCURRENCY}: {ratio_text(rate(on), rate(off))}."
    )


def image_line(results: dict) -> str | None:
    """One sentence: the shipped image classifier against its unoptimised configuration at c=32, and
    against the Pad-node file alone where that arm ran."""
    shipped, unoptimised = against_unoptimised(results, IMAGE_MODEL)
    if not shipped or not unoptimised:
        return None
    line = (
        f"The image classifier served {number_text(shipped.throughput_per_s, '.1f')} img/s at "
        f"c={TARGET_CONCURRENCY}, its unoptimised configuration "
        f"{number_text(unoptimised.throughput_per_s, '.1f')}: "
        f"{ratio_text(shipped.throughput_per_s, unoptimised.throughput_per_s)}"
    )
    file_alone = ragged_arm(results, TARGET_CONCURRENCY, PAD_NODES_FILE_ARM, IMAGE_MODEL)
    if file_alone:
        line += (
            f"; against the Pad-node file alone behind today's batchers "
            f"({number_text(file_alone.throughput_per_s, '.1f')} img/s): "
            f"{ratio_text(shipped.throughput_per_s, file_alone.throughput_per_s)}"
        )
    return line + "."


def ragged_line(results: dict) -> str | None:
    """One sentence: the shipped text ensemble against the unoptimised configuration at c=32."""
    shipped, unoptimised = against_unoptimised(results)
    if not shipped or not unoptimised:
        return None
    return (
        f"At c={TARGET_CONCURRENCY} (mean of {shipped.runs} alternating runs) the shipped text ensemble "
        f"served {number_text(shipped.throughput_per_s, '.1f')} req/s with encoder batches of "
        f"{number_text(shipped.encoder_batch)}, the unoptimised configuration "
        f"{number_text(unoptimised.throughput_per_s, '.1f')} req/s with batches of "
        f"{number_text(unoptimised.encoder_batch)}: "
        f"{ratio_text(shipped.throughput_per_s, unoptimised.throughput_per_s)}."
    )
