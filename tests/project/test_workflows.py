"""The GitHub workflows: actionlint finds nothing in them, shellcheck nothing in their `run:`
scripts nor in the scripts they run, and they do what the project promises: the suite on
every Python that pyproject.toml names, every server version and topology, the docs build,
and a release from a version tag through trusted publishing."""

from __future__ import annotations

import re
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.project.test_code_quality import NEWEST_PYTHON, OLDEST_PYTHON

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
# The test extra's actionlint and shellcheck (from their wheels), whatever else is on PATH.
SCRIPTS = Path(sysconfig.get_path("scripts"))
SHELLCHECK = SCRIPTS / "shellcheck"
# The scripts the workflows' `run:` steps call.
SHELL_SCRIPTS = ["dev", ".ci/run", ".ci/debian-packages"]
# owner/name@v5, or the PyPA publisher's own major-version branch (release/v1).
PINNED = re.compile(r"[\w.-]+/[\w.-]+@(v\d+|release/v\d+)")


def _actionlint(*files: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # -shellcheck names the binary, so that every `run:` script is checked here: actionlint
    # leaves that check out silently when it finds no shellcheck on PATH.
    return subprocess.run(
        [str(SCRIPTS / "actionlint"), "-oneline", "-no-color", "-shellcheck", str(SHELLCHECK),
         *map(str, files)],
        cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_actionlint_finds_nothing() -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [path.name for path in files] == ["ci.yml", "release.yml"]
    result = _actionlint(*files)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_actionlint_runs_shellcheck_over_run_scripts(tmp_path: Path) -> None:
    """The check above can fail on a script's mistake, not only on the workflow's shape."""
    workflow = tmp_path / "unquoted.yml"
    workflow.write_text(
        "on: push\njobs:\n  job:\n    runs-on: ubuntu-latest\n    steps:\n      - run: ls $1\n"
    )
    result = _actionlint(workflow, cwd=tmp_path)
    assert result.returncode == 1
    assert "SC2086" in result.stdout, result.stdout


def test_the_scripts_the_workflows_run_pass_shellcheck() -> None:
    result = subprocess.run(
        [str(SHELLCHECK), *SHELL_SCRIPTS], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def _workflow(name: str) -> dict[str, Any]:
    loaded: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as the boolean True.
    loaded["on"] = loaded.pop(True)
    return loaded


def _runs(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in job.get("steps", []) if "run" in step]


def _promised_pythons() -> list[str]:
    tomllib = pytest.importorskip("tomllib")  # new in Python 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    versions = [
        classifier.rsplit(" :: ", 1)[1]
        for classifier in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", classifier)
    ]
    assert project["requires-python"] == f">={versions[0]}"
    return versions


def test_ci_runs_the_suite_on_every_promised_python() -> None:
    promised = _promised_pythons()
    assert (promised[0], promised[-1]) == (OLDEST_PYTHON, NEWEST_PYTHON)
    ci = _workflow("ci.yml")
    assert {"push", "pull_request"} <= set(ci["on"])
    tests = ci["jobs"]["tests"]
    matrix = tests["strategy"]["matrix"]["include"]
    assert [entry["python"] for entry in matrix] == promised
    # Each runs `./dev test` with the matrix's interpreter; one runs it as .ci/run does.
    [suite] = [step for step in tests["steps"] if "./dev test" in step.get("run", "")]
    assert suite["env"]["PYTHON"] == "python${{ matrix.python }}"
    assert suite["run"] == './dev test --servers "$SERVERS"'
    assert "core" in [entry["servers"] for entry in matrix]


def test_ci_runs_every_server_version_and_topology_and_builds_the_docs() -> None:
    jobs = _workflow("ci.yml")["jobs"]
    assert "./dev test --servers all --topologies all" in _runs(jobs["servers-and-topologies"])
    assert "mkdocs build --strict" in _runs(jobs["docs"])


def test_a_version_tag_publishes_through_trusted_publishing() -> None:
    release = _workflow("release.yml")
    assert release["on"] == {"push": {"tags": ["v*"]}}
    assert release["permissions"] == {"contents": "read"}
    jobs = release["jobs"]
    # The whole CI on the tag, and the files checked, before anything is published.
    assert jobs["ci"]["uses"] == "./.github/workflows/ci.yml"
    assert "workflow_call" in _workflow("ci.yml")["on"]
    build = "\n".join(_runs(jobs["build"]))
    for command in ("python -m build", "twine check --strict dist/*", "python -m venv"):
        assert command in build
    publish = jobs["publish"]
    assert set(publish["needs"]) == {"ci", "build"}
    assert publish["environment"]["name"] == "pypi"
    assert publish["permissions"] == {"id-token": "write"}
    [publisher] = [step for step in publish["steps"] if "pypa/" in step.get("uses", "")]
    assert publisher["uses"] == "pypa/gh-action-pypi-publish@release/v1"
    assert "password" not in publisher.get("with", {})  # a token: trusted publishing has none
    # No other job may ask for the identity token that PyPI trusts.
    assert [name for name, job in jobs.items() if "id-token" in job.get("permissions", {})] == [
        "publish"
    ]


def test_every_action_is_pinned_to_a_major_version() -> None:
    uses = [
        step["uses"]
        for name in ("ci.yml", "release.yml")
        for job in _workflow(name)["jobs"].values()
        for step in job.get("steps", [])
        if "uses" in step
    ]
    assert uses
    assert [action for action in uses if not PINNED.fullmatch(action)] == []
