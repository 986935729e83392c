"""A service factory for `aioqueue worker` in the tests of the worker registry and the probes
(tests/service/test_workers.py).

It handles PaymentCheck (PARALLELISM, default 3) and, with SECOND_TYPE=1, OrderTimeout too.
HEARTBEAT sets the service's heartbeat (seconds). A PaymentCheck whose id starts with
"block" blocks the event loop for BLOCK_SECONDS (default 3), printing "blocking" first; any
other is handled at once.
"""

from __future__ import annotations

import os
import sys
import time

from aioqueue import EventService
from tests.support.common import OrderTimeout, PaymentCheck


async def handle(event: PaymentCheck) -> bool:
    if event.id.startswith("block"):
        sys.stdout.write("blocking\n")
        sys.stdout.flush()
        time.sleep(float(os.environ.get("BLOCK_SECONDS", "3")))  # noqa: ASYNC251 - on purpose
    return True


async def handle_timeout(event: OrderTimeout) -> bool:
    return True


def create_service(url: str, prefix: str) -> EventService:
    service = (
        EventService.builder()
        .url(url)
        .prefix(prefix)
        .scheduling_interval(0.05)
        .heartbeat(float(os.environ.get("HEARTBEAT", "0.5")))
        .loop_blocking_threshold(0)  # the blocking handler is the test's, not news
        .build()
    )
    service.add_handler(PaymentCheck, handle, parallelism=int(os.environ.get("PARALLELISM", "3")))
    if os.environ.get("SECOND_TYPE") == "1":
        service.add_handler(OrderTimeout, handle_timeout)
    return service
