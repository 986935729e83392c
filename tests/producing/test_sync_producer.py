"""SyncProducer against real servers: what it writes is what an EventService writes, and an
async service delivers it, typed values equal, with the same checks, dedupe, replace,
debounce, cancel and reschedule."""

from __future__ import annotations

import dataclasses
import enum
import math
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from redis.asyncio import Redis as AsyncRedis

from aioqueue import (
    ConfigurationError,
    Event,
    EventServiceBuilder,
    InvalidEnqueueError,
    InvalidEventError,
    NoInstrumentation,
    NoMetrics,
    PartitionCountMismatchError,
    PayloadTooLargeError,
    SyncProducer,
)
from aioqueue._transport.client import RedisClient
from tests.support.common import (
    OrderStep,
    PaymentCheck,
    Recorder,
    all_keys,
    queue_key,
    server_time_ms,
)
from tests.support.script_calls import ScriptCall

Builder = Callable[[], EventServiceBuilder]


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"


@dataclass
class Address:
    street: str
    postcode: str


@dataclass
class Customer:
    id: uuid.UUID
    tier: Tier
    address: Address
    since: date


@dataclass
class Invoice(Event):
    id: str
    issued_at: datetime
    total: Decimal
    customer: Customer
    lines: list[Decimal] = field(default_factory=list)


@dataclass
class Reading(Event):
    id: str
    ratio: float


@dataclass
class HotPing(Event):
    id: str
    n: int


@pytest.fixture
def producer(redis_url: str, redis_client: RedisClient) -> Iterator[SyncProducer]:
    """A producer from the test's URL, made after redis_client emptied the server."""
    with SyncProducer(redis_url) as made:
        yield made


@pytest.mark.backends("standalone", "cluster")
async def test_typed_values_arrive_equal(producer: SyncProducer, service_builder: Builder) -> None:
    sent = Invoice(
        id="inv-1",
        issued_at=datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2))),
        total=Decimal("1234567890.123456789"),
        customer=Customer(
            id=uuid.UUID("12345678-1234-5678-1234-567812345678"),
            tier=Tier.GOLD,
            address=Address("1 Rue de la Paix", "75002"),
            since=date(2020, 2, 29),
        ),
        lines=[Decimal("0.1"), Decimal("-7E+3")],
    )
    assert producer.enqueue(sent, 0, context={"request": "r-1"})
    recorder = Recorder()
    async with service_builder().build() as service:
        service.add_handler(Invoice, recorder)
        [delivery] = await recorder.wait_for(1)
    assert delivery.event == sent
    assert isinstance(delivery.event, Invoice)
    assert delivery.event.issued_at.utcoffset() == timedelta(hours=2)
    assert delivery.context == {"request": "r-1"}


async def test_it_makes_the_same_script_call_as_the_service(
    producer: SyncProducer, service_builder: Builder, script_calls: list[ScriptCall]
) -> None:
    event = PaymentCheck(id="p-1", order_id=42)
    async with service_builder().enable_scheduling(False).build() as service:
        assert await service.enqueue(event, 60, context={"k": "v"})
    assert not producer.enqueue(event, 60, context={"k": "v"})  # pending already: kept
    service_call, producer_call = [call for call in script_calls if call.script == "enqueue"]
    assert producer_call == service_call


async def test_the_first_use_of_a_class_records_it_like_a_service(
    producer: SyncProducer, redis_client: RedisClient
) -> None:
    producer.enqueue(OrderStep(id="s-1", order_id=7), 3600)
    assert await redis_client.hget("aioqueue:types", "OrderStep") == b"1"
    assert await redis_client.hget("aioqueue:schemas", "OrderStep") is not None
    assert await redis_client.get(queue_key("OrderStep", "serial_field")) == b"order_id"


@pytest.mark.backends("standalone", "cluster")
async def test_enqueue_many_writes_every_event_and_says_which_were_kept(
    producer: SyncProducer, redis_client: RedisClient
) -> None:
    assert producer.enqueue(PaymentCheck(id="p-7", order_id=0), 3600)
    # More than one script call's worth (500) of one type, and a second type between them.
    events: list[Event] = [PaymentCheck(id=f"p-{n}", order_id=n) for n in range(1100)]
    events.insert(3, OrderStep(id="s-1", order_id=1))
    scheduled = producer.enqueue_many(events, 3600)
    assert scheduled == [event.id != "p-7" for event in events]
    assert await redis_client.zcard(queue_key("PaymentCheck", "schedule")) == 1100
    assert await redis_client.zcard(queue_key("OrderStep", "schedule")) == 1
    assert producer.enqueue_many([], 3600) == []


