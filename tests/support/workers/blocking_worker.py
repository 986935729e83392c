"""A worker process whose PaymentCheck handler announces itself and then never returns.

Usage: python -m tests.support.workers.blocking_worker REDIS_URL MARKER_PATH [OrderStep]

It handles PaymentCheck, or OrderStep (a serial-key type) when asked. The handler writes
the event id to MARKER_PATH, prints "started <id>" on stdout and blocks
in a thread that nothing wakes, so neither the handler timeout nor shutdown can end it: the
only way out is for the test to kill the process, as a crash would.
"""

from __future__ import annotations

import pathlib
import sys
import threading

import anyio

from aioqueue import Event, EventService, FixedDelays
from tests.support.common import OrderStep, PaymentCheck


async def main(url: str, marker: pathlib.Path, event_class: type[Event]) -> None:
    never = threading.Event()

    async def block_forever(event: Event) -> bool:
        await anyio.Path(marker).write_text(event.id)
        print(f"started {event.id}", flush=True)
        # A thread wait is not cancellable, so the handler outlives its 1 s timeout.
        await anyio.to_thread.run_sync(never.wait)
        return True

    service = (
        EventService.builder()
        .url(url)
        .scheduling_interval(0.05)
        .polling_timeout(0.2)
        .handler_timeout(1.0)
        .retry_policy(FixedDelays([0.05]))
        .build()
    )
    async with service:
        service.add_handler(event_class, block_forever)
        await anyio.sleep_forever()


if __name__ == "__main__":
    handled = OrderStep if sys.argv[3:] == ["OrderStep"] else PaymentCheck
    anyio.run(main, sys.argv[1], pathlib.Path(sys.argv[2]), handled)
