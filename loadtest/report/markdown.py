"""Write ``report.md`` and its PNG plots from a run folder's ``results.json`` (and nothing else)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

from loadtest.experiments.budget import Budget
from loadtest.experiments.plans import TEXT_MODEL
from loadtest.experiments.registry import KEYS, MODEL_KEYS, TARGET_CONCURRENCY, experiment
from loadtest.report import budget_section, causes, figures, findings, plots, ragged_section, rounds
from loadtest.report.records import INPROCESS_BEFORE_ARMS, ServedRun, inprocess_arm, model_stats, served_runs
from loadtest.report.tables import PERF_HEADER, batches, image, perf_row, row_of, table


def write_report(folder: Path) -> Path:
    folder = Path(folder)
    results = json.loads((folder / "results.json").read_text())
    parts = [
        _header(results),
        _summary(results),
        _claims(results),
        _budget(results, folder),
        _batching(results, folder),
        _instances(results, folder),
        ragged_section.section(results, folder),
        ragged_section.minimal_section(results),
        _central(results),
        _clients(results),
        _inprocess(results, folder),
        _batch_costs(results),
        _profiles(results, folder),
        _sweeps(results, folder),
        _locust(results),
        _environment(results),
        _raw(folder),
        _errors(results),
    ]
    path = folder / "report.md"
    path.write_text("\n\n".join(p for p in parts if p) + "\n")
    return path


def _header(r: dict) -> str:
    cores = r["machine"].get("logical_cores")
    # The load average at the start is other processes' load; at the end it includes this benchmark's own.
    busy = r.get("load_average_start", [0])[0]
    warning = (
        f"\n\n**Measured on a busy machine**: the 1-minute load average was {busy} on {cores} cores before "
        "the run started; absolute numbers are low, compare the ratios."
        if cores and busy > 0.5 * cores
        else ""
    )
    note = f"\n\n> {r['note']}" if r.get("note") else ""
    return (
        f"# Benchmark report {r['run_id']}\n\nMode **{r['mode']}**, started {r['started_utc']}, took "
        f"{r.get('duration_s', 0) / 60:.1f} min (`{r['command']}`). Load average (1, 5, 15 min) at the start "
        f"{r.get('load_average_start')}, at the end {r.get('load_average_end')}.{warning}{note}"
    )


def _measures_shipped(r: dict) -> bool:
    """Whether the run measured the shipped models the targets and claims are about: an experiment on
    them ran, or the model experiments included the text ensemble (a --models run of others did not)."""
    shipped = set(KEYS) - set(MODEL_KEYS) - set(r.get("skipped", []))
    plan = r.get("plan", {})
    return bool(shipped) or TEXT_MODEL in (*plan.get("sweep_models", ()), *plan.get("batching_models", ()))


def _summary(r: dict) -> str:
    if not _measures_shipped(r):
        return ""
    rows = [(v.name, v.required, v.measured, v.verdict) for v in findings.verdicts(r)]
    text = "## Targets\n\n" + table(("target", "required", "measured", ""), rows)
    lines = causes.causes(r)
    if lines:
        text += "\n\nWhat the measurements say about the cause:\n\n" + "\n".join(f"- {c}" for c in lines)
    return text


def _claims(r: dict) -> str:
    if not _measures_shipped(r):
        return ""
    rows = [(c.claim, c.published, c.measured) for c in findings.claims(r)]
    return "## Published claims against this run\n\n" + table(("claim", "published", "measured here"), rows)


def _budget(r: dict, folder: Path) -> str:
    """The `budget` experiment's section: where each service's time goes at each load."""
    budgets = [Budget.from_dict(b) for b in r.get("budget", [])]
    intro = "The Python models timed themselves during this stage (one small file write per execution)."
    return budget_section.section(budgets, folder, intro=intro)


BATCHING_ARMS = (
    "The same model served twice side by side; the clone has `dynamic_batching` removed from the model "
    "and every step it calls (derived from the config by `tritonrepo.clones`). Arms alternate at "
    "each concurrency (on, off, on, off: the plan's rounds); each ratio is of the arms' means."
)
INSTANCE_ARMS = (
    "`instance_group` count of the encoder set to 1, 2 and 4, intra-op threads divided so that the "
    "instances together use the core count (at least 1 each, so 4 instances on 2 cores oversubscribe)."
)


def _batching(r: dict, folder: Path) -> str:
    models = sorted({p.model or figures.TEXT_MODEL for p in served_runs(r, "batching")})
    measured = "text ensemble" if models in ([], [figures.TEXT_MODEL]) else ", ".join(models)
    title = f"Dynamic batching on vs off ({measured})"
    return _arms_section(
        r, folder, "batching", title, BATCHING_ARMS, after_table=lambda points: _on_off_ratios(r, points)
    )


def _on_off_ratios(r: dict, points: list[ServedRun]) -> str:
    """On / off for each model at each concurrency, each arm's mean over its rounds."""
    ratios = []
    for model in sorted({p.model or figures.TEXT_MODEL for p in points}):
        measured = [p for p in points if (p.model or figures.TEXT_MODEL) == model]
        for c in sorted({p.perf.concurrency for p in measured}):
            on, off = figures.batching_arms(r, c, model)
            runs = min(on.runs, off.runs) if on and off else 0
            rate = (on.throughput_per_s if on else None), (off.throughput_per_s if off else None)
            ratios.append((model, c, runs, rounds.ratio_text(*rate)))
    return "\n\n" + table(("model", "concurrency", "rounds", "on / off throughput (means)"), ratios)


