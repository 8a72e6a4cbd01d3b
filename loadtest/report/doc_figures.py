"""The figures README.md and docs/ quote from the committed example reports, rendered from their records.

A doc quotes a record between two markers; everything between them is written by this module:

    <!-- figures: quick-example targets -->
    | target | required | measured | verdict |
    ...
    <!-- /figures -->

``quick-example`` names a folder of ``docs/reports/`` and ``targets`` what to render from its record
(:data:`RENDERERS`): a benchmark report's ``results.json`` goes through the report's own code
(:mod:`loadtest.report.findings`), so a doc says what the report says; a tuning report's record is its
``summary.md``. Run after a committed report changes:

    .venv/bin/python -m loadtest.report.doc_figures           # rewrite every quoted block
    .venv/bin/python -m loadtest.report.doc_figures --check   # exit 1 naming each block that is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadtest.report import figures, findings, rounds
from loadtest.report.tables import table
from tritonrepo.paths import ROOT

DOCS = ROOT / "docs"
REPORTS = DOCS / "reports"
BLOCK = re.compile(
    r"(?P<open><!-- figures: (?P<report>[\w-]+) (?P<what>[\w-]+) -->\n)(?P<body>.*?)"
    r"(?P<close><!-- /figures -->)",
    re.S,
)


def documents() -> list[Path]:
    """The Markdown files that may quote a record: README.md and the guides in docs/."""
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _results(report: Path) -> dict:
    return json.loads((report / "results.json").read_text(encoding="utf-8"))


def run(report: Path) -> str:
    """Which run the record holds, as a sentence: its command, start, cores and load."""
    r = _results(report)
    cores = r.get("machine", {}).get("logical_cores", "?")
    started = r["started_utc"][:16].replace("T", " ")
    return (
        f"Measured by `{r['command']}`, started {started} UTC on {cores} cores "
        f"(load average {r['load_average_start'][0]} at the start).\n"
    )


def targets(report: Path) -> str:
    rows = [(v.name, v.required, v.measured, v.verdict) for v in findings.verdicts(_results(report))]
    return table(("target", "required", "measured", "verdict"), rows) + "\n"


def claims(report: Path) -> str:
    rows = [(c.claim, c.published, c.measured) for c in findings.claims(_results(report))]
    return table(("claim", "published", "measured here"), rows) + "\n"


def batching(report: Path) -> str:
    """Dynamic batching on against off, text ensemble, at each concurrency of the run."""
    r = _results(report)
    rows = []
    for concurrency in r["plan"]["batching_concurrency"]:
        on, off = figures.batching_arms(r, concurrency)
        if on and off and on.throughput_per_s and off.throughput_per_s:
            rows.append(
                (
                    concurrency,
                    f"{on.throughput_per_s:.1f}",
                    f"{off.throughput_per_s:.1f}",
                    rounds.times_text(on.throughput_per_s / off.throughput_per_s),
                    f"{on.encoder_batch:.1f}" if on.encoder_batch else "-",
                )
            )
    header = ("in flight", "batching on, req/s", "off, req/s", "on / off", "encoder batch (on)")
    return table(header, rows) + "\n"


def ragged_text(report: Path) -> str:
    return _arms(report, figures.TEXT_MODEL)


def ragged_image(report: Path) -> str:
    return _arms(report, figures.IMAGE_MODEL)


def _arms(report: Path, model: str) -> str:
    """The `ragged` experiment's arms of one pipeline: means over the rounds, the encoder from Triton."""
    rows = [
        (
            s.concurrency,
            s.arm,
            f"{s.throughput_per_s:.1f}" if s.throughput_per_s else "-",
            f"{s.p99_ms:.0f}" if s.p99_ms else "-",
            f"{s.encoder_batch:.2f}" if s.encoder_batch else "-",
            f"{s.encoder_queue_ms:.1f}" if s.encoder_queue_ms else "-",
            f"{s.encoder_compute_ms:.1f}" if s.encoder_compute_ms else "-",
        )
        for s in figures.arm_summary(_results(report), "ragged")
        if s.served_model.startswith(model)
    ]
    header = ("in flight", "arm", "req/s", "p99 ms", "encoder batch", "queue ms", "compute ms")
    return table(header, rows) + "\n"


def minimal(report: Path) -> str:
    """Triton against each deployment of each service's simplest alternative the run measured."""
    rows = [
        (
            c.service,
            c.concurrency,
            c.alternative,
            f"{c.triton_per_s:.1f}" if c.triton_per_s else "-",
            f"{c.alternative_per_s:.1f}" if c.alternative_per_s else "-",
            rounds.ratio_text(c.triton_per_s, c.alternative_per_s),
            c.range_text() if c.rounds > 1 else "-",
        )
        for c in rounds.minimal_comparisons(_results(report))
    ]
    header = (
        "service",
        "in flight",
        "alternative",
        "Triton req/s",
        "alternative req/s",
        "Triton / it",
        "by round",
    )
    return table(header, rows) + "\n"


def tune_winners(report: Path) -> str:
    """The winners table of a tuning report, as its summary.md records it."""
    summary = (report / "summary.md").read_text(encoding="utf-8")
    found = re.search(r"## Winners\n\n((?:\|.*\n)+)", summary)
    if found is None:
        raise ValueError(f"{report / 'summary.md'} has no '## Winners' table to quote")
    return found.group(1)


RENDERERS: dict[str, Callable[[Path], str]] = {
    "run": run,
    "targets": targets,
    "claims": claims,
    "batching": batching,
    "ragged-text": ragged_text,
    "ragged-image": ragged_image,
    "minimal": minimal,
    "tune-winners": tune_winners,
}


@dataclass(frozen=True, kw_only=True)
class Quoted:
    """A quoted block of ``document``: what it holds now and what its record renders."""

    document: Path
    line: int
    report: str
    what: str
    body: str
    expected: str

    @property
    def stale(self) -> bool:
        return self.body != self.expected

    def where(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}: figures {self.report} {self.what}"


def quoted_blocks(document: Path) -> list[Quoted]:
    text = document.read_text(encoding="utf-8")
    return [
        Quoted(
            document=document,
            line=text.count("\n", 0, found.start()) + 1,
            report=found["report"],
            what=found["what"],
            body=found["body"],
            expected=render(found["report"], found["what"]),
        )
        for found in BLOCK.finditer(text)
    ]


def render(report: str, what: str) -> str:
    folder = REPORTS / report
    if what not in RENDERERS:
        raise ValueError(f"unknown figures {what!r} for {report}; known: {', '.join(RENDERERS)}")
    if not folder.is_dir():
        known = ", ".join(sorted(p.name for p in REPORTS.iterdir() if p.is_dir()))
        raise ValueError(f"no committed report {report!r} under {REPORTS}; known: {known}")
    return RENDERERS[what](folder)


def rewrite(document: Path) -> bool:
    """Render every quoted block of ``document`` from its record; True if the file changed."""
    text = document.read_text(encoding="utf-8")
    new = BLOCK.sub(lambda m: m["open"] + render(m["report"], m["what"]) + m["close"], text)
    if new != text:
        document.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.report.doc_figures", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a quoted block is stale"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = [block for document in documents() for block in quoted_blocks(document) if block.stale]
        for block in stale:
            print(f"stale: {block.where()}", file=sys.stderr)
        if stale:
            print("run `.venv/bin/python -m loadtest.report.doc_figures` to render them", file=sys.stderr)
        return 1 if stale else 0
    for document in documents():
        if rewrite(document):
            print(f"rewrote {document.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
