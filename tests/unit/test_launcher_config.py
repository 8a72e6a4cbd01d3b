from __future__ import annotations

from pathlib import Path

import pytest

from tritonlocal.config import ServerConfig
from tritonlocal.installation import find_installation, prepare_backend_directory, server_environment
from tritonlocal.ports import pick_free_port, port_in_use
from tritonlocal.server import check_repository
from tritonrepo.access import ADMIN_HEADER
from tritonrepo.errors import RepositoryError


def test_server_binds_loopback_by_default() -> None:
    config = ServerConfig(model_repository=Path("model_repository"), http_port=1, grpc_port=2, metrics_port=3)
    command = config.command(Path("tritonserver"), Path("backends"))
    assert "--http-address=127.0.0.1" in command
    assert "--grpc-address=127.0.0.1" in command
    assert "--metrics-address=127.0.0.1" in command
    assert not any(arg.startswith("--http-restricted-api") for arg in command)


def test_fail_fast_is_the_default_and_serving_what_loaded_is_one_flag() -> None:
    ports = {"http_port": 1, "grpc_port": 2, "metrics_port": 3}
    default = ServerConfig(model_repository=Path("r"), **ports).command(Path("t"), Path("b"))
    assert "--strict-readiness=true" in default and not any("--exit-on-error" in a for a in default)
    partial = ServerConfig(model_repository=Path("r"), exit_on_error=False, **ports).command(
        Path("t"), Path("b")
    )
    assert "--exit-on-error=false" in partial and "--strict-readiness=false" in partial


def test_admin_key_restricts_repository_config_shm_and_logging_apis() -> None:
    config = ServerConfig(
        model_repository=Path("r"), http_port=1, grpc_port=2, metrics_port=3, admin_key="s3cret"
    )
    command = config.command(Path("tritonserver"), Path("backends"))
    http = next(arg for arg in command if arg.startswith("--http-restricted-api="))
    grpc = next(arg for arg in command if arg.startswith("--grpc-restricted-protocol="))
    for flag in (http, grpc):
        apis, restriction = flag.split("=", 1)[1].split(":")
        assert {"model-repository", "model-config", "shared-memory", "logging"} <= set(apis.split(","))
        assert restriction == f"{ADMIN_HEADER}=s3cret"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("host", "localhost-ish", "host must be an IP address"),
        ("http_port", 70000, "http_port must be between 0"),
        ("model_control_mode", "auto", "model_control_mode must be"),
        ("admin_key", " ", "admin_key must be a non-empty string"),
    ],
)
def test_server_config_rejects_bad_values_with_a_clear_message(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ServerConfig(model_repository=Path("r"), **{field: value})  # type: ignore[arg-type]


def test_unresolved_ports_cannot_build_a_command() -> None:
    with pytest.raises(ValueError, match="ports must be resolved"):
        ServerConfig(model_repository=Path("r")).command(Path("t"), Path("b"))


def test_free_port_is_free_and_a_bound_port_is_in_use() -> None:
    import socket

    port = pick_free_port("127.0.0.1")
    assert not port_in_use("127.0.0.1", port)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        assert port_in_use("127.0.0.1", port)


def test_backend_directory_holds_python_backend_and_stub_for_this_python(tmp_path: Path) -> None:
    installation = find_installation()
    backend = prepare_backend_directory(installation, tmp_path) / "python"
    assert (backend / "libtriton_python.so").is_file()
    assert (backend / "triton_python_backend_stub").is_file()
    assert (backend / "triton_python_backend_utils.py").is_file()


def test_server_environment_puts_bundled_libraries_and_this_python_first() -> None:
    import sys

    env = server_environment(find_installation(), base={"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib"})
    assert env["LD_LIBRARY_PATH"].split(":")[0].endswith("nvidia_pytriton.libs")
    assert env["LD_LIBRARY_PATH"].split(":")[-1] == "/opt/lib"
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)


def test_missing_and_empty_repositories_are_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="does not exist"):
        check_repository(tmp_path / "nowhere")
    with pytest.raises(RepositoryError, match="is empty"):
        check_repository(tmp_path)
    (tmp_path / "not_a_model").mkdir()
    with pytest.raises(RepositoryError, match="is empty"):
        check_repository(tmp_path)
