"""A TCP proxy on loopback that cuts its connections on demand, for chaos runs and tests.

Not part of the library's behaviour: like the embedded server, it ships in aioqueue.testing
so that `benchmarks/chaos.py`, this project's tests and yours share one implementation. It
listens on 127.0.0.1 only, forwards each connection to an upstream address (the Redis server),
and `cut()` drops connections the way a failing network does: both sides get a reset,
mid-command or not. `hold_replies()` keeps what the server sends from reaching the clients
until `release_replies()`: with a cut in between, a command the server ran loses its reply,
as it does when a link fails after the request went through. With `tls=` it terminates TLS,
so a client can speak `rediss://` to a server without TLS support.
"""

from __future__ import annotations

import random
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import ByteStream, Listener, SocketAttribute, TaskGroup
from anyio.streams.tls import TLSListener

__all__ = ["CuttingProxy", "ProxyStatistics"]

_LOOPBACK = "127.0.0.1"
# SO_LINGER on with a zero timeout: close() sends RST instead of FIN, as a dropped link would.
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)


@dataclass(frozen=True, slots=True)
class ProxyStatistics:
    accepted: int
    """Client connections accepted since start."""
    open: int
    """Connections forwarding right now."""
    cut: int
    """Connections dropped by cut() or cut_all()."""
    upstream_refused: int
    """Client connections closed at once because the upstream did not accept (server down)."""


class _Link:
    """One proxied connection: its two streams and the scope that forwards between them."""

    __slots__ = ("scope", "streams", "was_cut")

    def __init__(self, streams: tuple[ByteStream, ByteStream]) -> None:
        self.streams = streams
        self.scope = anyio.CancelScope()
        self.was_cut = False


class CuttingProxy:
    """Forwards connections from a loopback port to `upstream_port`; `cut()` drops them.

    `async with CuttingProxy(server.port) as proxy:` listens on `proxy.port`. Upstream
    connections are made per client connection, so a restarted server is reached again by
    the next connection a client opens.
    """

    def __init__(
        self,
        upstream_port: int,
        *,
        upstream_host: str = _LOOPBACK,
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._requested_port = port
        self._tls = tls
        # A dict for its order: the same seed cuts the same connections of the same run.
        self._links: dict[_Link, None] = {}
        self._task_group: TaskGroup | None = None
        self._listener: Listener[Any] | None = None
        self.port = 0
        self._accepted = 0
        self._cut = 0
        self._upstream_refused = 0
        self._replies_held: anyio.Event | None = None

    def statistics(self) -> ProxyStatistics:
        """Connections accepted so far, open now, cut (by `cut()` or `cut_all()`), and
        refused by the server behind the proxy, as a snapshot."""
        return ProxyStatistics(
            accepted=self._accepted,
            open=len(self._links),
            cut=self._cut,
            upstream_refused=self._upstream_refused,
        )

    async def __aenter__(self) -> CuttingProxy:
        listener = await anyio.create_tcp_listener(
            local_host=_LOOPBACK, local_port=self._requested_port
        )
        self._listener = listener
        self.port = listener.extra(SocketAttribute.local_port)
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        if self._tls is not None:
            # Not standard-compatible: Redis clients close without a TLS close_notify.
            tls_listener = TLSListener(listener, self._tls, standard_compatible=False)
            task_group.start_soon(tls_listener.serve, self._forward, task_group)
        else:
            task_group.start_soon(listener.serve, self._forward, task_group)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._task_group is not None
        assert self._listener is not None
        self._task_group.cancel_scope.cancel()
        try:
            await self._task_group.__aexit__(None, None, None)
        finally:
            self._task_group = None
            await self._listener.aclose()

    def cut(self, count: int = 1, *, rng: random.Random | None = None) -> int:
        """Drops up to `count` open connections chosen at random; returns how many."""
        chosen = (rng or random).sample(list(self._links), min(count, len(self._links)))
        for link in chosen:
            self._drop(link)
        return len(chosen)

    def cut_all(self) -> int:
        """Drops every open connection; returns how many."""
        links = list(self._links)
        for link in links:
            self._drop(link)
        return len(links)

    def hold_replies(self) -> None:
        """Stops forwarding what the server sends, on every connection, until
        `release_replies()`: requests still go through, and the server runs them."""
        if self._replies_held is None:
            self._replies_held = anyio.Event()

    def release_replies(self) -> None:
        """Forwards what the server sends again, held replies first (unless cut meanwhile)."""
        if self._replies_held is not None:
            self._replies_held.set()
            self._replies_held = None

    async def _reply_may_pass(self) -> None:
        while self._replies_held is not None:
            await self._replies_held.wait()

    def _drop(self, link: _Link) -> None:
        if not link.was_cut:
            link.was_cut = True
            self._cut += 1
            link.scope.cancel()

    async def _forward(self, client: ByteStream) -> None:
        self._accepted += 1
        async with client:
            try:
                upstream = await anyio.connect_tcp(*self._upstream)
            except OSError:
                self._upstream_refused += 1
                _reset_on_close(client)
                return
            async with upstream:
                link = _Link((client, upstream))
                self._links[link] = None
                try:
                    with link.scope:
                        async with anyio.create_task_group() as pumps:
                            pumps.start_soon(_pump, client, upstream, link.scope, None)
                            pumps.start_soon(
                                _pump, upstream, client, link.scope, self._reply_may_pass
                            )
                finally:
                    self._links.pop(link, None)
                    if link.was_cut:
                        for stream in link.streams:
                            _reset_on_close(stream)


async def _pump(
    source: ByteStream,
    sink: ByteStream,
    link_scope: anyio.CancelScope,
    may_pass: Callable[[], Awaitable[None]] | None,
) -> None:
    """Copies one direction, each chunk once `may_pass` returns; when either side ends, the
    whole link ends (no half-close)."""
    try:
        async for chunk in source:
            if may_pass is not None:
                await may_pass()
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, ssl.SSLError):
        pass
    finally:
        link_scope.cancel()


def _reset_on_close(stream: ByteStream) -> None:
    try:
        raw: socket.socket = stream.extra(SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    except (OSError, anyio.TypedAttributeLookupError):
        pass
