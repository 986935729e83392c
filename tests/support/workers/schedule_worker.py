"""A process that keeps the "beat" schedule (every 0.2 s) and prints each tick it sees.

Usage: python -m tests.support.workers.schedule_worker REDIS_URL

It only keeps the schedule (no handler): the test kills it with SIGKILL at some point and
checks that the ticks go on, none lost and none doubled, with another service keeping them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime

import anyio

from aioqueue import Event, EventService


@dataclass
class Beat(Event):
    id: str
    tick: str


def beat(tick: datetime) -> Beat:
    return Beat(id=f"beat-{round(tick.timestamp() * 1000)}", tick=tick.isoformat())


async def main(url: str) -> None:
    service = EventService.builder().url(url).scheduling_interval(0.05).build()
    service.add_schedule("beat", every=0.2, event=beat, misfire="all")
    async with service:
        print("keeping", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
