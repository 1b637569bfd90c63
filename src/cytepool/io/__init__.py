"""Reading and writing cube files.

:mod:`cytepool.io.anndata` converts cubes to and from AnnData and MuData.
"""

from __future__ import annotations

from cytepool.io.cubes import read_cube, write_cube
from cytepool.io.tables import read_table, write_table

__all__: list[str] = ["read_cube", "read_table", "write_cube", "write_table"]


def __getattr__(name: str) -> object:
    """Import ``cytepool.io.anndata`` on first use as an attribute (it needs no anndata)."""
    if name == "anndata":
        import importlib

        return importlib.import_module("cytepool.io.anndata")
    msg = f"module 'cytepool.io' has no attribute {name!r}"
    raise AttributeError(msg)
