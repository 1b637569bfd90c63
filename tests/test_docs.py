"""Build the documentation with warnings as errors, and check that it documents every public name.

The notebooks are included as they are committed, with their outputs; tests/test_notebooks.py
executes them. Links to other projects use the offline inventories of
docs/_ext/offline_inventories.py. One test does the whole build (about ten seconds), so that
pytest-xdist does not build it twice.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

DOCS = Path(__file__).parents[1] / "docs"
MODULES = ["cytepool", "cytepool.io", "cytepool.io.zarr", "cytepool.io.anndata", "cytepool.errors"]
PAGES = [
    "index",
    "tutorials/export-from-another-tool",
    "tutorials/differential-expression",
    "tutorials/bulk-rna-seq",
    "tutorials/round-trip-scanpy",
    "cube",
    "cube-files",
    "tables",
    "dask",
    "performance",
    "architecture",
    *(f"api/{module.removeprefix('cytepool.') or 'cytepool'}" for module in MODULES),
]


def _build(out: Path) -> Path:
    """Run sphinx-build -W into out and return the HTML directory."""
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    command += ["-d", str(out / "doctrees"), "-D", "nb_execution_mode=off"]
    command += [str(DOCS), str(out / "html")]
    environment = {**os.environ, "CYTEPOOL_DOCS_OFFLINE": "1"}
    result = subprocess.run(
        command, capture_output=True, text=True, env=environment, timeout=900, check=False
    )
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stderr}\n{result.stdout}"
    return out / "html"


def _inventory(html: Path) -> set[str]:
    """The names in the objects.inv the build wrote."""
    data = (html / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = data.index(b"\n", header_end) + 1
    lines = zlib.decompress(data[header_end:]).decode().splitlines()
    return {line.split(" ", 1)[0] for line in lines}


def test_docs_build_without_warnings(tmp_path: Path) -> None:
    html = _build(tmp_path)

    missing_pages = [page for page in PAGES if not (html / f"{page}.html").is_file()]
    assert missing_pages == []

    public = {
        f"{module}.{name}"
        for module in MODULES
        for name in importlib.import_module(module).__all__
        if not name.startswith("__")
    }
    assert sorted(public - _inventory(html)) == []

    # "Used in" / "Explained in" links, as in the reference text of read_cube
    page = (html / "api" / "io.html").read_text(encoding="utf-8")
    assert "Used in:" in page
    assert "Explained in:" in page
    assert 'href="../tutorials/export-from-another-tool.html"' in page
    assert 'href="../cube-files.html"' in page


def _crosslinks() -> Any:
    """The docs extension that finds the "Used in" / "Explained in" pages."""
    path = DOCS / "_ext" / "cytepool_crosslinks.py"
    spec = importlib.util.spec_from_file_location("cytepool_crosslinks", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_crosslinks_follow_imports_and_return_types() -> None:
    crosslinks = _crosslinks()
    names = crosslinks.PublicNames(["cytepool", "cytepool.io"])
    code = """
import polars as pl
import cytepool as cp
from cytepool.io import read_cube
%matplotlib inline
cube = read_cube("x.cube.zarr")
b_cells = cube.select(groups=["B"])
b_cells.profiles("B")
cp.concat([cube, b_cells], axis="samples")
frame = pl.DataFrame({"a": [1]}).select("a")
"""
    assert crosslinks.code_uses(code, names) == {
        "cytepool.io.read_cube",
        "cytepool.Cube.select",
        "cytepool.Cube.profiles",
        "cytepool.concat",
    }


def test_crosslinks_find_mentions_in_prose() -> None:
    crosslinks = _crosslinks()
    names = crosslinks.PublicNames(["cytepool", "cytepool.io"])
    text = (
        "Open it with `read_cube`, then `cube.select(groups=['B'])` and "
        "{meth}`~cytepool.Cube.profiles`; `chunks`, `pd.concat` and `shape` name nothing of ours.\n"
        "```python\nimport cytepool\ncytepool.add([a, b])\n```\n"
    )
    assert crosslinks.text_mentions(text, names) == {
        "cytepool.io.read_cube",
        "cytepool.Cube.select",
        "cytepool.Cube.profiles",
        "cytepool.add",
    }
