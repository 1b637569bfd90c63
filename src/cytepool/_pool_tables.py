"""The tables :func:`cytepool.from_cells` gives its cube: those given, their rows in the order
of the ids, or tables of the ids alone, in the backend of a table given (else pandas, polars or
pyarrow, whichever is installed)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np

from cytepool._table import AxisTable, id_list
from cytepool.errors import InputError

__all__ = ["axis_table", "backend_of", "feature_table"]


def backend_of(*tables: Any) -> Any:
    """The backend of id-only tables: that of the first table given, else pandas if installed
    (not imported: the frames of id-only tables are made when first used)."""
    if any(table is not None for table in tables):
        import narwhals.stable.v2 as nw

        for table in tables:
            try:
                return nw.from_native(table, eager_only=True).implementation
            except TypeError:
                continue
    for name in ("pandas", "polars", "pyarrow"):
        if importlib.util.find_spec(name) is not None:
            return name
    msg = "from_cells: building the tables needs pandas, polars or pyarrow; install one"
    raise ImportError(msg)


def _id_table(ids: list[str], axis: str, backend: Any) -> Any:
    """A table of the (string) ids alone, its frame deferred."""
    return AxisTable.of_ids(axis, ids, backend)


def axis_table(table: Any, ids: list[str], axis: str, backend: Any) -> Any:
    """The table's rows in the order of ``ids``; the ids alone when there is no table."""
    if table is None:
        return _id_table(ids, axis, backend)
    given = AxisTable.from_user(table, axis)
    position = given.position
    missing = [i for i in ids if i not in position]
    if missing:
        msg = (
            f"{axis}: the table has no row for {len(missing)} ids that label cells: "
            f"{_some(missing)}; expected one row per id"
        )
        raise InputError(msg)
    if len(given.ids) != len(ids):
        known = set(ids)
        extra = [i for i in given.ids if i not in known]
        msg = (
            f"{axis}: the table has rows for {len(extra)} ids that label no cell: "
            f"{_some(extra)}; expected one row per id (select the rows of these cells first)"
        )
        raise InputError(msg)
    return given.take(np.array([position[i] for i in ids], dtype=np.intp)).native()


def feature_table(features: Any, n_features: int, backend: Any) -> Any:
    """A features table of ``n_features`` rows: the one given, or one of ids."""
    import narwhals.stable.v2 as nw

    if features is None:
        return _id_table([str(j) for j in range(n_features)], "features", backend)
    try:
        n_rows, table = len(nw.from_native(features, eager_only=True)), features
    except TypeError:  # not a table: ids
        n_rows, table = -1, None
    if table is None:
        ids = id_list(features, "features")
        n_rows, table = len(ids), _id_table(ids, "features", backend)
    if n_rows != n_features:
        msg = f"features: expected one row per column of counts ({n_features}), found {n_rows}"
        raise InputError(msg)
    return table


def _some(ids: Sequence[str]) -> str:
    more = f" and {len(ids) - 10} more" if len(ids) > 10 else ""
    return f"{list(ids[:10])}{more}"
