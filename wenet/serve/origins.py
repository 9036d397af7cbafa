"""Which web pages may open a WebSocket session: the Origin allow-list of the server.

A browser sends ``Origin: scheme://host[:port]`` (the page's origin) with every WebSocket
handshake and lets any page connect to any address, the user's own ``127.0.0.1``
included; only the server can refuse. The policy (issue 57):

* no ``Origin`` header: accepted. Browsers always send one, so this is a script or a
  program (the Python client, websocat, a runtime), which could send any header anyway;
* same origin: the Origin's ``host:port`` equals the handshake's ``Host`` (default
  ports filled in from the Origin's scheme), i.e. the server's own page at ``/``;
* an origin in ``--allowed_origins`` (``scheme://host[:port]``, compared without case
  and default ports), or any origin when the list holds ``*``;
* anything else, ``Origin: null`` (sandboxed frames, ``file:`` pages) included: HTTP 403.

A page that makes a browser resolve its own name to 127.0.0.1 (DNS rebinding) sends a
Host of that name, not the server's address; put a reverse proxy that checks Host in
front of a server reachable from untrusted networks.
"""
from __future__ import annotations

from typing import Iterable, Optional, Tuple
from urllib.parse import urlsplit

ANY_ORIGIN = "*"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(host: str, port: Optional[int], scheme: str) -> str:
    return f"{host.lower()}:{port if port is not None else _DEFAULT_PORTS.get(scheme, 0)}"


def normalise_origin(origin: str) -> Optional[str]:
    """``scheme://host:port`` (lower case, the default port written out) of an Origin,
    or None when it is not of that form (``null``, a path, another scheme)."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname \
            or parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return None
    scheme = parts.scheme.lower()
    return f"{scheme}://{_host_port(parts.hostname, port, scheme)}"


def parse_allowed_origins(values: Iterable[str]) -> Tuple[str, ...]:
    """The ``--allowed_origins`` values (each may hold several, comma-separated)
    normalised; ValueError naming a value that is neither ``*`` nor an origin."""
    allowed = []
    for value in values:
        for item in filter(None, (v.strip() for v in value.split(","))):
            normal = ANY_ORIGIN if item == ANY_ORIGIN else normalise_origin(item)
            if normal is None:
                raise ValueError(f"--allowed_origins: {item!r} is not an origin "
                                 "(scheme://host[:port], e.g. https://asr.example.org, "
                                 "or * for any page)")
            allowed.append(normal)
    return tuple(allowed)


def origin_allowed(origin: Optional[str], host: Optional[str], allowed: Tuple[str, ...]) -> bool:
    """Whether a handshake with these ``Origin`` and ``Host`` headers may open a session
    (``allowed``: from :func:`parse_allowed_origins`)."""
    if origin is None or ANY_ORIGIN in allowed:
        return True
    normal = normalise_origin(origin)
    if normal is None:
        return False
    if normal in allowed:
        return True
    if not host:
        return False
    scheme = normal.split("://", 1)[0]
    try:
        own = urlsplit(f"//{host.strip()}")
        return own.hostname is not None and \
            _host_port(own.hostname, own.port, scheme) == normal.split("://", 1)[1]
    except ValueError:
        return False
