"""The load layer: what sends requests and what watches the server while they run.

Load generators (Locust users and shapes, perf_analyzer runs and their input data, worker processes
that run the pipelines in-process), the real payloads they send, and the observers (Triton's statistics,
CPU and memory of a process tree).
"""
