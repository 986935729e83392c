"""`python -m aioqueue demo`: thousands of delayed events on an embedded server, end to end.

On a server of the user's (`--url`) the demo works under a prefix of its own, random for each
run, and deletes every key of that prefix when it ends, whether it succeeded or not: it
leaves no dead letters, published schemas or type records beside the user's own queues.
"""

from __future__ import annotations

import contextlib
import math
import random
import secrets
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TextIO

import anyio

from aioqueue._model.event import Event
from aioqueue._model.metrics import NoMetrics, Outcome
from aioqueue._model.retry import FixedDelays
from aioqueue._service.service import EventService
from aioqueue._transport.client import RedisClient
from aioqueue.testing import EmbeddedServer, ServerNotFoundError

from ._common import CommandError, check_reachable, connect, display_url
from ._progress import ProgressBar

__all__ = ["run_demo"]

# Enqueue calls in flight at once: enough to schedule thousands of events in well under a
# second without opening a connection per event.
PRODUCERS = 32
# The demo's own prefixes on a user's server: this and 8 random hex digits.
DEMO_PREFIX = "aioqueue-demo-"
# Deleting a few dozen keys takes milliseconds; a server that stopped answering should not
# keep the command from ending.
CLEANUP_TIMEOUT = 10.0


@dataclass
class PaymentCheck(Event):
    id: str
    order_id: int


class DemoMetrics(NoMetrics):
    """Counts outcomes and keeps every delivery's lateness (server clock) for percentiles."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.lateness: list[float] = []
        self.outcomes: dict[Outcome, int] = {"ok": 0, "failed": 0, "dead": 0}
        self.all_settled = anyio.Event()

    @property
    def settled(self) -> int:
        return self.outcomes["ok"] + self.outcomes["dead"]

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        self.outcomes[outcome] += 1
        self.lateness.append(lateness)
        if self.settled >= self.total:
            self.all_settled.set()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


async def run_demo(
    *,
    events: int = 3000,
    spread: float = 3.0,
    out: TextIO = sys.stdout,
    url: str | None = None,
    prefix: str | None = None,
) -> int:
    """Schedules `events` over `spread` seconds and handles them; returns an exit code.

    Without `url` the demo starts (and removes) an embedded server of its own. With `url` it
    works under `prefix`, by default a fresh one (`aioqueue-demo-` and 8 hex digits), and
    deletes every key under it at the end.
    """
    if prefix is None:
        prefix = DEMO_PREFIX + secrets.token_hex(4)
    flaky = {i for i in range(events) if i % 25 == 3}  # fail their first attempt
    doomed = {i for i in range(events) if i % 400 == 7}  # fail every attempt
    attempts_seen: dict[int, int] = {}

    async def check_payment(event: PaymentCheck) -> bool:
        seen = attempts_seen[event.order_id] = attempts_seen.get(event.order_id, 0) + 1
        if event.order_id in doomed:
            raise RuntimeError(f"payment provider rejected order {event.order_id}")
        return not (event.order_id in flaky and seen == 1)

    metrics = DemoMetrics(events)
    async with _server_url(url, prefix, out) as server_url:
        service = (
            EventService.builder()
            .url(server_url)
            .prefix(prefix)
            .scheduling_interval(timedelta(milliseconds=500))
            .scheduling_batch_size(200)
            .retry_attempts(3)
            .retry_policy(FixedDelays([0.2, 0.4]))
            .handler_timeout(5)
            .metrics(metrics)
            .build()
        )
        async with service:
            service.add_handler(PaymentCheck, check_payment, parallelism=64)
            print(
                f"  scheduling {events} payment checks over {spread:g} s "
                f"({len(flaky)} fail once, {len(doomed)} always fail)",
                file=out,
            )
            started = time.perf_counter()
            rng = random.Random(42)
            delays = [rng.uniform(0, spread) for _ in range(events)]
            order_ids = iter(range(events))

            async def produce() -> None:
                # The producers share one iterator, so each order is enqueued exactly once.
                for order_id in order_ids:
                    event = PaymentCheck(id=f"payment-{order_id}", order_id=order_id)
                    await service.enqueue(event, delays[order_id])

            async with anyio.create_task_group() as producers:
                for _ in range(PRODUCERS):
                    producers.start_soon(produce)
            bar = ProgressBar(events, out)
            with anyio.move_on_after(spread + 60) as waiting:
                while not metrics.all_settled.is_set():
                    bar.show(metrics.settled)
                    with anyio.move_on_after(0.1):
                        await metrics.all_settled.wait()
            if waiting.cancelled_caught:
                bar.close()
                raise CommandError(
                    f"only {metrics.settled} of {events} events were handled within "
                    f"{spread + 60:g} s; is the server still up?"
                )
            bar.show(metrics.settled)
            bar.close()
            elapsed = time.perf_counter() - started
            dead = await service.dead_letters(PaymentCheck, limit=events)
        _report(metrics, dead_count=len(dead), example_error=dead[0].error if dead else "", out=out)
        print(f"  done in {elapsed:.1f} s", file=out)
    return 0 if metrics.outcomes["ok"] + len(dead) == events else 1


@contextlib.asynccontextmanager
async def _server_url(url: str | None, prefix: str, out: TextIO) -> AsyncIterator[str]:
    if url is not None:
        # Checked first: a demo started against no server would otherwise fail in each of
        # its producers at once.
        await check_reachable(url)
        print(
            f"aioqueue demo: server {display_url(url)}, prefix {prefix} "
            "(deleted when the demo ends)",
            file=out,
        )
        try:
            yield url
        finally:
            # Shielded: an interrupted demo cleans up too.
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT):
                async with connect(url) as client:
                    removed = await delete_prefix(client, prefix)
                print(f"  removed the demo's {removed} keys under {prefix}", file=out)
        return
    try:
        server = EmbeddedServer()
    except ServerNotFoundError as exc:
        raise CommandError(
            f"{exc}; or run the demo against a server of yours with --url redis://HOST:PORT"
        ) from exc
    with server:
        print(f"aioqueue demo: server {server.binary.name} on {server.url}", file=out)
        yield server.url


async def delete_prefix(client: RedisClient, prefix: str) -> int:
    """Deletes every key under `prefix` (on every master of a cluster); returns how many.

    One key per DEL: a cluster refuses a DEL of keys in several slots, and the demo leaves
    a few dozen keys. A prefix has none of the pattern characters `*?[]\\`
    (keys.validate_prefix), so the SCAN pattern needs no escaping.
    """
    removed = 0
    async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        removed += await client.delete(key)
    return removed


def _report(metrics: DemoMetrics, *, dead_count: int, example_error: str, out: TextIO) -> None:
    ms = [value * 1000 for value in metrics.lateness]
    print(
        f"  delivered {metrics.outcomes['ok']} ok, {metrics.outcomes['failed']} failed attempts "
        f"retried, {dead_count} dead letters",
        file=out,
    )
    if example_error:
        print(f"  a dead letter's last error: {example_error}", file=out)
    print(
        f"  lateness (server clock): p50 {percentile(ms, 0.5):.1f} ms, "
        f"p99 {percentile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms",
        file=out,
    )
