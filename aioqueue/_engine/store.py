"""The Redis side of one event type's queue: every read and write goes through here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import orjson

from .client import (
    REPLY_TIMEOUT,
    RedisClient,
    blocking_wait_limit,
    ensure_slot_map,
    within_reply_timeout,
)
from .envelope import Envelope, text
from .held_connection import HeldConnection
from .keys import QueueKeys
from .scripts import ACKNOWLEDGE, CLAIM, DISPATCH, FAIL, HAND_BACK, RENEW, REQUEUE
from .steps import run_steps
from .writes import EnqueueItem, cancel_steps, enqueue_steps

__all__ = ["Claimed", "DispatchResult", "GivenBack", "QueueStore", "Requeued", "renew_leases"]


@dataclass(frozen=True, slots=True)
class DispatchResult:
    dispatched: int
    buried: int
    server_now_ms: int
    earliest_due_ms: int | None
    """Due time of the earliest event left in the schedule, None when it is empty."""
    limit: int
    """How many events the call could take: the batch size, less if the ready list was full."""
    ready_length: int
    """Envelopes in the ready list after the call."""
    parked: int = 0
    """Due events set aside because another event holds their serial key."""
    unrecorded: bool = False
    """The type's settings are gone from the server (its `recorded` key is missing): nothing
    was taken (see settings_marks.py)."""
    extended: int = 0
    """Unclaimed deliveries whose lease ran out where they wait in the ready list: they got
    another lease, nothing spent (see dispatch.lua)."""

    @property
    def taken(self) -> int:
        """Due events the call took one way or another: as many as `limit` means more may
        be due right now."""
        return self.dispatched + self.buried + self.parked + self.extended


@dataclass(frozen=True, slots=True)
class GivenBack:
    """An attempt a stopping worker gives back (see hand_back.lua)."""

    envelope: Envelope
    cut_off: str | None = None
    """Why its handler was cut off (the attempt is spent), or None: no handler began it."""


@dataclass(frozen=True, slots=True)
class Claimed:
    server_now_ms: int
    ready_left: int
    """Envelopes still in the ready list after this claim."""
    envelopes: list[bytes | str]
    paused: bool = False
    """The type is paused: nothing was taken, whatever the ready list holds."""
    limited_until_ms: int | None = None
    """The type's rate limit allowed nothing more before this server time (ms)."""


Requeued = Literal["requeued", "missing", "pending", "unreadable"]
_REQUEUE_RESULTS: dict[int, Requeued] = {
    1: "requeued",
    0: "missing",
    -1: "pending",
    -2: "unreadable",
}


