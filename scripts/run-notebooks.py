"""Execute the tutorial notebooks in place, so that they are stored with their outputs.

    .venv/bin/python scripts/run-notebooks.py                  # every notebook in notebooks/
    .venv/bin/python scripts/run-notebooks.py notebooks/bulk-rna-seq.ipynb

Each notebook runs from the first cell to the last in a fresh kernel of this Python (which needs
the docs extra: pip install -e '.[docs]'), in a temporary working directory, and is written
back with its outputs; a cell that fails stops the script and leaves that notebook as it was.
Run it after changing a notebook or what it shows; tests/test_notebooks.py checks that the
stored outputs are those of one run from top to bottom, and executes every notebook again.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def run(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as directory:
        client = nbclient.NotebookClient(
            notebook,
            timeout=600,
            kernel_name="python3",
            record_timing=False,  # no timestamps: a run changes only what the cells show
            resources={"metadata": {"path": directory}},
        )
        client.execute()
    notebook.metadata.pop("widgets", None)
    nbformat.validate(notebook)
    nbformat.write(notebook, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    args = parser.parse_args(argv)
    for path in args.notebooks or sorted(NOTEBOOKS.glob("*.ipynb")):
        print(f"running {path} ...", flush=True)
        run(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
