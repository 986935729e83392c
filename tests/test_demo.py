"""`python -m aioqueue demo`, the README's first command, runs end to end and exits 0."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_demo_delivers_everything_and_reports_lateness() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aioqueue", "demo", "--events", "400", "--spread", "1"],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # 400 events: ids 7 (mod 400) always fail -> 1 dead letter, the rest delivered.
    assert "delivered 399 ok" in result.stdout
    assert "1 dead letters" in result.stdout
    assert "payment provider rejected order 7" in result.stdout
    assert re.search(r"lateness \(server clock\): p50 [\d.]+ ms, p99 [\d.]+ ms, max", result.stdout)
    assert "handled 400/400" in result.stdout
