"""Reading and writing cube files.

:mod:`cytepool.io.anndata` converts cubes to and from AnnData and MuData. The names below
are imported on first use (PEP 562), so that importing a submodule such as
:mod:`cytepool.io.zarr` does not import the cube and table modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cytepool.io.cubes import read_cube, write_cube
    from cytepool.io.tables import read_table, write_table

__all__: list[str] = ["read_cube", "read_table", "write_cube", "write_table"]

_HOMES = {
    "read_cube": "cytepool.io.cubes",
    "write_cube": "cytepool.io.cubes",
    "read_table": "cytepool.io.tables",
    "write_table": "cytepool.io.tables",
}


def __getattr__(name: str) -> Any:
    """Import a public name (or ``cytepool.io.anndata``, which needs no anndata) on first use."""
    if name == "anndata":
        return importlib.import_module("cytepool.io.anndata")
    home = _HOMES.get(name)
    if home is None:
        msg = f"module 'cytepool.io' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "anndata"})
