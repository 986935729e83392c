"""The Redis server's own CPU time over a scenario's measured part, from `INFO CPU`.

`used_cpu_sys + used_cpu_user` is the server process's own CPU time (getrusage, all of its
threads). Read once before and once after the measured part of a scenario, the difference over
the events gives microseconds of server CPU per event, and over the wall time between the two
readings the share of one core the server used. A reading is one INFO round trip, taken
outside every timed window; for several servers (a cluster's masters, a primary and its
replica) the readings are added up.

Runs in every benchmark virtualenv, so it needs only the standard library and redis-py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import redis.asyncio


class CpuReading(NamedTuple):
    """The servers' CPU seconds so far, and `time.monotonic()` when they were read.

    CLOCK_MONOTONIC is one clock for every process of the machine, so a reading taken in one
    process (the lateness worker) can close a window opened in another (its producer).
    """

    cpu_s: float
    at: float


async def read_server_cpu(urls: Sequence[str]) -> CpuReading:
    """used_cpu_sys + used_cpu_user of the servers at `urls`, added up."""
    total = 0.0
    for url in urls:
        client = redis.asyncio.Redis.from_url(url)
        try:
            total += cpu_of(await client.info("cpu"))
        finally:
            await client.aclose()
    return CpuReading(total, time.monotonic())


def cpu_of(info: dict[str, Any]) -> float:
    """A server's CPU seconds from its INFO CPU section."""
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def cpu_figures(start: CpuReading, end: CpuReading, events: int | None) -> dict[str, float]:
    """Server CPU between two readings: seconds, the share of one core, and with `events`
    microseconds per event."""
    cpu_s = end.cpu_s - start.cpu_s
    figures = {
        "server_cpu_window_s": cpu_s,
        "server_cpu_share": cpu_s / max(end.at - start.at, 1e-9),
    }
    if events:
        figures["server_cpu_us_per_event"] = cpu_s * 1e6 / events
    return figures
