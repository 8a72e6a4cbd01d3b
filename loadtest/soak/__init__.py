"""The soak command (``python -m loadtest.soak``, :mod:`loadtest.soak.cli`): steady mixed load with every
process's memory tracked (:mod:`loadtest.soak.run`), what it shows while it runs
(:mod:`loadtest.soak.progress`), and its plot and summary (:mod:`loadtest.soak.report`)."""
