"""What makes the HTTP API safe to leave running on an operator's machine: no other web page
can use it through the operator's browser.

- Writes need `Content-Type: application/json` (415): a cross-site page can send a form or
  text/plain without asking, but JSON only after a CORS preflight, which this app never
  grants.
- A request whose `Origin` is not the server's own is refused (403): browsers send it with
  every cross-origin write (and most reads), whatever the content type.
- A request whose `Host` is not one the server was started for is refused (403): a page of
  another site that re-points its DNS name to 127.0.0.1 (DNS rebinding) reaches a loopback
  server as same-origin, but with its own name in Host.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.requests import Request

__all__ = ["RequestGuard", "hosts_for_bind", "is_loopback"]

_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def hosts_for_bind(host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host header values a server bound to `host:port` answers: the loopback names for
    a loopback bind, the address itself otherwise, and the operator's `extra` names (a DNS
    name of the machine, a proxy's), with and without the port."""
    names = {"127.0.0.1", "localhost", "[::1]"} if is_loopback(host) else {_as_in_host(host)}
    names |= {_as_in_host(name) for name in extra}
    return frozenset(name.lower() for base in names for name in (base, f"{base}:{port}"))


def _as_in_host(name: str) -> str:
    """`name` as a Host header carries it: an IPv6 address in brackets (RFC 3986), so that a
    server bound to one answers the requests made to it."""
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return name
    return f"[{address.compressed}]" if address.version == 6 else name


class RequestGuard:
    """Checks one request; `allowed_hosts` None accepts any Host (an app mounted in another
    decides that itself)."""

    def __init__(self, allowed_hosts: frozenset[str] | None) -> None:
        self._allowed_hosts = allowed_hosts

    def refusal(self, request: Request) -> tuple[int, str] | None:
        """(status, reason) when the request must be refused, else None."""
        host = request.headers.get("host", "")
        if self._allowed_hosts is not None and host.lower() not in self._allowed_hosts:
            return 403, (
                f"Host {host!r} is not one this server answers (DNS rebinding?); start it "
                "with --allow-host NAME to add a name"
            )
        origin = request.headers.get("origin")
        if origin is not None and not _same_origin(origin, host):
            return 403, f"requests from {origin!r} are not accepted: this API is same-origin only"
        if request.method in _WRITES:
            content_type = request.headers.get("content-type", "")
            if content_type.split(";")[0].strip().lower() != "application/json":
                return 415, "writes need Content-Type: application/json"
        return None


def _same_origin(origin: str, host: str) -> bool:
    if origin == "null":  # sandboxed frames and file:// pages
        return False
    return urlsplit(origin).netloc.lower() == host.lower()
