"""A cube file's tables: verified from their stored values, their frames made when first used.

Of a file of format 1.2, :func:`read_lazy_cube_table` reads a table whole when the cube is
opened and verifies it from its stored values: its ids, and every other column against its
column digest (listed, with each column's encoding, in the ``tables`` attribute,
:func:`parse_table_columns`); only its frame waits until it is first used.

:func:`read_cube_table` reads a table's columns (strings as UTF-8 buffers) and, when
:func:`stored_digest` covers them, gives a checked :class:`~cytepool._table.AxisTable` whose
digest and ids are known now and whose frame (pandas, polars or pyarrow) is built when first
used; otherwise the frame itself, whose digest is then computed from it.

:func:`stored_digest` gives the :func:`cytepool.fingerprint.table_digest` of the table as
stored (of the frame it was written from), computed from what was read (UTF-8 buffers, numpy
values, masks, codes): string columns are hashed from their UTF-8 bytes, as the canonical
encoding (length-prefixed UTF-8) is built from them. It covers every kind of column a cube
file's writer stores: strings with or without missing values, booleans, integers and floats,
their nullable forms, categoricals (of strings, numbers, booleans or times), datetimes and
durations (seconds to nanoseconds) and dates. For another kind (datetimes in minutes, say,
written by another tool) it gives None, and the digest is then computed from the frame.

A deferred table's frame is made by a :class:`StoredFrame`, which holds what was read (no
open file, no closure), so a cube read from a file pickles before its tables were used. When
it makes the frame, it verifies a column whose canonical form only the frame gives, and checks
that the backend holds every other column but strings as stored (polars has no seconds and no
categories but of strings; pandas no dates, so it is given dates in pyarrow, and categories of
dates as ``datetime.date`` objects, as it holds those it is given). A table read
otherwise would no longer be the file's (its digest would not be its frame's), so that is
refused, with the backends that hold it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, NoReturn

import numpy as np

from cytepool._ids import BufferIds
from cytepool._records import ID_COLUMNS
from cytepool._table import AxisTable
from cytepool._utf8 import Utf8Buffer
from cytepool.errors import FormatError, InputError, StoredTypeError
from cytepool.fingerprint import (
    BLAKE3,
    CanonicalColumn,
    canonical_column,
    column_digest,
    columns_digest,
    combined_digest,
    positive_zeros,
)
from cytepool.io.tables import registry as _r
from cytepool.io.tables.backends import BACKENDS, INDEX, check_installed
from cytepool.io.tables.columns import Categorical, Column, Dense
from cytepool.io.tables.frames import StoredTable, read_stored_table_at
from cytepool.io.tables.strings import Utf8Strings
from cytepool.io.zarr.names import node_name_problem
from cytepool.io.zarr.store import StorePath, join

__all__ = [
    "StoredColumn",
    "StoredFrame",
    "column_nodes",
    "parse_table_columns",
    "read_cube_table",
    "read_lazy_cube_table",
    "stored_digest",
]

_NUMBER_KINDS = "biuf"
_NUMBER_TYPES = {"b": "Boolean", "i": "Int", "u": "UInt", "f": "Float"}
_NULLABLE = {"nullable-integer": "iu", "nullable-boolean": "b", "nullable-float": "f"}
_TIME_UNITS = ("s", "ms", "us", "ns")
_EPOCH = date(1970, 1, 1).toordinal()
_DAYS = (date.min.toordinal() - _EPOCH, date.max.toordinal() - _EPOCH)  # what a date can be


def read_cube_table(
    root: StorePath, axis: str, backend: str, rows: int, algorithm: str = BLAKE3
) -> Any:
    """The table ``axis`` of the cube file at ``root``: a deferred AxisTable, or a frame.

    A deferred table's ids are checked now (FormatError if one repeats) and kept as the
    UTF-8 buffer they were read as; its digest is made with ``algorithm``, the file's.
    """
    stored = read_stored_table_at(root / axis, rows=rows)
    canonical = _stored_canonical(stored)
    index = stored.index
    named = stored.index_name == ID_COLUMNS[axis]
    strings = _plain_ids(index)
    if canonical is None or not named or strings is None:
        return stored.frame(backend)
    digest = columns_digest(stored.n_rows, canonical, algorithm)
    check_installed(backend)
    ids = _checked_ids(strings, root, axis)
    make = StoredFrame(stored, backend, axis, root=str(root))
    return AxisTable.deferred(axis, make, ids, None, digest, algorithm=algorithm)


@dataclass(frozen=True)
class StoredColumn:
    """A table column as the ``tables`` attribute of a cube file (format 1.2) lists it: its
    name, its anndata encoding (which tells a remote reader its parts before it fetches its
    document) and its BLAKE3 :func:`~cytepool.fingerprint.column_digest`."""

    name: str
    encoding: str
    digest: str


def parse_table_columns(
    value: object, rows: Mapping[str, int], digests: Mapping[str, str], root: object
) -> dict[str, tuple[StoredColumn, ...]]:
    """The columns the ``tables`` attribute lists for each table, checked: every table of
    ``rows``, its id column first, names unique, and the column digests combining into the
    table's digest of ``digests`` (FormatError naming ``root`` otherwise)."""
    if not isinstance(value, dict) or set(value) != set(rows):
        _corrupt(root, f"tables must map {sorted(rows)} to their columns, found {value!r:.200}")
    return {
        axis: _parse_columns(axis, value[axis], rows[axis], digests[axis], root) for axis in rows
    }


