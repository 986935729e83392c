"""A FastAPI app whose lifespan runs the service and whose endpoint schedules an event.

    pip install fastapi uvicorn
    AIOQUEUE_URL=redis://localhost:6379 uvicorn fastapi_app:app --app-dir examples
    curl -X POST 'localhost:8000/orders/o-1/reminder?delay=5'
    curl localhost:8000/reminders/sent        # ["o-1"] five seconds later

The same process schedules and handles here; a web app that only schedules would build the
service with `.enable_scheduling(False)` and add no handlers, and `aioqueue worker` would
run the handlers elsewhere.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import redis.exceptions
from fastapi import FastAPI, Query

from aioqueue import Event, EventService


@dataclass
class PaymentReminder(Event):
    id: str
    order_id: str


sent: list[str] = []


async def send_reminder(event: PaymentReminder) -> bool:
    sent.append(event.order_id)  # a real app would send an e-mail here
    return True


logger = logging.getLogger("fastapi_app")
URL = os.environ.get("AIOQUEUE_URL", "redis://localhost:6379")

service = (
    EventService.builder().url(URL).prefix(os.environ.get("AIOQUEUE_PREFIX", "aioqueue")).build()
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Starts the dispatcher and the consumer with the app; shuts them down gracefully with it.
    try:
        async with service:
            service.add_handler(PaymentReminder, send_reminder, parallelism=8)
            # Dead letters an earlier run left are worth a line at start-up.
            dead = await service.dead_letters(PaymentReminder, limit=100)
            if dead:
                logger.warning(
                    "%d payment reminders are dead letters: aioqueue dead list", len(dead)
                )
            yield
    except redis.exceptions.ConnectionError as exc:
        # Entering the service raises RedisUnavailableError, a ConnectionError, when Redis
        # cannot be reached; the block's own errors leave `async with service:` as raised.
        raise RuntimeError(f"cannot start: Redis at {URL} is unreachable ({exc})") from exc


app = FastAPI(lifespan=lifespan)


@app.post("/orders/{order_id}/reminder", status_code=202)
async def schedule_reminder(
    order_id: str, delay: float = Query(3600, ge=0, description="seconds")
) -> dict[str, object]:
    reminder = PaymentReminder(id=f"reminder-{order_id}", order_id=order_id)
    scheduled = await service.enqueue(reminder, delay)
    return {"order_id": order_id, "scheduled": scheduled}


@app.get("/reminders/sent")
async def reminders_sent() -> list[str]:
    return sent
