"""The README's Example, taken from README.md and run as written, as a script."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import anyio
import redis.asyncio as redis

from tests.support import queue_key

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_example() -> str:
    """The first Python block of the README's "Example" section."""
    section = README.read_text().split("\n## Example\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the Example section has no python block"
    return match[1]


async def test_the_readme_example_runs_as_a_script(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    started = time.time()
    result = await anyio.run_process(
        [sys.executable, str(script)],
        env={**os.environ, "AIOQUEUE_URL": redis_url},
        check=False,
    )
    assert (result.returncode, result.stderr.decode()) == (0, "")
    # It scheduled its payment check three hours ahead and shut down.
    due_ms = await redis_client.zscore(queue_key("PaymentCheck", "schedule"), "p-1")
    assert due_ms is not None
    assert abs(due_ms / 1000 - (started + 3 * 3600)) < 60
