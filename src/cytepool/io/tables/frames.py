"""write_table and read_table: frames as Zarr groups in anndata's dataframe encoding."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cytepool.errors import (
    FormatError,
    InputError,
    InputTypeError,
    UnknownIdError,
    UnsupportedFeatureError,
)
from cytepool.io import zarr as _zarr
from cytepool.io._atomic import replace_directory
from cytepool.io.tables import backends as _b
from cytepool.io.tables import registry as _r
from cytepool.io.tables.columns import Column, GroupPlan
from cytepool.io.tables.gather import gather_documents
from cytepool.io.zarr._store import locate
from cytepool.io.zarr.names import node_name_problem
from cytepool.io.zarr.store import StorePath, reading, refuse_url

__all__ = [
    "StoredTable",
    "build_table",
    "read_stored_table_at",
    "read_table",
    "read_table_at",
    "write_table",
]


def write_table(
    frame: Any,
    path: str | os.PathLike[str],
    *,
    index: str | None = None,
    chunks: int | None = None,
    compression: str | None = "gzip",
    level: int | None = None,
) -> None:
    """Write a table as a Zarr v3 group in the anndata dataframe encoding.

    anndata's ``read_elem`` reads the group as the DataFrame it would have written itself, and
    :func:`read_table` reads it back with the same dtypes. Types anndata cannot store (datetimes
    with or without a time zone, dates, durations, floats with missing values) are stored in a
    form anndata reads too; ``docs/tables.md`` tells what each dtype becomes.

    Parameters
    ----------
    frame
        An eager frame narwhals supports: pandas, polars, pyarrow, or a narwhals DataFrame.
    path
        The group's directory, which must not exist; its parent must. The group is built in a
        locked sibling directory and appears there only once it is complete (renamed in one
        step, as :func:`~cytepool.io.write_cube` does), so a write that fails leaves nothing
        at ``path``.
    index
        The column that becomes the table's index (anndata's ``_index``). With None, a pandas
        frame's own index is used (with its name; a named ``RangeIndex`` as its integers, as
        anndata writes it); other frames, and an unnamed pandas ``RangeIndex``, get an unnamed
        index of row numbers as strings, as AnnData gives its rows.
    chunks
        Rows per chunk; None chooses about 1 MiB per chunk of each column.
    compression, level
        The compression of every array, as in :func:`cytepool.io.zarr.check_compression`.

    Raises
    ------
    TypeError
        If ``frame`` is not a frame, an argument has the wrong type, or a column has a dtype
        that cannot be stored (nested types, objects that are not all strings, ...).
    ValueError
        If a column name is not a string, is ``"_index"``, repeats, or cannot name a Zarr node
        (contains ``"/"``, ``"\\"`` or NUL, takes more than 255 bytes of UTF-8, ...: the rule
        readers apply too); if ``index`` names no column; if a string holds a lone surrogate
        (not valid Unicode); or if compression, level or chunks is invalid; or if ``path`` is
        a URL (write locally, then upload).
    FileExistsError
        If ``path`` exists.
    FileNotFoundError
        If the parent directory of ``path`` does not exist.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import pandas as pd
    >>> from cytepool.io import read_table, write_table
    >>> frame = pd.DataFrame({"n_cells": [10, 20]}, index=pd.Index(["s1", "s2"], name="sample_id"))
    >>> directory = pathlib.Path(tempfile.mkdtemp())
    >>> write_table(frame, directory / "samples")
    >>> read_table(directory / "samples")
               n_cells
    sample_id
    s1              10
    s2              20
    """
    refuse_url(path, "a table")
    target = Path(os.fspath(path))
    build = _builder(frame, target, index, chunks, compression, level)
    if not target.parent.is_dir():
        msg = f"cannot write a table at {target}: its parent directory does not exist"
        raise FileNotFoundError(msg)
    replace_directory(target, build, overwrite=False, replaceable=_never, what="a table")


def build_table(
    frame: Any,
    path: Path,
    *,
    index: str | None = None,
    chunks: int | None = None,
    compression: str | None = "gzip",
    level: int | None = None,
) -> None:
    """Write a table at ``path`` inside a directory being built, which no one else sees yet.

    As :func:`write_table`, but in place: a cube file's tables are written so into the
    temporary directory that :func:`cytepool.io.write_cube` then moves into place.
    """
    _builder(frame, path, index, chunks, compression, level)(path)


def _builder(
    frame: Any,
    target: Path,
    index: str | None,
    chunks: int | None,
    compression: str | None,
    level: int | None,
) -> Any:
    """Check the arguments and the frame; return what writes the table into a directory."""
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int)):
        msg = f"chunks must be a number of rows (int) or None, found {chunks!r}"
        raise InputTypeError(msg)
    if chunks is not None and chunks < 1:
        msg = f"chunks must be at least 1 row, found {chunks}"
        raise InputError(msg)
    level = _zarr.check_compression(compression, level)
    source = _b.source_of(frame, index)
    options = _r.WriteOptions(chunks, compression, level)
    plan = GroupPlan(
        {"column-order": source.column_order, "_index": source.index_name}, source.columns
    )

    def build(directory: Path) -> None:
        _r.write_plan(directory, _r.DATAFRAME, plan, options, str(target))

    return build


def _never(path: Path) -> bool:
    """write_table replaces nothing."""
    return False


def read_table(
    path: str | os.PathLike[str] | StorePath,
    *,
    backend: Literal["pandas", "polars", "pyarrow"] = "pandas",
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """Read a table stored in the anndata dataframe encoding (by anndata or :func:`write_table`).

    Every encoding anndata 0.12 and 0.13 write is read, including an index or column that is a
    group, an index shared with a column, absent chunks and sharded arrays.

    Parameters
    ----------
    path
        The table group's directory (opened once; every array is read relative to it), its
        URL (``https://``, ``s3://``, ``gs://``, ``az://``; needs ``cytepool[remote]``), or a
        node of an open store (:class:`~cytepool.io.zarr.store.StorePath`).
    backend
        ``"pandas"``, ``"polars"`` or ``"pyarrow"``: the kind of frame to return. pandas gets the
        stored index as its index, with its name. polars and pyarrow get a named index as the
        first column and no column for an unnamed one, so a polars or pyarrow table written
        with ``index=None`` reads back as it was.
    columns
        The columns to read, in this order; None reads all. Only their arrays are read.
    storage_options
        For a URL: credentials, endpoint, region, ``anonymous``, timeouts, retries and
        requests in flight (see :class:`~cytepool.io.zarr.remote.RemoteStore`).

    Returns
    -------
    A pandas DataFrame, polars DataFrame or pyarrow Table.

    Raises
    ------
    FileNotFoundError
        If there is no Zarr group or array at ``path`` or a node it names.
    KeyError
        If a name in ``columns`` is not a column of the table.
    ValueError
        If the group is not a valid table or uses an encoding cytepool does not read
        (:class:`cytepool.errors.FormatError`, :class:`cytepool.errors.UnsupportedFeatureError`:
        every error about the stored content), or ``backend`` is unknown.
    RuntimeError
        If the store was replaced while it was being read
        (:class:`cytepool.errors.StoreChangedError`).
    ImportError
        If the package of ``backend`` is not installed, or ``path`` is a URL and obstore
        (``cytepool[remote]``) is not.
    cytepool.errors.RemoteStoreError
        If a remote store cannot be reached (an ``OSError``).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import polars as pl
    >>> from cytepool.io import read_table, write_table
    >>> frame = pl.DataFrame({"feature_id": ["g1", "g2"], "length": [1200, None]})
    >>> directory = pathlib.Path(tempfile.mkdtemp())
    >>> write_table(frame, directory / "features", index="feature_id")
    >>> read_table(directory / "features", backend="polars", columns=["length"])
    shape: (2, 2)
    ┌────────────┬────────┐
    │ feature_id ┆ length │
    │ ---        ┆ ---    │
    │ str        ┆ i64    │
    ╞════════════╪════════╡
    │ g1         ┆ 1200   │
    │ g2         ┆ null   │
    └────────────┴────────┘
    """
    _b.import_backend(backend)
    if isinstance(path, StorePath):
        return read_table_at(path, backend=backend, columns=columns)
    store = locate(path, storage_options)
    try:
        handle = store.open()
    except (FileNotFoundError, NotADirectoryError) as error:  # a local store: no directory
        root = store.where("")
        msg = f"no Zarr v3 metadata at {root}: there is no directory"
        _r.add_path_note(error, "reading", root)
        raise FileNotFoundError(msg) from error
    with reading(handle):
        # a remote store: a level per round, the chunks fetched as their documents come
        gather_documents(handle, [""], fetch=functools.partial(_read_nodes, columns=columns))
        return read_table_at(StorePath(handle), backend=backend, columns=columns)


def _read_nodes(documents: Mapping[str, Any], columns: Sequence[str] | None) -> list[str]:
    """The nodes whose chunks a read of ``columns`` (None: all) takes: the table's ``""``, or
    its index and those columns (names as given; the reader checks them)."""
    if columns is None:
        return [""]
    attributes = documents.get("", {}).get("attributes")
    index = attributes.get("_index") if isinstance(attributes, dict) else None
    return [name for name in (index, *columns) if isinstance(name, str) and name]


def read_table_at(
    root: StorePath,
    *,
    backend: str = "pandas",
    columns: Sequence[str] | None = None,
    rows: int | None = None,
) -> Any:
    """:func:`read_table` of a node of an open store, every array read through its handle.

    With ``rows``, the table must have that many rows (FormatError otherwise, before any
    value is read).
    """
    _b.import_backend(backend)
    try:
        pandas = backend == "pandas"  # nullable strings compact where pandas keeps them in pyarrow
        nullable = pandas and not _b.pandas_strings_in_arrow()
        selected = _read_dataframe(root, columns, pandas, rows, nullable_objects=nullable)
        index_name, index, n_rows, stored = selected
        name = None if index_name == _b.INDEX else index_name
        return _b.build_frame(backend, name, index, n_rows, stored)
    except Exception as error:
        _r.add_path_note(error, "reading", str(root))
        raise


@dataclass(frozen=True)
class StoredTable:
    """The columns of a table as read (strings as UTF-8 buffers), before a frame is built.

    ``index`` is named ``index_name`` (:data:`~cytepool.io.tables.backends.INDEX` when
    unnamed); ``columns`` are the others, in the stored order; ``where`` is the table's path.
    """

    index_name: str
    index: Column
    n_rows: int
    columns: dict[str, Column]
    where: str
    order: tuple[str, ...] = ()  # the table's columns (its column-order), read or not

    def frame(self, backend: str) -> Any:
        """The table as a frame of ``backend``, as :func:`read_table` returns it."""
        name = None if self.index_name == _b.INDEX else self.index_name
        try:
            return _b.build_frame(backend, name, self.index, self.n_rows, self.columns)
        except Exception as error:
            _r.add_path_note(error, "reading", self.where)
            raise


def read_stored_table_at(
    root: StorePath, *, rows: int | None = None, columns: Sequence[str] | None = None
) -> StoredTable:
    """The index and columns (None: all) of the table at ``root``, strings as UTF-8 buffers
    (no ``str``).

    With ``rows``, the table must have that many rows (FormatError otherwise, before any
    value is read).
    """
    try:
        found = _read_dataframe(root, columns, True, rows, objects=False)
    except Exception as error:
        _r.add_path_note(error, "reading", str(root))
        raise
    index_name, index, n_rows, stored = found
    assert index is not None  # read for pandas: always
    order = tuple(_zarr.read_group_attributes(root)["column-order"])  # checked: a list of str
    return StoredTable(index_name, index, n_rows, stored, str(root), order)


def _read_dataframe(
    root: StorePath,
    selection: Sequence[str] | None,
    for_pandas: bool,
    rows: int | None,
    *,
    objects: bool | None = None,
    nullable_objects: bool | None = None,
) -> tuple[str, Column | None, int, dict[str, Column]]:
    """Read the index and the selected columns.

    pandas gets every index and strings as ``str`` objects (what it stores); polars and
    pyarrow get strings as UTF-8 buffers, and of an unnamed index only its length.
    ``objects`` False reads strings compact for pandas too (converted when the frame is built);
    ``nullable_objects`` says it of the values of nullable strings alone (None: ``objects``).
    Every length is checked from the metadata before any value is read.
    """
    attributes = _zarr.read_group_attributes(root)
    spec = _r.IOSpec.from_attributes(attributes)
    if spec != _r.DATAFRAME:
        msg = (
            f"{root}: expected a table (encoding-type 'dataframe', encoding-version '0.2.0'), "
            f"found encoding-type {spec.encoding_type!r} version {spec.encoding_version!r}"
        )
        raise (FormatError if spec.encoding_type != "dataframe" else UnsupportedFeatureError)(msg)
    order = attributes.get("column-order")
    index_name = attributes.get("_index")
    if not isinstance(order, list) or not all(isinstance(name, str) for name in order):
        msg = f"{root}: attribute 'column-order' must be a list of strings, found {order!r}"
        raise FormatError(msg)
    if not isinstance(index_name, str):
        msg = f"{root}: attribute '_index' must be a string, found {index_name!r}"
        raise FormatError(msg)
    _check_no_repeats(root, order)
    for name in [index_name, *order]:
        _check_stored_name(root, name)
    if selection is None:
        selection = order
    elif isinstance(selection, str):
        msg = f"columns must be a sequence of column names, found the string {selection!r}"
        raise InputTypeError(msg)
    else:
        missing = [name for name in selection if name not in order]
        if missing:
            msg = f"{root}: no columns named {missing}; the table's columns are {order}"
            raise UnknownIdError(msg, unknown=missing[0], known=order)
        if len(set(selection)) != len(selection):
            msg = f"columns must not repeat a name, found {list(selection)}"
            raise InputError(msg)
    n_rows = _r.check_lengths(root, [index_name, *selection], rows)
    index: Column | None = None
    objects = for_pandas if objects is None else objects
    read = functools.partial(_r.read_element, objects=objects, nullable_objects=nullable_objects)
    node = _r.read_node(root / index_name)
    if for_pandas or index_name != _b.INDEX or node.array is None:
        index = read(root / index_name)
        n_rows = len(index)
    # else: an unnamed index that is not returned: only its length is needed
    stored: dict[str, Column] = {}
    for name in selection:
        if name == index_name and index is not None:
            column: Column = index  # an index shared with a column is one node, read once
        else:
            column = read(root / name)
        if len(column) != n_rows:
            msg = f"{root}: column {name!r} has {len(column)} rows but the index has {n_rows}"
            raise FormatError(msg)
        stored[name] = column
    return index_name, index, n_rows, stored


def _check_no_repeats(root: StorePath, order: list[str]) -> None:
    """FormatError if ``column-order`` names a column twice (a frame holds one per name)."""
    seen: set[str] = set()
    for name in order:
        if name in seen:
            msg = f"{root}: attribute 'column-order' repeats the column {name!r}: {order!r}"
            raise FormatError(msg)
        seen.add(name)


def _check_stored_name(root: StorePath, name: str) -> None:
    problem = node_name_problem(name)
    if problem is not None:
        msg = f"{root}: {name!r} cannot name a node of the table: {problem}"
        raise FormatError(msg)
