"""Execute every tutorial notebook in notebooks/ from start to end.

The docs build (tests/test_docs.py) includes the notebooks without executing them, so this is where
they run in CI. Each notebook makes its own small seeded data and cleans up its files; a cell that
raises fails the test with the cell's traceback, and so does a warning a cell prints.
"""

from __future__ import annotations

from pathlib import Path

import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 4


def _stderr(notebook: nbformat.NotebookNode) -> list[str]:
    """The text each code cell wrote to stderr, with the cell's first line."""
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                first_line = cell.source.splitlines()[0] if cell.source else ""
                found.append(f"cell starting {first_line!r}:\n{output['text']}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    assert _stderr(notebook) == []