def _parse_columns(
    axis: str, entries: object, rows: int, digest: str, root: object
) -> tuple[StoredColumn, ...]:
    keys = {"name", "encoding", "digest"}
    if not isinstance(entries, list) or not all(
        isinstance(entry, dict)
        and set(entry) == keys
        and all(isinstance(entry[key], str) for key in keys)
        for entry in entries
    ):
        _corrupt(root, f"tables[{axis!r}] must list objects of {sorted(keys)} (strings)")
    columns = tuple(StoredColumn(e["name"], e["encoding"], e["digest"]) for e in entries)
    names = [column.name for column in columns]
    if not names or names[0] != ID_COLUMNS[axis] or len(set(names)) != len(names):
        _corrupt(root, f"tables[{axis!r}] must list unique columns, {ID_COLUMNS[axis]!r} first")
    try:
        combined = combined_digest(rows, [column.digest for column in columns])
    except ValueError as error:
        _corrupt(root, f"tables[{axis!r}]: {error}")
    if combined != digest:
        problem = (
            f"the column digests of tables[{axis!r}] do not match its table digest (for the "
            f"{rows} rows its shape gives)"
        )
        _corrupt(root, problem)
    return columns


def _corrupt(root: object, problem: str) -> NoReturn:
    message = f"the cube file {root} is corrupt: {problem}"
    raise FormatError(message)


def read_lazy_cube_table(
    root: StorePath, axis: str, backend: str, rows: int, columns: tuple[StoredColumn, ...]
) -> AxisTable:
    """The table ``axis`` of the cube file at ``root`` (format 1.2, whose ``tables`` attribute
    listed ``columns``), read whole now and verified from its stored values: its ids (strings,
    unique, matching their column digest), its columns (those listed) and each other column
    against its own digest (FormatError naming the column). A column whose canonical form only
    its frame gives (one stored in a form cytepool does not write) is verified when the frame
    is made; the frame is made when first used (:class:`StoredFrame`)."""
    stored = read_stored_table_at(root / axis, rows=rows)
    name, index = stored.index_name, stored.index
    strings = _plain_ids(index)
    if strings is None:
        values = getattr(index, "values", None)
        found = getattr(values, "dtype", type(values).__name__)
        message = (
            f"the cube file {root} holds ids in {axis}/{name} that are not strings with "
            f"none missing (encoding {index.kind!r}, values {found})"
        )
        raise StoredTypeError(message)
    ids = _checked_ids(strings, root, axis)  # the more telling error first
    canonical = _canonical(columns[0].name, index)
    if canonical is None or column_digest(rows, canonical) != columns[0].digest:
        message = (
            f"the cube file {root} is corrupt or was edited: {axis}: the ids "
            f"({columns[0].name!r}) do not match their stored digest"
        )
        raise FormatError(message)
    pending = _verified(stored, columns, root, axis)
    make = StoredFrame(stored, backend, axis, pending, str(root))
    table = AxisTable.deferred(axis, make, ids, None, algorithm=BLAKE3)  # schema: make.schema
    return table.with_column_digests([column.digest for column in columns])


def _verified(
    stored: StoredTable, columns: tuple[StoredColumn, ...], root: object, axis: str
) -> tuple[tuple[str, str], ...]:
    """Check that ``stored`` holds the ``columns`` listed, in their order, and each column
    after the ids against its digest where its stored values give its canonical form; the
    others (name, digest), to be verified from the frame."""
    named = [stored.index_name, *stored.columns]
    listed = [column.name for column in columns]
    if named != listed:
        message = (
            f"the cube file {root} is corrupt or was edited: {axis} has the columns {named}, "
            f"its attributes list {listed}"
        )
        raise FormatError(message)
    pending = []
    for entry in columns[1:]:
        canonical = _canonical(entry.name, stored.columns[entry.name])
        if canonical is None:
            pending.append((entry.name, entry.digest))
        elif column_digest(stored.n_rows, canonical) != entry.digest:
            _mismatch(root, axis, entry.name)
    return tuple(pending)