def _instances(r: dict, folder: Path) -> str:
    return _arms_section(r, folder, "instances", "Encoder instances (text ensemble)", INSTANCE_ARMS)


def _arms_section(
    r: dict,
    folder: Path,
    key: str,
    plot_title: str,
    description: str,
    after_table: Callable[[list[ServedRun]], str] = lambda points: "",
) -> str:
    """An arms experiment on the text ensemble: every run, then ``after_table``'s text, then its plot."""
    points = served_runs(r, key)
    if not points:
        return ""
    plot = plots.arms_against_concurrency(points, folder, f"{key}.png", plot_title, figures.TEXT_ENCODER)
    return (
        experiment(key).heading
        + "\n\n"
        + description
        + "\n\n"
        + table(PERF_HEADER, map(perf_row, points))
        + after_table(points)
        + image(plot)
    )


def _central(r: dict) -> str:
    c = r.get("central")
    if not c:
        return ""
    measured_rounds = rounds.central_rounds(c)
    rows = []
    for number, measured in enumerate(measured_rounds, start=1):
        server, pool = measured["server"], measured["pool"]
        rows += [
            (
                number,
                "central server (server + stubs)",
                server["run"]["in_flight"],
                server["run"]["wall_s"],
                c["images"] / server["run"]["wall_s"],
                server["server_cpu_s"],
                server["server_peak_rss_mb"],
                server["server_processes"],
            ),
            (
                number,
                f"{pool['workers']} worker processes ({c['pool_threads_per_worker']} thread each)",
                1,
                pool["wall_s"],
                c["images"] / pool["wall_s"],
                pool["cpu_s"],
                pool["peak_rss_mb"],
                pool["workers"],
            ),
        ]
    server_batches = batches(model_stats(measured_rounds[0]["server"]["run"]["server"]))
    mean_load_s = statistics.mean(m["pool"]["mean_load_s"] for m in measured_rounds)
    return (
        experiment("central").heading + "\n\n" + f"{c['images']} distinct images (crops and resizes "
        "of the skimage photographs), the two sides alternating round by round; the server stays up, idle, "
        "while the processes run. Workers load the model themselves (included in their wall time, mean "
        f"load {mean_load_s:.1f} s). Top-1 agreement between the two: {c['top1_agreement']:.0%}. "
        f"Server batches (first round): {server_batches}. Central server / processes: "
        f"{rounds.central_comparison(r).text()}.\n\n"
        + table(
            ("round", "side", "in flight", "wall s", "images/s", "CPU s", "peak RSS MB", "processes"), rows
        )
    )


