"""An event whose values do not fit its class is refused at enqueue, never dead-lettered at
delivery: the payload is read back by the consumer's own decoder before anything is written,
and NaN/infinity (which JSON cannot carry) are refused by name."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import pydantic
import pytest
from redis.asyncio import Redis

import aioqueue._model.codec
from aioqueue import (
    Event,
    EventServiceBuilder,
    InvalidEnqueueError,
    InvalidEventError,
    JsonSerializer,
    SerializationError,
)
from tests.support.common import Recorder, all_keys

Builder = Callable[[], EventServiceBuilder]


@dataclass
class Item:
    sku: str
    qty: int


@dataclass
class Reading(Event):
    id: str
    ratio: float
    items: list[Item] = field(default_factory=list)
    spare: float | None = None
    by_name: dict[str, float] = field(default_factory=dict)


class Sample(msgspec.Struct, Event, kw_only=True):
    id: str
    values: list[float]


class Priced(msgspec.Struct, Event, kw_only=True, rename="camel"):
    id: str
    unit_price: float


@dataclass
class Stop:
    name: str
    lat: float


@dataclass
class Route(Event):
    id: str
    stops: list[Stop]


class Invoice(pydantic.BaseModel, Event):
    id: str
    total: float


@pytest.mark.parametrize(
    ("event", "path"),
    [
        (Reading(id="r", ratio=math.nan), "$.ratio"),
        (Reading(id="r", ratio=math.inf), "$.ratio"),
        (Reading(id="r", ratio=1.0, spare=-math.inf), "$.spare"),
        (Reading(id="r", ratio=1.0, by_name={"a": 1.0, "b": math.nan}), "$.by_name.b"),
        # As many nulls as there are fields that are None, one of them a NaN's.
        (Reading(id="r", ratio=1.0, spare=None, by_name={"b": math.nan}), "$.by_name.b"),
        (Sample(id="s", values=[1.0, math.nan]), "$.values[1]"),
        # A renamed field is named as it is written, as decoding errors name it.
        (Priced(id="p", unit_price=math.nan), "$.unitPrice"),
        (Route(id="r", stops=[Stop("a", 1.0), Stop("b", math.inf)]), "$.stops[1].lat"),
        (Invoice.model_construct(id="i", total=math.nan), "$.total"),
    ],
    ids=[
        "nan",
        "inf",
        "optional",
        "dict-value",
        "beside-none",
        "struct-list",
        "struct-renamed",
        "nested-dataclass",
        "pydantic",
    ],
)
async def test_a_non_finite_float_is_refused_by_its_path(
    service_builder: Builder, redis_client: Redis, event: Event, path: str
) -> None:
    async with service_builder().build() as service:
        with pytest.raises(InvalidEventError, match=re.escape(path) + ".*finite"):
            await service.enqueue(event, 0)
    # Nothing of the event was written (only the registry and the published schema are).
    assert not [key for key in await all_keys(redis_client) if b"{" in key]


def test_an_event_whose_nulls_are_its_none_fields_is_not_searched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The search for a NaN walks every member; an event with optional fields left out (the
    # common case) has no more nulls than fields that are None, so it is encoded without it.
    def searched(value: object, depth: int = 0) -> str | None:
        raise AssertionError("searched a payload whose nulls are all None fields")

    monkeypatch.setattr(aioqueue._model.codec, "_non_finite_path", searched)
    serializer = JsonSerializer()
    payload = serializer.encode(Reading(id="r", ratio=1.0, items=[Item("a", 1)], spare=None))
    assert serializer.decode(Reading, "r", payload) == Reading(
        id="r", ratio=1.0, items=[Item("a", 1)]
    )
    # One null more than the fields that are None (a NaN's, or text that reads "null"), and
    # the search runs.
    for more in (
        Reading(id="r", ratio=math.nan),
        Reading(id="r", ratio=1.0, items=[Item("null", 1)]),
    ):
        with pytest.raises(AssertionError, match="searched"):
            serializer.encode(more)


async def test_a_value_of_the_wrong_type_is_refused_with_the_field_path(
    service_builder: Builder, redis_client: Redis
) -> None:
    wrong = Reading(id="r-1", ratio=0.5, items=[Item("a", 1), Item("b", "3")])  # type: ignore[arg-type]
    async with service_builder().build() as service:
        with pytest.raises(InvalidEventError, match=r"\$\.items\[1\]\.qty: expected int, got str"):
            await service.enqueue(wrong, 0)
        # enqueue_many validates every event before it writes any.
        good = Reading(id="r-2", ratio=0.5)
        with pytest.raises(InvalidEventError):
            await service.enqueue_many([good, wrong], 0)
    assert not [key for key in await all_keys(redis_client) if b"{" in key]


def test_invalid_event_error_is_an_enqueue_error_and_not_a_serialization_error() -> None:
    # Callers that catch InvalidEnqueueError for bad input catch this too; an encoding
    # failure (a type JSON cannot write at all) stays a SerializationError.
    assert issubclass(InvalidEventError, InvalidEnqueueError)
    assert issubclass(InvalidEventError, ValueError)
    assert not issubclass(InvalidEventError, SerializationError)


async def test_values_that_fit_are_delivered_as_sent(service_builder: Builder) -> None:
    sent = Reading(
        id="ok", ratio=-0.0, items=[Item("a", 2)], spare=None, by_name={"x": 1e308, "y": 5e-324}
    )
    recorder = Recorder()
    async with service_builder().build() as service:
        service.add_handler(Reading, recorder)
        assert await service.enqueue(sent, 0)
        [delivery] = await recorder.wait_for(1)
    assert delivery.event == sent
