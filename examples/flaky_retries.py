"""Retries with backoff: a flaky handler succeeds on its third attempt, a broken one dies.

    AIOQUEUE_URL=redis://localhost:6379 python examples/flaky_retries.py

Without AIOQUEUE_URL it starts an embedded server (`pip install 'aioqueue-redis[demo]'`). A handler
that raises (or returns False) is tried again after the retry policy's delay: here 0.2 s,
0.4 s, 0.8 s (exponential, no jitter, so the output is the same every run). After
`retry_attempts` tries the event moves to the dead letters with its last error, where
`aioqueue dead list --prefix flaky-example` shows it and `aioqueue dead requeue` puts it back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import anyio
import redis.asyncio as redis

from aioqueue import Event, EventService, ExponentialBackoff, NoMetrics, Outcome
from aioqueue.testing import EmbeddedServer

ATTEMPTS = 4


@dataclass
class Charge(Event):
    id: str
    order_id: int


class PaymentProviderDown(Exception):
    pass


class DeathWatch(NoMetrics):
    """Metrics that only notice when an event is moved to the dead letters."""

    def __init__(self) -> None:
        self.dead = anyio.Event()

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        if outcome == "dead":
            self.dead.set()


async def main(url: str) -> None:
    started = time.monotonic()
    attempts: dict[int, int] = {}
    watch = DeathWatch()

    async def charge(event: Charge) -> bool:
        attempt = attempts[event.order_id] = attempts.get(event.order_id, 0) + 1
        elapsed = time.monotonic() - started
        if event.order_id == 2 or attempt < 3:
            # Order 1's provider is down twice; order 2's card is never accepted.
            print(
                f"order {event.order_id}: attempt {attempt} failed at {elapsed:.1f} s", flush=True
            )
            raise PaymentProviderDown(f"provider unavailable for order {event.order_id}")
        print(f"order {event.order_id}: charged on attempt {attempt} at {elapsed:.1f} s")
        return True

    client = redis.Redis.from_url(url)
    service = (
        EventService.builder()
        .client(client)
        .prefix("flaky-example")
        .scheduling_interval(0.05)
        .retry_attempts(ATTEMPTS)
        .retry_policy(ExponentialBackoff(base=0.2, cap=5, jitter=False))
        .metrics(watch)
        .build()
    )
    async with service:
        service.add_handler(Charge, charge)
        await service.enqueue(Charge(id="charge-1", order_id=1), 0)
        await service.enqueue(Charge(id="charge-2", order_id=2), 0)
        with anyio.fail_after(30):
            await watch.dead.wait()
        [letter] = await service.dead_letters(Charge, limit=1)
        print(f"dead letter {letter.id} after {letter.attempts} attempts: {letter.error}")
    await client.aclose()


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    if url := os.environ.get("AIOQUEUE_URL"):
        yield url
        return
    with EmbeddedServer() as server:
        yield server.url


if __name__ == "__main__":
    # Each failed attempt is logged as a warning with its traceback; this example prints its
    # own line per attempt instead.
    logging.getLogger("aioqueue").setLevel(logging.ERROR)
    with redis_url() as url:
        anyio.run(main, url)
