"""The onnxruntime that serves the exported ONNX files: the one in NVIDIA's Triton container."""

from __future__ import annotations

SERVING_ONNXRUNTIME = "1.19.2"  # Triton 24.10's onnxruntime backend (deploy/versions.env)
