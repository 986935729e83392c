"""Replicas for the durability tests: a primary with a replica, and ways to stop a replica
from confirming writes while its primary goes on acknowledging them.

Two ways, for two questions:
- `freeze(replica)` (SIGSTOP): the replica stays connected but acknowledges nothing. A WAIT
  that ran on a connection other than the write's (or after a call that wrote nothing)
  would still count it, because the replica acknowledged that connection's older offset:
  only a WAIT on the writing connection, after a write, tells.
- `cut_off(primary, replica)`: frozen, and its link closed on the primary (`CLIENT KILL TYPE
  replica`). SIGSTOP alone lets the kernel's socket buffer carry the writes over once the
  replica resumes, so a failover would not lose them; with the link closed they are gone
  from the replica for good, as in a real partition before a crash.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import redis

from aioqueue.testing import EmbeddedServer

REPLICA_ONLINE_WITHIN = 10.0
PROBE_KEY = "replication-probe"


@contextmanager
def replicated_pair(
    binary: pathlib.Path | None = None, extra_args: Sequence[str] = ()
) -> Iterator[tuple[EmbeddedServer, EmbeddedServer]]:
    """A primary and its replica, the replica in sync when this yields; both stopped after
    (resumed first if frozen, so that they stop at once)."""
    # A first sync would otherwise wait 5 s for more replicas to join it (either may become
    # the primary in a test).
    args = ["--repl-diskless-sync-delay", "0", *extra_args]
    primary = EmbeddedServer(binary=binary, extra_args=args)
    replica = EmbeddedServer(binary=binary, extra_args=args)
    replica.extra_args = (*args, "--replicaof", primary.host, str(primary.port))
    try:
        primary.start()
        replica.start()
        wait_for_replicas(primary, [replica])
        yield primary, replica
    finally:
        # Either may be frozen (a test may have swapped their roles): a frozen server would
        # take SIGTERM only after its stop's 5 s grace.
        resume(replica)
        resume(primary)
        replica.stop()
        primary.stop()


def wait_for_replicas(
    primary: EmbeddedServer, replicas: list[EmbeddedServer], probe_key: str = PROBE_KEY
) -> None:
    """Returns once every replica of `replicas` acknowledged a write of `primary`.

    Online on the primary is not enough: Valkey 9 reports a replica online about a second
    before the replica's link is up, and from Redis 7.0 a primary streams writes to a replica
    that finished its first sync only after the replica's first acknowledgement, which its
    once-a-second timer sends. Until then a WAIT blocks; so the last step is one, after a
    probe write that is removed again (on a cluster master, give a key of one of its slots).
    """
    deadline = time.monotonic() + REPLICA_ONLINE_WITHIN
    while True:
        problem = _replication_problem(primary, replicas)
        if problem is None:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(problem)
        # Replication state changes offer nothing to wait on.
        time.sleep(0.01)
    with admin(primary) as client:
        client.set(probe_key, "1")
        client.delete(probe_key)
        confirmed = int(client.wait(len(replicas), round(REPLICA_ONLINE_WITHIN * 1000)))
    if confirmed < len(replicas):
        raise TimeoutError(f"{confirmed} of {len(replicas)} replicas acknowledged a write")


def _replication_problem(primary: EmbeddedServer, replicas: list[EmbeddedServer]) -> str | None:
    with admin(primary) as client:
        replication = client.info("replication")
    online = [
        value
        for name, value in replication.items()
        if name.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    ]
    if len(online) < len(replicas):
        return f"{primary!r} has {len(online)} of {len(replicas)} replicas online"
    for replica in replicas:
        with admin(replica) as client:
            link = client.info("replication")
        if link.get("master_link_status") != "up" or link.get("master_sync_in_progress") != 0:
            return f"{replica!r}: link {link.get('master_link_status')}"
    return None


def freeze(node: EmbeddedServer) -> None:
    """SIGSTOPs a server: connected, but it answers and acknowledges nothing."""
    assert node.pid is not None, f"{node!r} is not running"
    os.kill(node.pid, signal.SIGSTOP)


def resume(node: EmbeddedServer) -> None:
    """SIGCONTs a frozen server (a running one is left as it is)."""
    if node.pid is not None:
        os.kill(node.pid, signal.SIGCONT)


def cut_off(primary: EmbeddedServer, replica: EmbeddedServer) -> int:
    """Freezes `replica` and closes its link on `primary`: nothing the primary writes from now
    on reaches it. Returns how many replica links were closed."""
    freeze(replica)
    with admin(primary) as client:
        closed = int(client.execute_command("CLIENT", "KILL", "TYPE", "replica"))
    return closed


def admin(node: EmbeddedServer) -> redis.Redis:
    return redis.Redis(
        host=node.host, port=node.port, password=node.password, decode_responses=True,
        socket_timeout=2.0, socket_connect_timeout=2.0,
    )  # fmt: skip


def command_calls(node: EmbeddedServer, command: str) -> int:
    """How many times `node` was sent `command` (INFO commandstats): `calls` counts those
    that failed while running, `rejected_calls` (Redis 7+) those refused before."""
    with admin(node) as client:
        stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0)) + int(stats.get("rejected_calls", 0))


def restart_as_replica(old_primary: EmbeddedServer, new_primary: EmbeddedServer) -> None:
    """Starts a primary that was failed over from again, as the new primary's replica, and
    waits until it is in sync (durable writes need a replica to confirm them)."""
    old_primary.extra_args = (
        *old_primary.extra_args,
        "--replicaof",
        new_primary.host,
        str(new_primary.port),
    )
    old_primary.start()
    wait_for_replicas(new_primary, [old_primary])
