"""How a type's pending events spread over the time ahead, for the dashboard (histogram.lua)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.scripts import LuaScript

__all__ = ["DueHistogram", "due_histogram"]

HISTOGRAM = LuaScript("histogram")
MAX_BUCKETS = 500


@dataclass(frozen=True, slots=True)
class DueHistogram:
    start_ms: int
    """Server time the first bucket starts at."""
    bucket_ms: int
    counts: list[int]
    """Events due in [start + i * bucket, start + (i + 1) * bucket), summed over partitions."""

    def to_json(self) -> dict[str, Any]:
        return {"start_ms": self.start_ms, "bucket_ms": self.bucket_ms, "counts": self.counts}


async def due_histogram(
    client: RedisClient, layout: QueueLayout, *, bucket_ms: int, buckets: int
) -> DueHistogram:
    """Counts due per bucket from the server's now on; every partition is counted over the
    same buckets (the first one's now)."""
    if not 1 <= buckets <= MAX_BUCKETS or bucket_ms < 1:
        raise ValueError(f"buckets must be 1-{MAX_BUCKETS} and bucket_ms >= 1")
    counts = [0] * buckets
    start: int | None = None
    for keys in layout.all_keys:
        reply = await HISTOGRAM.run(
            client, [keys.schedule], ["" if start is None else start, bucket_ms, buckets]
        )
        start = int(reply[0])
        for index, count in enumerate(reply[1:]):
            counts[index] += int(count)
    assert start is not None
    return DueHistogram(start_ms=start, bucket_ms=bucket_ms, counts=counts)
