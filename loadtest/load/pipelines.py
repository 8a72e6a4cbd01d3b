"""The served pipelines run in-process, with no server: the same files, the same code, the same settings.

- :class:`TextPipeline`: tokenise with text_tokenizer's tokenizer.json and ``max_length``, hand the
  exported encoder (onnxruntime or torch.jit) the ragged batch Triton would (every text's ids back to
  back and each text's length); the encoder pools and normalises.
- :class:`ImagePipeline`: decode/resize/crop/normalise with image_preprocess's own ``model.py`` code and
  settings, run the exported classifier, softmax and top-k.

Everything is read from the model repository (configs and model code), so nothing is restated here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from google.protobuf import json_format

from tritonrepo.configs import load_model_config
from tritonrepo.exported_runtime import RUNTIMES, OnnxRunner, TorchScriptRunner
from tritonrepo.files import exported_file
from tritonrepo.served_code import load_served_module

TOKENIZER_MODEL = "text_tokenizer"
PREPROCESS_MODEL = "image_preprocess"
PIPELINES = ("text", "image")


class PipelineError(Exception):
    """An exported file or a piece of served code is missing."""


def parameters(repository: Path, model: str) -> dict[str, str]:
    config = load_model_config(Path(repository) / model)
    return {key: value.string_value for key, value in config.parameters.items()}


def served_file(repository: Path, model: str) -> Path:
    """The exported file ``model`` of ``repository`` serves (:func:`tritonrepo.files.exported_file` of its
    config); an error naming the export that writes it where it is missing."""
    path = exported_file(Path(repository) / model, load_model_config(Path(repository) / model))
    if not path.is_file():
        raise PipelineError(f"{path} is missing; run `python -m export` first")
    return path


@dataclass(kw_only=True, frozen=True)
class ExportedModel:
    """An exported encoder as the in-process experiments run it: which file, what it reads, how many threads.

    ``pipeline`` is ``"text"`` (a ragged batch of token ids) or ``"image"`` (preprocessed photographs).
    """

    repository: Path
    model: str
    runtime: str
    pipeline: str
    threads: int

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES or self.pipeline not in PIPELINES:
            raise ValueError(
                f"runtime must be one of {RUNTIMES} and pipeline one of {PIPELINES}, "
                f"got {self.runtime!r} and {self.pipeline!r}"
            )

    @property
    def file(self) -> Path:
        return served_file(self.repository, self.model)


class ExportedEncoder:
    """An exported encoder (text or image) called with its inputs in the file's order; returns its first
    output. The file runs in :mod:`tritonrepo.exported_runtime`, the runtime code of the local server's
    runner, with ``threads`` intra-op threads, on the machine's GPU where there is one, else on the CPU.

    ``optimized_execution`` off is the libtorch backend's ``DISABLE_OPTIMIZED_EXECUTION``: TorchScript runs
    without optimized execution and without the profiling executor; on, the process's setting stays.
    """

    def __init__(
        self,
        path: Path,
        *,
        runtime: str,
        threads: int,
        optimized_execution: bool = True,
    ) -> None:
        self.runner: OnnxRunner | TorchScriptRunner
        if runtime == "onnxruntime":
            self.runner = OnnxRunner(path, threads=threads)
        elif runtime == "torchscript":
            self.runner = TorchScriptRunner(
                path,
                threads=threads,
                optimized=optimized_execution,
                profiling=None if optimized_execution else False,
            )
        else:
            raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        return self.runner.run(dict(zip(self.runner.input_names, arrays, strict=True)))[0]


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

        params = parameters(repository, TOKENIZER_MODEL)
        path = Path(repository) / TOKENIZER_MODEL / "1" / params["tokenizer_file"]
        if not path.is_file():
            raise PipelineError(f"{path} is missing; run `python -m export` first")
        self.max_length = int(params["max_length"])
        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)

    def lengths(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self.tokenizer.encode_batch(list(texts))]

    def __call__(self, texts: Sequence[str]) -> Tokens:
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.fromiter((t for e in encodings for t in e.ids), dtype=np.int64)
        return Tokens(input_ids=ids, item_lengths=np.array([len(e.ids) for e in encodings], dtype=np.int32))


class TextPipeline:
    """Texts -> unit-length sentence embeddings, one ragged batch per call."""

    def __init__(self, repository: Path, *, encoder_model: str, runtime: str, threads: int) -> None:
        self.tokenize = TextTokenizer(repository)
        settings = parameters(repository, encoder_model)
        self.encoder = ExportedEncoder(
            served_file(repository, encoder_model),
            runtime=runtime,
            threads=threads,
            optimized_execution=settings.get("DISABLE_OPTIMIZED_EXECUTION", "false").lower() != "true",
        )

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder(*self.tokenize(texts).arrays)


class ImagePreprocessor:
    """image_preprocess's decode/resize/crop/normalise, with its config's settings."""

    def __init__(self, repository: Path) -> None:
        path = Path(repository) / PREPROCESS_MODEL / "1" / "model.py"
        self.module = load_served_module(path, name="_served_image_preprocess_code")
        config = load_model_config(Path(repository) / PREPROCESS_MODEL)
        as_json = json.loads(json_format.MessageToJson(config, preserving_proto_field_name=True))
        self.settings = self.module.PreprocessSettings.from_model_config(as_json)

    def __call__(self, images: Sequence[bytes]) -> np.ndarray:
        return self.module.preprocess(list(images), self.settings)


class ImagePipeline:
    """Encoded images -> (top-k class ids, probabilities), one batch per call."""

    def __init__(
        self, repository: Path, *, classifier_model: str, runtime: str, threads: int, top_k: int = 5
    ) -> None:
        self.preprocess = ImagePreprocessor(repository)
        path = served_file(repository, classifier_model)
        self.classifier = ExportedEncoder(path, runtime=runtime, threads=threads)
        self.top_k = top_k

    def __call__(self, images: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        logits = self.classifier(self.preprocess(images).astype(np.float32, copy=False))
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = shifted / shifted.sum(axis=1, keepdims=True)
        ids = np.argsort(-probabilities, axis=1)[:, : self.top_k]
        return ids, np.take_along_axis(probabilities, ids, axis=1)
