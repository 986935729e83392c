"""ErrorBackoff: the sleeps of a streak of errors double from FIRST up to CAP, and a success
starts the next streak at FIRST again (the loops' only pause between failed Redis calls)."""

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
    assert [message.rsplit("retrying in ", 1)[1] for message in said] == [
        "0.01 s", "0.02 s", "0.04 s", "0.04 s", "0.01 s",
    ]  # fmt: skip
    assert said[0].startswith("taking PaymentCheck events failed (ConnectionError: refused)")
    # The first error of each streak carries its traceback, the rest of the streak one line.
    assert [record.exc_info is not None for record in caplog.records] == [
        True, False, False, False, True,
    ]  # fmt: skip
