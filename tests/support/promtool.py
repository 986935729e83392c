"""promtool, for the tests of the deployment kit's alerting rules
(tests/project/test_deploy_prometheus.py).

promtool comes from Debian's `prometheus` package. It is unpacked, not installed: `apt-get
download prometheus` and `dpkg-deb -x` into `<virtualenv>/tools/prometheus/`, beside the
servers of the matrix (tests/support/server_matrix.py). Why not `apt-get install`:

- installing the package also installs and starts a Prometheus server (its postinst enables
  the service), which a test run has no use for and would leave listening on port 9090;
- its dependencies are web assets (bootstrap, jquery, ...) that promtool does not load:
  promtool itself is one Go binary linked only against libc;
- `apt-get download` needs no root once the package lists are there, so a developer who is
  not root gets promtool too; on a fresh machine (CI's, as root) the lists are fetched first
  with `apt-get update`, as tests/support/browser.py does before installing Chromium.

A `promtool` on PATH is used as it is. Debian 12's is 2.42. Debian builds Prometheus without
Kubernetes service discovery, so this promtool cannot `check config` a scrape configuration
with `kubernetes_sd_configs`; it checks and unit-tests rules like any other.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.apt_turns import apt_get, apt_turn

PACKAGE = "prometheus"


def tools_dir() -> Path:
    """Where unpacked tools live: beside the test environment's packages."""
    return Path(sys.prefix) / "tools"


def _unpacked() -> Path:
    return tools_dir() / PACKAGE / "usr" / "bin" / "promtool"


def _download(into: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["apt-get", "download", "-qq", PACKAGE],
        cwd=into,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _unpack() -> Path:
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.fail(
            f"the alerting rules' tests need promtool, from Debian's {PACKAGE} package "
            "(apt-get and dpkg-deb are missing here): put a promtool on PATH"
        )
    target = tools_dir() / PACKAGE
    with tempfile.TemporaryDirectory() as download:
        result = _download(Path(download))
        if result.returncode != 0 and os.geteuid() == 0:
            # A fresh machine has no package lists yet: fetching them needs root.
            with apt_turn():
                apt_get(["update", "-qq"], timeout=600)
            result = _download(Path(download))
        if result.returncode != 0:
            pytest.fail(
                f"the alerting rules' tests need promtool, from Debian's {PACKAGE} package: "
                f"`apt-get download {PACKAGE}` failed (run `apt-get update` as root first if "
                f"the package lists are missing): {result.stderr.strip()}"
            )
        [package] = Path(download).glob(f"{PACKAGE}_*.deb")
        # Unpacked beside the target and renamed into place: two test processes that unpack
        # at once both end with a whole copy, whichever rename lands first.
        tools_dir().mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{PACKAGE}-", dir=tools_dir()))
        subprocess.run(["dpkg-deb", "-x", str(package), str(staging)], check=True, timeout=300)
        try:
            staging.rename(target)
        except OSError:
            shutil.rmtree(staging)
    promtool = _unpacked()
    assert promtool.is_file(), f"dpkg-deb unpacked {PACKAGE} but {promtool} is missing"
    return promtool


def promtool() -> Path:
    """The promtool binary: the one on PATH, the one unpacked before, or one unpacked now."""
    on_path = shutil.which("promtool")
    if on_path is not None:
        return Path(on_path)
    unpacked = _unpacked()
    return unpacked if unpacked.is_file() else _unpack()
