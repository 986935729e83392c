"""Who works on a prefix: the live workers of the registry (_wire/workers.py) beside the
queues, so that a type whose events are due while no live worker handles it stands out
(`aioqueue workers`, `GET /workers`, the dashboard's Workers panel, the Prometheus gauge)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aioqueue._model.workers import Worker, WorkerState
from aioqueue._transport.client import RedisClient
from aioqueue._wire.workers import read_workers

from .stats import read_stats

__all__ = ["Unattended", "WorkersView", "read_workers_view", "worker_json"]


@dataclass(frozen=True, slots=True)
class Unattended:
    """A type with events due now, or waiting in its ready list, and no running worker with
    a handler for it (a paused type is not counted: nothing would take its events anyway)."""

    event_type: str
    waiting: int
    """Its events due now plus those in its ready list."""


@dataclass(frozen=True, slots=True)
class WorkersView:
    workers: list[Worker]
    unattended: list[Unattended]
    live_workers: dict[str, int]
    """Event type -> how many running workers handle it, for every type of the prefix."""
    unreadable: list[str]
    """Ids of worker records that did not read as one (left out of `workers`)."""
    server_time: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "server_time": self.server_time.isoformat(),
            "workers": [worker_json(worker, self.server_time) for worker in self.workers],
            "unattended": [
                {"type": item.event_type, "waiting": item.waiting} for item in self.unattended
            ],
            "live_workers": self.live_workers,
            "unreadable": self.unreadable,
        }


def worker_json(worker: Worker, now: datetime) -> dict[str, Any]:
    return {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "version": worker.version,
        "state": worker.state.value,
        "started_at": worker.started_at.isoformat(),
        "beat_at": worker.beat_at.isoformat(),
        "beat_age": round(max(0.0, (now - worker.beat_at).total_seconds()), 3),
        "heartbeat": worker.heartbeat,
        "handlers": [
            {"type": handler.type, "parallelism": handler.parallelism, "in_hand": handler.in_hand}
            for handler in worker.handlers
        ],
    }


async def read_workers_view(client: RedisClient, prefix: str) -> WorkersView:
    """The live workers of `prefix` and the types no running worker attends to."""
    listed = await read_workers(client, prefix)
    stats = await read_stats(client, prefix)
    running = [worker for worker in listed.workers if worker.state is WorkerState.RUNNING]
    live = {
        queue.event_type: sum(1 for worker in running if worker.handles(queue.event_type))
        for queue in stats.queues
    }
    for worker in running:  # a type a worker handles before anything recorded its queue
        for handler in worker.handlers:
            live.setdefault(handler.type, sum(1 for w in running if w.handles(handler.type)))
    unattended = [
        Unattended(queue.event_type, queue.due_now + queue.ready)
        for queue in stats.queues
        if not queue.paused and queue.due_now + queue.ready > 0 and live[queue.event_type] == 0
    ]
    return WorkersView(listed.workers, unattended, live, listed.unreadable, listed.server_time)
