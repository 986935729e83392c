"""A service factory for `aioqueue worker` whose handlers hold their events: for the tests of
leases (tests/delivery/test_leases.py), which kill or stop the process while it holds them.

Each handler prints "started <id> <attempt>" and then works HANDLER_SECONDS (async, or in a
thread with SYNC=1), so a test sees what the process holds. PARALLELISM, THREADS (the
service's handler threads), HANDLER_TIMEOUT, LEASE and SHUTDOWN_GRACE (seconds) set the
service; anything not set keeps the library's default. With BATCH=N the handler is a batch
handler of up to N events (max_wait 0.1 s), which prints a line per event of its batch.
"""

from __future__ import annotations

import os
import sys
import time

import anyio

from aioqueue import EventService, FixedDelays, current_deliveries, current_delivery
from tests.support.common import PaymentCheck


def say(line: str) -> None:
    """One write per line: a test reads these lines from the pipe."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def seconds(name: str) -> float:
    return float(os.environ.get(name, "1000"))


async def hold(event: PaymentCheck) -> bool:
    say(f"started {event.id} {current_delivery().attempt}")
    await anyio.sleep(seconds("HANDLER_SECONDS"))
    return True


def hold_in_thread(event: PaymentCheck) -> bool:
    say(f"started {event.id} {current_delivery().attempt}")
    time.sleep(seconds("HANDLER_SECONDS"))
    return True


async def hold_batch(batch: list[PaymentCheck]) -> bool:
    for delivery in current_deliveries():
        say(f"started {delivery.id} {delivery.attempt}")
    await anyio.sleep(seconds("HANDLER_SECONDS"))
    return True


def create_service(url: str) -> EventService:
    builder = (
        EventService.builder()
        .url(url)
        .scheduling_interval(0.05)
        .polling_timeout(0.2)
        .retry_policy(FixedDelays([0.05]))
    )
    for setting in ("handler_timeout", "lease", "shutdown_grace"):
        value = os.environ.get(setting.upper())
        if value is not None:
            builder = getattr(builder, setting)(float(value))
    if "THREADS" in os.environ:
        builder = builder.handler_threads(int(os.environ["THREADS"]))
    service = builder.build()
    handler = hold_in_thread if os.environ.get("SYNC") == "1" else hold
    parallelism = int(os.environ.get("PARALLELISM", "1"))
    if "BATCH" in os.environ:
        service.add_batch_handler(
            PaymentCheck, hold_batch, max_size=int(os.environ["BATCH"]), max_wait=0.1
        )
        return service
    service.add_handler(PaymentCheck, handler, parallelism=parallelism)
    return service
