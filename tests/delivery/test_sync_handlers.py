"""Plain `def` handlers run in worker threads, bounded, with their context, and time out safely."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import pytest
import redis.asyncio as redis

from aioqueue import EventServiceBuilder, Outcome, event_context
from tests.support.common import OrderTimeout, PaymentCheck, Recorder, wait_until

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]
EVENTS = "aioqueue:{PaymentCheck}:events"
SCHEDULE = "aioqueue:{PaymentCheck}:schedule"


@dataclass
class ThreadedHandler:
    """A sync handler that records, per call, its thread and how many calls overlapped it."""

    work: Callable[[PaymentCheck], None] = lambda event: time.sleep(0.05)
    calls: list[str] = field(default_factory=list)
    threads: set[int] = field(default_factory=set)
    contexts: list[dict[str, str]] = field(default_factory=list)
    running: int = 0
    most_running: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: PaymentCheck) -> bool:
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.threads.add(threading.get_ident())
            self.contexts.append(dict(event_context.get()))
        try:
            self.work(event)
        finally:
            with self._lock:
                self.running -= 1
                self.calls.append(event.id)
        return True


class Outcomes:
    """Metrics that keep each handled outcome, to tell a failed attempt from a success."""

    def __init__(self) -> None:
        self.handled: list[Outcome] = []

    def event_enqueued(self, event_type: str, *, scheduled: bool) -> None:
        pass

    def events_dispatched(self, event_type: str, count: int) -> None:
        pass

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        self.handled.append(outcome)


async def test_a_sync_handler_runs_in_threads_at_most_parallelism_at_once(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    """40 calls of 50 ms with parallelism 4: four at a time (so about half a second, not two),
    never on the loop's thread, each exactly once."""
    four_at_once = threading.Barrier(4, timeout=10)
    first_calls = iter(range(4))
    lock = threading.Lock()

    def work(event: PaymentCheck) -> None:
        with lock:
            among_the_first = next(first_calls, None) is not None
        if among_the_first:
            four_at_once.wait()  # passes only if four calls run at the same time
        time.sleep(0.05)

    handler = ThreadedHandler(work)
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler, parallelism=4)
        await service.enqueue_many([PaymentCheck(id=f"p-{n}", order_id=n) for n in range(40)], 0)

        async def all_handled() -> bool:
            return len(handler.calls) == 40 and not await redis_client.hlen(EVENTS)

        await wait_until(all_handled)
    assert handler.most_running == 4
    assert threading.get_ident() not in handler.threads
    assert sorted(Counter(handler.calls).values()) == [1] * 40


async def test_event_context_is_visible_inside_a_sync_handler(service_builder: Builder) -> None:
    handler = ThreadedHandler(lambda event: None)
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0, context={"tenant": "t-9"})

        async def handled() -> bool:
            return handler.calls == ["p-1"]

        await wait_until(handled)
    assert handler.contexts == [{"tenant": "t-9"}]


async def test_the_handler_threads_limit_is_shared_by_every_sync_handler(
    service_builder: Builder,
) -> None:
    """Two sync handlers of parallelism 3 under `.handler_threads(2)`: two threads at most."""
    lock = threading.Lock()
    running = [0, 0]  # now, most

    def work(event: object) -> None:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    handled: list[str] = []

    def handle(event: PaymentCheck | OrderTimeout) -> bool:
        work(event)
        handled.append(event.id)
        return True

    async with service_builder().handler_threads(2).build() as service:
        service.add_handler(PaymentCheck, handle, parallelism=3)
        service.add_handler(OrderTimeout, handle, parallelism=3)
        await service.enqueue_many([PaymentCheck(id=f"p-{n}", order_id=n) for n in range(12)], 0)
        await service.enqueue_many([OrderTimeout(id=f"o-{n}") for n in range(12)], 0)

        async def all_handled() -> bool:
            return len(handled) == 24

        await wait_until(all_handled)
    assert running[1] == 2


async def test_a_sync_handler_past_its_timeout_fails_without_overlapping_its_retry(
    service_builder: Builder, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The thread cannot be stopped: a warning names the handler at the timeout, the slot stays
    taken and the lease is extended while it runs (no second dispatch, no other event in its
    slot), and the attempt counts as failed although the function returned True."""
    caplog.set_level(logging.WARNING, logger="aioqueue")
    started, release = threading.Event(), threading.Event()

    def stuck_on_the_first_call(event: PaymentCheck) -> None:
        if event.id == "p-1" and not started.is_set():
            started.set()
            release.wait(10)

    handler = ThreadedHandler(stuck_on_the_first_call)
    outcomes = Outcomes()
    builder = service_builder().handler_timeout(0.2).metrics(outcomes)
    async with builder.build() as service:
        service.add_handler(PaymentCheck, handler, parallelism=1)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await anyio.to_thread.run_sync(started.wait, 10)
        await service.enqueue(PaymentCheck(id="p-2", order_id=2), 0)
        first_lease_end = float(await redis_client.zscore(SCHEDULE, "p-1") or 0)

        async def warned() -> bool:
            return any("past the handler timeout" in r.getMessage() for r in caplog.records)

        await wait_until(warned)

        async def past_the_first_lease() -> bool:
            seconds, micros = await redis_client.time()
            return seconds * 1000 + micros / 1000 > first_lease_end + 200

        await wait_until(past_the_first_lease)
        envelope = await redis_client.hget(EVENTS, "p-1")
        assert envelope is not None
        assert b'"attempt":1' in envelope  # not dispatched again
        assert float(await redis_client.zscore(SCHEDULE, "p-1") or 0) > first_lease_end
        assert handler.calls == []  # p-2 waits: the slot is still taken
        release.set()

        async def all_handled() -> bool:
            return sorted(handler.calls) == ["p-1", "p-1", "p-2"]

        await wait_until(all_handled)
    [warning] = [r.getMessage() for r in caplog.records if "past the handler" in r.getMessage()]
    assert "sync handler ThreadedHandler has run 0.2 s on PaymentCheck 'p-1'" in warning
    assert sorted(outcomes.handled) == ["failed", "ok", "ok"]
    assert handler.most_running == 1


async def test_a_plain_lambda_is_a_handler(service_builder: Builder) -> None:
    seen: dict[str, bool] = {}
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, lambda event: seen.setdefault(event.id, True))
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)

        async def handled() -> bool:
            return seen == {"p-1": True}

        await wait_until(handled)


async def test_async_handlers_still_run_on_the_loop(service_builder: Builder) -> None:
    """A callable object with an `async def __call__` is an async handler, not a threaded one."""
    threads: list[int] = []

    def on_which_thread(event: object) -> bool:
        threads.append(threading.get_ident())
        return True

    recorder = Recorder(outcome=on_which_thread)
    loop_thread = threading.get_ident()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, recorder)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await recorder.wait_for(1)
    assert threads == [loop_thread]


async def test_leaving_the_service_waits_for_a_sync_handler_still_running(
    service_builder: Builder,
) -> None:
    """A thread cannot be cancelled: past the shutdown grace the service still waits for it,
    rather than leave it running in a process that believes it has stopped."""
    started, finished = threading.Event(), threading.Event()

    def slow(event: PaymentCheck) -> bool:
        started.set()
        time.sleep(0.5)
        finished.set()
        return True

    async with service_builder().shutdown_grace(0.05).build() as service:
        service.add_handler(PaymentCheck, slow)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await anyio.to_thread.run_sync(started.wait, 10)
    assert finished.is_set()
