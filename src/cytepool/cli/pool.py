"""``cytepool pool``: pool the cells of an AnnData (or of one modality of a MuData) into a
cube file."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cytepool.cli._shared import (
    UsageError,
    add_command,
    check_output,
    path_argument,
    pooled_covariates,
)

if TYPE_CHECKING:
    from cytepool.cube import Cube

__all__ = ["add"]

EXAMPLES = """
    examples:

      cytepool pool cells.h5ad cells.cube.zarr --sample-key donor --group-key cell_type
      cytepool pool cells.h5ad cells.cube.zarr --sample-key donor --group-key cell_type \\
          --layer counts --sample-covariates condition,age --group-covariates '' \\
          --layers counts,detected,squares
      cytepool pool cells.h5mu protein.cube.zarr --sample-key donor --group-key cell_type \\
          --modality prot
      cytepool pool batch1.h5ad batch2.h5ad all.cube.zarr --sample-key donor \\
          --group-key cell_type --jobs 2
      cytepool pool samples/ all.cube.zarr --sample-from-filename --group-key cell_type
      cytepool pool 'atlas/*.h5ad' atlas.cube.zarr --sample-key donor --group-key cell_type \\
          --features intersection

    Several inputs (files, a directory of .h5ad / .h5mu / .zarr inputs, or a quoted glob)
    are pooled one file per process, at most --jobs at once, and added up into one cube.

    Without --sample-covariates, every obs column that is constant within each sample
    becomes a sample covariate; the command prints the columns kept and those dropped,
    with the reason, and records them in the cube's provenance.
    """


def add(commands: Any) -> None:
    """Add ``pool`` and its arguments to the subparsers ``commands``."""
    pool = add_command(
        commands,
        "pool",
        "Pool the cells of an .h5ad file or AnnData .zarr store (or one modality of a MuData "
        "file), or of many, into a cube file. The input is read backed, in row blocks, so "
        "memory stays small whatever its size.",
        EXAMPLES,
        run,
    )
    pool.add_argument(
        "input",
        metavar="INPUT",
        nargs="+",
        type=path_argument,
        help="an .h5ad file or AnnData .zarr store; several inputs (or a directory of them, "
        "or a glob) are pooled into one cube",
    )
    pool.add_argument(
        "output", metavar="OUTPUT", type=path_argument, help="the cube file to write (*.cube.zarr)"
    )
    samples = pool.add_mutually_exclusive_group(required=True)
    samples.add_argument("--sample-key", help="obs column with each cell's sample")
    samples.add_argument(
        "--sample-from-filename",
        action="store_true",
        help="each input is one sample, named by its file name up to its first dot "
        "(donor1.raw.h5ad: donor1)",
    )
    pool.add_argument("--group-key", required=True, help="obs column with each cell's group")
    matrix = pool.add_mutually_exclusive_group()
    matrix.add_argument(
        "--layer",
        help="the layer of the input's layers (adata.layers) holding the counts; without "
        "--layer (or --raw), X is pooled",
    )
    matrix.add_argument("--raw", action="store_true", help="pool raw.X, features from raw.var")
    matrix.add_argument(
        "--modality",
        metavar="NAME",
        help="the input is a MuData (.h5mu or .zarr): pool the X of its modality NAME, with the "
        "labels of the modality's obs (else of the global obs)",
    )
    pool.add_argument(
        "--allow-float",
        action="store_true",
        help="the values are meant not to be whole numbers (normalized, corrected): pool "
        "them without the warning that they are not counts",
    )
    _add_covariates(pool)
    _add_many(pool)
    _add_outputs(pool)


def _add_many(pool: argparse.ArgumentParser) -> None:
    pool.add_argument(
        "--features",
        choices=("same", "intersection"),
        default="same",
        help="with several inputs: 'same' requires the same feature ids in every file (in "
        "any order); 'intersection' pools those all files share (default: same)",
    )
    pool.add_argument(
        "--duplicates",
        choices=("error", "add"),
        default="error",
        help="with several inputs: the same profile (group and sample) in two files is an "
        "error, or (add) one sample split over files whose sums add (default: error)",
    )
    pool.add_argument(
        "--jobs",
        type=_positive,
        metavar="N",
        help="with several inputs: pool at most N files at once, each in its own process "
        "(this one and N - 1 workers; default: the number of usable CPUs)",
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"expected a positive integer, found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _add_covariates(pool: argparse.ArgumentParser) -> None:
    pool.add_argument(
        "--sample-covariates",
        metavar="COLUMNS",
        type=_names,
        action="extend",
        help="obs columns to keep as sample covariates, comma-separated ('' for none; "
        "default: every column constant within each sample)",
    )
    pool.add_argument(
        "--group-covariates",
        metavar="COLUMNS",
        type=_names,
        action="extend",
        help="obs columns to keep as group covariates, as --sample-covariates (default: every "
        "other column constant within each group)",
    )


def _add_outputs(pool: Any) -> None:  # Any: a help text may be a function (see Formatter)
    made = pool.add_mutually_exclusive_group()
    made.add_argument(
        "--layers",
        metavar="NAMES",
        type=_layer_names,
        help="the layers to make, comma-separated, pooled in one pass: counts (sums of the "
        "values), detected (the number of cells with a nonzero value), squares (sums of the "
        "squared values, for variances) (default: counts)",
    )
    made.add_argument(
        "--detected",
        action="store_true",
        help="also make the layer 'detected': the same as --layers counts,detected",
    )
    pool.add_argument(
        "--compression",
        choices=("gzip", "zstd", "none"),
        default="gzip",
        help="compression of the cube file (default: gzip)",
    )
    pool.add_argument("--level", type=int, help=_level_help)
    pool.add_argument("--overwrite", action="store_true", help="replace an existing cube file")
    pool.add_argument("--no-progress", action="store_true", help="do not show a progress bar")


def _names(text: str) -> list[str]:
    """The column names of a comma-separated list ('' names none)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _layer_names(text: str) -> tuple[str, ...]:
    """The layer names of --layers: distinct, each one from_cells makes."""
    from cytepool.pooling import LAYERS

    names = tuple(_names(text))
    if not names or len(set(names)) != len(names) or not set(names) <= set(LAYERS):
        msg = f"expected distinct names among {', '.join(LAYERS)}, found {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return names


