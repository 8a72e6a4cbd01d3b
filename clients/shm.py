"""System shared memory for one request: its inputs and its fixed-size outputs in one region.

The client writes the inputs into a POSIX shared-memory region, registers it with the server, and the
server reads the inputs and writes the outputs there instead of sending tensors over the socket. That
pays off for large tensors on the same host. The region's name is unique per request (process id +
random suffix); the caller unregisters it and :meth:`SharedRequest.destroy` unlinks it, on every path.
BYTES outputs have no size known in advance, so they come back over the socket as usual.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

from tritonrepo.tensors import TensorSpec

logger = logging.getLogger(__name__)
_ALIGN_BYTES = 64


@dataclass(frozen=True, kw_only=True)
class _Slot:
    name: str
    datatype: str
    shape: tuple[int, ...]
    offset: int
    byte_size: int


class SharedRequest:
    """Lay out, create, attach and read back one request's shared-memory region."""

    def __init__(
        self, inputs: Mapping[str, np.ndarray], outputs: Sequence[TensorSpec], rows: int | None
    ) -> None:
        self.name = f"clients_{os.getpid()}_{uuid.uuid4().hex[:16]}"
        self.key = f"/{self.name}"
        offset = 0
        self._payloads: list[tuple[_Slot, np.ndarray]] = []
        for name, array in inputs.items():
            payload = (
                serialize_byte_tensor(array) if array.dtype == np.object_ else np.ascontiguousarray(array)
            )
            size = len(payload.item()) if array.dtype == np.object_ else payload.nbytes
            slot = _Slot(
                name=name,
                datatype=np_to_triton_dtype(array.dtype),
                shape=tuple(array.shape),
                offset=offset,
                byte_size=size,
            )
            self._payloads.append((slot, payload))
            offset = _aligned(offset + size)
        self._outputs: list[_Slot] = []
        self._socket_outputs: list[str] = []
        for spec in outputs:
            if not spec.fixed_size:
                self._socket_outputs.append(spec.name)
                continue
            shape = ((rows,) if rows is not None else ()) + spec.dims
            size = spec.byte_size(rows or 1)
            self._outputs.append(
                _Slot(name=spec.name, datatype=spec.datatype, shape=shape, offset=offset, byte_size=size)
            )
            offset = _aligned(offset + size)
        self.byte_size = max(offset, _ALIGN_BYTES)
        self._handle: Any = None

    def create(self) -> None:
        """Create the region and copy the inputs in."""
        self._handle = shm.create_shared_memory_region(self.name, self.key, self.byte_size, create_only=True)
        for slot, payload in self._payloads:
            shm.set_shared_memory_region(self._handle, [payload], offset=slot.offset)

    def infer_inputs(self, make_input: Any) -> list[Any]:
        tensors = []
        for slot, _ in self._payloads:
            tensor = make_input(slot.name, list(slot.shape), slot.datatype)
            tensor.set_shared_memory(self.name, slot.byte_size, offset=slot.offset)
            tensors.append(tensor)
        return tensors

    def requested_outputs(self, make_output: Any) -> list[Any]:
        tensors = []
        for slot in self._outputs:
            tensor = make_output(slot.name)
            tensor.set_shared_memory(self.name, slot.byte_size, offset=slot.offset)
            tensors.append(tensor)
        return tensors + [make_output(name) for name in self._socket_outputs]

    def read(self, result: Any) -> dict[str, np.ndarray]:
        """Copy the outputs out of the region (and the socket), so the region can be destroyed."""
        outputs = {}
        for slot in self._outputs:
            dtype = TensorSpec(name=slot.name, datatype=slot.datatype, dims=()).numpy_dtype
            view = shm.get_contents_as_numpy(self._handle, dtype, list(slot.shape), offset=slot.offset)
            outputs[slot.name] = np.array(view, copy=True)
            del view  # a live view would keep the mapping open
        for name in self._socket_outputs:
            outputs[name] = result.as_numpy(name)
        return outputs

    def destroy(self) -> None:
        """Unmap and unlink the region; safe to call twice or after a failed create()."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        try:
            shm.destroy_shared_memory_region(handle)
        except Exception:  # never mask the request's own outcome with a cleanup failure
            logger.warning("could not destroy shared memory region %s", self.name, exc_info=True)


def _aligned(offset: int) -> int:
    return (offset + _ALIGN_BYTES - 1) // _ALIGN_BYTES * _ALIGN_BYTES
