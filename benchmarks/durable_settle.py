"""What confirming the worker's own writes with WAIT would cost: the drain rate on a primary
with one replica, as aioqueue runs (no WAIT after dispatches, claims, lease renewals,
acknowledgements, failures and hand-backs), beside the same drain with every one of those
script calls followed by WAIT 1 on its connection, the way a durable enqueue is confirmed.

    python benchmarks/durable_settle.py [--events 20000] [--repeats 3]

aioqueue does not confirm them (docs/concepts/guarantees.md says why): a dispatch lost on
failover leaves the event due again, a lost claim leaves the delivery in the ready list, a
lost acknowledgement or failure leaves the retry the dispatch scheduled. All three mean a
repeat delivery, which a WAIT could not prevent either (the event is back on the promoted
replica whether or not the worker waited); it could only make the worker stop handling
events while a replica lags. This measures what that would cost in the normal case.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio
from replicated_server import replicated_server

from aioqueue import Durability, Event, EventService
from aioqueue._producing.durability import DurableCalls, durable_pipelined_steps
from aioqueue._transport.client import RedisClient
from aioqueue._transport.held_connection import HeldConnection
from aioqueue._transport.steps import Steps, run_steps
from aioqueue._wire.functions import LIBRARY
from aioqueue._wire.scripts import (
    ACKNOWLEDGE,
    CLAIM,
    DISPATCH,
    FAIL,
    HAND_BACK,
    RENEW,
    LuaScript,
    ScriptCall,
)

# Every call of the worker's that settles or moves an event: dispatches, claims, lease
# renewals, acknowledgements, failures, hand-backs.
SETTLING = {script.name for script in (DISPATCH, CLAIM, RENEW, ACKNOWLEDGE, FAIL, HAND_BACK)}
PARALLELISM = 32


@dataclass
class SettleEvent(Event):
    id: str
    index: int


def confirm_every_settlement(durability: Durability) -> None:
    """Routes the worker's settling script calls, alone (LuaScript.run) or pipelined (its
    dispatches and renewals), through a pipeline that ends with WAIT (and WAITAOF where the
    primary has AOF) on the same connection, as durable enqueues are sent."""
    run_alone = LuaScript.run
    pipelined = LuaScript.pipelined_steps
    pipelined_outcomes = LuaScript.pipelined_outcomes

    def never_refused(call: ScriptCall) -> ScriptCall:
        raise AssertionError("the library is loaded before the drain: no call is refused")

    durable = DurableCalls(durability, touch=never_refused)

    async def run(
        script: LuaScript,
        client: RedisClient,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        held: HeldConnection | None = None,
    ) -> Any:
        if script.name not in SETTLING:
            return await run_alone(script, client, keys, args, held)
        steps = durable_pipelined_steps(script, client, [ScriptCall(keys, args)], durable)
        [reply] = await run_steps(client, steps, held)
        return reply

    def confirmed(
        original: Callable[[LuaScript, object, Sequence[ScriptCall]], Steps[list[Any]]],
    ) -> Callable[[LuaScript, object, Sequence[ScriptCall]], Steps[list[Any]]]:
        def steps(
            script: LuaScript, client: object, calls: Sequence[ScriptCall]
        ) -> Steps[list[Any]]:
            if script.name not in SETTLING:
                return original(script, client, calls)
            return durable_pipelined_steps(script, client, calls, durable)

        return steps

    LuaScript.run = run  # type: ignore[method-assign,assignment]
    LuaScript.pipelined_steps = confirmed(pipelined)  # type: ignore[method-assign,assignment]
    LuaScript.pipelined_outcomes = confirmed(pipelined_outcomes)  # type: ignore[method-assign,assignment]


async def drain(url: str, events: int) -> float:
    """Enqueues `events` due now, then times a worker until it handled them all."""
    producer = EventService.builder().url(url).enable_scheduling(False).build()
    async with producer:
        batch = [SettleEvent(id=f"s-{n}", index=n) for n in range(events)]
        await producer.enqueue_many(batch, 0)
    handled = 0
    done = asyncio.Event()

    async def handle(event: SettleEvent) -> bool:
        nonlocal handled
        handled += 1
        if handled == events:
            done.set()
        return True

    started = time.perf_counter()
    async with EventService.builder().url(url).build() as worker:
        worker.add_handler(SettleEvent, handle, parallelism=PARALLELISM)
        await asyncio.wait_for(done.wait(), timeout=300)
        seconds = time.perf_counter() - started
    return seconds


async def run(events: int, repeats: int, confirmed: bool) -> list[float]:
    rates = []
    for _ in range(repeats):
        async with replicated_server() as (url, _replica):
            async with redis.asyncio.Redis.from_url(url) as admin:
                await admin.function_load(LIBRARY.source)
                waits_before = await command_calls(admin, "wait")
                rates.append(events / await drain(url, events))
                waits = await command_calls(admin, "wait") - waits_before
            if confirmed and waits == 0:
                raise RuntimeError("the confirmed drain sent no WAIT")
    return rates


async def command_calls(client: redis.asyncio.Redis, command: str) -> int:
    stats = (await client.info("commandstats")).get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    plain = asyncio.run(run(args.events, args.repeats, confirmed=False))
    confirm_every_settlement(Durability.of(1, 5.0))
    confirmed = asyncio.run(run(args.events, args.repeats, confirmed=True))
    result = {
        "events": args.events,
        "plain_events_per_s": statistics.median(plain),
        "confirmed_events_per_s": statistics.median(confirmed),
        "runs": {"plain": plain, "confirmed": confirmed},
    }
    print(json.dumps(result))
    print(
        f"drain of {args.events} events on a primary + replica, median of {args.repeats}: "
        f"{result['plain_events_per_s']:,.0f} events/s as aioqueue runs, "
        f"{result['confirmed_events_per_s']:,.0f} events/s with a WAIT after every "
        f"dispatch, claim, renewal, acknowledgement, failure and hand-back"
    )


if __name__ == "__main__":
    main()
