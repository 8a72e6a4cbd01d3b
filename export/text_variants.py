"""Precision variants of the text encoder files, and the real sentences that gate them.

The gate set is the project's corpus of realistic sentences (clients/data/sentences.txt): each variant's
sentence embeddings must agree with eager float32 PyTorch, one sentence at a time, by cosine and by
nearest-neighbour retrieval over the corpus (export/gates.py). The timing workload is the same corpus, one
sentence at a time (batch 1) and in length-sorted batches of 32, fed as the ragged encoder takes them:
all token ids concatenated, and each sentence's length.

Variants: TorchScript fp32, bf16 (CPU with bf16 instructions, and GPU), fp16 (GPU); ONNX fp32 and int8
(dynamic, per-channel weights). Plain int8 of every matrix product loses too much for retrieval (measured
on this corpus: mean cosine 0.994, 90% of neighbours kept), so the int8 variant leaves the feed-forward
blocks in float32, where BERT's activation outliers are, and quantizes the attention projections only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from clients import samples
from export.common import ExportError
from export.onnx_variants import nodes_with_weight_dim, quantize_int8_dynamic
from export.precision import Batch, Capabilities, Runner, Variant

CORPUS = samples.SENTENCES_FILE
TIMING_BATCH = 32


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


def int8_exclusions(fp32_onnx: Path, *, intermediate_size: int) -> list[str]:
    """The products int8 leaves in float32: the feed-forward blocks of every layer (the Gemm/MatMul
    nodes whose weight has the intermediate size, 1536 here: up and down projection)."""
    nodes = nodes_with_weight_dim(fp32_onnx, op_types=("Gemm", "MatMul"), dim=intermediate_size)
    if not nodes:
        raise ExportError(
            f"{fp32_onnx}: no Gemm/MatMul with a weight of dimension {intermediate_size}; cannot tell the "
            "feed-forward blocks apart, so int8 would quantize them too"
        )
    return nodes


def encoder_variants(
    kind: str,
    *,
    fp32: Callable[[Path], Runner],
    reduced_torchscript: Callable[[Path, str, str], Runner],
    onnx_runner: Callable[[Path], Runner],
    fp32_onnx_file: Callable[[], Path],
    intermediate_size: int,
    capabilities: Capabilities,
) -> list[Variant]:
    """The variants of one encoder file. ``fp32`` writes and verifies the float32 file;
    ``reduced_torchscript(path, dtype_name, device)`` writes a bf16/fp16 TorchScript file."""
    if kind == "onnx":

        def int8(path: Path) -> Runner:
            source = fp32_onnx_file()
            quantize_int8_dynamic(
                source,
                path,
                exclude=int8_exclusions(source, intermediate_size=intermediate_size),
                reduce_range=not capabilities.cpu_vnni,
            )
            return onnx_runner(path)

        return [
            Variant(name="onnx-fp32", precision="fp32", device="cpu", build=fp32),
            Variant(name="onnx-int8-dynamic-attention", precision="int8", device="cpu", build=int8),
        ]

    def reduced(dtype: str, device: str) -> Callable[[Path], Runner]:
        return lambda path: reduced_torchscript(path, dtype, device)

    return [
        Variant(name="torchscript-fp32", precision="fp32", device="cpu", build=fp32),
        Variant(name="torchscript-bf16", precision="bf16", device="cpu", build=reduced("bfloat16", "cpu")),
        Variant(
            name="torchscript-bf16-cuda", precision="bf16", device="cuda", build=reduced("bfloat16", "cuda")
        ),
        Variant(
            name="torchscript-fp16-cuda", precision="fp16", device="cuda", build=reduced("float16", "cuda")
        ),
    ]
