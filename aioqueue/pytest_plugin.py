"""pytest fixtures for testing your handlers against a real server.

Enable them in your conftest.py (or with `-p aioqueue.pytest_plugin`):

    pytest_plugins = ["aioqueue.pytest_plugin"]

They are not registered on install (no pytest11 entry point): pytest rewrites the assert
statements of every module of a package that registers one, which would change the library
under test in every project that installs it. Celery's plugin is enabled the same way.

    async def test_reminder_is_sent(aioqueue_service):
        sent = []

        async def send(event: Reminder) -> bool:
            sent.append(event.id)
            return True

        async with aioqueue_service as service:
            service.add_handler(Reminder, send)
            await service.enqueue(Reminder(id="r-1", to="a@example.com"), timedelta(hours=3))
            await service.run_due(timedelta(hours=3))   # the three hours pass at once
        assert sent == ["r-1"]

Fixtures:
- `aioqueue_server`: one embedded Valkey/Redis server for the session (aioqueue.testing's
  EmbeddedServer; the `demo` extra provides the binary, or a server on PATH).
- `aioqueue_url`: that server's URL, emptied (FLUSHALL) before the test.
- `aioqueue_builder`: builds services on `aioqueue_url` with settings that keep tests fast
  (short scheduling interval and polling, retries after 0.1 s, 10 s handler timeout); change
  any of them on the builder it returns.
- `aioqueue_service`: a service from `aioqueue_builder`, not started: `async with` it.

The fixtures are plain (not async), so they work with pytest-asyncio, anyio's pytest plugin
or trio's alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from aioqueue import EventService, EventServiceBuilder, FixedDelays
from aioqueue.testing import EmbeddedServer

__all__ = ["aioqueue_builder", "aioqueue_server", "aioqueue_service", "aioqueue_url"]


@pytest.fixture(scope="session")
def aioqueue_server() -> Iterator[EmbeddedServer]:
    """One embedded Valkey/Redis server for the whole test session, on a free loopback
    port, stopped and removed at the end (the `demo` extra provides the binary)."""
    with EmbeddedServer() as server:
        yield server


@pytest.fixture
def aioqueue_url(aioqueue_server: EmbeddedServer) -> str:
    """The session server's `redis://` URL, emptied (FLUSHALL) before the test."""
    _flush(aioqueue_server.url)
    return aioqueue_server.url


@pytest.fixture
def aioqueue_builder(aioqueue_url: str) -> Callable[[], EventServiceBuilder]:
    """A function that returns a new builder of services on `aioqueue_url` with settings
    that keep tests fast: a 50 ms scheduling interval, 0.2 s polling, retries 0.1 s after a
    failure, a 10 s handler timeout and 2 s of shutdown grace. Change any of them on the
    builder it returns, then `build()`."""

    def make() -> EventServiceBuilder:
        return (
            EventService.builder()
            .url(aioqueue_url)
            .scheduling_interval(0.05)
            .polling_timeout(0.2)
            .handler_timeout(10)
            .shutdown_grace(2)
            .retry_policy(FixedDelays([0.1]))
        )

    return make


@pytest.fixture
def aioqueue_service(aioqueue_builder: Callable[[], EventServiceBuilder]) -> EventService:
    """A service from `aioqueue_builder`, not started: `async with aioqueue_service as
    service:` in the test, add handlers, enqueue, and `await service.run_due(...)`."""
    return aioqueue_builder().build()


def _flush(url: str) -> None:
    # The synchronous client: a plain fixture has no event loop to run the asyncio one on.
    with redis.Redis.from_url(url) as client:
        client.flushall()
