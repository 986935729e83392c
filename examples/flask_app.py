"""A Flask app whose route schedules an event through the process's one SyncProducer.

    pip install flask
    AIOQUEUE_URL=redis://localhost:6379 flask --app examples/flask_app.py run
    curl -X POST 'localhost:5000/orders/o-1/reminder?delay=5'     # {"scheduled": true, ...}

Flask's views are plain functions, often run by many threads at once (a threaded WSGI server
such as gunicorn --threads, or waitress): they share one SyncProducer, whose connection pool
gives each call a connection of its own. A worker elsewhere handles the reminders (any
EventService with a handler for `PaymentReminder`).
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass

from flask import Flask, request

from aioqueue import Event, InvalidEnqueueError, SyncProducer


@dataclass
class PaymentReminder(Event):
    id: str
    order_id: str


producer = SyncProducer(
    os.environ.get("AIOQUEUE_URL", "redis://localhost:6379"),
    prefix=os.environ.get("AIOQUEUE_PREFIX", "aioqueue"),
)
atexit.register(producer.close)

app = Flask(__name__)


@app.post("/orders/<order_id>/reminder")
def schedule_reminder(order_id: str) -> tuple[dict[str, object], int]:
    delay = request.args.get("delay", 3600.0, type=float)
    reminder = PaymentReminder(id=f"reminder-{order_id}", order_id=order_id)
    try:
        scheduled = producer.enqueue(reminder, delay)
    except InvalidEnqueueError as exc:  # a negative delay, say: the client's mistake
        return {"error": str(exc)}, 400
    return {"order_id": order_id, "scheduled": scheduled}, 202
