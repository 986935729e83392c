"""`aioqueue dead list|show|requeue|purge` and `aioqueue cancel`, by type name, for real."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import orjson
import redis.asyncio as redis

from aioqueue import Event, EventServiceBuilder
from aioqueue._admin.stats import read_stats
from tests.support.common import queue_key, wait_until
from tests.support.ops import run_cli, stored_envelope


@dataclass
class Invoice(Event):
    id: str
    amount: int


Builder = Callable[[], EventServiceBuilder]


async def make_dead_letters(
    builder: Builder, client: redis.Redis, count: int, partitions: int = 1
) -> None:
    """`count` Invoice dead letters, each killed by its handler on its only attempt."""

    async def reject(event: Invoice) -> bool:
        raise ValueError(f"card declined for {event.amount}")

    service = builder().retry_attempts(1).partitions(Invoice, partitions).build()
    async with service:
        service.add_handler(Invoice, reject, parallelism=16)
        await service.enqueue_many([Invoice(id=f"i-{n}", amount=n) for n in range(count)], 0)

        async def all_dead() -> bool:
            [invoices] = (await read_stats(client, "aioqueue", ["Invoice"])).queues
            return invoices.dead == count

        await wait_until(all_dead)


async def test_list_and_show(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    await make_dead_letters(service_builder, redis_client, 3)

    listing = await run_cli("dead", "list", "--url", redis_url, "--json")
    assert listing.returncode == 0, listing.stderr
    letters = listing.json()
    assert sorted(letter["id"] for letter in letters) == ["i-0", "i-1", "i-2"]
    first = next(letter for letter in letters if letter["id"] == "i-1")
    assert first["type"] == "Invoice"
    assert first["error"] == "attempt 1 raised ValueError: card declined for 1"
    assert first["attempts"] == 1
    assert orjson.loads(first["payload"]) == {"amount": 1}

    text = await run_cli("dead", "list", "Invoice", "--url", redis_url)
    assert text.stdout.splitlines()[0].split()[:4] == ["TYPE", "ID", "ATTEMPTS", "DIED"]
    assert "attempt 1 raised ValueError: card declined for 2" in text.stdout

    shown = await run_cli("dead", "show", "Invoice", "i-2", "--url", redis_url, "--json")
    assert shown.json()["error"] == "attempt 1 raised ValueError: card declined for 2"
    shown_text = await run_cli("dead", "show", "Invoice", "i-2", "--url", redis_url)
    assert 'payload:  {"amount":2}' in shown_text.stdout

    missing = await run_cli("dead", "show", "Invoice", "nope", "--url", redis_url)
    assert missing.returncode == 1
    assert "no dead letter Invoice 'nope'" in missing.stderr


async def test_requeue_one_resets_its_attempts(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    await make_dead_letters(service_builder, redis_client, 2)

    result = await run_cli("dead", "requeue", "Invoice", "i-0", "--url", redis_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1 requeued"
    envelope = await stored_envelope(redis_client, "Invoice", "i-0")
    assert envelope.get("attempt", 0) == 0
    assert "error" not in envelope
    assert orjson.loads(envelope["p"]) == {"amount": 0}
    assert await redis_client.hexists(queue_key("Invoice", "dead_letters"), "i-0") == 0
    assert await redis_client.zscore(queue_key("Invoice", "schedule"), "i-0") is not None

    again = await run_cli("dead", "requeue", "Invoice", "i-0", "--url", redis_url, "--json")
    assert again.returncode == 1
    assert again.json() == {"requeued": 0, "missing": 1, "pending": 0, "unreadable": 0}


async def test_bulk_operations_need_yes_without_a_terminal(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    await make_dead_letters(service_builder, redis_client, 60, partitions=3)

    async def dead_count() -> int:
        [invoices] = (await read_stats(redis_client, "aioqueue", ["Invoice"])).queues
        return invoices.dead

    refused = await run_cli("dead", "requeue", "Invoice", "--all", "--url", redis_url)
    assert refused.returncode == 1
    assert "Requeue 60 dead letters of Invoice?" in refused.stderr
    assert "no terminal to ask on; pass --yes" in refused.stderr
    assert await dead_count() == 60

    # A "y" piped in is not a terminal's answer: still refused.
    piped = await run_cli("dead", "purge", "--all", "--url", redis_url, stdin=b"y\n")
    assert piped.returncode == 1
    assert await dead_count() == 60

    purged = await run_cli("dead", "purge", "Invoice", "i-5", "i-6", "--yes", "--url", redis_url)
    assert purged.stdout.strip() == "2 dead letters purged"
    assert await dead_count() == 58

    requeued = await run_cli("dead", "requeue", "Invoice", "--all", "--yes", "--url", redis_url)
    assert requeued.returncode == 0, requeued.stderr
    assert requeued.stdout.strip() == "58 requeued"
    assert "requeued 58/58" in requeued.stderr  # the progress bar (one line per 10 %)
    [invoices] = (await read_stats(redis_client, "aioqueue", ["Invoice"])).queues
    assert (invoices.dead, invoices.pending, invoices.partitions) == (0, 58, 3)


async def test_purge_all_types(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    await make_dead_letters(service_builder, redis_client, 4)
    result = await run_cli("dead", "purge", "--all", "--yes", "--json", "--url", redis_url)
    assert result.json() == {"purged": 4}
    assert await redis_client.hlen(queue_key("Invoice", "dead_letters")) == 0
    assert await redis_client.zcard(queue_key("Invoice", "dead_letter_times")) == 0

    nothing = await run_cli("dead", "list", "--json", "--url", redis_url)
    assert nothing.json() == []


async def test_cancel_by_type_name(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    service = service_builder().partitions(Invoice, 4).build()
    async with service:
        await service.enqueue(Invoice(id="i-9", amount=9), timedelta(hours=1))

    cancelled = await run_cli("cancel", "Invoice", "i-9", "--url", redis_url, "--json")
    assert cancelled.json() == {"cancelled": True}
    [invoices] = (await read_stats(redis_client, "aioqueue", ["Invoice"])).queues
    assert invoices.pending == 0

    again = await run_cli("cancel", "Invoice", "i-9", "--url", redis_url)
    assert again.returncode == 1
    assert "no pending Invoice 'i-9'" in again.stderr


async def test_usage_errors(redis_url: str) -> None:
    both = await run_cli("dead", "purge", "Invoice", "i-1", "--all", "--url", redis_url)
    assert both.returncode == 1
    assert "give ids or --all, not both" in both.stderr
    bare = await run_cli("dead", "requeue", "Invoice", "--url", redis_url)
    assert "give the ids of the Invoice dead letters, or --all" in bare.stderr
    prefix = await run_cli("stats", "--prefix", "a{b}")
    assert prefix.returncode == 2
    assert "must be 1-64 characters" in prefix.stderr
