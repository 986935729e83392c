"""A primary, its replicas and the Redis Sentinels that watch them, on 127.0.0.1, for tests."""

from __future__ import annotations

import pathlib
import secrets
import time
from urllib.parse import quote

import redis

from ._embedded import ServerGroup
from ._server import EmbeddedServer, TlsFiles, find_server_binary, free_port

__all__ = ["EmbeddedSentinel", "SentinelNotReadyError"]


class SentinelNotReadyError(RuntimeError):
    """The sentinels or the servers they watch did not reach the expected state in time."""


class _SentinelProcess(EmbeddedServer):
    """The server binary in sentinel mode, from a config file of its own (a sentinel rewrites
    its config as it learns, so each needs one it may write)."""

    def __init__(self, *, binary: pathlib.Path, password: str | None, tls: TlsFiles | None) -> None:
        super().__init__(binary=binary, password=password, tls=tls)
        self.config_lines: list[str] = []

    def _command(self) -> list[str]:
        config_path = self.directory / "sentinel.conf"
        config_path.write_text(
            "\n".join(
                [
                    # The server's own options, as config lines ("--port" "0" -> "port 0").
                    *_config_lines(self._port_args()),
                    f"bind {self.host}",
                    f"dir {self.directory}",
                    f"logfile {self.log_path}",
                    "daemonize no",
                    "protected-mode no",
                    *([f"requirepass {_quoted(self.password)}"] if self.password else []),
                    *self.config_lines,
                ]
            )
            + "\n"
        )
        return [str(self.binary), str(config_path), "--sentinel"]


