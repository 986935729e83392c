"""What the workers of every kind of handler share (event_workers.py for a handler of one
event, batch_workers.py for a batch handler): the runner they call, how many run at once,
and the consumer's parts they use, given as one record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from .handler_runner import Succeeded
from .handoff import Handoff
from .leases import Leases
from .slots import SlotPool
from .takers import Claim, Takers
from .worker_returns import Returns

__all__ = ["WorkerParts", "Workers"]


@dataclass(frozen=True)
class WorkerParts:
    """The parts of a consumer its workers use: the handler slots, the leases of what they
    hold, the takers that hand claims over and take successes back, and the returns of what
    a stopping service cut off."""

    slots: SlotPool
    leases: Leases
    takers: Takers
    returns: Returns


class _Runner(Protocol):
    @property
    def handler_name(self) -> str: ...

    def report_successes(self, succeeded: Sequence[Succeeded]) -> None: ...

    def stop_waiting(self) -> None: ...


RunnerT = TypeVar("RunnerT", bound=_Runner)


class Workers(Generic[RunnerT]):
    """`parallelism` tasks running `runner` on the claims a consumer's takers hand over."""

    def __init__(self, runner: RunnerT, parts: WorkerParts, *, parallelism: int) -> None:
        self.runner = runner
        self.parallelism = parallelism
        self._slots = parts.slots
        self._leases = parts.leases
        self._takers = parts.takers
        self._returns = parts.returns

    @property
    def handler_name(self) -> str:
        return self.runner.handler_name

    def report_successes(self, succeeded: Sequence[Succeeded]) -> None:
        self.runner.report_successes(succeeded)

    def stop_waiting(self) -> None:
        self.runner.stop_waiting()

    async def run(self, claims: Handoff[Claim | None]) -> None:
        """Runs the workers until each has taken a None (the takers have stopped)."""
        raise NotImplementedError

    def warn_of_threads(self) -> None:
        """Names each sync call that runs on as the service cuts its handlers off."""
        raise NotImplementedError
