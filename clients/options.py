"""What a user sets on a client: :class:`ClientOptions`, and the models the client calls by default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from clients.retry import RetryPolicy

DEFAULT_CLASSIFIER = "image_classifier"
DEFAULT_EMBEDDER = "text_embedder"


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """Settings shared by TritonClient and AsyncTritonClient.

    ``per_request``: classify()/embed() send each item as its own request (default) and let the
    server's dynamic batcher form batches, with at most ``max_in_flight`` requests outstanding;
    False sends the items as batched requests of up to the model's max_batch_size rows.
    ``use_shared_memory``: pass tensors through system shared memory (client and server on one host).
    ``headers``: sent with every call, e.g. {"triton-admin-key": ...} for restricted APIs.
    """

    timeout_s: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    per_request: bool = True
    max_in_flight: int = 16
    use_shared_memory: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive (seconds), got {self.timeout_s}")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {self.max_in_flight}")
        if not isinstance(self.retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {type(self.retry).__name__}")
