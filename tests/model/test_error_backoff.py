"""ErrorBackoff: the sleeps of a streak of errors double from FIRST up to CAP, each drawn
from the upper half of its bound, and a success starts the next streak at FIRST again (the
loops' only pause between failed Redis calls); a warning is one line, at most one per cause
every WARN_EVERY seconds whatever number of loops meet it, the traceback at DEBUG."""

from __future__ import annotations

import logging
import uuid

import pytest

from aioqueue._transport import recovery
from aioqueue._transport.recovery import WARN_EVERY, ErrorBackoff


class QuickBackoff(ErrorBackoff):
    """The same rules at a smaller scale, so that the test sleeps about 0.15 s."""

    FIRST = 0.01
    CAP = 0.04


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The sleeps ErrorBackoff asks for, noted instead of slept."""
    asked: list[float] = []

    async def note(seconds: float) -> None:
        asked.append(seconds)

    monkeypatch.setattr("aioqueue._transport.recovery.anyio.sleep", note)
    return asked


def cause() -> ConnectionError:
    """An error whose text no other test's error has (the warnings are counted per cause)."""
    return ConnectionError(f"refused ({uuid.uuid4().hex[:8]})")


async def test_the_sleeps_double_up_to_the_cap_and_a_success_starts_over(
    sleeps: list[float],
) -> None:
    backoff = QuickBackoff("taking PaymentCheck events")
    for _ in range(4):
        await backoff.sleep_after(cause())
    backoff.reset()
    await backoff.sleep_after(cause())
    # Each sleep is in the upper half of its bound: 0.01, 0.02, 0.04 (the cap), 0.04, and
    # 0.01 again after the success.
    for sleep, bound in zip(sleeps, [0.01, 0.02, 0.04, 0.04, 0.01], strict=True):
        assert bound / 2 <= sleep <= bound


async def test_sleeps_of_the_same_bound_differ(sleeps: list[float]) -> None:
    """Workers that lost the same server must not all try it again in the same instant."""
    for _ in range(20):
        await QuickBackoff("dispatching").sleep_after(cause())
    # 20 draws from [5, 10] ms: all 20 alike has odds of about nil.
    assert len(set(sleeps)) > 1


async def test_one_cause_is_one_warning_whatever_the_number_of_loops(
    sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """300 loops meet the same error (a server that is down, a pool too small), each twice:
    one warning line, without a traceback, which goes to DEBUG with every failure; another
    cause has a warning of its own."""
    refused = cause()
    with caplog.at_level(logging.DEBUG, logger="aioqueue"):
        loops = [QuickBackoff(f"taking T{n} events") for n in range(300)]
        for _ in range(2):
            for loop in loops:
                await loop.sleep_after(refused)
        await QuickBackoff("dispatching").sleep_after(cause())
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert [record.getMessage().split(" failed ")[0] for record in warnings] == [
        "taking T0 events",
        "dispatching",
    ]
    assert f"ConnectionError: {refused}" in warnings[0].getMessage()
    assert all(record.exc_info is None for record in warnings)
    tracebacks = [record for record in caplog.records if record.levelno == logging.DEBUG]
    assert len(tracebacks) == 601
    assert all(record.exc_info is not None for record in tracebacks)


async def test_a_cause_is_warned_of_again_after_a_while_with_the_count_held_back(
    sleeps: list[float], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = cause()
    now = [1000.0]
    monkeypatch.setattr(recovery, "causes", recovery.Causes(clock=lambda: now[0]))
    with caplog.at_level(logging.WARNING, logger="aioqueue"):
        for _ in range(5):
            await QuickBackoff("dispatching").sleep_after(refused)
        now[0] += WARN_EVERY
        await QuickBackoff("dispatching").sleep_after(refused)
    assert len(caplog.records) == 2
    assert caplog.records[1].getMessage().endswith("(4 more like it not shown)")