@pytest.mark.backends("cluster")
async def test_a_partitioned_type_spreads_over_the_cluster_and_is_delivered(
    redis_url: str, redis_client: RedisClient, service_builder: Builder
) -> None:
    with SyncProducer(redis_url, partitions={HotPing: 4}) as producer:
        assert producer.enqueue_many([HotPing(f"h-{n}", n) for n in range(200)], 0) == [True] * 200
        assert producer.enqueue(HotPing("single", 1), 0)
    # A producer without the setting writes with the count the registry records; an id is in
    # the same partition whoever writes it, so dedupe holds across producers.
    with SyncProducer(redis_url) as follower:
        assert follower.enqueue(HotPing("follower", 2), 0)
        assert not follower.enqueue(HotPing("h-3", 3), 0)
    mismatched = SyncProducer(redis_url, partitions={HotPing: 2})
    with mismatched, pytest.raises(PartitionCountMismatchError, match="HotPing has 4 partition"):
        mismatched.enqueue(HotPing("lost", 0), 0)
    events_keys = {key for key in await all_keys(redis_client) if key.endswith(b":events")}
    assert len(events_keys) == 4
    recorder = Recorder()
    async with service_builder().partitions(HotPing, 4).build() as service:
        service.add_handler(HotPing, recorder, parallelism=8)
        await recorder.wait_for(202)
    assert sorted(recorder.ids) == sorted([f"h-{n}" for n in range(200)] + ["single", "follower"])


async def test_dedupe_replace_and_a_bounded_debounce(
    producer: SyncProducer, service_builder: Builder, redis_client: RedisClient
) -> None:
    assert producer.enqueue(PaymentCheck(id="p-1", order_id=1), 3600)
    assert not producer.enqueue(PaymentCheck(id="p-1", order_id=2), 3600)
    assert producer.enqueue(PaymentCheck(id="p-1", order_id=3), 3600, replace=True)
    # A debounce series: however often it is replaced an hour ahead, it is due within
    # max_wait of its first enqueue.
    started_ms = await server_time_ms(redis_client)
    for order_id in (10, 11, 12):
        assert producer.enqueue(
            PaymentCheck(id="p-2", order_id=order_id), 3600, replace=True, max_wait=0.3
        )
    due_ms = await redis_client.zscore(queue_key("PaymentCheck", "schedule"), "p-2")
    assert due_ms is not None
    assert started_ms <= due_ms <= started_ms + 300 + 100  # the series began just after
    recorder = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, recorder)
        [delivery] = await recorder.wait_for(1)
        assert delivery.event == PaymentCheck(id="p-2", order_id=12)
        info = await service.inspect(PaymentCheck, "p-1")
        assert info is not None
        assert info.payload == '{"order_id":3}'


@pytest.mark.backends("standalone", "cluster")
async def test_cancel_removes_a_pending_event(
    producer: SyncProducer, service_builder: Builder
) -> None:
    producer.enqueue(PaymentCheck(id="p-1", order_id=1), 3600)
    assert producer.cancel(PaymentCheck, "p-1")
    assert not producer.cancel(PaymentCheck, "p-1")
    assert not producer.cancel(PaymentCheck, "never-enqueued")
    async with service_builder().enable_scheduling(False).build() as service:
        assert await service.inspect(PaymentCheck, "p-1") is None


@pytest.mark.backends("standalone", "cluster")
async def test_reschedule_by_delay_and_by_time(
    producer: SyncProducer, service_builder: Builder, redis_client: RedisClient
) -> None:
    producer.enqueue(PaymentCheck(id="p-1", order_id=1), 3600, context={"k": "v"})
    producer.enqueue(PaymentCheck(id="p-2", order_id=2), 0.5)
    at = datetime.now(timezone.utc) + timedelta(days=2)
    assert producer.reschedule(PaymentCheck, "p-2", at=at)
    due_ms = await redis_client.zscore(queue_key("PaymentCheck", "schedule"), "p-2")
    assert due_ms == round(at.timestamp() * 1000)
    assert not producer.reschedule(PaymentCheck, "unknown", 0)
    with pytest.raises(InvalidEnqueueError, match="exactly one of delay and at="):
        producer.reschedule(PaymentCheck, "p-1", 1, at=at)
    assert producer.reschedule(PaymentCheck, "p-1", timedelta(0))
    recorder = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, recorder)
        [delivery] = await recorder.wait_for(1)
    # Moved, with its payload and context: the one due in two days stays pending.
    assert delivery.event == PaymentCheck(id="p-1", order_id=1)
    assert delivery.context == {"k": "v"}


