"""One subscription per service: the wake-ups the scripts publish, on one connection.

The scripts publish on a queue's channels instead of writing a token to a list that every
waiter would have to block on with a connection of its own (see the wake-ups section of
lua/_prelude.lua): an enqueue that brings the earliest due time forward publishes on the
queue's `wake` channel, a dispatch that fills an empty ready list on its `ready` channel.
A service subscribes to the channels of every queue it dispatches and consumes, on one
connection whatever their number: on one server and through Sentinel a connection of the
client's pool (to the primary), on a cluster a connection to any one node, since a publish
reaches every node of a cluster.

Messages are hints, and lost while the connection is down: each (re)subscription is
reported (`on_subscribed`), and the service then looks at everything as if woken, and its
sweeps (wake_ups.py) catch what a lost message would have said. A server that refuses the
subscription (an ACL user without `&channels`) leaves the service on its sweeps alone, with
one warning.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import anyio
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.exceptions import NoPermissionError

from aioqueue._transport.client import (
    REPLY_TIMEOUT,
    RedisClient,
    ensure_slot_map,
    is_cluster,
    text,
    within_reply_timeout,
)
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff, logger

__all__ = ["Subscriber"]

# How often the listening loop looks at the channels it should be on, and pings a silent
# connection: a connection that died without a reset shows only when something is sent.
POLL = 0.2
PING_AFTER = 5.0
# A refused subscription is tried again this often (an administrator may fix the ACL).
REFUSED_RETRY = 60.0


class Subscriber:
    """Keeps `client` subscribed to `channels` (see set_channels) until cancelled."""

    def __init__(
        self,
        client: RedisClient,
        on_message: Callable[[str], None],
        on_subscribed: Callable[[], None],
    ) -> None:
        self._client = client
        self._on_message = on_message
        self._on_subscribed = on_subscribed
        self._wanted: frozenset[str] = frozenset()
        self.refused = False
        """The server refused the subscription (ACL): only the sweeps find work."""

    def set_channels(self, channels: frozenset[str]) -> None:
        """The channels to be on from now on (applied within POLL)."""
        self._wanted = channels

    async def run(self) -> None:
        errors = ErrorBackoff("listening for wake-ups")
        while True:
            try:
                async with self._pubsub() as pubsub:
                    await self._listen(pubsub, errors)
            except NoPermissionError as exc:
                if not self.refused:
                    logger.warning(
                        "the server refuses this service's subscription to wake-ups (%s): "
                        "its ACL user needs `+subscribe +unsubscribe +publish +ping` and the "
                        "channels `&<prefix>:*` (see the security page). It goes on without "
                        "them: work is found by polling, up to a scheduling interval late",
                        exc,
                    )
                self.refused = True
                await anyio.sleep(REFUSED_RETRY)
            except REDIS_ERRORS as exc:
                await errors.sleep_after(exc)

    async def _listen(self, pubsub: PubSub, errors: ErrorBackoff) -> None:
        subscribed: frozenset[str] = frozenset()
        silent_since = anyio.current_time()
        while True:
            wanted = self._wanted
            if wanted != subscribed:
                first = not subscribed
                if wanted - subscribed:
                    await within_reply_timeout(pubsub.subscribe(*(wanted - subscribed)))
                if subscribed - wanted:
                    await within_reply_timeout(pubsub.unsubscribe(*(subscribed - wanted)))
                subscribed = wanted
                if first:
                    # Whatever was published before now went unheard.
                    errors.reset()
                    self.refused = False
                    self._on_subscribed()
            if not subscribed:
                await anyio.sleep(POLL)
                continue
            message: dict[str, Any] | None = await within_reply_timeout(
                pubsub.get_message(ignore_subscribe_messages=True, timeout=POLL),
                blocking=POLL,
            )
            now = anyio.current_time()
            if message is None:
                if now - silent_since > PING_AFTER:
                    await within_reply_timeout(pubsub.ping())
                    silent_since = now
                continue
            silent_since = now
            if message.get("type") == "message":
                self._on_message(text(message["channel"]))

    @asynccontextmanager
    async def _pubsub(self) -> AsyncIterator[PubSub]:
        client = self._client
        if not is_cluster(client):
            async with _closed_after(client.pubsub()) as pubsub:
                yield pubsub
            return
        # A publish reaches every node of a cluster: any node will do, a new one after an
        # error (the last one may be gone).
        await ensure_slot_map(client)
        node = client.get_random_node()
        pool = ConnectionPool(connection_class=node.connection_class, **node.connection_kwargs)
        node_client = Redis(connection_pool=pool)
        async with _closed_after(node_client), _closed_after(node_client.pubsub()) as pubsub:
            yield pubsub


class _Closable(Protocol):
    async def aclose(self) -> None: ...


_C = TypeVar("_C", bound=_Closable)


@asynccontextmanager
async def _closed_after(resource: _C) -> AsyncIterator[_C]:
    """`resource`, closed however the block ends: shielded from a cancellation, which would
    leave its connection open, and bounded, since the server may be the reason it ended."""
    try:
        yield resource
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(REPLY_TIMEOUT):
            await resource.aclose()
