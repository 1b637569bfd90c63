"""The ``cytepool`` command: pool AnnData files into cube files, inspect and export cubes.

Commands (each has ``--help``, with examples)::

    cytepool pool INPUT OUTPUT.cube.zarr --sample-key K --group-key K [--layer L | --raw]
    cytepool info CUBE [--json]
    cytepool export CUBE OUTPUT.h5ad|OUTPUT.zarr [--layer L] [--group G]
    cytepool demo [DIR]

The command speaks its own language: an error is one line on stderr, in the words of its
flags (``--layer``, not ``layer=``), with paths as they were given, and exit status 1 (2 for
bad arguments), never a traceback; a warning is one line too. Output cut short by the reader
(``cytepool info CUBE | head -1``) ends quietly with status 0. It starts quickly: this module
imports the standard library only (``--help`` needs no numpy).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from cytepool.errors import CytepoolError, InputError, UnknownIdError

if TYPE_CHECKING:
    import anndata

    from cytepool.cube import Cube

__all__ = ["main"]

_ZARR_JSON = "zarr.json"
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
    from cytepool import _words
    from cytepool.errors import NotCountsWarning

    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version, or a usage error (already printed)
        return stop.code if isinstance(stop.code, int) else 0
    with _words.speaking(command_line=True), warnings.catch_warnings():
        warnings.showwarning = _warning_printer(args.command)
        warnings.simplefilter("default", NotCountsWarning)  # a line to read, not a failure
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        args.run(args)
        sys.stdout.flush()  # now, so that a closed pipe is met here and not at exit
    except BrokenPipeError:  # the reader has had enough (| head): not an error
        _discard_stdout()
        return 0
    except KeyboardInterrupt:
        print("cytepool: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # every failure is one line, never a traceback
        message = _as_typed(_one_line(error), args)
        print(f"cytepool {args.command}: error: {message}", file=sys.stderr)
        return 1
    return 0


def _warning_printer(command: str) -> Callable[..., None]:
    def show(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
        print(f"cytepool {command}: warning: {_one_line(message)}", file=sys.stderr)

    return show


def _discard_stdout() -> None:
    """Point stdout at the null device, so that flushing it at exit fails no more."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture it)
        pass


