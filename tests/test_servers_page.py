"""Every Python block of the servers page (docs/_incoming/servers.md) runs as written."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "_incoming" / "servers.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.MULTILINE | re.DOTALL)


def test_the_page_has_python_blocks() -> None:
    assert BLOCKS  # a broken fence must not make the test below run nothing


@pytest.mark.parametrize("source", BLOCKS, ids=[f"block-{n}" for n in range(len(BLOCKS))])
def test_a_python_block_runs_as_written(source: str, tmp_path: pathlib.Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(source)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=50, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "checking the payment of order 42" in result.stdout
