"""One round trip to several cluster nodes from one coroutine (node_pipelines.py): each reply
lands on its own command, and a round trip cut short leaves no connection in the pool with a
reply still to come."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.exceptions import MovedError

from aioqueue._transport.node_pipelines import NodeCommands, run_on_nodes
from aioqueue.testing import EmbeddedCluster
from tests.support.common import blocked_in, drop_cluster_node, key_on, wait_until


@pytest.fixture
async def cluster_client(redis_cluster: EmbeddedCluster) -> AsyncIterator[RedisCluster]:
    """A client with one connection a node, so that a call after a round trip that was cut
    short gets the connection that round trip used."""
    async with _client(redis_cluster, max_connections=1) as client:
        yield client


@pytest.fixture
async def observer(redis_cluster: EmbeddedCluster) -> AsyncIterator[RedisCluster]:
    """A client of its own, for looking at the cluster while cluster_client is busy."""
    async with _client(redis_cluster) as client:
        await client.flushall(target_nodes=RedisCluster.PRIMARIES)
        yield client


@contextlib.asynccontextmanager
async def _client(cluster: EmbeddedCluster, **options: Any) -> AsyncIterator[RedisCluster]:
    client = RedisCluster.from_url(cluster.url.replace("+cluster", "", 1), **options)
    await client.initialize()
    try:
        yield client
    finally:
        await client.aclose()


async def test_every_node_gets_its_commands_and_every_command_its_reply(
    cluster_client: RedisCluster, observer: RedisCluster
) -> None:
    nodes = cluster_client.get_primaries()
    assert len(nodes) == 3
    keys = [key_on(cluster_client, node, f"k{index}") for index, node in enumerate(nodes)]
    # Each node: a write, an echo; the second node also gets a key of the first's: MOVED.
    batches = [
        NodeCommands(
            node,
            [PipelineCommand(0, "INCRBY", key, index + 1), PipelineCommand(1, "ECHO", node.name)],
        )
        for index, (node, key) in enumerate(zip(nodes, keys, strict=True))
    ]
    misrouted = PipelineCommand(2, "GET", keys[0])
    batches[1] = NodeCommands(nodes[1], [*batches[1].commands, misrouted])

    await run_on_nodes(cluster_client, batches)

    for index, batch in enumerate(batches):
        assert [command.result for command in batch.commands[:2]] == [
            index + 1,
            batch.node.name.encode(),
        ]
    assert isinstance(misrouted.result, MovedError)
    assert misrouted.result.node_addr == (nodes[0].host, nodes[0].port)
    assert [await observer.get(key) for key in keys] == [b"1", b"2", b"3"]


async def test_a_round_trip_cut_short_leaves_no_connection_waiting_for_its_reply(
    cluster_client: RedisCluster, observer: RedisCluster
) -> None:
    """Cancelled while the first node's reply is due (a BLPOP's), the second node's reply
    unread: had either connection gone back to the pool, the next call there would get the
    old reply, or the server would hand the next push to a BLPOP nobody reads (an item
    lost). Both are closed instead, and the next calls get their own replies."""
    node, other = cluster_client.get_primaries()[:2]
    queue = key_on(cluster_client, node, "queue")
    blocking = [PipelineCommand(0, "BLPOP", queue, 0)]
    unread = [PipelineCommand(0, "ECHO", "unread")]

    async with anyio.create_task_group() as round_trips:
        round_trips.start_soon(
            run_on_nodes,
            cluster_client,
            [NodeCommands(node, blocking), NodeCommands(other, unread)],
        )
        await wait_until(lambda: _blocked(observer, 1))
        round_trips.cancel_scope.cancel()

    assert blocking[0].result is None
    assert unread[0].result is None
    await wait_until(lambda: _blocked(observer, 0))
    await observer.rpush(queue, "item")
    follow_ups = [
        NodeCommands(node, [PipelineCommand(0, "ECHO", "mine"), PipelineCommand(1, "LLEN", queue)]),
        NodeCommands(other, [PipelineCommand(0, "ECHO", "also mine")]),
    ]
    await run_on_nodes(cluster_client, follow_ups)
    assert [[command.result for command in batch.commands] for batch in follow_ups] == [
        [b"mine", 1],
        [b"also mine"],
    ]


async def test_a_node_dropped_during_a_round_trip_keeps_no_connection_open(
    redis_cluster: EmbeddedCluster,
) -> None:
    """A slot-map refresh that drops a node (after a failover, a node answering without it)
    while a round trip is under way: the connection the round trip then takes on it goes back
    to a pool that closing the client no longer closes, so it must not stay open (a CI run's
    cluster failover test once ended on such a connection's ResourceWarning)."""
    async with _client(redis_cluster) as client:
        first, second = client.get_primaries()[:2]
        await first.disconnect()  # the first write connects: the refresh runs meanwhile
        asyncio.get_running_loop().call_soon(drop_cluster_node, client, second)
        batches = [
            NodeCommands(first, [PipelineCommand(0, "ECHO", "first")]),
            NodeCommands(second, [PipelineCommand(0, "ECHO", "second")]),
        ]
        await run_on_nodes(client, batches)

        assert [batch.commands[0].result for batch in batches] == [b"first", b"second"]
        assert second.name not in client.nodes_manager.nodes_cache
    await wait_until(lambda: _all_closed(second))


async def _all_closed(node: ClusterNode) -> bool:
    return bool(node._connections) and not any(c.is_connected for c in node._connections)


async def _blocked(client: RedisCluster, count: int) -> bool:
    return await blocked_in(client, "blpop") == count
