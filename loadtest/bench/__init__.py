"""The benchmark command (``python -m loadtest.bench``): runs the experiments of a mode's plan and writes
the report (:mod:`loadtest.bench.run`)."""
