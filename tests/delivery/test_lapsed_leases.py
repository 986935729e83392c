"""A worker held up longer than a lease after it claimed an event begins no handler on it: by
then the lease may have ended and the event be another worker's, and a handler begun anyway
ran beside that worker's, two calls of one event and of one serial key at once (the chaos
run's key_overlaps counted them on a loaded machine). The worker knows the lease surely runs
until a lease after its claim, or its last renewal, was sent (Lease.held_until); past that it
gives the event back, which leaves an event taken again elsewhere to its new worker.

The hold-up is this process's event loop blocked (what a machine starved of CPU, or a
handler that blocks its loop, does to every task of a worker, its renewals included) until
another worker process, `aioqueue worker` with tests/support/workers/lease_worker.py, took
the event again once its lease ran out and began it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import subprocess
import time
from collections.abc import Awaitable, Callable

import pytest

from aioqueue import Delivery, EventServiceBuilder, current_deliveries, current_delivery
from aioqueue._delivery.leases import NOT_BEGUN_AFTER_LAPSE
from aioqueue._wire.store import Claimed, QueueStore
from tests.delivery.test_leases import lease_worker
from tests.support.common import PaymentCheck, wait_until

Builder = Callable[[], EventServiceBuilder]

pytestmark = pytest.mark.backends("standalone")

LEASE = 0.5


class Calls:
    """The delivery of each handler call of this service."""

    def __init__(self) -> None:
        self.calls: list[Delivery] = []

    def note(self, delivery: Delivery) -> None:
        self.calls.append(delivery)


@pytest.mark.parametrize("kind", ["async", "sync", "batch"])
async def test_a_worker_held_up_past_its_lease_after_a_claim_begins_no_handler_on_it(
    service_builder: Builder,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    """Just after the claim of p-1 returned, before any handler could begin it, the loop is
    blocked until another worker process has taken p-1 again (its lease ran out meanwhile)
    and begun it. Once the loop runs again, this service gives p-1 back rather than begin it:
    p-1 reaches no handler here (without the check it began here too, beside the other
    worker's, on the stale claim)."""
    calls = Calls()
    other_began: list[str] = []
    claim = QueueStore.claim

    async def claim_then_hold_up(self: QueueStore, count: int, **options: object) -> Claimed:
        claimed = await claim(self, count, **options)  # type: ignore[arg-type]
        if claimed.envelopes and not other_began:
            hold_up_until_another_worker_began(redis_url, "p-1", other_began)
        return claimed

    monkeypatch.setattr(QueueStore, "claim", claim_then_hold_up)

    async def handle(event: PaymentCheck) -> bool:
        calls.note(current_delivery())
        return True

    def handle_in_thread(event: PaymentCheck) -> bool:
        calls.note(current_delivery())
        return True

    async def handle_batch(events: list[PaymentCheck]) -> bool:
        for delivery in current_deliveries():
            calls.note(delivery)
        return True

    caplog.set_level(logging.WARNING, logger="aioqueue")
    async with service_builder().lease(LEASE).build() as service:
        if kind == "batch":
            service.add_batch_handler(PaymentCheck, handle_batch, max_size=10, max_wait=0.01)
        else:
            service.add_handler(PaymentCheck, handle if kind == "async" else handle_in_thread)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await wait_until(given_back_or_begun(caplog, calls), within=40)
    assert "p-1" in other_began
    assert calls.calls == []


async def test_a_sync_call_that_waited_for_a_thread_past_its_lease_begins_no_handler(
    service_builder: Builder, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One handler thread, two events claimed together: p-1's call takes the thread and
    blocks the loop until another worker process has taken p-2 again (its lease ran out
    meanwhile) and begun it. Once the loop runs again, p-2's call, which was waiting for the
    thread, finds its lease gone and gives it back rather than begin: p-2 reaches no handler
    of this service (without the check it began here too, beside the other worker's)."""
    calls = Calls()
    other_began: list[str] = []

    def handle_in_thread(event: PaymentCheck) -> bool:
        calls.note(current_delivery())
        if event.id == "p-1":
            loop.call_soon_threadsafe(
                hold_up_until_another_worker_began, redis_url, "p-2", other_began
            )
        return True

    loop = asyncio.get_running_loop()
    caplog.set_level(logging.WARNING, logger="aioqueue")
    # Its handler timeout above the hold-up: p-1's call, which returned during it, did not
    # overrun (a sync call is timed from its thread's start to the loop's seeing it end).
    builder = service_builder().lease(LEASE).handler_threads(1).handler_timeout(60)
    async with builder.build() as service:
        service.add_handler(PaymentCheck, handle_in_thread, parallelism=2)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await service.enqueue(PaymentCheck(id="p-2", order_id=2), 0)

        # p-1's call, and p-2's if it began here.
        await wait_until(given_back_or_begun(caplog, calls, already=1), within=40)
    assert "p-2" in other_began
    assert [delivery.id for delivery in calls.calls] == ["p-1"]


def hold_up_until_another_worker_began(redis_url: str, event_id: str, began: list[str]) -> None:
    """Blocks the calling loop until another worker process began `event_id`, which it
    takes once this service's lease of it ran out; `began` gets the ids that worker began.
    That worker stops gracefully, so that it acknowledges what it handled."""
    with lease_worker(redis_url, LEASE=str(LEASE), HANDLER_SECONDS="0") as other:
        began.extend(began_until(other, event_id, within=30))
        other.terminate()
        other.wait(10)


def given_back_or_begun(
    caplog: pytest.LogCaptureFixture, calls: Calls, already: int = 0
) -> Callable[[], Awaitable[bool]]:
    """Whether this service gave back what it held too long, or began a handler call beyond
    the `already` expected ones instead."""

    async def condition() -> bool:
        given_back = any(NOT_BEGUN_AFTER_LAPSE in record.getMessage() for record in caplog.records)
        return given_back or len(calls.calls) > already

    return condition


def began_until(worker: subprocess.Popen[str], event_id: str, within: float) -> list[str]:
    """The ids `worker` says it began ("started <id> <attempt>" lines), read until it began
    `event_id`; fails after `within` s. Blocking: it runs on the held-up loop."""
    assert worker.stdout is not None
    descriptor = worker.stdout.fileno()
    deadline = time.monotonic() + within
    text, began = "", list[str]()
    while event_id not in began:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([descriptor], [], [], remaining)[0]:
            raise AssertionError(f"the other worker did not begin {event_id}: {began}")
        chunk = os.read(descriptor, 4096).decode()
        if not chunk:
            raise AssertionError(f"the other worker exited before it began {event_id}")
        text += chunk
        *lines, text = text.split("\n")
        began += [line.split()[1] for line in lines if line.startswith("started ")]
    return began
