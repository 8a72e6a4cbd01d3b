"""The served pipelines run in-process, with no server: the same files, the same code, the same settings.

- :class:`TextPipeline`: tokenise as text_tokenizer does, hand the exported encoder the ragged batch
  Triton would; the encoder pools and normalises.
- :class:`ImagePipeline`: image_preprocess's own code and settings, the exported classifier, softmax
  and top-k.

The first steps come from :mod:`loadtest.load.preprocessing`; the exported files run in
:mod:`tritonrepo.exported_runtime`, the runtime code of the local server's runner. Everything is read
from the model repository (configs and model code), so nothing is restated here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadtest.load.preprocessing import (
    PREPROCESS_MODEL,
    ImagePreprocessor,
    PipelineError,
    TextTokenizer,
    parameters,
)
from tritonrepo.configs import load_model_config
from tritonrepo.exported_runtime import RUNTIMES, OnnxRunner, TorchScriptRunner
from tritonrepo.files import exported_file

PIPELINES = ("text", "image")


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


class ImagePipeline:
    """Encoded images -> (top-k class ids, probabilities), one batch per call."""

    def __init__(
        self,
        repository: Path,
        *,
        classifier_model: str,
        runtime: str,
        threads: int,
        top_k: int = 5,
        preprocess_model: str = PREPROCESS_MODEL,
    ) -> None:
        self.preprocess = ImagePreprocessor(repository, preprocess_model)
        path = served_file(repository, classifier_model)
        self.classifier = ExportedEncoder(path, runtime=runtime, threads=threads)
        self.top_k = top_k

    def __call__(self, images: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
        return self.classify(self.preprocess(images))

    def classify(self, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Preprocessed images -> (top-k class ids, probabilities)."""
        logits = self.classifier(pixels.astype(np.float32, copy=False))
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = shifted / shifted.sum(axis=1, keepdims=True)
        ids = np.argsort(-probabilities, axis=1)[:, : self.top_k]
        return ids, np.take_along_axis(probabilities, ids, axis=1)
