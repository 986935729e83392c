"""A server that stops answering: every call of a service fails after its own deadline.

A service made from a URL has no redis-py socket timeout (see service_client_from_url), so
these deadlines are what keeps a frozen server from hanging it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import anyio
import pytest
import redis.exceptions
from redis.asyncio import Redis

import aioqueue._transport.client
from aioqueue import EventService
from aioqueue._transport.client import service_client_from_url
from tests.conftest import ServerFactory
from tests.support.common import PaymentCheck, Recorder

DEADLINE = 0.5


@pytest.fixture
def short_reply_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aioqueue._transport.client, "REPLY_TIMEOUT", DEADLINE)


@pytest.fixture
def frozen(server_factory: ServerFactory) -> Iterator[tuple[str, int]]:
    """A server of its own (url, pid), continued again at teardown so it can be stopped."""
    server = server_factory()
    assert server.pid is not None
    yield server.url, server.pid
    os.kill(server.pid, signal.SIGCONT)


async def test_a_service_client_has_no_socket_timeout_unless_the_url_sets_one(
    frozen: tuple[str, int],
) -> None:
    url, _ = frozen
    for address, expected in ((url, None), (f"{url}?socket_timeout=3", 3.0)):
        client = service_client_from_url(address)
        assert isinstance(client, Redis)
        assert client.connection_pool.connection_kwargs.get("socket_timeout") == expected
        await client.aclose()


async def test_calls_to_a_frozen_server_fail_after_the_reply_timeout(
    frozen: tuple[str, int], short_reply_timeout: None
) -> None:
    url, pid = frozen
    handler = Recorder()
    async with EventService.builder().url(url).scheduling_interval(0.05).build() as service:
        service.add_handler(PaymentCheck, handler)
        assert await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await handler.wait_for(1)
        os.kill(pid, signal.SIGSTOP)
        for call in (
            lambda: service.enqueue(PaymentCheck(id="p-2", order_id=2), 0),
            lambda: service.cancel(PaymentCheck, "p-2"),
            lambda: service.dead_letters(PaymentCheck),
        ):
            started = time.monotonic()
            with anyio.fail_after(5), pytest.raises(redis.exceptions.TimeoutError):
                await call()
            assert DEADLINE <= time.monotonic() - started < DEADLINE + 1.0
        os.kill(pid, signal.SIGCONT)
        # Back: the service carries on by itself.
        assert await service.enqueue(PaymentCheck(id="p-3", order_id=3), 0)
        await handler.wait_for_id("p-3")
    # p-2's enqueue and its cancel both timed out, and a call that timed out may or may not
    # have run: the frozen server runs what it had read once it is back, from each connection
    # in its own order. So p-2 may be delivered too, before p-3 or after, if its enqueue ran
    # and a dispatch and a claim came before its cancel.
    assert handler.ids[0] == "p-1"
    assert set(handler.ids) <= {"p-1", "p-2", "p-3"}