def _level_help() -> str:
    from cytepool.io.zarr import DEFAULT_LEVELS

    return (
        f"compression level: gzip from 0 to 9 (default {DEFAULT_LEVELS['gzip']}), zstd from "
        f"-131072 to 22 (default {DEFAULT_LEVELS['zstd']})"
    )


def run(args: argparse.Namespace) -> None:
    """Pool the input named by ``args`` and write the cube file; print what was made."""
    import numpy as np

    from cytepool.io import write_cube
    from cytepool.io.zarr import check_compression

    compression = None if args.compression == "none" else args.compression
    if compression is None and args.level is not None:
        msg = "--level needs --compression gzip or zstd"
        raise UsageError(msg)
    try:
        check_compression(compression, args.level)  # before the long part
    except ValueError as error:
        msg = f"--level: {error}"
        raise UsageError(msg) from error
    inputs = _inputs(args.input)
    check_output(args.output, overwrite=args.overwrite, cube=True, reading=inputs)
    started = time.perf_counter()
    cube = _pooled(args, inputs)
    write_cube(
        cube, args.output, compression=compression, level=args.level, overwrite=args.overwrite
    )
    n_groups, n_samples, n_features = cube.shape
    files = f" from {len(args.input)} files" if len(args.input) > 1 else ""
    print(
        f"pooled {int(np.sum(cube.cells)):,} cells{files} into {n_groups} groups x "
        f"{n_samples} samples x {n_features:,} features -> {args.output} "
        f"({time.perf_counter() - started:.1f} s)"
    )
    covariates = pooled_covariates(cube) or {}
    for axis in ("samples", "groups"):
        kept = covariates.get(axis, [])
        print(f"{axis[:-1]} covariates: {', '.join(kept) if kept else '(none)'}")
    for name, reason in covariates.get("dropped", {}).items():
        print(f"dropped: {name} ({reason})")


