"""Published schemas, on a real server: services publish their event classes' payload schema;
the newest publication wins and a change is logged once with both versions; `aioqueue schema`
and `GET /types` show them; `POST /events` refuses a payload that does not fit, naming the
field path, and the events it accepts arrive typed."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal

import httpx
import orjson
import pytest
import redis.asyncio as redis

from aioqueue import Event, EventServiceBuilder, JsonSerializer
from aioqueue._wire.schemas import schemas_key
from aioqueue.testing import EmbeddedServer
from tests.support.common import Recorder, queue_key, wait_until
from tests.support.ops import ServedApp, api_client, declare, run_cli, serve

Builder = Callable[[], EventServiceBuilder]
SCHEMAS = schemas_key("aioqueue")


@dataclass
class Line:
    sku: str
    qty: int


@dataclass
class Shipment(Event):
    id: str
    placed_at: datetime
    total: Decimal
    lines: list[Line]
    note: str = ""


@dataclass
class ShipmentV2(Event):
    """The next deploy's Shipment: one more optional field."""

    __event_type__ = "Shipment"
    id: str
    placed_at: datetime
    total: Decimal
    lines: list[Line]
    note: str = ""
    carrier: str = "post"


async def published(client: redis.Redis, event_type: str) -> dict[str, object]:
    raw = await client.hget(SCHEMAS, event_type)
    assert raw is not None, f"no schema published for {event_type}"
    entry = orjson.loads(raw)
    assert isinstance(entry, dict)
    return entry


def shipment(event_id: str = "s-1") -> Shipment:
    return Shipment(
        id=event_id,
        placed_at=datetime(2026, 11, 24, 9, 30, tzinfo=timezone.utc),
        total=Decimal("10.50"),
        lines=[Line("x", 2)],
    )


