"""The code blocks of README.md and docs/**/*.md, as the docs tests read them.

A block is a fenced block (``` or ~~~, indented or not, as inside a list item). Its info
string gives the language and optional attributes, as MkDocs Material reads them:
`python title="test_reminders.py"` names the file the reader saves it as: a name starting
with `test_` is run by pytest, beside the other named files of its page (`conftest.py`,
`pyproject.toml`), which are not run on their own. A fence whose title is "Output", right
after a Python block, is what that block prints. A block whose only line is
`--8<-- "path"` shows a file of the repository (pymdownx.snippets) and is that file. A block
titled with the path of a file of examples/ and the word excerpt
(`title="examples/flask_app.py (excerpt)"`, which the reader sees above the block) is an
excerpt: word for word in that file, which the suite runs, and not run on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$')
EXCERPT_TITLE = re.compile(r"(?P<path>examples/\S+) \(excerpt\)")
# `.prefix("shop")` on a builder, `prefix="shop"` as a keyword argument (Spark, create_app).
PREFIX = re.compile(r'\.prefix\(\s*"([^"]+)"\s*\)|\bprefix\s*=\s*"([^"]+)"')


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    attributes: dict[str, str]
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"

    @property
    def title(self) -> str | None:
        return self.attributes.get("title")

    @property
    def included_file(self) -> Path | None:
        """The repository file a snippet-only block shows, if it is one."""
        match = SNIPPET.fullmatch(self.code.strip())
        return ROOT / match[1] if match else None

    @property
    def excerpt_of(self) -> Path | None:
        """The file of examples/ an excerpt block is taken from, if it is one: any block
        titled with a path of examples/, so that one whose title leaves out "(excerpt)" is
        still held to the file (and the test on its title fails) rather than run."""
        title = self.title
        if title is None or not title.startswith("examples/"):
            return None
        match = EXCERPT_TITLE.fullmatch(title)
        return ROOT / (match["path"] if match else title)

    @property
    def prefixes(self) -> set[str]:
        return {a or b for a, b in PREFIX.findall(self.code)}


@dataclass(frozen=True)
class PythonExample:
    """A Python block and what it is documented to print, if anything."""

    block: Block
    output: str | None

    @property
    def file_name(self) -> str:
        return self.block.title or "example.py"

    @property
    def is_pytest_file(self) -> bool:
        return self.file_name.startswith("test_")

    @property
    def is_support_file(self) -> bool:
        """A file a test of its page needs (conftest.py), not a program of its own."""
        return (
            self.block.title is not None
            and self.block.excerpt_of is None
            and not self.is_pytest_file
            and (not self.file_name.endswith(".py") or self.file_name == "conftest.py")
        )


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        opening_line = index + 1
        indent, fence = opening["indent"], opening["fence"]
        info = opening["info"].strip()
        language = info.split(" ", 1)[0] if info else ""
        body: list[str] = []
        index += 1
        while index < len(lines):
            line = lines[index]
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                break
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            index += 1
        found.append(
            Block(
                path=path,
                line=opening_line,
                language=language,
                attributes=dict(ATTRIBUTE.findall(info)),
                code="\n".join(body) + "\n",
            )
        )
        index += 1
    return found


def python_examples() -> list[PythonExample]:
    """Every Python block of the documents, each with the output block that follows it."""
    examples: list[PythonExample] = []
    for path in documents():
        found = blocks(path)
        for position, block in enumerate(found):
            if block.language != "python":
                continue
            following = found[position + 1] if position + 1 < len(found) else None
            output = None
            if following is not None and following.title == "Output":
                output = following.code
            examples.append(PythonExample(block, output))
    return examples


def support_files(path: Path) -> dict[str, str]:
    """The files a test block of the page at `path` runs beside: every named block that is
    not a test and not an output, by name."""
    return {
        block.title: block.code
        for block in blocks(path)
        if block.title is not None
        and block.title != "Output"
        and not block.title.startswith("test_")
    }
