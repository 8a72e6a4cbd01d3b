"""Where the server is and which protocol to speak: ``http://host:8000`` or ``grpc://host:8001``."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from tritonrepo.choices import check_choice

PROTOCOLS = ("http", "grpc")
DEFAULT_PORTS = {"http": 8000, "grpc": 8001}


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    protocol: str
    host: str
    port: int

    def __post_init__(self) -> None:
        check_choice("protocol", self.protocol, PROTOCOLS)
        if not self.host:
            raise ValueError("host must not be empty")
        if not 0 < self.port <= 65535:
            raise ValueError(f"port must be between 1 and 65535, got {self.port}")

    @property
    def address(self) -> str:
        """``host:port`` as tritonclient wants it (no scheme); IPv6 hosts in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.protocol}://{self.address}"


def parse_url(url: str, protocol: str | None = None) -> Endpoint:
    """Parse ``http://host:port``, ``grpc://host:port`` or a bare ``host:port``.

    A bare address needs ``protocol`` (or is taken as http). A scheme and a ``protocol`` that disagree
    are an error, as are paths, TLS schemes and unknown schemes. A missing port is the protocol's
    default (8000 for http, 8001 for grpc).
    """
    if protocol is not None:
        check_choice("protocol", protocol, PROTOCOLS)
    text = url.strip()
    if not text:
        raise ValueError("url must not be empty; use e.g. 'http://127.0.0.1:8000' or 'grpc://127.0.0.1:8001'")
    scheme = text.split("://", 1)[0].lower() if "://" in text else None
    if scheme is None:
        text = f"{protocol or 'http'}://{text}"
    elif scheme not in PROTOCOLS:
        hint = " (TLS is not supported by this client)" if scheme in ("https", "grpcs") else ""
        raise ValueError(f"unsupported URL scheme {scheme!r} in {url!r}{hint}; use http:// or grpc://")
    elif protocol is not None and protocol != scheme:
        raise ValueError(f"url {url!r} says {scheme} but protocol={protocol!r}; drop one of them")
    parts = urlsplit(text)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"url {url!r} must be scheme://host:port with no path, got path {parts.path!r}")
    try:
        port = parts.port
    except ValueError as e:
        raise ValueError(f"url {url!r} has an invalid port: {e}") from e
    chosen = parts.scheme.lower()
    return Endpoint(protocol=chosen, host=parts.hostname or "", port=port or DEFAULT_PORTS[chosen])


def server_addresses(url: str, grpc_url: str | None = None) -> tuple[str, str]:
    """A server's HTTP and gRPC ``host:port`` from ``url`` (``http://host:port`` or ``host:port``) and
    ``grpc_url`` (default: the same host, gRPC's default port), as the commands' ``--url`` and
    ``--grpc-url`` name them. Raises ValueError naming what is wrong (:func:`parse_url`)."""
    try:
        http = parse_url(url, "http")
    except ValueError as e:
        raise ValueError(f"--url: {e}") from e
    try:
        grpc = parse_url(grpc_url or f"{http.address.rsplit(':', 1)[0]}:{DEFAULT_PORTS['grpc']}", "grpc")
    except ValueError as e:
        raise ValueError(f"--grpc-url: {e}") from e
    return http.address, grpc.address