class QueueStore:
    """One event type's keys on one client, with the atomic operations on them."""

    __slots__ = ("client", "event_type", "keys")

    def __init__(self, client: RedisClient, keys: QueueKeys, event_type: str) -> None:
        self.client = client
        self.keys = keys
        self.event_type = event_type

    async def enqueue(
        self, items: Sequence[EnqueueItem], *, replace: bool, max_wait_ms: int | None = None
    ) -> list[bool]:
        """Schedules `items` in one script call; False for each id that was kept pending
        (see writes.enqueue_steps, the one builder of that call)."""
        return await run_steps(
            self.client,
            enqueue_steps(
                self.client, self.keys, self.event_type, items,
                replace=replace, max_wait_ms=max_wait_ms,
            ),
        )  # fmt: skip

    async def cancel(self, event_id: str) -> bool:
        return await run_steps(self.client, cancel_steps(self.client, self.keys, event_id))

    async def dispatch(
        self,
        *,
        batch_size: int,
        lease_ms: int,
        max_attempts: int,
        ready_capacity: int,
        check_recorded: bool = False,
    ) -> DispatchResult:
        """Moves due events to the ready list (dispatch.lua). With `check_recorded`, takes
        nothing while the type's settings are gone from the server (see DispatchResult.
        unrecorded)."""
        k = self.keys
        keys = [
            k.schedule, k.events, k.ready, k.dead_letters, k.dead_letter_times, k.paused,
            k.rate, k.starts, k.serial_field, k.serial_holders, k.serial_waiting, k.counts,
        ]  # fmt: skip
        if check_recorded:
            keys.append(k.recorded)
        reply = await DISPATCH.run(
            self.client, keys, [batch_size, lease_ms, max_attempts, ready_capacity]
        )
        dispatched, buried, now, earliest, limit, ready_length, parked, unrecorded, extended = (
            int(value) for value in reply
        )
        return DispatchResult(
            dispatched=dispatched,
            buried=buried,
            server_now_ms=now,
            earliest_due_ms=None if earliest < 0 else earliest,
            limit=limit,
            ready_length=ready_length,
            parked=parked,
            unrecorded=bool(unrecorded),
            extended=extended,
        )

    async def claim(
        self,
        count: int,
        *,
        lease_ms: int,
        acknowledge: Sequence[Envelope] = (),
        held: HeldConnection | None = None,
    ) -> Claimed:
        """Acknowledges the `acknowledge` deliveries, then pops up to `count` current envelopes
        from the ready list (never blocks), in one atomic call (on `held`, a connection of
        this store's client that the caller keeps for its claims, if given)."""
        k = self.keys
        keys = [
            k.ready, k.schedule, k.events, k.dead_letters, k.dead_letter_times, k.paused,
            k.rate, k.starts, *self.keys.settling,
        ]  # fmt: skip
        args: list[str | int | bytes] = [count, lease_ms]
        if acknowledge:
            args.append(orjson.dumps(_versions(acknowledge)))
        reply = await CLAIM.run(self.client, keys, args, held)
        if int(reply[1]) == -1:  # paused: the third value is the ready list's length
            return Claimed(int(reply[0]), int(reply[2]), [], paused=True)
        if int(reply[1]) == -2:  # the rate limit's window is full until the fourth value
            return Claimed(int(reply[0]), int(reply[2]), [], limited_until_ms=int(reply[3]))
        return Claimed(
            server_now_ms=int(reply[0]), ready_left=int(reply[1]), envelopes=list(reply[2:])
        )

    async def wait_for_ready(self, timeout: float) -> None:
        """Blocks inside Redis until the ready list has an envelope or `timeout` passes.

        The wait moves the tail of the list back onto its tail (BLMOVE onto itself, RIGHT to
        RIGHT) instead of popping it, so a wait that is cancelled or loses its connection
        takes nothing away (envelopes only leave the list through claim.lua), and the list
        keeps its due order: LEFT to RIGHT would send the earliest events behind the batch.
        """
        ready = self.keys.ready
        await self._blocking_wait(timeout, "BLMOVE", ready, ready, "RIGHT", "RIGHT")

    async def wait_for_wake_signal(self, timeout: float) -> bool:
        """Blocks until an enqueue (from any process) signals a sooner due time, or `timeout`."""
        return await self._blocking_wait(timeout, "BLPOP", self.keys.wake) is not None

    async def _blocking_wait(self, timeout: float, *command: str) -> Any:
        """Runs a blocking command whose last argument is its timeout, with a reply deadline
        that long plus REPLY_TIMEOUT."""
        await ensure_slot_map(self.client)
        wait = blocking_wait_limit(self.client, timeout)
        # execute_command because redis-py types the timeout as int; Redis takes fractions.
        reply = self.client.execute_command(*command, wait)
        return await within_reply_timeout(reply, wait + REPLY_TIMEOUT)

    async def acknowledge(self, deliveries: Sequence[Envelope]) -> int:
        """Deletes the delivered versions of these events; returns how many were deleted."""
        keys = [self.keys.schedule, self.keys.events, *self.keys.settling]
        return int(await ACKNOWLEDGE.run(self.client, keys, _versions(deliveries)))

    def renewal(
        self, held: Sequence[Envelope], lease_ms: int
    ) -> tuple[list[str], list[str | int | bytes]]:
        """The keys and arguments of renew.lua for the attempts `held` of this queue."""
        attempts: list[str | int] = []
        for envelope in held:
            attempts += [envelope.id, envelope.version, envelope.attempt]
        return [self.keys.schedule, self.keys.events, self.keys.counts], [
            lease_ms,
            orjson.dumps(attempts),
        ]

    async def hand_back(self, attempts: Sequence[GivenBack]) -> int:
        """Gives back attempts a stopping worker holds (hand_back.lua); returns how many were
        still its own to give."""
        given: list[str | int] = []
        for attempt in attempts:
            envelope = attempt.envelope
            given += [envelope.id, envelope.version, envelope.attempt, attempt.cut_off or ""]
        keys = [self.keys.schedule, self.keys.events, self.keys.wake, self.keys.counts]
        return int(await HAND_BACK.run(self.client, keys, [orjson.dumps(given)]))

    async def fail(
        self,
        envelope: Envelope,
        error: str,
        *,
        retry_delay_ms: int,
        max_attempts: int,
        bury: bool = False,
    ) -> Literal["retry", "dead", "stale"]:
        k = self.keys
        keys = [k.schedule, k.events, k.dead_letters, k.dead_letter_times, *self.keys.settling]
        args: list[str | int] = [
            envelope.id,
            str(envelope.version),
            error,
            retry_delay_ms,
            max_attempts,
            "1" if bury else "0",
            str(envelope.attempt),
        ]
        outcome = text(await FAIL.run(self.client, keys, args))
        if outcome not in ("retry", "dead", "stale"):
            raise RuntimeError(f"fail.lua returned {outcome!r}")
        return outcome  # type: ignore[return-value]

    async def dead_letter_entries(self, limit: int) -> list[tuple[bytes | str, float]]:
        """The newest `limit` dead letters as (stored envelope, died_at ms)."""
        newest = cast(
            "list[tuple[bytes | str, float]]",
            await within_reply_timeout(
                self.client.zrevrange(self.keys.dead_letter_times, 0, limit - 1, withscores=True)
            ),
        )
        if not newest:
            return []
        ids = [event_id for event_id, _ in newest]
        raws: list[bytes | str | None] = await within_reply_timeout(
            self.client.hmget(self.keys.dead_letters, ids)
        )
        return [
            (raw, died_at)
            for raw, (_, died_at) in zip(raws, newest, strict=True)
            if raw is not None
        ]

    async def requeue(self, event_id: str) -> Requeued:
        k = self.keys
        keys = [k.schedule, k.events, k.sequence, k.dead_letters, k.dead_letter_times, k.wake]
        return _REQUEUE_RESULTS[int(await REQUEUE.run(self.client, keys, [event_id]))]


def _versions(deliveries: Sequence[Envelope]) -> list[str | int]:
    """Script arguments naming delivered versions: id, version, id, version, ..."""
    args: list[str | int] = []
    for envelope in deliveries:
        args += [envelope.id, str(envelope.version)]
    return args


async def renew_leases(
    client: RedisClient, renewals: Sequence[tuple[list[str], list[str | int | bytes]]]
) -> list[list[int]]:
    """Sends the renewals of several queues (QueueStore.renewal) in one pipeline: one round
    trip on one server, one per node on a cluster; returns, per queue, the positions (from
    1) of the attempts no longer held."""
    replies = await run_steps(client, RENEW.pipelined_steps(client, renewals))
    return [[int(position) for position in reply] for reply in replies]
