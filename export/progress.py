"""How far an export is: models and variants as N of M, what runs now, the time elapsed and the time left.

``python -m export`` counts its work in one :class:`ExportProgress` and shows it through the project's
one progress display (:class:`tritonrepo.progress.Progress`: a bar on a terminal, a plain line per step
elsewhere, nothing with ``--quiet``, all on standard error; each model's results on standard output). The
pipeline says which model it is on (:meth:`ExportProgress.model`), what it is doing
(:meth:`ExportProgress.step`: loading a model, building, gating or timing a variant) and when a variant is
done (:meth:`ExportProgress.variant_done`).

The variants to do are estimated when the export starts, per served file, from its description's
precisions that this machine can run (:func:`export.pipeline.estimated_variants`), and corrected once a
file's plan is known (:meth:`ExportProgress.expect`; an up-to-date or failed file expects no more). The
time left is the time per variant so far times the variants left: unknown until the first variant is done.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from tritonrepo.progress import Progress, duration

BAR_FORMAT = "{desc} {bar} {n_fmt}/{total_fmt} variants{postfix}"


class ExportProgress:
    """Counts of models and variants, the step running now, elapsed and estimated time left."""

    def __init__(
        self, display: Progress | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.display = display or Progress(quiet=True)
        self._clock = clock
        self._started = clock()
        self._models: list[str] = []
        self._current = ""
        self._expected: dict[str, int] = {}  # served file -> variants it builds (estimated, then known)
        self._done: dict[str, int] = {}
        self.doing = ""
        self._bar: Any = None
        self._closing = contextlib.ExitStack()

    # -- what the pipeline reports -----------------------------------------------------------------------
    def start(self, estimates: dict[str, dict[str, int]]) -> None:
        """``estimates``: for each model in export order, its served files and the variants each builds."""
        self._models = list(estimates)
        self._expected = {key: count for files in estimates.values() for key, count in files.items()}
        self._started = self._clock()
        if self.display.bars:
            self._bar = self._closing.enter_context(
                self.display.bar(desc="", total=self.total, unit="variant", bar_format=BAR_FORMAT)
            )
        self._show()

    def model(self, name: str) -> None:
        self._current, self.doing = name, ""

    def expect(self, key: str, count: int) -> None:
        """Served file ``key`` builds ``count`` variants in all (those done included)."""
        self._expected[key] = max(count, self._done.get(key, 0))
        if self._bar is not None:
            self._bar.total = self.total
            self._show()

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
        """A line of the export's results, on standard output (below the bar, if any)."""
        self.display.result(text)

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

    def times(self) -> str:
        return f"[{duration(self.elapsed_s)} elapsed, {duration(self.left_s)} left]"

    def line(self) -> str:
        """One plain line: times, the model and variants as N of M, what runs now."""
        parts = [self.times()]
        parts += [f"{self.where()},"] if self.where() else []
        parts += [f"variants {self.done}/{self.total}"]
        parts += ["-", self.doing] if self.doing else []
        return " ".join(parts)

    def _show(self) -> None:
        """A line per step in a log (the counts move with the next step); the bar shows each change."""
        if self._bar is not None:
            self._bar.set_description_str(self.where(), refresh=False)
            self._bar.set_postfix_str(
                self.times() + (f" now: {self.doing}" if self.doing else ""), refresh=False
            )
            self._bar.refresh()
        elif self._models:
            self.display.line(self.line())

    def close(self) -> None:
        """End the bar (``contextlib.closing`` calls it at the end of a ``with`` block)."""
        self._bar = None
        self._closing.close()
