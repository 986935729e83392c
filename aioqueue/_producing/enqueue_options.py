"""The keywords of every enqueue, declared once (EnqueueOptions), and read once into a checked
EnqueueRequest: when the event is due, how it is written, its context.

EventService.enqueue and enqueue_many, SyncProducer.enqueue, enqueue_many and prepare, and
aioqueue.django.enqueue_on_commit take them as `**options: Unpack[EnqueueOptions]` (PEP 692):
type checkers and editors see each keyword with its type, a new keyword is added here alone,
and a misspelt one fails as Python's own keyword check would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from aioqueue._model.checks import refuse_unknown_keywords
from aioqueue._model.durations import Duration

from .enqueue_calls import WriteMode
from .writes import DueTime, max_wait_ms

__all__ = ["EnqueueOptions", "EnqueueRequest"]


class EnqueueOptions(TypedDict, total=False):
    """The keywords of every enqueue (`EventService.enqueue` and `enqueue_many`,
    `SyncProducer.enqueue`, `enqueue_many` and `prepare`, `aioqueue.django.enqueue_on_commit`),
    each optional. Type a wrapper's keywords with it: `**options: Unpack[EnqueueOptions]`.
    """

    at: datetime | None
    """Due at this aware datetime instead of after `delay` (give exactly one of them)."""
    context: Mapping[str, str] | None
    """Strings handed to the handler with the event (its delivery context)."""
    replace: bool
    """Overwrite a pending event of the same type and id (new payload, context and due time,
    fresh attempt count) instead of keeping it; False by default."""
    max_wait: Duration | None
    """With `replace=True`, a bounded debounce: however often the event is replaced, it is due
    no later than the first enqueue of the pending version plus `max_wait`."""


_KEYWORDS = EnqueueOptions.__optional_keys__  # every keyword (total=False)


# The modes of nearly every enqueue, made once: an enqueue builds no WriteMode of its own.
_KEEP = WriteMode()
_REPLACE = WriteMode(replace=True)


@dataclass(slots=True)  # not frozen: it is made on every enqueue, and frozen costs 3x
class EnqueueRequest:
    """An enqueue's delay and keywords, checked (read-only once made)."""

    due: DueTime
    mode: WriteMode
    context: Mapping[str, str] | None

    @classmethod
    def of(cls, caller: str, delay: Duration | None, options: EnqueueOptions) -> EnqueueRequest:
        """Reads the keywords `caller` (a function's name, for the error) was given; bad
        values raise InvalidEnqueueError, an unknown keyword TypeError."""
        if not options:  # the usual call: a delay and nothing else
            return cls(DueTime.of(delay, None), _KEEP, None)
        if not options.keys() <= _KEYWORDS:
            refuse_unknown_keywords(caller, options, _KEYWORDS)
        due = DueTime.of(delay, options.get("at"))
        replace = options.get("replace", False)
        max_wait = options.get("max_wait")
        if max_wait is None:
            mode = _REPLACE if replace else _KEEP
        else:
            mode = WriteMode(replace=replace, max_wait_ms=max_wait_ms(max_wait, replace=replace))
        return cls(due, mode, options.get("context"))
