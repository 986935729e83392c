"""Oversized payloads and due times past the limit are refused up front; handlers that
block the loop are named."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import pytest
import redis.asyncio as redis

from aioqueue import EventServiceBuilder, InvalidEnqueueError, PayloadTooLargeError, SyncProducer
from aioqueue._producing.writes import MAX_DELAY, DueTime
from tests.support.common import OrderTimeout, PaymentCheck, Recorder, wait_until

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]

# The false-alarm test: the watchdog's threshold, events handled over three of them, and how
# often the test's own probe looks at the loop.
THRESHOLD = 0.2
EVENTS = 50
PROBE_EVERY = 0.01


async def test_an_oversized_payload_is_refused_and_nothing_is_written(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    """The limit counts payload plus context; a refused batch writes nothing at all."""
    async with service_builder().max_payload_bytes(100).build() as service:
        assert await service.enqueue(OrderTimeout(id="o-1", reason="x" * 60), 60)
        with pytest.raises(PayloadTooLargeError, match=r"OrderTimeout 'o-2' is \d+ bytes"):
            await service.enqueue(OrderTimeout(id="o-2", reason="x" * 120), 60)
        with pytest.raises(PayloadTooLargeError, match="max_payload_bytes=100"):
            await service.enqueue(
                OrderTimeout(id="o-3", reason="short"), 60, context={"trace": "t" * 100}
            )
        with pytest.raises(InvalidEnqueueError):  # the limit error is an enqueue error too
            await service.enqueue_many(
                [OrderTimeout(id="o-4"), OrderTimeout(id="o-5", reason="é" * 60)], 60
            )
    assert await redis_client.hkeys("aioqueue:{OrderTimeout}:events") == [b"o-1"]


async def test_a_misspelt_enqueue_keyword_is_refused_as_python_would_and_nothing_is_written(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    """The enqueue keywords are declared once (EnqueueOptions) and taken as `**options`, which
    Python does not check by itself: every entry point refuses an unknown one."""
    bad: dict[str, Any] = {"replaced": True}
    async with service_builder().enable_scheduling(False).build() as service:
        with pytest.raises(
            TypeError, match=r"^enqueue\(\) got an unexpected keyword argument 'replaced'$"
        ):
            await service.enqueue(OrderTimeout(id="o-1"), 60, **bad)
        with pytest.raises(TypeError, match=r"^enqueue_many\(\) got an unexpected keyword"):
            await service.enqueue_many([OrderTimeout(id="o-2")], 60, **bad)
        assert await service.enqueue(OrderTimeout(id="o-3"), 60, replace=True, context={"a": "b"})
    with SyncProducer(redis_url) as producer:
        with pytest.raises(TypeError, match=r"^enqueue\(\) got an unexpected keyword"):
            producer.enqueue(OrderTimeout(id="o-4"), 60, **bad)
        with pytest.raises(TypeError, match=r"^enqueue_many\(\) got an unexpected keyword"):
            producer.enqueue_many([OrderTimeout(id="o-5")], 60, **bad)
        with pytest.raises(TypeError, match=r"^prepare\(\) got an unexpected keyword"):
            producer.prepare(OrderTimeout(id="o-6"), 60, **bad)
    assert await redis_client.hkeys("aioqueue:{OrderTimeout}:events") == [b"o-3"]


async def test_due_times_more_than_a_hundred_years_ahead_are_refused(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    """An event that would never come due is a mistake to report, not a key to keep."""
    async with service_builder().enable_scheduling(False).build() as service:
        with pytest.raises(InvalidEnqueueError, match=r"delay must be at most 100 years"):
            await service.enqueue(OrderTimeout(id="o-1"), 1e300)
        with pytest.raises(InvalidEnqueueError, match=r"delay must be at most 100 years"):
            await service.enqueue_many([OrderTimeout(id="o-2")], timedelta(days=36526))
        far = datetime(9999, 12, 31, tzinfo=timezone.utc)
        with pytest.raises(InvalidEnqueueError, match=r"at= must be at most 100 years ahead"):
            await service.enqueue(OrderTimeout(id="o-3"), None, at=far)
        assert await service.enqueue(OrderTimeout(id="o-4"), timedelta(days=36525))
    assert await redis_client.hkeys("aioqueue:{OrderTimeout}:events") == [b"o-4"]


@pytest.mark.parametrize(
    ("delay", "message"),
    [
        (math.nan, "delay must be finite"),
        (math.inf, "delay must be finite"),
        (-0.001, "delay must be >= 0"),
        (-1, "delay must be >= 0"),
        (MAX_DELAY.total_seconds() + 0.001, "delay must be at most 100 years"),
        (True, "delay must be a timedelta or a number of seconds"),
        ("60", "delay must be a timedelta or a number of seconds"),
    ],
    ids=["nan", "inf", "negative-float", "negative-int", "past-100-years", "bool", "str"],
)
def test_a_delay_in_seconds_is_checked_on_the_fast_path_too(delay: object, message: str) -> None:
    """Numbers take a shortcut through DueTime.of; whatever it lets through is valid, and
    what it does not gets the same errors as before."""
    with pytest.raises(InvalidEnqueueError, match=message):
        DueTime.of(delay, None)  # type: ignore[arg-type]


def test_a_delay_in_seconds_gives_the_same_due_time_as_a_timedelta() -> None:
    for seconds in (0, 0.0004, 1, 1.5, 3600, MAX_DELAY.total_seconds()):
        assert DueTime.of(seconds, None) == DueTime.of(timedelta(seconds=seconds), None)
    assert DueTime.of(1.5, None) == DueTime(1500, absolute=False, due_in=1.5)


async def test_a_handler_that_blocks_the_event_loop_is_reported_by_name(
    service_builder: Builder, caplog: pytest.LogCaptureFixture
) -> None:
    """A time.sleep inside a handler stalls every other task: the warning says who did it."""
    caplog.set_level(logging.WARNING, logger="aioqueue")

    async def check_payment_blocking(event: PaymentCheck) -> bool:
        time.sleep(0.6)  # noqa: ASYNC251 -- the mistake under test: blocking inside a coroutine
        return True

    polite = Recorder()
    async with service_builder().loop_blocking_threshold(0.2).build() as service:
        service.add_handler(PaymentCheck, check_payment_blocking)
        service.add_handler(OrderTimeout, polite)
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        await service.enqueue(OrderTimeout(id="o-1"), 0)
        await polite.wait_for(1)

        def naming_the_handler() -> list[str]:
            # A loaded machine can stall the loop by itself too; those reports name no one.
            return [
                message
                for message in (record.getMessage() for record in caplog.records)
                if "blocked" in message and "check_payment_blocking (PaymentCheck)" in message
            ]

        async def warned() -> bool:
            return bool(naming_the_handler())

        await wait_until(warned, within=5)
    [warning] = naming_the_handler()  # one stall, one report
    assert "as a plain `def` function" in warning  # the hint at sync handlers


async def test_handlers_that_await_raise_no_blocking_warning(
    service_builder: Builder, caplog: pytest.LogCaptureFixture
) -> None:
    """The watchdog stays quiet for well-behaved handlers (no false alarms) while they handle
    events due over three of its thresholds: it never names one, and it warns at all only if
    the loop really stood still that long (as the whole process can on a loaded machine,
    where the test's own probe of the loop sees the stall too)."""
    caplog.set_level(logging.WARNING, logger="aioqueue")
    handler = Recorder()
    longest_stall = 0.0

    async def probe_the_loop() -> None:
        nonlocal longest_stall
        while True:
            before = time.monotonic()
            await anyio.sleep(PROBE_EVERY)
            longest_stall = max(longest_stall, time.monotonic() - before - PROBE_EVERY)

    async with anyio.create_task_group() as probing:
        probing.start_soon(probe_the_loop)
        async with service_builder().loop_blocking_threshold(THRESHOLD).build() as service:
            service.add_handler(PaymentCheck, handler, parallelism=10)
            for n in range(EVENTS):
                delay = 3 * THRESHOLD * n / EVENTS
                await service.enqueue(PaymentCheck(id=f"p-{n}", order_id=n), delay)
            await handler.wait_for(EVENTS)
        probing.cancel_scope.cancel()
    warnings = [r.getMessage() for r in caplog.records if "blocked" in r.getMessage()]
    assert not [warning for warning in warnings if "by handler" in warning]
    if warnings:
        # The watchdog's heartbeat beats every THRESHOLD / 4, so a warning means a stall of at
        # least THRESHOLD minus one beat, which the probe (its own sleep aside) must have seen.
        assert longest_stall >= THRESHOLD * 3 / 4 - PROBE_EVERY, (warnings, longest_stall)
