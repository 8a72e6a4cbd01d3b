"""perf_analyzer ``--input-data`` files with real data, built from a model's config.pbtxt.

perf_analyzer's own data is zeros or random bytes: a random "image" fails to decode and random token
ids fall outside the vocabulary. So every public model gets real data, chosen from the shape of its
inputs as its config declares them:

- one STRING input: encoded photographs (an image input) or sentences (a text input);
- two INT64 inputs with a variable last dim: token ids and attention mask of real sentences, tokenised
  and padded exactly as text_tokenizer does; perf_analyzer needs one shape per input, so the sentences
  of the most common length bucket are used;
- one FP32 input [3, H, W]: real photographs through image_preprocess's own code;
- any other FP32 input: normal random vectors (what l2_normalize is for).

BYTES data is written as ``b64`` of Triton's serialised form (a 4-byte little-endian length, then the
bytes); other types as ``b64`` of the raw little-endian array.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

import samples
from loadtest.load import payloads
from loadtest.load.preprocessing import ImagePreprocessor, TextTokenizer
from tritonrepo.configs import load_model_config

# Which real data a STRING input takes, by the name its config gives it.
STRING_PAYLOADS = {"IMAGE_BYTES": "images", "TEXT": "sentences"}
_TYPES = model_config_pb2.DataType


@dataclass(kw_only=True)
class InputData:
    """A written input-data file and the ``--shape`` arguments perf_analyzer needs beside it."""

    path: Path
    entries: int
    kind: str
    shape_args: list[str] = field(default_factory=list)


def write_input_data(
    model: str, repository: Path, path: Path, *, entries: int = 16, seed: int = 0
) -> InputData:
    """Write real data for ``model`` (read from ``repository/model/config.pbtxt``) to ``path``."""
    config = load_model_config(Path(repository) / model)
    kind = input_kind(config)
    rows = _ROWS[kind](config, Path(repository), entries, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"data": rows}))
    return InputData(path=path, entries=len(rows), kind=kind, shape_args=_shape_args(config, rows))


def input_kind(config: ModelConfig) -> str:
    inputs = list(config.input)
    types = [i.data_type for i in inputs]
    if len(inputs) == 1 and types[0] == _TYPES.TYPE_STRING:
        payload = STRING_PAYLOADS.get(inputs[0].name)
        if payload is None:
            raise ValueError(
                f"{config.name}: no real data is known for the STRING input {inputs[0].name!r}; "
                f"known inputs: {', '.join(STRING_PAYLOADS)} (add it to STRING_PAYLOADS)"
            )
        return payload
    if len(inputs) == 1 and types == [_TYPES.TYPE_INT64] and inputs[0].allow_ragged_batch:
        return "tokens"  # token ids of a ragged-batched encoder
    if len(inputs) == 1 and types[0] == _TYPES.TYPE_FP32 and len(inputs[0].dims) == 3:
        return "pixels"
    if all(t == _TYPES.TYPE_FP32 for t in types) and all(d > 0 for i in inputs for d in i.dims):
        return "vectors"
    raise ValueError(f"{config.name}: no real data generator fits its inputs {[i.name for i in inputs]}")


def serialise_bytes(data: bytes) -> dict[str, str]:
    """Triton's BYTES wire form (length-prefixed), base64-encoded for perf_analyzer's JSON."""
    return {"b64": base64.b64encode(struct.pack("<I", len(data)) + data).decode("ascii")}


def _raw(array: np.ndarray) -> dict[str, object]:
    return {
        "b64": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii"),
        "shape": list(array.shape),
    }


def _images(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[dict]:
    name = config.input[0].name
    return [{name: serialise_bytes(image)} for image in payloads.image_variants(entries, seed=seed)]


def _sentences(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[dict]:
    """At least the whole corpus, shuffled, so that concurrent requests carry unrelated lengths.

    perf_analyzer (synchronous, one thread per request in flight) gives thread t the entries t, t+C,
    t+2C... (modulo the entry count E) at concurrency C. With E=16 and C=32 every thread sent one
    sentence forever, and threads whose requests were batched together (same length) sent same-length
    texts again together: a feedback loop that made consecutive arrivals share a length bucket far more
    often than by chance and inflated the encoder's batches (docs/measurements.md). An odd count of at
    least the corpus, coprime with power-of-two concurrencies, makes each thread walk through all of
    it; consecutive arrivals then share a bucket at the chance rate.
    """
    name = config.input[0].name
    count = max(entries, len(samples.sentences()))
    count += 1 - count % 2
    return [{name: [text]} for text in samples.shuffled_sentences(count, seed=seed)]


def _tokens(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[dict]:
    """Real sentences' token ids, each entry at its own length (the encoder batches them raggedly)."""
    tokenize = TextTokenizer(repository)
    name = config.input[0].name
    texts = samples.shuffled_sentences(max(entries, len(samples.sentences())), seed=seed)
    return [{name: _raw(tokenize([text]).input_ids)} for text in texts]


def _pixels(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[dict]:
    preprocess = ImagePreprocessor(repository)
    name = config.input[0].name
    pixels = preprocess(payloads.image_variants(entries, seed=seed)).astype(np.float32)
    return [{name: _raw(row)} for row in pixels]


def _vectors(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[dict]:
    rows: list[dict] = [{} for _ in range(entries)]
    for position, tensor in enumerate(config.input):
        width = int(np.prod(list(tensor.dims)))
        values = payloads.vectors(entries, width, seed=seed + position).reshape(entries, *tensor.dims)
        for row, value in zip(rows, values, strict=True):
            row[tensor.name] = _raw(value)
    return rows


_ROWS = {
    "images": _images,
    "sentences": _sentences,
    "tokens": _tokens,
    "pixels": _pixels,
    "vectors": _vectors,
}


def _shape_args(config: ModelConfig, rows: list[dict]) -> list[str]:
    """``--shape name:dims`` for each variable-size input whose entries share one shape (a ragged input's
    entries carry their own shapes)."""
    args = []
    for tensor in config.input:
        fixed = not tensor.allow_ragged_batch and tensor.data_type != _TYPES.TYPE_STRING
        if fixed and any(d < 0 for d in tensor.dims):
            shape = rows[0][tensor.name]["shape"]
            args.append(f"--shape={tensor.name}:{','.join(str(d) for d in shape)}")
    return args
