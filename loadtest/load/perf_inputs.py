"""perf_analyzer ``--input-data`` files with real data, built from a model's config.pbtxt.

perf_analyzer's own data is zeros or random bytes: a random "image" fails to decode and random token
ids fall outside the vocabulary. So every model gets real data, chosen by what its config says its
requests carry (:func:`tritonrepo.configs.input_kind`):

- image bytes or text (one STRING input IMAGE_BYTES or TEXT): encoded photographs or sentences;
- anything else, where the model's description names check inputs (a ``torch_module``'s
  ``module.check_inputs``): those rows, real rows of the user's data set (loadtest/load/model_rows.py);
- token ids (one INT64 input of variable length): real sentences tokenised exactly as text_tokenizer
  does, each entry at its own length;
- pixels (one FP32 input [3, H, W]): real photographs through image_preprocess's own code;
- any other tensors: random values of each input's datatype and dims, integers within the range the
  export recorded (model_rows.py says which inputs are refused).

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
from loadtest.load import model_rows, payloads
from loadtest.load.model_rows import Row
from loadtest.load.preprocessing import ImagePreprocessor, TextTokenizer
from tritonrepo.configs import input_kind, load_model_config

# The data each kind of input gets (tritonrepo.configs.INPUT_KINDS), where no description names rows.
DATA = {
    "image": "images",
    "text": "sentences",
    "tokens": "tokens",
    "pixels": "pixels",
    "tensors": "random rows",
}
DESCRIBED = "described rows"  # the rows a model's description names, for any kind but image and text
# The rows of one input-data file: at least the requested entries, at most what fits this many bytes.
MAX_ROWS_BYTES = 16 * 2**20
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
    config, kind, rows = _request_rows(model, Path(repository), entries, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    entries_json = [{name: _json_value(value) for name, value in row.items()} for row in rows]
    path.write_text(json.dumps({"data": entries_json}))
    return InputData(path=path, entries=len(rows), kind=kind, shape_args=_shape_args(config, entries_json))


def request_rows(model: str, repository: Path, *, entries: int = 16, seed: int = 0) -> list[Row]:
    """The rows :func:`write_input_data` writes, as arrays: one request's inputs each, ``{input name: array
    of the input's dims}`` without the batch axis (a STRING input as an object array of bytes or str)."""
    return _request_rows(model, Path(repository), entries, seed)[2]


def _request_rows(
    model: str, repository: Path, entries: int, seed: int
) -> tuple[ModelConfig, str, list[Row]]:
    config = load_model_config(repository / model)
    config.name = config.name or model  # Triton's default: the folder's name
    kind = data_kind(model, config)
    return config, kind, _ROWS[kind](config, repository, entries, seed)


def data_kind(model: str, config: ModelConfig) -> str:
    """Which data ``model`` gets: images or sentences for an image or text input, else the rows its
    description names where it names some, else what its inputs' shapes call for."""
    kind = input_kind(config)
    if kind not in ("image", "text") and model_rows.describing(model) is not None:
        return DESCRIBED
    return DATA[kind]


def serialise_bytes(data: bytes) -> dict[str, str]:
    """Triton's BYTES wire form (length-prefixed), base64-encoded for perf_analyzer's JSON."""
    return {"b64": base64.b64encode(struct.pack("<I", len(data)) + data).decode("ascii")}


def _json_value(value: np.ndarray) -> object:
    """One input of a row as perf_analyzer's JSON takes it: texts as a list, an encoded file as its
    serialised bytes, any other array as ``b64`` of its raw little-endian bytes with its shape."""
    if value.dtype != np.object_:
        return {
            "b64": base64.b64encode(np.ascontiguousarray(value).tobytes()).decode("ascii"),
            "shape": list(value.shape),
        }
    items = value.reshape(-1).tolist()
    if all(isinstance(item, str) for item in items):
        return items
    (only,) = items  # one encoded file per request
    return serialise_bytes(only)


def _images(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[Row]:
    name = config.input[0].name
    return [{name: _objects(image)} for image in payloads.image_variants(entries, seed=seed)]


def _objects(*items: bytes | str) -> np.ndarray:
    """A STRING input of one row: an object array of ``items``."""
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array


def _sentences(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[Row]:
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
    return [{name: _objects(text)} for text in samples.shuffled_sentences(count, seed=seed)]


def _tokens(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[Row]:
    """Real sentences' token ids, each entry at its own length (the encoder batches them raggedly)."""
    tokenize = TextTokenizer(repository)
    name = config.input[0].name
    texts = samples.shuffled_sentences(max(entries, len(samples.sentences())), seed=seed)
    return [{name: tokenize([text]).input_ids} for text in texts]


def _pixels(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[Row]:
    preprocess = ImagePreprocessor(repository)
    name = config.input[0].name
    pixels = preprocess(payloads.image_variants(entries, seed=seed)).astype(np.float32)
    return [{name: row} for row in pixels]


def _described(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[Row]:
    """The description's check rows, shuffled: an odd count of at least ``entries`` and at most every
    row (fewer where they would not fit :data:`MAX_ROWS_BYTES`), as for sentences (:func:`_sentences`)."""
    rows = model_rows.described_rows(config.name, config)
    assert rows is not None  # data_kind chose them
    return _entries(rows, entries, seed)


def _random(config: ModelConfig, repository: Path, entries: int, seed: int) -> list[Row]:
    bounds = model_rows.recorded_bounds(repository, config)
    return _entries(model_rows.random_rows(config, bounds, entries, seed=seed), entries, seed)


def _entries(rows: list[Row], entries: int, seed: int) -> list[Row]:
    row_bytes = max(1, sum(value.nbytes for value in rows[0].values()))
    count = max(entries, min(len(rows), MAX_ROWS_BYTES // row_bytes))
    count += 1 - count % 2
    order = np.random.default_rng(seed).permutation(len(rows))
    return [rows[order[index % len(rows)]] for index in range(count)]


_ROWS = {
    "images": _images,
    "sentences": _sentences,
    "tokens": _tokens,
    "pixels": _pixels,
    DESCRIBED: _described,
    "random rows": _random,
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
