"""What stored data can do, and cannot: services with different prefixes never see each other,
hostile event ids stay inside their type's keys, nothing read from Redis is unpickled or
imported, and one bad record never stops the others."""

from __future__ import annotations

import ast
import logging
import pathlib
import pickle
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson
import pytest
import redis.asyncio as redis
from redis.crc import key_slot

from aioqueue import Event, EventServiceBuilder
from aioqueue._wire.envelope import text
from aioqueue._wire.keys import QueueKeys, QueueLayout, partition_of
from aioqueue._wire.registry import registry_key
from aioqueue._wire.schemas import schemas_key
from aioqueue._wire.scripts import script_source
from tests.support.common import PaymentCheck, Recorder, drained, wait_until

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def orders(recorder: Recorder) -> dict[str, int]:
    """Event id -> order_id of every PaymentCheck the recorder was handed."""
    found = {}
    for delivery in recorder.deliveries:
        assert isinstance(delivery.event, PaymentCheck)
        found[delivery.event.id] = delivery.event.order_id
    return found


# -- prefixes --------------------------------------------------------------------------------


async def test_services_with_different_prefixes_on_one_server_never_see_each_other(
    redis_client: redis.Redis, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """Two prefixes (one the start of the other) with the same type and the same ids: each
    service must deliver, cancel and dead-letter only its own events, and every key must
    start with its own prefix."""
    recorders = {
        "shop": Recorder(outcome=lambda event: event.id != "p-fails"),
        "shop:eu": Recorder(),
    }
    async with (
        service_builder().prefix("shop").retry_attempts(1).build() as shop,
        service_builder().prefix("shop:eu").retry_attempts(1).build() as shop_eu,
    ):
        services = {"shop": shop, "shop:eu": shop_eu}
        for prefix, service in services.items():
            offset = 0 if prefix == "shop" else 100
            for i, event_id in enumerate(["p-1", "p-2", "p-fails", "p-cancelled"]):
                await service.enqueue(PaymentCheck(id=event_id, order_id=offset + i), 0.3)
        assert await shop.cancel(PaymentCheck, "p-cancelled")
        for prefix, service in services.items():
            service.add_handler(PaymentCheck, recorders[prefix])
        await recorders["shop"].wait_for(3)
        await recorders["shop:eu"].wait_for(4)

        async def settled() -> bool:
            pending = [
                await redis_client.hlen(QueueKeys.for_type(prefix, "PaymentCheck").events)
                for prefix in services
            ]
            return pending == [0, 0]

        await wait_until(settled)
        shop_dead = await shop.dead_letters(PaymentCheck)
        eu_dead = await shop_eu.dead_letters(PaymentCheck)
        all_keys = {text(key) async for key in redis_client.scan_iter()}
    assert orders(recorders["shop"]) == {"p-1": 0, "p-2": 1, "p-fails": 2}
    assert orders(recorders["shop:eu"]) == {
        "p-1": 100,
        "p-2": 101,
        "p-fails": 102,
        "p-cancelled": 103,
    }
    assert [letter.id for letter in shop_dead] == ["p-fails"]
    assert eu_dead == []
    for key in all_keys:
        owners = [
            p
            for p in services
            if key.startswith(f"{p}:{{") or key in (registry_key(p), schemas_key(p))
        ]
        assert len(owners) == 1, key


# -- hostile event ids -----------------------------------------------------------------------

ODD_IDS = [
    "{PaymentCheck}",
    "{OrderTimeout}",
    "}{",
    "{",
    "a:b:c",
    "aioqueue:{OrderTimeout}:events",
    "ünïcødé ✓ 💳",
    "line\nbreak\ttab",
    " ",
    "nul\x00byte",
    '"quoted" \\ back',
    "x" * 10_000,
    "🙂" * 2_500,  # 10 kB of UTF-8
]


@pytest.mark.parametrize("partitions", [1, 4])
async def test_odd_event_ids_stay_inside_their_types_keys_and_are_delivered(
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
    partitions: int,
) -> None:
    """Ids with braces, colons, key-like text, control characters, unicode or 10 kB must be
    stored byte-exact as members of their own type's keys only (no new key, nothing in
    another type's slot), then be cancelled or delivered like any other id."""
    layout = QueueLayout("aioqueue", "PaymentCheck", partitions)
    recorder = Recorder()
    builder = service_builder().partitions(PaymentCheck, partitions)
    async with builder.build() as service:
        for event_id in ODD_IDS:
            assert await service.enqueue(PaymentCheck(id=event_id, order_id=len(event_id)), 3600)
        stored: set[str] = set()
        for index, keys in enumerate(layout.all_keys):
            fields = {text(field) for field in await redis_client.hkeys(keys.events)}
            members = {
                text(m)
                for m in cast("list[bytes]", await redis_client.zrange(keys.schedule, 0, -1))
            }
            assert fields == members
            assert all(partition_of(event_id, partitions) == index for event_id in fields)
            stored |= fields
        all_keys = {text(key) async for key in redis_client.scan_iter()}

        assert await service.cancel(PaymentCheck, "}{")
        for event_id in ODD_IDS:
            if event_id != "}{":
                await service.enqueue(
                    PaymentCheck(id=event_id, order_id=len(event_id)), 0, replace=True
                )
        service.add_handler(PaymentCheck, recorder)
        await recorder.wait_for(len(ODD_IDS) - 1)
        for keys in layout.all_keys:
            await wait_until(drained(redis_client, keys))
    assert stored == set(ODD_IDS)
    type_keys = {
        getattr(keys, part)
        for keys in layout.all_keys
        for part in ("schedule", "events", "sequence", "wake")
    }
    assert all_keys <= type_keys | {registry_key("aioqueue"), schemas_key("aioqueue")}
    for keys in layout.all_keys:
        tag = keys.events[keys.events.index("{") + 1 : keys.events.index("}")]
        slots = {
            key_slot(key.encode()) for key in all_keys if key.startswith(f"aioqueue:{{{tag}}}")
        }
        assert slots == {key_slot(tag.encode())}
    assert not any(key.startswith("aioqueue:{OrderTimeout}") for key in all_keys)
    assert sorted(recorder.ids) == sorted(event_id for event_id in ODD_IDS if event_id != "}{")
    for delivery in recorder.deliveries:
        assert delivery.event == PaymentCheck(id=delivery.event.id, order_id=len(delivery.event.id))


# -- nothing is unpickled or imported by a name read from Redis ------------------------------

FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle"}
FORBIDDEN_MODULES |= {"jsonpickle", "yaml"}
IMPORT_BY_NAME = {"import_module", "__import__", "resolve_name", "find_class"}
# The one place that imports by name: the CLI's `aioqueue worker module:factory`, whose name
# comes from the command line of the person starting the worker, never from Redis.
ALLOWED_IMPORT_BY_NAME = {("aioqueue/_cli/_worker_cmd.py", "import_module")}


def test_the_package_never_unpickles_evaluates_or_imports_by_name() -> None:
    """No module of the package may import a pickle-like decoder, call eval/exec, or import
    by a computed name outside the allowed CLI entry point; no Lua script may load code."""
    imports: list[tuple[str, str]] = []
    by_name: set[tuple[str, str]] = set()
    for path in sorted((REPO_ROOT / "aioqueue").rglob("*.py")):
        relative = path.relative_to(REPO_ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=relative)):
            if isinstance(node, ast.Import):
                imports += [(relative, alias.name.split(".")[0]) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                imports.append((relative, node.module.split(".")[0]))
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if isinstance(func, ast.Name) and name in {"eval", "exec", "compile"}:
                    by_name.add((relative, name))
                if name in IMPORT_BY_NAME:
                    by_name.add((relative, name))
    assert [(file, module) for file, module in imports if module in FORBIDDEN_MODULES] == []
    assert by_name == ALLOWED_IMPORT_BY_NAME
    scripts = sorted((REPO_ROOT / "aioqueue").rglob("*.lua"))
    assert len(scripts) >= 8, scripts  # the check must not pass by finding no script at all
    for script in scripts:
        source = script.read_text()
        assert not re.search(r"\b(loadstring|load|loadfile|dofile|require)\s*\(", source), script


PROBE_MODULE = "aioqueue_hostile_probe"


class _PickleTrap:
    """Unpickling this touches the marker file: proof that something unpickled data."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (pathlib.Path.touch, (self.marker,))


async def test_class_paths_and_pickles_in_redis_are_only_data(
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Payloads naming a class to build are plain data (an unknown member is ignored, a nested
    object where an int is due is a decode error), and pickles where an envelope or payload
    should be end in the dead letters: the named module is never imported (it exists and would
    leave a marker) and the pickle is never loaded (it would leave one too)."""
    imported_marker = tmp_path / "probe-imported"
    unpickled_marker = tmp_path / "pickle-loaded"
    (tmp_path / f"{PROBE_MODULE}.py").write_text(
        f"import pathlib\npathlib.Path({str(imported_marker)!r}).touch()\n"
        "def system(*args):\n    raise AssertionError('called from Redis data')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    imported_names: list[str] = []
    real_import_module = __import__("importlib").import_module

    def spy_import_module(name: str, package: str | None = None) -> Any:
        imported_names.append(name)
        return real_import_module(name, package)

    monkeypatch.setattr("importlib.import_module", spy_import_module)
    # Protocol 0 is ASCII; binary pickles are the next test's subject.
    trap = pickle.dumps(_PickleTrap(unpickled_marker), protocol=0)
    keys = QueueKeys.for_type("aioqueue", "PaymentCheck")
    hostile_payloads: dict[str, dict[str, object]] = {
        "class-path": {"__class__": f"{PROBE_MODULE}.system", "order_id": 1},
        "jsonpickle": {"py/object": f"{PROBE_MODULE}.system", "order_id": 1},
    }
    # Nested objects stay plain data: checked against the field's type, nothing built.
    reduce_payload: dict[str, object] = {
        "order_id": {"__reduce__": [f"{PROBE_MODULE}.system", ["id"]]}
    }
    hostile_payloads["reduce"] = reduce_payload
    for event_id, payload in hostile_payloads.items():
        await redis_client.eval(
            script_source("enqueue"),
            3,
            keys.schedule,
            keys.events,
            keys.sequence,
            "0",
            "PaymentCheck",
            *(event_id, orjson.dumps(payload).decode(), "{}", "delay", 0),
        )
    # A pickle as the whole stored envelope, and as the payload text of a valid envelope.
    await redis_client.hset(keys.events, "pickled-envelope", trap)
    envelope = {"type": "PaymentCheck", "payload": trap.decode("latin-1"), "attempt": 0}
    await redis_client.hset(
        keys.events, "pickled-payload", orjson.dumps({**envelope, "version": 1})
    )
    await redis_client.zadd(keys.schedule, {"pickled-envelope": 0, "pickled-payload": 0})
    # A wire name that is a module path: it names no queue, so nothing reads it at all.
    other = QueueKeys.for_type("aioqueue", f"{PROBE_MODULE}.system")
    await redis_client.hset(other.events, "p-1", orjson.dumps({**envelope, "version": 1}))

    recorder = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, recorder)

        async def all_settled() -> bool:
            dead = await redis_client.hlen(keys.dead_letters)
            return dead == 1 + 2 and await redis_client.hlen(keys.events) == 0

        await wait_until(all_settled)
        letters = {letter.id: letter for letter in await service.dead_letters(PaymentCheck)}
    assert sorted(letters) == ["pickled-envelope", "pickled-payload", "reduce"]
    assert "$.order_id: expected int, got object" in letters["reduce"].error
    delivered = {delivery.event.id: delivery.event for delivery in recorder.deliveries}
    assert delivered == {
        "class-path": PaymentCheck(id="class-path", order_id=1),
        "jsonpickle": PaymentCheck(id="jsonpickle", order_id=1),
    }
    assert letters["pickled-envelope"].error.startswith("envelope is not valid JSON")
    assert "payload is not valid JSON" in letters["pickled-payload"].error
    assert not imported_marker.exists()
    assert not unpickled_marker.exists()
    assert PROBE_MODULE not in sys.modules
    assert not [name for name in imported_names if PROBE_MODULE in name]
    assert await redis_client.hlen(other.events) == 1  # untouched: no service reads that name


async def test_a_binary_envelope_is_dead_lettered_and_listed(
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
    tmp_path: pathlib.Path,
) -> None:
    """Bytes that are not even UTF-8 where an envelope belongs must be buried as unreadable
    and still be listed by dead_letters(), never unpickled."""
    unpickled_marker = tmp_path / "pickle-loaded"
    keys = QueueKeys.for_type("aioqueue", "PaymentCheck")
    await redis_client.hset(keys.events, "binary", pickle.dumps(_PickleTrap(unpickled_marker)))
    await redis_client.zadd(keys.schedule, {"binary": 0})
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, Recorder())

        async def buried() -> bool:
            return await redis_client.hlen(keys.dead_letters) == 1

        await wait_until(buried)
    assert not unpickled_marker.exists()
    # Read by a service that is not running, so an error surfaces as itself, not in a group.
    [letter] = await service_builder().build().dead_letters(PaymentCheck)
    assert letter.id == "binary"
    assert letter.error.startswith("envelope is not valid JSON")


