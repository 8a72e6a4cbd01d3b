"""Precision selection: which variants this machine runs (device.py, cuda_runtime.py, placement.py),
the gates that judge them (gates.py), the serving runtime they are gated in (serving_runtime.py,
serving_worker.py), their timing (timing.py, onnx_graph.py), the ONNX rewrites they share
(onnx_variants.py), the choice of the fastest that passes (selection.py) and its records (records.py).
"""
