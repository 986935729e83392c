"""Typed events arrive exactly as they were sent, through a real server: every field type
the typed-events guide lists, nested, defaulted, as dataclasses and as msgspec Structs; a
class whose fields cannot round-trip fails where it is defined; a payload that does not fit
is dead-lettered with its field path while the consumer goes on."""

from __future__ import annotations

import datetime as dt
import enum
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Annotated, Literal

import msgspec
import pytest
import redis.asyncio as redis

from aioqueue import (
    Event,
    EventDefinitionError,
    EventServiceBuilder,
    HandlerRegistrationError,
    JsonSerializer,
    PayloadDecodeError,
)
from tests.support.common import Recorder, queue_key, wait_until

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]


class Kind(enum.Enum):
    A = "a"
    B = "b"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


if sys.version_info >= (3, 11):
    # novermin: guarded by the version check above, which vermin does not follow.
    from enum import StrEnum
else:  # the same thing before 3.11

    class StrEnum(str, enum.Enum):
        pass


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Item:
    sku: str
    qty: int
    price: Decimal = Decimal("0.00")


@dataclass
class Address:
    city: str
    lines: tuple[str, ...] = ()


@dataclass
class Order(Event):
    id: str
    created: dt.datetime
    day: dt.date
    cutoff: dt.time
    window: dt.timedelta
    ref: uuid.UUID
    amount: Decimal
    kind: Kind
    level: Level
    colour: Colour
    channel: Literal["web", "phone"]
    items: list[Item]
    ship_to: Address | None
    code: int | str
    pair: tuple[int, str]
    tags: set[str]
    frozen: frozenset[Item]
    by_sku: dict[str, Item]
    note: str = "none"
    extra: list[dt.datetime] = field(default_factory=list)


class Reading(msgspec.Struct, Event, kw_only=True):
    id: str
    taken: dt.datetime
    value: Decimal
    where: Address | None = None


PARIS_WINTER = dt.timezone(dt.timedelta(hours=1))


def full_order(order_id: str = "o-1") -> Order:
    item = Item("x", 2, Decimal("19.990000000000000000000000001"))
    return Order(
        id=order_id,
        created=dt.datetime(2026, 11, 24, 16, 23, 21, 936488, tzinfo=PARIS_WINTER),
        day=dt.date(2026, 11, 24),
        cutoff=dt.time(17, 30, 0, 5),
        window=dt.timedelta(days=1, seconds=3.5),
        ref=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        amount=Decimal("1234567890.123456789012345678901234567890"),
        kind=Kind.B,
        level=Level.HIGH,
        colour=Colour.BLUE,
        channel="phone",
        items=[item, Item("y", 1)],
        ship_to=Address("Paris", ("1 rue X", "75001")),
        code="A-7",
        pair=(3, "three"),
        tags={"vip", "late"},
        frozen=frozenset({item}),
        by_sku={"x": item},
        extra=[dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)],
    )


async def test_every_listed_type_round_trips_through_the_server(service_builder: Builder) -> None:
    sent = [full_order("o-1"), Order(**{**full_order("o-2").__dict__, "ship_to": None, "code": 7})]
    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(Order, handler)
        for order in sent:
            assert await service.enqueue(order, 0)
        deliveries = await handler.wait_for(2)
    received = {delivery.event.id: delivery.event for delivery in deliveries}
    assert received == {order.id: order for order in sent}
    got = received["o-1"]
    assert isinstance(got, Order)
    assert got.created.utcoffset() == dt.timedelta(hours=1)  # aware stays aware, same offset
    assert str(got.amount) == "1234567890.123456789012345678901234567890"  # every digit
    assert type(got.kind) is Kind
    assert type(got.items[0]) is Item
    assert type(got.ref) is uuid.UUID
    assert got.note == "none"  # defaults fill what the payload leaves out


async def test_msgspec_struct_events_round_trip(service_builder: Builder) -> None:
    sent = Reading(
        id="r-1",
        taken=dt.datetime(2026, 3, 29, 1, 59, tzinfo=dt.timezone.utc),
        value=Decimal("0.1000000000000000000001"),
        where=Address("Lyon"),
    )
    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(Reading, handler)
        await service.enqueue(sent, 0)
        [delivery] = await handler.wait_for(1)
    assert delivery.event == sent


