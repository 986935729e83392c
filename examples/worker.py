"""A worker module for `aioqueue worker`: the factory builds the service and adds handlers.

    aioqueue worker worker:create_service --app-dir examples --url redis://localhost:6379

The command imports the module, calls `create_service(url=..., prefix=...)` and runs the
service until SIGINT or SIGTERM; then it stops taking events, lets running handlers finish
within `shutdown_grace` and exits. Any program can schedule a `Reminder` meanwhile: this
module's `Reminder` class, a class of the same name elsewhere, or `POST /events` with
`"type": "Reminder"`.
"""

from __future__ import annotations

from dataclasses import dataclass

from aioqueue import Event, EventService, ExponentialBackoff


@dataclass
class Reminder(Event):
    id: str
    user: str
    text: str


async def send_reminder(event: Reminder) -> bool:
    print(f"reminder {event.id} for {event.user}: {event.text}", flush=True)
    return True


def create_service(url: str, prefix: str) -> EventService:
    service = (
        EventService.builder()
        .url(url)
        .prefix(prefix)
        .retry_attempts(5)
        .retry_policy(ExponentialBackoff(base=1, cap=60))
        .shutdown_grace(10)
        .build()
    )
    service.add_handler(Reminder, send_reminder, parallelism=16)
    return service
