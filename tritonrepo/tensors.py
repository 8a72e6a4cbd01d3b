"""A served tensor, the one way every package states one: its name, Triton datatype and dims.

The clients build it from the server's metadata (clients/model_info.py), the export from a model
description (description/module_spec.py, description/config_spec.py) or a config.pbtxt (export/common.py).
``datatype`` is Triton's name for the element type ("FP32", "INT64", "BYTES", ...); a config.pbtxt calls
BYTES ``TYPE_STRING``, so a description states it as "STRING", and both mean the same variable-length
element. ``dims`` exclude the batch axis of a batching model; -1 is an axis of any size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tritonclient.utils import triton_to_np_dtype

# BYTES in the server's metadata and requests, STRING in a config.pbtxt: each element its own length.
VARIABLE_SIZE_DATATYPES = ("BYTES", "STRING")


@dataclass(frozen=True, kw_only=True)
class TensorSpec:
    """One input or output of a served model; ``dims`` exclude the batch axis, -1 is any size."""

    name: str
    datatype: str
    dims: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError(
                f"a {self.datatype} tensor of dims {list(self.dims)} has no name; give it one, e.g. PIXELS"
            )

    @property
    def numpy_dtype(self) -> np.dtype:
        """The dtype of this tensor's numpy arrays (object for BYTES: the elements are ``bytes``)."""
        if self.datatype in VARIABLE_SIZE_DATATYPES:
            return np.dtype(np.object_)
        found = triton_to_np_dtype(self.datatype)
        if found is None:
            raise ValueError(
                f"tensor {self.name}: datatype {self.datatype!r} is not a Triton datatype; "
                "use one such as FP32, INT64 or BYTES"
            )
        return np.dtype(found)

    @property
    def fixed_size(self) -> bool:
        """Whether every row has the same byte size: no BYTES elements and no axis of any size."""
        return self.datatype not in VARIABLE_SIZE_DATATYPES and all(d >= 0 for d in self.dims)

    def byte_size(self, rows: int) -> int:
        """Bytes of ``rows`` rows of this tensor (fixed-size tensors only)."""
        if not self.fixed_size:
            raise ValueError(
                f"tensor {self.name} ({self.datatype}, dims {list(self.dims)}) has no fixed byte size; "
                "ask only tensors whose fixed_size is true"
            )
        return rows * math.prod(self.dims) * self.numpy_dtype.itemsize

    @property
    def variable_axes(self) -> tuple[int, ...]:
        """The axes of -1 (counting the batch axis as 0)."""
        return tuple(axis + 1 for axis, size in enumerate(self.dims) if size == -1)

    def matches(self, shape: tuple[int, ...]) -> bool:
        """Whether an array shape (batch axis first) has these dims, -1 matching any size."""
        return len(shape) == len(self.dims) + 1 and all(
            want in (-1, got) for want, got in zip(self.dims, shape[1:], strict=True)
        )
