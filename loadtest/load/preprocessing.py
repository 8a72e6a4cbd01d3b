"""The served pipelines' first steps in this process: what the encoders receive from a text or an image.

- :class:`TextTokenizer`: text_tokenizer's tokenisation, with its tokenizer.json and ``max_length``, into
  the ragged batch Triton hands the text encoder (every text's ids back to back and each text's length);
- :class:`ImagePreprocessor`: image_preprocess's own ``model.py`` code and settings (decode, resize, crop,
  normalise).

Everything is read from the model repository (configs and model code), so nothing is restated here. The
load generators build their input data with them (:mod:`loadtest.load.perf_inputs`), and the baselines
run them before the exported files (:mod:`loadtest.baselines.pipelines`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tritonrepo.configs import load_model_config
from tritonrepo.served_code import load_preprocess_module, preprocess_settings

TOKENIZER_MODEL = "text_tokenizer"
PREPROCESS_MODEL = "image_preprocess"


class PipelineError(Exception):
    """A file a served pipeline needs (an exported file, a tokenizer file) is missing."""


def parameters(repository: Path, model: str) -> dict[str, str]:
    """``model``'s config parameters, by key."""
    config = load_model_config(Path(repository) / model)
    return {key: value.string_value for key, value in config.parameters.items()}


def tokenizer_file(repository: Path) -> Path:
    """The tokenizer file text_tokenizer loads; an error naming the export that writes it where it is
    missing."""
    path = (
        Path(repository) / TOKENIZER_MODEL / "1" / parameters(repository, TOKENIZER_MODEL)["tokenizer_file"]
    )
    if not path.is_file():
        raise PipelineError(f"{path} is missing; run `python -m export` first")
    return path


@dataclass(kw_only=True)
class Tokens:
    """A ragged batch as Triton hands it to the encoder: ids [T] int64 back to back, lengths [B] int32."""

    input_ids: np.ndarray
    item_lengths: np.ndarray

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.input_ids, self.item_lengths


class TextTokenizer:
    """text_tokenizer's tokenisation, from its tokenizer file and ``max_length`` parameter."""

    def __init__(self, repository: Path) -> None:
        from tokenizers import Tokenizer

        self.max_length = int(parameters(repository, TOKENIZER_MODEL)["max_length"])
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file(repository)))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)

    def lengths(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self.tokenizer.encode_batch(list(texts))]

    def __call__(self, texts: Sequence[str]) -> Tokens:
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.fromiter((t for e in encodings for t in e.ids), dtype=np.int64)
        return Tokens(input_ids=ids, item_lengths=np.array([len(e.ids) for e in encodings], dtype=np.int32))


class ImagePreprocessor:
    """image_preprocess's decode/resize/crop/normalise, with its config's settings (or those of
    ``model``, another preprocessing model of the same code, such as a scaffolded model's own copy)."""

    def __init__(self, repository: Path, model: str = PREPROCESS_MODEL) -> None:
        self.module = load_preprocess_module(Path(repository), model)
        self.settings = preprocess_settings(Path(repository), self.module, model)

    def __call__(self, images: Sequence[bytes]) -> np.ndarray:
        return self.module.preprocess(list(images), self.settings)
