"""The experiments layer: what each benchmark measures, built on :mod:`loadtest.load`.

:mod:`~loadtest.experiments.registry` lists every experiment (key, title, stage);
:mod:`~loadtest.experiments.plans` declares each mode's settings and the clones its experiments compare;
:mod:`~loadtest.experiments.stages` runs them.
"""
