"""aioqueue.spark stays optional: `import aioqueue` never loads PySpark, and without PySpark
`import aioqueue.spark` says how to install it."""

from __future__ import annotations

import subprocess
import sys

import aioqueue.spark


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout.strip()


def test_importing_aioqueue_does_not_import_pyspark() -> None:
    assert run_python("import sys, aioqueue; print('pyspark' in sys.modules)") == "False"


def test_without_pyspark_the_import_error_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['pyspark'] = None  # as if it were not installed\n"
        "try:\n"
        "    import aioqueue.spark\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, '|', error)\n"
    )
    assert run_python(code) == (
        "ModuleNotFoundError | aioqueue.spark needs PySpark: pip install 'aioqueue[spark]'"
    )


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(aioqueue.spark) if not name.startswith("_")}
    public -= {"annotations", "pyspark"}
    assert set(aioqueue.spark.__all__) == public
