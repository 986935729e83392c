"""What the worker registry says of a live worker: `await service.workers()`."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

__all__ = ["Worker", "WorkerHandler", "WorkerState"]


class WorkerState(enum.Enum):
    """RUNNING while it takes events; STOPPING once it was asked to stop (it takes nothing
    new and finishes, or gives back, what it holds)."""

    RUNNING = "running"
    STOPPING = "stopping"


@dataclass(frozen=True, slots=True)
class WorkerHandler:
    """One handler of a live worker."""

    type: str
    """The event type's wire name."""
    parallelism: int
    in_hand: int
    """How many of the type's events the worker held at its last heartbeat: claimed, and
    running or about to run."""


@dataclass(frozen=True, slots=True)
class Worker:
    """A running service with handlers, as its last heartbeat described it. A worker that
    stops cleanly leaves the registry at once; one that dies is gone once its record
    expires, three heartbeats after its last."""

    id: str
    """Unique to one run of one service: `host:pid:random`."""
    host: str
    pid: int
    version: str
    """The aioqueue version it runs."""
    started_at: datetime
    """Its first heartbeat, on the Redis server's clock (aware, UTC)."""
    beat_at: datetime
    """Its last heartbeat, on the Redis server's clock (aware, UTC)."""
    heartbeat: float
    """Seconds between its heartbeats."""
    state: WorkerState
    handlers: tuple[WorkerHandler, ...]

    def handles(self, event_type: str) -> bool:
        """Whether it has a handler for `event_type` (a wire name)."""
        return any(handler.type == event_type for handler in self.handlers)
