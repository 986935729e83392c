"""The chaos proxy itself: it forwards, cuts with a reset, and refuses while the server is down."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from aioqueue.testing import CuttingProxy, EmbeddedServer, ProxyStatistics

ServerFactory = Callable[..., EmbeddedServer]


def no_retries(url: str) -> redis.Redis:
    """A client that reports the first connection error instead of retrying it away."""
    return redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0))


async def test_the_proxy_forwards_cuts_and_refuses_while_the_server_is_down(
    server_factory: ServerFactory,
) -> None:
    """Commands must pass through unchanged; cut_all() must break the open connection (the
    client sees a connection error, then reconnects through the proxy); while the server is
    down the proxy must close new connections instead of hanging them."""
    server = server_factory()
    async with CuttingProxy(server.port) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}"
        async with no_retries(url) as client:
            await client.set("k", "v")
            assert await client.get("k") == b"v"
            assert proxy.statistics() == ProxyStatistics(
                accepted=1, open=1, cut=0, upstream_refused=0
            )

            assert proxy.cut_all() == 1
            with pytest.raises(redis.ConnectionError):
                await client.get("k")
            assert await client.get("k") == b"v"  # a new connection, through the proxy

            server.kill()
            await client.connection_pool.disconnect()
            with pytest.raises(redis.ConnectionError):
                await client.get("k")
            server.start()
            await client.connection_pool.disconnect()
            assert await client.ping()
        statistics = proxy.statistics()
    assert statistics.cut == 1
    assert statistics.upstream_refused >= 1
    assert statistics.accepted >= 3
