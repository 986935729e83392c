"""Claim receipts: a claim whose reply is lost spends no attempt. The call is sent again (by
redis-py on a cut connection, or by the consumer itself once redis-py gives up) with the
same receipt, and hands out what the first call took instead of taking more, so the events
reach their handlers at once, on the attempt the first call claimed, rather than a lease
later on the next one. See claim receipts in aioqueue/_wire/lua/_leases.lua.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import pytest
import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from aioqueue import EventService, EventServiceBuilder, current_delivery
from aioqueue._transport.client import RedisClient
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.store import Claimed, ClaimReceipt, QueueStore
from aioqueue.testing import CuttingProxy, EmbeddedServer
from tests.support.common import PaymentCheck, Recorder, server_time_ms, wait_until

Builder = Callable[[], EventServiceBuilder]
ServerFactory = Callable[..., EmbeddedServer]

KEYS = QueueLayout("aioqueue", "PaymentCheck").all_keys[0]
HOUR_MS = 3_600_000


async def dispatched_store(
    redis_client: RedisClient, builder: Builder, ids: list[str]
) -> QueueStore:
    """The PaymentCheck queue with events `ids` enqueued due now and dispatched, in order."""
    store = QueueStore(redis_client, KEYS, "PaymentCheck")
    past = datetime.now(timezone.utc) - timedelta(seconds=10)
    async with builder().enable_scheduling(False).build() as producer:
        for n, event_id in enumerate(ids):
            # Due a millisecond apart, so that dispatch pushes them in this order.
            await producer.enqueue(
                PaymentCheck(id=event_id, order_id=n), at=past + timedelta(milliseconds=n)
            )
    dispatched = await store.dispatch(
        batch_size=10, lease_ms=HOUR_MS, max_attempts=3, ready_capacity=10
    )
    assert dispatched.dispatched == len(ids)
    return store


def parsed(envelopes: list[bytes | str]) -> list[tuple[str, int]]:
    return [
        (envelope.id, envelope.attempt)
        for envelope in (Envelope.parse(raw, event_type="PaymentCheck") for raw in envelopes)
    ]


async def test_a_claim_sent_again_hands_out_what_the_first_call_took(
    redis_client: RedisClient, service_builder: Builder
) -> None:
    """The same receipt twice must return the same deliveries and take nothing more; the
    next receipt claims on from the ready list."""
    store = await dispatched_store(redis_client, service_builder, ["a", "b", "c"])
    receipt = ClaimReceipt("taker", 1)
    first = await store.claim(2, lease_ms=HOUR_MS, receipt=receipt)
    assert parsed(first.envelopes) == [("a", 1), ("b", 1)]
    again = await store.claim(2, lease_ms=HOUR_MS, receipt=receipt)
    assert again.envelopes == first.envelopes
    # Reckoned from the first call, when the lease began.
    assert again.server_now_ms == first.server_now_ms
    assert again.ready_left == 1
    following = await store.claim(2, lease_ms=HOUR_MS, receipt=ClaimReceipt("taker", 2))
    assert parsed(following.envelopes) == [("c", 1)]
    # Another consumer's receipt key, the same token: a claim of its own, receipted too.
    other = await store.claim(2, lease_ms=HOUR_MS, receipt=ClaimReceipt("other", 2))
    assert other.envelopes == []
    # One receipt per consumer, kept a minute past the lease.
    for taker in ("taker", "other"):
        assert HOUR_MS < await redis_client.pttl(KEYS.claim_receipt(taker)) <= HOUR_MS + 60_000


async def test_a_copy_of_an_earlier_claim_run_late_takes_nothing(
    redis_client: RedisClient, service_builder: Builder
) -> None:
    """A consumer sends its next claim only once the last returned or was given up, so a call
    with an older token than its receipt's is a copy the server read late, from a connection
    the consumer gave up on: it must take nothing, even with deliveries waiting, since no one
    would receive them."""
    store = await dispatched_store(redis_client, service_builder, ["a", "b"])
    assert (await store.claim(1, lease_ms=HOUR_MS, receipt=ClaimReceipt("taker", 5))).envelopes
    late_copy = await store.claim(1, lease_ms=HOUR_MS, receipt=ClaimReceipt("taker", 4))
    assert (late_copy.envelopes, late_copy.ready_left) == ([], 1)
    following = await store.claim(1, lease_ms=HOUR_MS, receipt=ClaimReceipt("taker", 6))
    assert parsed(following.envelopes) == [("b", 1)]


async def test_a_claim_sent_again_leaves_out_what_is_no_longer_its_own(
    redis_client: RedisClient, service_builder: Builder
) -> None:
    """Of what the first call took, a repeat must hand out only what that claim still holds:
    not an event acknowledged since, nor one replaced, nor one whose lease lapsed and which
    dispatch took back (its attempt then belongs to the next claim)."""
    store = await dispatched_store(redis_client, service_builder, ["a", "b", "c", "d"])
    receipt = ClaimReceipt("taker", 1)
    first = await store.claim(4, lease_ms=HOUR_MS, receipt=receipt)
    delivered = [Envelope.parse(raw, event_type="PaymentCheck") for raw in first.envelopes]
    assert [envelope.id for envelope in delivered] == ["a", "b", "c", "d"]
    assert await store.acknowledge([delivered[0]]) == 1
    async with service_builder().enable_scheduling(False).build() as producer:
        assert await producer.enqueue(PaymentCheck(id="b", order_id=9), 3600, replace=True)
    # c's lease ends now, and a dispatch takes it back: attempt 1 spent, attempt 2 pushed.
    await redis_client.zadd(KEYS.schedule, {"c": 0}, xx=True)
    assert (
        await store.dispatch(batch_size=10, lease_ms=HOUR_MS, max_attempts=3, ready_capacity=10)
    ).dispatched == 1
    again = await store.claim(4, lease_ms=HOUR_MS, receipt=receipt)
    assert parsed(again.envelopes) == [("d", 1)]
    assert again.ready_left == 1  # c's second attempt waits for a claim of its own
    assert parsed(
        (await store.claim(4, lease_ms=HOUR_MS, receipt=ClaimReceipt("taker", 2))).envelopes
    ) == [("c", 2)]


@dataclass
class SecondBehindFirst:
    """A handler of parallelism 1 that holds "first" until `first_may_finish` is set, while
    "second" waits in the ready list: first's success then frees the only slot, and the
    claim that acknowledges "first" takes "second". Notes each event's attempt."""

    client: RedisClient
    """Reads the ready list: not through a proxy the test holds or cuts."""
    attempts: dict[str, int] = field(default_factory=dict)
    first_may_finish: anyio.Event = field(default_factory=anyio.Event)
    handled: Recorder = field(default_factory=Recorder)

    async def handle(self, event: PaymentCheck) -> bool:
        self.attempts[event.id] = current_delivery().attempt
        if event.id == "first":
            await self.first_may_finish.wait()
        return await self.handled(event)

    async def start(self, service: EventService) -> None:
        """Registers the handler; returns once "first" is in it and "second" waits."""

        async def first_began() -> bool:
            return "first" in self.attempts

        async def second_waits() -> bool:
            return await self.client.llen(KEYS.ready) == 1

        service.add_handler(PaymentCheck, self.handle, parallelism=1)
        await service.enqueue(PaymentCheck(id="first", order_id=1), 0)
        await wait_until(first_began)
        await service.enqueue(PaymentCheck(id="second", order_id=2), 0)
        # Dispatched to the ready list; the only slot is busy, so nothing claims it.
        await wait_until(second_waits)


