"""Decode cost per event: what a consumer spends turning a stored payload into its event.

    benchmarks/run.sh --decode [--events 100000]

Rows: the flat benchmark event (PaymentCheck: id + int) through aioqueue's typed decoder and
through the decoder it replaced (orjson, then the dataclass built from the dict); a nested
typed order (datetime, Decimal, enum, UUID, a list of nested items) through aioqueue's decoder
and through pydantic v2 for the same shape (`model_validate` of the parsed dict, as aioqueue
decoded pydantic events, and `model_validate_json`). Best of 5 timed loops, in one process.

Then what an enqueue spends on the same events before anything is written: `event_item`
(encoding, the size check, and reading the payload back with the consumer's decoder so that
a value that does not fit the class is refused at enqueue) beside the encoding alone; the
difference is what refusing bad values at enqueue costs on the hot path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import enum
import timeit
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

import orjson
import pydantic

from aioqueue import Event, JsonSerializer
from aioqueue._producing.writes import DueTime, event_item


@dataclass
class PaymentCheck(Event):
    id: str
    order_id: int


class Kind(enum.Enum):
    RETAIL = "retail"
    WHOLESALE = "wholesale"


@dataclass
class Item:
    sku: str
    qty: int
    price: Decimal


@dataclass
class Order(Event):
    id: str
    created: dt.datetime
    ref: uuid.UUID
    kind: Kind
    amount: Decimal
    items: list[Item]


class ItemModel(pydantic.BaseModel):
    sku: str
    qty: int
    price: Decimal


class OrderModel(pydantic.BaseModel, Event):
    id: str
    created: dt.datetime
    ref: uuid.UUID
    kind: Kind
    amount: Decimal
    items: list[ItemModel]


def best_us(function: Callable[[], object], events: int) -> float:
    timer = timeit.Timer(function)
    return min(timer.repeat(repeat=5, number=events)) / events * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    events = parser.parse_args().events
    serializer = JsonSerializer()

    flat = serializer.encode(PaymentCheck(id="p-1", order_id=42))

    def flat_before() -> PaymentCheck:
        fields = orjson.loads(flat)
        fields["id"] = "p-1"
        return PaymentCheck(**fields)

    order = Order(
        id="o-1",
        created=dt.datetime(2026, 11, 24, 16, 23, 21, 936488, tzinfo=dt.timezone.utc),
        ref=uuid.UUID(int=42),
        kind=Kind.RETAIL,
        amount=Decimal("1234.5678"),
        items=[Item(f"sku-{n}", n, Decimal("9.99")) for n in range(5)],
    )
    nested = serializer.encode(order)
    nested_with_id = orjson.dumps({**orjson.loads(nested), "id": "o-1"})
    assert serializer.decode(Order, "o-1", nested) == order

    def pydantic_dict() -> OrderModel:
        fields = orjson.loads(nested)
        fields["id"] = "o-1"
        return OrderModel.model_validate(fields)

    rows: list[tuple[str, Callable[[], object]]] = [
        ("flat event, aioqueue (msgspec)", lambda: serializer.decode(PaymentCheck, "p-1", flat)),
        ("flat event, before (orjson + dataclass(**fields))", flat_before),
        ("nested order, aioqueue (msgspec)", lambda: serializer.decode(Order, "o-1", nested)),
        ("nested order, pydantic model_validate(dict)", pydantic_dict),
        (
            "nested order, pydantic model_validate_json",
            lambda: OrderModel.model_validate_json(nested_with_id),
        ),
    ]
    print(f"decode cost per event, best of 5 loops of {events:,}")
    for name, function in rows:
        print(f"  {name:<52} {best_us(function, events):6.2f} µs")

    due = DueTime(0, absolute=False, due_in=0.0)
    flat_event = PaymentCheck(id="p-1", order_id=42)
    limit = 1024 * 1024
    enqueue_rows: list[tuple[str, Callable[[], object]]] = [
        ("flat event, encoding alone", lambda: serializer.encode(flat_event)),
        ("flat event, event_item", lambda: event_item(serializer, limit, flat_event, due, "{}")),
        ("nested order, encoding alone", lambda: serializer.encode(order)),
        ("nested order, event_item", lambda: event_item(serializer, limit, order, due, "{}")),
    ]
    print(f"enqueue-side cost per event (encode, check, read back), best of 5 loops of {events:,}")
    for name, function in enqueue_rows:
        print(f"  {name:<52} {best_us(function, events):6.2f} µs")


if __name__ == "__main__":
    main()
