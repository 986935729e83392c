"""A primary with one replica, started for a benchmark that needs a write acknowledged by a
replica (aioqueue's durable enqueue rows, durable_settle.py), and the wait until that replica
is ready to acknowledge.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio

from aioqueue.testing import EmbeddedServer

__all__ = ["replicated_server", "wait_for_replica"]

# How long the replica may take to come online and to acknowledge its first write.
REPLICA_LINK_TIMEOUT = 10.0


@asynccontextmanager
async def replicated_server() -> AsyncIterator[list[str]]:
    """A primary with one replica, both started for the caller; their URLs, primary first."""
    primary = EmbeddedServer()
    # Starting waits for the server to answer: in a thread, as every start here.
    await asyncio.to_thread(primary.start)
    try:
        replica = EmbeddedServer(extra_args=["--replicaof", primary.host, str(primary.port)])
        await asyncio.to_thread(replica.start)
        try:
            await wait_for_replica(primary.url)
            yield [primary.url, replica.url]
        finally:
            await asyncio.to_thread(replica.stop)
    finally:
        await asyncio.to_thread(primary.stop)


async def wait_for_replica(url: str) -> None:
    """Returns once the primary at `url` has a replica online (its first sync done) that has
    acknowledged a write: from Redis 7.0 (and in Valkey) a primary streams writes to a freshly
    synced replica only after the replica's first acknowledgement, which its once-a-second
    timer sends, so the first durable enqueues would otherwise wait up to a second."""
    client = redis.asyncio.Redis.from_url(url, single_connection_client=True)
    try:
        deadline = time.monotonic() + REPLICA_LINK_TIMEOUT
        while True:
            replication = await client.info("replication")
            replica = replication.get("slave0")
            if isinstance(replica, dict) and replica.get("state") == "online":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no replica came online within {REPLICA_LINK_TIMEOUT:g} s")
            await asyncio.sleep(0.02)
        # A write of this connection, removed again, for WAIT to count the acknowledgement.
        await client.set("replication-probe", "1")
        await client.delete("replication-probe")
        if await client.wait(1, round(REPLICA_LINK_TIMEOUT * 1000)) < 1:
            raise RuntimeError(
                f"the replica acknowledged nothing within {REPLICA_LINK_TIMEOUT:g} s"
            )
    finally:
        await client.aclose()
