"""The headless Locust command a run is declared as (no Locust process started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.load.locust_run import LocustRun


def _option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_every_user_starts_in_the_first_second_unless_a_spawn_rate_is_given() -> None:
    default = LocustRun(http_url="127.0.0.1:8000", users=8).command(Path("out"), Path("out.html"))
    paced = LocustRun(http_url="127.0.0.1:8000", users=8, spawn_rate=2).command(Path("out"), Path("out.html"))
    assert (_option(default, "-u"), _option(default, "-r")) == ("8", "8")
    assert _option(paced, "-r") == "2"
    assert _option(default, "--host") == "http://127.0.0.1:8000"


@pytest.mark.parametrize("kwargs", [{"users": 0}, {"spawn_rate": 0}, {"run_time_s": 0}])
def test_a_run_that_cannot_load_the_server_is_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="users >= 1, spawn_rate > 0 and run_time_s >= 1"):
        LocustRun(http_url="127.0.0.1:8000", **kwargs)