class Opaque:
    """A class msgspec cannot build from JSON."""


@dataclass
class HoldsOpaque(Event):
    id: str
    thing: Opaque


@dataclass
class HoldsObject(Event):
    id: str
    items: list[object]


@dataclass
class Card:
    number: str


@dataclass
class Cash:
    currency: str


@dataclass
class Ambiguous(Event):
    id: str
    paid_with: Card | Cash  # two untagged objects: no decoder can tell them apart


async def handle(event: Event) -> bool:
    return True


@pytest.mark.backends("standalone")
@pytest.mark.parametrize(
    ("event", "names"),
    [
        (HoldsOpaque(id="e-1", thing=Opaque()), ["HoldsOpaque", "'thing'", "Opaque"]),
        (HoldsObject(id="e-1", items=[1]), ["HoldsObject", "'items'", "bare `object`"]),
        (Ambiguous(id="e-1", paid_with=Card("4242")), ["Ambiguous", "'paid_with'", "Card", "Cash"]),
    ],
)
async def test_a_class_that_cannot_round_trip_fails_at_registration_and_first_enqueue(
    service_builder: Builder, redis_client: redis.Redis, event: Event, names: list[str]
) -> None:
    event_class = type(event)
    async with service_builder().build() as service:
        with pytest.raises(EventDefinitionError) as at_registration:
            service.add_handler(event_class, handle)
        with pytest.raises(EventDefinitionError) as at_enqueue:
            await service.enqueue(event, 0)
    for raised in (at_registration, at_enqueue):
        assert all(name in str(raised.value) for name in names), raised.value
    assert not await redis_client.exists(queue_key(event_class.__name__, "events"))
    assert not issubclass(EventDefinitionError, HandlerRegistrationError)


async def test_a_payload_that_does_not_fit_is_dead_lettered_with_its_field_path(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    """Another producer wrote a string where an int is due: the event goes to the dead letters
    naming `$.items[0].qty`, and the next event of the type is delivered as usual."""
    payload = JsonSerializer().encode(full_order("bad"))
    handler = Recorder()
    async with service_builder().build() as service:
        await service.enqueue(full_order("bad"), 3600)
        envelope_key = queue_key("Order", "events")
        envelope = await redis_client.hget(envelope_key, "bad")
        assert isinstance(envelope, bytes)
        broken = payload.replace('"qty":2', '"qty":"2"', 1)
        assert broken != payload
        await redis_client.hset(
            envelope_key, "bad", envelope.decode().replace(_quoted(payload), _quoted(broken))
        )
        assert await service.run_now(Order, "bad")
        service.add_handler(Order, handler)
        await service.enqueue(full_order("good"), 0)
        await handler.wait_for(1)

        async def dead() -> bool:
            return bool(await service.dead_letters(Order))

        await wait_until(dead)
        [letter] = await service.dead_letters(Order)
    assert handler.ids == ["good"]
    assert letter.id == "bad"
    assert "$.items[0].qty: expected int, got str" in letter.error


def _quoted(payload: str) -> str:
    """The payload as it sits inside the envelope's JSON (a JSON string)."""
    return msgspec.json.encode(payload).decode()[1:-1]


@dataclass
class Deadline(Event):
    id: str
    at: Annotated[dt.datetime, msgspec.Meta(tz=True)]


def test_an_offset_can_be_required_of_every_producer() -> None:
    serializer = JsonSerializer()
    schema = serializer.schema(Deadline)
    assert schema is not None
    assert schema["$defs"]["Deadline"]["properties"]["at"]["format"] == "date-time"
    aware = Deadline(id="d-1", at=dt.datetime(2026, 1, 1, tzinfo=PARIS_WINTER))
    assert serializer.decode(Deadline, "d-1", serializer.encode(aware)) == aware
    with pytest.raises(PayloadDecodeError, match=r"\$.at: expected datetime with a timezone"):
        serializer.decode(Deadline, "d-2", '{"at":"2026-01-01T00:00:00"}')
