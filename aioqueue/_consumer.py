"""A consumer: takes one event type's due events when handler slots are free, runs them."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ._acknowledger import SETTLE_TIMEOUT, Acknowledger
from ._config import ServiceConfig
from ._envelope import Envelope, EnvelopeError
from ._errors import PayloadDecodeError
from ._event import Event, event_context
from ._metrics import Outcome
from ._recovery import REDIS_ERRORS, ErrorBackoff, logger
from ._store import QueueStore

__all__ = ["Consumer", "Handler"]

Handler = Callable[[Any], Awaitable[bool]]


@dataclass(frozen=True)
class _Partition:
    """One partition's keys, and the acknowledgements batched for them."""

    store: QueueStore
    acknowledger: Acknowledger


class Consumer:
    """Feeds one handler with up to `parallelism` events at a time.

    It asks Redis for events only for free slots (request-one backpressure), so at most
    `parallelism` events of its type are out of Redis in this service at any moment. A
    partitioned type gets one taker per partition; they queue for the shared slots in turn
    (anyio's semaphore is first-come, first-served), so a busy partition cannot starve the
    others.
    """

    def __init__(
        self,
        *,
        stores: Sequence[QueueStore],
        event_class: type[Event],
        handler: Handler,
        parallelism: int,
        config: ServiceConfig,
        on_claimed: Callable[[int], None] = lambda ready_left: None,
    ) -> None:
        self._event_type = stores[0].event_type
        self._partitions = [_Partition(store, Acknowledger(store)) for store in stores]
        self._event_class = event_class
        self._on_claimed = on_claimed
        self._handler = handler
        self._parallelism = parallelism
        self._config = config
        self._slots = anyio.Semaphore(parallelism)
        self._taking = anyio.CancelScope()
        self._finished = anyio.Event()
        # A callable object's repr can be long and changing; its class names it well enough.
        self._handler_name = getattr(handler, "__qualname__", type(handler).__qualname__)

    @property
    def in_flight(self) -> int:
        """Events taken from Redis and not yet settled."""
        return self._parallelism - self._slots.value

    async def run(self) -> None:
        """Takes and handles events until stop_taking(), then waits for running handlers."""
        try:
            async with anyio.create_task_group() as handlers:
                with self._taking:
                    async with anyio.create_task_group() as takers:
                        for partition in self._partitions:
                            takers.start_soon(self._take_events, partition, handlers)
        finally:
            self._finished.set()

    def stop_taking(self) -> None:
        """Takes no more events; handlers already running go on."""
        self._taking.cancel()

    async def wait_finished(self) -> None:
        await self._finished.wait()

    async def _take_events(self, partition: _Partition, handlers: TaskGroup) -> None:
        store = partition.store
        errors = ErrorBackoff(f"taking {store.event_type} events")
        while True:
            granted = await self._acquire_free_slots()
            try:
                # Shielded: a claim that returned must reach a handler. Cancelling it halfway
                # would leave its events leased and late by a whole handler timeout.
                with anyio.CancelScope(shield=True), anyio.fail_after(SETTLE_TIMEOUT):
                    claimed = await store.claim(granted, lease_ms=self._config.lease_ms)
            except (*REDIS_ERRORS, TimeoutError) as exc:
                self._release(granted)
                await errors.sleep_after(exc)
                continue
            errors.reset()
            self._release(granted - len(claimed.envelopes))
            if claimed.envelopes:
                self._on_claimed(claimed.ready_left)
            for raw in claimed.envelopes:
                handlers.start_soon(self._deliver, partition, raw, claimed.server_now_ms)
            if not claimed.envelopes:
                try:
                    await store.wait_for_ready(self._config.polling_timeout)
                except REDIS_ERRORS as exc:
                    await errors.sleep_after(exc)

    async def _acquire_free_slots(self) -> int:
        await self._slots.acquire()
        granted = 1
        while granted < self._parallelism:
            try:
                self._slots.acquire_nowait()
            except anyio.WouldBlock:
                break
            granted += 1
        return granted

    def _release(self, count: int) -> None:
        for _ in range(count):
            self._slots.release()

    async def _deliver(self, partition: _Partition, raw: bytes | str, claimed_at_ms: int) -> None:
        try:
            await self._handle(partition, raw, claimed_at_ms)
        finally:
            self._slots.release()

    async def _handle(self, partition: _Partition, raw: bytes | str, claimed_at_ms: int) -> None:
        try:
            envelope = Envelope.parse(raw, event_type=self._event_type)
        except EnvelopeError as exc:
            # dispatch.lua buries envelopes this would refuse, so only a disagreement between its
            # checks and Envelope.parse lands here; unsettled, it is buried once its attempts
            # run out.
            logger.error("%s: unusable envelope %r: %s", self._event_type, raw, exc)
            return
        lateness = max(0.0, (claimed_at_ms - envelope.due_at) / 1000)
        try:
            event = self._decode(envelope)
        except PayloadDecodeError as exc:
            logger.error(
                "%s %r cannot be decoded, moving it to the dead letters: %s",
                envelope.event_type,
                envelope.id,
                exc,
            )
            await self._settle_failure(partition.store, envelope, str(exc), bury=True)
            self._report("dead", envelope, duration=0.0, lateness=lateness)
            return
        started = time.perf_counter()
        with self._config.instrumentation.handling(
            envelope.event_type, envelope.id, envelope.attempt, envelope.context
        ) as handling:
            error = await self._call_handler(event, envelope)
            handling.finished(error)
        duration = time.perf_counter() - started
        outcome: Outcome = "ok"
        if error is None:
            await partition.acknowledger.acknowledge(envelope)
        else:
            outcome = await self._settle_failure(partition.store, envelope, error, bury=False)
        self._report(outcome, envelope, duration=duration, lateness=lateness)

    def _decode(self, envelope: Envelope) -> Event:
        if envelope.event_type != self._event_type:
            raise PayloadDecodeError(
                f"envelope names event type {envelope.event_type!r} "
                f"but sits in the queue of {self._event_type!r}"
            )
        return self._config.serializer.decode(self._event_class, envelope.id, envelope.payload)

    async def _call_handler(self, event: Event, envelope: Envelope) -> str | None:
        """Runs the handler under its timeout; returns None on success, else the error text."""
        timeout = self._config.handler_timeout
        token = event_context.set(dict(envelope.context))
        try:
            with anyio.move_on_after(timeout) as deadline:
                try:
                    result = await self._handler(event)
                except Exception as exc:
                    logger.warning(
                        "handler %s failed on %s %r (attempt %d)",
                        self._handler_name,
                        envelope.event_type,
                        envelope.id,
                        envelope.attempt,
                        exc_info=True,
                    )
                    return f"{type(exc).__name__}: {exc}"
        finally:
            event_context.reset(token)
        if deadline.cancelled_caught:
            return f"handler {self._handler_name} timed out after {timeout:g} s"
        if result is True:
            return None
        return f"handler {self._handler_name} returned {result!r}"

    async def _settle_failure(
        self, store: QueueStore, envelope: Envelope, error: str, *, bury: bool
    ) -> Outcome:
        delay = self._config.retry_policy.delay(envelope.attempt)
        with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_TIMEOUT):
            try:
                result = await store.fail(
                    envelope,
                    error,
                    retry_delay_ms=max(0, round(delay * 1000)),
                    max_attempts=self._config.retry_attempts,
                    bury=bury,
                )
                return "dead" if result == "dead" else "failed"
            except REDIS_ERRORS as exc:
                logger.warning(
                    "could not record the failure of %s %r; its pre-scheduled retry stands: %s",
                    envelope.event_type,
                    envelope.id,
                    exc,
                )
        return "failed"

    def _report(
        self, outcome: Outcome, envelope: Envelope, *, duration: float, lateness: float
    ) -> None:
        self._config.metrics.event_handled(
            envelope.event_type, outcome, duration=duration, lateness=lateness
        )
