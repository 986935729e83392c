"""A service factory for `aioqueue worker`: each Export takes HANDLER_SECONDS to handle.

The handler prints "started <id>" and "finished <id>", so a test can see that a handler that
was running when the worker was told to stop still finished.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import anyio

from aioqueue import Event, EventService, FixedDelays


@dataclass
class Export(Event):
    id: str


async def export(event: Export) -> bool:
    print(f"started {event.id}", flush=True)
    await anyio.sleep(float(os.environ.get("HANDLER_SECONDS", "1.0")))
    print(f"finished {event.id}", flush=True)
    return True


def create_service(url: str, prefix: str) -> EventService:
    service = (
        EventService.builder()
        .url(url)
        .prefix(prefix)
        .scheduling_interval(0.05)
        .polling_timeout(0.2)
        .handler_timeout(10)
        .shutdown_grace(5)
        .retry_policy(FixedDelays([0.05]))
        .build()
    )
    service.add_handler(Export, export)
    return service


def not_a_service() -> str:
    return "nope"