class EmbeddedSentinel(ServerGroup):
    """One primary with `replicas` replicas, watched by `sentinels` sentinels as
    `service_name`; every one a server process on 127.0.0.1.

    `start()` returns once every replica is in sync with the primary and every sentinel
    knows the primary, every replica and every other sentinel, so a failover can start at
    once; it starts the servers, then the sentinels, and past its `timeout` stops everything
    and raises SentinelNotReadyError. The sentinels are told about each other and about the
    replicas in their config files: learnt the usual way, through hello messages every 2 s
    and INFO every 10 s, that would take seconds.

    `down_after_ms` and `failover_timeout_ms` are the sentinels' `down-after-milliseconds`
    and `failover-timeout`, short by default so that a killed primary is replaced within a
    few seconds; `quorum` sentinels must agree that it is down. `password` protects the
    primary and replicas, `sentinel_password` the sentinels. With `tls`, every process speaks
    only TLS, to clients and to each other (the binary must have TLS built in).

    The admin methods are synchronous (a few milliseconds per node, or up to `timeout` while
    waiting); from async code run them in a thread (`anyio.to_thread.run_sync`).
    """

    not_ready_error = SentinelNotReadyError

    def __init__(
        self,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        quorum: int = 2,
        service_name: str = "mymaster",
        down_after_ms: int = 500,
        failover_timeout_ms: int = 3000,
        password: str | None = None,
        sentinel_password: str | None = None,
        tls: TlsFiles | None = None,
        binary: pathlib.Path | None = None,
    ) -> None:
        if replicas < 1 or sentinels < 1 or not 1 <= quorum <= sentinels:
            raise ValueError(
                f"need a replica, a sentinel and a quorum from 1 to the sentinels, got "
                f"replicas={replicas} sentinels={sentinels} quorum={quorum}"
            )
        self.service_name = service_name
        self.password = password
        self.sentinel_password = sentinel_password
        self.tls = tls
        binary = binary if binary is not None else find_server_binary()
        # A replica's first sync would otherwise wait 5 s for more replicas to join it.
        data_args = ["--repl-diskless-sync-delay", "0"]
        self.primary_at_start = EmbeddedServer(
            binary=binary, password=password, tls=tls, extra_args=data_args
        )
        self.replicas_at_start = [
            EmbeddedServer(binary=binary, password=password, tls=tls) for _ in range(replicas)
        ]
        self.nodes = [self.primary_at_start, *self.replicas_at_start]
        self.sentinels = [
            _SentinelProcess(binary=binary, password=sentinel_password, tls=tls)
            for _ in range(sentinels)
        ]
        # Each process picked a free port alone; two picks may have met.
        taken: set[int] = set()
        for process in [*self.nodes, *self.sentinels]:
            while process.port in taken:
                process.port = free_port()
            taken.add(process.port)
        for node in self.replicas_at_start:
            node.extra_args = (
                *data_args,
                "--replicaof",
                self.host,
                str(self.primary_at_start.port),
            )
        ids = [secrets.token_hex(20) for _ in self.sentinels]
        for sentinel, own_id in zip(self.sentinels, ids, strict=True):
            others = [
                (s.port, i) for s, i in zip(self.sentinels, ids, strict=True) if s is not sentinel
            ]
            sentinel.config_lines = self._sentinel_config(
                own_id, quorum, down_after_ms, failover_timeout_ms, others
            )

    def __repr__(self) -> str:
        return f"<EmbeddedSentinel {self.url} nodes={[n.port for n in self.nodes]}>"

    @property
    def url(self) -> str:
        """The `redis+sentinel://` URL of the group, the form `EventServiceBuilder.url` takes
        (`rediss+sentinel://` trusting the CA with `tls`; with the passwords, if any)."""
        scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
        credentials = f":{quote(self.password, safe='')}@" if self.password else ""
        hosts = ",".join(f"{self.host}:{port}" for _, port in self.addresses)
        query = []
        if self.sentinel_password:
            query.append(f"sentinel_password={quote(self.sentinel_password, safe='')}")
        if self.tls:
            query.append(f"ssl_ca_certs={quote(str(self.tls.ca), safe='')}")
        options = f"?{'&'.join(query)}" if query else ""
        return f"{scheme}://{credentials}{hosts}/{self.service_name}{options}"

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every sentinel, as `EventServiceBuilder.sentinel` takes them."""
        return [(self.host, sentinel.port) for sentinel in self.sentinels]

    # -- failures and topology -----------------------------------------------------------------

    def primary(self) -> EmbeddedServer:
        """The node the sentinels name as the primary now (the first that answers)."""
        problems = []
        for sentinel in self.sentinels:
            if sentinel.pid is None:
                continue
            try:
                with self._admin(sentinel, self.sentinel_password) as admin:
                    _, port = admin.sentinel_get_master_addr_by_name(self.service_name)
            except redis.RedisError as exc:
                problems.append(f"{sentinel.port}: {exc}")
                continue
            return self._node_on(int(port))
        raise SentinelNotReadyError(f"no sentinel named the primary: {problems}")

    def wait_for_failover(self, old_primary: EmbeddedServer, timeout: float = 30.0) -> None:
        """After `old_primary` died: waits until every live sentinel names another node as
        the primary and that node acts as one."""
        port = old_primary.port

        def problem() -> str | None:
            named = set()
            for sentinel in self.sentinels:
                if sentinel.pid is None:
                    continue
                with self._admin(sentinel, self.sentinel_password) as admin:
                    _, named_port = admin.sentinel_get_master_addr_by_name(self.service_name)
                named.add(int(named_port))
            if len(named) != 1 or port in named:
                return f"the sentinels name {sorted(named)} (the old primary: {port})"
            with self._admin(self._node_on(named.pop()), self.password) as admin:
                role = admin.execute_command("ROLE")
            return None if role[0] in (b"master", "master") else f"the new primary is {role[0]}"

        self._wait(problem, time.monotonic() + timeout, f"fail over from port {port}")

    # -- internals -----------------------------------------------------------------------------

    def _start(self, deadline: float) -> None:
        """The servers first, then the sentinels."""
        for node in self.nodes:
            node.start()
        self._wait(self._replication_problem, deadline, "sync the replicas")
        for sentinel in self.sentinels:
            sentinel.start()
        self._wait(self._sentinel_problem, deadline, "start the sentinels")

    def _processes(self) -> list[EmbeddedServer]:
        return [*self.sentinels, *self.nodes]

    def _sentinel_config(
        self,
        own_id: str,
        quorum: int,
        down_after_ms: int,
        failover_timeout_ms: int,
        others: list[tuple[int, str]],
    ) -> list[str]:
        name = self.service_name
        lines = [
            f"sentinel myid {own_id}",
            f"sentinel monitor {name} {self.host} {self.primary_at_start.port} {quorum}",
            f"sentinel down-after-milliseconds {name} {down_after_ms}",
            f"sentinel failover-timeout {name} {failover_timeout_ms}",
            f"sentinel parallel-syncs {name} 1",
        ]
        if self.password:
            lines.append(f"sentinel auth-pass {name} {_quoted(self.password)}")
        if self.sentinel_password:
            # What this sentinel gives the others, which require the same password.
            lines.append(f"sentinel sentinel-pass {_quoted(self.sentinel_password)}")
        lines += [
            f"sentinel known-replica {name} {self.host} {r.port}" for r in self.replicas_at_start
        ]
        lines += [f"sentinel known-sentinel {name} {self.host} {p} {i}" for p, i in others]
        return lines

    def _replication_problem(self) -> str | None:
        problem = self._replica_problem(self.replicas_at_start, self.password)
        if problem is not None:
            return problem
        with self._admin(self.primary_at_start, self.password) as admin:
            connected = admin.info("replication").get("connected_slaves")
        if connected != len(self.replicas_at_start):
            return f"the primary has {connected} replicas connected"
        return None

    def _sentinel_problem(self) -> str | None:
        """Why a failover could not start at once yet: a sentinel that does not see the
        primary as healthy, a replica it could not promote, another sentinel it cannot ask."""
        for sentinel in self.sentinels:
            with self._admin(sentinel, self.sentinel_password) as admin:
                primary = admin.sentinel_master(self.service_name)
                replicas = admin.sentinel_slaves(self.service_name)
                others = admin.sentinel_sentinels(self.service_name)
            if not primary.get("is_master") or primary.get("is_sdown"):
                return f"sentinel {sentinel.port} sees the primary as {primary.get('flags')}"
            ready = [
                r for r in replicas if r.get("master-link-status") == "ok" and not r["is_sdown"]
            ]
            if len(ready) != len(self.replicas_at_start):
                return f"sentinel {sentinel.port} knows {len(ready)} ready replicas"
            linked = [o for o in others if not o.get("is_disconnected") and not o["is_sdown"]]
            if len(linked) != len(self.sentinels) - 1:
                return f"sentinel {sentinel.port} is linked to {len(linked)} other sentinels"
        return None


def _quoted(value: str) -> str:
    """A config file value as one argument, whatever spaces or quotes it holds."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _config_lines(args: list[str]) -> list[str]:
    """Command-line options (`--name value`) as config file lines (`name value`)."""
    lines: list[str] = []
    for arg in args:
        if arg.startswith("--"):
            lines.append(arg[2:])
        else:
            lines[-1] += f" {_quoted(arg)}"
    return lines
