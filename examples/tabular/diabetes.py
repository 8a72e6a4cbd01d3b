"""A small tabular classifier on scikit-learn's diabetes data set, as a user brings one to the export.

The data: 442 patients of the diabetes study shipped inside scikit-learn (``load_diabetes``, no
download), ten baseline measurements each, and a measure of disease progression one year later. The
task here: which third of progression a patient falls in (low, middle, high), from nine numeric
measurements (age, body mass index, blood pressure, six blood serum values; float32, as measured) and
sex (a categorical id, 0 or 1, embedded).

``load_model(weights)`` and ``check_inputs()`` are what model_descriptions/diabetes_classifier.yaml
names; ``train.py`` beside this file writes the weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from sklearn.datasets import load_diabetes
from torch import nn

NUMERIC = ("age", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6")
CLASSES = ("low", "middle", "high")
SEXES = 2
SPLIT_SEED = 0
TEST_SHARE = 0.2


class DiabetesNet(nn.Module):
    """Numeric measurements standardised with the training split's statistics (buffers, saved with the
    weights), sex embedded, then a two-layer perceptron: one logit per progression class."""

    def __init__(self, *, hidden: int = 32, embedding: int = 4) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(len(NUMERIC)))
        self.register_buffer("std", torch.ones(len(NUMERIC)))
        self.sex = nn.Embedding(SEXES, embedding)
        self.layers = nn.Sequential(
            nn.Linear(len(NUMERIC) + embedding, hidden), nn.ReLU(), nn.Linear(hidden, len(CLASSES))
        )

    def forward(self, features: torch.Tensor, sex: torch.Tensor) -> torch.Tensor:
        """features [rows, 9] float32, sex [rows, 1] int64 -> logits [rows, 3]."""
        standardised = (features - self.mean) / self.std
        return self.layers(torch.cat([standardised, self.sex(sex[:, 0])], dim=1))


def rows() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every patient: (features [442, 9] float32, sex [442, 1] int64 in {0, 1}, class [442] int64)."""
    data = load_diabetes(scaled=False)
    columns = list(data.feature_names)
    features = data.data[:, [columns.index(name) for name in NUMERIC]].astype(np.float32)
    sex = (data.data[:, [columns.index("sex")]] - 1).astype(np.int64)  # recorded as 1 and 2
    thirds = np.quantile(data.target, [1 / 3, 2 / 3])
    return features, sex, np.searchsorted(thirds, data.target).astype(np.int64)


def split() -> tuple[np.ndarray, np.ndarray]:
    """Indices of the training and the test rows (a fixed shuffle)."""
    order = np.random.default_rng(SPLIT_SEED).permutation(len(rows()[0]))
    test = int(len(order) * TEST_SHARE)
    return np.sort(order[test:]), np.sort(order[:test])


def load_model(weights: Path) -> DiabetesNet:
    """The classifier with its trained weights, in eval mode."""
    model = DiabetesNet()
    model.load_state_dict(load_file(str(weights)))
    return model.eval()


def check_inputs() -> dict[str, np.ndarray]:
    """Every patient's row, as the served model takes them: the export checks and gates on these."""
    features, sex, _ = rows()
    return {"FEATURES": features, "SEX": sex}
