"""The operator side of schedules: `aioqueue schedules [remove]` and `/schedules`, for real."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest

from aioqueue import EventServiceBuilder
from aioqueue.testing import EmbeddedServer
from tests.support.common import wait_until
from tests.support.ops import ServedApp, api_client, run_cli, serve
from tests.support.workers.schedule_worker import Beat, beat

Builder = Callable[[], EventServiceBuilder]


@pytest.fixture(scope="module")
def app(redis_server: EmbeddedServer) -> Iterator[ServedApp]:
    with serve(redis_server.url) as served:
        yield served


async def declare_two(service_builder: Builder) -> None:
    """A nightly cron schedule and a 30 s interval, declared by a service that then stops."""
    service = service_builder().build()
    service.add_schedule("nightly", cron="0 3 * * *", tz="Europe/Paris", event=beat)
    service.add_schedule("pulse", every=30, event=beat)
    async with service:

        async def both_pending() -> bool:
            return len((await service.pending(Beat)).events) == 2

        await wait_until(both_pending)


@pytest.mark.backends("standalone", "cluster")
async def test_cli_lists_and_removes_schedules(service_builder: Builder, redis_url: str) -> None:
    await declare_two(service_builder)
    listing = await run_cli("schedules", "--url", redis_url, "--json")
    assert listing.returncode == 0, listing.stderr
    nightly, pulse = listing.json()
    assert (nightly["name"], nightly["type"], nightly["spec"], nightly["tz"]) == (
        "nightly", "Beat", "0 3 * * *", "Europe/Paris",
    )  # fmt: skip
    assert nightly["next_tick"].endswith(("+01:00", "+02:00"))
    assert "T03:00:00" in nightly["next_tick"]
    assert pulse["spec"] == "every 30 s"
    # No tick has come yet, unless the listing ran past the first one (ticks are on a 30 s
    # grid, so a declaration just before a boundary sees it pass): then that tick is the
    # last one and the next follows it by 30 s.
    if pulse["last_tick"] is not None:
        last, upcoming = (datetime.fromisoformat(pulse[k]) for k in ("last_tick", "next_tick"))
        assert upcoming - last == timedelta(seconds=30)
    table = await run_cli("schedules", "--url", redis_url)
    assert "NEXT TICK" in table.stdout
    assert "nightly" in table.stdout

    removed = await run_cli("schedules", "remove", "nightly", "--url", redis_url)
    assert removed.returncode == 0, removed.stderr
    again = await run_cli("schedules", "remove", "nightly", "--url", redis_url)
    assert again.returncode == 1
    assert "no schedule 'nightly'" in again.stderr
    left = await run_cli("schedules", "--url", redis_url, "--json")
    assert [info["name"] for info in left.json()] == ["pulse"]


async def test_http_lists_and_removes_schedules(
    app: ServedApp, service_builder: Builder, redis_backend: str
) -> None:
    await declare_two(service_builder)
    async with api_client(app.base_url) as http:
        listing = await http.get("/schedules")
        assert listing.status_code == 200, listing.text
        assert [s["name"] for s in listing.json()["schedules"]] == ["nightly", "pulse"]
        assert (await http.delete("/schedules/pulse")).json() == {"name": "pulse",
                                                                   "removed": True}  # fmt: skip
        assert (await http.delete("/schedules/pulse")).status_code == 404
        after = await http.get("/schedules")
        assert [s["name"] for s in after.json()["schedules"]] == ["nightly"]
