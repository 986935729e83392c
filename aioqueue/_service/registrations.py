"""The handlers a service registered, and the recording of their types' settings in Redis
(registry entry, schema, rate limit, serial field, then the `recorded` mark), again after
the server lost them."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

from aioqueue._delivery.consumer import Consumer
from aioqueue._delivery.handler_runner import Handler
from aioqueue._model.batches import BatchHandler, Batching
from aioqueue._model.errors import PartitionCountMismatchError
from aioqueue._model.event import Event
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff, logger
from aioqueue._wire.rate_limits import record_rate_limit
from aioqueue._wire.settings_marks import mark_recorded

from .runtime import Runtime

__all__ = ["Recording", "Registration"]


@dataclass(eq=False)
class Registration:
    """A handler added to the service, and its consumer once the service runs."""

    event_class: type[Event]
    event_type: str
    handler: Handler | BatchHandler
    parallelism: int
    batching: Batching | None = None
    """How its events are grouped, for a batch handler; None for a handler of one event."""
    consumer: Consumer | None = None
    recording: bool = False
    """The type's settings are being recorded (see Recording.record)."""
    recorded_at: float | None = None
    """When (monotonic) they were last recorded, None before the first time."""

    @property
    def in_hand(self) -> int:
        """The most events its consumer holds: its parallelism, times a batch's size."""
        return self.parallelism * self.one_claim

    @property
    def one_claim(self) -> int:
        """The most events one claim of its consumer takes: a batch, or one event."""
        return self.batching.max_size if self.batching else 1


class Recording:
    """Records the settings of the types a service handles, and records them again when a
    dispatch finds them gone (see settings_marks.py)."""

    def __init__(
        self,
        runtime: Runtime,
        current: Callable[[str], Registration | None],
        recorded: Callable[[str], None],
    ) -> None:
        """`current(type)` is the type's registration now (None once removed); `recorded(type)`
        is called after each recording (the dispatcher waits for the mark)."""
        self._runtime = runtime
        self._current = current
        self._recorded = recorded

    async def record(self, registration: Registration, *, again: bool = False) -> None:
        """Makes sure the registry records the type with this service's partition count,
        publishes the type's payload schema and records its rate limit (if this service has
        one and none is recorded), then marks the settings recorded; on a partition count
        mismatch the consumer stops (it would read keys nobody writes) and the service fails
        loudly. `again`: after the server lost them."""
        runtime = self._runtime
        errors = ErrorBackoff(f"recording {registration.event_type} in the registry")
        registration.recording = True
        try:
            while True:
                try:
                    queue = await runtime.queues.recorded(registration.event_class, again=again)
                    wanted = runtime.config.rate_limits.get(registration.event_type)
                    if wanted is not None:
                        await record_rate_limit(runtime.client, queue.layout, wanted)
                    await mark_recorded(runtime.client, queue.layout)
                    break
                except PartitionCountMismatchError:
                    if registration.consumer is not None:
                        registration.consumer.stop_taking()
                    raise
                except REDIS_ERRORS as exc:
                    await errors.sleep_after(exc)
        finally:
            registration.recording = False
        registration.recorded_at = time.monotonic()
        self._recorded(registration.event_type)

    def settings_lost(self, registration: Registration, dispatched_at: float) -> None:
        """A dispatch sent at `dispatched_at` (monotonic) found the type's settings missing
        from the server: records them again, unless a recording is under way (a service's
        first dispatch usually meets the one it starts with) or ended after that dispatch
        was sent (its answer is older than the mark, and the recording's wake-up brings a
        new one)."""
        recorded_at = registration.recorded_at
        if (
            registration.recording
            or (recorded_at is not None and recorded_at >= dispatched_at)
            or self._current(registration.event_type) is not registration
        ):
            return
        if recorded_at is not None:
            logger.warning(
                "the settings of %s are gone from Redis (did the server lose its data?); "
                "recording them again before its events are dispatched",
                registration.event_type,
            )
        registration.recording = True  # from now: the next pass must not start another
        self._runtime.start_background(
            f"recording of {registration.event_type}",
            functools.partial(self.record, registration, again=recorded_at is not None),
        )