@pytest.mark.backends("standalone", "cluster")
async def test_enqueuing_and_handling_services_publish_the_schema(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    async with service_builder().build() as producer:
        await producer.enqueue(shipment(), 60)
    entry = await published(redis_client, "Shipment")
    assert entry["schema"] == JsonSerializer().schema(Shipment)
    await redis_client.delete(SCHEMAS)

    async with service_builder().build() as consumer:  # handles, never enqueues
        consumer.add_handler(Shipment, Recorder())

        async def publishes() -> bool:
            return await redis_client.hexists(SCHEMAS, "Shipment")

        await wait_until(publishes)
    assert (await published(redis_client, "Shipment"))["digest"] == entry["digest"]


@pytest.mark.backends("standalone")
async def test_the_newest_publication_wins_and_the_change_is_logged_once_with_both(
    service_builder: Builder, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aioqueue")
    async with service_builder().build() as old:
        await old.enqueue(shipment("s-1"), 60)
    old_entry = await published(redis_client, "Shipment")
    assert not [r for r in caplog.records if "schema" in r.getMessage()]

    async with service_builder().build() as new:
        for n in range(3):
            await new.enqueue(ShipmentV2(**{**shipment(f"s-{n + 2}").__dict__}), 60)
    new_entry = await published(redis_client, "Shipment")
    assert new_entry["schema"] == JsonSerializer().schema(ShipmentV2)
    messages = [r.getMessage() for r in caplog.records]
    [warning] = [m for m in messages if "schema of Shipment changed" in m]
    assert str(old_entry["digest"]) in warning
    assert str(new_entry["digest"]) in warning
    assert '"carrier"' in warning  # the new version, written out
    assert warning.count('"note"') == 2  # and the old one


@pytest.mark.backends("standalone")
async def test_the_schema_command_shows_fields_and_the_raw_schema(
    service_builder: Builder, redis_url: str, redis_client: redis.Redis
) -> None:
    async with service_builder().build() as service:
        await service.enqueue(shipment(), 60)
    env = {"AIOQUEUE_URL": redis_url}
    table = await run_cli("schema", "Shipment", env=env)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert any(line.split()[:3] == ["lines", "array", "of"] for line in lines), table.stdout
    assert any(line.split() == ["note", "string", "no", '""'] for line in lines), table.stdout
    raw = await run_cli("schema", "Shipment", "--json", env=env)
    assert raw.json() == JsonSerializer().schema(Shipment)
    listing = await run_cli("schema", env=env)
    assert listing.stdout.splitlines()[1].split()[0] == "Shipment"
    await declare(redis_client, "Unpublished")  # a queue recorded without a schema
    missing = await run_cli("schema", "Unpublished", env=env)
    assert (missing.returncode, missing.stderr) == (1, "no schema is published for Unpublished\n")
    unknown = await run_cli("schema", "Nothing", env=env)
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("aioqueue schema: unknown event type 'Nothing'")
    assert "known types: Shipment, Unpublished" in unknown.stderr


@pytest.fixture(scope="module")
def app(redis_server: EmbeddedServer) -> Iterator[ServedApp]:
    with serve(redis_server.url) as served:
        yield served


@pytest.fixture
async def http(app: ServedApp, redis_client: redis.Redis) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(app.base_url) as client:
        yield client


def posted(event_id: str, **payload: object) -> dict[str, object]:
    fields = {"placed_at": "2026-11-24T09:30:00Z", "total": "10.50", "lines": []} | payload
    return {"type": "Shipment", "id": event_id, "delay": 0, "payload": fields}


@pytest.mark.backends("standalone")
async def test_the_http_api_lists_types_and_checks_payloads_against_the_schema(
    service_builder: Builder, http: httpx.AsyncClient, redis_client: redis.Redis
) -> None:
    # No service yet: accepted when the producer says its consumers come later, and the
    # answer says it was not checked.
    early = {**posted("early", lines="not a list"), "allow_undeclared": True}
    unchecked = await http.post("/events", json=early)
    assert unchecked.status_code == 201, unchecked.text
    assert unchecked.json()["schema"] is None
    await redis_client.delete(queue_key("Shipment", "events"), queue_key("Shipment", "schedule"))

    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(Shipment, handler)

        async def publishes() -> bool:
            return await redis_client.hexists(SCHEMAS, "Shipment")

        await wait_until(publishes)
        digest = (await published(redis_client, "Shipment"))["digest"]

        types = (await http.get("/types")).json()
        [described] = [t for t in types["types"] if t["type"] == "Shipment"]
        assert described["partitions"] == 1
        assert described["digest"] == digest
        assert described["schema"] == JsonSerializer().schema(Shipment)
        assert {"name": "note", "type": "string", "required": False, "default": ""} in (
            described["fields"]
        )
        assert (await http.get("/types/Shipment")).json()["digest"] == digest
        assert (await http.get("/types/Nothing")).status_code == 422  # nobody declared it
        await declare(redis_client, "Unpublished")
        assert (await http.get("/types/Unpublished")).status_code == 404

        bad = await http.post("/events", json=posted("bad", lines=[{"sku": "x", "qty": "2"}]))
        assert bad.status_code == 422, bad.text
        assert bad.json()["errors"][0]["path"] == "$.lines[0].qty"
        assert "$.lines[0].qty: '2' is not of type 'integer'" in bad.json()["error"]
        missing = await http.post("/events", json=posted("bad", lines=[{"qty": 2}]))
        assert missing.status_code == 422
        assert "'sku' is a required property" in missing.json()["error"]
        wrong_format = await http.post("/events", json=posted("bad", total="ten"))
        assert wrong_format.status_code == 422
        assert wrong_format.json()["errors"][0]["path"] == "$.total"
        assert not await redis_client.hexists(queue_key("Shipment", "events"), "bad")

        good = await http.post("/events", json=posted("good", lines=[{"sku": "x", "qty": 2}]))
        assert good.status_code == 201, good.text
        assert good.json()["schema"] == digest
        [delivery] = await handler.wait_for(1)
    assert delivery.event == Shipment(
        id="good",
        placed_at=datetime(2026, 11, 24, 9, 30, tzinfo=timezone.utc),
        total=Decimal("10.50"),
        lines=[Line("x", 2)],
    )