def _one_line(error: BaseException | str) -> str:
    if isinstance(error, ImportError) and error.name in {"anndata", "mudata", "h5py", "scipy"}:
        return (
            f"this command needs {error.name}: install cytepool's extra 'anndata' (in a checkout "
            f"of cytepool: pip install -e '.[anndata]')"
        )
    if isinstance(error, OSError) and error.strerror:  # without "[Errno 17]"
        text = error.strerror
        if error.filename is not None and os.fspath(error.filename) not in text:
            text = f"{text}: {os.fspath(error.filename)}"
    elif isinstance(error, KeyError) and error.args:
        text = str(error.args[0])
    else:
        text = str(error)
    text = " ".join(text.split())
    return text or type(error).__name__


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Formatter(argparse.HelpFormatter):
    """Help that wraps paragraphs and keeps indented lines (the examples) as they are; a help
    text may be a function, called only when the help is shown (it may import)."""

    def _format_action(self, action: argparse.Action) -> str:
        if callable(action.help):
            action = copy.copy(action)
            action.help = action.help()
        return super()._format_action(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in textwrap.dedent(text).strip().split("\n\n"):
            if block.startswith(" "):
                blocks.append("\n".join(indent + line for line in block.splitlines()))
            else:
                blocks.append(
                    textwrap.fill(
                        " ".join(block.split()),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                    )
                )
        return "\n\n".join(blocks)


class _Version(argparse.Action):
    """--version, reading the installed version (importlib.metadata) only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from cytepool._version import __version__

        print(f"cytepool {__version__}")
        parser.exit()


_EXAMPLES = {
    "cytepool": """
        examples:

          cytepool demo
          cytepool pool cells.h5ad cells.cube.zarr --sample-key donor --group-key cell_type
          cytepool info cells.cube.zarr
          cytepool export cells.cube.zarr b_cells.h5ad --group B

        Each command has --help.
        """,
    "pool": """
        examples:

          cytepool pool cells.h5ad cells.cube.zarr --sample-key donor --group-key cell_type
          cytepool pool cells.h5ad cells.cube.zarr --sample-key donor --group-key cell_type \\
              --layer counts --sample-covariates condition,age --group-covariates '' \\
              --layers counts,detected,squares
          cytepool pool cells.h5mu protein.cube.zarr --sample-key donor --group-key cell_type \\
              --modality prot

        Without --sample-covariates, every obs column that is constant within each sample
        becomes a sample covariate; the command prints the columns kept and those dropped,
        with the reason, and records them in the cube's provenance.
        """,
    "info": """
        examples:

          cytepool info cells.cube.zarr
          cytepool info cells.cube.zarr | head -3
          cytepool info cells.cube.zarr --json
        """,
    "export": """
        examples:

          cytepool export cells.cube.zarr pseudobulk.h5ad
          cytepool export cells.cube.zarr b_cells.h5ad --group B
          cytepool export cells.cube.zarr detected.zarr --layer detected
        """,
    "demo": """
        examples:

          cytepool demo
          cytepool demo my-demo --cells 5000
        """,
}


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="cytepool",
        description="Pool single cells into pseudobulk cubes; inspect and export cube files.",
        epilog=_EXAMPLES["cytepool"],
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_pool(commands)
    _add_info(commands)
    _add_export(commands)
    _add_demo(commands)
    return parser


def _add_command(commands: Any, name: str, text: str, run: Callable[..., None]) -> Any:
    command = commands.add_parser(
        name, help=text, description=text, epilog=_EXAMPLES[name], formatter_class=_Formatter
    )
    command.set_defaults(run=run)
    return command


def _add_pool(commands: Any) -> None:
    pool = _add_command(
        commands,
        "pool",
        "Pool the cells of an .h5ad file or AnnData .zarr store (or one modality of a MuData "
        "file) into a cube file. The input is read backed, in row blocks, so memory stays "
        "small whatever its size.",
        _pool,
    )
    pool.add_argument("input", metavar="INPUT", help="an .h5ad file or AnnData .zarr store")
    pool.add_argument("output", metavar="OUTPUT", help="the cube file to write (*.cube.zarr)")
    pool.add_argument("--sample-key", required=True, help="obs column with each cell's sample")
    pool.add_argument("--group-key", required=True, help="obs column with each cell's group")
    matrix = pool.add_mutually_exclusive_group()
    matrix.add_argument("--layer", help="the layer holding the counts (default: X)")
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
    import numpy as np

    from cytepool.io import write_cube
    from cytepool.io.zarr import check_compression

    compression = None if args.compression == "none" else args.compression
    if compression is None and args.level is not None:
        msg = "--level needs --compression gzip or zstd"
        raise InputError(msg)
    try:
        check_compression(compression, args.level)  # before the long part
    except ValueError as error:
        msg = f"--level: {error}"
        raise InputError(msg) from error
    _check_output(args.output, overwrite=args.overwrite, cube=True)
    started = time.perf_counter()
    cube = _pooled(args)
    write_cube(
        cube, args.output, compression=compression, level=args.level, overwrite=args.overwrite
    )
    n_groups, n_samples, n_features = cube.shape
    print(
        f"pooled {int(np.sum(cube.cells)):,} cells into {n_groups} groups x {n_samples} samples "
        f"x {n_features:,} features -> {args.output} ({time.perf_counter() - started:.1f} s)"
    )
    covariates = _pooled_covariates(cube) or {}
    for axis in ("samples", "groups"):
        kept = covariates.get(axis, [])
        print(f"{axis[:-1]} covariates: {', '.join(kept) if kept else '(none)'}")
    for name, reason in covariates.get("dropped", {}).items():
        print(f"dropped: {name} ({reason})")


def _pooled(args: argparse.Namespace) -> Cube:
    """The cube ``pool`` makes: of an AnnData, or of one modality of a MuData."""
    from cytepool.io.anndata import from_anndata, from_mudata_cells

    options = {
        "sample_key": args.sample_key,
        "group_key": args.group_key,
        "samples": args.sample_covariates,
        "groups": args.group_covariates,
        "layers": args.layers or (("counts", "detected") if args.detected else ("counts",)),
        "allow_float": args.allow_float,
        "progress": False if args.no_progress else None,
    }
    if args.modality is not None:
        cubes = from_mudata_cells(args.input, modalities=[args.modality], **options)
        return cubes[args.modality]
    return from_anndata(args.input, layer=args.layer, use_raw=args.raw, **options)


def _pooled_covariates(cube: Cube) -> dict[str, Any] | None:
    """What the last record of pooling says of the covariates kept and dropped, if any."""
    for record in reversed(cube.provenance):
        covariates = record.parameters.get("covariates")
        if isinstance(covariates, dict):
            return covariates
    return None


def _info(args: argparse.Namespace) -> None:
    from cytepool.io import read_cube

    cube = read_cube(args.cube)
    summary = _summary(cube)
    if args.json:
        print(json.dumps({"path": str(args.cube), **summary}, indent=2))
        return
    print(_describe(args.cube, summary))


def _summary(cube: Cube) -> dict[str, Any]:
    """What ``info`` prints; from the ids and column types, without building frames."""
    import numpy as np

    from cytepool._assemble import parts_of

    tables = parts_of(cube).tables
    cells = np.asarray(cube.cells, dtype=np.int64)
    n_groups, n_samples, n_features = cube.shape
    group_ids = tables["groups"].ids
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
        "covariates": {
            name: _without_ids(tables[name].schema()) for name in ("samples", "groups", "features")
        },
        "dropped": (_pooled_covariates(cube) or {}).get("dropped", {}),
        "normalization": None if normalization is None else normalization.method,
        "fingerprint": cube.fingerprint,
        "provenance": [record.to_json() for record in cube.provenance],
    }


def _ids(table: Any, id_column: str) -> list[str]:
    import narwhals.stable.v2 as nw

    if getattr(table.index, "name", None) == id_column:
        return [str(value) for value in table.index]
    return [str(value) for value in nw.from_native(table, eager_only=True)[id_column].to_list()]


def _columns(table: Any) -> list[str]:
    return list(_covariates(table))


def _covariates(table: Any) -> dict[str, str]:
    """The columns of a table but its ids, with their data types (narwhals' names)."""
    import narwhals.stable.v2 as nw

    schema = nw.from_native(table, eager_only=True).schema
    return _without_ids({str(name): str(dtype) for name, dtype in schema.items()})


def _without_ids(schema: dict[str, str]) -> dict[str, str]:
    ids = {"sample_id", "group_id", "feature_id"}
    return {name: dtype for name, dtype in schema.items() if name not in ids}


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
            f"{name:<10} {_listed(columns) if columns else '(ids only)'}"
            for name, columns in summary["covariates"].items()
        ),
        *(f"dropped    {name} ({reason})" for name, reason in summary["dropped"].items()),
        f"normalization {summary['normalization'] or 'none'}",
        f"fingerprint {summary['fingerprint']}",
        "provenance:",
        *(_provenance_line(record) for record in summary["provenance"]),
    ]
    return "\n".join(lines)


