"""Tokenise UTF-8 texts for all-MiniLM-L6-v2, each at its own length.

TEXT [b, 1] (bytes) -> INPUT_IDS [b, L] int64, L the longest text of the request (a request of one
text is never padded; the texts of a multi-text request are padded with [PAD], which the encoder
masks). Every text of every request in one execute() is tokenised in one `encode_batch` call; the
results are split back per request. Requests of different lengths leave with different shapes: the
encoder batches them raggedly (docs/text-batching.md).

- Texts longer than ``max_length`` tokens are truncated to their first ``max_length`` tokens
  ([CLS] and [SEP] included), as sentence-transformers does.
- The empty string becomes [CLS] [SEP]: a valid, if uninformative, embedding.
- A text that is not valid UTF-8, or larger than ``max_text_bytes``, fails its own request with a
  message naming TEXT and the problem; the other requests of the batch are answered as usual.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from pybackend_batching import InvalidInput, RequestBatcher
from pybackend_parameters import ModelParameters, ParameterError
from tokenizers import Encoding, Tokenizer


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        parameters = ModelParameters(config)
        self.max_length = parameters.integer("max_length", minimum=1)
        self.max_text_bytes = parameters.integer("max_text_bytes", minimum=1)
        buckets = parameters.integers("length_buckets", default=())
        self.buckets = check_buckets(buckets, max_length=self.max_length)
        self.input_name = config["input"][0]["name"]
        if len(config["output"]) != 1:
            raise pb_utils.TritonModelException("text_tokenizer has one output: the token ids")

        path = Path(args["model_repository"]) / args["model_version"] / parameters.text("tokenizer_file")
        if not path.is_file():
            raise pb_utils.TritonModelException(f"{path} is missing; write it with `python -m export`")
        self.tokenizer = Tokenizer.from_file(str(path))
        padding = self.tokenizer.padding
        self.pad_id = padding["pad_id"] if padding else 0
        self.tokenizer.no_padding()  # the shipped file pads every text to 128 tokens
        self.tokenizer.enable_truncation(max_length=self.max_length)
        self.batcher = RequestBatcher(config, prepare=self._decode, run=self._tokenize, finish=self._pad)

    def execute(self, requests: list) -> list:
        return self.batcher.execute(requests)

    def _tokenize(self, texts: list[str]) -> list[Encoding]:
        return self.tokenizer.encode_batch(texts)  # every text of every request in one call

    def _pad(self, encodings: list[Encoding]) -> np.ndarray:
        return pad([e.ids for e in encodings], self.buckets, pad_id=self.pad_id)

    def _decode(self, array: np.ndarray) -> list[str]:
        items = array.reshape(-1)
        texts = []
        for position, item in enumerate(items):
            data = item if isinstance(item, bytes) else str(item).encode("utf-8")
            where = f" (text {position} of the request)" if len(items) > 1 else ""
            if len(data) > self.max_text_bytes:
                raise InvalidInput(
                    f"{self.input_name}: {len(data)} bytes is over the limit of {self.max_text_bytes}"
                    f"{where}; the model reads only the first {self.max_length} tokens, so send a shorter "
                    "text or split it"
                )
            try:
                texts.append(data.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise InvalidInput(f"{self.input_name}: not valid UTF-8 at byte {e.start}{where}") from e
        return texts


def check_buckets(buckets: tuple[int, ...], *, max_length: int) -> tuple[int, ...]:
    """Ascending lengths (the last must be max_length); () means no buckets."""
    if buckets and (list(buckets) != sorted(set(buckets)) or buckets[0] < 1 or buckets[-1] != max_length):
        raise ParameterError(
            f"length_buckets must ascend from 1 or more and end at max_length {max_length}, got {buckets}"
        )
    return buckets


def pad(sequences: Sequence[Sequence[int]], buckets: Sequence[int], *, pad_id: int) -> np.ndarray:
    """int64 [len(sequences), width]: each row a sequence followed by ``pad_id``; width is the longest
    sequence, or the smallest bucket that holds it when buckets are configured."""
    width = max(len(s) for s in sequences)
    width = next((b for b in buckets if b >= width), width)
    ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = sequence
    return ids
