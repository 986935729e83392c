"""What the embedded server, the Sentinel group and the cluster share: `start()` and `stop()`,
and a `with` block around them; for a group of servers, starting all of them or none, asking
one of them, and waiting for the group to settle."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, TypeVar

import redis

if TYPE_CHECKING:
    from ._server import EmbeddedServer, TlsFiles

__all__ = ["HOST", "EmbeddedProcess", "ServerGroup"]

HOST = "127.0.0.1"
_ADMIN_SOCKET_TIMEOUT = 2.0
# Cluster gossip and Sentinel timers change state on their own, with nothing to wait on.
_POLL_INTERVAL = 0.02

_Embedded = TypeVar("_Embedded", bound="EmbeddedProcess")


class EmbeddedProcess(abc.ABC):
    """Server processes on 127.0.0.1: `start()` starts them, `stop()` stops them and removes
    what they wrote, and `with` does both."""

    host = HOST

    @abc.abstractmethod
    def start(self) -> None:
        """Starts the processes and returns once they answer."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stops the processes; safe to call twice."""

    def __enter__(self: _Embedded) -> _Embedded:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ServerGroup(EmbeddedProcess):
    """Servers started and stopped as one: a Sentinel group, a cluster.

    A subclass starts its servers in `_start`, lists them in `_processes` in the order they
    stop, and names the error of a group that does not settle in time in `not_ready_error`.
    """

    not_ready_error: ClassVar[type[RuntimeError]]
    nodes: list[EmbeddedServer]
    tls: TlsFiles | None = None

    def start(self, timeout: float = 20.0) -> None:
        """Starts every process and returns once the group is ready (as the class says).
        Past `timeout` s raises the group's not-ready error, after stopping everything."""
        deadline = time.monotonic() + timeout
        try:
            self._start(deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops every process and removes their directories; safe to call twice."""
        for process in self._processes():
            process.stop()

    def kill(self, node: EmbeddedServer) -> None:
        """SIGKILLs one server, as a crash would."""
        node.kill()

    @abc.abstractmethod
    def _start(self, deadline: float) -> None:
        """Starts the processes and waits until the group is ready, by `deadline`
        (time.monotonic)."""

    @abc.abstractmethod
    def _processes(self) -> list[EmbeddedServer]:
        """Every process of the group, in the order they stop."""

    def _node_on(self, port: int) -> EmbeddedServer:
        for node in self.nodes:
            if node.port == port:
                return node
        raise KeyError(f"no node of {self!r} listens on port {port}")

    def _admin(self, process: EmbeddedServer, password: str | None = None) -> redis.Redis:
        """A client of one process, for the few commands that set the group up or check it."""
        return redis.Redis(
            host=self.host,
            port=process.port,
            password=password,
            decode_responses=True,
            socket_timeout=_ADMIN_SOCKET_TIMEOUT,
            socket_connect_timeout=_ADMIN_SOCKET_TIMEOUT,
            ssl=self.tls is not None,
            ssl_ca_certs=str(self.tls.ca) if self.tls else None,
        )

    def _replica_problem(
        self, replicas: list[EmbeddedServer], password: str | None = None
    ) -> str | None:
        """The first replica whose link to its primary is not up, or None."""
        for replica in replicas:
            with self._admin(replica, password) as admin:
                link = admin.info("replication").get("master_link_status")
            if link != "up":
                return f"replica {replica.port}: master link {link}"
        return None

    def _wait(self, problem: Callable[[], str | None], deadline: float, what: str) -> None:
        """Calls `problem` (what is not right yet, or None once all is) until it returns None;
        past `deadline` (time.monotonic) raises `not_ready_error`. An error reply or a refused
        connection counts as a problem: the process may still be starting, or be down on
        purpose."""
        last: str | None = "not checked yet"
        while True:
            try:
                last = problem()
            except (redis.RedisError, OSError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if last is None:
                return
            if time.monotonic() >= deadline:
                raise self.not_ready_error(f"{self!r} did not {what} in time: {last}")
            time.sleep(_POLL_INTERVAL)
