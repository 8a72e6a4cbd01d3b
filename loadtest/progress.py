"""Progress of the long load-test commands (bench, tune, soak): what runs now, how far along, time left.

On a terminal a tqdm bar, with status lines printed above it; elsewhere (a CI log, a file) plain lines
and no bar; with ``quiet`` nothing (the command still prints its result and its errors). Everything goes
to standard error, so that standard output carries the command's result alone.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


def duration(seconds: float) -> str:
    """``seconds`` for people: 45s, 3m05s, 1h02m."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """Where a command's progress goes: ``bars`` None picks by whether ``stream`` is a terminal."""

    def __init__(
        self, *, quiet: bool = False, stream: TextIO | None = None, bars: bool | None = None
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        interactive = bars if bars is not None else _is_terminal(self.stream)
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

    @contextlib.contextmanager
    def bar(
        self, *, desc: str, total: float | None, unit: str, bar_format: str | None = None
    ) -> Iterator[Any]:
        """A tqdm bar on a terminal, a disabled one (every call a no-op) otherwise. While it is open,
        log records go through tqdm too, so that they do not tear the bar."""
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


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False
