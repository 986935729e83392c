"""The suite's test processes take turns at apt-get (tests/support/apt_turns.py): while one
holds the turn no other gets it, and a process that ends holding it, even killed, lets the
next one in. Real processes on a real file lock; no apt-get runs here."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.apt_turns import apt_turn

REPO = Path(__file__).resolve().parents[2]
# A test process that takes its turn, says so, and keeps it until a line arrives on stdin.
HOLDER = """
import sys
from pathlib import Path
from tests.support.apt_turns import apt_turn
with apt_turn(Path(sys.argv[1])):
    print("holding", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "apt.lock")],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:  # closes its pipes on the way out
        try:
            assert process.stdout is not None
            assert process.stdout.readline() == "holding\n"
            yield process
        finally:
            process.kill()
            process.wait(timeout=10)


def turn_is_free(lock_path: Path) -> bool:
    """Whether the turn could be taken now, without waiting for it."""
    descriptor = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(descriptor)
    return True


def test_no_process_gets_the_turn_while_another_holds_it(
    holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    lock_path = tmp_path / "apt.lock"
    assert not turn_is_free(lock_path)
    assert holder.stdin is not None
    holder.stdin.write("done\n")
    holder.stdin.flush()
    assert holder.wait(timeout=10) == 0
    assert turn_is_free(lock_path)
    with apt_turn(lock_path):
        assert not turn_is_free(lock_path)
    assert turn_is_free(lock_path)


def test_a_process_killed_holding_the_turn_lets_the_next_one_in(
    holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    lock_path = tmp_path / "apt.lock"
    assert not turn_is_free(lock_path)
    holder.kill()
    holder.wait(timeout=10)
    # The kernel drops the lock with the process's files: the next one takes it at once.
    with apt_turn(lock_path):
        assert not turn_is_free(lock_path)
