"""A progress bar for long commands: one redrawn line on a terminal, a line per 10 % elsewhere."""

from __future__ import annotations

import math
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """A one-line bar on a terminal; a line per 10 % otherwise (logs, CI)."""

    def __init__(self, total: int, out: TextIO, label: str = "handled") -> None:
        self._total = max(1, total)
        self._out = out
        self._label = label
        self._interactive = out.isatty()
        self._last_tenth = -1

    def show(self, done: int) -> None:
        fraction = min(1.0, done / self._total)
        if self._interactive:
            filled = round(fraction * 40)
            bar = "#" * filled + "." * (40 - filled)
            self._out.write(f"\r  {self._label} [{bar}] {done}/{self._total}")
            self._out.flush()
        elif (tenth := math.floor(fraction * 10)) > self._last_tenth:
            self._last_tenth = tenth
            print(f"  {self._label} {done}/{self._total}", file=self._out)

    def close(self) -> None:
        if self._interactive:
            self._out.write("\n")
