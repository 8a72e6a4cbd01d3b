"""A small sequence model of two outputs and a variable axis, as a user brings one to the scaffold.

Readings of two sensors over any number of time steps (``[rows, steps, 2]``, float32) go through a
1-d convolution; the model returns a score for each time step (``[rows, steps]``) and logits of three
classes for the whole series (``[rows, 3]``). Its weights are seeded, not trained: the serving path is
what it shows (docs/your-model-module.md). ``python examples/sensor/sensor.py WEIGHTS`` writes them.

``load_model(weights)`` and ``check_inputs()`` are what its description names.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

CHANNELS, HIDDEN, CLASSES = 2, 8, 3
CHECK_STEPS = (16, 5, 40, 1)  # the lengths the export checks, the first traced: not 1, which it would fix
CHECK_ROWS = 8


class SensorNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(CHANNELS, HIDDEN, kernel_size=3, padding=1)
        self.step = nn.Linear(HIDDEN, 1)
        self.summary = nn.Linear(HIDDEN, CLASSES)

    def forward(self, readings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """readings [rows, steps, 2] -> (scores [rows, steps], class logits [rows, 3])."""
        features = torch.relu(self.conv(readings.transpose(1, 2))).transpose(1, 2)
        return self.step(features).squeeze(-1), self.summary(features.mean(dim=1))


def save_weights(path: Path, seed: int = 0) -> Path:
    """Seeded weights for SensorNet, as a safetensors file."""
    torch.manual_seed(seed)
    save_file(SensorNet().state_dict(), str(path))
    return path


def load_model(weights: Path) -> SensorNet:
    model = SensorNet()
    model.load_state_dict(load_file(str(weights)))
    return model.eval()


def readings(rows: int, steps: int, seed: int = 0) -> np.ndarray:
    """Two noisy sine waves of random frequency and phase per row: [rows, steps, 2] float32."""
    generator = np.random.default_rng(seed)
    time = np.arange(steps)[None, :, None]
    frequency = generator.uniform(0.05, 0.5, size=(rows, 1, CHANNELS))
    phase = generator.uniform(0, 2 * np.pi, size=(rows, 1, CHANNELS))
    noise = generator.normal(0, 0.1, size=(rows, steps, CHANNELS))
    return (np.sin(frequency * time + phase) + noise).astype(np.float32)


def check_inputs() -> list[dict[str, np.ndarray]]:
    """Readings of several lengths, one group per length (a batch holds series of one length)."""
    return [{"READINGS": readings(CHECK_ROWS, steps, seed=steps)} for steps in CHECK_STEPS]


if __name__ == "__main__":
    print(f"wrote {save_weights(Path(sys.argv[1]))}")
