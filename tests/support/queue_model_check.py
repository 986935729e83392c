"""What Redis must hold after every step of tests/test_properties.py: exactly what the
QueueModel holds (no event lost or invented, no stale copy in reach of a handler, the count
of attempts under way right), and with serial keys one event per key under way and no parked
event stranded."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as redis

from aioqueue._wire.envelope import stored_payload, stored_version, text
from tests.support.queue_model import QueueModel
from tests.support.queue_model_state import HOUR_MS, KEYS, MODEL_TAKER, envelope_fields


def check_redis_holds_exactly_the_model(model: QueueModel) -> None:
    """Fails the test at the first thing in Redis that the model does not say."""
    state = model.run(read_state(model.client))
    events, schedule, now = state.events, state.schedule, state.now_ms
    assert set(events) == set(model.pending), "an event was lost or invented"
    parked = {event_id for event_id, event in model.pending.items() if event.parked}
    assert set(schedule) == set(model.pending) - parked, "a pending event is not scheduled"
    check_serial_keys(model, state, parked)
    under_way = sum(1 for raw in events.values() if "due_at" in envelope_fields(raw))
    assert state.under_way == under_way, "the count of attempts under way drifted"
    for event_id, event in model.pending.items():
        stored = envelope_fields(events[event_id])
        # The lease protocol: an attempt is spent only by a claim, so the attempts counted
        # are the handler calls begun, and one more while a pushed delivery waits unclaimed.
        unclaimed = event.under_way and not event.claimed
        if event.under_way:
            # An unclaimed delivery's lease ends half a millisecond before a whole one.
            marked = schedule[event_id] % 1 == 0.5
            assert marked is unclaimed, f"{event_id}'s lease does not say whether it is claimed"
        assert stored.get("attempt", 0) == event.begun + unclaimed, (
            f"{event_id}: attempts counted are not the handler calls begun"
        )
        if event.parked:
            continue
        assert (stored_version(stored), stored.get("attempt", 0)) == (
            event.version,
            event.attempt,
        )
        assert stored_payload(stored) == event.payload
        assert stored.get("error") == event.error
        assert stored.get("since") == event.since
        if event.due_now:
            assert schedule[event_id] <= now, f"{event_id} should be due"
        else:
            assert schedule[event_id] > now + HOUR_MS / 2, f"{event_id} should wait"
    assert set(state.dead_letters) == state.dead_letter_times == set(model.dead)
    for event_id, event in model.dead.items():
        letter = envelope_fields(state.dead_letters[event_id])
        assert (letter["id"], stored_version(letter), letter.get("attempt", 0)) == (
            event_id,
            event.version,
            event.attempt,
        )
        assert letter["error"] == event.error
        # Never buried without a handler call: every attempt it had was begun.
        assert letter.get("attempt", 0) == event.begun >= 1, f"{event_id} died unhandled"
    assert state.ready == [copy.event_id for copy in model.ready]
    assert state.keys <= {
        KEYS.schedule,
        KEYS.events,
        KEYS.ready,
        KEYS.dead_letters,
        KEYS.dead_letter_times,
        KEYS.sequence,
        KEYS.wake,
        KEYS.paused,
        KEYS.rate,
        KEYS.starts,
        KEYS.serial_field,
        KEYS.serial_holders,
        KEYS.serial_waiting,
        KEYS.counts,
        KEYS.recorded,
        KEYS.claim_receipt(MODEL_TAKER),
    }
    if model.recorded is not None:
        assert (KEYS.recorded in state.keys) is model.recorded
    assert state.sequence == model.sequence


def check_serial_keys(model: QueueModel, state: RedisState, parked: set[str]) -> None:
    """One event per key under way; every parked event findable in serial_waiting and
    bound to come back: its key's holder is pending, or an event of its key is scheduled
    (it takes the key, and settling frees it for the next parked one)."""
    stored = {event_id: envelope_fields(raw) for event_id, raw in state.events.items()}
    under_way = [
        fields["serial"] for fields in stored.values() if "serial" in fields and "due_at" in fields
    ]
    assert len(under_way) == len(set(under_way)), "two events of one key under way"
    for value, holder in state.holders.items():
        assert holder in model.pending, f"key {value} is held by gone event {holder}"
    for event_id in parked:
        fields = stored[event_id]
        value = fields["serial"]
        member = f"{len(value.encode())}:{value}:{fields['parked']:015d}:{event_id}"
        assert member in state.waiting, f"{event_id} is parked but not waiting"
        key_holder = state.holders.get(value)
        assert (key_holder is not None and key_holder != event_id) or any(
            other not in parked and other_fields.get("serial") == value
            for other, other_fields in stored.items()
        ), f"{event_id} is parked on key {value} that nothing will free"


async def read_state(client: redis.Redis) -> RedisState:
    """Everything of the queue in Redis, read atomically (one MULTI)."""
    async with client.pipeline(transaction=True) as multi:
        multi.hgetall(KEYS.events)
        multi.zrange(KEYS.schedule, 0, -1, withscores=True)
        multi.hgetall(KEYS.dead_letters)
        multi.zrange(KEYS.dead_letter_times, 0, -1)
        multi.lrange(KEYS.ready, 0, -1)
        multi.keys("*")
        multi.get(KEYS.sequence)
        multi.hgetall(KEYS.serial_holders)
        multi.zrange(KEYS.serial_waiting, 0, -1)
        multi.hget(KEYS.counts, "under_way")
        multi.time()
        replies = await multi.execute()
    events, schedule, dead, dead_times, ready, keys, sequence, holders, waiting = replies[:9]
    under_way, (seconds, micros) = replies[9:]
    return RedisState(
        events={text(k): v for k, v in events.items()},
        schedule={text(member): float(score) for member, score in schedule},
        dead_letters={text(k): v for k, v in dead.items()},
        dead_letter_times={text(member) for member in dead_times},
        ready=[envelope_fields(raw)["id"] for raw in ready],
        keys={text(key) for key in keys},
        sequence=int(sequence or 0),
        now_ms=int(seconds) * 1000 + int(micros) // 1000,
        holders={text(value): text(holder) for value, holder in holders.items()},
        waiting={text(member) for member in waiting},
        under_way=int(under_way or 0),
    )


@dataclass(frozen=True)
class RedisState:
    events: dict[str, bytes]
    schedule: dict[str, float]
    dead_letters: dict[str, bytes]
    dead_letter_times: set[str]
    ready: list[str]
    """Event ids of the ready list's entries, head first."""
    keys: set[str]
    sequence: int
    now_ms: int
    holders: dict[str, str]
    """serial_holders: key value -> event id."""
    waiting: set[str]
    """serial_waiting's members."""
    under_way: int
    """The scripts' count of envelopes carrying `due_at`, which stats reads."""
