"""Talking to Redis from Spark's synchronous code, on the driver and in executor tasks.

The library's client is asynchronous. Spark calls plain functions, and a driver may itself be
inside a running event loop (a notebook), so each session runs its own event loop in a
helper thread (an anyio blocking portal) and the caller's thread only waits on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal
from redis.asyncio.cluster import RedisCluster

from aioqueue._engine.client import RedisClient, client_from_url
from aioqueue._engine.keys import QueueLayout
from aioqueue._engine.registry import resolve_layout as resolve_registered_layout
from aioqueue._model.errors import PartitionCountMismatchError

from ._columns import InvalidDataFrameError

__all__ = ["RedisSession", "redis_session", "resolve_layout"]

R = TypeVar("R")


class RedisSession:
    """A client made for one Spark task (or one driver step) and the loop it runs on."""

    __slots__ = ("_portal", "client")

    def __init__(self, portal: BlockingPortal, client: RedisClient) -> None:
        self._portal = portal
        self.client = client

    def run(self, operation: Callable[[RedisClient], Awaitable[R]]) -> R:
        """Runs `operation(client)` on the session's loop and returns its result."""
        return self._portal.call(operation, self.client)

    def submit(self, operation: Callable[[RedisClient], Awaitable[R]]) -> Future[R]:
        """Starts `operation(client)` on the session's loop; the caller goes on meanwhile."""
        return self._portal.start_task_soon(operation, self.client)


@contextmanager
def redis_session(url: str) -> Iterator[RedisSession]:
    """A connected session on `url` (redis://, rediss://, redis+cluster://), closed on exit.

    Clients cannot be pickled, so every Spark task opens its own with this.
    """
    with start_blocking_portal() as portal:
        client = client_from_url(url)
        try:
            if isinstance(client, RedisCluster):
                # Concurrent first commands on an uninitialized cluster client can run twice.
                portal.call(client.initialize)
            yield RedisSession(portal, client)
        finally:
            portal.call(client.aclose)


def resolve_layout(
    session: RedisSession,
    prefix: str,
    event_type: str,
    partitions: int | None,
    *,
    record: bool,
) -> QueueLayout:
    """The type's layout, through the registry's one resolver (see
    aioqueue._engine.registry.resolve_layout): a job that schedules records a new type, a
    job that reads does not. A count that contradicts the registry is an error: events
    written to other keys than the consumers read would never be delivered."""

    async def resolve(client: RedisClient) -> QueueLayout:
        return await resolve_registered_layout(
            client, prefix, event_type, partitions, record=record
        )

    try:
        return session.run(resolve)
    except (PartitionCountMismatchError, ValueError) as exc:
        raise InvalidDataFrameError(str(exc)) from exc
