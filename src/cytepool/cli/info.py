"""``cytepool info``: describe a cube file, for people or (``--json``) for machines."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from cytepool.cli._shared import add_command, path_argument, pooled_covariates, without_ids

if TYPE_CHECKING:
    from cytepool.cube import Cube

__all__ = ["add"]

EXAMPLES = """
    examples:

      cytepool info cells.cube.zarr
      cytepool info cells.cube.zarr | head -3
      cytepool info cells.cube.zarr --json
    """


def add(commands: Any) -> None:
    """Add ``info`` and its arguments to the subparsers ``commands``."""
    info = add_command(
        commands,
        "info",
        "Describe a cube file: shape, layers, cells per group, tables, fingerprint, provenance.",
        EXAMPLES,
        run,
    )
    info.add_argument("cube", metavar="CUBE", type=path_argument, help="a cube file (*.cube.zarr)")
    info.add_argument("--json", action="store_true", help="print JSON for machines")


def run(args: argparse.Namespace) -> None:
    """Print what ``args.cube`` holds."""
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
            name: without_ids(tables[name].schema(), name)
            for name in ("samples", "groups", "features")
        },
        "dropped": (pooled_covariates(cube) or {}).get("dropped", {}),
        "normalization": None if normalization is None else normalization.method,
        "fingerprint": cube.fingerprint,
        "provenance": [record.to_json() for record in cube.provenance],
    }


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
