"""ErrorBackoff: the sleeps of a streak of errors double from FIRST up to CAP, each drawn
from the upper half of its bound, and a success starts the next streak at FIRST again (the
loops' only pause between failed Redis calls)."""

from __future__ import annotations

import logging

import pytest

from aioqueue._engine.recovery import ErrorBackoff


class QuickBackoff(ErrorBackoff):
    """The same rules at a smaller scale, so that the test sleeps about 0.15 s."""

    FIRST = 0.01
    CAP = 0.04


async def test_the_sleeps_double_up_to_the_cap_and_a_success_starts_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backoff = QuickBackoff("taking PaymentCheck events")
    with caplog.at_level(logging.WARNING, logger="aioqueue"):
        for _ in range(4):
            await backoff.sleep_after(ConnectionError("refused"))
        backoff.reset()
        await backoff.sleep_after(ConnectionError("refused"))

    said = [record.getMessage() for record in caplog.records]
    sleeps = [float(message.rsplit("retrying in ", 1)[1].removesuffix(" s")) for message in said]
    # Each sleep is in the upper half of its bound: 0.01, 0.02, 0.04 (the cap), 0.04, and
    # 0.01 again after the success.
    for sleep, bound in zip(sleeps, [0.01, 0.02, 0.04, 0.04, 0.01], strict=True):
        assert bound / 2 <= sleep <= bound
    assert said[0].startswith("taking PaymentCheck events failed (ConnectionError: refused)")
    # The first error of each streak carries its traceback, the rest of the streak one line.
    assert [record.exc_info is not None for record in caplog.records] == [
        True, False, False, False, True,
    ]  # fmt: skip


async def test_sleeps_of_the_same_bound_differ(caplog: pytest.LogCaptureFixture) -> None:
    """Workers that lost the same server must not all try it again in the same instant."""
    with caplog.at_level(logging.WARNING, logger="aioqueue"):
        for _ in range(20):
            await QuickBackoff("dispatching").sleep_after(ConnectionError("refused"))
    sleeps = {message.rsplit("retrying in ", 1)[1] for message in caplog.messages}
    # 20 draws from [5, 10] ms, printed to the millisecond (5 or 6 values): all 20 alike has
    # odds below 1e-12.
    assert len(sleeps) > 1
