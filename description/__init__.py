"""Model descriptions and what is generated from them, without torch.

A model is described once, in ``model_descriptions/<name>.yaml``: its kind, its weights, its precisions
and what Triton serves for it. This package parses and checks every section of a description
(:mod:`description.model`, :mod:`description.module_spec`, :mod:`description.config_spec`), holds the
project-wide rules of a served config (:mod:`description.config_rules`), generates each config.pbtxt
(:mod:`description.generated_configs`), loads the user's callables a description names
(:mod:`description.module_code`) and runs the scripts that produce local weights
(:mod:`description.produced_weights`). The export, the load tests, the scaffolds and the examples read
descriptions only through it; it imports no torch, so reading a description costs no exporter.
"""
