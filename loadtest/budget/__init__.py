"""The time budget command (``python -m loadtest.budget``): where a service's milliseconds go, step by
step, at given loads (:mod:`loadtest.budget.cli`)."""
