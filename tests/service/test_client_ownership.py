"""Who closes the service's Redis client: a client the caller gave it stays open, with its
pooled connections, and a client the service opened from a URL is closed on exit."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import anyio
import pytest
from redis.asyncio.cluster import RedisCluster

from aioqueue import EventServiceBuilder
from aioqueue._transport.client import RedisClient, client_from_url
from tests.support.common import PaymentCheck, Recorder, wait_until

pytestmark = pytest.mark.backends("standalone", "cluster")

Connection = tuple[str, str]
"""(node address, connection id): a server numbers only its own connections. The address is
empty on a standalone server."""


async def connections_named(client: RedisClient, name: str) -> set[Connection]:
    """The connections, on every node, that carry `name` (redis-py names each connection)."""
    by_node: dict[str, list[dict[str, str]]]
    if isinstance(client, RedisCluster):
        # Typed as one node's list; sent to several nodes, the reply is a list per node.
        by_node = cast(
            "dict[str, list[dict[str, str]]]",
            await client.client_list(target_nodes=RedisCluster.ALL_NODES),
        )
    else:
        by_node = {"": await client.client_list()}
    return {
        (node, entry["id"])
        for node, entries in by_node.items()
        for entry in entries
        if entry["name"] == name
    }


async def connection_used(client: RedisClient, node: str) -> Connection:
    """The connection `client` takes from its pool for a command to `node`."""
    if isinstance(client, RedisCluster):
        return node, str(await client.client_id(target_nodes=client.get_node(node_name=node)))
    return node, str(await client.client_id())


async def test_service_leaves_a_client_it_was_given_open(
    redis_client: RedisClient, redis_url: str, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """With `.client(c)`, exiting the service does not close the caller's connections."""
    handler = Recorder()
    async with client_from_url(f"{redis_url}?client_name=caller-owned") as caller_client:
        async with service_builder().client(caller_client).build() as service:
            service.add_handler(PaymentCheck, handler)
            await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
            await handler.wait_for(1)
            before_exit = await connections_named(redis_client, "caller-owned")
        assert before_exit

        # The connection that sat in BLMOVE was dropped by its cancellation, but the pool's
        # idle connections are still the ones from before: commands issued side by side reuse
        # them. Had the service closed the client, every one of them would be a new connection.
        used_after_exit: set[Connection] = set()

        async def use_connection(node: str) -> None:
            used_after_exit.add(await connection_used(caller_client, node))

        async with anyio.create_task_group() as tasks:
            for node, _ in before_exit:
                tasks.start_soon(use_connection, node)
        assert used_after_exit & before_exit
        assert await caller_client.ping() is True


async def test_service_closes_the_client_it_opened(
    redis_client: RedisClient, redis_url: str, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """With `.url(...)`, exiting the service closes every connection it opened."""
    handler = Recorder()
    url = f"{redis_url}?client_name=service-owned"
    async with service_builder().url(url).build() as service:
        service.add_handler(PaymentCheck, handler)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await handler.wait_for(1)
        assert await connections_named(redis_client, "service-owned")

    # The server drops a connection when it reads the close, a moment after the exit.
    async def all_closed() -> bool:
        return not await connections_named(redis_client, "service-owned")

    await wait_until(all_closed, within=2)
