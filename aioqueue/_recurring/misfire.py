"""Which ticks a keeper produces next, missed ones included (the schedule's `misfire` policy).

Ticks are missed while no service keeps a schedule: the record's latest tick lies more than
one interval in the past when a keeper next reads it. The policy decides what runs then:
`skip` (only the next future tick), `once` (the latest missed tick, now) or `all` (the latest
`max_catch_up` missed ticks). The missed ticks are found by walking back from now, never by
counting forward from the last tick: a downtime of fourteen days at one tick a second is
1.2 million ticks, and the work must not grow with it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from .spec import ScheduleSpec

__all__ = ["Misfire", "TickPlan", "ticks_to_produce"]

Misfire = Literal["skip", "once", "all"]


@dataclass(frozen=True, slots=True)
class TickPlan:
    ticks: list[int]
    """The ticks to produce, in order (epoch ms)."""
    dropped_missed: bool = False
    """More than max_catch_up ticks were missed: the older ones are left out."""


def ticks_to_produce(
    spec: ScheduleSpec, last: int | None, now: int, misfire: Misfire, max_catch_up: int
) -> TickPlan:
    """The ticks to produce after `last` (the latest produced, None before the first) at
    server time `now`: the next tick when none was missed, else what `misfire` says."""
    if last is None:
        return TickPlan([next(spec.ticks_after(now))])
    upcoming = next(spec.ticks_after(last))
    if upcoming > now:
        return TickPlan([upcoming])
    if misfire == "skip":
        return TickPlan([next(spec.ticks_after(now))])
    # The latest missed ticks, newest first: one more than wanted tells whether any older one
    # is left out.
    wanted = 1 if misfire == "once" else max_catch_up
    newest_first = list(
        itertools.islice(
            itertools.takewhile(lambda tick: tick > last, spec.ticks_back_from(now)), wanted + 1
        )
    )
    if not newest_first:
        # Only if walking back disagreed with walking forward (cronsim follows one DST rule
        # both ways): the first missed tick is still a tick.
        return TickPlan([upcoming])
    return TickPlan(
        ticks=sorted(newest_first[:wanted]),
        dropped_missed=misfire == "all" and len(newest_first) > wanted,
    )
