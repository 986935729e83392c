"""Where the chaos run's queues live, and how its faults reach them (see chaos.py).

- `SingleServer`: one embedded server. Workers reach it through aioqueue.testing.CuttingProxy,
  whose cuts are TCP resets on both sides at any point of a reply; the crash is a SIGKILL (or
  SIGTERM) of the server and a start on its data.
- `Cluster`: an embedded cluster of 3 masters, which clients reach directly (a cluster tells
  its clients the nodes' own addresses, which a proxy in front of one node cannot change).
  A cut is `CLIENT KILL` of one random client connection on a random master, which lands
  between two commands, so a pipelined round trip to several nodes (a partitioned batch)
  loses the replies of some nodes and not others; the crash is a SIGKILL (or SIGTERM) of one
  master, started again on its AOF with the same slots, answering CLUSTERDOWN for the 2 s
  a cluster node waits before it takes writes again. With replicas (`replicas` > 0) the
  crash is a failover: one master is SIGKILLed, its replica is promoted once the others
  mark the master failed (a 1 s node timeout), and the old master starts again as a replica
  of the new one. Replication is asynchronous, so the writes of the master's last moments
  may be missing on the replica: the chaos run shows what that costs.
- `SentinelGroup`: a primary with `replicas` replicas behind three sentinels, which everyone
  reaches through the sentinels (`redis+sentinel://`). A cut is `CLIENT KILL` of one random
  client connection of the primary (the sentinels' own left alone, so that what marks the
  primary down is its death only); the crash is always a failover: the primary is SIGKILLed
  (or SIGTERMed), the sentinels promote a replica once it has not answered for 1 s, and the
  old primary starts again on its data as the new primary's replica, one they never promote.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import redis.asyncio as redis
from chaos_report import CLUSTER, SENTINEL, SINGLE_SERVER, Chaos

from aioqueue._transport.sentinel import parse_sentinel_url, sentinel_client
from aioqueue.testing import (
    CuttingProxy,
    EmbeddedCluster,
    EmbeddedSentinel,
    EmbeddedServer,
    SentinelNotReadyError,
)

__all__ = [
    "Cluster",
    "SentinelGroup",
    "SingleServer",
    "Target",
    "cluster",
    "sentinel_group",
    "single_server",
]

MASTERS = 3
FAILOVER_NODE_TIMEOUT_MS = 1000


@asynccontextmanager
async def single_server(directory: Path, *, aof: bool) -> AsyncIterator[SingleServer]:
    """One server (AOF as asked, `appendfsync everysec`) in `directory`, behind a cutting
    proxy; both stopped on exit."""
    server = EmbeddedServer(directory=directory, appendonly=aof)
    server.start()
    try:
        async with CuttingProxy(server.port) as proxy:
            yield SingleServer(server, proxy)
    finally:
        server.stop()


@asynccontextmanager
async def cluster(*, aof: bool, replicas: int = 0) -> AsyncIterator[Cluster]:
    """An embedded cluster of 3 masters, with `replicas` replicas each (AOF as asked,
    `appendfsync everysec`; each node keeps its directory across its restarts), stopped on
    exit."""
    nodes = EmbeddedCluster(
        masters=MASTERS,
        replicas_per_master=replicas,
        # A failover starts once a master has not answered for the node timeout.
        node_timeout_ms=FAILOVER_NODE_TIMEOUT_MS if replicas else 5000,
        extra_args=["--appendonly", "yes" if aof else "no"],
    )
    # About 2 s (a fresh master's writable delay): in a thread, as is stopping.
    await anyio.to_thread.run_sync(nodes.start)
    try:
        yield Cluster(nodes, replicas)
    finally:
        await anyio.to_thread.run_sync(nodes.stop)


@asynccontextmanager
async def sentinel_group(*, aof: bool, replicas: int) -> AsyncIterator[SentinelGroup]:
    """A primary with `replicas` replicas (AOF as asked, `appendfsync everysec`) behind
    three sentinels that fail it over after FAILOVER_NODE_TIMEOUT_MS; stopped on exit."""
    group = EmbeddedSentinel(replicas=replicas, down_after_ms=FAILOVER_NODE_TIMEOUT_MS)
    for node in group.nodes:
        node.appendonly = aof
    await anyio.to_thread.run_sync(group.start)
    try:
        yield SentinelGroup(group, replicas)
    finally:
        await anyio.to_thread.run_sync(group.stop)


class SingleServer:
    """Workers reach the server through the proxy; the producer and the observer directly."""

    name = SINGLE_SERVER

    def __init__(self, server: EmbeddedServer, proxy: CuttingProxy) -> None:
        self._server = server
        self._proxy = proxy

    @property
    def worker_url(self) -> str:
        return f"redis://127.0.0.1:{self._proxy.port}"

    @property
    def producer_url(self) -> str:
        """Not through the proxy: the producer is the harness, not under test."""
        return self._server.url

    def observer(self) -> redis.Redis:
        return redis.Redis.from_url(self._server.url, decode_responses=True)

    async def cut(self, rng: random.Random) -> None:
        self._proxy.cut(1, rng=rng)

    async def crash_and_restart(self, how: str, rng: random.Random) -> None:
        # Blocking calls (process wait, AOF replay), in a thread so the proxy keeps running.
        if how == "kill":
            await anyio.to_thread.run_sync(self._server.kill)
            await anyio.to_thread.run_sync(self._server.start)
        else:
            await anyio.to_thread.run_sync(self._server.restart)

    def count_cuts(self, chaos: Chaos) -> None:
        stats = self._proxy.statistics()
        chaos.connections_cut = stats.cut
        chaos.connections_accepted = stats.accepted
        chaos.upstream_refused = stats.upstream_refused


class Cluster:
    """Everyone reaches the nodes directly."""

    def __init__(self, nodes: EmbeddedCluster, replicas: int) -> None:
        self._nodes = nodes
        self._replicas = replicas
        self._cuts = 0
        self.name = CLUSTER if not replicas else f"{CLUSTER} with {replicas} replica(s) each"

    @property
    def worker_url(self) -> str:
        return self._nodes.url

    @property
    def producer_url(self) -> str:
        return self._nodes.url

    def observer(self) -> redis.RedisCluster:
        host, port = self._nodes.startup_nodes[0]
        return redis.RedisCluster(host=host, port=port, decode_responses=True)

    async def cut(self, rng: random.Random) -> None:
        """Closes one random client connection of one random live master."""
        node = rng.choice(self._nodes.live_nodes)
        # The node may be down (the crash): nothing to cut there.
        with contextlib.suppress(redis.ConnectionError, OSError):
            self._cuts += await _close_one_client(node.url, rng)

    async def crash_and_restart(self, how: str, rng: random.Random) -> None:
        if self._replicas:
            await self._fail_over(how, rng)
            return
        node = rng.choice(self._nodes.live_nodes)
        if how == "kill":
            await anyio.to_thread.run_sync(self._nodes.kill, node)
            await anyio.to_thread.run_sync(self._nodes.restart, node)
        else:
            await anyio.to_thread.run_sync(node.restart)
        # Down until every node sees the cluster whole again (the restarted master answers
        # CLUSTERDOWN for its first 2 s).
        await anyio.to_thread.run_sync(self._nodes.wait_until_ok)

    async def _fail_over(self, how: str, rng: random.Random) -> None:
        """Stops a random master (SIGKILL or SIGTERM), waits until its replica serves its
        slots, then starts it again: it rejoins as a replica of the promoted node."""
        master = rng.choice(await anyio.to_thread.run_sync(self._nodes.masters))
        await anyio.to_thread.run_sync(self._nodes.kill if how == "kill" else _stop, master)
        await anyio.to_thread.run_sync(self._nodes.wait_for_new_master, master)
        await anyio.to_thread.run_sync(self._nodes.restart, master)
        await anyio.to_thread.run_sync(self._nodes.wait_until_ok)

    def count_cuts(self, chaos: Chaos) -> None:
        chaos.connections_cut = self._cuts


class SentinelGroup:
    """Everyone reaches the primary through the sentinels."""

    def __init__(self, group: EmbeddedSentinel, replicas: int) -> None:
        self._group = group
        self._cuts = 0
        self.name = f"{SENTINEL}, {replicas} replica(s)"

    @property
    def worker_url(self) -> str:
        return self._group.url

    @property
    def producer_url(self) -> str:
        return self._group.url

    def observer(self) -> redis.Redis:
        return sentinel_client(parse_sentinel_url(self._group.url), decode_responses=True)

    async def cut(self, rng: random.Random) -> None:
        """Closes one random client connection of the primary, a sentinel's excepted."""
        # The primary may be down or changing (the crash): nothing to cut now.
        with contextlib.suppress(redis.RedisError, OSError, SentinelNotReadyError):
            primary = await anyio.to_thread.run_sync(self._group.primary)
            self._cuts += await _close_one_client(primary.url, rng, spare="sentinel-")

    async def crash_and_restart(self, how: str, rng: random.Random) -> None:
        """Stops the primary, waits until the sentinels promote a replica, then starts the old
        primary again on its data as the new primary's replica."""
        group = self._group
        old = await anyio.to_thread.run_sync(group.primary)
        await anyio.to_thread.run_sync(group.kill if how == "kill" else _stop, old)
        await anyio.to_thread.run_sync(group.wait_for_failover, old)
        new = await anyio.to_thread.run_sync(group.primary)
        # Told at start whom it follows, so it never serves its stale data as a primary; and
        # never promoted (priority 0): under load the sentinels can find the new primary
        # unanswering for their 1 s and fail over again, and promoting this node before its
        # first sync rolls the group back to its data from the crash (one run of a loop of
        # three at a time: 745 events handled twice, the same attempts handed out again, a
        # rate window's hand-outs forgotten). That loss is the server's, not the crash the
        # run is about; with one replica the sentinels now wait for the primary instead.
        follow = ("--replicaof", new.host, str(new.port), "--replica-priority", "0")
        old.extra_args = (*_without_replicaof(old.extra_args), *follow)
        await anyio.to_thread.run_sync(old.start)

    def count_cuts(self, chaos: Chaos) -> None:
        chaos.connections_cut = self._cuts


async def _close_one_client(url: str, rng: random.Random, *, spare: str | None = None) -> int:
    """Closes one random client connection of the server at `url` (`CLIENT KILL`, which the
    server carries out between two commands), not its own nor one whose name starts with
    `spare`; returns how many it closed (0 or 1)."""
    async with redis.Redis.from_url(url, decode_responses=True) as admin:
        own = await admin.client_id()
        victims = [
            int(client["id"])
            for client in await admin.client_list(_type="normal")
            if int(client["id"]) != own and not (spare and client.get("name", "").startswith(spare))
        ]
        if not victims:
            return 0
        await admin.client_kill_filter(_id=str(rng.choice(victims)))
        return 1


def _without_replicaof(args: tuple[str, ...]) -> tuple[str, ...]:
    """A server's arguments without a `--replicaof host port` they may hold from its start."""
    if "--replicaof" not in args:
        return args
    at = args.index("--replicaof")
    return args[:at] + args[at + 3 :]


def _stop(node: EmbeddedServer) -> None:
    """SIGTERM, keeping the node's directory for its restart."""
    node.stop(keep_data=True)


Target = SingleServer | Cluster | SentinelGroup
