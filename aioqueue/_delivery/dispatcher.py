"""The dispatcher: moves due events to their ready lists, sleeping until the next is due."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

import anyio
from redis.exceptions import ResponseError

from aioqueue._model.config import ServiceConfig
from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff, logger
from aioqueue._wire.store import DispatchCall, DispatchResult, QueueStore, dispatch_queues

__all__ = ["DispatchTarget", "Dispatcher"]

# When a ready list is full its consumers are busy; look again soon, without spinning. This
# service's own consumers cut the pause short as soon as they claim (ready_list_draining).
READY_FULL_PAUSE = 0.05
# A type whose dispatch the server refuses (a key of the wrong type written by hand, data
# the script cannot handle) is set aside on its own, for this long after its first failure in
# a row, doubling up to the maximum; the other types are dispatched as usual meanwhile.
ISOLATION_FIRST = 0.5
ISOLATION_MAX = 30.0
# A dispatch call keeps the server busy about 5 us for each event it moves (half a millisecond
# for 100), and a claim of the local consumer taking from that ready list waits behind it,
# while that consumer holds at most its parallelism of events to handle. A call of about three
# claims' worth, going out behind a claim (see ready_list_draining), is done by about the time
# the consumer's next claim arrives: the server moves events while the consumer handles them,
# instead of the two taking turns. A drain of 20,000 due events with parallelism 10 went from
# about 37,000 to 42,000 events/s (calls of 30 instead of 100; benchmarks/README.md). Below
# SMALLEST_CALL the extra calls cost the process more than the overlap gains.
CLAIMS_PER_CALL = 3
SMALLEST_CALL = 16


class DispatchTarget(NamedTuple):
    """A ready list to fill (one queue, or one partition of it), how many events the local
    consumer taking from it holds at most (its parallelism; times the batch size for a batch
    handler) and how many one of its claims takes (1; a batch for a batch handler)."""

    store: QueueStore
    in_hand: int
    one_claim: int
    settings_lost: Callable[[float], None] | None = None
    """Called with the time (monotonic) the dispatch was sent when it found the type's
    settings gone from the server (nothing is dispatched until they are recorded again and
    the dispatcher woken: settings_marks.py); None dispatches without checking."""


class _SetAside:
    """A type whose dispatch failed, and when to try it again."""

    __slots__ = ("delay", "until")

    def __init__(self) -> None:
        self.delay = ISOLATION_FIRST / 2
        self.until = 0.0

    def failed(self) -> float:
        self.delay = min(ISOLATION_MAX, self.delay * 2)
        self.until = time.monotonic() + self.delay
        return self.delay


class Dispatcher:
    """Runs dispatch.lua for each handled event type (each partition of it) when that queue's
    earliest due time comes, or when it is woken; sleeps until the first of those times.

    Each queue keeps its own time, because a pass over every queue whenever any one of them
    has a due event costs a partitioned type a script call per partition for each event at a
    trickle (8 partitions: 5 dispatch calls for every 9 events, against 1 for 11 unpartitioned).
    The queues whose time has come go out together, in one pipelined call.

    Sleeping is a local timer, because a blocking command's timeout inside Redis is only as
    precise as the server's cron (100 ms at the default hz). It wakes for one queue when
    another process's enqueue brings that queue's earliest due time forward (its message,
    see wake_ups.py), when this service's own enqueue does (`wake_for`, for the queues of
    that type only), and when the service's sweep finds a queue due sooner than planned
    (`saw_earliest`): an idle queue costs no call at all, however many there are.
    """

    def __init__(
        self,
        config: ServiceConfig,
        client: RedisClient,
        targets: Callable[[], Iterable[DispatchTarget]],
        pushed: Callable[[QueueStore], None] = lambda store: None,
    ) -> None:
        """`pushed` is told of every queue a call pushed deliveries to (its local consumer
        may be waiting for them)."""
        self._config = config
        self._client = client
        self._targets = targets
        self._pushed = pushed
        self._scope = anyio.CancelScope()
        self._wake = anyio.Event()
        self._next_pass = math.inf
        self._refill_at: int | None = None
        """Set when a ready list was too full for another call: the length at or below
        which a local consumer's claim should wake the dispatcher (see ready_list_draining)."""
        self._next_call: dict[str, float] = {}
        """When each queue (by schedule key) is to be dispatched next (monotonic), from its
        last call's reply or a sweep; a queue not in it is dispatched at the next pass."""
        self._held_back: set[str] = set()
        """Queues whose ready list was too full for another call at the last pass."""
        self._woken: set[str] = set()
        """Queues woken since the current pass began: dispatched at the next one."""
        self._brought_forward: dict[str, float] = {}
        """Queues found due sooner since the current pass began (an enqueue of this service,
        a sweep), and when: merged into _next_call at the next pass, so that a pass under way
        does not overwrite them with what its own calls' replies (perhaps older) said."""
        self._all_woken = False
        """Every queue is dispatched at the next pass (a handler was added, for example)."""
        self._set_aside: dict[str, _SetAside] = {}
        """Types whose dispatch failed in the server, by schedule key (see ISOLATION_FIRST)."""

    async def run(self) -> None:
        with self._scope:
            await self._dispatch_forever()

    async def _dispatch_forever(self) -> None:
        errors = ErrorBackoff("dispatching")
        while True:
            # Fresh state before the pass: an enqueue that arrives during the pass (which
            # may already have looked at its type) cuts the following sleep short.
            self._wake = anyio.Event()
            self._next_pass = math.inf
            try:
                pause = await self._dispatch_all()
            except REDIS_ERRORS as exc:
                # The pass took its queues' wake-ups and may not have made their calls: the
                # next one calls every queue.
                self._all_woken = True
                await errors.sleep_after(exc)
                continue
            errors.reset()
            self._next_pass = time.monotonic() + pause
            if pause > 0:
                with anyio.move_on_after(pause):
                    await self._wake.wait()

    def stop(self) -> None:
        self._scope.cancel()

    def wake(self) -> None:
        """Dispatches every queue now (a handler was added, for example)."""
        self._all_woken = True
        self._wake.set()

    def wake_queue(self, schedule_key: str) -> None:
        """Dispatches this queue now (another process brought its earliest due time forward)."""
        self._woken.add(schedule_key)
        self._wake.set()

    def saw_earliest(self, schedule_key: str, earliest_ms: int | None, server_now_ms: int) -> None:
        """A sweep read the queue's earliest score: dispatch it then, if that is sooner than
        planned (an enqueue whose wake-up went unheard)."""
        if earliest_ms is not None:
            self._bring_forward((schedule_key,), max(0.0, (earliest_ms - server_now_ms + 1) / 1000))

    def wake_for(self, schedule_keys: Iterable[str], due_in: float) -> None:
        """This service wrote an event due in `due_in` s to one of these queues: dispatch
        them then, if that is sooner than planned. Only these: a pass that called every
        queue for each enqueue would cost an idle type a call per event of another."""
        self._bring_forward(schedule_keys, due_in)

    def _bring_forward(self, schedule_keys: Iterable[str], due_in: float) -> None:
        at = time.monotonic() + due_in
        brought_forward = self._brought_forward
        for key in schedule_keys:
            if at < brought_forward.get(key, math.inf):
                brought_forward[key] = at
        if at < self._next_pass:
            self._wake.set()

    def ready_list_draining(self, ready_left: int) -> None:
        """A local consumer's claim is on its way, after which its ready list will hold
        `ready_left` deliveries. If a full ready list held dispatching back, go on once it
        has room for a whole call (see CLAIMS_PER_CALL): topping it up a few events at a time
        would cost a script call per claim. The call then goes out behind the claim, while
        the consumer's process waits for the claim's reply anyway."""
        if self._refill_at is not None and ready_left <= self._refill_at:
            self._woken.update(self._held_back)
            self._wake.set()

    async def _dispatch_all(self) -> float:
        """One pass over the event types (and partitions) whose time has come or that were
        woken, their calls in one pipeline: a pass takes one round trip, not one per queue;
        returns how long to sleep before the next pass."""
        config = self._config
        pause = math.inf
        targets = list(self._targets())
        woken, self._woken = self._woken, set()
        all_woken, self._all_woken = self._all_woken, False
        brought_forward, self._brought_forward = self._brought_forward, {}
        for key, at in brought_forward.items():
            if at < self._next_call.get(key, at):  # a queue not in it is called anyway
                self._next_call[key] = at
        self._refill_at = None
        self._held_back.clear()
        now = time.monotonic()
        due: list[tuple[DispatchTarget, DispatchCall]] = []
        for target in targets:
            key = target.store.keys.schedule
            set_aside = self._set_aside.get(key)
            if set_aside is not None:
                wait = set_aside.until - now
                if wait > 0:
                    pause = min(pause, wait)
                    continue
            next_call = self._next_call.get(key, now)
            if all_woken or next_call <= now or key in woken:
                due.append((target, self._call(target)))
            else:
                pause = min(pause, next_call - now)
        if len(self._next_call) > len(targets):  # handlers were removed
            keys = {target.store.keys.schedule for target in targets}
            self._next_call = {k: t for k, t in self._next_call.items() if k in keys}
        if not due:
            return pause
        sent_at = time.monotonic()
        outcomes = await dispatch_queues(
            self._client, [(target.store, call) for target, call in due]
        )
        answered_at = time.monotonic()
        for (target, call), outcome in zip(due, outcomes, strict=True):
            store = target.store
            key = store.keys.schedule
            if isinstance(outcome, ResponseError):
                # The server answered, and refused this type only: the others go on.
                pause = min(pause, self._set_type_aside(store, outcome))
                continue
            if self._set_aside.pop(key, None) is not None:
                logger.info("dispatching %s recovered", store.event_type)
            if outcome.unrecorded and target.settings_lost is not None:
                # Nothing was taken; the recording wakes this loop once it is done.
                target.settings_lost(sent_at)
                self._next_call[key] = math.inf
                continue
            if outcome.dispatched:
                config.metrics.events_dispatched(store.event_type, outcome.dispatched)
                self._pushed(store)
            target_pause = self._pause_after(key, outcome, call)
            self._next_call[key] = answered_at + target_pause
            pause = min(pause, target_pause)
        return pause

    def _call(self, target: DispatchTarget) -> DispatchCall:
        config = self._config
        return DispatchCall(
            batch_size=self._call_size(target),
            lease_ms=config.lease_ms,
            max_attempts=config.retry_attempts,
            # Two calls' worth for a consumer that takes more at once than a batch (a batch
            # handler): its claims then find a whole batch waiting.
            ready_capacity=2 * max(config.scheduling_batch_size, target.one_claim),
            check_recorded=target.settings_lost is not None,
        )

    def _call_size(self, target: DispatchTarget) -> int:
        """Most events one dispatch call moves to a ready list that a local consumer holding
        up to `target.in_hand` events takes from (see CLAIMS_PER_CALL): at most a scheduling
        batch, unless one claim takes more (a batch handler's claim takes a batch)."""
        return min(
            max(self._config.scheduling_batch_size, target.one_claim),
            max(SMALLEST_CALL, CLAIMS_PER_CALL * target.in_hand),
        )

    def _set_type_aside(self, store: QueueStore, error: ResponseError) -> float:
        set_aside = self._set_aside.setdefault(store.keys.schedule, _SetAside())
        delay = set_aside.failed()
        logger.error(
            "cannot dispatch %s (keys %s): %s; trying it again in %g s, the other types go on",
            store.event_type, store.keys.schedule, error, delay,
        )  # fmt: skip
        return delay

    def _pause_after(self, key: str, result: DispatchResult, call: DispatchCall) -> float:
        if result.taken >= result.limit:
            # As many as allowed: more may be due right now. Go on at once if the ready list
            # has room for another whole call; otherwise topping it up a few events at a
            # time would cost a script call per claim, so wait until it drains.
            refill_at = call.ready_capacity - call.batch_size
            if result.ready_length <= refill_at:
                return 0.0
            self._refill_at = max(refill_at, self._refill_at or 0)
            self._held_back.add(key)
            return READY_FULL_PAUSE
        if result.earliest_due_ms is None:
            # Nothing scheduled: only an enqueue (its wake-up, or the sweep) brings work.
            return math.inf
        # Round up to the next millisecond so the pass after the sleep finds the event due.
        return max(0.0, (result.earliest_due_ms - result.server_now_ms + 1) / 1000)
