"""The one tritonlocal command line: every command and its flags, run without a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonlocal.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("derive", "--threads"),
        ("serve", "--no-admin-key"),
        ("serve", "--allow-failed-models"),
        ("monitor", "--prometheus-port"),
        ("replicas", "--count"),
        ("variant", "--kind"),
        ("variant", "--cores"),
        ("install-perf-analyzer", "--force"),
    ],
)
def test_every_command_is_offered_with_its_flags(
    command: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert flag in capsys.readouterr().out


def test_the_variant_command_writes_the_cpu_copy_and_says_what_moved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "cpu"
    code = main(["variant", "--source", str(ROOT / "model_repository"), "--target", str(target)])
    assert code == 0
    assert "moved to the CPU: efficientnet_lite0_onnx" in capsys.readouterr().out
    assert (target / "minilm_onnx" / "config.pbtxt").is_file()


def test_the_variant_command_divides_the_cores_it_is_given(tmp_path: Path) -> None:
    target = tmp_path / "cpu"
    assert (
        main(["variant", "--source", str(ROOT / "model_repository"), "--target", str(target), "--cores", "6"])
        == 0
    )
    config = (target / "efficientnet_lite0_onnx" / "config.pbtxt").read_text()
    assert 'key: "intra_op_thread_count"\n  value {\n    string_value: "3"' in config


def test_a_bad_flag_value_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["replicas", "--count", "two"])
    assert exit_info.value.code == 2
