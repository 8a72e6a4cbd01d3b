"""The one tritonlocal command line: every command and its flags, run without a server."""

from __future__ import annotations

import pytest

from tritonlocal.cli import main


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("serve", "--no-admin-key"),
        ("serve", "--allow-failed-models"),
        ("monitor", "--prometheus-port"),
        ("replicas", "--count"),
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


def test_a_bad_flag_value_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["replicas", "--count", "two"])
    assert exit_info.value.code == 2
