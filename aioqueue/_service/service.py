"""EventService: the façade over the parts of a service, each owning its state.

`producing.py` writes events, `delivery.py` runs handlers (dispatcher, consumers, leases,
wake-ups), `schedules.py` keeps recurring schedules, `administration.py` reads and changes
queues for operators and tests; `runtime.py` is what they share (settings, client, queues,
life, task group). Every public method here forwards to one part; add_schedule alone does
something first, reading cron, every and tz into the ScheduleSpec (which checks them) that its
part takes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from aioqueue._model.batches import Batching, BatchOutcome
from aioqueue._model.config import ServiceConfig
from aioqueue._model.durations import Duration
from aioqueue._model.event import Event
from aioqueue._model.health import HealthReport
from aioqueue._model.workers import Worker
from aioqueue._producing.enqueue_options import EnqueueOptions
from aioqueue._recurring.keeper import Misfire
from aioqueue._recurring.records import ScheduleInfo
from aioqueue._recurring.spec import ScheduleSpec
from aioqueue._wire.browse import EventInfo, PendingPage
from aioqueue._wire.envelope import DeadLetter

from .administration import Administration
from .builder import EventServiceBuilder
from .delivery import Delivery
from .handler_signature import handler_decorator
from .health import Health
from .producing import Producing
from .runtime import Runtime, ServiceState
from .schedules import Schedules

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11 (3.10 is supported)

__all__ = ["EventService", "ServiceState", "replace_shutdown_grace"]

E = TypeVar("E", bound=Event)
F = TypeVar("F", bound=Callable[..., Any])


class EventService:
    """Schedules events and delivers them to handlers when due.

    Build one with `EventService.builder()`. `async with service:` checks that Redis answers
    (else RedisUnavailableError, naming the server and the cause), then starts the
    dispatcher and one consumer per handler; leaving it stops taking events, gives running
    handlers `shutdown_grace` to finish, cancels the rest and closes the connection if the
    service opened it. A closed service cannot be entered again. What leaves the block is
    what was raised in it, never an exception group.
    """

    def __init__(self, runtime: Runtime) -> None:
        # Made by the builder, which owns the settings and the connection: a service is its
        # parts over one Runtime.
        self._runtime = runtime
        self._delivery = Delivery(self._runtime)
        self._producing = Producing(self._runtime, self._delivery.due_sooner)
        self._schedules = Schedules(self._runtime, self._producing.producer)
        self._administration = Administration(
            self._runtime, self._delivery.wake_dispatcher, self._delivery.handled_types
        )
        self._health = Health(self._runtime, self._delivery)

    @staticmethod
    def builder() -> EventServiceBuilder:
        """A builder for a new service: set a connection (`.url(...)` or `.client(...)`) and
        any other settings, then `build()`."""
        return EventServiceBuilder(EventService)

    @property
    def config(self) -> ServiceConfig:
        """The settings the service was built with, frozen."""
        return self._runtime.config

    @property
    def state(self) -> ServiceState:
        """Where the service is in its life: idle, running, closing or closed."""
        return self._runtime.state

    def __repr__(self) -> str:
        return (
            f"<EventService {self.state.value} prefix={self.config.prefix!r} "
            f"handlers={self._delivery!r}>"
        )

    async def __aenter__(self) -> EventService:
        await self._runtime.start()
        self._delivery.start()
        self._schedules.start()
        try:
            await self._health.start()
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stops the service; an error of the `async with` body leaves exactly as raised
        (see Runtime.stop)."""
        self._runtime.state = ServiceState.CLOSING
        try:
            await self._delivery.stop()
            self._runtime.cancel_background()
        finally:
            await self._health.stop()  # probes answer until the very end
            await self._runtime.stop(exc_type, exc, traceback)
        if exc is None:
            self._runtime.raise_failure()

    # -- producing ---------------------------------------------------------------------------

    async def enqueue(
        self, event: Event, delay: Duration | None = None, **options: Unpack[EnqueueOptions]
    ) -> bool:
        """Schedules `event` after `delay` (timedelta or seconds) or at `at` (aware datetime).

        Returns True when scheduled, False when an event with the same type and id was
        already pending and was kept. `replace=True` overwrites it instead: new payload,
        context and due time, fresh attempt count. `max_wait` (with `replace=True`) makes it
        a bounded debounce: however often the event is replaced, it is due no later than the
        first enqueue of the pending version plus `max_wait`.

        With the builder's `durability(...)`, returns only once the replicas have the event,
        else raises DurabilityError: the event may exist, and enqueueing it again is safe.
        """
        return await self._producing.enqueue(event, delay, options)

    async def enqueue_many(
        self,
        events: Iterable[Event],
        delay: Duration | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> list[bool]:
        """Schedules many events with one due time and context, a few script calls in all.

        Returns, per event in order, what enqueue() would have. Every event is validated
        before anything is written. With `durability(...)`, DurabilityError means some of the
        events may exist: enqueue them all again.
        """
        return await self._producing.enqueue_many(events, delay, options)

    async def cancel(self, event_class: type[Event], event_id: str) -> bool:
        """Removes a pending event; once this returns, no handler will be handed it.

        A handler that is already running it is not interrupted. Returns False if no event
        with that id was pending.
        """
        return await self._producing.cancel(event_class, event_id)

    async def run_now(self, event_class: type[Event], event_id: str) -> bool:
        """Makes a pending event due now, keeping its attempt count; False when no such
        event is pending (a dead one is put back with `requeue`) or when an attempt of it
        is under way."""
        return await self._producing.run_now(event_class, event_id)

    async def reschedule(
        self,
        event_class: type[Event],
        event_id: str,
        delay: Duration | None = None,
        *,
        at: datetime | None = None,
    ) -> bool:
        """Moves a pending event to a new due time, `delay` from now or `at`, keeping its
        payload, context and attempt count, in one atomic step (it is never unscheduled in
        between). False for an unknown id, a dead event, or one whose attempt is under way."""
        return await self._producing.reschedule(event_class, event_id, delay, at)

    # -- handlers ----------------------------------------------------------------------------

    def add_handler(
        self,
        event_class: type[E],
        handler: Callable[[E], Awaitable[bool]] | Callable[[E], bool],
        *,
        parallelism: int = 1,
    ) -> None:
        """Delivers due events of `event_class` to `handler`, at most `parallelism` at once.

        Works before and while the service runs. The handler returns True when done; False,
        an exception, the handler timeout or any other return value mean "try again later".
        An `async def` handler runs on the event loop; a plain function runs in a worker
        thread (see EventServiceBuilder.handler_threads).

        Raises HandlerRegistrationError for a handler that could never work: not callable,
        a coroutine object instead of the function, a first parameter annotated with
        another event class, `parallelism` below 1, or a type that already has a handler.
        Raises EventDefinitionError for an event class with a field that cannot round-trip
        through JSON, or a `__serial_key__` that names no field.
        """
        self._delivery.add(event_class, handler, parallelism)

    @overload
    def handler(
        self, event_class: type[Event] | None = None, /, *, parallelism: int = 1
    ) -> Callable[[F], F]: ...

    @overload
    def handler(self, function: F, /) -> F: ...

    def handler(
        self, target: type[Event] | Callable[..., Any] | None = None, /, *, parallelism: int = 1
    ) -> Any:
        """The decorator form of add_handler: `@service.handler(PaymentCheck, parallelism=4)`
        above the handler registers it exactly as add_handler does and returns it unchanged.
        The event class may be left out when the handler's first parameter is annotated with
        it (`@service.handler(parallelism=4)` or plain `@service.handler`)."""
        return handler_decorator(self.add_handler, target, parallelism)

    def add_batch_handler(
        self,
        event_class: type[E],
        handler: Callable[[list[E]], Awaitable[BatchOutcome]] | Callable[[list[E]], BatchOutcome],
        *,
        max_size: int = 100,
        max_wait: Duration = 1.0,
        parallelism: int = 1,
    ) -> None:
        """Registers a batch handler for `event_class`: it is called with a list of up to
        `max_size` events of the type (1 to 10,000), as soon as that many are in hand or
        `max_wait` (timedelta or seconds) after the first of them arrived, at most
        `parallelism` calls at a time.

        It returns True (every event finished), False or raises (every event tried again,
        each with its own backoff, then dead-lettered on its own), or a mapping of event id
        -> True or False, per event: an event left out of the mapping is tried again. Each
        event's attempt, lease, serial key, rate limit permit, tracing span and metrics are
        its own, as with `add_handler`; the handler timeout covers the whole call, and
        `current_deliveries()` describes the batch. An `async def` runs on the event loop,
        a plain function in a worker thread.
        """
        self._delivery.add(
            event_class, handler, parallelism, batching=Batching.of(max_size, max_wait)
        )

    def remove_handler(self, event_class: type[Event]) -> bool:
        """Stops delivering `event_class` here; running handlers finish. False if none was set."""
        return self._delivery.remove(event_class)

    # -- recurring schedules -----------------------------------------------------------------

    def add_schedule(
        self,
        name: str,
        *,
        event: Callable[[datetime], Event],
        cron: str | None = None,
        every: Duration | None = None,
        tz: str = "UTC",
        misfire: Misfire = "once",
        max_catch_up: int = 100,
    ) -> None:
        """Declares a recurring schedule: `event(tick)` is enqueued for each tick, due at the
        tick, once per tick however many services declare the same schedule.

        `cron` (five fields, evaluated in `tz` with Debian cron's DST rules) or `every` (an
        interval anchored to the Unix epoch). `event` receives the tick as an aware datetime in
        `tz` and must derive the event's id from it; it is called once here, with the next
        tick, to learn the event type, so it must have no side effects. `misfire` says what
        happens to ticks missed while no service ran: "skip" them, produce "once" (the latest,
        now; the default), or "all" of them (the latest `max_catch_up`). Works before and
        while the service runs. A name is unique per prefix and its most recent declaration
        wins: declared with an event of another type, the name moves, and the other type's
        schedule and its pending tick are removed before this one's first tick.
        """
        spec = ScheduleSpec.of(cron=cron, every=every, tz=tz)
        self._schedules.add(name, event, spec, misfire=misfire, max_catch_up=max_catch_up)

    async def remove_schedule(self, name: str) -> bool:
        """Stops the schedule everywhere, whichever event type holds the name: its record
        and its pending next tick are deleted (every service's keeper then stops). False
        when Redis held no such schedule."""
        return await self._schedules.remove(name)

    async def schedules(self) -> list[ScheduleInfo]:
        """Every schedule of the prefix, declared by this service or another, by name."""
        return await self._schedules.listed()

    # -- administration ----------------------------------------------------------------------

    async def dead_letters(self, event_class: type[E], limit: int = 100) -> list[DeadLetter]:
        """The newest `limit` dead letters of a type, each with its last error."""
        return await self._administration.dead_letters(event_class, limit)

    async def requeue(self, event_class: type[Event], event_id: str) -> bool:
        """Puts a dead event back, due now, with a fresh attempt count.

        False when there is no such dead letter, when an event with that id is pending (both
        are kept), or when the dead letter's envelope is unreadable.
        """
        return await self._administration.requeue(event_class, event_id)

    async def pending(
        self,
        event_class: type[Event],
        *,
        limit: int = 50,
        cursor: str | None = None,
        due_before: datetime | None = None,
        due_after: datetime | None = None,
    ) -> PendingPage:
        """A page of pending events of a type, in schedule order (at most 1000).

        Pass the page's `next_cursor` to get the next one, until it is None. The pages of one
        walk list an event at most once while the queue moves: an event that stays where it
        is is listed once, one that is dispatched, claimed, retried, rescheduled, replaced or
        enqueued after the first page may be missing (so a page can hold fewer events than
        `limit`, even none, and still have a next one). `due_before` / `due_after` (aware
        datetimes) bound the due times listed. Raises InvalidCursorError (a ValueError) for a
        cursor no page handed out.
        """
        return await self._administration.pending(event_class, limit, cursor, due_before, due_after)

    async def inspect(self, event_class: type[Event], event_id: str) -> EventInfo | None:
        """The event's state, due time, attempt and retries left, last error, payload and
        context, pending or dead; None when the queue holds no event with that id."""
        return await self._administration.inspect(event_class, event_id)

    async def pause(self, event_class: type[Event]) -> None:
        """Stops every service of the prefix from taking events of the type, within one
        script call: pending events wait in Redis with their due times (enqueue, replace and
        cancel go on working), deliveries not yet claimed go back to the schedule with their
        attempt uncounted, and handlers already running finish. Lasts until resume(), across
        restarts."""
        await self._administration.pause(event_class)

    async def resume(self, event_class: type[Event]) -> bool:
        """Lets every service take the type's events again, everything that came due during
        the pause first, in due order. False when the type was not paused."""
        return await self._administration.resume(event_class)

    async def paused(self) -> set[str]:
        """The wire names of the prefix's paused types."""
        return await self._administration.paused()

    async def workers(self) -> list[Worker]:
        """The live workers of the service's prefix (every running service with handlers,
        this one included), as their last heartbeats describe them."""
        return await self._administration.workers()

    # -- health ------------------------------------------------------------------------------

    def liveness(self) -> HealthReport:
        """Whether the service runs (or stops in order) with all its background tasks: what
        `/livez` answers. Not alive means restart the process."""
        return self._health.liveness()

    async def readiness(self) -> HealthReport:
        """Whether it runs, Redis answers within 1 s, and its heartbeat is fresh: `/readyz`."""
        return await self._health.readiness()

    @property
    def health_address(self) -> tuple[str, int] | None:
        """Where the health port (the builder's `health_port`) listens while it runs."""
        return self._health.address

    async def wait_failed(self) -> Exception:
        """Returns once a background task of the running service died (never, while it
        works), with the ServiceFailedError its next operation raises: a process that
        hosts the service should then exit, for its supervisor to start a new one."""
        return await self._runtime.wait_failed()

    async def run_due(self, within: Duration = 0) -> int:
        """Handles now, through this running service's handlers, every event of the types it
        handles that is due within `within` from now, including the retries of failed
        attempts that come due within that window; returns once none is left in it (and none
        is being handled). Returns how many events it made due early.

        Meant for tests ("the payment check in 3 hours": `await service.run_due(timedelta(
        hours=3))`): events go through the real scripts, so attempts count, retries back off
        inside the window and dead letters happen as in production. Each round reads every
        pending event of the handled types, which suits a test's queue, not a production
        one. Bound it with `anyio.fail_after` (or `asyncio.timeout`) where a handler may
        never succeed.
        """
        return await self._administration.run_due(within)


def replace_shutdown_grace(service: EventService, seconds: float) -> None:
    """For `aioqueue worker --shutdown-grace`: the command line's grace replaces the one the
    factory built the service with, so that it is written beside the pod's own grace period.
    Only before the service starts."""
    service._runtime.reconfigure(shutdown_grace=seconds)
