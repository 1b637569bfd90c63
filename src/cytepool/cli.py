"""The ``cytepool`` command: pool AnnData files into cube files, inspect and export cubes.

Commands (each has ``--help``)::

    cytepool pool INPUT OUTPUT.cube.zarr --sample-key K --group-key K [--layer L] [--raw]
    cytepool info CUBE [--json]
    cytepool export CUBE OUTPUT.h5ad|OUTPUT.zarr [--layer L] [--group G]
    cytepool demo [DIR]

Errors are reported as one line on stderr with exit status 1 (2 for bad arguments), never
as a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

if TYPE_CHECKING:
    import anndata

    from cytepool.cube import Cube

__all__ = ["main"]

_DEMO_MARKER = ".cytepool-demo"
_DEMO_SEED = 20240611


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``cytepool`` command line.

    Parameters
    ----------
    argv
        The arguments, without the program name; None reads ``sys.argv``.

    Returns
    -------
    int
        The exit status: 0 on success, 1 on an error, 2 for bad arguments, 130 when
        interrupted.

    Examples
    --------
    >>> from cytepool.cli import main
    >>> main(["--version"])  # doctest: +ELLIPSIS
    cytepool ...
    0
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version, or a usage error (already printed)
        return stop.code if isinstance(stop.code, int) else 0
    try:
        args.run(args)
    except KeyboardInterrupt:
        print("cytepool: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # every failure is one line, never a traceback
        print(f"cytepool {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return 1
    return 0


def _one_line(error: BaseException) -> str:
    if isinstance(error, ImportError) and error.name in {"anndata", "mudata", "h5py", "scipy"}:
        return f"this command needs {error.name}: pip install 'cytepool[anndata]'"
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    text = " ".join(text.split())
    return text or type(error).__name__


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    from cytepool import __version__

    parser = _Parser(
        prog="cytepool",
        description="Pool single cells into pseudobulk cubes; inspect and export cube files.",
    )
    parser.add_argument("--version", action="version", version=f"cytepool {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_pool(commands)
    _add_info(commands)
    _add_export(commands)
    _add_demo(commands)
    return parser


def _add_command(commands: Any, name: str, text: str, run: Callable[..., None]) -> Any:
    command = commands.add_parser(name, help=text, description=text)
    command.set_defaults(run=run)
    return command


def _add_pool(commands: Any) -> None:
    pool = _add_command(
        commands,
        "pool",
        "Pool the cells of an .h5ad file or AnnData .zarr store into a cube file. The input "
        "is read backed, in row blocks, so memory stays small whatever its size.",
        _pool,
    )
    pool.add_argument("input", metavar="INPUT", help="an .h5ad file or AnnData .zarr store")
    pool.add_argument("output", metavar="OUTPUT", help="the cube file to write (*.cube.zarr)")
    pool.add_argument("--sample-key", required=True, help="obs column with each cell's sample")
    pool.add_argument("--group-key", required=True, help="obs column with each cell's group")
    pool.add_argument("--layer", help="the layer holding the counts (default: X)")
    pool.add_argument("--raw", action="store_true", help="pool raw.X, features from raw.var")
    pool.add_argument(
        "--detected",
        action="store_true",
        help="also make the layer 'detected': the number of cells with a nonzero value",
    )
    pool.add_argument(
        "--compression",
        choices=("gzip", "zstd", "none"),
        default="gzip",
        help="compression of the cube file (default: gzip)",
    )
    pool.add_argument("--level", type=int, help="compression level (gzip 0-9, zstd -131072-22)")
    pool.add_argument("--overwrite", action="store_true", help="replace an existing cube file")
    pool.add_argument("--no-progress", action="store_true", help="do not show a progress bar")


def _add_info(commands: Any) -> None:
    info = _add_command(
        commands,
        "info",
        "Describe a cube file: shape, layers, cells per group, tables, fingerprint, provenance.",
        _info,
    )
    info.add_argument("cube", metavar="CUBE", help="a cube file (*.cube.zarr)")
    info.add_argument("--json", action="store_true", help="print JSON for machines")


def _add_export(commands: Any) -> None:
    export = _add_command(
        commands,
        "export",
        "Export a cube file as a pseudobulk AnnData (.h5ad, or .zarr in Zarr v3), one "
        "observation per non-empty profile, ready for scanpy, decoupler and PyDESeq2.",
        _export,
    )
    export.add_argument("cube", metavar="CUBE", help="a cube file (*.cube.zarr)")
    export.add_argument("output", metavar="OUTPUT", help="OUTPUT.h5ad or OUTPUT.zarr")
    export.add_argument("--layer", default="counts", help="the layer that becomes X")
    export.add_argument("--group", action="append", help="export only this group (repeatable)")
    export.add_argument("--overwrite", action="store_true", help="replace an existing output")


def _add_demo(commands: Any) -> None:
    demo = _add_command(
        commands,
        "demo",
        "Simulate a single-cell dataset (8 donors x 2 conditions, 6 cell types, 2,000 genes, "
        "about 20,000 cells) as .h5ad, pool it, write the cube, read it back lazily, select "
        "one cell type and export it.",
        _demo,
    )
    demo.add_argument(
        "directory",
        metavar="DIR",
        nargs="?",
        default="cytepool-demo",
        help="where to write (default: ./cytepool-demo); it must be new, empty or the output "
        "of an earlier demo",
    )
    demo.add_argument("--cells", type=int, default=20_000, help="about how many cells")
    demo.add_argument("--no-progress", action="store_true", help="do not show a progress bar")


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------


def _pool(args: argparse.Namespace) -> None:
    from cytepool.io import write_cube
    from cytepool.io.anndata import from_anndata
    from cytepool.io.zarr import check_compression

    compression = None if args.compression == "none" else args.compression
    check_compression(compression, args.level)  # before the long part
    _check_output(Path(args.output), overwrite=args.overwrite)
    started = time.perf_counter()
    cube = from_anndata(
        args.input,
        sample_key=args.sample_key,
        group_key=args.group_key,
        layer=args.layer,
        use_raw=args.raw,
        layers=("counts", "detected") if args.detected else ("counts",),
        progress=False if args.no_progress else None,
    )
    write_cube(
        cube, args.output, compression=compression, level=args.level, overwrite=args.overwrite
    )
    n_groups, n_samples, n_features = cube.shape
    print(
        f"pooled {int(np.sum(cube.cells)):,} cells into {n_groups} groups x {n_samples} samples "
        f"x {n_features:,} features -> {args.output} ({time.perf_counter() - started:.1f} s)"
    )


def _info(args: argparse.Namespace) -> None:
    from cytepool.io import read_cube

    cube = read_cube(args.cube)
    summary = _summary(cube)
    if args.json:
        print(json.dumps({"path": str(args.cube), **summary}, indent=2))
        return
    print(_describe(args.cube, summary))


def _summary(cube: Cube) -> dict[str, Any]:
    cells = np.asarray(cube.cells, dtype=np.int64)
    n_groups, n_samples, n_features = cube.shape
    group_ids = _ids(cube.groups, "group_id")
    normalization = cube.normalization
    return {
        "shape": {"groups": n_groups, "samples": n_samples, "features": n_features},
        "layers": {name: np.dtype(layer.dtype).name for name, layer in cube.layers.items()},
        "cells": int(cells.sum()),
        "profiles": {"total": int(cells.size), "with_cells": int(np.count_nonzero(cells))},
        "cells_per_group": {
            gid: {
                "cells": int(cells[g].sum()),
                "samples_with_cells": int(np.count_nonzero(cells[g])),
            }
            for g, gid in enumerate(group_ids)
        },
        "columns": {
            name: _columns(getattr(cube, name)) for name in ("samples", "groups", "features")
        },
        "normalization": None if normalization is None else normalization.method,
        "fingerprint": cube.fingerprint,
        "provenance": [record.to_json() for record in cube.provenance],
    }


def _ids(table: Any, id_column: str) -> list[str]:
    import narwhals as nw

    if getattr(table.index, "name", None) == id_column:
        return [str(value) for value in table.index]
    return [str(value) for value in nw.from_native(table, eager_only=True)[id_column].to_list()]


def _columns(table: Any) -> list[str]:
    import narwhals as nw

    columns = nw.from_native(table, eager_only=True).columns
    return [str(name) for name in columns if name not in {"sample_id", "group_id", "feature_id"}]


def _describe(path: str, summary: dict[str, Any]) -> str:
    shape = summary["shape"]
    profiles = summary["profiles"]
    width = max((len(gid) for gid in summary["cells_per_group"]), default=0)
    lines = [
        f"cube       {path}",
        f"shape      {shape['groups']} groups x {shape['samples']} samples x "
        f"{shape['features']:,} features",
        "layers     " + ", ".join(f"{name} ({dtype})" for name, dtype in summary["layers"].items()),
        f"cells      {summary['cells']:,} in {profiles['with_cells']} of {profiles['total']} "
        f"profiles",
        "cells per group:",
        *(
            f"  {gid:<{width}}  {item['cells']:>10,}  in {item['samples_with_cells']} samples"
            for gid, item in summary["cells_per_group"].items()
        ),
        *(
            f"{name:<10} {', '.join(columns) if columns else '(ids only)'}"
            for name, columns in summary["columns"].items()
        ),
        f"normalization {summary['normalization'] or 'none'}",
        f"fingerprint {summary['fingerprint']}",
        "provenance:",
        *(_provenance_line(record) for record in summary["provenance"]),
    ]
    return "\n".join(lines)


def _provenance_line(record: dict[str, Any]) -> str:
    parameters = " ".join(
        f"{key}={json.dumps(value)}" for key, value in record["parameters"].items()
    )
    if len(parameters) > 90:
        parameters = parameters[:87] + "..."
    return (
        f"  {record['time']}  {record['operation']}  {parameters}  (cytepool {record['version']})"
    )


def _export(args: argparse.Namespace) -> None:
    from cytepool.io import read_cube
    from cytepool.io.anndata import to_anndata

    output = Path(args.output)
    if output.suffix not in {".h5ad", ".zarr"}:
        msg = f"OUTPUT must end in .h5ad or .zarr, found {output.name!r}"
        raise ValueError(msg)
    _check_output(output, overwrite=args.overwrite)
    cube = read_cube(args.cube)
    if args.group:
        cube = cube.select(groups=args.group)
    adata = to_anndata(cube, layer=args.layer)
    _write_anndata(adata, output)
    print(f"exported {adata.n_obs} profiles x {adata.n_vars:,} features -> {output}")


def _check_output(path: Path, *, overwrite: bool) -> None:
    """Refuse to replace something unless asked to, and then only a file or a store."""
    if not path.exists() and not path.is_symlink():
        if not path.parent.is_dir():
            msg = f"the directory {path.parent} does not exist"
            raise FileNotFoundError(msg)
        return
    if not overwrite:
        msg = f"{path} exists; pass --overwrite to replace it"
        raise FileExistsError(msg)
    is_store = path.is_dir() and ((path / "zarr.json").is_file() or (path / ".zgroup").is_file())
    if not (path.is_file() or is_store or (path.is_dir() and not any(path.iterdir()))):
        msg = f"{path} is neither a file nor a Zarr store nor empty; not replacing it"
        raise FileExistsError(msg)


def _write_anndata(adata: anndata.AnnData, output: Path) -> None:
    """Write .h5ad or .zarr (Zarr v3) next to ``output``, then move it into place."""
    import anndata as ad

    temporary = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        built = temporary / output.name
        if output.suffix == ".h5ad":
            adata.write_h5ad(built)
        else:
            with _zarr_v3(ad), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*zarr v3.*", category=UserWarning)
                warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
                adata.write_zarr(built)
        _replace(built, output)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _zarr_v3(ad: Any) -> contextlib.AbstractContextManager[Any]:
    """Make anndata write Zarr v3: its default from 0.13 on (where the setting is deprecated)."""
    from importlib.metadata import version

    major, minor = (int(part) for part in re.findall(r"\d+", version("anndata"))[:2])
    if (major, minor) >= (0, 13):
        return contextlib.nullcontext()
    return ad.settings.override(zarr_write_format=3)


def _replace(built: Path, output: Path) -> None:
    if output.is_dir() and not output.is_symlink():
        shutil.rmtree(output)
    elif output.exists() and built.is_dir():
        output.unlink()
    os.replace(built, output)


# ---------------------------------------------------------------------------------------------
# The demo
# ---------------------------------------------------------------------------------------------

_CELL_TYPES = {  # name: (share of cells, lineage)
    "B": (0.14, "lymphoid"),
    "CD4 T": (0.30, "lymphoid"),
    "CD8 T": (0.18, "lymphoid"),
    "NK": (0.10, "lymphoid"),
    "Monocyte": (0.22, "myeloid"),
    "DC": (0.06, "myeloid"),
}
_DEMO_GROUP = "CD4 T"


def _demo(args: argparse.Namespace) -> None:
    import anndata as ad

    from cytepool.io import read_cube, write_cube
    from cytepool.io.anndata import from_anndata, to_anndata

    if args.cells < 100:
        msg = f"--cells must be at least 100, found {args.cells}"
        raise ValueError(msg)
    directory = _demo_directory(Path(args.directory))
    cells_path = directory / "cells.h5ad"
    cube_path = directory / "cells.cube.zarr"
    export_path = directory / f"{_DEMO_GROUP.replace(' ', '_')}.h5ad"
    print(f"cytepool demo -> {directory}/")
    with _step() as took:
        cells = _simulate_cells(args.cells, seed=_DEMO_SEED)
        cells.write_h5ad(cells_path)
    matrix: Any = cells.X  # a CSR matrix here
    nonzero = matrix.nnz / (cells.n_obs * cells.n_vars)
    print(
        f"1. simulated {cells.n_obs:,} cells x {cells.n_vars:,} genes: 8 donors x 2 "
        f"conditions, {len(_CELL_TYPES)} cell types, negative-binomial counts ({nonzero:.1%} "
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
        f"layers {layers}; sample covariates {_columns(cube.samples)}, group covariates "
        f"{_columns(cube.groups)} [{took()}]"
    )
    with _step() as took:
        write_cube(cube, cube_path)
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
        raise RuntimeError(msg)
    with _step() as took:
        selected = lazy.select(groups=[_DEMO_GROUP])
        pseudobulk = to_anndata(selected)
        _write_anndata(pseudobulk, export_path)
    print(
        f"5. selected {_DEMO_GROUP!r} ({int(np.sum(selected.cells)):,} cells) and exported "
        f"{pseudobulk.n_obs} profiles x {pseudobulk.n_vars:,} genes with to_anndata -> "
        f"{export_path} ({_size(export_path)}) [{took()}]"
    )
    print(f"next: cytepool info {cube_path}")


@contextlib.contextmanager
def _step() -> Iterator[Callable[[], str]]:
    start = time.perf_counter()
    end: list[float] = []
    yield lambda: f"{(end[0] if end else time.perf_counter()) - start:.1f} s"
    end.append(time.perf_counter())


def _demo_directory(directory: Path) -> Path:
    """Make ``directory`` ready: new, empty, or the output of an earlier demo (cleared)."""
    marker = directory / _DEMO_MARKER
    if directory.exists() and not directory.is_dir():
        msg = f"{directory} exists and is not a directory"
        raise FileExistsError(msg)
    if directory.is_dir() and any(directory.iterdir()):
        if not marker.is_file():
            msg = (
                f"{directory} is not empty and was not written by `cytepool demo`; "
                f"name a new or empty directory: cytepool demo DIR"
            )
            raise FileExistsError(msg)
        for name in json.loads(marker.read_text(encoding="utf-8")):
            _remove(directory / name)
    directory.mkdir(parents=True, exist_ok=True)
    names = ["cells.h5ad", "cells.cube.zarr", f"{_DEMO_GROUP.replace(' ', '_')}.h5ad"]
    marker.write_text(json.dumps(names), encoding="utf-8")
    return directory


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _size(path: Path) -> str:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return f"{size / 1e6:.1f} MB"


def _simulate_cells(n_cells: int, *, seed: int) -> anndata.AnnData:
    """Seeded negative-binomial counts: 8 donors x 2 conditions, 6 cell types, 2,000 genes."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse

    rng = np.random.default_rng(seed)
    n_genes, dispersion = 2_000, 0.4
    donors = [f"D{i}" for i in range(1, 9)]
    types = list(_CELL_TYPES)
    base = np.exp(rng.normal(-3.2, 1.6, n_genes))  # mean counts per cell, heavy-tailed
    type_effect = np.exp(rng.normal(0.0, 0.6, (len(types), n_genes)) * (rng.random(n_genes) < 0.3))
    donor_effect = np.exp(rng.normal(0.0, 0.15, (len(donors), n_genes)))
    stim_effect = np.where(rng.random(n_genes) < 0.05, np.exp(rng.normal(0.0, 1.0, n_genes)), 1.0)
    shares = np.array([share for share, _ in _CELL_TYPES.values()])
    blocks, rows = [], []
    per_sample = n_cells / (2 * len(donors))
    for d, donor in enumerate(donors):
        for condition in ("ctrl", "stim"):
            n = int(rng.poisson(per_sample))
            kinds = rng.choice(len(types), size=n, p=shares)
            depth = rng.lognormal(0.0, 0.35, n)[:, None]
            mean = base * type_effect[kinds] * donor_effect[d] * depth
            if condition == "stim":
                mean = mean * stim_effect
            counts = rng.poisson(rng.gamma(1 / dispersion, mean * dispersion))
            blocks.append(scipy.sparse.csr_matrix(counts.astype(np.float32)))
            rows.append(
                pd.DataFrame(
                    {"donor": donor, "condition": condition, "cell_type": np.array(types)[kinds]}
                )
            )
    obs = pd.concat(rows, ignore_index=True)
    obs["sample"] = obs["donor"] + "-" + obs["condition"]
    obs["sex"] = obs["donor"].map({d: "F" if i % 2 else "M" for i, d in enumerate(donors)})
    obs["age"] = obs["donor"].map({d: 25 + 6 * i for i, d in enumerate(donors)})
    obs["lineage"] = obs["cell_type"].map({t: lineage for t, (_, lineage) in _CELL_TYPES.items()})
    for column in ("donor", "condition", "cell_type", "sample", "sex", "lineage"):
        obs[column] = obs[column].astype("category")
    obs.index = [f"cell{i:06d}" for i in range(len(obs))]
    var = pd.DataFrame(
        {"gene_symbol": [f"GENE{j:04d}" for j in range(n_genes)]},
        index=[f"ENSG{j:011d}" for j in range(n_genes)],
    )
    counts = scipy.sparse.vstack(blocks, format="csr")
    obs["n_counts"] = np.asarray(counts.sum(axis=1)).ravel()
    return ad.AnnData(X=counts, obs=obs, var=var)
