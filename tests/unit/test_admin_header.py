"""The restricted-API header is defined once in Python (tritonrepo/access.py); the copies that must stand
alone (the probe inside NVIDIA's image, compose, the Kubernetes manifests) are checked against it here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tritonrepo.access import ADMIN_HEADER, RESTRICTED_GRPC_PROTOCOLS, RESTRICTED_HTTP_APIS

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = ROOT / "tritonrepo" / "access.py"
PACKAGES = ("clients", "demo", "export", "loadtest", "tritonlocal", "tritonrepo", "model_repository")
RESTRICTION_FLAGS = {
    "--http-restricted-api": RESTRICTED_HTTP_APIS,
    "--grpc-restricted-protocol": RESTRICTED_GRPC_PROTOCOLS,
}


def _string_constants(path: Path) -> list[str]:
    """The module's string literals, docstrings left out (prose may name the header)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_the_probe_that_stands_alone_sends_the_same_header() -> None:
    probe = ast.parse((ROOT / "deploy" / "tritonserver" / "model_probe.py").read_text(encoding="utf-8"))
    values = [
        node.value.value
        for node in probe.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["ADMIN_HEADER"]
        and isinstance(node.value, ast.Constant)
    ]
    assert values == [ADMIN_HEADER]


def _server_arguments(where: str) -> list[str]:
    if where == "compose":
        return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["tritonserver"][
            "command"
        ]
    documents = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "deployment.yaml").read_text())
    deployment = next(d for d in documents if d and d.get("kind") == "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "tritonserver")["args"]


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_the_deployments_restrict_the_launchers_apis_with_the_same_header(where: str) -> None:
    flags = dict(a.split("=", 1) for a in _server_arguments(where) if a.split("=", 1)[0] in RESTRICTION_FLAGS)
    assert set(flags) == set(RESTRICTION_FLAGS), f"{where} must restrict both protocols"
    for flag, apis in RESTRICTION_FLAGS.items():
        listed, _, restriction = flags[flag].partition(":")
        assert listed.split(",") == list(apis), f"{where} {flag}"
        assert restriction.split("=", 1)[0] == ADMIN_HEADER, f"{where} {flag}"


def test_no_other_python_module_spells_the_header() -> None:
    spelled = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != DEFINITION and not path.is_symlink()
        for value in _string_constants(path)
        if ADMIN_HEADER in value
    ]
    assert spelled == [], f"import ADMIN_HEADER from tritonrepo.access instead: {spelled}"
