"""The `aioqueue` command (also `python -m aioqueue`); the commands live in aioqueue._cli."""

from __future__ import annotations

import sys

from aioqueue._cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
