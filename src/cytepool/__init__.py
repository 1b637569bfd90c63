"""cytepool: pseudobulk cubes between the single-cell tools you already use.

A cube holds, for every group (cell type) x sample x feature (gene), additive layers of
sums over pooled cells, the number of cells per profile, an optional normalization, three
id-keyed tables and provenance records. See :class:`cytepool.Cube`.

The names below are imported on first use (PEP 562), so that ``import cytepool`` and the
``cytepool`` command start quickly and load numpy only when a cube is made or read.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cytepool._stats import Statistic
    from cytepool._version import __version__
    from cytepool.cube import Cube, Normalization, Provenance, add, concat
    from cytepool.pooling import from_cells

__all__ = [
    "Cube",
    "Normalization",
    "Provenance",
    "Statistic",
    "__version__",
    "add",
    "concat",
    "from_cells",
]

_HOMES = {
    "Cube": "cytepool.cube",
    "Normalization": "cytepool.cube",
    "Provenance": "cytepool.cube",
    "Statistic": "cytepool._stats",
    "add": "cytepool.cube",
    "concat": "cytepool.cube",
    "from_cells": "cytepool.pooling",
    "__version__": "cytepool._version",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use, and keep it here."""
    home = _HOMES.get(name)
    if home is None:
        msg = f"module 'cytepool' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
