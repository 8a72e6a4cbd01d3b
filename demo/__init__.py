"""The main job: ``python -m demo`` (or ``make demo``) serves the real models locally, sends real requests
and shows what batching achieved. See :mod:`demo.__main__`."""
