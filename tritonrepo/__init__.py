"""The Triton model repository, in one place, below everything that reads one.

- :mod:`tritonrepo.paths`: every project path, anchored to the project root.
- :mod:`tritonrepo.commands`: the conventions every command line follows (help, defaults, exit codes).
- :mod:`tritonrepo.errors`: the one error of a repository, whoever finds it.
- :mod:`tritonrepo.configs`: every config.pbtxt parsed with Triton's own schema (``model_config_pb2``), and
  the one rule for sharing cores between a model's instances.
- :mod:`tritonrepo.files`: where exported files live and which runtime runs each.
- :mod:`tritonrepo.tensors`: a served tensor (name, Triton datatype, dims), as the export and the clients
  state it.
- :mod:`tritonrepo.served_code`: the helpers Python models link, and loading served code outside Triton.
- :mod:`tritonrepo.derive`, :mod:`tritonrepo.local`: the local repository for the pip wheel's tritonserver,
  whose native models run in :mod:`tritonrepo.native_runner`.
- :mod:`tritonrepo.exported_runtime`: onnxruntime and torch.jit sessions of the exported files, the one
  runtime code of the native runner and of the benchmark's in-process baselines.
- :mod:`tritonrepo.container_cpu`: the copy for NVIDIA's container on a CPU host.
- :mod:`tritonrepo.cpu_overlay`: CPU settings a tuning adopted, applied by the derivations.
- :mod:`tritonrepo.clones`: the benchmark's clones, each changing one field.
- :mod:`tritonrepo.writer`: the one writer of every derived repository above (files linked or copied,
  one header, one rule for what is left out).
- :mod:`tritonrepo.access`: the APIs every server restricts and the header that carries their key.
- :mod:`tritonrepo.progress`: the one progress display of every long command (export, load tests, batch job).

Export, the launcher (tritonlocal), the clients, loadtest and the demo build on this package, which
imports none of them. ``python -m tritonrepo`` writes the derived repositories.
"""