def _clients(r: dict) -> str:
    runs = r.get("clients", [])
    if not runs:
        return ""
    rows = [
        (
            c.get("round", 0) + 1,
            c["label"],
            c["items"],
            c["wall_s"],
            c["items"] / c["wall_s"],
            batches(model_stats(c["server"])),
        )
        for c in runs
    ]
    return (
        experiment("clients").heading
        + "\n\nThe two clients alternate round by round. asyncio / sequential: "
        + rounds.client_comparison(r).text()
        + ".\n\n"
        + table(("round", "client", "texts", "wall s", "texts/s", "average batch size"), rows)
    )


def _inprocess(r: dict, folder: Path) -> str:
    points = r.get("inprocess", [])
    if not points:
        return ""
    served = {}
    target = figures.target_point(r)
    if target:
        served[f"served {target.served_model} c=32"] = target.perf.throughput_per_s
    plot = plots.inprocess_vs_served(points, served, folder)
    columns = ("pipeline", "model", "runtime", "layout", "order", "batch_size", "items", "items_per_s")
    rows = [row_of(INPROCESS_BEFORE_ARMS | p, *columns, "ms_per_batch") for p in points]
    # The same comparison as the target: the served file's runtime, the `ragged` experiment's shipped arm if
    # measured.
    best = figures.best_inprocess(r, runtime=r.get("text_runtime", "onnxruntime"))
    shipped = figures.shipped_arm(r, TARGET_CONCURRENCY)
    served_rate = shipped.throughput_per_s if shipped else (target.perf.throughput_per_s if target else None)
    share = (
        f"\n\nServed text ensemble at c=32: {served_rate:.1f}/s = "
        f"{rounds.share_text(served_rate / best['items_per_s'])} of the best in-process "
        f"{best['items_per_s']:.1f}/s "
        f"({best['runtime']}, {inprocess_arm(best)}, batch {best['batch_size']})."
        + (
            " The target holds it to the in-process rounds of experiment `ragged`, measured between the "
            "served ones."
            if figures.beside_inprocess(r)
            else ""
        )
        if served_rate and best
        else ""
    )
    return (
        experiment("inprocess").heading
        + "\n\nThe exported files run in this process without a server (tokenise/"
        "preprocess, forward, pool/top-k), batches cut from the arrival order (text also sorted by "
        "length, the best case, and as a control `one length`: a sentence of the inputs' mean length "
        "repeated, so that nothing is ragged or padded; it is not traffic the service gets and never "
        "the in-process figure of a target). Layout: one pipeline with a thread per core, or one "
        "single-thread pipeline per core taking batches from one queue (as the local configs run one "
        "instance per core).\n\n"
        + table(
            ("pipeline", "model", "runtime", "layout", "order", "batch", "items", "items/s", "ms per batch"),
            rows,
        )
        + share
        + image(plot)
    )


def _batch_costs(r: dict) -> str:
    costs = list(r.get("inprocess_batch_costs", [])) + [c["cost"] for c in r.get("served_batch_costs", [])]
    if not costs:
        return ""
    rows = [
        (
            *row_of(c, "model", "where", "ms_batch_1", "ms_batch_32"),
            c["ms_batch_32"] / c["ms_batch_1"],
            32 * c["ms_batch_1"] / c["ms_batch_32"],
        )
        for c in costs
        if c["ms_batch_1"]
    ]
    return (
        experiment("batchcost").heading + "\n\nOne shape, so that only the batch size differs: text "
        "sentences of the corpus's most common token count, images one photograph repeated. Published "
        "expectation: 2-3x on a GPU.\n\n"
        + table(("model", "where", "ms batch 1", "ms batch 32", "cost ratio", "throughput gain"), rows)
    )


