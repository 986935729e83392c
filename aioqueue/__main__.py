"""The `aioqueue` command (also `python -m aioqueue`)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import anyio


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aioqueue", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="schedule thousands of events on an embedded server and handle them"
    )
    demo.add_argument("--events", type=int, default=3000, help="how many events (default 3000)")
    demo.add_argument(
        "--spread", type=float, default=3.0, help="seconds to spread them over (default 3)"
    )
    args = parser.parse_args(argv)
    # The demo's failures are deliberate: show the library's warnings only when they matter.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")

    from ._demo import run_demo

    return anyio.run(lambda: run_demo(events=args.events, spread=args.spread))


if __name__ == "__main__":
    sys.exit(main())
