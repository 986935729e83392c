"""What a schedule's ticks are: a cron expression in a time zone, or a fixed interval.

Cron expressions are evaluated by cronsim, which follows Debian's cron in DST transitions
(a daily job in the skipped hour runs once, right after the jump; one in the repeated hour
runs once, at its first occurrence); time zones come from zoneinfo. Intervals are anchored
to the Unix epoch, so every service computes the same ticks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from aioqueue._model.durations import Duration, to_seconds
from aioqueue._model.errors import ConfigurationError

__all__ = ["ScheduleSpec"]


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A schedule's ticks. `key` is how Redis stores it, and what two services compare."""

    cron: str | None
    every_ms: int | None
    tz: str

    @classmethod
    def of(cls, *, cron: str | None, every: Duration | None, tz: str) -> ScheduleSpec:
        """Validates a declaration; raises ConfigurationError saying what is wrong."""
        if (cron is None) == (every is None):
            raise ConfigurationError("give exactly one of cron= and every=")
        _zone(tz)
        if cron is not None:
            cron = " ".join(str(cron).split())
            try:
                CronSim(cron, datetime.now(timezone.utc))
            except CronSimError as exc:
                raise ConfigurationError(f"invalid cron expression {cron!r}: {exc}") from exc
            return cls(cron=cron, every_ms=None, tz=tz)
        assert every is not None
        try:
            milliseconds = round(to_seconds(every, "every") * 1000)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(str(exc)) from exc
        if milliseconds < 10:
            raise ConfigurationError(f"every= must be at least 10 ms, got {every!r}")
        return cls(cron=None, every_ms=milliseconds, tz=tz)

    @classmethod
    def from_key(cls, key: str) -> ScheduleSpec:
        """The spec a stored key names (written by any service, so it is checked again)."""
        kind, _, rest = key.partition(" ")
        body, _, tz = rest.rpartition(" ")
        if kind == "every" and body.isdigit():
            return cls.of(cron=None, every=timedelta(milliseconds=int(body)), tz=tz)
        if kind == "cron" and body:
            return cls.of(cron=body, every=None, tz=tz)
        raise ConfigurationError(f"not a schedule spec: {key!r}")

    @property
    def key(self) -> str:
        return f"cron {self.cron} {self.tz}" if self.cron else f"every {self.every_ms} {self.tz}"

    def describe(self) -> str:
        """For people: the cron expression, or the interval in seconds."""
        if self.cron is not None:
            return self.cron
        assert self.every_ms is not None
        return f"every {self.every_ms / 1000:g} s"

    def tick_time(self, tick_ms: int) -> datetime:
        """The tick as an aware datetime in the schedule's time zone."""
        return datetime.fromtimestamp(tick_ms / 1000, _zone(self.tz))

    def ticks_after(self, after_ms: int) -> Iterator[int]:
        """Ticks (epoch ms) strictly after `after_ms`, in order."""
        if self.every_ms is not None:
            tick = (after_ms // self.every_ms + 1) * self.every_ms
            while True:
                yield tick
                tick += self.every_ms
        assert self.cron is not None
        for moment in CronSim(self.cron, self.tick_time(after_ms)):
            yield round(moment.timestamp() * 1000)

    def latest_at_or_before(self, at_ms: int) -> int | None:
        """The last tick at or before `at_ms` (None if none in cronsim's 50-year reach)."""
        return next(self.ticks_back_from(at_ms), None)

    def ticks_back_from(self, at_ms: int) -> Iterator[int]:
        """Ticks (epoch ms) at or before `at_ms`, newest first: the way to the latest missed
        ticks costs as many steps as ticks wanted, however long ago the last one was."""
        if self.every_ms is not None:
            tick = at_ms // self.every_ms * self.every_ms
            while True:
                yield tick
                tick -= self.every_ms
        assert self.cron is not None
        # cronsim walks back with the same DST rules as forward (checked on both change days
        # of Europe/Paris in tests/recurring/test_catch_up.py).
        for moment in CronSim(self.cron, self.tick_time(at_ms + 1), reverse=True):
            yield round(moment.timestamp() * 1000)


def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ConfigurationError(
            f"unknown time zone {tz!r} (an IANA name such as 'Europe/Paris'; on systems "
            "without a time zone database, install tzdata)"
        ) from exc
