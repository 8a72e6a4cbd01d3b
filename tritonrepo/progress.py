"""Progress for people, shown the same way by every long command: the export, the load tests (bench,
tune, soak) and the batch job.

On a terminal a tqdm bar, with status lines printed above it; elsewhere (a CI log, a file) plain lines
and no bar; with ``quiet`` nothing. Progress goes to standard error, so that standard output carries the
command's results alone (:meth:`Progress.result` prints one without tearing a bar). Every duration reads
one way: 45s, 3m05s, 1h02m (:func:`duration`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

# Off a terminal, a count prints a line at every tenth of its total, and at least this often.
COUNT_LINE_EVERY_S = 10.0


def duration(seconds: float | None) -> str:
    """``seconds`` for people: 45s, 3m05s, 1h02m; ``?`` when not known yet."""
    if seconds is None:
        return "?"
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def is_terminal(stream: TextIO) -> bool:
    """Whether a bar can be drawn on ``stream``: a terminal that reports a width (a pseudo-terminal
    without a size reports 0 columns, and a bar there would be cut to nothing)."""
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False
    try:
        return os.get_terminal_size(stream.fileno()).columns > 0
    except (OSError, ValueError, AttributeError):  # no file descriptor behind the stream: trust isatty
        return True


class Progress:
    """Where a command's progress goes: ``bars`` None picks by whether ``stream`` (standard error by
    default) is a terminal; ``quiet`` shows nothing."""

    def __init__(
        self, *, quiet: bool = False, stream: TextIO | None = None, bars: bool | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        interactive = bars if bars is not None else is_terminal(self.stream)
        self.bars = interactive and not quiet
        self._open: Any = None

    def line(self, text: str) -> None:
        """One status line (above the bar when one is shown)."""
        if self.quiet:
            return
        if self._open is not None:
            self._open.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def result(self, text: str, *, out: TextIO | None = None) -> None:
        """One line of the command's result, on standard output (``out``), whether or not a bar is shown."""
        out = out if out is not None else sys.stdout
        if self._open is not None:
            tqdm.write(text, file=out)
        else:
            print(text, file=out, flush=True)

    @contextlib.contextmanager
    def bar(
        self, *, desc: str, total: float | None, unit: str, bar_format: str | None = None
    ) -> Iterator[Any]:
        """A tqdm bar on a terminal, a disabled one (every call a no-op) otherwise. While it is open,
        log records go through tqdm too, so that they do not tear the bar. The default layout leaves out
        tqdm's own clock ("01:15"): a duration shown goes in the postfix, through :func:`duration`."""
        if bar_format is None:
            count = "{n_fmt}/{total_fmt}" if total else "{n_fmt}"
            bar_format = (
                "{desc}: " + ("{percentage:3.0f}%|{bar}| " if total else "") + count + f" {unit}s{{postfix}}"
            )
        bar = tqdm(
            total=total,
            desc=desc,
            unit=unit,
            file=self.stream,
            disable=not self.bars,
            dynamic_ncols=True,
            leave=False,
            bar_format=bar_format,
        )
        self._open = bar if self.bars else None
        try:
            with logging_redirect_tqdm() if self.bars else contextlib.nullcontext():
                yield bar
        finally:
            self._open = None
            bar.close()

    @contextlib.contextmanager
    def count(self, *, total: int, unit: str, clock: Callable[[], float] = time.monotonic) -> Iterator[Count]:
        """Items done out of ``total``, each ok or failed: a bar on a terminal, elsewhere a line at every
        tenth of the total (and at least every :data:`COUNT_LINE_EVERY_S`)."""
        with self.bar(desc="", total=total or None, unit=unit) as bar:
            yield Count(self, total=total, unit=unit, bar=bar if self.bars else None, clock=clock)


class Count:
    """What :meth:`Progress.count` yields: call :meth:`update` once per item done."""

    def __init__(
        self, progress: Progress, *, total: int, unit: str, bar: Any, clock: Callable[[], float]
    ) -> None:
        self.total, self.unit = total, unit
        self.done = self.ok = 0
        self.bar = bar  # the tqdm bar on a terminal, else None
        self._progress, self._clock = progress, clock
        self._started = self._last_line = clock()
        self._step = max(1, total // 10)

    @property
    def errors(self) -> int:
        return self.done - self.ok

    def update(self, *, ok: bool) -> None:
        self.done += 1
        self.ok += ok
        now = self._clock()
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(
                f"{self.errors} errors, {duration(now - self._started)} elapsed", refresh=False
            )
            return
        due = self.done == self.total or self.done % self._step == 0
        if due or now - self._last_line >= COUNT_LINE_EVERY_S:
            self._last_line = now
            elapsed = now - self._started
            rate = self.done / max(elapsed, 1e-9)
            self._progress.line(
                f"progress: {self.done}/{self.total} {self.unit}s ({self.ok} ok, {self.errors} errors), "
                f"{rate:.1f}/s, {duration(elapsed)} elapsed"
            )
