"""The takers of a consumer: one per partition of its type, each claiming events for the
handler slots that are free and handing them to the consumer's workers, and the way the
workers' successes are acknowledged (riding the next claim, or on their own).

At full speed one script call per claim settles the last successes and fetches the next
events: a worker whose handler succeeded hands the event, with its slot, back to its
partition's taker, and the taker's next claim acknowledges it in the same call that takes
the next events, so the slot changes hands atomically inside Redis. A taker that is about to
wait (an empty ready list, a full rate window, a paused type) acknowledges what it carries
on its own first, so that no success waits for a claim that may be far off.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
import msgspec

from aioqueue._model.config import ServiceConfig
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff, logger
from aioqueue._wire.envelope import Envelope, EnvelopeError
from aioqueue._wire.store import Claimed, ClaimReceipt, QueueStore

from .acknowledger import Acknowledger, NotSettledError, settle
from .handler_runner import Succeeded
from .handoff import Handoff
from .leases import HAND_BACK_TIMEOUT, Lease, Leases
from .slots import SlotPool, SlotRequest

__all__ = ["Claim", "Partition", "Takers"]


@dataclass(eq=False)
class Partition:
    """One partition's keys, and the successes waiting to be acknowledged there."""

    store: QueueStore
    acknowledger: Acknowledger
    ready: asyncio.Event
    """Set when the ready list may hold deliveries (wake_ups.py): cleared before each claim,
    waited on when a claim found nothing."""
    carries_acknowledgements: bool = False
    """True while the partition's taker is about to claim: successes then ride that claim.
    False while it waits inside Redis or has stopped: successes are then acknowledged on
    their own, so that none waits for a claim that may be a polling timeout away."""
    succeeded: list[Succeeded] = field(default_factory=list)
    """Successes handed to the taker, each still holding its handler slot."""
    waiting: SlotRequest | None = None
    """The taker's pending request for slots; handing it a success wakes it too."""
    idle: bool = False
    """The taker found the ready list empty and waits for a wake-up."""
    ready_left: int | None = None
    """Deliveries its ready list held after the taker's last claim (None before the first)."""


class Claim(msgspec.Struct, gc=False, eq=False):
    """A claimed attempt on its way to a worker, with the partition it came from.

    Untracked by the garbage collector, as Succeeded is and for the same reason (see there):
    a partition never refers to a claim."""

    partition: Partition
    lease: Lease


