"""Debian's apt-get, one test process at a time.

The suite runs in three processes (pytest-xdist, see ./dev), and on a fresh machine each of
them may find a Debian package missing at once: every process that runs a dashboard test
finds Chromium missing and installs it. apt-get does not wait for dpkg's lock or the package
lists' lock; it fails at once ("Could not get lock /var/lib/dpkg/lock-frontend", exit 100),
so the second install failed its tests while the first succeeded. Here every apt-get the
suite runs waits for its turn on one file lock, and whoever comes second looks again before
installing (see tests/support/browser.py). Outside processes (an unattended upgrade) are
waited for by apt's own `DPkg::Lock::Timeout`.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# Every test process of every checkout on the machine shares it: dpkg's lock is the machine's.
LOCK_PATH = Path(tempfile.gettempdir()) / "aioqueue-tests-apt.lock"
# How long an apt-get waits for dpkg's lock held by a process outside the suite, in seconds.
OUTSIDE_LOCK_WAIT = 600


@contextmanager
def apt_turn(lock_path: Path = LOCK_PATH) -> Iterator[None]:
    """Holds the suite's apt lock: no other test process runs apt-get meanwhile."""
    # Readable and writable by all, so a later run as another user can take it too.
    descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing the file releases the lock


def apt_get(arguments: Sequence[str], *, timeout: float) -> None:
    """Runs `apt-get ARGUMENTS` as root, non-interactively; raises CalledProcessError if it fails.

    Its progress is dropped and its errors are left on stderr, where pytest shows them.
    """
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "-o", f"DPkg::Lock::Timeout={OUTSIDE_LOCK_WAIT}", *arguments]
    subprocess.run(command, check=True, env=environment, timeout=timeout, stdout=subprocess.DEVNULL)
