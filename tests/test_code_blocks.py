"""Run every Python code block of README.md and docs/*.md, as a reader would, so they stay true.

A page's blocks run in order, in one namespace, in a new working directory, with warnings as
errors. A page may prepare what its blocks take for granted (a file, a table) in a *setup*
block, and check what they made in a *check* block, both inside an HTML comment that neither
GitHub nor the docs show:

    <!-- setup: what it makes (run before the page's blocks by tests/test_code_blocks.py)
    ```python
    ...
    ```
    -->

A setup block runs in a namespace of its own; the page's blocks then see the values it made,
but not its imports, so a block that forgets an import fails here as it would for the reader.
A check block runs after them, in their namespace.
"""

from __future__ import annotations

import linecache
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
COMMENT = re.compile(r"<!--(.*?)-->", re.S)


def blocks(text: str) -> dict[str, list[str]]:
    """The page's shown Python blocks, and those of its setup and check comments."""
    found: dict[str, list[str]] = {"setup": [], "shown": [], "check": []}
    for comment in COMMENT.findall(text):
        kind = comment.split(None, 1)[0].rstrip(":") if comment.strip() else ""
        if kind in ("setup", "check"):
            found[kind] += FENCE.findall(comment)
    found["shown"] = FENCE.findall(COMMENT.sub("", text))
    return found


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def run(code: str, filename: str, namespace: dict[str, object]) -> None:
    """Run a block, its lines shown in tracebacks."""
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    exec(compile(code, filename, "exec"), namespace)


WITH_CODE = [page for page in PAGES if blocks(page.read_text(encoding="utf-8"))["shown"]]


def test_the_pages_with_python_blocks() -> None:
    assert [name(page) for page in WITH_CODE] == [
        "README.md",
        "docs/architecture.md",
        "docs/cube-files.md",
        "docs/cube.md",
        "docs/dask.md",
        "docs/remote.md",
        "docs/tables.md",
    ]


def test_blocks_are_found_in_shown_text_and_comments() -> None:
    text = (
        "<!-- setup: data\n```python\nx = 1\n```\n-->\n"
        "```python\ny = x + 1\n```\n"
        "<!-- a note ```python\nnot run\n``` -->\n"
        "<!-- check\n```python\nassert y == 2\n```\n-->\n"
    )
    assert blocks(text) == {
        "setup": ["x = 1\n"],
        "shown": ["y = x + 1\n"],
        "check": ["assert y == 2\n"],
    }


@pytest.mark.interop
@pytest.mark.parametrize("page", WITH_CODE, ids=[name(page) for page in WITH_CODE])
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = blocks(page.read_text(encoding="utf-8"))
    monkeypatch.chdir(tmp_path)
    prepared: dict[str, object] = {"__name__": "__setup__"}
    for number, code in enumerate(found["setup"]):
        run(code, f"{name(page)} (setup {number})", prepared)
    namespace: dict[str, object] = {
        key: value
        for key, value in prepared.items()
        if not key.startswith("__") and not isinstance(value, types.ModuleType)
    }
    namespace["__name__"] = "__main__"
    for number, code in enumerate(found["shown"]):
        run(code, f"{name(page)} (block {number})", namespace)
    for number, code in enumerate(found["check"]):
        run(code, f"{name(page)} (check {number})", namespace)
