"""Request payloads built from the real samples (:mod:`samples`) for the load generators.

Every load generator here (Locust, perf_analyzer's ``--input-data``, the experiments) sends the same
kind of data a user would: encoded photographs and natural sentences, never zeros or random bytes.
``image_variants`` cycles the photographs through deterministic crops, resizes and JPEG qualities so
that a run of 1,000 images holds 1,000 different files (no cache or decoder shortcut can help).
"""

from __future__ import annotations

import io
import random

from PIL import Image

from samples import photographs


def image_variants(count: int, *, seed: int = 0) -> list[bytes]:
    """``count`` distinct JPEG files cut from the photographs in turn (crop 60-100%, resize, quality)."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    rng = random.Random(seed)
    decoded = [Image.open(io.BytesIO(data)).convert("RGB") for data in photographs()]
    variants = []
    for index in range(count):
        variants.append(_variant(decoded[index % len(decoded)], rng))
    return variants


def _variant(image: Image.Image, rng: random.Random) -> bytes:
    width, height = image.size
    share = rng.uniform(0.6, 1.0)
    crop_w, crop_h = max(32, int(width * share)), max(32, int(height * share))
    left, top = rng.randint(0, width - crop_w), rng.randint(0, height - crop_h)
    cropped = image.crop((left, top, left + crop_w, top + crop_h))
    shorter_px = rng.randint(240, 480)
    scale = shorter_px / min(crop_w, crop_h)
    resized = cropped.resize((max(1, round(crop_w * scale)), max(1, round(crop_h * scale))))
    buffer = io.BytesIO()
    resized.save(buffer, format="JPEG", quality=rng.randint(80, 95))
    return buffer.getvalue()
