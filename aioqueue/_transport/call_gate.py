"""How many calls a service sends to Redis at once, and on which connections.

A service waits for work across any number of event types and partitions, and produces to
any number of them, so nothing it does may cost a connection per type: every call it makes
goes through its client's CallGate, which lets at most CALLS_AT_ONCE of them run at once and
makes the others wait their turn (within their reply deadline) instead of taking another
connection. On one server (and through Sentinel) each slot of the gate keeps a connection of
the client's pool for its calls (HeldConnection: no pool round trip per call, which at full
speed was a sixth of a claim's Python); on a cluster a slot is a permit, and the call takes a
connection of its node's pool, so a service holds at most CALLS_AT_ONCE per node there.

A call made outside any gate (the CLI, a client nobody registered) runs as before. The gate
is found by the client (`gate_of`), so the one step driver (steps.py) and the few direct
calls (`gated_call`) need no other argument.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MaxConnectionsError

from aioqueue._model.errors import ConfigurationError
from aioqueue._transport.client import (
    REPLY_TIMEOUT,
    RedisClient,
    is_cluster,
    within_reply_timeout,
)
from aioqueue._transport.held_connection import HeldConnection

__all__ = [
    "CALLS_AT_ONCE",
    "CONNECTIONS_NEEDED",
    "CallGate",
    "check_room",
    "close_gate",
    "gate_of",
    "gated_call",
    "open_gate",
    "retrying_a_full_pool",
]

T = TypeVar("T")

CALLS_AT_ONCE = 8
"""Calls one service sends at once. A claim, a dispatch of every due queue (one pipeline),
an enqueue batch and an acknowledgement take a slot each for one round trip, so a few slots
keep a service at full speed, and waiting for work takes none (see wake_ups.py)."""
CONNECTIONS_NEEDED = 2 * CALLS_AT_ONCE + 2
"""Connections a service may hold on one server (on a cluster: on each node): a connection
per slot, one more per slot for a direct call made in it (`gated_call`, which goes through
the client's own pool), the subscription that carries wake-ups, and one to spare."""
# While a shared pool is full (a client the application also uses), a call waits this long
# between tries, within its reply deadline.
_FULL_POOL_RETRY = 0.01


class CallGate:
    """At most `size` calls of one client at once (see the module docstring)."""

    def __init__(self, client: RedisClient, size: int = CALLS_AT_ONCE) -> None:
        self._client = client
        self._permits = asyncio.Semaphore(size)
        self._idle: list[HeldConnection] = []
        self._made: list[HeldConnection] = []
        self.users = 0
        """Services running on this client (several may share one a caller passed in)."""

    async def acquire(self) -> HeldConnection:
        """A free slot's connection (on a cluster it holds nothing), waiting for one while
        every slot is taken; give it back with release()."""
        await self._permits.acquire()
        return self._idle.pop() if self._idle else self._make()

    def release(self, held: HeldConnection) -> None:
        self._idle.append(held)
        self._permits.release()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[HeldConnection]:
        """A slot for one conversation (acquire and release around it)."""
        held = await self.acquire()
        try:
            yield held
        finally:
            self.release(held)

    def _make(self) -> HeldConnection:
        held = HeldConnection(self._client)
        self._made.append(held)
        return held

    async def close(self) -> None:
        """Gives every kept connection back to the pool (the last service on it stops). A
        conversation still under way finishes on the client's own pool."""
        made, self._made, self._idle = self._made, [], []
        for held in made:
            await held.release()


_gates: weakref.WeakKeyDictionary[object, CallGate] = weakref.WeakKeyDictionary()


def open_gate(client: RedisClient) -> CallGate:
    """Puts `client`'s calls behind a gate from now on (a service starts on it); services
    sharing a client share its gate."""
    gate = _gates.get(client)
    if gate is None:
        gate = _gates[client] = CallGate(client)
    gate.users += 1
    return gate


async def close_gate(client: RedisClient) -> None:
    """A service on `client` stopped: once none is left, its calls go through as before,
    and the gate's connections go back to the pool."""
    gate = _gates.get(client)
    if gate is None:
        return
    gate.users -= 1
    if gate.users <= 0:
        del _gates[client]
        await gate.close()


def gate_of(client: object) -> CallGate | None:
    return _gates.get(client)


async def gated_call(
    client: RedisClient, call: Callable[[], Awaitable[T]], limit: float | None = None
) -> T:
    """Awaits `call()` (one redis-py command of `client`, made only once a slot is free)
    within the reply deadline, through the client's gate if it has one."""
    gate = gate_of(client)
    if gate is None:
        return await _once(call, limit)
    async with gate.slot():
        return await _once(call, limit)


async def _once(call: Callable[[], Awaitable[T]], limit: float | None) -> T:
    try:
        return await within_reply_timeout(call(), limit)
    except MaxConnectionsError:
        return await retrying_a_full_pool(lambda: within_reply_timeout(call(), limit))


async def retrying_a_full_pool(call: Callable[[], Awaitable[T]]) -> T:
    """Awaits `call()`, made again while the client's pool has no connection to spare (a
    pool the application shares, with calls of its own): redis-py refuses such a call at
    once, before sending anything, and a caller of aioqueue would rather wait its turn. After
    REPLY_TIMEOUT it fails as any call without an answer would, naming the cause."""
    with anyio.move_on_after(REPLY_TIMEOUT):
        while True:
            try:
                return await call()
            except MaxConnectionsError:
                await anyio.sleep(_FULL_POOL_RETRY)
    raise RedisConnectionError(
        f"no connection of the client's pool came free within {REPLY_TIMEOUT:g} s: its "
        f"max_connections leaves no room for aioqueue's calls (a service needs "
        f"{CONNECTIONS_NEEDED})"
    )


def pool_size(client: RedisClient) -> int | None:
    """How many connections the client may open (on a cluster: to each node), None when
    its pool sets no limit."""
    if is_cluster(client):
        return int(client.nodes_manager.connection_kwargs.get("max_connections", 100))
    limit = getattr(client.connection_pool, "max_connections", None)
    return None if limit is None else int(limit)


def check_room(client: RedisClient) -> None:
    """Refuses a client whose pool has no room for what a service holds (see
    CONNECTIONS_NEEDED); raises ConfigurationError naming the number."""
    size = pool_size(client)
    if size is not None and size < CONNECTIONS_NEEDED:
        raise ConfigurationError(
            f"the client's pool allows {size} connections; a service needs at least "
            f"{CONNECTIONS_NEEDED} (on a cluster: to each node): pass a client made with "
            f"max_connections={CONNECTIONS_NEEDED} or more, or a URL and let the service make "
            "its own"
        )
