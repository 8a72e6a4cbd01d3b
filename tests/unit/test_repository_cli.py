"""The repository toolkit's command line: derive and the CPU copy, run without a server (every
command's --help, its defaults and exit codes: tests/checks/test_paths_from_any_folder.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonrepo.__main__ import main
from tritonrepo.paths import REPOSITORY


def test_the_cpu_copy_command_writes_the_copy_and_says_what_moved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "cpu"
    code = main(["cpu-copy", "--source", str(REPOSITORY), "--target", str(target)])
    assert code == 0
    moved = capsys.readouterr().out.split("moved to the CPU: ")[1].strip().split(", ")
    assert "efficientnet_lite0_onnx" in moved
    assert (target / "minilm_onnx" / "config.pbtxt").is_file()


def test_the_cpu_copy_command_divides_the_cores_it_is_given(tmp_path: Path) -> None:
    target = tmp_path / "cpu"
    assert main(["cpu-copy", "--source", str(REPOSITORY), "--target", str(target), "--cores", "6"]) == 0
    config = (target / "efficientnet_lite0_onnx" / "config.pbtxt").read_text()
    assert 'key: "intra_op_thread_count"\n  value {\n    string_value: "3"' in config


def test_the_former_variant_command_is_refused_with_the_new_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "cpu"
    assert main(["variant", "--kind", "cpu", "--target", str(target)]) == 2
    assert "`python -m tritonrepo cpu-copy`" in capsys.readouterr().err
    assert not target.exists()


def test_negative_cores_are_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["cpu-copy", "--target", str(tmp_path / "cpu"), "--cores", "-1"])
    assert exit_info.value.code == 2


def test_a_missing_repository_fails_with_its_path_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["derive", "--source", str(tmp_path / "absent"), "--target", str(tmp_path / "out")]) == 1
    assert str(tmp_path / "absent") in capsys.readouterr().err
