"""The load layer: what sends requests and what watches the server while they run.

Load generators (Locust users and shapes, perf_analyzer runs and their input data, a closed-loop JSON
generator), the real payloads they send and the served pipelines' first steps that turn them into the
encoders' inputs, and the observers (Triton's statistics, CPU and memory of a process tree).
"""
