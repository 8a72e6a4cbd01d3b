"""The `profile` experiment: where the time goes in each exported model, layer by layer (ONNX) or op by op
(TorchScript).

- ONNX files: onnxruntime's own profiler (``SessionOptions.enable_profiling``) writes a JSON trace; every
  ``Node`` event's ``*_kernel_time`` is one layer's kernel, summed here over the profiled runs.
- TorchScript files: ``torch.profiler`` around the same runs; a scripted module keeps no layer names,
  so its rows are ATen operators (self CPU time).

The input is a real batch of ``batch_size`` (mixed-length sentences as one ragged batch, or preprocessed
photographs). Warm-up runs are not profiled.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import samples
from loadtest.baselines.pipelines import ExportedEncoder, ExportedModel
from loadtest.load import payloads
from loadtest.load.preprocessing import ImagePreprocessor, TextTokenizer
from tritonrepo.exported_runtime import OnnxRunner


@dataclass(kw_only=True)
class LayerTime:
    """One layer (ONNX) or ATen operator (TorchScript): its kernel time in ms per profiled run, its calls
    per run and its share of the profiled total."""

    name: str
    op: str
    total_ms: float
    calls: int
    share: float


@dataclass(kw_only=True)
class ModelProfile:
    model: str
    runtime: str
    batch_size: int
    runs: int
    total_ms: float
    top: list[LayerTime] = field(default_factory=list)
    trace_file: str | None = None


def profile_model(
    encoder: ExportedModel, *, batch_size: int, runs: int, out_dir: Path, top_n: int = 10
) -> ModelProfile:
    inputs = _real_batch(encoder, batch_size)
    # a ragged text batch is one token vector: its length is the tokens', not the sentences' count
    if encoder.runtime == "onnxruntime":
        return _profile_onnx(encoder, inputs, batch_size, runs=runs, out_dir=out_dir, top_n=top_n)
    return _profile_torch(encoder, inputs, batch_size, runs=runs, top_n=top_n)


def _real_batch(encoder: ExportedModel, batch_size: int) -> list[np.ndarray]:
    if encoder.pipeline == "text":
        texts = samples.shuffled_sentences(batch_size, seed=5)  # mixed lengths, as the server batches them
        return list(TextTokenizer(encoder.repository)(texts).arrays)
    images = payloads.image_variants(batch_size, seed=5)
    return [ImagePreprocessor(encoder.repository)(images).astype(np.float32)]


def _profile_onnx(
    encoder: ExportedModel, inputs: list[np.ndarray], batch_size: int, *, runs: int, out_dir: Path, top_n: int
) -> ModelProfile:
    out_dir.mkdir(parents=True, exist_ok=True)
    warm = ExportedEncoder(encoder.file, runtime="onnxruntime", threads=encoder.threads)
    warm(*inputs)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = str(Path(tmp) / encoder.model)
        runner = OnnxRunner(encoder.file, threads=encoder.threads, profile_prefix=prefix)
        feeds = dict(zip(runner.input_names, inputs, strict=True))
        runner.run(feeds)  # the profiled session's own first run (allocations) is dropped below
        for _ in range(runs):
            runner.run(feeds)
        trace = Path(runner.session.end_profiling()).read_bytes()
    # One event per node and run: megabytes for a quantized graph, a tenth of that compressed (Perfetto and
    # chrome://tracing open the .json.gz as it is).
    destination = out_dir / f"profile_{encoder.model}.json.gz"
    destination.write_bytes(gzip.compress(trace, mtime=0))
    top, total_ms = summarise_onnx_trace(json.loads(trace), runs=runs, skip_runs=1, top_n=top_n)
    return ModelProfile(
        model=encoder.model,
        runtime="onnxruntime",
        batch_size=batch_size,
        runs=runs,
        total_ms=total_ms,
        top=top,
        trace_file=destination.name,
    )


def summarise_onnx_trace(
    events: list[dict], *, runs: int, skip_runs: int = 0, top_n: int = 10
) -> tuple[list[LayerTime], float]:
    """Per-layer kernel time (ms per run) from an onnxruntime profile, the ``top_n`` largest first."""
    totals: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    ops: dict[str, str] = {}
    completed = 0  # a run's Node events come before its own "model_run" event
    for event in events:
        if event.get("cat") == "Session" and event.get("name") == "model_run":
            completed += 1
            continue
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith("_kernel_time"):
            continue
        if completed < skip_runs:
            continue
        name = event["name"][: -len("_kernel_time")]
        totals[name] += float(event.get("dur", 0)) / 1000.0
        calls[name] += 1
        ops[name] = str(event.get("args", {}).get("op_name", ""))
    total = sum(totals.values())
    ranked = sorted(totals, key=totals.__getitem__, reverse=True)[:top_n]
    top = [
        LayerTime(
            name=n,
            op=ops[n],
            total_ms=totals[n] / runs,
            calls=calls[n] // max(runs, 1),
            share=totals[n] / total if total else 0.0,
        )
        for n in ranked
    ]
    return top, total / runs if runs else 0.0


def _profile_torch(
    encoder: ExportedModel, inputs: list[np.ndarray], batch_size: int, *, runs: int, top_n: int
) -> ModelProfile:
    from torch.profiler import ProfilerActivity, profile

    runner = ExportedEncoder(encoder.file, runtime="torchscript", threads=encoder.threads)
    for _ in range(3):  # torch.jit specialises and optimises the graph over its first runs
        runner(*inputs)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(runs):
            runner(*inputs)
    averages = [e for e in profiler.key_averages() if e.key.startswith(("aten::", "prim::", "quantized::"))]
    total_us = sum(e.self_cpu_time_total for e in averages)
    ranked = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[:top_n]
    top = [
        LayerTime(
            name=e.key,
            op=e.key,
            total_ms=e.self_cpu_time_total / 1000.0 / runs,
            calls=e.count // runs,
            share=e.self_cpu_time_total / total_us if total_us else 0.0,
        )
        for e in ranked
    ]
    return ModelProfile(
        model=encoder.model,
        runtime="torchscript",
        batch_size=batch_size,
        runs=runs,
        total_ms=total_us / 1000.0 / runs,
        top=top,
    )
