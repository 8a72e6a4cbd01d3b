"""Classifier logits -> top-k scores, class ids and labels, one vectorised pass per batch.

Each request carries LOGITS [b, C]; the model returns SCORES [b, k] (softmax probabilities, highest
first), CLASS_IDS [b, k] and LABELS [b, k] (the class names from the labels file beside this file, one
per line, line index = class id). k is the ``top_k`` config parameter and must equal the outputs' dims.
A request holding a non-finite logit gets its own error response; the rest of the batch proceeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from pybackend_batching import InvalidInput, RequestBatcher
from pybackend_parameters import ModelParameters


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax, stable for large logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def top_k(probabilities: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest values of each row, highest first, and their column indices."""
    candidates = np.argpartition(-probabilities, k - 1, axis=1)[:, :k]
    values = np.take_along_axis(probabilities, candidates, axis=1)
    order = np.argsort(-values, axis=1, kind="stable")
    return np.take_along_axis(values, order, axis=1), np.take_along_axis(candidates, order, axis=1)


def load_labels(path: Path, expected: int) -> np.ndarray:
    labels = Path(path).read_text(encoding="utf-8").splitlines()
    if len(labels) != expected:
        raise ValueError(f"{path} has {len(labels)} labels, but LOGITS has {expected} classes")
    return np.array([label.encode("utf-8") for label in labels], dtype=np.object_)


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        parameters = ModelParameters(config)
        self.input_name = config["input"][0]["name"]
        num_classes = int(config["input"][0]["dims"][0])
        self.k = parameters.integer("top_k")
        if len(config["output"]) != 3:
            names = [output["name"] for output in config["output"]]
            raise ValueError(f"expected 3 outputs (scores, class ids, labels, in that order), got {names}")
        for output in config["output"]:
            if [int(d) for d in output["dims"]] != [self.k]:
                raise ValueError(f"output {output['name']} has dims {output['dims']}, but top_k is {self.k}")
        if not 0 < self.k <= num_classes:
            raise ValueError(f"top_k must be between 1 and {num_classes}, got {self.k}")
        version_dir = Path(args["model_repository"]) / args["model_version"]
        self.labels = load_labels(version_dir / parameters.text("labels_file"), num_classes)
        self.batcher = RequestBatcher(config, prepare=self._check_finite, run=self._top_k)

    def execute(self, requests: list) -> list:
        return self.batcher.execute(requests)

    def _check_finite(self, logits: np.ndarray) -> np.ndarray:
        if not np.all(np.isfinite(logits)):
            raise InvalidInput(f"{self.input_name}: every value must be finite (got NaN or infinity)")
        return logits

    def _top_k(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        scores, class_ids = top_k(softmax(logits.astype(np.float32, copy=False)), self.k)
        return scores, class_ids, self.labels[class_ids]
