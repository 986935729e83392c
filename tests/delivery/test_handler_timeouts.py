"""Handler timeouts: one timer per consumer cuts every overdue call, whatever else runs."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

from aioqueue import EventServiceBuilder
from tests.support.common import PaymentCheck, Recorder, wait_until

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]


async def test_a_hanging_handler_is_cut_at_its_timeout_while_others_keep_starting(
    service_builder: Builder,
) -> None:
    """Calls that start later end later, so the timer never needs waking early: a stream of
    quick calls behind a hanging one must not push its cut-off back."""
    quick = Recorder()
    cut: list[float] = []
    started: dict[str, float] = {}
    quick_started: list[float] = []

    async def handle(event: PaymentCheck) -> bool:
        if event.id == "hangs":
            started.setdefault("hangs", time.monotonic())
            try:
                await anyio.sleep_forever()
            finally:
                if not cut:
                    cut.append(time.monotonic() - started["hangs"])
        quick_started.append(time.monotonic())
        await anyio.sleep(0.01)
        return await quick(event)

    builder = service_builder().handler_timeout(0.3).retry_attempts(1)
    async with builder.build() as service:
        service.add_handler(PaymentCheck, handle, parallelism=3)
        await service.enqueue(PaymentCheck(id="hangs", order_id=0), 0)
        # 600 calls of 10 ms on the other slots (all three once the hanging call is cut
        # off): they keep starting for about 2 s, long past the cut-off.
        quick_events = [PaymentCheck(id=f"quick-{n}", order_id=n) for n in range(600)]
        assert all(await service.enqueue_many(quick_events, 0))
        # About 2 s of work; the deadline is only there to end a hung run, and a suite on
        # three processes beside a starting Spark can stall this one for seconds.
        await quick.wait_for(600, within=30)

        async def hanging_call_is_dead() -> bool:
            return bool(await service.dead_letters(PaymentCheck))

        await wait_until(hanging_call_is_dead)
        dead = await service.dead_letters(PaymentCheck)
    assert [letter.id for letter in dead] == ["hangs"]
    assert dead[0].error == "the handler did not finish within 0.3 s on attempt 1"
    # Cut at its timeout, give or take a loaded machine; not pushed back by the quick calls,
    # which went on starting for longer than that.
    assert 0.29 <= cut[0] < 1.0
    assert quick_started[-1] > started["hangs"] + 1.0


async def test_one_worker_goes_on_after_cutting_off_calls_one_after_another(
    service_builder: Builder,
) -> None:
    """A worker runs its calls in one cancel scope until the timeout cancels it; then it
    settles the call, opens a new scope and goes on: two cut-offs in a row, then a success,
    all on a single slot."""
    succeeded = Recorder()

    async def handle(event: PaymentCheck) -> bool:
        if event.id.startswith("hangs"):
            await anyio.sleep_forever()
        return await succeeded(event)

    builder = service_builder().handler_timeout(0.2).retry_attempts(1)
    async with builder.build() as service:
        service.add_handler(PaymentCheck, handle, parallelism=1)
        for event_id in ("hangs-1", "hangs-2", "fine"):
            await service.enqueue(PaymentCheck(id=event_id, order_id=0), 0)
        await succeeded.wait_for(1)

        async def both_dead() -> bool:
            return len(await service.dead_letters(PaymentCheck)) == 2

        await wait_until(both_dead)
        dead = await service.dead_letters(PaymentCheck)
    assert succeeded.ids == ["fine"]
    assert sorted(letter.id for letter in dead) == ["hangs-1", "hangs-2"]
    assert all(
        letter.error == "the handler did not finish within 0.2 s on attempt 1" for letter in dead
    )
