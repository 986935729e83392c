"""The chaos run's worker process (benchmarks/chaos.py starts it as `chaos.py worker`): the
events it handles and the handlers that log each call before returning (see chaos.py)."""

from __future__ import annotations

import argparse
import os
import random
import signal
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import anyio
from chaos_flow import add_flow_handlers, with_rate_limit

from aioqueue import (
    Delivery,
    Event,
    EventService,
    EventServiceBuilder,
    FixedDelays,
    current_deliveries,
    current_delivery,
)

PREFIX = "chaos"
SCHEDULING_INTERVAL = 0.1
EVENT_TYPE = "ChaosEvent"
# Every worker declares this schedule; ticks are logged like events, ids prefixed.
TICK_SECONDS = 0.25
TICK_PREFIX = "tick-"


@dataclass
class ChaosEvent(Event):
    id: str
    due_ms: int
    poison: bool = False


@dataclass
class ChaosTick(Event):
    """The event of the recurring schedule every worker declares: one per tick."""

    id: str
    tick_ms: int


def tick_event(tick: datetime) -> ChaosTick:
    tick_ms = round(tick.timestamp() * 1000)
    return ChaosTick(id=f"{TICK_PREFIX}{tick_ms}", tick_ms=tick_ms)


def producer_builder(url: str, partitions: int) -> EventServiceBuilder:
    """A service that enqueues the run's events (the driver's): no scheduling of its own."""
    return (
        EventService.builder()
        .url(url)
        .prefix(PREFIX)
        .partitions(ChaosEvent, partitions)
        .enable_scheduling(False)
    )


# -- the worker process ----------------------------------------------------------------------


async def run_worker(args: argparse.Namespace) -> None:
    """Handles ChaosEvents until SIGTERM, appending one line per handler call to args.log."""
    log = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    rng = random.Random()

    def record(event_id: str, due_ms: int, delivery: Delivery | None = None) -> None:
        # One write(2) per line, before returning: see the module docstring.
        delivery = delivery or current_delivery()
        attempt_due_ms = round(delivery.due_at.timestamp() * 1000)
        line = f"{event_id}\t{due_ms}\t{time.time() * 1000:.1f}\t{delivery.attempt}\t"
        os.write(log, f"{line}{attempt_due_ms}\n".encode())

    async def handle(event: ChaosEvent) -> bool:
        record(event.id, event.due_ms)
        if event.poison:
            raise RuntimeError("poisoned event: this handler always fails")
        # A little work, so that kills find handlers running.
        await anyio.sleep(rng.uniform(0, args.handler_ms / 1000))
        return True

    def handle_in_thread(event: ChaosEvent) -> bool:
        """The same handler as a plain function: half the workers run it in threads."""
        record(event.id, event.due_ms)
        if event.poison:
            raise RuntimeError("poisoned event: this handler always fails")
        time.sleep(rng.uniform(0, args.handler_ms / 1000))
        return True

    async def handle_batch(batch: list[ChaosEvent]) -> dict[str, bool]:
        """The same handler for a batch: each event's outcome its own."""
        for event, delivery in zip(batch, current_deliveries(), strict=True):
            record(event.id, event.due_ms, delivery)
        await anyio.sleep(rng.uniform(0, args.handler_ms / 1000))
        return {event.id: not event.poison for event in batch}

    async def handle_tick(tick: ChaosTick) -> bool:
        record(tick.id, tick.tick_ms)
        return True

    builder = (
        EventService.builder()
        .url(args.url)
        .prefix(PREFIX)
        .scheduling_interval(SCHEDULING_INTERVAL)
        .polling_timeout(0.5)
        .handler_timeout(args.handler_timeout)
        .lease(args.lease)
        .retry_attempts(args.retry_attempts)
        .retry_policy(FixedDelays([0.2]))
        .shutdown_grace(2.0)
        .partitions(ChaosEvent, args.partitions)
    )
    service = with_rate_limit(builder, args.rate_limit).build()
    flow_log = os.open(
        Path(args.log).with_suffix(".flow"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
    )
    # Every worker declares the schedule: exactly one event per tick, whoever produces it,
    # and ticks missed while the server was down are all produced (misfire="all").
    service.add_schedule("chaos-tick", every=TICK_SECONDS, event=tick_event, misfire="all")
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with service:
            if args.batch_handler:
                service.add_batch_handler(
                    ChaosEvent, handle_batch, max_size=args.parallelism, max_wait=0.01
                )
            elif args.sync_handler:
                service.add_handler(ChaosEvent, handle_in_thread, parallelism=args.parallelism)
            else:
                service.add_handler(ChaosEvent, handle, parallelism=args.parallelism)
            service.add_handler(ChaosTick, handle_tick, parallelism=4)
            add_flow_handlers(service, record, flow_log, args.handler_ms)
            print("ready", flush=True)
            async for _ in signals:
                break
    os.close(log)
    os.close(flow_log)
