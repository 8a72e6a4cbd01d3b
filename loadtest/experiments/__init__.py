"""The experiments layer: what each benchmark measures, built on :mod:`loadtest.load`.

:mod:`~loadtest.experiments.registry` lists every experiment (key, title, stage);
:mod:`~loadtest.experiments.plan` holds each mode's settings and the stages that run them.
"""
