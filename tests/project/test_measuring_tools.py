"""The measuring tools of benchmarks/ that docs/benchmarks.md quotes (lease_floor.py,
call_costs.py, script_text.py, script_ab.py), run small against real servers: each still
runs on the current scripts, and the checks that keep its figures honest (every event
taken once and none left, every script call counted, every delivery recognised) still
catch what they are there for. The figures themselves are the tools' business, never a
test's."""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from types import ModuleType

import pytest
import redis.asyncio

from aioqueue._wire.functions import LIBRARY, _script_names, library_source
from tests.conftest import ServerFactory
from tests.support.benchmark_scripts import import_benchmark_script

# A figure in a tool's table: a number with its unit.
FIGURE = r"\d[\d,]*\.\d+ µs"


@pytest.fixture
def benchmarks(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """Imports a script of benchmarks/ by name."""
    return functools.partial(import_benchmark_script, monkeypatch)


async def test_every_lease_floor_shape_takes_each_event_once_and_leaves_none(
    benchmarks: Callable[[str], ModuleType], redis_url: str
) -> None:
    lease_floor = benchmarks("lease_floor")
    # Two full batches and a part of one: drain() raises when a batch comes back empty,
    # incomplete or with an event taken before, or when anything is left at the end.
    for shape in lease_floor.SHAPES:
        assert await lease_floor.drain(redis_url, shape, 1_200) > 0, shape.name


async def test_lease_floor_refuses_a_shape_that_leaves_events_behind(
    benchmarks: Callable[[str], ModuleType], redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease_floor = benchmarks("lease_floor")
    # An acknowledgement that deletes nothing: its shape would look cheaper than it is.
    monkeypatch.setattr(lease_floor, "ACKNOWLEDGE", "return #ARGV")
    with pytest.raises(RuntimeError, match="events were left behind"):
        await lease_floor.drain(redis_url, lease_floor.SHAPES[0], 600)


async def test_call_costs_prints_every_figure(
    benchmarks: Callable[[str], ModuleType], redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    call_costs = benchmarks("call_costs")
    await call_costs.measure(redis_url, 20, 1)
    table = capsys.readouterr().out.splitlines()
    rows = table[1:]
    expected = [
        *(f"claim of {size}, acknowledging {size}" for size in call_costs.SIZES),
        *(f"dispatch of {size}" for size in call_costs.DISPATCH_SIZES),
        "claim, nothing in the ready list",
        "dispatch, nothing due",
        "a function that does nothing, given claim's keys",
    ]
    for name in expected:
        row = next((row for row in rows if row.strip().startswith(name)), None)
        assert row is not None, f"no row {name!r} in {table}"
        assert re.search(rf"{FIGURE} a call", row), row
    # Claims and dispatches of events give a figure per event too; the receipt's cost is
    # the pair of claims with and without one.
    assert all(re.search(rf"{FIGURE} an event", row) for row in rows if " of " in row)
    assert sum("no receipt" in row for row in rows) == len(call_costs.SIZES)


async def test_call_costs_refuses_to_time_what_is_no_script_call(
    benchmarks: Callable[[str], ModuleType], redis_client: redis.asyncio.Redis
) -> None:
    call_costs = benchmarks("call_costs")
    ping: Callable[[], Awaitable[object]] = redis_client.ping
    with pytest.raises(RuntimeError, match="counted 0 script calls instead of 3"):
        await call_costs.script_usec(redis_client, 3, ping)


async def test_script_text_recognises_every_delivery_each_way(
    benchmarks: Callable[[str], ModuleType], redis_url: str
) -> None:
    script_text = benchmarks("script_text")
    # measure() raises unless each way found all 500 deliveries current, every loop.
    _, results = await script_text.measure(redis_url, 2, 1)
    assert set(results) == set(script_text.WAYS)
    assert all(len(figures) == 1 and figures[0] > 0 for figures in results.values())


async def test_script_ab_takes_turns_between_two_libraries(
    benchmarks: Callable[[str], ModuleType],
    server_factory: ServerFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    script_ab = benchmarks("script_ab")
    # The current library beside a copy under another name: two sides whose scripts differ
    # only by name, each claiming what both dispatch. A server of its own: the tool logs
    # every command in SLOWLOG.
    copy = "aioqueue_measuring_tools_copy"
    names = {
        "base": (LIBRARY.name, LIBRARY.source),
        "head": (copy, library_source(_script_names(), copy)),
    }
    # measure() raises unless SLOWLOG holds every call it made.
    await script_ab.measure(server_factory().url, names, 4_000, 500)
    table = capsys.readouterr().out
    for script in script_ab.SCRIPTS:
        row = re.search(
            rf"^  {script} +base .* head/base \d\.\d+ +\((\d+) and (\d+) calls\)", table, re.M
        )
        assert row is not None, table
        # 4,000 events in batches of 500, the sides taking turns: four full batches each.
        assert (row[1], row[2]) == ("4", "4"), table
    assert re.search(r"both +head/base \d\.\d+", table), table


def test_script_ab_refuses_two_revisions_with_the_same_scripts(
    benchmarks: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    script_ab = benchmarks("script_ab")
    assert script_ab.main(["HEAD", "--head", "HEAD"]) == 1
    assert "the two revisions' scripts are the same" in capsys.readouterr().err
