"""URL parsing: the scheme picks the protocol; bare addresses need protocol= (or are HTTP)."""

from __future__ import annotations

import pytest

from clients.endpoint import Endpoint, parse_url
from clients.transport import SyncTransport


@pytest.mark.parametrize(
    ("url", "protocol", "expected"),
    [
        ("http://127.0.0.1:8000", None, Endpoint(protocol="http", host="127.0.0.1", port=8000)),
        ("grpc://127.0.0.1:8001", None, Endpoint(protocol="grpc", host="127.0.0.1", port=8001)),
        ("GRPC://triton.local:9001/", None, Endpoint(protocol="grpc", host="triton.local", port=9001)),
        ("127.0.0.1:8001", "grpc", Endpoint(protocol="grpc", host="127.0.0.1", port=8001)),
        ("127.0.0.1:8000", None, Endpoint(protocol="http", host="127.0.0.1", port=8000)),
        ("grpc://localhost", None, Endpoint(protocol="grpc", host="localhost", port=8001)),
        ("http://[::1]:8000", "http", Endpoint(protocol="http", host="::1", port=8000)),
    ],
)
def test_urls_parse_into_protocol_host_and_port(url: str, protocol: str | None, expected: Endpoint) -> None:
    assert parse_url(url, protocol) == expected


def test_the_address_is_what_tritonclient_wants_without_a_scheme() -> None:
    assert parse_url("grpc://127.0.0.1:8001").address == "127.0.0.1:8001"
    assert parse_url("http://[::1]:8000").address == "[::1]:8000"


@pytest.mark.parametrize(
    ("url", "protocol", "message"),
    [
        ("https://127.0.0.1:8000", None, "TLS is not supported"),
        ("ftp://127.0.0.1:8000", None, "unsupported URL scheme 'ftp'"),
        ("http://127.0.0.1:8000", "grpc", "says http but protocol='grpc'"),
        ("http://127.0.0.1:8000/v2", None, "no path"),
        ("http://127.0.0.1:99999", None, "invalid port"),
        ("", None, "must not be empty"),
        ("127.0.0.1:8000", "websocket", "protocol must be one of http, grpc"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url: str, protocol: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_url(url, protocol)


@pytest.mark.parametrize("command", ["classify", "embed", "health", "models", "stats"])
def test_every_cli_command_prints_its_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from clients.cli import main

    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_a_blocking_grpc_client_closes_its_channel_once_though_collected_after_its_close() -> None:
    """tritonclient's __del__ closes the client again; a second close of the channel is what hung a Locust
    worker's exit under gevent (clients/transport.py, _GrpcClient)."""
    transport = SyncTransport(parse_url("grpc://127.0.0.1:1"))
    client = transport._client(timeout_s=5.0)  # no connection is made until a call
    channel, closes = client._channel, []
    close = channel.close
    channel.close = lambda: (closes.append(1), close())[1]
    transport.close()
    client.__del__()  # what the garbage collector calls
    assert closes == [1]