def _mismatch(root: object, axis: str, name: str) -> NoReturn:
    message = (
        f"the cube file {root} is corrupt or was edited: {axis}: column {name!r} does not "
        "match its stored digest"
    )
    raise FormatError(message)


def column_nodes(key: str, columns: tuple[StoredColumn, ...]) -> list[str]:
    """The nodes of the table at ``key`` whose documents reading ``columns`` takes: each
    column and, for one its encoding stores as a group, its parts (a categorical's codes and
    categories, a nullable array's values and mask). Names that cannot name a node are left
    out (the reader meets them)."""
    nodes: list[str] = []
    for column in columns:
        if node_name_problem(column.name) is None:
            node = join(key, column.name)
            kind = {"node_type": "group", "attributes": {"encoding-type": column.encoding}}
            nodes += [node, *(join(node, part) for part in _r.element_children(kind))]
    return nodes


def _checked_ids(strings: Utf8Strings, root: object, axis: str) -> BufferIds:
    """The ids as the UTF-8 buffer they were read as (FormatError if one repeats or is not
    UTF-8)."""
    strings.buffer.check()
    ids = BufferIds(strings.buffer)  # kept as read: no str per id until one is asked for
    repeated = ids.repeated()
    if repeated:
        message = (
            f"the cube file {root} is corrupt or was edited: {axis}: the ids must be unique; "
            f"it holds {repeated[:10]} more than once"
        )
        raise FormatError(message)
    return ids


@dataclass(frozen=True)
class StoredFrame:
    """Makes the frame of a table read from a cube file, from what was read: no open file,
    no closure, so it pickles. Then the columns of ``pending`` (name, column digest), whose
    canonical form only the frame gives, are verified (FormatError naming ``root``); and every
    other column but strings (which every backend holds as stored) must be held as stored:
    a backend that gives another canonical form (polars: seconds, categories of numbers, a
    zone given as an offset such as ``+05:30``) is refused with an InputError, as the table
    would no longer be the file's."""

    stored: StoredTable
    backend: str
    axis: str
    pending: tuple[tuple[str, str], ...] = ()
    root: str = ""

    def __call__(self) -> Any:
        """The frame, in the form a table holds (its ids were checked when it was read)."""
        native = self.stored.frame(self.backend)
        if self.backend == "pandas":
            native = _pandas_date_categories(_pandas_dates(native, self.stored), self.stored)
        frame = AxisTable.user_frame(native, self.axis)
        unverified = dict(self.pending)
        for name, column in self.stored.columns.items():
            if name in unverified:
                self._check(frame, name, unverified[name], None)
            elif not _strings_alike(column):
                stored = _canonical(name, column)
                if stored is not None:
                    self._check(frame, name, column_digest(self.stored.n_rows, stored), stored.tag)
        return frame

    def _check(self, frame: Any, name: str, digest: str, tag: str | None) -> None:
        """Check that the frame's column ``name`` has ``digest``: FormatError if the column was
        not verified (``tag`` None), else InputError (the backend holds it otherwise)."""
        try:
            canonical = canonical_column(frame.get_column(name), name)
        except (TypeError, ValueError, OverflowError):  # a date Python has not, say
            canonical = None
        if canonical is not None and column_digest(self.stored.n_rows, canonical) == digest:
            return
        if tag is None:
            _mismatch(self.root, self.axis, name)
        found = "values it cannot digest" if canonical is None else canonical.tag
        raise _retyped(self.root, self.axis, name, tag, found, self.backend)

    def schema(self) -> dict[str, str] | None:
        """The column names with their narwhals data type names, from the stored columns (no
        frame is built), or None when a column's type depends on the backend (then asked of
        the frame)."""
        stored = self.stored
        named = [(stored.index_name, stored.index), *stored.columns.items()]
        names = {name: _type_name(column) for name, column in named}
        known = {name: kind for name, kind in names.items() if kind is not None}
        return known if not self.pending and len(known) == len(names) else None


def _strings_alike(column: Column) -> bool:
    """Whether ``column`` holds strings (or categories of strings), which every backend
    holds as stored (and whose canonical form is the costly one to make again)."""
    if isinstance(column, Categorical):
        column = column.categories
    return column.kind in ("string", "nullable-string")


