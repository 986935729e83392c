"""Property-based: any nested typed event hypothesis makes arrives equal to what was sent,
through a real server, and its payload validates against the published JSON Schema; an
event that could not arrive so is refused at enqueue, and only such an event."""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import math
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st

from aioqueue import Event, EventService, FixedDelays, InvalidEventError
from aioqueue.testing import EmbeddedServer
from tests.support.common import Recorder
from tests.support.properties import property_settings


class Step(enum.Enum):
    PLACED = "placed"
    PAID = "paid"


@dataclass(frozen=True)
class Line:
    sku: str
    qty: int
    price: Decimal


@dataclass
class Shipment:
    carrier: Literal["ups", "dhl"]
    eta: dt.date | None
    lines: list[Line]


@dataclass
class Tracked(Event):
    id: str
    at: dt.datetime
    step: Step
    ref: uuid.UUID
    wait: dt.timedelta
    lines: tuple[Line, ...]
    labels: frozenset[str]
    shipments: dict[str, Shipment]
    note: str | None = None
    codes: list[int | str] = field(default_factory=list)


TEXT = st.text(max_size=12)
DECIMALS = st.decimals(allow_nan=False, allow_infinity=False)
LINES = st.builds(Line, sku=TEXT, qty=st.integers(-(2**63), 2**63 - 1), price=DECIMALS)
SHIPMENTS = st.builds(
    Shipment,
    carrier=st.sampled_from(["ups", "dhl"]),
    eta=st.none() | st.dates(),
    lines=st.lists(LINES, max_size=3),
)
OFFSETS = st.integers(-23 * 60, 23 * 60).map(
    lambda minutes: dt.timezone(dt.timedelta(minutes=minutes))
)
EVENTS = st.builds(
    Tracked,
    id=st.just(""),
    at=st.datetimes(timezones=OFFSETS),
    step=st.sampled_from(Step),
    ref=st.uuids(),
    wait=st.timedeltas(),
    lines=st.lists(LINES, max_size=3).map(tuple),
    labels=st.frozensets(TEXT, max_size=3),
    shipments=st.dictionaries(TEXT, SHIPMENTS, max_size=2),
    note=st.none() | TEXT,
    codes=st.lists(st.integers(-(2**63), 2**63 - 1) | TEXT, max_size=3),
)


async def round_trip(url: str, sent: list[Tracked]) -> dict[str, Event]:
    handler = Recorder()
    service = (
        EventService.builder()
        .url(url)
        .prefix("typed-props")
        .scheduling_interval(0.05)
        .retry_policy(FixedDelays([0.05]))
        .build()
    )
    async with service:
        service.add_handler(Tracked, handler, parallelism=8)
        for event in sent:
            assert await service.enqueue(event, 0)
        deliveries = await handler.wait_for(len(sent))
    return {delivery.event.id: delivery.event for delivery in deliveries}


@property_settings(
    25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(events=st.lists(EVENTS, min_size=1, max_size=8))
def test_nested_typed_events_arrive_as_sent(
    redis_server: EmbeddedServer, events: list[Tracked]
) -> None:
    sent = [Tracked(**{**event.__dict__, "id": f"t-{n}"}) for n, event in enumerate(events)]
    received = asyncio.run(round_trip(redis_server.url, sent))
    assert received == {event.id: event for event in sent}
    for event in sent:
        got = received[event.id]
        assert isinstance(got, Tracked)
        assert got.at.utcoffset() == event.at.utcoffset()  # the offset, not only the instant
        # Equal Decimals may differ in digits (1.0 == 1.00): the digits must survive too.
        assert [str(line.price) for line in got.lines] == [str(line.price) for line in event.lines]


@dataclass
class Measured(Event):
    id: str
    ratio: float
    spare: float | None
    qty: int
    readings: list[float]
    # None, or text that reads "null": neither may hide a NaN from the check at enqueue,
    # which counts the payload's nulls against the fields that are None.
    note: str | None = None


# Values a careless producer hands over: any float (NaN and infinities included), and an
# `int` field given text some of the time.
FLOATS = st.floats()
MEASURED = st.builds(
    Measured,
    id=st.just(""),
    ratio=FLOATS,
    spare=st.none() | FLOATS,
    qty=st.integers(-(2**63), 2**63 - 1) | st.text(max_size=3),
    readings=st.lists(FLOATS, max_size=3),
    note=st.none() | st.sampled_from(["null", "null, null", "nullable"]),
)


def fits(event: Measured) -> bool:
    """The model: what Measured's decoder can read back exactly."""
    floats = [event.ratio, *event.readings] + ([] if event.spare is None else [event.spare])
    return type(event.qty) is int and all(math.isfinite(value) for value in floats)


async def enqueue_or_refuse(url: str, events: list[Measured]) -> tuple[set[str], dict[str, Event]]:
    """Enqueues each event on its own; returns the ids refused and the events delivered."""
    handler = Recorder()
    refused = set()
    service = (
        EventService.builder().url(url).prefix("measured-props").scheduling_interval(0.05).build()
    )
    async with service:
        service.add_handler(Measured, handler, parallelism=8)
        for event in events:
            try:
                assert await service.enqueue(event, 0)
            except InvalidEventError:
                refused.add(event.id)
        deliveries = await handler.wait_for(len(events) - len(refused))
    return refused, {delivery.event.id: delivery.event for delivery in deliveries}


@property_settings(
    25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(events=st.lists(MEASURED, min_size=1, max_size=8))
# A NaN in an optional field beside a field that is None: as many nulls as Nones plus one.
@example(events=[Measured(id="", ratio=1.0, spare=math.nan, qty=1, readings=[], note=None)])
def test_an_event_is_refused_at_enqueue_exactly_when_it_would_not_round_trip(
    redis_server: EmbeddedServer, events: list[Measured]
) -> None:
    sent = [Measured(**{**event.__dict__, "id": f"m-{n}"}) for n, event in enumerate(events)]
    refused, received = asyncio.run(enqueue_or_refuse(redis_server.url, sent))
    assert refused == {event.id for event in sent if not fits(event)}
    # What was accepted arrives equal (-0.0 == 0.0, so compare the sign as well).
    accepted = [event for event in sent if fits(event)]
    assert received == {event.id: event for event in accepted}
    for event in accepted:
        got = received[event.id]
        assert isinstance(got, Measured)
        assert math.copysign(1, got.ratio) == math.copysign(1, event.ratio)
