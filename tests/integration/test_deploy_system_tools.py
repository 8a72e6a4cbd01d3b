"""The deploy files checked by the system tools they are written for: promtool accepts the Prometheus
config and the recording rules (and rejects a broken rule), nginx accepts the configuration rendered for
local replicas.

promtool and nginx come from Debian's prometheus and nginx packages, which `make test` and `make
test-integration` install (`make system-tools`); a missing tool fails these tests with that instruction
rather than skipping them. The checks of the same files that need no system tool are in tests/unit.
"""

from __future__ import annotations

import re
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
    result = _nginx_test(tmp_path, _rendered())
    assert result.returncode == 0, result.stderr


def test_each_proxy_turns_http2_on_in_the_form_its_nginx_knows(tmp_path: Path) -> None:
    """compose's proxy runs NGINX_IMAGE, 1.25.1 or later, where `listen ... http2` is deprecated in favour
    of `http2 on;`; the local replicas run Debian 12's nginx 1.22, which predates the directive."""
    versions = dict(
        line.split("=", 1)
        for line in (ROOT / "deploy" / "versions.env").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    image = re.fullmatch(r"nginx:(\d+)\.(\d+)\.(\d+)(?:-\w+)?", versions["NGINX_IMAGE"])
    assert image and tuple(int(part) for part in image.groups()) >= (1, 25, 1), versions["NGINX_IMAGE"]
    compose_conf = (ROOT / "deploy" / "nginx" / "compose.conf").read_text()
    assert re.search(r"listen 8001;\n\s*http2 on;", compose_conf)
    assert not re.search(r"^\s*listen [^;#]*http2", compose_conf, re.M), "the deprecated form"
    directive_form = _rendered().replace(
        "listen 127.0.0.1:18001 http2;", "listen 127.0.0.1:18001;\nhttp2 on;"
    )
    result = _nginx_test(tmp_path, directive_form)
    if _nginx_version() < (1, 25, 1):
        assert result.returncode != 0 and 'unknown directive "http2"' in result.stderr, result.stderr
        assert "listen @HOST@:@GRPC_PORT@ http2;" in TEMPLATE.read_text()
    else:
        assert result.returncode == 0, result.stderr


def _nginx_version() -> tuple[int, ...]:
    banner = subprocess.run([str(find_nginx()), "-v"], capture_output=True, text=True, timeout=30).stderr
    match = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", banner)
    assert match, banner
    return tuple(int(part) for part in match.groups())


def _rendered() -> str:
    return render_nginx_config(
        TEMPLATE.read_text(),
        host="127.0.0.1",
        http_port=18000,
        grpc_port=18001,
        http_backends=["127.0.0.1:1001"],
        grpc_backends=["127.0.0.1:2001"],
        max_fails=1,
        fail_timeout_s=5,
    )


def _nginx_test(folder: Path, config: str) -> subprocess.CompletedProcess[str]:
    """``nginx -t`` on ``config`` with its own prefix under ``folder``, limits.conf beside it; fails with the
    install instruction when the package is missing."""
    nginx = find_nginx()
    for sub in ("logs", "tmp"):
        (folder / sub).mkdir(exist_ok=True)
    shutil.copyfile(TEMPLATE.parent / LIMITS, folder / LIMITS)
    conf = folder / "nginx.conf"
    conf.write_text(config)
    return subprocess.run(
        [str(nginx), "-t", "-p", f"{folder}/", "-e", str(folder / "logs" / "error.log"), "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
    )
