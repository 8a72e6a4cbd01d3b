"""The deploy files checked by the system tools they are written for: promtool accepts the Prometheus
config and the recording rules (and rejects a broken rule), nginx accepts the configuration rendered for
local replicas.

promtool and nginx come from Debian's prometheus and nginx packages, which `make test` and `make
test-integration` install (`make system-tools`); a missing tool fails these tests with that instruction
rather than skipping them. The checks of the same files that need no system tool are in tests/unit.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tritonlocal.replicas import LIMITS, TEMPLATE, find_nginx, render_nginx_config

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules" / "triton.yml"
PROMTOOL_HINT = "promtool is missing: run `make system-tools` (Debian's prometheus package)"


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, PROMTOOL_HINT
    return found


def test_promtool_accepts_the_config_and_the_rules() -> None:
    binary = promtool()
    for args in (["check", "config", str(PROMETHEUS / "prometheus.yml")], ["check", "rules", str(RULES)]):
        result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "groups:\n  - name: x\n    rules:\n      - record: a:b\n        expr: sum(rate(x[1m])\n"
    )
    result = subprocess.run(
        [promtool(), "check", "rules", str(broken)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0


def test_nginx_accepts_the_rendered_configuration(tmp_path: Path) -> None:
    nginx = find_nginx()  # fails with the install instruction when the package is missing
    for sub in ("logs", "tmp"):
        (tmp_path / sub).mkdir()
    conf = tmp_path / "nginx.conf"
    shutil.copyfile(TEMPLATE.parent / LIMITS, tmp_path / LIMITS)
    conf.write_text(
        render_nginx_config(
            TEMPLATE.read_text(),
            host="127.0.0.1",
            http_port=18000,
            grpc_port=18001,
            http_backends=["127.0.0.1:1001"],
            grpc_backends=["127.0.0.1:2001"],
            max_fails=1,
            fail_timeout_s=5,
        )
    )
    result = subprocess.run(
        [nginx, "-t", "-p", f"{tmp_path}/", "-e", str(tmp_path / "logs" / "error.log"), "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
