"""The browse operation of tests/support/queue_model.py: a walk through pending(), one page at a
time, with the model's other operations running between its pages.

A walk begins with a first page; after every later step of the sequence the model takes its
next page, until one has no next cursor. The model notes each event that an operation writes,
moves or removes while the walk goes on. When the walk ends: no event was listed twice, and
every event that was pending (and in the schedule) at the first page and that no operation
touched since is listed. Each page lists only events the model has pending there, with the
attempt the model knows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aioqueue._wire.browse import pending_page

if TYPE_CHECKING:
    from tests.support.queue_model import QueueModel


@dataclass
class Walk:
    page_size: int
    pending_at_start: set[str]
    """Events pending and in the schedule (not parked) when the first page was taken."""
    cursor: str | None = None
    listed: list[str] = field(default_factory=list)
    moved: set[str] = field(default_factory=set)
    """Events written, moved or removed since the first page: the walk may miss them."""


def take_page(model: QueueModel, walk: Walk) -> bool:
    """Takes the walk's next page and checks it; True when it was the last one (the walk's
    promises are then checked too)."""
    from tests.support.queue_model_state import LAYOUT

    page = model.run(pending_page(model.client, LAYOUT, limit=walk.page_size, cursor=walk.cursor))
    for listed in page.events:
        event = model.pending.get(listed.id)
        assert event is not None, f"{listed.id} is listed but not pending"
        assert not event.parked, f"{listed.id} is listed while parked"
        assert listed.attempt == event.attempt
        walk.listed.append(listed.id)
    if page.next_cursor is not None:
        walk.cursor = page.next_cursor
        return False
    twice = [event_id for event_id, count in Counter(walk.listed).items() if count > 1]
    assert twice == [], f"one walk listed {twice} twice"
    stayed = walk.pending_at_start - walk.moved
    assert stayed <= set(walk.listed), f"{stayed - set(walk.listed)} stayed but were missed"
    return True
