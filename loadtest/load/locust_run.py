"""Run the Locust scenarios headless as a subprocess and read their statistics CSV."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

LOCUSTFILE = Path(__file__).parent / "locustfile.py"


@dataclass(kw_only=True, frozen=True)
class LocustRun:
    """One headless Locust run: who, how many, how long, and where its CSV and HTML go."""

    http_url: str
    grpc_url: str | None = None
    users: int = 4
    spawn_rate: float | None = None  # users started per second; None: every user in the first second
    run_time_s: int = 20
    user_classes: tuple[str, ...] = ()
    shape: str | None = None
    mix: str = "text:1,image:1"
    image_model: str = "image_classifier"
    text_model: str = "text_embedder"

    def __post_init__(self) -> None:
        if self.users < 1 or (self.spawn_rate is not None and self.spawn_rate <= 0) or self.run_time_s < 1:
            raise ValueError(
                f"users >= 1, spawn_rate > 0 and run_time_s >= 1 are required, "
                f"got {self.users}, {self.spawn_rate}, {self.run_time_s}"
            )

    def command(self, csv_prefix: Path, html_file: Path) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            *self.user_classes,
            "--headless",
            "--only-summary",
            "-u",
            str(self.users),
            "-r",
            str(self.spawn_rate or self.users),
            "-t",
            f"{self.run_time_s}s",
            "--stop-timeout",
            "10",
            "--host",
            _with_scheme(self.http_url, "http"),
            "--mix",
            self.mix,
            "--image-model",
            self.image_model,
            "--text-model",
            self.text_model,
            "--csv",
            str(csv_prefix),
            "--html",
            str(html_file),
        ]
        if self.grpc_url:
            command += ["--grpc-host", _with_scheme(self.grpc_url, "grpc")]
        return command


@dataclass(kw_only=True)
class LocustRow:
    """One line of Locust's ``_stats.csv``: a request type and name (or the aggregate)."""

    request_type: str
    name: str
    requests: int
    failures: int
    requests_per_s: float
    median_ms: float
    p95_ms: float
    p99_ms: float
    average_ms: float


@dataclass(kw_only=True)
class LocustResult:
    returncode: int
    rows: list[LocustRow] = field(default_factory=list)
    stats_csv: str = ""
    html: str = ""
    output_tail: str = ""

    def row(self, request_type: str, name: str) -> LocustRow | None:
        return next((r for r in self.rows if (r.request_type, r.name) == (request_type, name)), None)

    @property
    def aggregated(self) -> LocustRow | None:
        return self.row("", "Aggregated")


def run_locust(
    run: LocustRun, out_dir: Path, *, stem: str = "locust", timeout_s: float | None = None
) -> LocustResult:
    """Run Locust to completion; its CSVs (``<stem>_stats.csv`` ...) and HTML report go to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix, html = out_dir / stem, out_dir / f"{stem}.html"
    env = dict(os.environ)
    env.pop("LOADTEST_SHAPE", None)
    if run.shape:
        env["LOADTEST_SHAPE"] = run.shape
    completed = subprocess.run(
        run.command(prefix, html),
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=timeout_s or run.run_time_s + 120,
    )
    output = completed.stdout + completed.stderr
    (out_dir / f"{stem}.log").write_text(output)
    stats = Path(f"{prefix}_stats.csv")
    rows = parse_stats_csv(stats) if stats.is_file() else []
    return LocustResult(
        returncode=completed.returncode,
        rows=rows,
        stats_csv=stats.name,
        html=html.name,
        output_tail=output[-2000:],
    )


def parse_stats_csv(path: Path) -> list[LocustRow]:
    with Path(path).open(newline="") as handle:
        return [
            LocustRow(
                request_type=row["Type"],
                name=row["Name"],
                requests=int(row["Request Count"]),
                failures=int(row["Failure Count"]),
                requests_per_s=float(row["Requests/s"]),
                median_ms=_number(row["50%"]),
                p95_ms=_number(row["95%"]),
                p99_ms=_number(row["99%"]),
                average_ms=float(row["Average Response Time"]),
            )
            for row in csv.DictReader(handle)
        ]


def _number(text: str) -> float:
    return float(text) if text not in ("", "N/A") else float("nan")


def _with_scheme(url: str, scheme: str) -> str:
    return url if "://" in url else f"{scheme}://{url}"