def _retyped(root: str, axis: str, name: str, tag: str, found: str, backend: str) -> InputError:
    """The error for a column of ``tag`` that ``backend`` holds as ``found``, naming the other
    backends that hold it as stored."""
    others = [other for other in BACKENDS if other != backend and _holds(other, tag)]
    hint = " (install pyarrow)" if tag == "date" else ""
    message = (
        f"the cube file {root}: {axis}: column {name!r} holds {tag}, which a {backend} frame "
        f"cannot hold (it would hold {found}, and the table would no longer be the file's); "
        f"read the cube with {' or '.join(f'backend={other!r}' for other in others)}{hint}"
    )
    return InputError(message)


def _holds(backend: str, tag: str) -> bool:
    """Whether ``backend`` holds a column of canonical ``tag`` as stored: polars has no
    categories but of strings, no seconds and no zone given as an offset; pandas and pyarrow
    hold every type a cube file stores (pandas dates in pyarrow, dates as categories too)."""
    if backend != "polars":
        return True
    if tag.startswith("categorical["):
        return tag == "categorical[string]"
    unit, _, zone = tag.partition("[")[2].rstrip("]").partition(",")
    return unit != "s" and not zone.startswith(("+", "-"))


def _pandas_dates(frame: Any, stored: StoredTable) -> Any:
    """``frame`` (pandas) with its date columns as pyarrow dates, as stored, if pyarrow is
    installed: pandas holds dates as ``datetime64[s]`` otherwise (as :func:`read_table` gives
    them), which is not what the cube file holds."""
    dates = {  # of the dates Python has (others are refused: their form is the frame's)
        name: column.values
        for name, column in stored.columns.items()
        if isinstance(column, Dense)
        and column.kind == "date"
        and _dates(name, column.values) is not None
    }
    if not dates:
        return frame
    try:
        import pyarrow as pa
    except ImportError:
        return frame  # the column's check names the problem
    import pandas as pd

    frame = frame.copy(deep=False)
    for name, stored_values in dates.items():
        values = np.asarray(stored_values).astype("datetime64[D]")
        array = pa.array(values, type=pa.date32(), mask=np.isnat(values))
        frame[name] = pd.array(array, dtype=pd.ArrowDtype(pa.date32()))
    return frame


def _pandas_date_categories(frame: Any, stored: StoredTable) -> Any:
    """``frame`` (pandas) with its categoricals of dates as categoricals of ``datetime.date``
    objects, as pandas holds the categoricals of dates it is given (``pd.Categorical`` of
    dates); pandas reads them as categories of ``datetime64[s]`` otherwise, which is not what
    the cube file holds."""
    columns = {  # of the dates Python has (others are refused: their form is the frame's)
        name: column
        for name, column in stored.columns.items()
        if isinstance(column, Categorical)
        and column.categories.kind == "date"
        and _dates(name, column.categories.values) is not None
    }
    if not columns:
        return frame
    import pandas as pd

    frame = frame.copy(deep=False)
    for name, column in columns.items():
        days = np.asarray(column.categories.values).astype("datetime64[D]")
        categories = pd.Index(days.astype(object), dtype=object)  # datetime.date objects
        codes = np.asarray(column.codes)
        frame[name] = pd.Categorical.from_codes(codes, categories, ordered=column.ordered)
    return frame


def _plain_ids(index: Column) -> Utf8Strings | None:
    """The ids, if they are strings with none missing (pandas 3 stores them as nullable)."""
    if not isinstance(index, Dense) or not isinstance(index.values, Utf8Strings):
        return None
    if index.kind == "string":
        return index.values
    missing = index.kind != "nullable-string" or np.asarray(index.mask, dtype=bool).any()
    return None if missing else index.values


def _type_name(column: Column) -> str | None:
    """The narwhals data type name of a plain column :func:`stored_digest` covers (None for
    the others, whose name depends on the backend)."""
    if isinstance(column, Categorical) or column.kind not in ("array", "string", "nullable-string"):
        return None
    if not isinstance(column.values, np.ndarray):
        return "String"
    dtype = column.values.dtype
    return (
        _NUMBER_TYPES["b"]
        if dtype.kind == "b"
        else f"{_NUMBER_TYPES[dtype.kind]}{dtype.itemsize * 8}"
    )


def stored_digest(table: StoredTable, algorithm: str = BLAKE3) -> str | None:
    """The digest of a stored table read as a frame whose named index comes first.

    None when a column is of a kind not covered here (or the index is unnamed or shared with
    a column).
    """
    canonical = _stored_canonical(table)
    return None if canonical is None else columns_digest(table.n_rows, canonical, algorithm)


