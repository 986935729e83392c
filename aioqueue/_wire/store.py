"""The Redis side of one event type's queue: every read and write goes through here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, cast

import orjson
from redis.exceptions import ResponseError

from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient, is_cluster
from aioqueue._transport.steps import run_steps
from aioqueue._wire.envelope import Envelope, text
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.scripts import (
    ACKNOWLEDGE,
    CLAIM,
    DISPATCH,
    FAIL,
    HAND_BACK,
    PEEK,
    RENEW,
    REQUEUE,
    ScriptCall,
)

__all__ = [
    "ClaimReceipt",
    "Claimed",
    "DeadLetterEntry",
    "DispatchCall",
    "DispatchResult",
    "GivenBack",
    "Peek",
    "QueueStore",
    "Requeued",
    "dispatch_queues",
    "peek_queues",
    "renew_leases",
]


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
class DispatchCall:
    """What one dispatch.lua call is asked to do."""

    batch_size: int
    lease_ms: int
    max_attempts: int
    ready_capacity: int
    check_recorded: bool = False
    """Take nothing while the type's settings are gone from the server (see DispatchResult.
    unrecorded)."""


@dataclass(frozen=True, slots=True)
class Peek:
    """What waits in one queue, as a sweep sees it (peek.lua)."""

    server_now_ms: int
    earliest_due_ms: int | None
    """The earliest score in the schedule (a due time or a lease's end), None when empty."""
    ready_length: int


PEEK_CHUNK = 250
"""Queues one sweep call reads on one server: a few hundred keep the call to a fraction of a
millisecond of the server's time, and a thousand queues to four commands."""


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


@dataclass(frozen=True, slots=True)
class ClaimReceipt:
    """Which claim a call is: `taker` names the consumer's receipt key, `token` the claim. A
    call sent again with the same token, after its reply was lost, hands out what the first
    took instead of taking more; a consumer's tokens grow, and a call with an older token than
    its last claim's takes nothing (see claim receipts in lua/_leases.lua)."""

    taker: str
    token: int


class DeadLetterEntry(NamedTuple):
    """A dead letter as stored, with its time of death."""

    stored: bytes | str
    """The dead letter's text in `dead_letters` (see DeadLetterRecord.parse)."""
    died_at_ms: float


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

    async def dispatch(
        self,
        *,
        batch_size: int,
        lease_ms: int,
        max_attempts: int,
        ready_capacity: int,
        check_recorded: bool = False,
    ) -> DispatchResult:
        """Moves due events to the ready list (dispatch.lua): this queue's call alone."""
        call = DispatchCall(batch_size, lease_ms, max_attempts, ready_capacity, check_recorded)
        [outcome] = await dispatch_queues(self.client, [(self, call)])
        if isinstance(outcome, ResponseError):
            raise outcome
        return outcome

    def dispatch_call(self, call: DispatchCall) -> ScriptCall:
        """The keys and arguments of dispatch.lua for this queue."""
        k = self.keys
        keys = [
            k.schedule, k.events, k.ready, k.dead_letters, k.dead_letter_times, k.paused,
            k.rate, k.starts, k.serial_field, k.serial_holders, k.serial_waiting, k.counts,
        ]  # fmt: skip
        if call.check_recorded:
            keys.append(k.recorded)
        args = [call.batch_size, call.lease_ms, call.max_attempts, call.ready_capacity]
        return ScriptCall(keys, args)

    async def claim(
        self,
        count: int,
        *,
        lease_ms: int,
        acknowledge: Sequence[Envelope] = (),
        receipt: ClaimReceipt | None = None,
    ) -> Claimed:
        """Acknowledges the `acknowledge` deliveries, then pops up to `count` current envelopes
        from the ready list (never blocks), in one atomic call. With a `receipt` whose claim
        already ran, it takes nothing and returns that claim's deliveries still held."""
        args: list[str | int | bytes] = [count, lease_ms, receipt.token if receipt else ""]
        if acknowledge:
            args.append(orjson.dumps(_attempts(acknowledge)))
        reply = await CLAIM.run(self.client, self.claim_keys(receipt), args)
        if int(reply[1]) == -1:  # paused: the third value is the ready list's length
            return Claimed(int(reply[0]), int(reply[2]), [], paused=True)
        if int(reply[1]) == -2:  # the rate limit's window is full until the fourth value
            return Claimed(int(reply[0]), int(reply[2]), [], limited_until_ms=int(reply[3]))
        return Claimed(
            server_now_ms=int(reply[0]), ready_left=int(reply[1]), envelopes=list(reply[2:])
        )

    def claim_keys(self, receipt: ClaimReceipt | None = None) -> list[str]:
        """The keys of claim.lua for this queue."""
        k = self.keys
        keys = [
            k.ready, k.schedule, k.events, k.dead_letters, k.dead_letter_times, k.paused,
            k.rate, k.starts, *k.settling,
        ]  # fmt: skip
        if receipt is not None:
            keys.append(k.claim_receipt(receipt.taker))
        return keys

    async def acknowledge(self, deliveries: Sequence[Envelope]) -> int:
        """Deletes these events, each only while it is still the delivered attempt (see
        acknowledge_deliveries in lua/_leases.lua); returns how many were deleted."""
        keys = [self.keys.schedule, self.keys.events, *self.keys.settling]
        return int(await ACKNOWLEDGE.run(self.client, keys, _attempts(deliveries)))

    def renewal(self, held: Sequence[Envelope], lease_ms: int) -> ScriptCall:
        """The keys and arguments of renew.lua for the attempts `held` of this queue."""
        attempts: list[str | int] = []
        for envelope in held:
            attempts += [envelope.id, envelope.version, envelope.attempt]
        keys = [self.keys.schedule, self.keys.events, self.keys.counts]
        return ScriptCall(keys, [lease_ms, orjson.dumps(attempts)])

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

    async def dead_letter_entries(self, limit: int) -> list[DeadLetterEntry]:
        """The newest `limit` dead letters, newest first."""
        newest = cast(
            "list[tuple[bytes | str, float]]",
            await gated_call(
                self.client,
                lambda: self.client.zrevrange(
                    self.keys.dead_letter_times, 0, limit - 1, withscores=True
                ),
            ),
        )
        if not newest:
            return []
        ids = [event_id for event_id, _ in newest]
        raws: list[bytes | str | None] = await gated_call(
            self.client, lambda: self.client.hmget(self.keys.dead_letters, ids)
        )
        return [
            DeadLetterEntry(raw, died_at)
            for raw, (_, died_at) in zip(raws, newest, strict=True)
            if raw is not None
        ]

    async def requeue(self, event_id: str) -> Requeued:
        k = self.keys
        keys = [k.schedule, k.events, k.sequence, k.dead_letters, k.dead_letter_times, k.wake]
        return _REQUEUE_RESULTS[int(await REQUEUE.run(self.client, keys, [event_id]))]


def _attempts(deliveries: Sequence[Envelope]) -> list[str | int]:
    """Script arguments naming delivered attempts: id, version, attempt, id, ..."""
    args: list[str | int] = []
    for envelope in deliveries:
        args += [envelope.id, str(envelope.version), str(envelope.attempt)]
    return args


async def renew_leases(client: RedisClient, renewals: Sequence[ScriptCall]) -> list[list[int]]:
    """Sends the renewals of several queues (QueueStore.renewal) in one pipeline: one round
    trip on one server, one per node on a cluster; returns, per queue, the positions (from
    1) of the attempts no longer held."""
    replies = await run_steps(client, RENEW.pipelined_steps(client, renewals))
    return [[int(position) for position in reply] for reply in replies]


def _dispatch_result(reply: list[Any]) -> DispatchResult:
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


async def dispatch_queues(
    client: RedisClient, calls: Sequence[tuple[QueueStore, DispatchCall]]
) -> list[DispatchResult | ResponseError]:
    """Dispatches several queues in one pipeline (one round trip, one per node on a
    cluster); each queue's result, or the server's refusal of its call (the other queues'
    calls go on)."""
    replies = await run_steps(
        client,
        DISPATCH.pipelined_outcomes(client, [store.dispatch_call(call) for store, call in calls]),
    )
    return [
        reply if isinstance(reply, ResponseError) else _dispatch_result(reply) for reply in replies
    ]


async def peek_queues(client: RedisClient, stores: Sequence[QueueStore]) -> list[Peek | None]:
    """What waits in each of `stores`' queues (see peek.lua): on one server a call per
    PEEK_CHUNK queues, on a cluster a call per queue (a call's keys share a slot), all in one
    pipeline; None for a queue whose keys the server refuses to read (written by hand with the
    wrong type: its dispatch says so, and the other queues' peeks go on)."""
    per_call = 1 if is_cluster(client) else PEEK_CHUNK
    chunks = [stores[start : start + per_call] for start in range(0, len(stores), per_call)]
    calls = [
        ScriptCall([key for store in chunk for key in (store.keys.schedule, store.keys.ready)], [])
        for chunk in chunks
    ]
    replies = await run_steps(client, PEEK.pipelined_outcomes(client, calls))
    peeks: list[Peek | None] = []
    for chunk, reply in zip(chunks, replies, strict=True):
        if isinstance(reply, ResponseError):  # refused as a whole (see pipelined_outcomes)
            peeks.extend(None for _ in chunk)
            continue
        now = int(reply[0])
        for n in range(len(chunk)):
            earliest, length = int(reply[1 + 2 * n]), int(reply[2 + 2 * n])
            peeks.append(
                None if earliest == -2 else Peek(now, None if earliest < 0 else earliest, length)
            )
    return peeks
