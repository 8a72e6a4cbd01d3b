"""A sentence encoder's scaffold (export/scaffold/cli.py): its embedding width and its tokenizer, read from
its checkpoint folder (config.json and tokenizer.json, as Hugging Face saves them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from export.common import ExportError
from export.minilm.network import load_tokenizer


def size_configs(configs: dict[str, Any], *, weights: Path) -> None:
    """The new description's native output: the encoder's width, from the weights' config.json."""
    config = json.loads((weights / "config.json").read_text(encoding="utf-8"))
    native = configs["native"]
    native["outputs"] = [{**native["outputs"][0], "dims": [int(config["hidden_size"])]}]


def tokenizer(weights: Path) -> Tokenizer:
    """The new encoder's tokenizer.json, beside its weights (the export copies it for the tokenizer model)."""
    if not (weights / "tokenizer.json").is_file():
        raise ExportError(
            f"{weights} has no tokenizer.json: a sentence encoder's weights folder holds its tokenizer "
            "(save it there with the tokenizer's save_pretrained or tokenizers' Tokenizer.save)"
        )
    return load_tokenizer(weights, max_length=512)
