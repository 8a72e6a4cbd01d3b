"""L2-normalise float vectors, one vectorised pass over every request in the batch.

Each request carries VECTOR [b, 16]; the model returns NORMALIZED (the unit vector) and NORM (the
Euclidean length). A request holding a non-finite value or an all-zero row gets its own error
response, and the other requests of the same batch are answered as usual.
"""

from __future__ import annotations

import json

import numpy as np
from pybackend_batching import InvalidInput, RequestBatcher


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.batcher = RequestBatcher(config, prepare=self._validate, run=normalise)

    def execute(self, requests: list) -> list:
        return self.batcher.execute(requests)

    def _validate(self, vectors: np.ndarray) -> np.ndarray:
        if not np.all(np.isfinite(vectors)):
            raise InvalidInput(f"{self.input_name}: every value must be finite (got NaN or infinity)")
        if np.any(~vectors.any(axis=1)):
            raise InvalidInput(
                f"{self.input_name}: a row of all zeros has no direction and cannot be normalised"
            )
        return vectors


def normalise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[N, D] -> (the unit vectors [N, D], the Euclidean lengths [N, 1]) in one vectorised pass."""
    batch = vectors.astype(np.float32, copy=False)
    norms = np.linalg.norm(batch, axis=1, keepdims=True)
    return batch / norms, norms
