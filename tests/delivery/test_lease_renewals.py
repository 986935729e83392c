"""A failed lease renewal is tried again as soon as its backoff allows, not a renewal period
later: the leases are running out (two renewals lost in a row used to let a live worker's
leases lapse)."""

from __future__ import annotations

import logging
import time

import anyio
import pytest

from aioqueue._delivery.leases import RENEWALS_PER_LEASE, Leases
from aioqueue._transport.client import RedisClient

LEASE_MS = 3000
PERIOD = LEASE_MS / 1000 / RENEWALS_PER_LEASE


class FailingFirst(Leases):
    """Leases whose first renewal meets a real error of the server (an unknown command), and
    which note when each renewal was tried."""

    def __init__(self, client: RedisClient) -> None:
        super().__init__(client, LEASE_MS)
        self.tried: list[float] = []
        self.second = anyio.Event()

    async def renew(self) -> None:
        self.tried.append(time.monotonic())
        if len(self.tried) == 1:
            await self._client.execute_command("AIOQUEUE-NO-SUCH-COMMAND")
        self.second.set()


async def test_a_failed_renewal_is_tried_again_within_its_backoff(
    redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aioqueue")
    leases = FailingFirst(redis_client)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(leases.run)
        with anyio.fail_after(PERIOD * 3):
            await leases.second.wait()
        tasks.cancel_scope.cancel()
    first, second = leases.tried[:2]
    # The first backoff is at most 50 ms; a period later would be PERIOD (1 s) or more.
    assert second - first < PERIOD / 2, leases.tried
    # The first try met the server's error, and the loop said so.
    assert any(
        "renewing leases failed (ResponseError" in record.getMessage() for record in caplog.records
    ), caplog.text
