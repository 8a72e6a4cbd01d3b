"""CPU-side settings that a measured tuning chose for the local repository.

``model_repository/<model>/config.pbtxt`` is written for a GPU host and stays that way. What suits this
CPU (how many instances, how many threads each, how long the batcher waits) can differ, so a tuning
(``python -m loadtest.tune --adopt``) writes ``local_cpu.pbtxt`` beside the model's config.pbtxt: a
partial ``ModelConfig`` in the same text format, holding only the fields it changes. ``derive`` applies
it when it writes the local repository for a machine without a GPU; NVIDIA's container never reads it.

Fields present in the file replace the deployable values: ``instance_group`` and ``max_batch_size``
as a whole, each field set inside ``dynamic_batching`` on its own (the queue policy is kept), and each
key of ``parameters``. A ``dynamic_batching`` section always sets the queue delay, 0 included: the
config schema is proto3, which cannot tell a delay of 0 from an absent one, and a 0 that fell back to
the deployable delay would be a setting silently not applied. What the overlay states is stated by hand:
it wins over the batching the export chose from its measured curve (tritonrepo/recorded_batching.py).
"""

from __future__ import annotations

from collections.abc import MutableSequence
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo.errors import RepositoryError

FILENAME = "local_cpu.pbtxt"
HEADER = (
    "# CPU-side settings for the local repository, applied by `python -m tritonrepo derive`\n"
    "# on a machine without a GPU; config.pbtxt stays the deployable configuration.\n"
)
ALLOWED_FIELDS = ("instance_group", "max_batch_size", "dynamic_batching", "parameters")


def read_overlay(model_folder: Path) -> ModelConfig | None:
    """The overlay beside ``model_folder/config.pbtxt``, or None when there is none."""
    path = Path(model_folder) / FILENAME
    if not path.is_file():
        return None
    try:
        overlay = text_format.Parse(path.read_text(), ModelConfig())
    except text_format.ParseError as e:
        raise RepositoryError(f"{path}: not a valid partial Triton model configuration: {e}") from e
    extra = [fd.name for fd, _ in overlay.ListFields() if fd.name not in ALLOWED_FIELDS]
    if extra:
        raise RepositoryError(
            f"{path}: sets {', '.join(extra)}; a CPU overlay may only set {', '.join(ALLOWED_FIELDS)} "
            "(change the others in config.pbtxt)"
        )
    return overlay


def apply_overlay(config: ModelConfig, overlay: ModelConfig) -> None:
    """Replace in ``config`` (in place) every field that ``overlay`` sets."""
    if overlay.instance_group:
        del config.instance_group[:]
        config.instance_group.extend(overlay.instance_group)
    if overlay.max_batch_size:
        config.max_batch_size = overlay.max_batch_size
    if overlay.HasField("dynamic_batching"):
        delay_us = overlay.dynamic_batching.max_queue_delay_microseconds
        config.dynamic_batching.max_queue_delay_microseconds = delay_us  # 0 is a delay too (proto3)
        for field, value in overlay.dynamic_batching.ListFields():
            config.dynamic_batching.ClearField(field.name)
            if isinstance(value, MutableSequence):  # a repeated field
                getattr(config.dynamic_batching, field.name).extend(value)
            elif field.message_type is not None:
                getattr(config.dynamic_batching, field.name).CopyFrom(value)
            else:
                setattr(config.dynamic_batching, field.name, value)
    for key, parameter in overlay.parameters.items():
        config.parameters[key].CopyFrom(parameter)


def write_overlay(model_folder: Path, overlay: ModelConfig, *, note: str) -> Path:
    """Write ``overlay`` beside ``model_folder/config.pbtxt`` with ``note`` (where it came from)."""
    path = Path(model_folder) / FILENAME
    comment = "".join(f"# {line}\n" for line in note.splitlines())
    path.write_text(HEADER + comment + text_format.MessageToString(overlay))
    return path