BAD_INPUT: list[tuple[Callable[[SyncProducer], object], type[Exception], str]] = [
    (lambda p: p.enqueue(Reading(id="r", ratio=math.nan), 0), InvalidEventError, r"\$\.ratio"),
    (lambda p: p.enqueue(Reading(id="", ratio=1.0), 0), InvalidEnqueueError, "non-empty"),
    (
        lambda p: p.enqueue(Reading(id="r", ratio="high"), 0),  # type: ignore[arg-type]
        InvalidEventError,
        r"\$\.ratio: expected float, got str",
    ),
    (
        lambda p: p.enqueue(Reading(id="r", ratio=1.0), 0, context={"k": 1}),  # type: ignore[dict-item]
        InvalidEnqueueError,
        "context must map strings to strings",
    ),
    (
        lambda p: p.enqueue(Reading(id="r", ratio=1.0), at=datetime(2030, 1, 1)),
        InvalidEnqueueError,
        "timezone-aware",
    ),
    (lambda p: p.enqueue(Reading(id="r", ratio=1.0), -1), InvalidEnqueueError, ">= 0"),
    (
        lambda p: p.enqueue(Reading(id="r", ratio=1.0), 0, max_wait=5),
        InvalidEnqueueError,
        "replace=True",
    ),
    (
        lambda p: p.enqueue_many([Reading(id="a", ratio=1.0), Reading(id="b", ratio=math.inf)], 0),
        InvalidEventError,
        r"\$\.ratio",
    ),
    (lambda p: p.prepare(Reading(id="r", ratio=math.nan), 0), InvalidEventError, r"\$\.ratio"),
]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    BAD_INPUT,
    ids=["nan", "empty-id", "wrong-type", "context", "naive-at", "negative-delay",
         "max-wait-alone", "many", "prepare"],
)  # fmt: skip
async def test_bad_input_raises_before_anything_is_written(
    producer: SyncProducer,
    redis_client: RedisClient,
    call: Callable[[SyncProducer], object],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        call(producer)
    assert await all_keys(redis_client) == []  # not even the type's registry entry


async def test_a_payload_above_the_limit_is_refused(
    redis_url: str, redis_client: RedisClient
) -> None:
    producer = SyncProducer(redis_url, max_payload_bytes=100)
    with producer, pytest.raises(PayloadTooLargeError, match="max_payload_bytes=100"):
        producer.enqueue(Reading(id="r", ratio=1.0), 0, context={"note": "x" * 100})
    assert await all_keys(redis_client) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "a Redis url or a client"),
        ({"url": "redis://x", "client": object()}, "a Redis url or a client"),
        ({"url": "http://localhost"}, "invalid url"),
        ({"url": "redis://x", "prefix": "a{b}"}, "invalid prefix"),
        ({"url": "redis://x", "max_payload_bytes": 0}, "max_payload_bytes must be"),
        ({"url": "redis://x", "partitions": {PaymentCheck: 0}}, "partitions of PaymentCheck"),
        ({"url": "redis://x", "partitions": {OrderStep: 2}}, "__serial_key__"),
        ({"client": AsyncRedis()}, "needs a blocking client"),
    ],
    ids=[
        "neither",
        "both",
        "scheme",
        "prefix",
        "payload-limit",
        "partitions",
        "serial-key",
        "asyncio-client",
    ],
)
def test_settings_are_checked_when_it_is_made(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SyncProducer(**options)  # type: ignore[arg-type]


def test_its_settings_are_frozen_with_partitions_by_wire_name(redis_url: str) -> None:
    with SyncProducer(
        redis_url, prefix="shop", partitions={PaymentCheck: 4}, max_payload_bytes=1000
    ) as producer:
        config = producer.config
    assert (config.prefix, dict(config.partitions), config.max_payload_bytes) == (
        "shop",
        {"PaymentCheck": 4},
        1000,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.prefix = "other"  # type: ignore[misc]


class CountingMetrics(NoMetrics):
    def __init__(self) -> None:
        self.enqueued: list[tuple[str, bool]] = []

    def event_enqueued(self, event_type: str, *, scheduled: bool) -> None:
        self.enqueued.append((event_type, scheduled))


class RequestIdInstrumentation(NoInstrumentation):
    """Adds a request id to the context of every event, as tracing adds a traceparent."""

    def enqueue_context(self, context: Mapping[str, str] | None) -> Mapping[str, str]:
        return {**(context or {}), "request_id": "req-9"}


async def test_metrics_and_instrumentation_see_each_enqueue(
    redis_url: str, service_builder: Builder
) -> None:
    metrics = CountingMetrics()
    with SyncProducer(
        redis_url, metrics=metrics, instrumentation=RequestIdInstrumentation()
    ) as producer:
        producer.enqueue(PaymentCheck(id="p-1", order_id=1), 0, context={"k": "v"})
        producer.enqueue_many([PaymentCheck(id="p-1", order_id=1), OrderStep("s", 1)], 3600)
    assert metrics.enqueued == [
        ("PaymentCheck", True),
        ("PaymentCheck", False),
        ("OrderStep", True),
    ]
    recorder = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, recorder)
        [delivery] = await recorder.wait_for(1)
    assert delivery.context == {"k": "v", "request_id": "req-9"}


async def test_a_prepared_enqueue_is_written_when_called(
    producer: SyncProducer, redis_client: RedisClient
) -> None:
    write = producer.prepare(PaymentCheck(id="p-1", order_id=1), 3600)
    assert await all_keys(redis_client) == []
    assert write() is True
    assert write() is False  # pending already: kept, as a second enqueue would be
    assert await redis_client.zscore(queue_key("PaymentCheck", "schedule"), "p-1") is not None


async def test_an_event_is_due_after_its_delay_on_the_servers_clock(
    producer: SyncProducer, redis_client: RedisClient
) -> None:
    before = await server_time_ms(redis_client)
    producer.enqueue(PaymentCheck(id="p-1", order_id=1), timedelta(minutes=5))
    after = await server_time_ms(redis_client)
    due = await redis_client.zscore(queue_key("PaymentCheck", "schedule"), "p-1")
    assert due is not None
    assert before + 300_000 <= due <= after + 300_000
