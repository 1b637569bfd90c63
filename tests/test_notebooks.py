"""The tutorial notebooks in notebooks/: stored with their outputs, and they still run.

They are stored with the outputs of one run from top to bottom (scripts/run-notebooks.py makes
them), so that the README's links and the docs show what the code does. Here that is checked on
the stored files, and every notebook is executed again in a fresh kernel: a cell that raises fails
the test with the cell's traceback, and so does a warning a cell prints; the outputs must have the
same kinds, cell by cell, as those stored (their values may differ in the last digits with other
versions of the libraries), and what cytepool itself writes (a cube's repr, a fingerprint) must be
the same. A last test runs a small notebook of its own: progress bars show in
Jupyter as a live display, never on stderr.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))
IDS = [path.stem for path in NOTEBOOKS]


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 4


def _code_cells(notebook: Any) -> list[Any]:
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]


def _kinds(notebook: Any) -> list[list[tuple[str, ...]]]:
    """Per code cell, the kind of each output: its type and its stream name or MIME types."""
    kinds = []
    for cell in _code_cells(notebook):
        found = []
        for output in cell.get("outputs", []):
            detail = output.get("name") or ",".join(sorted(output.get("data", {})))
            found.append((output["output_type"], detail))
        kinds.append(found)
    return kinds


_OURS = re.compile(r"<Cube [^>]*>|blake3:[0-9a-f]{64}|[0-9a-f]{64}")


def _ours(notebook: Any) -> list[list[str]]:
    """Per code cell, what cytepool itself wrote in its plain-text outputs (a cube's repr, a
    fingerprint): the same with any version of the other libraries."""
    found = []
    for cell in _code_cells(notebook):
        texts = []
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            texts.append("".join(text) if isinstance(text, list) else text)
        found.append(_OURS.findall("\n".join(texts)))
    return found


def _stderr(notebook: Any) -> list[str]:
    """The text each code cell wrote to stderr, with the cell's first line."""
    found = []
    for cell in _code_cells(notebook):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                source = (
                    "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                )
                first_line = source.splitlines()[0] if source else ""
                text = (
                    "".join(output["text"]) if isinstance(output["text"], list) else output["text"]
                )
                found.append(f"cell starting {first_line!r}:\n{text}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_is_stored_with_the_outputs_of_one_run(path: Path) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cells = _code_cells(notebook)
    counts = [cell.get("execution_count") for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: run scripts/run-notebooks.py to store the outputs of one run"
    )
    assert any(cell.get("outputs") for cell in cells)
    errors = [o for cell in cells for o in cell.get("outputs", []) if o["output_type"] == "error"]
    assert errors == []
    assert _stderr(notebook) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    stored, stored_ours = _kinds(notebook), _ours(notebook)
    client = nbclient.NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    assert _stderr(notebook) == []
    assert _kinds(notebook) == stored, f"{path.name}: run scripts/run-notebooks.py"
    assert _ours(notebook) == stored_ours, f"{path.name}: run scripts/run-notebooks.py"


PROGRESS_CELLS = [
    """
import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

from cytepool.io import anndata as conv

rng = np.random.default_rng(0)
obs = pd.DataFrame(
    {"donor": rng.choice(["D1", "D2"], 3000), "cell_type": rng.choice(["B", "T"], 3000)},
    index=[f"c{i}" for i in range(3000)],
)
counts = sp.csr_matrix(rng.poisson(1.0, (3000, 20)).astype(np.float32))
ad.AnnData(counts, obs=obs).write_h5ad("cells.h5ad")
conv._readers.BLOCK_NONZEROS = 5_000  # many row blocks: the bar moves
""",
    'cube = conv.from_anndata("cells.h5ad", sample_key="donor", group_key="cell_type")',
    'conv.from_anndata("cells.h5ad", sample_key="donor", group_key="cell_type", progress=False)',
]


def test_progress_shows_in_jupyter_as_a_display(tmp_path: Path) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("anndata")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in PROGRESS_CELLS]
    nbclient.NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    assert _stderr(notebook) == []
    shown = notebook.cells[1].outputs
    assert [output.output_type for output in shown] == ["display_data"]
    data = shown[0].data
    assert '<progress value="1.0000" max="1"' in data["text/html"]
    assert data["text/plain"].startswith("pooling 100% 3,000/3,000 cells")
    assert notebook.cells[2].outputs[-1].output_type == "execute_result"  # the cube, no bar
    assert all(output.output_type != "display_data" for output in notebook.cells[2].outputs)
