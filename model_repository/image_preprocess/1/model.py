"""Encoded images -> normalised pixel tensors for the classifier, one vectorised pass per batch.

Each request carries IMAGE_BYTES [b, 1] (JPEG, PNG, ... bytes); the model returns PIXELS [b, 3, H, W].
Every image is decoded, converted to RGB, resized (shorter side to ``resize_shorter_px``) and centre
cropped to H x W; then the whole batch is scaled and normalised at once. A request holding an image that
cannot be decoded (empty, truncated, not an image, too many pixels) gets its own error response and the
other requests of the batch are answered as usual.

The batching is pybackend_batching's, shared by every Python model. The pure functions below need no
Triton, so the exporter verifies the classifier through exactly this preprocessing.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps
from pybackend_batching import InvalidInput, RequestBatcher
from pybackend_parameters import ModelParameters


class ImageInputError(ValueError):
    """An input that is not a usable image; the message names the problem."""


@dataclass(frozen=True, kw_only=True)
class PreprocessSettings:
    height_px: int
    width_px: int
    resize_shorter_px: int
    mean_rgb: tuple[float, ...]  # 3 values, checked below
    std_rgb: tuple[float, ...]
    max_image_pixels: int
    max_image_bytes: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.resize_shorter_px < max(self.height_px, self.width_px):
            raise ValueError(
                f"resize_shorter_px ({self.resize_shorter_px}) must be at least the crop size "
                f"({self.height_px}x{self.width_px})"
            )
        if len(self.mean_rgb) != 3 or len(self.std_rgb) != 3 or min(self.std_rgb) <= 0:
            raise ValueError(
                f"mean_rgb and std_rgb need 3 values, std > 0; got {self.mean_rgb}, {self.std_rgb}"
            )
        if self.max_image_pixels < self.height_px * self.width_px:
            raise ValueError(f"max_image_pixels ({self.max_image_pixels}) is smaller than one crop")
        if self.max_image_bytes < 1:
            raise ValueError(f"max_image_bytes must be positive, got {self.max_image_bytes}")

    @classmethod
    def from_model_config(cls, config: dict) -> PreprocessSettings:
        """From the model config as Triton hands it over (its parameters read by ModelParameters)."""
        parameters = ModelParameters(config)
        channels, height, width = (int(d) for d in config["output"][0]["dims"])
        if channels != 3:
            raise ValueError(f"output dims must be [3, H, W], got {config['output'][0]['dims']}")
        return cls(
            height_px=height,
            width_px=width,
            resize_shorter_px=parameters.integer("resize_shorter_px"),
            mean_rgb=parameters.numbers("mean_rgb"),
            std_rgb=parameters.numbers("std_rgb"),
            max_image_pixels=parameters.integer("max_image_pixels"),
            max_image_bytes=parameters.integer("max_image_bytes"),
        )


def decode_and_crop(data: bytes, settings: PreprocessSettings) -> np.ndarray:
    """Encoded image -> uint8 RGB array [H, W, 3], resized and centre cropped."""
    if len(data) == 0:
        raise ImageInputError("cannot decode image: empty input (0 bytes)")
    if len(data) > settings.max_image_bytes:
        raise ImageInputError(
            f"image too large: {len(data)} bytes is over the limit of {settings.max_image_bytes} "
            "(see max_image_bytes); send a smaller or re-compressed image"
        )
    try:
        image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as e:
        raise ImageInputError(f"image too large: {e}") from e
    except Exception as e:  # Pillow raises several types for undecodable input
        raise ImageInputError(
            f"cannot decode image: not a recognised image format ({len(data)} bytes)"
        ) from e
    width, height = image.size
    if width * height > settings.max_image_pixels:
        raise ImageInputError(
            f"image too large: {width}x{height} = {width * height} pixels is over the limit of "
            f"{settings.max_image_pixels} (a guard against decompression bombs; see max_image_pixels)"
        )
    scale = settings.resize_shorter_px / min(width, height)
    # JPEG only: let the decoder downscale by 1/2, 1/4 or 1/8 while keeping at least the target size.
    image.draft("RGB", (max(1, round(width * scale)), max(1, round(height * scale))))
    try:
        rgb = _to_rgb(ImageOps.exif_transpose(image))
    except Exception as e:  # truncated or corrupt pixel data surfaces only when decoding
        raise ImageInputError(f"cannot decode image: {e}") from e
    return _resize_and_crop(rgb, settings)


def _to_rgb(image: Image.Image) -> Image.Image:
    """Any mode (L, P, RGBA, CMYK, ...) -> RGB; transparent pixels are composited over white."""
    has_alpha = image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)
    if has_alpha:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def _resize_and_crop(image: Image.Image, settings: PreprocessSettings) -> np.ndarray:
    """Resize (shorter side to ``resize_shorter_px``, bilinear) and centre crop, computing only the crop:
    Pillow resamples the source box that maps onto the crop, never the rows and columns cut away."""
    width, height = image.size
    scale = settings.resize_shorter_px / min(width, height)
    size = (
        max(settings.resize_shorter_px, round(width * scale)),
        max(settings.resize_shorter_px, round(height * scale)),
    )
    left = (size[0] - settings.width_px) // 2
    top = (size[1] - settings.height_px) // 2
    crop = (left, top, left + settings.width_px, top + settings.height_px)
    if size == image.size:
        return np.asarray(image.crop(crop), dtype=np.uint8)
    to_source_x, to_source_y = width / size[0], height / size[1]
    box = (crop[0] * to_source_x, crop[1] * to_source_y, crop[2] * to_source_x, crop[3] * to_source_y)
    resized = image.resize((settings.width_px, settings.height_px), Image.Resampling.BILINEAR, box=box)
    return np.asarray(resized, dtype=np.uint8)


def normalise(batch: np.ndarray, settings: PreprocessSettings) -> np.ndarray:
    """uint8 [N, H, W, 3] -> float32 [N, 3, H, W] as (x / 255 - mean) / std.

    Two passes written straight into the channels-first result (no float32 copy in between); each
    element is computed as ``x * scale - shift`` in float32, as a plain numpy expression would.
    """
    scale = np.float32(1.0 / 255.0) / np.asarray(settings.std_rgb, dtype=np.float32)
    shift = np.asarray(settings.mean_rgb, dtype=np.float32) / np.asarray(settings.std_rgb, dtype=np.float32)
    count, height, width, _ = batch.shape
    pixels = np.empty((count, 3, height, width), dtype=np.float32)
    np.multiply(batch.transpose(0, 3, 1, 2), scale[:, None, None], out=pixels)
    np.subtract(pixels, shift[:, None, None], out=pixels)
    return pixels


def preprocess(images: list[bytes], settings: PreprocessSettings) -> np.ndarray:
    """Encoded images -> PIXELS [N, 3, H, W] (raises ImageInputError on the first bad image)."""
    return normalise(np.stack([decode_and_crop(data, settings) for data in images]), settings)


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        self.input_name = config["input"][0]["name"]
        self.settings = PreprocessSettings.from_model_config(config)
        # Second line of defence for formats whose size is only known while decoding.
        Image.MAX_IMAGE_PIXELS = self.settings.max_image_pixels
        self.batcher = RequestBatcher(config, prepare=self._decode_request, run=self._normalise)

    def execute(self, requests: list) -> list:
        return self.batcher.execute(requests)

    def _decode_request(self, images: np.ndarray) -> list[np.ndarray]:
        """One request's IMAGE_BYTES [b, 1] -> b crops; an undecodable image rejects the request."""
        items = images.reshape(-1)
        crops = []
        for position, item in enumerate(items):
            try:
                crops.append(decode_and_crop(bytes(item), self.settings))
            except ImageInputError as e:
                where = f" (batch item {position})" if len(items) > 1 else ""
                raise InvalidInput(f"{self.input_name}: {e}{where}") from e
        return crops

    def _normalise(self, crops: list[np.ndarray]) -> np.ndarray:
        return normalise(np.stack(crops), self.settings)
