"""Locust load shapes: steady, step ramp and spike, chosen with ``LOADTEST_SHAPE``.

    LOADTEST_SHAPE=step locust -f loadtest/load/locustfile.py --headless -u 32 -r 8 -t 60s --host ...

Each shape reads Locust's own ``-u`` (peak users), ``-r`` (spawn rate, users/s) and ``-t`` (run time)
(``use_common_options``), so a shape changes the form of the load, not its size (see
:func:`loadtest.load.profiles.users_at`): ``steady`` keeps ``-u`` users; ``step`` climbs in
``LOADTEST_STEPS`` equal steps (default 4); ``spike`` holds a quarter of ``-u`` and jumps to all of them
for the middle fifth of the run, started as fast as Locust can.

Without ``LOADTEST_SHAPE`` the locustfile defines no shape and Locust's ``-u``/``-r``/``-t`` apply as usual.
"""

from __future__ import annotations

import os

from locust import LoadTestShape

from loadtest.load.profiles import shape_name, users_at

STEPS_VARIABLE = "LOADTEST_STEPS"
DEFAULT_RUN_TIME_S = 60.0


class _ProfileShape(LoadTestShape):
    abstract = True
    use_common_options = True
    name = "steady"

    def tick(self) -> tuple[int, float] | None:
        options = self.runner.environment.parsed_options if self.runner else None
        users = int(getattr(options, "num_users", None) or 1)
        rate = float(getattr(options, "spawn_rate", None) or users)
        run_time_s = float(getattr(options, "run_time", None) or DEFAULT_RUN_TIME_S)
        wanted = users_at(
            self.name, elapsed_s=self.get_run_time(), users=users, run_time_s=run_time_s, steps=step_count()
        )
        if wanted is None:
            return None
        return wanted, max(rate, float(users)) if self.name == "spike" else rate


class SteadyShape(_ProfileShape):
    abstract = False
    name = "steady"


class StepShape(_ProfileShape):
    abstract = False
    name = "step"


class SpikeShape(_ProfileShape):
    abstract = False
    name = "spike"


SHAPES: dict[str, type[LoadTestShape]] = {"steady": SteadyShape, "step": StepShape, "spike": SpikeShape}


def step_count() -> int:
    text = os.environ.get(STEPS_VARIABLE, "4")
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{STEPS_VARIABLE} must be a positive whole number of steps, got {text!r}")
    return int(text)


def selected_shape() -> type[LoadTestShape] | None:
    """The shape class named by LOADTEST_SHAPE, or None when it is unset."""
    name = shape_name(dict(os.environ))
    return SHAPES[name] if name else None
