"""Load tests and the benchmark: four layers that import only downwards, and three commands above them.

Layers:

- :mod:`loadtest.load`: load generators, payloads, and observers of the server and the machine;
- :mod:`loadtest.baselines`: what the server is compared against (the pipelines in-process, worker
  processes, the simplest alternative server), on the same exported files;
- :mod:`loadtest.experiments`: the experiments, their registry, each mode's plan and the stages that run it;
- :mod:`loadtest.report`: findings, tables and plots from a run's results.json.

Commands, each a folder run with ``python -m``; none imports another:

- :mod:`loadtest.bench`: runs the stages of a mode's plan and writes the report;
- :mod:`loadtest.soak`: steady mixed load for many minutes, tracking every process's memory;
- :mod:`loadtest.tune`: Triton Model Analyzer on the local CPU configuration.

What the commands show while they run (a bar on a terminal, plain lines elsewhere, nothing with
--quiet) is the project's one progress display, :mod:`tritonrepo.progress`.

tests/unit/test_code_structure.py checks the direction of every import between these folders.
"""
