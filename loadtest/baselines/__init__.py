"""The baselines the served models are compared against, each running the same exported files.

- :mod:`~loadtest.baselines.pipelines`: the served pipelines in this process, with no server (the
  in-process limit);
- :mod:`~loadtest.baselines.workers`: worker processes that each load the model and classify a shard
  (per-job model loading, the `central` experiment);
- :mod:`~loadtest.baselines.minimal_server`: the simplest alternative to Triton, an HTTP server answering
  one request at a time (the `minimal` experiment).

The exported files run in :mod:`tritonrepo.exported_runtime`, the runtime code of the local server's runner.
"""
