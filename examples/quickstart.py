"""A first program: schedule a payment check, handle it, shut down.

Run it against your server with `AIOQUEUE_URL=redis://localhost:6379 python examples/quickstart.py`;
without AIOQUEUE_URL it starts an embedded server (`pip install 'aioqueue-redis[demo]'`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import anyio
import redis.asyncio as redis

from aioqueue import Event, EventService, event_context
from aioqueue.testing import EmbeddedServer


@dataclass
class PaymentCheck(Event):
    id: str
    order_id: int


async def main(url: str) -> None:
    checked = anyio.Event()

    async def check_payment(event: PaymentCheck) -> bool:
        print(f"checking order {event.order_id} (trace {event_context.get()['trace_id']})")
        checked.set()
        return True

    client = redis.Redis.from_url(url)
    service = (
        EventService.builder()
        .client(client)
        .scheduling_interval(timedelta(milliseconds=500))
        .scheduling_batch_size(100)
        .retry_attempts(10)
        # A prefix of its own: no other program's PaymentCheck p-1 can be in the way.
        .prefix("quickstart-example")
        .build()
    )
    async with service:
        service.add_handler(PaymentCheck, check_payment, parallelism=4)
        # replace=True: an earlier run interrupted before its check was handled left p-1
        # pending; without it this enqueue would keep that one (and return False).
        scheduled = await service.enqueue(
            PaymentCheck(id="p-1", order_id=42),
            timedelta(milliseconds=300),
            context={"trace_id": "abc"},
            replace=True,
        )
        assert scheduled
        with anyio.fail_after(30):  # a handler that never comes is an error, not a hang
            await checked.wait()
    await client.aclose()
    print("done")


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    if url := os.environ.get("AIOQUEUE_URL"):
        yield url
        return
    with EmbeddedServer() as server:
        yield server.url


if __name__ == "__main__":
    with redis_url() as url:
        anyio.run(main, url)
