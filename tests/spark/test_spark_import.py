"""aioqueue.spark stays optional: `import aioqueue` never loads PySpark, and without PySpark
(or the PyArrow its tasks need) `import aioqueue.spark` says how to install it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import aioqueue.spark


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout.strip()


def test_importing_aioqueue_does_not_import_pyspark() -> None:
    assert run_python("import sys, aioqueue; print('pyspark' in sys.modules)") == "False"


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("pyspark", "aioqueue.spark needs PySpark: pip install 'aioqueue-redis[spark]'"),
        (
            "pyarrow",
            "aioqueue.spark needs PyArrow beside PySpark: pip install 'aioqueue-redis[spark]'",
        ),
    ],
)
def test_without_a_dependency_the_import_error_names_the_extra(missing: str, message: str) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{missing!r}] = None  # as if it were not installed\n"
        "try:\n"
        "    import aioqueue.spark\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, '|', error)\n"
    )
    assert run_python(code) == f"ModuleNotFoundError | {message}"


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(aioqueue.spark) if not name.startswith("_")}
    public -= {"annotations", "pyspark", "pyarrow"}
    assert set(aioqueue.spark.__all__) == public
