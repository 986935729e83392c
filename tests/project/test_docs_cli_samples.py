"""The `aioqueue` samples in the docs are the command's real output, so they cannot go stale.

A sample is a `console` block whose first line is `$ aioqueue ...`. For each one a scenario
below puts queues in the state the page describes, under a prefix of its own; the command
then runs against the session's server (AIOQUEUE_URL and AIOQUEUE_PREFIX, 100 columns), and
its output must be the block's. Times of day and durations (when a schema was published, how
long the oldest event has waited) differ on every run, so they, and the column padding that
follows their width, are compared as placeholders. A sample without a scenario fails: add one.

`AIOQUEUE_REGENERATE_DOCS=1 ./dev test tests/project/test_docs_cli_samples.py` writes the current
output into the pages instead, for a change to the command's output.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TypeAlias

import anyio
import pytest
import redis.asyncio as redis

from aioqueue import Event, EventServiceBuilder
from aioqueue._admin.stats import read_stats
from tests.support.common import wait_until
from tests.support.docs_blocks import Block, blocks, documents, python_examples

Builder = Callable[[], EventServiceBuilder]
# A scenario gets a builder of services on the server, a client of it and its URL, fills a
# prefix of its own and yields that prefix for as long as the command runs.
Scenario: TypeAlias = Callable[
    [Builder, redis.Redis, str], contextlib.AbstractAsyncContextManager[str]
]


def samples() -> list[Block]:
    return [
        block
        for path in documents()
        for block in blocks(path)
        if block.language == "console" and block.code.startswith("$ aioqueue ")
    ]


def comparable(output: str) -> list[str]:
    """Output with times of day and durations as placeholders and runs of spaces as one."""
    output = re.sub(
        r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?", "<time>", output
    )
    output = re.sub(r"\b\d+(\.\d+)? (ms|s|min)\b", "<duration>", output)
    return [re.sub(r" +", " ", line).rstrip() for line in output.splitlines()]


# -- the scenarios -------------------------------------------------------------------------


@dataclass
class PaymentCheck(Event):
    id: str
    order_id: int


@dataclass
class OrderTimeout(Event):
    id: str
    order_id: int


@contextlib.asynccontextmanager
async def nothing(builder: Builder, client: redis.Redis, url: str) -> AsyncIterator[str]:
    yield "cli-help"


@contextlib.asynccontextmanager
async def two_busy_types(builder: Builder, client: redis.Redis, url: str) -> AsyncIterator[str]:
    """PaymentCheck: 12 dead letters, 287 checks an hour ahead, 6 due ones of which a
    rate-limited service holds 2 in its handlers and 4 wait in the ready list.
    OrderTimeout: paused, with 140 timeouts due and 2 ahead."""
    prefix = "cli-stats"
    failing = builder().prefix(prefix).retry_attempts(1).build()

    async def decline(event: PaymentCheck) -> bool:
        return False

    async with failing:
        failing.add_handler(PaymentCheck, decline)
        await failing.enqueue_many([PaymentCheck(id=f"d-{n}", order_id=n) for n in range(12)], 0)
        await wait_until(counted(client, prefix, "PaymentCheck", dead=12))

    release = anyio.Event()

    async def hold(event: PaymentCheck) -> bool:
        await release.wait()
        return True

    # A lease and a handler timeout longer than the command can take to start on a loaded
    # machine: the 4 waiting in the ready list stay there, rather than come due again when
    # their unclaimed lease (5 s by default) runs out and show as due now for a scheduling
    # interval, and the 2 held stay in their handlers, rather than time out (the suite's
    # services give a handler 1 s) and go back to the schedule for their retry.
    held = (
        builder()
        .prefix(prefix)
        .rate_limit(PaymentCheck, 100, per=1)
        .lease(600)
        .handler_timeout(600)
        .build()
    )
    async with held:
        await held.pause(OrderTimeout)
        await held.enqueue_many([OrderTimeout(id=f"t-{n}", order_id=n) for n in range(140)], 0)
        await held.enqueue_many([OrderTimeout(id=f"t-{n}", order_id=n) for n in (140, 141)], 60)
        later = [PaymentCheck(id=f"p-{n}", order_id=n) for n in range(287)]
        await held.enqueue_many(later, timedelta(hours=1))
        held.add_handler(PaymentCheck, hold, parallelism=2)
        await held.enqueue_many([PaymentCheck(id=f"n-{n}", order_id=n) for n in range(6)], 0)
        await wait_until(counted(client, prefix, "PaymentCheck", in_flight=2, ready=4))
        yield prefix
        release.set()


@contextlib.asynccontextmanager
async def a_page_of_checks(builder: Builder, client: redis.Redis, url: str) -> AsyncIterator[str]:
    prefix = "cli-events"
    async with builder().prefix(prefix).build() as service:
        first = datetime(2030, 1, 1, 9, 0, tzinfo=timezone.utc)
        for n in range(5):
            check = PaymentCheck(id=f"p-{n}", order_id=n)
            await service.enqueue(check, at=first + timedelta(minutes=30 * n))
    yield prefix


@contextlib.asynccontextmanager
async def the_typed_events_example(
    builder: Builder, client: redis.Redis, url: str
) -> AsyncIterator[str]:
    """The Invoice of the typed-events guide, published by the guide's own example."""
    prefix = "typed-events"
    [example] = [e for e in python_examples() if e.block.prefixes == {prefix}]
    result = await anyio.run_process(
        [sys.executable, "-c", example.block.code],
        env={**os.environ, "AIOQUEUE_URL": url},
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    yield prefix


def counted(
    client: redis.Redis, prefix: str, event_type: str, **wanted: int
) -> Callable[[], Awaitable[bool]]:
    """Whether the type's `stats` numbers are the wanted ones yet."""

    async def check() -> bool:
        [queue] = (await read_stats(client, prefix, [event_type])).queues
        return all(getattr(queue, name) == value for name, value in wanted.items())

    return check


SCENARIOS: dict[str, Scenario] = {
    "aioqueue --help": nothing,
    "aioqueue stats": two_busy_types,
    "aioqueue events list PaymentCheck --limit 3": a_page_of_checks,
    "aioqueue schema Invoice": the_typed_events_example,
}


# -- the tests -----------------------------------------------------------------------------


def test_every_sample_has_a_scenario() -> None:
    commands = [block.code.splitlines()[0].removeprefix("$ ") for block in samples()]
    assert {"aioqueue stats", "aioqueue schema Invoice"} <= set(commands)
    assert [command for command in commands if command not in SCENARIOS] == []


def test_the_comparison_keeps_what_matters() -> None:
    # Counts and names must still differ after the placeholders, or every sample passes.
    assert comparable("PaymentCheck  1  293  9.4 s") != comparable("PaymentCheck  1  292  12 ms")
    assert comparable("published 2026-11-25 16:47:57Z") == comparable(
        "published 2030-01-01 00:00:00Z"
    )


@pytest.mark.parametrize("sample", samples(), ids=lambda block: block.where)
async def test_the_sample_is_the_commands_output(
    sample: Block,
    redis_url: str,
    redis_client: redis.Redis,
    service_builder: Builder,
) -> None:
    command, *shown = sample.code.rstrip("\n").split("\n")
    scenario = SCENARIOS[command.removeprefix("$ ")]
    async with scenario(service_builder, redis_client, redis_url) as prefix:
        result = await anyio.run_process(
            [sys.executable, "-m", "aioqueue", *command.split()[2:]],
            env={**os.environ, "AIOQUEUE_URL": redis_url, "AIOQUEUE_PREFIX": prefix,
                 "COLUMNS": "100"},
            check=False,
        )  # fmt: skip
    output = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    if os.environ.get("AIOQUEUE_REGENERATE_DOCS") == "1":
        _rewrite(sample, command, output)
        return
    assert comparable("\n".join(shown)) == comparable(output), (
        f"{sample.where} shows other output than `{command}` prints now:\n{output}"
    )


def _rewrite(sample: Block, command: str, output: str) -> None:
    text = sample.path.read_text()
    old = "```console\n" + sample.code + "```"
    assert old in text, sample.where
    sample.path.write_text(text.replace(old, f"```console\n{command}\n{output}```", 1))
