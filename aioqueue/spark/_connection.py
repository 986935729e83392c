"""Talking to Redis from Spark's synchronous code, on the driver and in executor tasks.

Spark calls plain functions, so they talk to Redis on a blocking client and run the
library's conversations (aioqueue._transport.steps) with `run_steps_sync`: no event loop, and
nothing that minds a driver already inside a running loop (a notebook).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from aioqueue._model.errors import PartitionCountMismatchError
from aioqueue._transport.client import SyncRedisClient, sync_client_from_url
from aioqueue._transport.steps import run_steps_sync
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.registry import resolve_layout_steps
from aioqueue._wire.schemas import PublishedSchema, read_schema_steps

from ._columns import InvalidDataFrameError

__all__ = ["published_schema", "redis_client", "resolve_layout"]


@contextmanager
def redis_client(url: str) -> Iterator[SyncRedisClient]:
    """A blocking client on `url` (redis://, rediss://, redis+cluster://), closed on exit.

    Clients cannot be pickled, so every Spark task opens its own with this.
    """
    client = sync_client_from_url(url)
    try:
        yield client
    finally:
        client.close()


def resolve_layout(
    client: SyncRedisClient,
    prefix: str,
    event_type: str,
    partitions: int | None,
    *,
    record: bool,
) -> QueueLayout:
    """The type's layout, through the registry's one resolver (see
    aioqueue._wire.registry.resolve_layout_steps): a job that schedules records a new
    type, a job that reads does not. A count that contradicts the registry is an error:
    events written to other keys than the consumers read would never be delivered."""
    steps = resolve_layout_steps(prefix, event_type, partitions, record=record)
    try:
        return run_steps_sync(client, steps)
    except (PartitionCountMismatchError, ValueError) as exc:
        raise InvalidDataFrameError(str(exc)) from exc


def published_schema(
    client: SyncRedisClient, prefix: str, event_type: str
) -> PublishedSchema | None:
    """The type's published schema, if a service published one."""
    return run_steps_sync(client, read_schema_steps(prefix, event_type))