def _listed(columns: dict[str, str]) -> str:
    return ", ".join(f"{name} ({dtype})" for name, dtype in columns.items())


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
        raise InputError(msg)
    _check_output(args.output, overwrite=args.overwrite, cube=False)
    cube = read_cube(args.cube)
    if args.group:
        known = _ids(cube.groups, "group_id")
        unknown = [group for group in args.group if group not in known]
        if unknown:
            msg = f"--group {unknown[0]!r}: the cube has no such group; its groups are {known}"
            raise UnknownIdError(msg, unknown=unknown[0], known=known)
        cube = cube.select(groups=args.group)
    adata = to_anndata(cube, layer=args.layer)
    _write_anndata(adata, output)
    print(f"exported {adata.n_obs} profiles x {adata.n_vars:,} features -> {args.output}")


def _check_output(typed: str, *, overwrite: bool, cube: bool) -> None:
    """Refuse to replace something unless asked to, and then only what the command writes.

    A cube file replaces only a cube file or an empty directory (as write_cube does), an
    AnnData only a file, a Zarr store or an empty directory; never a symbolic link.
    """
    path = Path(typed)
    if not path.exists() and not path.is_symlink():
        if not path.parent.is_dir():
            msg = f"the directory {os.path.dirname(typed) or '.'} does not exist"
            raise FileNotFoundError(msg)
        return
    if not overwrite:
        msg = f"{typed} exists; pass --overwrite to replace it"
        raise FileExistsError(msg)
    empty = path.is_dir() and not any(path.iterdir())
    if cube:
        replaceable, what = _is_cube_file(path) or empty, "a cube file or an empty directory"
    else:
        is_store = any((path / name).is_file() for name in (_ZARR_JSON, ".zgroup"))
        replaceable, what = path.is_file() or is_store or empty, "a file or a Zarr store"
    if path.is_symlink():
        msg = f"{typed} is a symbolic link; --overwrite replaces only {what}: name its target"
        raise FileExistsError(msg)
    if not replaceable:
        msg = f"{typed} exists and is not {what}; --overwrite replaces only {what}"
        raise FileExistsError(msg)


