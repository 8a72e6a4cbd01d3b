"""A served tensor (tritonrepo/tensors.py), as the server's metadata and a description state it."""

from __future__ import annotations

import numpy as np
import pytest

from tritonrepo.tensors import TensorSpec


@pytest.mark.parametrize("datatype", ["BYTES", "STRING"])
def test_bytes_and_the_configs_string_are_object_arrays_of_no_fixed_size(datatype: str) -> None:
    tensor = TensorSpec(name="TEXT", datatype=datatype, dims=(1,))
    assert tensor.numpy_dtype == np.dtype(object)
    assert not tensor.fixed_size
    with pytest.raises(ValueError, match="TEXT .* has no fixed byte size"):
        tensor.byte_size(4)


def test_fixed_size_tensor_counts_the_bytes_of_its_rows() -> None:
    pixels = TensorSpec(name="PIXELS", datatype="FP16", dims=(3, 8, 8))
    assert pixels.fixed_size and pixels.numpy_dtype == np.float16
    assert pixels.byte_size(5) == 5 * 3 * 8 * 8 * 2
    assert TensorSpec(name="MASK", datatype="BOOL", dims=(4,)).byte_size(2) == 8


def test_variable_axis_is_counted_after_the_batch_axis_and_matches_any_size() -> None:
    tokens = TensorSpec(name="IDS", datatype="INT64", dims=(-1, 4))
    assert tokens.variable_axes == (1,)
    assert not tokens.fixed_size
    assert tokens.matches((2, 17, 4)) and tokens.matches((1, 1, 4))
    assert not tokens.matches((2, 17, 5)) and not tokens.matches((17, 4))


def test_unknown_datatype_is_refused_naming_the_tensor_and_the_fix() -> None:
    with pytest.raises(ValueError, match="tensor X: datatype 'FLOAT' is not a Triton datatype; use one"):
        _ = TensorSpec(name="X", datatype="FLOAT", dims=(1,)).numpy_dtype


def test_tensor_without_a_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"a FP32 tensor of dims \[4\] has no name; give it one"):
        TensorSpec(name="", datatype="FP32", dims=(4,))
