"""How far an export is: models and variants as N of M, what runs now, the time elapsed and the time left.

``python -m export`` reports through one :class:`Progress`: a tqdm bar where stdout is a terminal, one
plain line per step where it is not (a CI log, a file), nothing with ``--quiet``. The pipeline says which
model it is on (:meth:`Progress.model`), what it is doing (:meth:`Progress.step`: loading a model,
building, gating or timing a variant) and when a variant is done (:meth:`Progress.variant_done`).

The variants to do are estimated when the export starts, per served file, from its description's
precisions that this machine can run (:func:`export.pipeline.estimated_variants`), and corrected once a
file's plan is known (:meth:`Progress.expect`; an up-to-date or failed file expects no more). The time left
is the time per variant so far times the variants left: unknown until the first variant is done.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

MODES = ("bar", "lines", "quiet")


def mode_for(stream: TextIO, *, quiet: bool) -> str:
    """``quiet``, else a bar on a terminal and plain lines elsewhere (a terminal that reports no width,
    such as a pseudo-terminal without a size, gets lines: a bar there would be cut to nothing)."""
    if quiet:
        return "quiet"
    if not stream.isatty():
        return "lines"
    try:
        width = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):  # no file descriptor behind the stream: trust isatty
        return "bar"
    return "bar" if width > 0 else "lines"


def duration(seconds: float | None) -> str:
    """``m:ss`` (``h:mm:ss`` past an hour), or ``?`` when not known yet."""
    return "?" if seconds is None else tqdm.format_interval(seconds)


class Progress:
    """Counts of models and variants, the step running now, elapsed and estimated time left."""

    def __init__(
        self,
        *,
        mode: str = "quiet",
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"progress mode must be one of {MODES}, got {mode!r}")
        self.mode, self._stream, self._clock = mode, stream or sys.stdout, clock
        self._started = clock()
        self._models: list[str] = []
        self._current = ""
        self._expected: dict[str, int] = {}  # served file -> variants it builds (estimated, then known)
        self._done: dict[str, int] = {}
        self.doing = ""
        self._bar: tqdm | None = None

    # -- what the pipeline reports -----------------------------------------------------------------------
    def start(self, estimates: dict[str, dict[str, int]]) -> None:
        """``estimates``: for each model in export order, its served files and the variants each builds."""
        self._models = list(estimates)
        self._expected = {key: count for files in estimates.values() for key, count in files.items()}
        self._started = self._clock()
        if self.mode == "bar":
            self._bar = tqdm(
                total=self.total,
                file=self._stream,
                unit="variant",
                smoothing=0,  # time left from the average time per variant so far
                bar_format="{desc} {bar} {n_fmt}/{total_fmt} variants [{elapsed} elapsed, {remaining} left]"
                "{postfix}",
                dynamic_ncols=True,
            )
        self._show()

    def model(self, name: str) -> None:
        self._current, self.doing = name, ""

    def expect(self, key: str, count: int) -> None:
        """Served file ``key`` builds ``count`` variants in all (those done included)."""
        self._expected[key] = max(count, self._done.get(key, 0))
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def settle(self, key: str) -> None:
        """Served file ``key`` builds no more variants (it is up to date, or it failed)."""
        self.expect(key, self._done.get(key, 0))

    def step(self, doing: str) -> None:
        self.doing = doing
        self._show()

    def variant_done(self, key: str) -> None:
        self._done[key] = self._done.get(key, 0) + 1
        self._expected[key] = max(self._expected.get(key, 0), self._done[key])
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.update(1)

    def write(self, text: str) -> None:
        """A line of command output that leaves the bar, if any, intact (below it)."""
        if self._bar is not None:
            self._bar.write(text, file=self._stream)
        else:
            print(text, file=self._stream, flush=True)

    # -- what is shown -----------------------------------------------------------------------------------
    @property
    def done(self) -> int:
        return sum(self._done.values())

    @property
    def total(self) -> int:
        return sum(self._expected.values())

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    @property
    def left_s(self) -> float | None:
        """The time per variant so far times the variants left; None before the first is done."""
        if not self.done:
            return None
        return self.elapsed_s / self.done * max(self.total - self.done, 0)

    def where(self) -> str:
        """``model 2/3 efficientnet_lite0``, or an empty string before the first model."""
        if self._current not in self._models:
            return self._current
        return f"model {self._models.index(self._current) + 1}/{len(self._models)} {self._current}"

    def line(self) -> str:
        """One plain line: times, the model and variants as N of M, what runs now."""
        parts = [f"[{duration(self.elapsed_s)} elapsed, {duration(self.left_s)} left]"]
        parts += [f"{self.where()},"] if self.where() else []
        parts += [f"variants {self.done}/{self.total}"]
        parts += ["-", self.doing] if self.doing else []
        return " ".join(parts)

    def _show(self) -> None:
        """A line per step in a log (the counts move with the next step); the bar shows each change."""
        if self.mode == "lines" and self._models:
            print(self.line(), file=self._stream, flush=True)
        elif self._bar is not None:
            self._bar.set_description_str(self.where(), refresh=False)
            self._bar.set_postfix_str(f"now: {self.doing}" if self.doing else "", refresh=False)
            self._bar.refresh()

    def close(self) -> None:
        """End the bar (``contextlib.closing`` calls it at the end of a ``with`` block)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
