"""Table digests from the stored columns of a table, without Python strings or frames.

:func:`stored_digest` gives the :func:`cytepool.fingerprint.table_digest` of the frame a table
reads as, computed from what was read (UTF-8 buffers, numpy values): string columns are hashed
from their UTF-8 bytes, as the canonical encoding (length-prefixed UTF-8) is built from them. It
covers the columns whose canonical form is plain to see from the stored values (strings with or
without missing values, booleans, integers and floats); for a table with another kind of column
it gives None, and the digest is then computed from the frame.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cytepool.fingerprint import CanonicalColumn, columns_digest
from cytepool.io.tables.backends import INDEX
from cytepool.io.tables.columns import Column, Dense
from cytepool.io.tables.frames import StoredTable
from cytepool.io.tables.strings import Utf8Strings

__all__ = ["stored_digest"]

_NUMBER_KINDS = "biuf"


def stored_digest(table: StoredTable) -> str | None:
    """The digest of a stored table read as a frame whose named index comes first.

    None when a column is of a kind not covered here (or the index is unnamed or shared with
    a column).
    """
    if table.index_name == INDEX or table.index_name in table.columns:
        return None
    canonical = []
    for name, column in [(table.index_name, table.index), *table.columns.items()]:
        found = _canonical(name, column)
        if found is None:
            return None
        canonical.append(found)
    return columns_digest(table.n_rows, canonical)


def _canonical(name: str, column: Column) -> CanonicalColumn | None:
    """The canonical form of a stored column, or None for a kind not covered here."""
    if not isinstance(column, Dense):
        return None
    if column.kind in ("string", "nullable-string"):
        return _strings(name, column)
    if column.kind == "array" and isinstance(column.values, np.ndarray):
        return _numbers(name, column.values)
    return None


def _strings(name: str, column: Dense) -> CanonicalColumn | None:
    if not isinstance(column.values, Utf8Strings):
        return None
    n = len(column.values)
    mask = np.zeros(n, dtype=bool) if column.mask is None else np.asarray(column.mask, dtype=bool)
    return CanonicalColumn(name, "string", mask, column.values.buffer.blank(mask))


def _numbers(name: str, values: np.ndarray[Any, Any]) -> CanonicalColumn | None:
    if values.ndim != 1 or values.dtype.kind not in _NUMBER_KINDS:
        return None
    if values.dtype.kind == "b":
        return CanonicalColumn(
            name, "bool", np.zeros(len(values), dtype=bool), values.view(np.uint8)
        )
    out = values.astype(values.dtype.newbyteorder("<"))
    mask = np.zeros(len(values), dtype=bool)
    if values.dtype.kind == "f":
        mask = np.isnan(out)
        out = out + out.dtype.type(0)  # -0.0 -> +0.0
        out[mask] = 0
    return CanonicalColumn(name, out.dtype.name, mask, out)
