"""The instrumentation protocol: hooks around enqueue and handling (tracing uses them)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

__all__ = ["HandlingScope", "Instrumentation", "NoInstrumentation"]


class HandlingScope(Protocol):
    """What the consumer tells an instrumentation about one handler call."""

    def finished(self, error: str | None) -> None:
        """The handler returned: `error` is None on success, else why the attempt failed."""
        ...


class Instrumentation(Protocol):
    """Sees every enqueue and wraps every handler call. Calls must be quick and not block."""

    def enqueue_context(self, context: Mapping[str, str] | None) -> Mapping[str, str] | None:
        """Returns the context to store with the events being enqueued (e.g. with a
        `traceparent` added). Called in the enqueuing task."""
        ...

    def handling(
        self, event_type: str, event_id: str, attempt: int, context: Mapping[str, str]
    ) -> AbstractContextManager[HandlingScope]:
        """A context manager the handler runs inside, in the handler's own task."""
        ...


class _NoScope:
    """The no-op handling scope, and its own context manager: one shared object, since a
    handler call should not pay for a generator-based context manager that does nothing."""

    def finished(self, error: str | None) -> None:
        pass

    def __enter__(self) -> HandlingScope:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_SCOPE = _NoScope()


class NoInstrumentation:
    """Changes nothing: the default."""

    def enqueue_context(self, context: Mapping[str, str] | None) -> Mapping[str, str] | None:
        """Returns `context` as it is."""
        return context

    def handling(
        self, event_type: str, event_id: str, attempt: int, context: Mapping[str, str]
    ) -> AbstractContextManager[HandlingScope]:
        """A context manager that does nothing, shared by every handler call."""
        return _NO_SCOPE
