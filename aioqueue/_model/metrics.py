"""The metrics protocol the service reports to, and the default that ignores everything."""

from __future__ import annotations

from typing import Literal, Protocol

__all__ = ["Metrics", "NoMetrics", "Outcome"]

Outcome = Literal["ok", "failed", "dead"]
"""How a handler call ended: "ok" (the event is done), "failed" (it is retried later) or
"dead" (it failed its last attempt, or its payload could not be decoded, and is in the dead
letters now)."""


class Metrics(Protocol):
    """Receives what the service does. Calls are synchronous and must not block."""

    def event_enqueued(self, event_type: str, *, scheduled: bool) -> None:
        """An enqueue finished; `scheduled` is False when a pending event was kept."""
        ...

    def events_dispatched(self, event_type: str, count: int) -> None:
        """The dispatcher pushed `count` due events to the ready list."""
        ...

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        """A handler finished. Seconds: `duration` of the handler, `lateness` of the delivery
        (server time when the event was claimed minus its due time)."""
        ...


class NoMetrics:
    """Ignores every report: the default."""

    def event_enqueued(self, event_type: str, *, scheduled: bool) -> None:
        """Ignored."""

    def events_dispatched(self, event_type: str, count: int) -> None:
        """Ignored."""

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        """Ignored; subclass NoMetrics and override this to watch handler outcomes."""
