"""The PaymentCheck queue as the delivery tests watch it (tests/delivery/test_delivery.py,
test_replace_and_cancel.py): its keys, a handler that holds every event until it is opened,
and reads of its schedule, envelopes and ready list."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import orjson

from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueKeys
from tests.support import common, ops
from tests.support.common import PaymentCheck, Recorder

KEYS = QueueKeys.for_type("aioqueue", "PaymentCheck")
SCHEDULE = KEYS.schedule
EVENTS = KEYS.events
READY = KEYS.ready

# Long enough for a wrongly scheduled retry to show: the test services dispatch every 50 ms
# and retry after 50 ms. Used only to prove that something does NOT happen.
QUIET = 0.25


@dataclass
class Gate:
    """A handler that holds every event until `open()`, counting how many it holds at once."""

    recorder: Recorder = field(default_factory=Recorder)
    opened: anyio.Event = field(default_factory=anyio.Event)
    running: int = 0
    most_running: int = 0

    async def __call__(self, event: PaymentCheck) -> bool:
        await self.recorder(event)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.opened.wait()
        finally:
            self.running -= 1
        return True

    def open(self) -> None:
        self.opened.set()


async def due_ms(client: RedisClient, event_id: str) -> float:
    """The schedule score of a pending PaymentCheck: when its next attempt is due."""
    score = await client.zscore(SCHEDULE, event_id)
    assert score is not None, f"{event_id} is not scheduled"
    return score


async def stored_envelope(client: RedisClient, event_id: str) -> dict[str, Any]:
    return await ops.stored_envelope(client, "PaymentCheck", event_id)


async def ready_ids(client: RedisClient) -> list[str]:
    """Ids of the PaymentCheck envelopes waiting in the ready list, head first."""
    return [orjson.loads(raw)["id"] for raw in await client.lrange(READY, 0, -1)]


def drained(client: RedisClient) -> Callable[[], Awaitable[bool]]:
    """True once PaymentCheck has nothing pending: every delivery was settled."""
    return common.drained(client, KEYS)


def ready_list_holds(client: RedisClient, ids: list[str]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return sorted(await ready_ids(client)) == sorted(ids)

    return check