def _stored_canonical(table: StoredTable) -> list[CanonicalColumn] | None:
    """The canonical form of each column of ``table``, its named index first, from the stored
    values; None as :func:`stored_digest` says."""
    if table.index_name == INDEX or table.index_name in table.columns:
        return None
    canonical = []
    for name, column in [(table.index_name, table.index), *table.columns.items()]:
        found = _canonical(name, column)
        if found is None:
            return None
        canonical.append(found)
    return canonical


def _canonical(name: str, column: Column) -> CanonicalColumn | None:
    """The canonical form of a stored column, or None for a kind not covered here."""
    if isinstance(column, Categorical):
        return _categorical(name, column)
    if column.kind in ("string", "nullable-string"):
        return _strings(name, column)
    if not isinstance(column.values, np.ndarray) or column.values.ndim != 1:
        return None
    if column.kind == "array":
        return _numbers(name, column.values)
    if column.kind in _NULLABLE and column.mask is not None:
        return _nullable(name, column.values, np.asarray(column.mask, dtype=bool), column.kind)
    if column.kind in ("datetime", "duration"):
        return _temporal(name, column)
    if column.kind == "date":
        return _dates(name, column.values)
    return None


def _nullable(
    name: str, values: np.ndarray[Any, Any], mask: np.ndarray[Any, Any], kind: str
) -> CanonicalColumn | None:
    """A nullable integer, boolean or float column: its values, 0 where missing."""
    if values.dtype.kind not in _NULLABLE[kind] or len(mask) != len(values):
        return None
    found = _numbers(name, values)
    if found is None:
        return None
    out = np.array(found.values, copy=True)
    missing = found.mask | mask
    out[missing] = 0
    return CanonicalColumn(name, found.tag, missing, out)


def _temporal(name: str, column: Dense) -> CanonicalColumn | None:
    """A datetime (UTC values, with their zone if any) or duration column."""
    values = np.asarray(column.values)
    unit, _ = np.datetime_data(values.dtype)
    if unit not in _TIME_UNITS or values.dtype.kind not in "Mm":
        return None
    if column.kind == "duration":
        tag = f"duration[{unit}]"
    else:
        zone = column.time_zone
        tag = f"datetime[{unit}]" if zone is None else f"datetime[{unit},{zone}]"
    missing = np.isnat(values)
    out = values.view(np.int64).astype("<i8")
    out[missing] = 0
    return CanonicalColumn(name, tag, missing, out)


def _dates(name: str, values: Any) -> CanonicalColumn | None:
    """A date column: days since 1970-01-01 as int32 (None beyond the dates Python has,
    whose canonical form the frame gives)."""
    days = np.asarray(values)
    if days.ndim != 1 or days.dtype != np.dtype("datetime64[D]"):
        return None
    missing = np.isnat(days)
    out = np.where(missing, 0, days.view(np.int64))
    if len(out) and (out.min() < _DAYS[0] or out.max() > _DAYS[1]):
        return None
    return CanonicalColumn(name, "date", missing, out.astype("<i4"))


def _categorical(name: str, column: Categorical) -> CanonicalColumn | None:
    """A categorical column: each row's category in the canonical form of the categories
    (strings, numbers, dates, ...), null where missing."""
    codes = np.asarray(column.codes)
    if codes.ndim != 1 or codes.dtype.kind != "i":
        return None
    missing = codes < 0
    if not len(column.categories):  # no categories, no type: missing strings
        empty = Utf8Buffer.from_sizes(np.zeros(len(codes), np.int64), np.zeros(0, np.uint8))
        return CanonicalColumn(name, "categorical[string]", missing, empty)
    inner = _canonical(name, column.categories)
    if inner is None:
        return None
    rows = np.where(missing, 0, codes)
    mask = missing | inner.mask[rows]
    return CanonicalColumn(name, f"categorical[{inner.tag}]", mask, _taken(inner, rows, mask))


def _taken(
    column: CanonicalColumn, rows: np.ndarray[Any, Any], blank: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any] | Utf8Buffer:
    """The canonical values of ``column`` at ``rows``, null (0 or empty) where ``blank``."""
    if isinstance(column.values, Utf8Buffer):
        return column.values.take(rows).blank(blank)
    return np.where(blank, 0, column.values[rows]).astype(column.values.dtype)


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
        out = positive_zeros(out)
        out[mask] = 0
    return CanonicalColumn(name, out.dtype.name, mask, out)
