"""The soak command (``python -m loadtest.soak``): steady mixed load with every process's memory tracked
(:mod:`loadtest.soak.run`), and its plot and summary (:mod:`loadtest.soak.report`)."""