def _is_cube_file(path: Path) -> bool:
    from cytepool.io.zarr import read_group_attributes

    try:
        return read_group_attributes(path).get("format") == "cytepool.cube"
    except (OSError, ValueError):
        return False


def _as_typed(text: str, args: argparse.Namespace) -> str:
    """The message with the paths of the command line as they were typed, not resolved."""
    for name in ("input", "output", "cube", "directory"):
        typed = getattr(args, name, None)
        if not isinstance(typed, str):
            continue
        path = Path(typed)
        forms = {str(path.absolute()), os.path.realpath(typed)}
        forms.add(os.path.join(os.path.realpath(path.parent), path.name))
        for form in sorted(forms - {typed}, key=len, reverse=True):
            text = text.replace(form, typed)
    return text


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

_DEMO_GROUP = "CD4 T"
_DEMO_OUTPUTS = ("cells.h5ad", "cells.cube.zarr", f"{_DEMO_GROUP.replace(' ', '_')}.h5ad")


def _demo(args: argparse.Namespace) -> None:
    import anndata as ad
    import numpy as np

    from cytepool._demo import CELL_TYPES, prepare_directory, simulate_cells
    from cytepool.io import read_cube, write_cube
    from cytepool.io.anndata import from_anndata, to_anndata

    if args.cells < 100:
        msg = f"--cells must be at least 100, found {args.cells}"
        raise InputError(msg)
    directory = prepare_directory(Path(args.directory), _DEMO_OUTPUTS)
    cells_path, cube_path = (directory / name for name in _DEMO_OUTPUTS[:2])
    export_path = directory / _DEMO_OUTPUTS[2]
    print(f"cytepool demo -> {directory}/")
    with _step() as took:
        cells = simulate_cells(args.cells, seed=_DEMO_SEED)
        cells.write_h5ad(cells_path)
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
        raise CytepoolError(msg)
    with _step() as took:
        selected = lazy.select(groups=[_DEMO_GROUP])
        pseudobulk = to_anndata(selected)
        _write_anndata(pseudobulk, export_path)
    print(
        f"5. selected {_DEMO_GROUP!r} ({int(np.sum(selected.cells)):,} cells) and exported "
        f"{pseudobulk.n_obs} profiles x {pseudobulk.n_vars:,} genes with to_anndata -> "
        f"{export_path} ({_size(export_path)}) [{took()}]"
    )
    print(f"next: {_command()} info {shlex.quote(str(cube_path))}")


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
