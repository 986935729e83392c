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
  a cluster node waits before it takes writes again.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import TracebackType

import anyio
import redis.asyncio as redis
from chaos_report import Chaos

from aioqueue.testing import CuttingProxy, EmbeddedCluster, EmbeddedServer

__all__ = ["Cluster", "SingleServer", "Target"]

MASTERS = 3


class SingleServer:
    """One server (AOF as asked, `appendfsync everysec`) behind a cutting proxy."""

    name = "single server"

    def __init__(self, directory: Path, *, aof: bool) -> None:
        self._server = EmbeddedServer(directory=directory / "server", appendonly=aof)
        self._proxy: CuttingProxy | None = None

    async def __aenter__(self) -> SingleServer:
        self._server.start()
        try:
            self._proxy = await CuttingProxy(self._server.port).__aenter__()
        except BaseException:
            self._server.stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self._proxy is not None:
                await self._proxy.__aexit__(exc_type, exc, traceback)
        finally:
            self._server.stop()

    @property
    def worker_url(self) -> str:
        assert self._proxy is not None
        return f"redis://127.0.0.1:{self._proxy.port}"

    @property
    def producer_url(self) -> str:
        """Not through the proxy: the producer is the harness, not under test."""
        return self._server.url

    def observer(self) -> redis.Redis:
        return redis.Redis.from_url(self._server.url, decode_responses=True)

    async def cut(self, rng: random.Random) -> None:
        assert self._proxy is not None
        self._proxy.cut(1, rng=rng)

    async def crash_and_restart(self, how: str, rng: random.Random) -> None:
        # Blocking calls (process wait, AOF replay), in a thread so the proxy keeps running.
        if how == "kill":
            await anyio.to_thread.run_sync(self._server.kill)
            await anyio.to_thread.run_sync(self._server.start)
        else:
            await anyio.to_thread.run_sync(self._server.restart)

    def count_cuts(self, chaos: Chaos) -> None:
        assert self._proxy is not None
        stats = self._proxy.statistics()
        chaos.connections_cut = stats.cut
        chaos.connections_accepted = stats.accepted
        chaos.upstream_refused = stats.upstream_refused


class Cluster:
    """An embedded cluster of 3 masters without replicas (AOF as asked, `appendfsync
    everysec`), reached directly."""

    name = "3-master cluster"

    def __init__(self, directory: Path, *, aof: bool) -> None:
        del directory  # each node owns a temporary directory, kept across its restarts
        self._cluster = EmbeddedCluster(
            masters=MASTERS, extra_args=["--appendonly", "yes" if aof else "no"]
        )
        self._cuts = 0

    async def __aenter__(self) -> Cluster:
        # About 2 s (a fresh master's writable delay): in a thread.
        await anyio.to_thread.run_sync(self._cluster.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await anyio.to_thread.run_sync(self._cluster.stop)

    @property
    def worker_url(self) -> str:
        return self._cluster.url

    @property
    def producer_url(self) -> str:
        return self._cluster.url

    def observer(self) -> redis.RedisCluster:
        host, port = self._cluster.startup_nodes[0]
        return redis.RedisCluster(host=host, port=port, decode_responses=True)

    async def cut(self, rng: random.Random) -> None:
        """Closes one random client connection of one random live master."""
        node = rng.choice(self._cluster.live_nodes)
        try:
            async with redis.Redis.from_url(node.url, decode_responses=True) as admin:
                own = await admin.client_id()
                ids = [c["id"] for c in await admin.client_list(_type="normal")]
                victims = [int(client_id) for client_id in ids if int(client_id) != own]
                if victims:
                    await admin.client_kill_filter(_id=str(rng.choice(victims)))
                    self._cuts += 1
        except (redis.ConnectionError, OSError):
            pass  # the node is down (the crash): nothing to cut there

    async def crash_and_restart(self, how: str, rng: random.Random) -> None:
        node = rng.choice(self._cluster.live_nodes)
        if how == "kill":
            await anyio.to_thread.run_sync(self._cluster.kill, node)
            await anyio.to_thread.run_sync(self._cluster.restart, node)
        else:
            await anyio.to_thread.run_sync(node.restart)
        # Down until every node sees the cluster whole again (the restarted master answers
        # CLUSTERDOWN for its first 2 s).
        await anyio.to_thread.run_sync(self._cluster.wait_until_ok)

    def count_cuts(self, chaos: Chaos) -> None:
        chaos.connections_cut = self._cuts


Target = SingleServer | Cluster
