"""The one rule for an exported model's intra-op threads on a CPU (tritonrepo/configs.py), and what the
local derivation writes from it."""

from __future__ import annotations

import pytest

from tritonrepo.configs import ALL_CORES, ThreadLayout, intra_op_layout, load_repository, threads_per_instance
from tritonrepo.derive import derive_local_config
from tritonrepo.host_instances import usable_cores
from tritonrepo.paths import REPOSITORY


@pytest.fixture(scope="module")
def models() -> dict:
    return load_repository(REPOSITORY)


def test_threads_never_drop_below_one_per_instance() -> None:
    assert threads_per_instance(2, 1) == 2
    assert threads_per_instance(2, 2) == 1
    assert threads_per_instance(2, 4) == 1


def test_pools_that_take_more_than_the_cores_do_not_spin() -> None:
    assert intra_op_layout(2, 2) == ThreadLayout(threads=1, spinning=True)
    assert intra_op_layout(2, 2, ALL_CORES) == ThreadLayout(threads=2, spinning=False)
    assert intra_op_layout(2, 1, ALL_CORES) == ThreadLayout(threads=2, spinning=True)
    assert intra_op_layout(16, 2, "4") == ThreadLayout(threads=4, spinning=True)
    assert intra_op_layout(2, 4) == ThreadLayout(threads=1, spinning=False)
    for bad in ("many", "0"):
        with pytest.raises(ValueError, match="intra_op_threads"):
            intra_op_layout(2, 2, bad)


def test_the_derived_runner_turns_spinning_off_only_for_an_oversubscribed_onnx_model(models: dict) -> None:
    lite0 = derive_local_config(models["efficientnet_lite0_onnx"], gpu_available=False, intra_op_threads=None)
    cores = usable_cores()
    assert lite0.parameters["intra_op_threads"].string_value == str(cores)
    if cores > 1:  # two instances of every core: more threads than cores
        assert lite0.parameters["intra_op_spinning"].string_value == "false"
    else:
        assert "intra_op_spinning" not in lite0.parameters
    minilm = derive_local_config(models["minilm_onnx"], gpu_available=False, intra_op_threads=None)
    assert "intra_op_spinning" not in minilm.parameters
