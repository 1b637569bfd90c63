"""``cytepool export``: a cube file as a pseudobulk AnnData (.h5ad or .zarr)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cytepool.cli._shared import (
    UsageError,
    add_command,
    check_output,
    path_argument,
    write_anndata,
)
from cytepool.errors import UnknownIdError

__all__ = ["add"]

EXAMPLES = """
    examples:

      cytepool export cells.cube.zarr pseudobulk.h5ad
      cytepool export cells.cube.zarr b_cells.h5ad --group B
      cytepool export cells.cube.zarr detected.zarr --layer detected
    """


def add(commands: Any) -> None:
    """Add ``export`` and its arguments to the subparsers ``commands``."""
    export = add_command(
        commands,
        "export",
        "Export a cube file as a pseudobulk AnnData (.h5ad, or .zarr in Zarr v3), one "
        "observation per non-empty profile, ready for scanpy, decoupler and PyDESeq2.",
        EXAMPLES,
        run,
    )
    export.add_argument(
        "cube", metavar="CUBE", type=path_argument, help="a cube file (*.cube.zarr)"
    )
    export.add_argument(
        "output", metavar="OUTPUT", type=path_argument, help="OUTPUT.h5ad or OUTPUT.zarr"
    )
    export.add_argument("--layer", default="counts", help="the layer that becomes X")
    export.add_argument("--group", action="append", help="export only this group (repeatable)")
    export.add_argument("--overwrite", action="store_true", help="replace an existing output")


def run(args: argparse.Namespace) -> None:
    """Write the (selected) cube ``args.cube`` as the AnnData ``args.output``."""
    from cytepool.io import read_cube
    from cytepool.io.anndata import to_anndata

    output = Path(args.output)
    if output.suffix not in {".h5ad", ".zarr"}:
        msg = f"OUTPUT must end in .h5ad or .zarr, found {output.name!r}"
        raise UsageError(msg)  # a bad argument: status 2
    _check_groups(args.group or [])
    check_output(
        args.output, overwrite=args.overwrite, cube=False, reading=[args.cube], role="CUBE"
    )
    cube = read_cube(args.cube)
    if args.group:
        known = _ids(cube.groups, "group_id")
        unknown = [group for group in args.group if group not in known]
        if unknown:
            msg = f"--group {unknown[0]!r}: the cube has no such group; its groups are {known}"
            raise UnknownIdError(msg, unknown=unknown[0], known=known)
        cube = cube.select(groups=args.group)
    adata = to_anndata(cube, layer=args.layer)
    write_anndata(adata, output, overwrite=args.overwrite)
    print(f"exported {adata.n_obs} profiles x {adata.n_vars:,} features -> {args.output}")


def _check_groups(groups: list[str]) -> None:
    """Refuse a group given twice with --group (it would be exported once)."""
    seen: set[str] = set()
    for group in groups:
        if group in seen:
            msg = f"--group {group} is given twice; give each group once"
            raise UsageError(msg)
        seen.add(group)


def _ids(table: Any, id_column: str) -> list[str]:
    """The ids of a table (a frame with the ids as its index or in ``id_column``)."""
    import narwhals.stable.v2 as nw

    if getattr(table.index, "name", None) == id_column:
        return [str(value) for value in table.index]
    return [str(value) for value in nw.from_native(table, eager_only=True)[id_column].to_list()]
