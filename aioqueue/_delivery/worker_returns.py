"""What a stopping consumer gives back: the attempts no handler began (uncounted) and those
whose handlers the service cut off as its shutdown grace ended (spent); see leases.py."""

from __future__ import annotations

from collections.abc import Iterable

from .leases import Lease

__all__ = ["Returns"]


class Returns:
    """The attempts a consumer has to give back, collected by its workers and takers."""

    def __init__(self) -> None:
        self.not_started: list[Lease] = []
        self.cut_off: list[Lease] = []

    def interrupted(self, leases: Iterable[Lease]) -> None:
        """Leases whose call the service cut off: begun ones are spent, the others not."""
        for lease in leases:
            (self.not_started if lease.started is None else self.cut_off).append(lease)

    def take(self) -> tuple[list[Lease], list[Lease]]:
        """(not started, cut off), emptied."""
        taken = self.not_started, self.cut_off
        self.not_started, self.cut_off = [], []
        return taken
