"""The queue model (tests/support/queue_model.py) on a primary with one replica, with durable
enqueues and failovers that lose what the replica never had.

Four more operations:
- `durable`: an enqueue (or a replacement) with `durability(replicas=1)`. It returns while the
  replica is linked, and raises DurabilityError once it is cut off; either way the primary
  has the write (the script runs before the confirmation), so the model applies it.
- `cut`: the replica stops receiving (SIGSTOP, and its link closed on the primary). The model
  keeps what the replica holds at that moment: everything so far, since the cut waits until
  the replica has caught up.
- `heal`: the replica resumes and catches up: nothing is lost.
- `failover`: the replica resumes as the primary, and the old primary becomes its replica.
  Redis now holds the state of the cut: what was written after it is gone (durable enqueues
  that raised included), and so are deliveries handed out after it; every durable enqueue
  that returned is there. The handlers' deliveries are dropped, as by workers that died
  with the primary (the plain model's `crash`).
"""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio

from aioqueue import Durability, DurabilityError
from aioqueue._producing.enqueue_calls import EnqueueItem, WriteMode
from aioqueue._producing.writes import enqueue_steps
from aioqueue._transport.steps import run_steps
from aioqueue._wire.store import QueueStore
from aioqueue.testing import EmbeddedServer
from tests.support.queue_model import QueueModel
from tests.support.queue_model_state import EVENT_TYPE, KEYS, Step, envelope_fields
from tests.support.replication import admin, freeze, replicated_pair, resume, wait_for_replicas

# The servers run their timers at 100 Hz, so that a WAIT that cannot be met ends after about
# 10 ms (blocking timeouts are checked on the server's timer tick).
SERVER_ARGS = ("--hz", "100")
CUT_OFF = Durability.of(1, 0.01)
"""A durable enqueue while the replica is cut off: it cannot be met, and fails in 10 ms."""
LINKED = Durability.of(1, 2.0)
"""While the replica is linked: its confirmation must come, but on a loaded machine it can
take longer than 10 ms, which the guarantee does not bound; 2 s is the margin."""
# The model's state in Redis, as opposed to the handlers' deliveries (`held`).
REDIS_STATE = ("pending", "dead", "ready", "sequence", "paused", "rate_limit", "starts", "serial")


@dataclass
class Servers:
    """Which server is the primary now; a failover swaps them."""

    primary: EmbeddedServer
    replica: EmbeddedServer

    def reset(self) -> None:
        """Both running, the replica linked to the primary and caught up."""
        resume(self.primary)
        resume(self.replica)
        with admin(self.primary) as client:
            client.execute_command("REPLICAOF", "NO", "ONE")
            client.config_set("requirepass", "")
        with admin(self.replica) as client:
            client.execute_command("REPLICAOF", self.primary.host, self.primary.port)
        wait_for_replicas(self.primary, [self.replica])


@contextmanager
def replicated_servers(binary: pathlib.Path | None = None) -> Iterator[Servers]:
    with replicated_pair(binary, SERVER_ARGS) as (primary, replica):
        yield Servers(primary, replica)


class ReplicatedQueueModel(QueueModel):
    def __init__(self, servers: Servers) -> None:
        servers.reset()
        super().__init__(servers.primary.url)  # flushes the primary, and so the replica
        self.servers = servers
        self.standby: redis.asyncio.Redis = self.run(_connect(servers.replica.url))
        self.linked = True
        self.at_cut: dict[str, Any] | None = None
        self.confirmed: dict[str, int] = {}
        """Event id -> the version a durable enqueue returned for (since the last failover)."""
        self.failovers = 0
        self.survived = 0
        """Durable enqueues checked on the promoted replica after a failover."""
        self.refused = 0

    def apply(self, step: Step) -> None:
        operation = step.operation
        if operation == "durable":
            self.durable_enqueue(step.event_id, step.payload, step.delay_ms, step.count % 2 == 0)
        elif operation == "cut":
            if self.linked:
                self.cut()
        elif operation == "heal":
            if not self.linked:
                self.heal()
        elif operation == "failover":
            if not self.linked:
                self.failover()
        else:
            super().apply(step)

    def durable_enqueue(self, event_id: str, payload: str, delay_ms: int, replace: bool) -> None:
        item = EnqueueItem(event_id, payload, "{}", delay_ms, absolute=False)
        steps = enqueue_steps(
            self.client,
            KEYS,
            EVENT_TYPE,
            [item],
            mode=WriteMode(replace=replace),
            durability=LINKED if self.linked else CUT_OFF,
        )
        expected = replace or event_id not in self.pending
        try:
            [scheduled] = self.run(run_steps(self.client, steps))
        except DurabilityError:
            assert not self.linked, "a linked replica did not confirm"
            self.refused += 1
        else:
            assert self.linked, "confirmed while the replica was cut off"
            assert scheduled is expected
        if expected:
            self._schedule(event_id, payload, delay_ms)
        if self.linked:
            self.confirmed[event_id] = self.pending[event_id].version

    def cut(self) -> None:
        wait_for_replicas(self.servers.primary, [self.servers.replica])  # caught up
        freeze(self.servers.replica)
        with admin(self.servers.primary) as client:
            client.execute_command("CLIENT", "KILL", "TYPE", "replica")
        self.at_cut = {name: copy.deepcopy(getattr(self, name)) for name in REDIS_STATE}
        self.linked = False

    def heal(self) -> None:
        resume(self.servers.replica)
        wait_for_replicas(self.servers.primary, [self.servers.replica])
        self.at_cut, self.linked = None, True

    def failover(self) -> None:
        old, new = self.servers.primary, self.servers.replica
        with admin(old) as old_admin, admin(new) as new_admin:
            # The resumed replica must not reconnect to the old primary and fetch what it
            # missed before it is promoted: a password it does not know keeps it out
            # (connections already open stay authenticated).
            old_admin.config_set("requirepass", "keeps-the-replica-out")
            resume(new)
            new_admin.execute_command("REPLICAOF", "NO", "ONE")
            old_admin.config_set("requirepass", "")
            old_admin.execute_command("REPLICAOF", new.host, new.port)
        self.servers.primary, self.servers.replica = new, old
        self.client, self.standby = self.standby, self.client
        self.store = QueueStore(self.client, KEYS, EVENT_TYPE)
        wait_for_replicas(new, [old])
        assert self.at_cut is not None
        for name, value in self.at_cut.items():
            setattr(self, name, value)
        self.held, self.settled = [], []
        self.at_cut, self.linked = None, True
        self.failovers += 1
        self.survived += self._check_confirmed_survived()

    def _check_confirmed_survived(self) -> int:
        """Every durable enqueue that returned is on the promoted replica, unless the model
        had moved past that version before the cut (replaced, settled, cancelled)."""
        survived = 0
        for event_id, version in self.confirmed.items():
            event = self.pending.get(event_id)
            if event is None or event.version != version:
                continue
            survived += 1
            raw = cast("bytes | None", self.run(self.client.hget(KEYS.events, event_id)))
            assert raw is not None, f"confirmed {event_id} v{version} was lost"
            assert envelope_fields(raw)["v"] == version
        self.confirmed = {}
        return survived

    def close(self) -> None:
        self.run(self.standby.aclose())
        super().close()


async def _connect(url: str) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(url)


@contextmanager
def replicated_queue_model(servers: Servers) -> Iterator[ReplicatedQueueModel]:
    model = ReplicatedQueueModel(servers)
    try:
        yield model
    finally:
        model.close()
