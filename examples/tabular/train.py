"""Train the diabetes classifier (diabetes.py) and write its weights: ``python train.py WEIGHTS``.

Deterministic: a fixed seed, one thread, full-batch Adam over the training split, so that the same
code, data and library versions give the same weights. A few seconds on one core. The export runs this
when the weights are missing or were made by other code (model_descriptions/diabetes_classifier.yaml).
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from diabetes import DiabetesNet, rows, split
from safetensors.torch import save_file

SEED = 0
EPOCHS = 100
LEARNING_RATE = 0.01
WEIGHT_DECAY = 1e-3


def train() -> tuple[DiabetesNet, float]:
    """The trained classifier (eval mode) and its accuracy on the held-out rows."""
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    features, sex, target = (torch.from_numpy(a) for a in rows())
    train_rows, test_rows = (torch.from_numpy(i) for i in split())
    model = DiabetesNet()
    model.mean.copy_(features[train_rows].mean(dim=0))
    model.std.copy_(features[train_rows].std(dim=0))
    optimiser = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    for _ in range(EPOCHS):
        optimiser.zero_grad()
        logits = model(features[train_rows], sex[train_rows])
        loss = torch.nn.functional.cross_entropy(logits, target[train_rows])
        loss.backward()
        optimiser.step()
    model.eval()
    with torch.no_grad():
        predicted = model(features[test_rows], sex[test_rows]).argmax(dim=1)
    return model, float((predicted == target[test_rows]).float().mean())


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python train.py WEIGHTS (a .safetensors file to write)", file=sys.stderr)
        return 2
    model, accuracy = train()
    save_file({name: t.contiguous() for name, t in model.state_dict().items()}, argv[0])
    chance = np.bincount(rows()[2][split()[1]]).max() / len(split()[1])
    print(f"held-out accuracy {accuracy:.3f} (most frequent class {chance:.3f}); wrote {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