@pytest.mark.parametrize("redis_py_retries", [True, False], ids=["redis-py", "consumer"])
async def test_a_claim_whose_reply_is_lost_spends_no_attempt(
    server_factory: ServerFactory, redis_py_retries: bool
) -> None:
    """A cut connection loses the reply of a claim the server ran. The call sent again (by
    redis-py's retry, or without one by the consumer's) must hand the event to its handler at
    once, on the attempt that claim took, not a lease (30 s) later on the next."""
    server = server_factory()
    async with CuttingProxy(server.port) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}"
        client = (
            redis.Redis.from_url(url)
            if redis_py_retries
            else redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0))
        )
        direct = redis.Redis(port=server.port)
        scene = SecondBehindFirst(direct)

        async def is_claimed() -> bool:
            # A claimed lease ends on a whole millisecond, 30 s away; a pushed one half a
            # millisecond early.
            score = await direct.zscore(KEYS.schedule, "second")
            return score is not None and score % 1 == 0 and await direct.llen(KEYS.ready) == 0

        builder = (
            EventService.builder()
            .client(client)
            .scheduling_interval(0.05)
            .polling_timeout(0.2)
            .lease(30.0)
        )
        async with builder.build() as service:
            await scene.start(service)
            proxy.hold_replies()
            # The claim that acknowledges "first" and takes "second" runs, and its reply is
            # held back.
            scene.first_may_finish.set()
            await wait_until(is_claimed)
            assert proxy.cut_all() >= 1
            proxy.release_replies()
            await scene.handled.wait_for(2, within=10)
        await client.aclose()
        await direct.aclose()
    assert scene.attempts == {"first": 1, "second": 1}


async def test_a_consumer_stopped_while_it_sends_a_lost_claim_again_gives_the_events_back(
    service_builder: Builder, redis_client: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's reply is lost and the server fails the call each time the consumer sends it
    again; the service stops meanwhile (a rolling restart during a network fault) and the
    server answers again. What the lost claim took must go back due now, its attempt
    uncounted, rather than wait out its lease (30 s) and count as spent: the next worker
    handles it at once, on attempt 1."""
    real_claim = QueueStore.claim
    failing = False
    lost: list[int] = []

    async def lose_claims(self: QueueStore, count: int, **options: Any) -> Claimed:
        # Calls that ask for nothing pass: only the consumer's last call, on its way out,
        # asks for nothing here (one partition, nothing contended).
        if failing and count > 0:
            if not lost:  # the first runs, and its reply is lost
                lost.append(len((await real_claim(self, count, **options)).envelopes))
            raise RedisConnectionError("connection lost (injected)")
        return await real_claim(self, count, **options)

    monkeypatch.setattr(QueueStore, "claim", lose_claims)
    scene = SecondBehindFirst(redis_client)

    async def claim_lost() -> bool:
        return bool(lost)

    builder = service_builder().lease(30.0)
    async with builder.build() as service:
        await scene.start(service)
        failing = True
        scene.first_may_finish.set()  # the claim that takes "second" runs; its reply is lost
        await wait_until(claim_lost)
        stopped_at = await server_time_ms(redis_client)
    failing = False
    due = await redis_client.zscore(KEYS.schedule, "second")
    async with builder.build() as service:
        service.add_handler(PaymentCheck, scene.handle, parallelism=1)
        await scene.handled.wait_for(2, within=10)
    assert lost == [1]
    assert due is not None
    assert due <= stopped_at + 1000  # due now, not at the lease's end (30 s on)
    assert scene.attempts == {"first": 1, "second": 1}
