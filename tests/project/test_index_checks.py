"""The sdist and the wheel pass the package index's checks before a release tag is pushed:
`twine check --strict` on both, the sdist alone builds the same wheel (as pip builds one from
an index), and the long description (the README) renders as the index renders it.

The release workflow (.github/workflows/release.yml) runs the same build and twine check
with build isolation and network; here they run offline, as
tests/project/test_wheel_install.py does.
"""

from __future__ import annotations

import email.parser
import re
import subprocess
import sys
import warnings
import zipfile
from html import unescape
from pathlib import Path

import pytest

from tests.support.distribution_build import Built, build, build_both, copy_of_the_checkout

# Builds and twine: seconds each, more on a loaded machine.
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_both(copy_of_the_checkout(tmp_path_factory.mktemp("build") / "source"))


def test_twine_check_strict_passes_both_files(built: Built) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(built.wheel), str(built.sdist)],
        capture_output=True,
        text=True,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert output.count("PASSED") == 2, output
    assert "warning" not in output.lower(), output


def _wheel_files(wheel: Path) -> dict[str, bytes]:
    """Every file of a wheel by name, RECORD aside (it holds the hashes of the others)."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: archive.read(name)
            for name in archive.namelist()
            if not name.endswith(".dist-info/RECORD")
        }


def test_the_sdist_alone_builds_the_same_wheel(built: Built, tmp_path: Path) -> None:
    """Unpacked on its own, away from the checkout, as pip unpacks one it downloaded."""
    # The tar command rather than tarfile: Python 3.12 and 3.13 warn about extracting
    # without a filter, and the filter argument is newer than 3.10's first releases.
    subprocess.run(["tar", "-xzf", str(built.sdist), "-C", str(tmp_path)], check=True)
    [unpacked] = [path for path in tmp_path.iterdir() if path.is_dir()]
    assert not (unpacked / ".git").exists()
    result = build(unpacked, tmp_path / "dist", "--wheel")
    assert result.returncode == 0, result.stdout + result.stderr
    [wheel] = (tmp_path / "dist").glob("*.whl")
    assert wheel.name == built.wheel.name
    assert _wheel_files(wheel) == _wheel_files(built.wheel)


def _long_description(wheel: Path) -> tuple[str, str]:
    """The wheel's long description and its content type, as the index reads them."""
    with zipfile.ZipFile(wheel) as archive:
        [name] = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    return str(metadata.get_payload()), str(metadata["Description-Content-Type"])


def test_the_readme_renders_as_the_index_renders_it(built: Built) -> None:
    """twine check passes any Markdown without rendering it; the index renders it with
    readme_renderer's GitHub-flavoured renderer, which is what runs here."""
    description, content_type = _long_description(built.wheel)
    assert content_type == "text/markdown"
    assert description.startswith("# aioqueue\n")
    with warnings.catch_warnings():
        # readme_renderer warns (and renders nothing) when its Markdown renderer is missing.
        warnings.simplefilter("error")
        from readme_renderer.markdown import render

        html = render(description)
    assert html is not None
    # Every table (the comparison, the figures, the extras by role) and each footnote is
    # rendered, and no Markdown is left as text: no fence, table rule or footnote mark.
    tables = re.findall(r"^\|(?:-+\|)+$", description, flags=re.MULTILINE)
    assert len(tables) >= 3
    assert html.count("<table>") == len(tables), html
    footnotes = re.findall(r"^\[\^([\w-]+)\]:", description, flags=re.MULTILINE)
    assert footnotes, "the comparison table's footnote"
    assert [name for name in footnotes if f'id="fn-{name}"' not in html] == []
    text = re.sub(r"<pre.*?</pre>", "", html, flags=re.DOTALL)
    assert [mark for mark in ("```", "|---|", "[^") if mark in text] == []
    # The quick start's commands, highlighted into spans, read as they were written.
    assert "./dev demo\n./dev test" in unescape(re.sub(r"<[^>]+>", "", html))