def _pooled(args: argparse.Namespace, inputs: list[str]) -> Cube:
    """The cube ``pool`` makes of the ``inputs`` (``args.input`` found): of AnnData, or of
    one modality of MuData."""
    from cytepool.io.anndata import from_anndata, from_mudata_cells

    many: dict[str, Any] = {}
    if len(inputs) > 1 or args.sample_from_filename:
        many = {"jobs": args.jobs, "duplicates": args.duplicates}
        if args.features == "intersection":
            many["features"] = "intersection"
        if args.sample_from_filename:
            many["sample_ids"] = _sample_names(inputs, args.duplicates)
    source: Any = inputs if many else inputs[0]
    args.input = inputs
    options = {
        **many,
        "sample_key": args.sample_key,
        "group_key": args.group_key,
        "samples": args.sample_covariates,
        "groups": args.group_covariates,
        "layers": args.layers or (("counts", "detected") if args.detected else ("counts",)),
        "allow_float": args.allow_float,
        "progress": False if args.no_progress else None,
    }
    if args.modality is not None:
        cubes = from_mudata_cells(source, modalities=[args.modality], **options)
        return cubes[args.modality]
    return from_anndata(source, layer=args.layer, use_raw=args.raw, **options)


_SUFFIXES = (".h5ad", ".h5mu", ".zarr")


def _inputs(typed: list[str]) -> list[str]:
    """The input paths: each as typed, a directory's inputs, or the matches of a glob."""
    import glob

    found = []
    for text in typed:
        path = Path(text)
        if path.is_dir() and not _is_store(path):
            inside = sorted(str(p) for p in path.iterdir() if _is_input(p))
            if not inside:
                msg = f"the directory {text} holds no .h5ad, .h5mu or .zarr input"
                raise FileNotFoundError(msg)
            found += inside
        elif not path.exists() and glob.has_magic(text):
            matches = sorted(glob.glob(text))
            if not matches:
                msg = f"no file matches {text}"
                raise FileNotFoundError(msg)
            found += matches
        else:
            found.append(text)
    return found


def _is_input(path: Path) -> bool:
    """An input in a directory: .h5ad, .h5mu or .zarr, but not a cube file (.cube.zarr) nor
    a hidden file (macOS's ``._cells.h5ad`` beside ``cells.h5ad``, as a glob skips them)."""
    name = path.name
    return path.suffix in _SUFFIXES and not name.endswith(".cube.zarr") and name[:1] != "."


def _is_store(path: Path) -> bool:
    return any((path / name).is_file() for name in ("zarr.json", ".zgroup", ".zattrs"))


def _sample_name(path: str) -> str:
    """A file's name without its extensions: donor1.h5ad, donor1.zarr and donor1.raw.h5ad
    give donor1."""
    name = Path(path).name
    return name.split(".")[0] or name


def _sample_names(inputs: list[str], duplicates: str) -> list[str]:
    """The sample of each input, named by :func:`_sample_name`; two files of one name are an
    error (UsageError) unless ``duplicates`` is ``"add"``, which adds one sample's files."""
    names = [_sample_name(path) for path in inputs]
    first: dict[str, str] = {}
    for path, name in zip(inputs, names, strict=True):
        if duplicates == "error" and name in first:
            msg = (
                f"--sample-from-filename names both {first[name]} and {path} {name!r} (a "
                "sample's name is its file's name up to the first dot): rename the files to "
                "name two samples, or pass --duplicates add if they hold one sample"
            )
            raise UsageError(msg)
        first.setdefault(name, path)
    return names
