"""The sync producer's guide (docs/_incoming/sync-producer.md) holds what it shows: each plain
Python block runs as written against AIOQUEUE_URL and prints the text block that follows it,
and each excerpt (a block with a `title="path"`) is word for word in the file it names."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from aioqueue._engine.client import RedisClient

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "_incoming" / "sync-producer.md"
BLOCK = re.compile(
    r'```python(?: title="([^"]+)")?\n(.*?)```(?:\n+prints\n+```text\n(.*?)```)?', re.S
)


@dataclass(frozen=True)
class Block:
    line: int
    code: str
    title: str | None
    prints: str | None


def blocks() -> list[Block]:
    text = GUIDE.read_text()
    return [
        Block(text.count("\n", 0, match.start()) + 1, match[2], match[1], match[3])
        for match in BLOCK.finditer(text)
    ]


SCRIPTS = [block for block in blocks() if block.title is None]
EXCERPTS = [block for block in blocks() if block.title is not None]


def test_the_guide_has_scripts_and_excerpts() -> None:
    assert len(SCRIPTS) >= 5
    assert len(EXCERPTS) >= 3
    assert all(block.prints is not None for block in SCRIPTS)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("block", SCRIPTS, ids=[f"line-{block.line}" for block in SCRIPTS])
async def test_each_script_runs_and_prints_what_the_guide_says(
    block: Block, redis_url: str, redis_client: RedisClient, tmp_path: Path
) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code)
    result = await anyio.run_process(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "AIOQUEUE_URL": redis_url},
        check=False,
    )
    assert (result.returncode, result.stderr.decode()) == (0, "")
    assert result.stdout.decode() == block.prints


@pytest.mark.parametrize("block", EXCERPTS, ids=[block.title or "" for block in EXCERPTS])
def test_each_excerpt_is_in_the_file_it_names(block: Block) -> None:
    assert block.title is not None
    assert block.code in (ROOT / block.title).read_text()
