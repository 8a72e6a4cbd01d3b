"""Load tests and the benchmark, in three layers that import only downwards:

- :mod:`loadtest.load`: load generators, payloads and observers;
- :mod:`loadtest.experiments`: the experiments, their registry and each mode's plan;
- :mod:`loadtest.report`: findings, tables and plots from a run's results.json;

and the entry point :mod:`loadtest.bench` (``python -m loadtest.bench``), which runs the stages and
writes the report.
"""
