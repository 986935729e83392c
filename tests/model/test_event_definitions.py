"""Event classes, wire names, key layout and payload encoding (no server needed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import pytest
from pydantic import BaseModel
from redis.crc import key_slot

from aioqueue import (
    Event,
    EventDefinitionError,
    JsonSerializer,
    PayloadDecodeError,
    SerializationError,
    event_type_name,
)
from aioqueue._wire.keys import QueueKeys
from tests.support.common import PaymentCheck


@dataclass
class Renamed(Event):
    __event_type__ = "payment-check.v2"
    id: str


class Invoice(BaseModel, Event):
    id: str
    amount_cents: int
    issued_at: datetime


def test_wire_name_is_the_class_name_unless_the_class_sets_one() -> None:
    assert event_type_name(PaymentCheck) == "PaymentCheck"
    assert event_type_name(Renamed) == "payment-check.v2"


def test_a_subclass_is_its_own_event_type() -> None:
    @dataclass
    class SpecialRenamed(Renamed):
        pass

    assert event_type_name(SpecialRenamed) == "SpecialRenamed"


def test_classes_that_are_not_events_or_have_unsafe_names_are_refused() -> None:
    @dataclass
    class NotAnEvent:
        id: str

    @dataclass
    class Braced(Event):
        __event_type__ = "a}b"
        id: str

    with pytest.raises(EventDefinitionError, match=r"subclass aioqueue\.Event"):
        event_type_name(NotAnEvent)  # type: ignore[arg-type]
    with pytest.raises(EventDefinitionError, match="'a}b'"):
        event_type_name(Braced)


def test_all_keys_of_a_type_share_one_cluster_slot() -> None:
    keys = QueueKeys.for_type("aioqueue", "PaymentCheck")
    names = [keys.schedule, keys.events, keys.ready, keys.dead_letters]
    names += [keys.dead_letter_times, keys.sequence]
    assert all(name.startswith("aioqueue:{PaymentCheck}:") for name in names)
    assert len({key_slot(name.encode()) for name in names}) == 1


def test_dataclass_payload_round_trips_without_the_id() -> None:
    serializer = JsonSerializer()
    payload = serializer.encode(PaymentCheck(id="p-1", order_id=2**62))
    assert payload == '{"order_id":4611686018427387904}'
    assert serializer.decode(PaymentCheck, "p-1", payload) == PaymentCheck("p-1", 2**62)


def test_pydantic_payload_round_trips_with_typed_fields() -> None:
    serializer = JsonSerializer()
    invoice = Invoice(
        id="i-1", amount_cents=1999, issued_at=datetime(2026, 1, 2, tzinfo=timezone.utc)
    )
    decoded = serializer.decode(Invoice, "i-1", serializer.encode(invoice))
    assert decoded == invoice


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("", "not valid JSON"),
        ('"}"', "must be a JSON object, got str"),
        ("{}", r"does not fit PaymentCheck: \$: object missing required field order_id"),
        ('{"order_id": "1"}', r"PaymentCheck: \$.order_id: expected int, got str"),
    ],
)
def test_undecodable_payloads_raise_a_typed_error(payload: str, message: str) -> None:
    with pytest.raises(PayloadDecodeError, match=message):
        JsonSerializer().decode(PaymentCheck, "p-1", payload)


def test_unencodable_events_raise_a_typed_error() -> None:
    @dataclass
    class Holder(Event):
        id: str
        amount: int

    with pytest.raises(SerializationError, match="Holder 'h-1'"):
        JsonSerializer().encode(Holder(id="h-1", amount=2**70))  # past JSON's 64-bit ints
