"""``cytepool demo``: simulate a dataset, pool it, write, read back, select and export."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cytepool.cli._shared import (
    add_command,
    check_writable,
    path_argument,
    without_ids,
    write_anndata,
)
from cytepool.errors import CytepoolError

__all__ = ["add"]

EXAMPLES = """
    examples:

      cytepool demo
      cytepool demo my-demo --cells 5000
    """

_DEMO_SEED = 20240611
_FEWEST_CELLS = 100
_DEMO_GROUP = "CD4 T"
_DEMO_OUTPUTS = ("cells.h5ad", "cells.cube.zarr", f"{_DEMO_GROUP.replace(' ', '_')}.h5ad")


def add(commands: Any) -> None:
    """Add ``demo`` and its arguments to the subparsers ``commands``."""
    demo = add_command(
        commands,
        "demo",
        "Simulate a single-cell dataset (8 donors x 2 conditions, 6 cell types, 2,000 genes, "
        "about 20,000 cells) as .h5ad, pool it, write the cube, read it back lazily, select "
        "one cell type and export it.",
        EXAMPLES,
        run,
    )
    demo.add_argument(
        "directory",
        metavar="DIR",
        nargs="?",
        default="cytepool-demo",
        type=path_argument,
        help="where to write (default: ./cytepool-demo); it must be new, empty or the output "
        "of an earlier demo",
    )
    demo.add_argument(
        "--cells",
        type=_cells,
        default=20_000,
        metavar="N",
        help=f"about how many cells, at least {_FEWEST_CELLS} (default: 20000)",
    )
    demo.add_argument("--no-progress", action="store_true", help="do not show a progress bar")


def run(args: argparse.Namespace) -> None:
    """Run the demo in ``args.directory``, printing each step."""
    import anndata as ad
    import numpy as np

    from cytepool._demo import CELL_TYPES, prepare_directory, simulate_cells
    from cytepool.io import read_cube, write_cube
    from cytepool.io.anndata import from_anndata, to_anndata

    _check_directory(args.directory)
    directory = prepare_directory(Path(args.directory), _DEMO_OUTPUTS)
    cells_path, cube_path = (directory / name for name in _DEMO_OUTPUTS[:2])
    export_path = directory / _DEMO_OUTPUTS[2]
    print(f"cytepool demo -> {directory}/")
    with _step() as took:
        cells = simulate_cells(args.cells, seed=_DEMO_SEED)
        # each output replaces the earlier demo's, whole
        write_anndata(cells, cells_path, overwrite=True)
    matrix: Any = cells.X  # a CSR matrix here
    nonzero = matrix.nnz / (cells.n_obs * cells.n_vars)
    print(
        f"1. simulated {cells.n_obs:,} cells x {cells.n_vars:,} genes: 8 donors x 2 "
        f"conditions, {len(CELL_TYPES)} cell types, negative-binomial counts ({nonzero:.1%} "
        f"nonzero, sparse CSR) -> {cells_path} ({_size(cells_path)}) [{took()}]"
    )
    del cells
    with _step() as took:
        backed = ad.read_h5ad(cells_path, backed="r")
        cube = from_anndata(
            backed,
            sample_key="sample",
            group_key="cell_type",
            layers=("counts", "detected"),
            progress=False if args.no_progress else None,
        )
        backed.file.close()
    layers = ", ".join(f"{n} ({np.dtype(a.dtype).name})" for n, a in cube.layers.items())
    print(
        f"2. pooled the backed .h5ad with from_anndata, reading it in row blocks: "
        f"{cube.shape[0]} cell types x {cube.shape[1]} samples x {cube.shape[2]:,} genes, "
        f"layers {layers}; sample covariates {_columns(cube.samples, 'samples')}, group "
        f"covariates {_columns(cube.groups, 'groups')} [{took()}]"
    )
    with _step() as took:
        write_cube(cube, cube_path, overwrite=True)
    print(f"3. wrote the cube -> {cube_path} ({_size(cube_path)}) [{took()}]")
    with _step() as took:
        lazy = read_cube(cube_path)
        same = lazy.fingerprint == cube.fingerprint
    print(
        f"4. read it back lazily (layers stay on disk until used); fingerprint "
        f"{lazy.fingerprint[:16]}... {'matches' if same else 'DIFFERS'} [{took()}]"
    )
    if not same:
        msg = "the cube read back has another fingerprint than the cube written"
        raise CytepoolError(msg)
    with _step() as took:
        selected = lazy.select(groups=[_DEMO_GROUP])
        pseudobulk = to_anndata(selected)
        write_anndata(pseudobulk, export_path, overwrite=True)
    print(
        f"5. selected {_DEMO_GROUP!r} ({int(np.sum(selected.cells)):,} cells) and exported "
        f"{pseudobulk.n_obs} profiles x {pseudobulk.n_vars:,} genes with to_anndata -> "
        f"{export_path} ({_size(export_path)}) [{took()}]"
    )
    print(f"next: {_command()} info {shlex.quote(str(cube_path))}")


def _cells(text: str) -> int:
    """The number of --cells (an argparse type): a whole number, at least the fewest."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < _FEWEST_CELLS:
        msg = f"expected a whole number of at least {_FEWEST_CELLS}, found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _check_directory(typed: str) -> None:
    """Refuse DIR, before simulating, if it (or, if new, the directory it goes in) cannot be
    written."""
    path = Path(typed)
    existing = path if path.is_dir() else path.parent
    while not existing.is_dir() and existing != existing.parent:  # DIR's parents are made too
        existing = existing.parent
    check_writable(str(existing), typed)


def _columns(table: Any, axis: str) -> list[str]:
    """The names of the columns of the table ``axis`` but its ids."""
    import narwhals.stable.v2 as nw

    schema = nw.from_native(table, eager_only=True).schema
    return list(without_ids({str(name): str(dtype) for name, dtype in schema.items()}, axis))


def _command() -> str:
    """This command as the user can run it again: ``cytepool`` if on PATH, else as typed.

    After ``python3 -m venv .venv && .venv/bin/pip install ...``, ``cytepool`` is not on
    PATH: the user typed ``.venv/bin/cytepool``, and that is what works.
    """
    typed = sys.argv[0] if sys.argv else ""
    if Path(typed).name == "__main__.py":  # python -m cytepool
        return f"{shlex.quote(sys.executable)} -m cytepool"
    if Path(typed).stem != "cytepool":  # called from Python (tests, notebooks)
        return "cytepool"
    found = shutil.which("cytepool")
    if found is not None and Path(found).resolve() == Path(typed).resolve():
        return "cytepool"
    return shlex.quote(typed)


@contextlib.contextmanager
def _step() -> Iterator[Callable[[], str]]:
    start = time.perf_counter()
    end: list[float] = []
    yield lambda: f"{(end[0] if end else time.perf_counter()) - start:.1f} s"
    end.append(time.perf_counter())


def _size(path: Path) -> str:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return f"{size / 1e6:.1f} MB"
