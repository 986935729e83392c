"""The server matrix itself: its lists name real tests, its binaries are the versions it
says, and `--servers` picks what it is asked for."""

from __future__ import annotations

import importlib
import pathlib
import subprocess
from types import ModuleType

import pytest

from aioqueue.testing import find_server_binary
from tests.conftest import _matrix_binaries
from tests.support import server_matrix

TESTS = pathlib.Path(__file__).resolve().parents[1]


def _test_module(name: str) -> ModuleType:
    """The test module called `name`, in whichever folder of tests/ it lives."""
    [path] = TESTS.rglob(f"{name}.py")
    dotted = ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)
    return importlib.import_module(dotted)


def test_test_modules_have_names_unique_across_folders() -> None:
    # The matrix and conftest.py name a module by its file name alone.
    names = [path.stem for path in TESTS.rglob("test_*.py")]
    assert len(names) == len(set(names))


def test_the_matrix_lists_name_existing_modules_and_tests() -> None:
    """A renamed test must not drop out of the matrix unnoticed."""
    for module_name in server_matrix.MATRIX_MODULES:
        _test_module(module_name)
    for entry in server_matrix.CORE_TESTS:
        module_name, _, test_name = entry.partition("::")
        assert module_name in server_matrix.MATRIX_MODULES, entry
        module = _test_module(module_name)
        assert callable(getattr(module, test_name, None)), f"{entry} does not exist"


@pytest.mark.parametrize("name", sorted(server_matrix.SERVERS))
def test_each_installed_binary_is_the_version_the_matrix_names(name: str) -> None:
    server = server_matrix.SERVERS[name]
    version = subprocess.run(
        [str(server.binary()), "--version"], capture_output=True, text=True, check=True
    ).stdout
    # Major and minor, as the name says: Debian may ship a newer 7.0 patch release.
    product, _, number = server.name.partition("-")
    assert f"{product.capitalize()} server v={number}." in version


def test_servers_selects_versions_and_never_the_default_twice(tmp_path: pathlib.Path) -> None:
    default = find_server_binary()
    assert _matrix_binaries("none") == {}
    every_other = _matrix_binaries("all")
    # Left out: the default server (valkey-8.1, unless AIOQUEUE_SERVER_BINARY names another).
    left_out = set(server_matrix.SERVERS) - set(every_other)
    assert len(left_out) <= 1
    for name in left_out:
        assert server_matrix.SERVERS[name].binary().resolve() == default.resolve()
    assert _matrix_binaries("core") == every_other
    own = tmp_path / "redis-server"
    assert _matrix_binaries(f"redis-6.2, mine={own}") == {
        "redis-6.2": server_matrix.SERVERS["redis-6.2"].locate(),
        "mine": own,
    }
    assert _matrix_binaries(f"again={default}") == {}
    with pytest.raises(pytest.UsageError, match="unknown server 'redis-9'"):
        _matrix_binaries("redis-9")
    with pytest.raises(pytest.UsageError, match="names a backend"):
        _matrix_binaries(f"cluster={own}")
