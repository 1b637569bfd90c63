"""Shared test factories: the table backends, tables in each backend, and one cube factory.

Importable from every test module (tests/ is on ``sys.path`` through tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool import Cube

BACKENDS = ("pandas", "polars", "pyarrow")
"""The table backends a cube (and read_table) returns."""


def frame(backend: str, data: Mapping[str, Sequence[Any]]) -> Any:
    """A table of ``data`` (column name -> values) in ``backend``, skipped if it is missing."""
    if backend == "pandas":
        pd = pytest.importorskip("pandas")
        return pd.DataFrame(dict(data))
    if backend == "polars":
        pl = pytest.importorskip("polars")
        return pl.DataFrame(dict(data))
    pa = pytest.importorskip("pyarrow")
    return pa.table(dict(data))


def counts(shape: tuple[int, int, int] = (3, 4, 5), dtype: Any = "int64", seed: int = 1) -> Any:
    """Seeded counts ``(n_groups, n_samples, n_features)`` from 0 to 49."""
    return np.random.default_rng(seed).integers(0, 50, shape).astype(dtype)


def make_cube(
    layers: Any = None,
    *,
    backend: str = "pandas",
    ids: Mapping[str, Sequence[str]] | None = None,
    samples: Mapping[str, Sequence[Any]] | None = None,
    groups: Mapping[str, Sequence[Any]] | None = None,
    features: Mapping[str, Sequence[Any]] | None = None,
    cells: Any = None,
    **options: Any,
) -> Cube:
    """A cube for tests: every argument has a default, so a test states only what it needs.

    Parameters
    ----------
    layers
        An array for the layer ``"counts"``, or a mapping of layer name to array (anything
        else is given to the cube as it is); by default :func:`counts`.
    backend
        The backend of the three tables.
    ids
        The ids per axis (``"samples"``, ``"groups"``, ``"features"``); by default ``s0``,
        ``g0``, ``f0``, ... as many as the first layer's shape asks for.
    samples, groups, features
        Covariate columns of each table (a mapping of column name to values), or a whole
        table in any backend, given to the cube as it is.
    cells
        The cell numbers; by default one cell per profile.
    options
        The other arguments of :class:`cytepool.Cube` (``normalization``, ``metadata``).
    """
    layers = counts() if layers is None else layers
    named = {"counts": layers} if hasattr(layers, "shape") else layers
    first = next(iter(named.values()), None) if isinstance(named, Mapping) else None
    shape = (*getattr(first, "shape", ()), 0, 0, 0)[:3]
    given = dict(ids or {})
    sizes = dict(zip(("groups", "samples", "features"), shape, strict=True))
    axis_ids = {a: list(given.get(a, [f"{a[0]}{i}" for i in range(n)])) for a, n in sizes.items()}
    n_groups, n_samples = len(axis_ids["groups"]), len(axis_ids["samples"])
    tables = {
        axis: _table(backend, f"{axis[:-1]}_id", axis_ids[axis], extra)
        for axis, extra in (("samples", samples), ("groups", groups), ("features", features))
    }
    if cells is None:
        cells = np.ones((n_groups, n_samples), dtype=np.int64)
    return Cube(named, **tables, cells=cells, **options)


def _table(backend: str, id_column: str, ids: list[str], extra: Any) -> Any:
    """The table of ``ids`` and covariates ``extra``, or ``extra`` itself if it is a table."""
    if extra is not None and not isinstance(extra, Mapping):
        return extra
    return frame(backend, {id_column: ids, **dict(extra or {})})


def string_values(column: Path) -> Path:
    """The array holding a stored string column's values: the column itself, or under pandas
    3's ``str`` dtype (written as a nullable string array) its ``values`` array."""
    values = column / "values"
    return values if values.is_dir() else column