class Takers:
    """Claims a consumer's events for its free slots, partition by partition, and settles
    the successes its workers hand back."""

    def __init__(
        self,
        *,
        slots: SlotPool,
        most_per_claim: int,
        leases: Leases,
        config: ServiceConfig,
        acknowledged: Callable[[Sequence[Succeeded]], None],
        on_claiming: Callable[[int], None],
    ) -> None:
        """`most_per_claim`: the most slots one claim asks for (all of them). `acknowledged`
        is told of successes once they are acknowledged (or acknowledging them failed)."""
        self._slots = slots
        self._most_per_claim = most_per_claim
        self._leases = leases
        self._config = config
        self._acknowledged = acknowledged
        self._on_claiming = on_claiming
        # Names this consumer's claim receipts (ClaimReceipt): random, so that no other
        # consumer, in this process or another, shares them. Their tokens grow, as the
        # receipts require: one claim is sent at a time, each after the last returned or
        # was given up.
        self._taker_name = secrets.token_hex(8)
        self._claims_sent = itertools.count()

    async def hand_back(self, partition: Partition, succeeded: Sequence[Succeeded]) -> None:
        """A worker's successes, each with its slot: to ride the partition's next claim,
        or acknowledged now when its taker waits or has stopped."""
        if partition.carries_acknowledgements:
            partition.succeeded.extend(succeeded)
            if partition.waiting is not None:
                partition.waiting.wakeup.set()
        else:
            await self.acknowledge_apart(partition, list(succeeded))

    async def acknowledge_apart(self, partition: Partition, succeeded: list[Succeeded]) -> None:
        """Acknowledges without a claim, then frees the successes' slots."""
        if not succeeded:
            return
        # Shielded like every settlement: a handler that finished is not delivered again just
        # because the service was closing (the acknowledger bounds the wait).
        with anyio.CancelScope(shield=True):
            if len(succeeded) == 1:  # concurrent single successes share a call
                await partition.acknowledger.acknowledge(succeeded[0].envelope)
            else:
                await partition.acknowledger.acknowledge_all([s.envelope for s in succeeded])
        self._finished(partition.store, succeeded)
        self._slots.release(len(succeeded))

    def _finished(self, store: QueueStore, succeeded: Sequence[Succeeded]) -> None:
        """Successes whose acknowledgement is done (or given up on): their leases end, and the
        consumer is told of them."""
        self._leases.end_all(store, [success.lease for success in succeeded])
        self._acknowledged(succeeded)

    async def take(self, partition: Partition, claims: Handoff[Claim | None]) -> None:
        """Claims the partition's events for free slots and hands them to the workers,
        until cancelled (the consumer stops taking)."""
        store = partition.store
        errors = ErrorBackoff(f"taking {store.event_type} events")
        partition.carries_acknowledgements = True
        try:
            while True:
                granted = await self._wait_for_slots(partition)
                succeeded, partition.succeeded = partition.succeeded, []
                # The successes' slots pass to the events this claim takes, unless other
                # partitions wait for slots: then they go back to the pool after the claim
                # (acknowledged first), and those partitions have their turn.
                count = granted if self._slots.contended else granted + len(succeeded)
                # Cleared before the claim: a wake-up that comes while it is on its way
                # stands, and the wait after an empty claim returns at once.
                partition.ready.clear()
                if partition.ready_left is not None:
                    # Called before the claim, whose script call is normally written before
                    # this task lets another run: a top-up of the list then goes out behind
                    # the claim, while this process waits for the claim anyway, not while
                    # the handlers of the events it brings run.
                    self._on_claiming(partition.ready_left - count)
                receipt = ClaimReceipt(self._taker_name, next(self._claims_sent))
                # No sooner than this the server ran the claim, even sent again: its leases
                # surely run until a lease from now (see Lease.held_until).
                sent_at = time.monotonic()
                try:
                    claimed = await self._claim(partition, count, succeeded, receipt, errors)
                except REDIS_ERRORS as exc:
                    self._slots.release(granted)
                    await self.acknowledge_apart(partition, succeeded)
                    await errors.sleep_after(exc)
                    continue
                except BaseException as exc:
                    # Stopped between tries: the successes are acknowledged on the way out, and
                    # what the claim took, if it ran, is given back.
                    self._slots.release(granted)
                    partition.succeeded[:0] = succeeded
                    if isinstance(exc, anyio.get_cancelled_exc_class()):
                        await self._give_back_lost_claim(partition, receipt)
                    raise
                errors.reset()
                if succeeded:
                    self._finished(store, succeeded)
                held = self._hold(store, claimed, sent_at)
                self._slots.release(granted + len(succeeded) - len(held))
                partition.ready_left = claimed.ready_left
                for lease in held:
                    claims.put(Claim(partition, lease))
                if claimed.limited_until_ms is not None and not partition.succeeded:
                    # The rate window is full: nothing can be handed out before it moves on.
                    wait = (claimed.limited_until_ms - claimed.server_now_ms + 1) / 1000
                    await self._wait_apart(partition, max(0.001, wait))
                elif claimed.paused and claimed.ready_left and not partition.succeeded:
                    await self._wait_apart(partition, self._config.polling_timeout)
                elif (
                    count
                    and not claimed.envelopes
                    and not claimed.ready_left
                    and not partition.succeeded
                ):
                    # Paused or not: an empty ready list fills only once dispatch (resumed)
                    # pushes to it, and that ends this wait at once. A claim that found only
                    # stale copies (dropped), or repeated a claim whose events are gone, while
                    # the list holds more claims again at once: the wake-ups of those
                    # deliveries came before it and were spent. Each such claim pops what it
                    # asks for, so the list shrinks until a claim takes one or it is empty.
                    await self._wait_for_ready(partition)
        finally:
            partition.carries_acknowledgements = False
            succeeded, partition.succeeded = partition.succeeded, []
            await self.acknowledge_apart(partition, succeeded)

    def _hold(self, store: QueueStore, claimed: Claimed, sent_at: float) -> list[Lease]:
        """The claimed attempts, each held (renewed) from now on; `sent_at` is when their
        claim was first sent (monotonic)."""
        envelopes = []
        for raw in claimed.envelopes:
            try:
                envelope = Envelope.parse(raw, event_type=store.event_type)
            except EnvelopeError as exc:
                # dispatch.lua buries envelopes this would refuse, so only a disagreement
                # between its checks and Envelope.parse lands here; unsettled, it comes back
                # when its lease ends, until it is buried as lost.
                logger.error("%s: unusable envelope %r: %s", store.event_type, raw, exc)
                continue
            envelopes.append(envelope)
        return self._leases.hold(store, envelopes, claimed.server_now_ms, sent_at)

    async def _claim(
        self,
        partition: Partition,
        count: int,
        succeeded: list[Succeeded],
        receipt: ClaimReceipt,
        errors: ErrorBackoff,
    ) -> Claimed:
        """Claims, sending the call again while it fails, with the same receipt: if a failed
        call took deliveries and its reply was lost, the call sent again hands them out
        rather than taking more (see claim receipts in lua/_leases.lua). Gives up, raising the
        last error, once the lease such a claim wrote is over: what it took is then
        dispatch's to take back, its attempt spent, as a lost worker's is."""
        give_up_at = anyio.current_time() + self._config.lease_ms / 1000
        while True:
            try:
                # Shielded: a claim that returned must reach a handler. Cancelling it halfway
                # would leave its events leased and late by a lease. (The script call has a
                # deadline of its own, so a dead server cannot hold it forever.)
                with anyio.CancelScope(shield=True):
                    return await partition.store.claim(
                        count,
                        lease_ms=self._config.lease_ms,
                        acknowledge=[success.envelope for success in succeeded],
                        receipt=receipt,
                    )
            except REDIS_ERRORS as exc:
                if anyio.current_time() >= give_up_at:
                    raise
                await errors.sleep_after(exc)

    async def _give_back_lost_claim(self, partition: Partition, receipt: ClaimReceipt) -> None:
        """The consumer stopped while a failed claim was about to be sent again. If that
        claim ran and its reply was lost, what it took is leased to no handler, and would
        come back only when the lease ends, its attempt spent. One last call with its
        receipt, asking for nothing, fetches it (taking nothing new whether or not the claim
        ran), and it is given back uncounted, as what a stopping consumer claimed and no
        handler began. Tried again through Redis errors like every hand-back (see settle),
        the fetch and the hand-back within one hand-back's bound: if the server is still out
        of reach then, the attempts lapse as before."""
        fetch = functools.partial(
            partition.store.claim, 0, lease_ms=self._config.lease_ms, receipt=receipt
        )
        fetching = f"fetching a lost claim of {partition.store.event_type} events"
        with anyio.CancelScope(shield=True), anyio.move_on_after(HAND_BACK_TIMEOUT):
            try:
                claimed = await settle(fetch, fetching)
            except NotSettledError:
                return
            # Given back at once, never begun: how long they surely run does not matter.
            held = self._hold(partition.store, claimed, time.monotonic())
            if held:
                await self._leases.hand_back(held)

    async def _wait_for_slots(self, partition: Partition) -> int:
        """Waits until slots are free or successes are waiting to be carried; returns the
        slots granted (possibly none)."""
        request = self._slots.request(self._most_per_claim)
        if request.granted == 0 and not partition.succeeded:
            partition.waiting = request
            try:
                await request.wakeup.wait()
            except BaseException:
                self._slots.release(self._slots.withdraw(request))
                raise
            finally:
                partition.waiting = None
        return self._slots.withdraw(request)

    async def _wait_apart(self, partition: Partition, seconds: float) -> None:
        """Waits `seconds` before claiming again, acknowledging successes on their own
        meanwhile: while the rate limit's window is full, or while a paused type's ready list
        holds deliveries anyway (pushed by a service that knows no pause), which a wait on
        the list would return for at once, again and again."""
        partition.carries_acknowledgements = False
        try:
            succeeded, partition.succeeded = partition.succeeded, []
            await self.acknowledge_apart(partition, succeeded)
            await anyio.sleep(seconds)
        finally:
            partition.carries_acknowledgements = True

    async def _wait_for_ready(self, partition: Partition) -> None:
        """Waits until the partition's ready list may hold deliveries (its event, set by a
        wake-up); successes meanwhile are acknowledged on their own."""
        partition.carries_acknowledgements = False
        try:
            succeeded, partition.succeeded = partition.succeeded, []
            await self.acknowledge_apart(partition, succeeded)
            partition.idle = True
            await partition.ready.wait()
        finally:
            partition.idle = False
            partition.carries_acknowledgements = True
