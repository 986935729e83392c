"""A real Redis Cluster on 127.0.0.1 made of embedded server processes, for the tests."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS

from ._embedded import ServerGroup
from ._server import EmbeddedServer, find_server_binary, free_port

__all__ = ["ClusterNotReadyError", "EmbeddedCluster", "SlotRange"]

_CLUSTER_BUS_OFFSET = 10000


class ClusterNotReadyError(RuntimeError):
    """The cluster did not reach the expected state in time."""


@dataclass(frozen=True, slots=True)
class SlotRange:
    """One line of CLUSTER SLOTS: slots `first`..`last` (inclusive), served by the master on
    `master_port` and replicated to `replica_ports`."""

    first: int
    last: int
    master_port: int
    replica_ports: tuple[int, ...]


class EmbeddedCluster(ServerGroup):
    """`masters` masters with `replicas_per_master` replicas each, every one an EmbeddedServer.

    `start()` returns once every live node reports `cluster_state:ok`, knows every node and
    returns the same CLUSTER SLOTS, and every replica's link to its master is up (past its
    `timeout` it stops every node and raises ClusterNotReadyError). The slots are split in
    equal contiguous ranges, master i taking the i-th. Start-up takes about 2 s: a fresh
    master only accepts writes 2 s after it started (the server's own writable delay).
    `binary` is every node's server (find_server_binary's by default): Redis 6.2 or newer, or
    Valkey.

    The admin methods are synchronous (they block for a few milliseconds per node, or up to
    `timeout` while waiting); from async code run them in a thread
    (`anyio.to_thread.run_sync`) so that clients of the cluster keep running meanwhile.
    """

    not_ready_error = ClusterNotReadyError

    def __init__(
        self,
        *,
        masters: int = 3,
        replicas_per_master: int = 0,
        node_timeout_ms: int = 5000,
        extra_args: Sequence[str] = (),
        binary: pathlib.Path | None = None,
    ) -> None:
        if masters < 1 or replicas_per_master < 0:
            raise ValueError(
                f"need at least one master and no negative replica count, got masters={masters}"
                f" replicas_per_master={replicas_per_master}"
            )
        self.masters_count = masters
        self.replicas_per_master = replicas_per_master
        self.node_timeout_ms = node_timeout_ms
        binary = binary if binary is not None else find_server_binary()
        ports = _free_ports(masters * (1 + replicas_per_master))
        args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(node_timeout_ms),
            # A replica's first sync would otherwise wait 5 s for more replicas to join it.
            "--repl-diskless-sync-delay", "0",
            # CLUSTER SLOTS lists a replica only once its replication offset moved, which on an
            # idle master happens at its next replication PING (every 10 s by default).
            "--repl-ping-replica-period", "1",
            *extra_args,
        ]  # fmt: skip
        self.nodes = [EmbeddedServer(port=port, extra_args=args, binary=binary) for port in ports]
        self.node_ids: dict[int, str] = {}

    def __repr__(self) -> str:
        ports = ",".join(str(node.port) for node in self.nodes)
        return f"<EmbeddedCluster {self.url} nodes={ports}>"

    @property
    def url(self) -> str:
        """A `redis+cluster://` URL of one master, the form `EventServiceBuilder.url` takes;
        a cluster client discovers the other nodes from it."""
        return f"redis+cluster://{self.host}:{self.nodes[0].port}"

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """(host, port) of every node that is running."""
        return [(self.host, node.port) for node in self.live_nodes]

    @property
    def live_nodes(self) -> list[EmbeddedServer]:
        """The nodes whose process is running (not killed, or restarted since)."""
        return [node for node in self.nodes if node.pid is not None]

    def node_on(self, port: int) -> EmbeddedServer:
        """The node listening on `port`, as a cluster client names it (e.g. the master of a
        slot); KeyError for a port no node of this cluster has."""
        return self._node_on(port)

    # -- failures and topology -----------------------------------------------------------------

    def restart(self, node: EmbeddedServer) -> None:
        """Starts a killed node again on its port and directory. It rejoins with the cluster
        configuration it saved: a master whose slots were taken over meanwhile comes back as
        a replica of the node that took them."""
        node.start()

    def slot_ranges(self) -> list[SlotRange]:
        """CLUSTER SLOTS as one live node sees it."""
        problems: list[str] = []
        for node in self.live_nodes:
            try:
                with self._admin(node) as admin:
                    return _parse_slots(admin.execute_command("CLUSTER", "SLOTS"))
            except redis.RedisError as exc:
                problems.append(f"{node.port}: {exc}")
        raise ClusterNotReadyError(f"no live node answered CLUSTER SLOTS: {problems}")

    def master_of_slot(self, slot: int) -> EmbeddedServer:
        """The node that serves `slot`, according to a live node."""
        for slot_range in self.slot_ranges():
            if slot_range.first <= slot <= slot_range.last:
                return self.node_on(slot_range.master_port)
        raise ClusterNotReadyError(f"slot {slot} is not served by any master of {self!r}")

    def masters(self) -> list[EmbeddedServer]:
        """The nodes that currently serve slots, by port."""
        ports = {slot_range.master_port for slot_range in self.slot_ranges()}
        return sorted((self.node_on(port) for port in ports), key=lambda node: node.port)

    def wait_until_ok(self, timeout: float = 20.0) -> None:
        """Waits until every live node reports `cluster_state:ok` and all agree on
        CLUSTER SLOTS, e.g. after a failover or a slot migration."""
        self._wait(self._live_problem, time.monotonic() + timeout, "become ok")

    def wait_for_new_master(self, old_master: EmbeddedServer, timeout: float = 20.0) -> None:
        """After `old_master` died: waits until one of its replicas serves its slots and the
        cluster is ok again."""
        port = old_master.port

        def problem() -> str | None:
            if any(r.master_port == port for r in self.slot_ranges()):
                return f"port {port} still serves slots"
            return self._live_problem()

        self._wait(problem, time.monotonic() + timeout, f"fail over from port {port}")

    # -- internals -----------------------------------------------------------------------------

    def _start(self, deadline: float) -> None:
        """Every node, then slots and replicas assigned."""
        for node in self.nodes:
            node.start()
        masters = self.nodes[: self.masters_count]
        for index, node in enumerate(masters):
            first, last = _slot_share(index, self.masters_count)
            with self._admin(node) as admin:
                self.node_ids[node.port] = str(admin.execute_command("CLUSTER", "MYID"))
                # ADDSLOTS rather than ADDSLOTSRANGE, which Redis 6.2 does not have.
                admin.execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
                # Distinct epochs up front, so no epoch collision has to be resolved later.
                admin.execute_command("CLUSTER", "SET-CONFIG-EPOCH", index + 1)
        for node in self.nodes[self.masters_count :]:
            with self._admin(node) as admin:
                self.node_ids[node.port] = str(admin.execute_command("CLUSTER", "MYID"))
        # A full mesh of MEETs: every node learns every other at once, not by gossip.
        for node in self.nodes:
            with self._admin(node) as admin:
                for other in self.nodes:
                    if other is not node:
                        admin.execute_command("CLUSTER", "MEET", self.host, other.port)
        for index, replica in enumerate(self.nodes[self.masters_count :]):
            master = masters[index // self.replicas_per_master]
            self._make_replica(replica, master, deadline)
        self._wait(self._problem, deadline, "start")

    def _processes(self) -> list[EmbeddedServer]:
        return self.nodes

    def _make_replica(
        self, replica: EmbeddedServer, master: EmbeddedServer, deadline: float
    ) -> None:
        master_id = self.node_ids[master.port]
        with self._admin(replica) as admin:

            def knows_master() -> str | None:
                # CLUSTER REPLICATE needs the master in the replica's node table first.
                nodes = str(admin.execute_command("CLUSTER", "NODES"))
                return None if master_id in nodes else f"{replica.port} does not know the master"

            self._wait(knows_master, deadline, "meet")
            admin.execute_command("CLUSTER", "REPLICATE", master_id)

    def _problem(self) -> str | None:
        """Why the freshly started cluster is not ready yet, None once it is."""
        problem = self._live_problem(expect_known=len(self.nodes))
        if problem is not None:
            return problem
        problem = self._replica_problem(self.nodes[self.masters_count :])
        if problem is not None:
            return problem
        ranges = self.slot_ranges()
        if len(ranges) != self.masters_count or any(
            len(r.replica_ports) != self.replicas_per_master for r in ranges
        ):
            return f"CLUSTER SLOTS is still incomplete: {ranges}"
        return None

    def _live_problem(self, expect_known: int | None = None) -> str | None:
        slots_seen: dict[int, list[SlotRange]] = {}
        for node in self.live_nodes:
            with self._admin(node) as admin:
                info = _parse_info(str(admin.execute_command("CLUSTER", "INFO")))
                if info.get("cluster_state") != "ok":
                    return f"{node.port}: cluster_state {info.get('cluster_state')}"
                known = int(info.get("cluster_known_nodes", 0))
                if expect_known is not None and known != expect_known:
                    return f"{node.port}: knows {known} of {expect_known} nodes"
                slots_seen[node.port] = _parse_slots(admin.execute_command("CLUSTER", "SLOTS"))
        distinct = {tuple(ranges) for ranges in slots_seen.values()}
        if len(distinct) != 1:
            return f"nodes disagree on CLUSTER SLOTS: {slots_seen}"
        return None


def _slot_share(index: int, masters: int) -> tuple[int, int]:
    """The contiguous slot range master `index` of `masters` serves."""
    first = index * REDIS_CLUSTER_HASH_SLOTS // masters
    last = (index + 1) * REDIS_CLUSTER_HASH_SLOTS // masters - 1
    return first, last


def _free_ports(count: int) -> list[int]:
    """`count` distinct free ports whose cluster bus ports are free and collide with no
    other chosen port."""
    chosen: list[int] = []
    taken: set[int] = set()
    while len(chosen) < count:
        port = free_port()
        if {port, port + _CLUSTER_BUS_OFFSET} & taken:
            continue
        chosen.append(port)
        taken |= {port, port + _CLUSTER_BUS_OFFSET}
    return chosen


def _parse_info(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition(":")
        if sep:
            fields[name] = value
    return fields


def _parse_slots(reply: Any) -> list[SlotRange]:
    """CLUSTER SLOTS, sorted, with replicas by port, so that two nodes' views compare equal."""
    ranges = [
        SlotRange(
            first=int(entry[0]),
            last=int(entry[1]),
            master_port=int(entry[2][1]),
            replica_ports=tuple(sorted(int(replica[1]) for replica in entry[3:])),
        )
        for entry in reply
    ]
    return sorted(ranges, key=lambda slot_range: slot_range.first)
