"""Every project path, anchored to the project root, so that a command behaves the same from any folder.

The root is the folder that holds this package (a checkout, or the image folder the Dockerfiles copy the
code into). Nothing else in the project builds a path from the working folder.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What the exporter reads: one YAML description per served model.
DESCRIPTIONS = ROOT / "model_descriptions"
# What NVIDIA's container serves, configs and served Python code; the exporter writes its files here.
REPOSITORY = ROOT / "model_repository"
DEPLOY = ROOT / "deploy"

# Everything a command writes and can rebuild lives under BUILD (and REPORTS for measurements).
BUILD = ROOT / "build"
# The repository derived from REPOSITORY for the pip wheel's tritonserver.
LOCAL_REPOSITORY = BUILD / "local_repository"
# The repository for NVIDIA's container on a CPU host (`python -m tritonrepo cpu-copy`).
CPU_REPOSITORY = BUILD / "cpu_repository"
# The gate and timing records of every exported precision variant.
PRECISION_RECORDS = BUILD / "precision"
# The Triton container's onnxruntime, in its own environment, to gate every ONNX file with.
SERVING_RUNTIME = BUILD / "serving-runtime"
LOGS = BUILD / "logs"
REPORTS = ROOT / "reports"
