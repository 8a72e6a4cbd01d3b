"""Real sample inputs: photographs shipped in scikit-image's wheel and a corpus of natural sentences.

The main job, the load generators and the tests send the same kind of data a user would: encoded
photographs and natural sentences of mixed length (samples/data/sentences.txt), never zeros or random bytes.
"""

from __future__ import annotations

import importlib.util
import logging
import random
from functools import cache
from pathlib import Path

logger = logging.getLogger(__name__)

SENTENCES_FILE = Path(__file__).parent / "data" / "sentences.txt"
# The project's one list of photographs, shipped in skimage/data (textures, masks and scans are left
# out), in the order every user reads them. True: one of the check set, the photographs whose subject an
# ImageNet classifier names (a cat, a cup of coffee, an astronaut, a rocket, a motorcycle, a horse): the
# export checks and gates image classifiers on them, the demo sends them. The others add variety to load.
PHOTOGRAPHS = {
    "chelsea.png": True,
    "coffee.png": True,
    "astronaut.png": True,
    "rocket.jpg": True,
    "motorcycle_left.png": True,
    "motorcycle_right.png": False,  # the same motorcycle seen from the other side
    "retina.jpg": False,
    "hubble_deep_field.jpg": False,
    "camera.png": False,  # grey
    "horse.png": True,
}
# Used when samples/data/sentences.txt is absent: a few sentences of varied length.
FALLBACK_SENTENCES = (
    "How do I reset my password?",
    "The train to Edinburgh leaves at half past nine.",
    "A man is eating food.",
    "The battery lasts about two days with normal use, which is better than my old phone.",
)


class SampleError(Exception):
    """Real sample inputs cannot be found."""


def skimage_data_dir() -> Path:
    spec = importlib.util.find_spec("skimage")
    if spec is None or spec.origin is None:
        raise SampleError("real images come from scikit-image's skimage/data; install scikit-image")
    return Path(spec.origin).parent / "data"


def photograph_paths(*, check_set: bool = False) -> list[Path]:
    """The photographs found in skimage/data, in :data:`PHOTOGRAPHS`' order; ``check_set``: only those of
    the check set."""
    folder = skimage_data_dir()
    names = [name for name, checked in PHOTOGRAPHS.items() if checked or not check_set]
    paths = [folder / name for name in names if (folder / name).is_file()]
    if not paths:
        raise SampleError(f"none of the photographs {names} is in {folder}; reinstall scikit-image")
    return paths


@cache
def photographs() -> tuple[bytes, ...]:
    """The original encoded files, as shipped."""
    return tuple(path.read_bytes() for path in photograph_paths())


@cache
def sentences() -> tuple[str, ...]:
    """The corpus of realistic sentences (one per line), or a small fallback when it is absent."""
    if not SENTENCES_FILE.is_file():
        logger.warning("%s is missing; using %d fallback sentences", SENTENCES_FILE, len(FALLBACK_SENTENCES))
        return FALLBACK_SENTENCES
    lines = [line.strip() for line in SENTENCES_FILE.read_text(encoding="utf-8").splitlines()]
    found = tuple(line for line in lines if line and not line.startswith("#"))
    if not found:
        raise SampleError(f"{SENTENCES_FILE} holds no sentences")
    return found


def shuffled_sentences(count: int, *, seed: int = 0) -> list[str]:
    """``count`` sentences in a shuffled arrival order, cycling the corpus as often as needed."""
    corpus = list(sentences())
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < count:
        block = corpus[:]
        rng.shuffle(block)
        order.extend(block)
    return order[:count]
