"""The distribution works outside the checkout: the sdist builds a wheel, and the wheel,
installed (not editable) into a fresh virtualenv, runs an event end to end against the
session's server, finds its Lua scripts and dashboard files, and knows its version.

Missing package data (a `.lua` or dashboard file left out of the wheel) fails here, where an
editable install would still read it from the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from pathlib import Path

import anyio
import pytest
import redis.asyncio as redis

import aioqueue
from tests.support.distribution_build import Built, build_both, copy_of_the_checkout

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "aioqueue-redis"
# Builds, a virtualenv and pip: seconds each, more on a loaded machine.
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_of_the_checkout(tmp_path_factory.mktemp("build") / "source")


@pytest.fixture(scope="module")
def built(source: Path) -> Built:
    return build_both(source)


def _warnings(output: str) -> list[str]:
    # setuptools' notices (a license table, license classifiers, an editable install's
    # import hook...) are Python warnings in a banner of "!!". distutils' own lowercase
    # "warning: byte-compiling is disabled" only echoes PYTHONDONTWRITEBYTECODE.
    return [line for line in output.splitlines() if "Warning" in line or "!!" in line]


def test_building_warns_about_nothing(built: Built) -> None:
    assert _warnings(built.output) == []


def test_the_editable_install_of_dev_warns_about_nothing(source: Path, tmp_path: Path) -> None:
    # What `pip install -e` asks the backend for when ./dev installs the repository.
    result = subprocess.run(
        [sys.executable, "-c",
         f"import setuptools.build_meta as backend; backend.build_editable({str(tmp_path)!r})"],
        cwd=source, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _warnings(result.stdout + result.stderr) == []
    assert list(tmp_path.glob("*.editable-*.whl"))


def _package_data() -> set[str]:
    """Every file the package reads at run time besides its modules."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "aioqueue").rglob("*")
        if path.is_file() and path.suffix not in {".py", ".pyc"}
    }


def test_the_wheel_holds_the_package_data_license_and_metadata(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        [metadata_name] = [name for name in names if name.endswith(".dist-info/METADATA")]
        metadata = wheel.read(metadata_name).decode()
    assert _package_data() - names == set()
    assert {"aioqueue/_wire/lua/enqueue.lua", "aioqueue/http/dashboard.html"} <= names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    headers = dict(
        line.split(": ", 1) for line in metadata.split("\n\n", 1)[0].splitlines() if ": " in line
    )
    assert headers["Name"] == DISTRIBUTION
    assert headers["Version"] == aioqueue.__version__
    assert headers["License-Expression"] == "MIT"


def test_the_sdist_holds_what_a_release_needs(built: Built) -> None:
    with tarfile.open(built.sdist) as sdist:
        top, *_ = sdist.getnames()
        names = {name.removeprefix(f"{top}/") for name in sdist.getnames()}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml"} <= names
    assert _package_data() - names == set()
    # The deployment kit stays in the repository (MANIFEST.in prunes it).
    assert (ROOT / "deploy" / "README.md").is_file()
    assert [name for name in names if name.startswith("deploy")] == []


def _fresh_virtualenv(path: Path, wheel: Path) -> Path:
    """A virtualenv holding only the wheel; returns its interpreter.

    The wheel goes in with --no-deps, and the dependencies come from this test environment's
    site-packages through a .pth line: installing redis, anyio, msgspec, ... from the index
    on every run would take a minute and the network, and add nothing this test is about.
    A path listed in a .pth file is only appended to sys.path (its own .pth files, among
    them the editable install's finder, are not run), so `aioqueue` can only come from the
    wheel: the test checks where it was imported from.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", "--no-cache-dir", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "test-dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    return python


# Run by the wheel's interpreter, from a directory outside the checkout.
END_TO_END = textwrap.dedent(
    """
    import asyncio, importlib.metadata, importlib.resources, os, sys
    from dataclasses import dataclass

    import aioqueue
    from aioqueue import Event, EventService


    @dataclass
    class Parcel(Event):
        id: str
        weight: int


    async def main() -> None:
        handled = asyncio.Event()

        async def deliver(event: Parcel) -> bool:
            print(f"handled {event.id} weighing {event.weight}")
            handled.set()
            return True

        service = (EventService.builder().url(os.environ["AIOQUEUE_URL"])
                   .prefix("wheel-check").scheduling_interval(0.05).build())
        async with service:
            service.add_handler(Parcel, deliver)
            assert await service.enqueue(Parcel(id="parcel-1", weight=3), 0.1)
            await asyncio.wait_for(handled.wait(), 20)


    asyncio.run(main())
    print("imported from", aioqueue.__file__)
    print("version", aioqueue.__version__, importlib.metadata.version("aioqueue-redis"))
    for name in ("dashboard.html", "dashboard.css", "dashboard.js", "dashboard_type.js"):
        assert importlib.resources.files("aioqueue.http").joinpath(name).read_text(), name
    print("dashboard files found")
    """
)


async def test_the_installed_wheel_runs_an_event_end_to_end(
    built: Built, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    python = await anyio.to_thread.run_sync(_fresh_virtualenv, tmp_path / "venv", built.wheel)
    script = tmp_path / "end_to_end.py"
    script.write_text(END_TO_END)
    # PYTHONPATH could put the checkout back on the path; the run must see only the venv.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = await anyio.run_process(
        [str(python), str(script)],
        cwd=tmp_path,
        env={**env, "AIOQUEUE_URL": redis_url},
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "handled parcel-1 weighing 3"
    imported_from = Path(lines[1].removeprefix("imported from "))
    assert imported_from.is_relative_to(tmp_path / "venv"), imported_from
    assert lines[2:] == [
        f"version {aioqueue.__version__} {aioqueue.__version__}",
        "dashboard files found",
    ]
    assert await redis_client.hexists("wheel-check:types", "Parcel")

    command = await anyio.run_process(
        [str(python.parent / "aioqueue"), "--version"], cwd=tmp_path, env=env, check=False
    )
    assert command.stdout.decode().startswith(f"aioqueue {aioqueue.__version__} "), command
