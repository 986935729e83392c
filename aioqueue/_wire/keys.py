"""Where one event type's queue lives in Redis (documented in docs/wire-format.md)."""

from __future__ import annotations

import functools
import re
import zlib
from dataclasses import dataclass

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

__all__ = ["QueueKeys", "QueueLayout", "partition_of", "partition_tag", "validate_prefix"]

MAX_PARTITIONS = 1024

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
    wake: str
    """channel (no key is written): an enqueue that made the earliest due time earlier
    publishes on it, and the services dispatching the queue wake at once, whichever process
    enqueued (see the wake-ups section of lua/_prelude.lua)."""
    schedules: str
    """hash: recurring schedule name -> its record (JSON: spec, last tick produced...)."""
    paused: str
    """hash: field `paused` (server time of the pause, ms) present while the type is paused;
    no dispatch or claim takes its events meanwhile."""
    rate: str
    """hash: `limit` and `per_ms`, the type's rate limit (handler starts per window)."""
    starts: str
    """zset: the handler starts of the current rate window; member `id@ms`, score: ms."""
    counts: str
    """hash: `under_way`, how many of the type's envelopes carry `due_at` (attempts under
    way), and `finished`, the successes so far; kept by the scripts, so stats are O(1)."""
    serial_field: str
    """string: the payload field of the type's serial key (`__serial_key__`), if it has one."""
    serial_holders: str
    """hash: serial key value -> id of the event that holds it (dispatched, in flight or
    waiting for its retry)."""
    serial_waiting: str
    """zset, every score 0: events parked while their serial key value is held, as
    `length:value:due:id` (due in ms, 15 digits), so each value's are one range in due order."""
    recorded: str
    """string `1`, once a service that handles the type recorded its settings (registry
    entry, schema, serial field, rate limit). It goes when the server loses its data, with
    the settings: a dispatcher that finds it gone records them again before it dispatches
    the type again (see settings_marks.py)."""

    @property
    def settling(self) -> tuple[str, str, str, str]:
        """The keys with which settling an event frees its serial key (see settle_serial in
        _serial_keys.lua; passed for every type, they cost nothing for a type without one) and
        counts its attempt out of `under_way` (see count_under_way in _prelude.lua)."""
        return (self.serial_holders, self.serial_waiting, self.wake, self.counts)

    def claim_receipt(self, taker: str) -> str:
        """string: what the last claim of consumer `taker` took, so that the claim, sent
        again after its reply was lost, hands out the same (see claim receipts in
        lua/_leases.lua). Expires a minute after that claim's lease."""
        return f"{self._base}:claim_receipt:{taker}"

    def run_record(self, run_id: str, task: int) -> str:
        """hash: what one task of a Spark run wrote in this queue (see run_records.py)."""
        return f"{self._base}:runs:{run_id}:{task}"

    @property
    def _base(self) -> str:
        """`prefix:{tag}`, which every key of the queue starts with (see for_tag)."""
        return self.schedule.removesuffix(":schedule")

    @classmethod
    def for_type(cls, prefix: str, event_type: str) -> QueueKeys:
        """The keys of an unpartitioned type."""
        return cls.for_tag(prefix, event_type)

    @classmethod
    def for_tag(cls, prefix: str, tag: str) -> QueueKeys:
        base = f"{prefix}:{{{tag}}}"
        return cls(
            schedule=f"{base}:schedule",
            events=f"{base}:events",
            ready=f"{base}:ready",
            dead_letters=f"{base}:dead_letters",
            dead_letter_times=f"{base}:dead_letter_times",
            sequence=f"{base}:sequence",
            wake=f"{base}:wake",
            schedules=f"{base}:schedules",
            paused=f"{base}:paused",
            rate=f"{base}:rate",
            starts=f"{base}:starts",
            counts=f"{base}:counts",
            serial_field=f"{base}:serial_field",
            serial_holders=f"{base}:serial_holders",
            serial_waiting=f"{base}:serial_waiting",
            recorded=f"{base}:recorded",
        )


def partition_of(event_id: str, partitions: int) -> int:
    """The partition an event id belongs to: CRC-32 (IEEE, as zlib and Spark's crc32) of its
    UTF-8 bytes, modulo the partition count. Dedupe, replace and cancel by id rely on it."""
    return zlib.crc32(event_id.encode()) % partitions


@functools.lru_cache(maxsize=4096)
def partition_tag(event_type: str, partition: int, partitions: int) -> str:
    """The hash tag of one partition: `Type#partition.salt`.

    The salt is the smallest integer that puts the tag's slot in the partition's own share of
    the slot space (partition p of n gets slots [p*16384/n, (p+1)*16384/n)), so the
    partitions spread evenly over the masters of any cluster whose slots are split evenly.
    Plain `Type#p` tags land on random slots and 8 of them can miss a master entirely.
    """
    salt = 0
    while True:
        tag = f"{event_type}#{partition}.{salt}"
        if key_slot(tag.encode()) * partitions // REDIS_CLUSTER_HASH_SLOTS == partition:
            return tag
        salt += 1


@dataclass(frozen=True, slots=True)
class QueueLayout:
    """Where an event type's queue lives: one key set, or one per partition."""

    prefix: str
    event_type: str
    partitions: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise ValueError(
                f"partitions of {self.event_type!r} must be from 1 to {MAX_PARTITIONS}, "
                f"got {self.partitions}"
            )

    @property
    def all_keys(self) -> tuple[QueueKeys, ...]:
        """Every partition's keys, in partition order."""
        return _all_keys(self.prefix, self.event_type, self.partitions)

    def keys_for(self, event_id: str) -> QueueKeys:
        """The keys that hold (or would hold) the event with this id."""
        if self.partitions == 1:
            return self.all_keys[0]
        return self.all_keys[partition_of(event_id, self.partitions)]


@functools.lru_cache(maxsize=1024)
def _all_keys(prefix: str, event_type: str, partitions: int) -> tuple[QueueKeys, ...]:
    if partitions == 1:
        return (QueueKeys.for_type(prefix, event_type),)
    return tuple(
        QueueKeys.for_tag(prefix, partition_tag(event_type, partition, partitions))
        for partition in range(partitions)
    )