def _profiles(r: dict, folder: Path) -> str:
    sections = []
    for p in r.get("profiles", []):
        top = p["top"]
        plot = plots.bars(
            [f"{t['name'][:48]} ({t['op']})" if t["op"] != t["name"] else t["name"] for t in top],
            [t["total_ms"] for t in top],
            folder,
            f"profile_{p['model']}.png",
            f"{p['model']} ({p['runtime']}, batch {p['batch_size']}): top layers",
            "ms per run",
        )
        rows = [(t["name"], t["op"], t["total_ms"], f"{t['share']:.1%}", t["calls"]) for t in top]
        sections.append(
            f"### {p['model']} ({p['runtime']}, batch {p['batch_size']}, {p['total_ms']:.1f} ms per "
            f"run in kernels)\n\n"
            + table(("layer / op", "op type", "ms per run", "share", "calls"), rows)
            + image(plot)
        )
    return experiment("profile").heading + "\n\n" + "\n\n".join(sections) if sections else ""


def _sweeps(r: dict, folder: Path) -> str:
    points = served_runs(r, "sweeps")
    if not points:
        return ""
    images = [plots.sweep_throughput(points, folder)]
    images += [plots.sweep_latency(points, folder, m) for m in sorted({p.served_model for p in points})]
    return (
        experiment("sweeps").heading
        + "\n\nEvery public model in this mode, HTTP and gRPC, 99th percentile, real "
        "input data (raw/perf_analyzer/inputs).\n\n"
        + table(PERF_HEADER, map(perf_row, points))
        + "".join(image(i) for i in images)
    )


def _locust(r: dict) -> str:
    runs = r.get("locust", [])
    if not runs:
        return ""
    rows = []
    for run in runs:
        for row in run["result"]["rows"]:
            rows.append(
                (
                    run["shape"],
                    row["request_type"] or "all",
                    row["name"],
                    row["requests"],
                    row["failures"],
                    row["requests_per_s"],
                    row["median_ms"],
                    row["p95_ms"],
                    row["p99_ms"],
                )
            )
    return (
        experiment("locust").heading
        + "\n\nHTTP and gRPC users (half each), image and text tasks, closed loop. Full "
        "statistics in raw/locust.\n\n"
        + table(
            ("shape", "type", "name", "requests", "failures", "req/s", "p50 ms", "p95 ms", "p99 ms"), rows
        )
    )


def _environment(r: dict) -> str:
    machine = table(("machine", ""), r["machine"].items())
    versions = table(("component", "version"), r.get("versions", {}).items())
    git = r["git"]
    dirty = f" with uncommitted changes ({git['changed_files']} files)" if git["dirty"] else ""
    if git["dirty"] is None:
        dirty = " (uncommitted changes not known: no git where it ran)"
    hashes = table(
        ("served model", "config sha256"), ((k, v[:16]) for k, v in r.get("served_config_sha256", {}).items())
    )
    sources = table(
        ("model_repository config", "sha256"), ((k, v[:16]) for k, v in r["source_config_sha256"].items())
    )
    plan = "```json\n" + json.dumps(r["plan"], indent=1) + "\n```"
    return (
        f"## Environment\n\n{machine}\n\n{versions}\n\nGit commit `{git['commit']}`"
        f"{dirty}.\n\n"
        f"{sources}\n\n{hashes}\n\nPlan (exact settings of this mode):\n\n{plan}"
    )


def _raw(folder: Path) -> str:
    files = sorted(str(p.relative_to(folder)) for p in (folder / "raw").rglob("*") if p.is_file())
    if not files:
        return ""
    shown = [f for f in files if not f.startswith("raw/perf_analyzer/") or f.endswith(".csv")]
    return (
        f"## Raw results\n\n{len(files)} files under raw/ (perf_analyzer CSVs and logs, Locust CSVs "
        "and HTML, "
        "server statistics, profiles); CSVs and reports:\n\n" + "\n".join(f"- {f}" for f in shown[:80])
    )


def _errors(r: dict) -> str:
    errors = r.get("errors", [])
    return "## Errors\n\n" + "\n".join(f"- {e}" for e in errors) if errors else ""
