"""Where one event type's queue lives in Redis (documented in docs/wire-format.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["QueueKeys", "validate_prefix"]

_PREFIX = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")


def validate_prefix(prefix: str) -> str:
    """Returns `prefix` if it can start a key; braces would move the hash tag, so no braces."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ValueError(
            f"prefix {prefix!r} must be 1-64 characters of letters, digits, '_', '.', ':' or '-'"
        )
    return prefix


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one event type. They share the hash tag `{type}`, so every script touches
    a single slot and runs unchanged on Redis Cluster."""

    schedule: str
    """zset: event id -> due time (ms, server clock) of its next attempt."""
    events: str
    """hash: event id -> envelope (JSON)."""
    ready: str
    """list: envelopes that are due, waiting for a consumer."""
    dead_letters: str
    """hash: event id -> envelope with `error` and `died_at`."""
    dead_letter_times: str
    """zset: event id -> died_at (ms), to list dead letters newest first."""
    sequence: str
    """string: counter that gives every enqueued envelope a new version."""

    @classmethod
    def for_type(cls, prefix: str, event_type: str) -> QueueKeys:
        base = f"{prefix}:{{{event_type}}}"
        return cls(
            schedule=f"{base}:schedule",
            events=f"{base}:events",
            ready=f"{base}:ready",
            dead_letters=f"{base}:dead_letters",
            dead_letter_times=f"{base}:dead_letter_times",
            sequence=f"{base}:sequence",
        )
