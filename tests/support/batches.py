"""A batch handler that records what it was given, and events to give it: shared by the
tests of batch handlers (tests/delivery/test_batch_handlers.py, test_batch_instrumentation.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aioqueue import Delivery, current_deliveries
from tests.support.common import PaymentCheck, wait_until


@dataclass
class Batches:
    """A batch handler that records each call's ids and deliveries; `outcome` decides
    what it returns."""

    outcome: Callable[[list[PaymentCheck]], Any] = lambda batch: True
    calls: list[list[str]] = field(default_factory=list)
    deliveries: list[list[Delivery]] = field(default_factory=list)
    started: list[float] = field(default_factory=list)

    async def __call__(self, batch: list[PaymentCheck]) -> Any:  # wrong outcomes included
        self.started.append(time.monotonic())
        self.calls.append([event.id for event in batch])
        self.deliveries.append(current_deliveries())
        return self.outcome(batch)

    @property
    def handled(self) -> int:
        return sum(len(call) for call in self.calls)

    async def wait_for(self, count: int, within: float = 20) -> None:
        async def enough() -> bool:
            return self.handled >= count

        await wait_until(enough, within=within)


def checks(count: int, prefix: str = "p") -> list[PaymentCheck]:
    return [PaymentCheck(id=f"{prefix}-{n}", order_id=n) for n in range(count)]
