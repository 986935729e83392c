"""A connection the server closed while it sat idle is connected again before it is used
(aioqueue/_transport/closed_connections.py), so the first command after a server restart works:
redis-py 8's pool hands such a connection out while maintenance notifications are enabled
(the default), and the first command on it fails."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio as redis
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError

from aioqueue import EventService
from aioqueue._transport.client import client_from_url
from aioqueue._wire.keys import QueueKeys
from aioqueue.testing import EmbeddedCluster
from tests.conftest import ServerFactory
from tests.support.common import PaymentCheck, restart_empty


async def test_the_first_command_after_a_restart_works_on_a_client_aioqueue_made(
    server_factory: ServerFactory,
) -> None:
    server = server_factory()
    ours = client_from_url(server.url)
    plain = redis.Redis.from_url(server.url)  # redis-py's own, for contrast
    try:
        assert await ours.set("k", "before") is True
        assert await plain.set("k", "before") is True
        await restart_empty(server)

        assert await ours.get("k") is None  # connected again first: the server is empty
        # What the mixin is for: redis-py's own client fails once on its old connection (if
        # a redis-py release checks again, this fails and closed_connections.py can go).
        with pytest.raises(RedisConnectionError):
            await plain.get("k")
    finally:
        await ours.aclose()
        await plain.aclose()


async def test_an_enqueue_right_after_a_restart_returns(server_factory: ServerFactory) -> None:
    server = server_factory()
    service = EventService.builder().url(server.url).build()
    async with service:
        assert await service.enqueue(PaymentCheck(id="before", order_id=1), delay=3600)
        await restart_empty(server)
        # The service's producer keeps a connection for its writes; it is connected again.
        assert await service.enqueue(PaymentCheck(id="after", order_id=2), delay=3600)


async def test_an_enqueue_right_after_a_cluster_master_restarted_returns() -> None:
    """On a cluster a script call names its node, and redis-py's cluster client does not retry
    such a call after a connection error: without the check the first enqueue after the
    master of its slot restarted raised."""
    with EmbeddedCluster(masters=3) as cluster:
        slot = key_slot(QueueKeys.for_type("aioqueue", "PaymentCheck").events.encode())
        master = cluster.master_of_slot(slot)
        service = EventService.builder().url(cluster.url).build()
        async with service:
            assert await service.enqueue(PaymentCheck(id="before", order_id=1), delay=3600)
            cluster.kill(master)
            # Back well within the node timeout, with its saved configuration: same slots.
            await anyio.to_thread.run_sync(cluster.restart, master)
            await anyio.to_thread.run_sync(cluster.wait_until_ok)
            assert await service.enqueue(PaymentCheck(id="after", order_id=2), delay=3600)
