"""A call after a slot-map refresh goes to a node of the refreshed map, never to one it dropped.

After a failover redis-py refreshes a cluster client's slot map when a call meets a
connection error, and the refresh drops the node objects of nodes the answering node did not
list (a master just restarted on its old configuration answers without the replica that
replaced it): it closes their idle connections and forgets them, and closing the client
closes only the nodes it still knows. A call routed before such a refresh and sent after it
would open a connection on a dropped node that nobody closes (a CI run of the cluster
failover test once ended on that connection's ResourceWarning). Here the refresh is made
due between two steps of one conversation, as another call's connection error makes it, and
the old node objects are dropped as the refresh drops them: the second step must run on the
new ones, and closing the client must leave no connection open.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.cluster import ClusterNode, RedisCluster

from aioqueue._transport.client import client_from_url
from aioqueue._transport.steps import Pipeline, Steps, run_steps
from aioqueue.testing import EmbeddedCluster
from tests.support.common import drop_cluster_node

KEY = "{slot-map-refresh}:probe"
SCRIPT = "return redis.call('INCR', KEYS[1])"


@pytest.fixture
async def client(redis_cluster: EmbeddedCluster) -> AsyncIterator[RedisCluster]:
    cluster_client = client_from_url(redis_cluster.url)
    assert isinstance(cluster_client, RedisCluster)
    await cluster_client.initialize()
    await cluster_client.delete(KEY)  # the cluster is the session's
    yield cluster_client
    await cluster_client.aclose()


def drop_node_of_key(client: RedisCluster) -> ClusterNode:
    """Drops the node serving KEY as a refresh does (tests.support.common.drop_cluster_node) and
    makes a refresh due, as a connection error does; the slot map still names the dropped
    node until the refresh. Returns the dropped node."""
    node = client.get_node_from_key(KEY)
    assert node is not None
    drop_cluster_node(client, node)
    client._initialize = True
    return node


@pytest.mark.parametrize("as_pipeline", [False, True], ids=["single-call", "pipeline"])
async def test_a_step_after_a_refresh_runs_on_the_refreshed_map(
    client: RedisCluster, as_pipeline: bool
) -> None:
    call = ("EVAL", SCRIPT, 1, KEY)
    dropped: list[ClusterNode] = []

    def conversation() -> Steps[list[Any]]:
        first = yield call
        dropped.append(drop_node_of_key(client))
        second = yield Pipeline([call]) if as_pipeline else call
        return [first, second]

    first, second = await run_steps(client, conversation())

    assert [first, second] == ([1, [2]] if as_pipeline else [1, 2])
    [node] = dropped
    serving = client.get_node_from_key(KEY)
    assert serving is not None
    assert serving.name == node.name  # the refresh found the node again,
    assert serving is not node  # as a new node object
    await client.aclose()
    still_open = [connection for connection in node._connections if connection.is_connected]
    assert not still_open, f"connections left open on the dropped node: {still_open}"
