"""Test tiers by folder: tests/unit needs no server and no system tool (no root to install one);
tests/integration runs a real local tritonserver, or the system tools the deploy files are written for."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tritonlocal.pytest_plugin"]

_TIERS = {"unit": pytest.mark.unit, "integration": pytest.mark.integration}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in _TIERS:
            item.add_marker(_TIERS[tier])
