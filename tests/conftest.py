"""Fixtures that start real servers on free ports and clean up what they made."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis.asyncio as redis

from aioqueue import EventService, EventServiceBuilder, FixedDelays
from aioqueue._embedded_server import EmbeddedServer

ServerFactory = Callable[..., EmbeddedServer]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedServer]:
    """One server shared by the whole session."""
    with EmbeddedServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: EmbeddedServer) -> str:
    return redis_server.url


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[redis.Redis]:
    """A client on the session server, whose data is flushed before the test."""
    client = redis.Redis.from_url(redis_url)
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture
def server_factory() -> Iterator[ServerFactory]:
    """Start servers of their own (e.g. `appendonly=True`); all are stopped at teardown."""
    servers: list[EmbeddedServer] = []

    def make(**kwargs: Any) -> EmbeddedServer:
        server = EmbeddedServer(**kwargs)
        # Registered before start so that a failed start still gets its directory removed.
        servers.append(server)
        server.start()
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def service_builder(redis_client: redis.Redis) -> Callable[[], EventServiceBuilder]:
    """Builders on the (flushed) session server with settings that keep tests fast."""

    def make() -> EventServiceBuilder:
        return (
            EventService.builder()
            .client(redis_client)
            .scheduling_interval(0.05)
            .polling_timeout(0.2)
            .handler_timeout(1.0)
            .shutdown_grace(2.0)
            .retry_policy(FixedDelays([0.05]))
        )

    return make
