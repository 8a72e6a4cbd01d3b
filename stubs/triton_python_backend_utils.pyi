"""Types of the part of ``triton_python_backend_utils`` that this repository's served code uses.

The module exists only inside Triton's Python-backend stub process: its functions come from
``backends/python/triton_python_backend_utils.py`` and its classes from the stub's C++ bindings
(``c_python_backend_utils``). This file declares what model.py files and their helpers call, with
the signatures those two define, so mypy checks the served code against Triton's real API.
"""

from collections.abc import Sequence
from typing import Any, ClassVar, final

import numpy as np

TRITON_STRING_TO_NUMPY: dict[str, type[Any]]

@final
class _ErrorCode:
    """The codes of ``TritonError`` (TRITONSERVER_Error_Code)."""

class TritonError:
    UNKNOWN: ClassVar[_ErrorCode]
    INTERNAL: ClassVar[_ErrorCode]
    NOT_FOUND: ClassVar[_ErrorCode]
    INVALID_ARG: ClassVar[_ErrorCode]
    UNAVAILABLE: ClassVar[_ErrorCode]
    UNSUPPORTED: ClassVar[_ErrorCode]
    ALREADY_EXISTS: ClassVar[_ErrorCode]
    CANCELLED: ClassVar[_ErrorCode]
    def __init__(self, message: str, code: _ErrorCode = ...) -> None: ...
    def code(self) -> _ErrorCode: ...
    def message(self) -> str: ...

class TritonModelException(Exception):
    """Raised from ``initialize`` or ``execute``: the model fails to load, or the whole batch fails."""

class Tensor:
    def __init__(self, name: str, tensor: np.ndarray) -> None: ...
    def name(self) -> str: ...
    def as_numpy(self) -> np.ndarray: ...
    def is_cpu(self) -> bool: ...

class InferenceRequest:
    def inputs(self) -> list[Tensor]: ...
    def request_id(self) -> str: ...
    def requested_output_names(self) -> list[str]: ...

class InferenceResponse:
    def __init__(self, output_tensors: Sequence[Tensor] = ..., error: TritonError | None = None) -> None: ...
    def output_tensors(self) -> list[Tensor]: ...
    def has_error(self) -> bool: ...
    def error(self) -> TritonError | None: ...

def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None: ...
def triton_string_to_numpy(triton_type_string: str) -> type[Any]: ...
