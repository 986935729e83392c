"""What the runners of either kind of handler share (handler_runner.py for a handler of one
event, batch_runner.py for a batch handler): the type they run, its handler and name, the
service's settings, and the threads of a sync handler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio

from aioqueue._model.config import ServiceConfig
from aioqueue._model.errors import PayloadDecodeError
from aioqueue._model.event import Event
from aioqueue._transport.recovery import logger
from aioqueue._wire.envelope import Envelope

from .threaded_calls import handler_name_of, threaded_calls_for

__all__ = ["Runner"]

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])


class Runner(Generic[HandlerT]):
    """Runs one event type's handler; failures are settled by the runner, successes handed
    back for the consumer to acknowledge. `thread_limiter` bounds a sync handler's threads
    (anyio's default limiter if None)."""

    def __init__(
        self,
        *,
        event_type: str,
        event_class: type[Event],
        handler: HandlerT,
        config: ServiceConfig,
        thread_limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        self._event_type = event_type
        self._event_class = event_class
        self._handler = handler
        self._config = config
        self.handler_name = handler_name_of(handler)
        self._threaded = threaded_calls_for(handler, config.handler_timeout, thread_limiter)
        """Set for a sync handler: its calls run in threads, outside the timeout lanes."""

    def stop_waiting(self) -> None:
        """Sync calls waiting for a thread give up (NotStarted): the service is stopping."""
        if self._threaded is not None:
            self._threaded.stop_waiting()

    @property
    def _timeout(self) -> float:
        return self._config.handler_timeout

    def _timed_out(self, attempt: int) -> str:
        return f"the handler did not finish within {self._timeout:g} s on attempt {attempt}"

    def _decode(self, envelope: Envelope) -> Event:
        if envelope.event_type != self._event_type:
            raise PayloadDecodeError(
                f"envelope names event type {envelope.event_type!r} "
                f"but sits in the queue of {self._event_type!r}"
            )
        return self._config.serializer.decode(self._event_class, envelope.id, envelope.payload)

    def _log_undecodable(self, envelope: Envelope, error: PayloadDecodeError) -> None:
        logger.error(
            "%s %r cannot be decoded, moving it to the dead letters: %s",
            envelope.event_type,
            envelope.id,
            error,
        )