@dataclass
class Good(Event):
    id: str


@dataclass
class Poisoned(Event):
    id: str


@pytest.mark.parametrize("poison", ["minus-infinite-score", "schedule-is-a-string",
                                    "ready-is-a-hash"])  # fmt: skip
async def test_one_poisoned_type_never_stops_the_dispatch_of_the_others(
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
    caplog: pytest.LogCaptureFixture,
    poison: str,
) -> None:
    """A hostile writer spoils one type's keys; a healthy type handled by the same service
    still gets all its events, and a score that is no time goes to the dead letters."""
    caplog.set_level(logging.ERROR, logger="aioqueue")
    bad = QueueKeys.for_type("aioqueue", "Poisoned")
    if poison == "minus-infinite-score":
        await redis_client.hset(bad.events, "poison", '{"payload":"{}","version":1}')
        await redis_client.zadd(bad.schedule, {"poison": float("-inf")})
    elif poison == "schedule-is-a-string":
        await redis_client.set(bad.schedule, "x")
    else:
        await redis_client.hset(bad.ready, "not", "a list")
        await redis_client.hset(bad.events, "p-1", '{"payload":"{}","version":1,"attempt":0}')
        await redis_client.zadd(bad.schedule, {"p-1": 0})
    good = Recorder()
    async with service_builder().build() as service:
        service.add_handler(Poisoned, Recorder())
        service.add_handler(Good, good, parallelism=4)
        await service.enqueue_many([Good(id=f"g-{n}") for n in range(20)], 0)
        await good.wait_for(20)
        if poison == "minus-infinite-score":

            async def buried() -> bool:
                return await redis_client.hexists(bad.dead_letters, "poison")

            await wait_until(buried)
        else:
            # Set aside once its settings are recorded (dispatch takes nothing before), which
            # may come after the good type's events.
            async def set_aside() -> bool:
                return any("cannot dispatch Poisoned" in r.getMessage() for r in caplog.records)

            await wait_until(set_aside)
    assert sorted(good.ids) == sorted(f"g-{n}" for n in range(20))
    if poison == "minus-infinite-score":
        letter = orjson.loads(await redis_client.hget(bad.dead_letters, "poison") or b"{}")
        assert letter["error"] == "schedule score -inf is not a time in milliseconds"
        assert await redis_client.zcard(bad.schedule) == 0
    else:
        assert any("cannot dispatch Poisoned" in r.getMessage() for r in caplog.records)
