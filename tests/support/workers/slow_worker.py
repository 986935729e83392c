"""A service factory for `aioqueue worker`: each Export takes HANDLER_SECONDS to handle.

The handler prints "started <id>" and "finished <id>", so a test can see that a handler that
was running when the worker was told to stop still finished.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import anyio

from aioqueue import Event, EventService, FixedDelays


@dataclass
class Export(Event):
    id: str


async def export(event: Export) -> bool:
    say(f"started {event.id}")
    await anyio.sleep(float(os.environ.get("HANDLER_SECONDS", "1.0")))
    say(f"finished {event.id}")
    return True


def say(line: str) -> None:
    """One write per line: worker processes share the pipe, and on unbuffered output
    (PYTHONUNBUFFERED) print() writes the text and its newline apart, so two processes'
    lines could interleave ("started e-1started e-2", then an empty line)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


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
