"""A steady flow of enqueues and deliveries through a failover, and the count of what it lost.

Producers enqueue events one after another, several at once; each enqueue is tried again
until it returns (the enqueue is idempotent per id), and the moment it returns is what the
producer was promised: the event is *acknowledged*. A worker handles every event and records
it. Whatever is acknowledged and never delivered, once nothing is left pending, is lost.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import anyio
from redis.exceptions import RedisClusterException, RedisError

from aioqueue import DurabilityError, EventService
from tests.support.common import PaymentCheck, Recorder

# What a producer retries: not confirmed (DurabilityError), or no primary to talk to.
RETRIED = (DurabilityError, RedisError, RedisClusterException, OSError)
# Between two tries of one enqueue: nothing tells a client that a failover is over.
RETRY_AFTER = 0.02


@dataclass
class Flow:
    """The producers' and the worker's record of one run."""

    due_in: float
    due_at_once: int = 0
    """The first this many events are due at once (the worker is busy from the start)."""
    producers: int = 4
    acknowledged: dict[str, float] = field(default_factory=dict)
    """Event id -> when its enqueue returned (monotonic)."""
    refused: int = 0
    """Tries that raised DurabilityError."""
    failed: int = 0
    """Tries that raised another error (no primary, a connection cut)."""
    handler: Recorder = field(default_factory=Recorder)
    _next: int = 0
    _stopping: bool = False
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def produce(self, producer: EventService) -> None:
        """Runs the producers until `stop()`; each finishes the event it has begun."""
        async with anyio.create_task_group() as producers:
            for _ in range(self.producers):
                producers.start_soon(self._produce_one_by_one, producer)

    def stop(self) -> None:
        self._stopping = True

    async def _produce_one_by_one(self, producer: EventService) -> None:
        while not self._stopping:
            n, self._next = self._next, self._next + 1
            event = PaymentCheck(id=f"e-{n}", order_id=n)
            with anyio.fail_after(30):
                while True:
                    try:
                        # False: an earlier try was stored after all; acknowledged either way.
                        await producer.enqueue(event, 0 if n < self.due_at_once else self.due_in)
                        break
                    except DurabilityError:
                        self.refused += 1
                    except RETRIED:
                        self.failed += 1
                    self._note_change()
                    await anyio.sleep(RETRY_AFTER)
            self.acknowledged[event.id] = time.monotonic()
            self._note_change()

    def _note_change(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def delivered(self) -> int:
        return len(self.handler.deliveries)

    def acknowledged_since(self, moment: float) -> int:
        return sum(1 for at in self.acknowledged.values() if at > moment)

    async def wait_for(self, *, acknowledged_since: float = 0.0, count: int = 0,
                       refused: int = 0, within: float = 15.0) -> None:  # fmt: skip
        """Waits until `count` enqueues returned after `acknowledged_since`, and at least
        `refused` tries raised DurabilityError."""
        with anyio.fail_after(within):
            while self.acknowledged_since(acknowledged_since) < count or self.refused < refused:
                await self._changed.wait()

    def outcome(self) -> Outcome:
        delivered = Counter(self.handler.ids)
        return Outcome(
            acknowledged=len(self.acknowledged),
            lost=sorted(set(self.acknowledged) - set(delivered), key=_number),
            duplicated=sum(count - 1 for count in delivered.values()),
            invented=sorted(set(delivered) - set(self.acknowledged), key=_number),
            refused=self.refused,
            failed=self.failed,
        )


@dataclass(frozen=True)
class Outcome:
    acknowledged: int
    lost: list[str]
    """Acknowledged, never delivered, and no longer pending."""
    duplicated: int
    invented: list[str]
    """Delivered but never acknowledged: only a try that raised can be stored after all."""
    refused: int
    failed: int

    def report(self, what: str, failover_seconds: float) -> str:
        return (
            f"\n{what}: failover took {failover_seconds:.2f} s; {self.acknowledged} "
            f"enqueues acknowledged, {len(self.lost)} of them lost; {self.duplicated} repeat "
            f"deliveries; tries refused by durability {self.refused}, failed otherwise "
            f"{self.failed}; delivered without an acknowledgement {len(self.invented)}"
        )


def _number(event_id: str) -> int:
    return int(event_id.rpartition("-")[2])
