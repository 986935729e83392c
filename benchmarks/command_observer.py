"""What a running worker asks of Redis over a window: the commands other clients send (round
trips, from MONITOR) and the commands the server executes (INFO commandstats, which counts the
commands scripts run as well), with the server's CPU. The idle scenario (scenarios.py) and
BullMQ on Node's (system_bullmq_node.py) read it.

Runs in every benchmark virtualenv, so it needs only the standard library and redis-py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio
from common import JsonDict, command_stats, stats_delta
from server_cpu import cpu_figures, read_server_cpu

__all__ = ["observe_commands"]


async def observe_commands(url: str, window: float) -> JsonDict:
    """Commands other clients send (MONITOR) and the server executes (commandstats) in `window` s.

    The observer's own commands are left out: MONITOR lines from its connection, and the one
    INFO of the first snapshot, which the second snapshot counts. The server's CPU is read over
    a window of the same length before that one, since feeding a MONITOR costs the server CPU
    of its own.
    """
    cpu_start = await read_server_cpu([url])
    await asyncio.sleep(window)
    server_cpu = cpu_figures(cpu_start, await read_server_cpu([url]), None)
    observer = redis.asyncio.Redis.from_url(url, single_connection_client=True)
    watcher = redis.asyncio.Redis.from_url(url)
    sent: dict[str, int] = {}
    in_scripts: dict[str, int] = {}
    bounds: list[float] = []
    try:
        own_port = str((await observer.client_info())["addr"]).rsplit(":", 1)[1]

        async def collect(monitor: Any) -> None:
            async for line in monitor.listen():
                # The server's clock is this machine's clock (see README, "Clocks").
                if not bounds or line["time"] < bounds[0] or line["client_port"] == own_port:
                    continue
                if len(bounds) == 2 and line["time"] > bounds[1]:
                    continue
                counts = in_scripts if line["client_type"] == "lua" else sent
                name = str(line["command"]).split(" ", 1)[0].lower()
                counts[name] = counts.get(name, 0) + 1

        async with watcher.monitor() as monitor:
            listening = asyncio.ensure_future(collect(monitor))
            try:
                before = await command_stats(observer)
                bounds.append(time.time())
                await asyncio.sleep(window)
                after = await command_stats(observer)
                bounds.append(time.time())
                # MONITOR lines arrive a little after the commands run.
                await asyncio.sleep(0.2)
            finally:
                listening.cancel()
                await asyncio.gather(listening, return_exceptions=True)
    finally:
        await observer.aclose()
        await watcher.aclose()
    elapsed = bounds[1] - bounds[0]
    executed = {name: calls for name, (calls, _) in stats_delta(before, after).items()}
    executed["info"] = executed.get("info", 0) - 1
    executed = {name: calls for name, calls in executed.items() if calls > 0}
    return {
        "window_s": elapsed,
        "round_trips_per_s": sum(sent.values()) / elapsed,
        "commands_per_s": sum(executed.values()) / elapsed,
        "sent": sent,
        "run_by_scripts": in_scripts,
        "executed": executed,
        **server_cpu,
    }
