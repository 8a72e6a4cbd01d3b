"""The sentence-encoder kind of the export pipeline: BERT-family encoders (all-MiniLM-L6-v2 and the like).

Writes into the model repository, for the served models a description (model_descriptions/*.yaml) lists:
- ``<model>/1/model.onnx`` or ``<model>/1/model.pt``: the sentence encoder for a
  ragged batch (:class:`export.minilm.network.RaggedSentenceEncoder`: concatenated token ids and each
  sequence's length in, pooled embeddings out), with tensor names taken from each model's
  config.pbtxt (the ragged input, then the batch input that carries the lengths);
- ``<tokenizer model>/1/tokenizer.json``: the tokenizer shipped with the weights, read by that model.

Each float32 encoder file is loaded back and checked against the in-process reference embedding (one
sentence at a time, unpadded) on real sentences of mixed lengths in one ragged batch, some padded
with [PAD] as a multi-text request is. Beside it, reduced-precision variants (export/minilm/variants.py:
bf16 and fp16 TorchScript, int8 ONNX) are gated on the sentence corpus; the pipeline
(export/pipeline.py) times them and serves the fastest that passes.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch
from tokenizers import Tokenizer
from tritonclient.grpc import model_config_pb2

from description.generated_configs import step_config
from description.model import ModelDescription
from export.common import (
    ExportError,
    ModelConfig,
    tensor_specs,
)
from export.kinds import Made, Parity, Plan, Target
from export.minilm import per_token_int8
from export.minilm import variants as text_variants
from export.minilm.network import (
    BertShape,
    MiniLMEncoder,
    RaggedSentenceEncoder,
    load_encoder,
    load_tokenizer,
    reference_embeddings,
)
from export.precision import cuda_runtime, onnx_graph
from export.precision.gates import GateResult, text_gate
from export.precision.selection import Runner
from tritonrepo.configs import load_model_config

logger = logging.getLogger(__name__)

ONNX_OPSET = 17  # LayerNormalization is a single op from 17; Triton 2.51's onnxruntime reads up to 21
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
    tokenizer_model: str
    min_cosine: float
    gates: dict[str, float]
    encoder: MiniLMEncoder
    tokenizer: Tokenizer
    reference: np.ndarray
    input_ids: np.ndarray  # [T] every check text's ids back to back
    item_lengths: np.ndarray  # [B] int32
    gate_set: dict = field(default_factory=dict)  # built on first use by gate_inputs()

    def __post_init__(self) -> None:
        if self.item_lengths.sum() != len(self.input_ids) or len(self.reference) != len(self.item_lengths):
            raise ValueError("check batch and reference disagree in shape")


def build_context(repository: Path, description: ModelDescription) -> TextExportContext:
    model_dir = description.weights_path()
    tokenizer_model = _tokenizer_model(description)
    params = load_model_config(repository / tokenizer_model).parameters
    max_length = int(params["max_length"].string_value)
    encoder = load_encoder(model_dir)
    tokenizer = load_tokenizer(model_dir, max_length=max_length)
    texts = list(CHECK_TEXTS)
    input_ids, item_lengths = ragged_batch(tokenizer, texts, extra_padding=EXTRA_PADDING_TOKENS)
    return TextExportContext(
        repository=repository,
        model_dir=model_dir,
        tokenizer_model=tokenizer_model,
        min_cosine=description.tolerance,
        gates=description.gates,
        encoder=encoder,
        tokenizer=tokenizer,
        reference=reference_embeddings(encoder, tokenizer, texts),
        input_ids=input_ids,
        item_lengths=item_lengths,
    )


def _tokenizer_model(description: ModelDescription) -> str:
    if "tokenizer_model" not in description.preprocessing:
        raise ExportError(
            f"model {description.name!r}: preprocessing needs 'tokenizer_model' (its Python model)"
        )
    return description.preprocessing["tokenizer_model"]


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


class SentenceEncoderKind:
    """BERT-family encoders behind a Python tokenizer model, served ragged (export/kinds.py)."""

    def check_config(
        self, description: ModelDescription, repository: Path, config: ModelConfig, made: Made
    ) -> None:
        shape = BertShape.from_config_json(description.weights_path() / "config.json")
        encoder_io(config, shape.hidden_size)
        _tokenizer_model(description)

    def fingerprint_files(self, description: ModelDescription) -> list[Path]:
        weights = description.weights_path()
        modules = (text_variants, per_token_int8, onnx_graph, cuda_runtime)
        return [
            weights / "model.safetensors",
            weights / "config.json",
            Path(__file__),
            Path(__file__).with_name("network.py"),
            *(Path(m.__file__ or "") for m in modules),
            text_variants.CORPUS,
        ]

    def prepare(self, description: ModelDescription, repository: Path, made: Made) -> TextExportContext:
        return build_context(Path(repository), description)

    def plan(self, context: TextExportContext, target: Target) -> Plan:
        config = target.config
        gate_set = gate_inputs(context)

        def gate(runner: Runner) -> GateResult:
            return text_gate(
                gate_set["reference"],
                text_variants.embed(runner, gate_set["batches"]),
                alone=text_variants.embed(runner, gate_set["alone"]),
                minimums=context.gates,
            )

        def fp32(path: Path) -> Runner:
            runner = _EXPORTERS[target.file_format](context, config, path)
            what = f"{'ONNX' if target.file_format == 'onnx' else 'TorchScript'} {config.name}"
            output = runner((context.input_ids, context.item_lengths))
            plan.parity.append(check_against_reference(context, output, what))
            return runner

        @functools.cache
        def fp32_onnx_file() -> Path:  # the float32 graph int8 is rewritten from
            path = target.scratch / "model.onnx"
            export_onnx(context, config, path)
            return path

        input_names, _, _ = encoder_io(config, _hidden_size(context.encoder))
        vocabulary = context.encoder.embeddings.word_embeddings.num_embeddings
        if target.file_format == "onnx":
            variants = text_variants.onnx_encoder_variants(
                fp32=fp32,
                onnx_runner=lambda path, device, cuda_options: onnx_runner(
                    config, path, _hidden_size(context.encoder), device, cuda_options
                ),
                fp32_onnx_file=fp32_onnx_file,
                calibration=[dict(zip(input_names, (context.input_ids, context.item_lengths), strict=True))],
                capabilities=target.capabilities,
                cuda_options=cuda_runtime.provider_options(config),
            )
        else:
            variants = text_variants.torchscript_encoder_variants(
                fp32=fp32,
                reduced_torchscript=lambda path, dtype, device: export_torchscript(
                    context, config, path, dtype=getattr(torch, dtype), device=device
                ),
            )
        plan = Plan(
            variants=variants,
            gate=gate,
            workload=gate_set["workload"],
            details={"input_bounds": {config.input[0].name: [0, vocabulary - 1]}},
        )
        return plan

    def support_files(self, description: ModelDescription, repository: Path, made: Made) -> dict[Path, Path]:
        """The weights' tokenizer.json, into the tokenizer model's folder under the name its config reads."""
        tokenizer_model = _tokenizer_model(description)
        params = step_config(tokenizer_model, repository, made).parameters
        destination = Path(repository) / tokenizer_model / "1" / params["tokenizer_file"].string_value
        return {destination: description.weights_path() / "tokenizer.json"}


KIND = SentenceEncoderKind()


def encoder_io(config: ModelConfig, hidden_size: int) -> tuple[list[str], str, dict[str, dict[int, str]]]:
    """(input names, output name, ONNX dynamic axes) from the config; checks it describes the ragged encoder.

    The inputs are the ragged token ids (a config input with ``allow_ragged_batch``) and the sequence
    lengths (a ``BATCH_ITEM_SHAPE_FLATTEN`` batch input over them), in that order, as the graph takes them.
    """
    inputs, outputs = tensor_specs(config.input), tensor_specs(config.output)
    if len(inputs) != 1 or not config.input[0].allow_ragged_batch or inputs[0].datatype != "INT64":
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
    if len(outputs) != 1 or outputs[0].datatype != "FP32" or outputs[0].dims != (hidden_size,):
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


def onnx_runner(
    config: ModelConfig,
    path: Path,
    hidden_size: int,
    device: str = "cpu",
    cuda_options: Mapping[str, str] | None = None,
) -> Runner:
    """A runner on an encoder ONNX file: (input ids [T], item lengths [B]) -> embeddings [B, H]."""
    input_names, output_name, _ = encoder_io(config, hidden_size)
    session = onnx_graph.session(path, device, cuda_options)
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
    return onnx_runner(config, path, _hidden_size(context.encoder))


def export_torchscript(
    context: TextExportContext,
    config: ModelConfig,
    path: Path,
    *,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> Runner:
    """Script and freeze the ragged encoder in ``dtype`` on ``device``; return a runner on the saved file.

    The float32 file is checked against the reference by the fp32 step; reduced precisions by their gate.
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

    return run


_EXPORTERS = {"onnx": export_onnx, "torchscript": export_torchscript}


def check_against_reference(context: TextExportContext, embeddings: np.ndarray, what: str) -> Parity:
    """Raise ExportError unless every embedding's cosine with the reference reaches the tolerance."""
    cosines = (embeddings * context.reference).sum(axis=1)
    worst = int(np.argmin(cosines))
    if cosines[worst] < context.min_cosine:
        raise ExportError(
            f"{what}: embedding of check text {worst} ({CHECK_TEXTS[worst][:40]!r}) has cosine "
            f"{cosines[worst]:.6f} with the reference, below {context.min_cosine}; "
            "the exported file was not written"
        )
    logger.info("%s matches the reference (lowest cosine %.7f)", what, cosines[worst])
    return Parity(metric="lowest cosine", value=float(cosines[worst]), tolerance=context.min_cosine)
