"""The arithmetic of the Locust scenarios, free of Locust (importing locust monkey-patches the process).

- :class:`Mix`: the ``--mix`` option, e.g. ``text:3,image:1``;
- :func:`users_at`: how many users a shape wants at a moment of the run (steady, step, spike);
- :func:`shape_name`: the shape named by ``LOADTEST_SHAPE``, checked.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

TASKS = ("text", "image")
SHAPE_NAMES = ("steady", "step", "spike")
SHAPE_VARIABLE = "LOADTEST_SHAPE"


@dataclass(kw_only=True, frozen=True)
class Mix:
    """How often each task runs, e.g. ``text:3,image:1``."""

    weights: dict[str, int]

    @classmethod
    def parse(cls, text: str) -> Mix:
        weights: dict[str, int] = {}
        for part in (p.strip() for p in text.split(",") if p.strip()):
            task, _, weight = part.partition(":")
            if task not in TASKS or not weight.strip().isdigit():
                raise ValueError(
                    f"--mix must look like 'text:1,image:1' with tasks {', '.join(TASKS)}; got {text!r}"
                )
            weights[task] = int(weight)
        if not any(weights.values()):
            raise ValueError(f"--mix gives every task weight 0: {text!r}")
        return cls(weights=weights)

    def choose(self, rng: random.Random) -> str:
        tasks = [t for t, w in self.weights.items() if w > 0]
        return rng.choices(tasks, weights=[self.weights[t] for t in tasks])[0]


def shape_name(environ: dict[str, str]) -> str | None:
    """The shape named by LOADTEST_SHAPE (lower case), or None when it is unset or empty."""
    name = environ.get(SHAPE_VARIABLE, "").strip().lower()
    if not name:
        return None
    if name not in SHAPE_NAMES:
        raise ValueError(f"{SHAPE_VARIABLE} must be one of {', '.join(SHAPE_NAMES)} (or unset), got {name!r}")
    return name


def users_at(shape: str, *, elapsed_s: float, users: int, run_time_s: float, steps: int = 4) -> int | None:
    """Users wanted ``elapsed_s`` into the run, or None when the run is over.

    steady: ``users`` throughout; step: ``steps`` equal steps up to ``users``; spike: a quarter of
    ``users``, then all of them for the middle fifth of the run (40% to 60%), then a quarter again.
    """
    if elapsed_s >= run_time_s:
        return None
    if shape == "steady":
        return users
    if shape == "step":
        step = min(steps - 1, int(elapsed_s / (run_time_s / steps)))
        return max(1, round(users * (step + 1) / steps))
    if shape == "spike":
        return users if 0.4 * run_time_s <= elapsed_s < 0.6 * run_time_s else max(1, users // 4)
    raise ValueError(f"unknown shape {shape!r}; expected one of {', '.join(SHAPE_NAMES)}")
