"""Precision variants of the text encoder files, and the real sentences that gate them.

The gate set is the project's corpus of realistic sentences (samples/data/sentences.txt): each variant's
sentence embeddings must agree with eager float32 PyTorch, one sentence at a time, by cosine and by
nearest-neighbour retrieval over the corpus (export/precision/gates.py). The timing workload is the same
corpus, one sentence at a time (batch 1) and in length-sorted batches of 32, fed as the ragged encoder takes
them: all token ids concatenated, and each sentence's length.

Variants, each gated on the device that serves it (export/precision/device.py): for a CPU, TorchScript fp32
and bf16 (with bf16 instructions), ONNX fp32 and int8 with per-token activation ranges and smoothed channels
(export/minilm/per_token_int8.py); for a GPU, TorchScript float32 and fp16, ONNX float32 and fp16 (float16
inside, float32 inputs and outputs), and from compute capability 8.0 TorchScript bf16, each run as its
backend serves it (export/precision/cuda_runtime.py: the ONNX file with its config's use_tf32, the TorchScript
files with libtorch's TF32 convolutions and strict products).
onnxruntime's dynamic int8 is not a variant: its activation range is taken over the whole batch, so a
sentence embedded in a batch differs from the same sentence alone, which the batch-invariance gate
refuses (docs/measurements.md).
The smoothing strength is chosen on the export's own check sentences (not the gate corpus): the one whose
embeddings stay closest to float32 there.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from tokenizers import Tokenizer

import samples
from export.common import ExportError
from export.minilm.per_token_int8 import Feed, rewrite
from export.precision import onnx_graph
from export.precision.onnx_variants import OnnxRunner, onnx_file_variants
from export.precision.selection import Batch, Capabilities, Runner, Variant
from export.precision.torchscript_variants import torchscript_file_variants

logger = logging.getLogger(__name__)

CORPUS = samples.SENTENCES_FILE
TIMING_BATCH = 32
SMOOTHING = (0.25, 0.5, 0.75)


def corpus_sentences() -> list[str]:
    """The sentence corpus (never the clients' small fallback: the gate needs the real corpus)."""
    if not CORPUS.is_file():
        raise ExportError(f"the text gate needs the sentence corpus {CORPUS}; restore it from the repository")
    return list(samples.sentences())


def ragged(encodings: list) -> tuple[np.ndarray, np.ndarray]:
    """(input ids int64 [T] of every sequence concatenated, lengths int32 [B])."""
    ids = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in encodings])
    return ids, np.array([len(e.ids) for e in encodings], dtype=np.int32)


def gate_batches(tokenizer: Tokenizer, sentences: list[str], size: int = TIMING_BATCH) -> list[Batch]:
    """The corpus in its own order, ``size`` sentences at a time (for the gate: order kept)."""
    encodings = tokenizer.encode_batch(sentences)
    return [
        (ragged(encodings[i : i + size]), len(encodings[i : i + size]))
        for i in range(0, len(encodings), size)
    ]


def timing_workload(tokenizer: Tokenizer, sentences: list[str]) -> dict[int, list[Batch]]:
    """Batch 1: each sentence alone; batch 32: length-sorted batches of 32, as length-aware batching."""
    encodings = tokenizer.encode_batch(sentences)
    ordered = sorted(encodings, key=lambda e: len(e.ids))
    return {
        1: [(ragged([e]), 1) for e in encodings],
        TIMING_BATCH: [
            (ragged(ordered[i : i + TIMING_BATCH]), TIMING_BATCH)
            for i in range(0, len(ordered) - TIMING_BATCH + 1, TIMING_BATCH)
        ],
    }


def embed(runner: Runner, batches: list[Batch]) -> np.ndarray:
    return np.concatenate([np.asarray(runner(batch), dtype=np.float32) for batch, _ in batches])


def _outputs(model: bytes | str, feeds: Sequence[Feed]) -> np.ndarray:
    session = onnx_graph.session(model)
    return np.concatenate([session.run(None, feed)[0] for feed in feeds])


def write_int8_per_token(
    source: Path, destination: Path, *, calibration: Sequence[Feed], reduce_range: bool
) -> float:
    """Write the per-token int8 rewrite of ``source`` with the smoothing (of :data:`SMOOTHING`) whose
    calibration embeddings have the highest mean cosine to float32's; return that smoothing."""
    reference = _outputs(str(source), calibration)
    best: tuple[float, float, onnx.ModelProto] | None = None
    for smoothing in SMOOTHING:
        model = onnx.load(str(source))
        rewrite(model, calibration=calibration, smoothing=smoothing, reduce_range=reduce_range)
        embeddings = _outputs(model.SerializeToString(), calibration)
        cosine = float(
            np.mean(
                (embeddings * reference).sum(1)
                / (np.linalg.norm(embeddings, axis=1) * np.linalg.norm(reference, axis=1))
            )
        )
        logger.info("int8 per token, smoothing %.2f: calibration mean cosine %.5f", smoothing, cosine)
        if best is None or cosine > best[0]:
            best = (cosine, smoothing, model)
    assert best is not None
    onnx.save(best[2], str(destination))
    return best[1]


def torchscript_encoder_variants(
    *, fp32: Callable[[Path], Runner], reduced_torchscript: Callable[[Path, str, str], Runner]
) -> list[Variant]:
    """The TorchScript encoder's variants. ``fp32`` writes and verifies the float32 file (on the CPU);
    ``reduced_torchscript(path, dtype_name, device)`` writes a TorchScript file in that dtype on that device
    (float32 on "cuda" verified as ``fp32`` is)."""
    return torchscript_file_variants(
        fp32=fp32,
        fp32_cuda=lambda path: reduced_torchscript(path, "float32", "cuda"),
        write=reduced_torchscript,
    )


def onnx_encoder_variants(
    *,
    fp32: Callable[[Path], Runner],
    onnx_runner: OnnxRunner,
    fp32_onnx_file: Callable[[], Path],
    calibration: Sequence[Feed],
    capabilities: Capabilities,
    cuda_options: Mapping[str, str],
) -> list[Variant]:
    """The ONNX encoder's variants (:func:`export.precision.onnx_variants.onnx_file_variants`), int8 per token
    calibrated on ``calibration``. ``onnx_runner(path, device, cuda_options)`` runs an ONNX file;
    ``cuda_options``: the CUDA provider options the model's config serves."""

    def feed(batch: tuple[np.ndarray, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(calibration[0], batch, strict=True))  # a feed's names are the graph's inputs

    return onnx_file_variants(
        fp32=fp32,
        fp32_onnx_file=fp32_onnx_file,
        int8=("onnx-int8-per-token", functools.partial(write_int8_per_token, calibration=calibration)),
        run=onnx_runner,
        feed=feed,
        placement_feed=lambda: calibration[0],
        capabilities=capabilities,
        cuda_options=cuda_options,
    )
