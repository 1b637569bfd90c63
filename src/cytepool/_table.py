"""The three id-keyed tables of a cube (samples, groups, features), checked and kept as narwhals.

An :class:`AxisTable` holds the id column first, then covariates (pandas with a default
index), the ids as a list (or, for a table read from a cube file, as the UTF-8 buffer they
were read as, a :class:`~cytepool._ids.BufferIds`, until a list is asked for) and the table's
digest; it selects, pools and joins rows. A table
whose frame is deferred holds the object that makes it (a :class:`FrameMaker`), which pickles
with the table, so a cube pickles before its tables were used as well as after.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from cytepool import fingerprint as _fp
from cytepool._arrays import refuse_masked
from cytepool._ids import BufferIds
from cytepool._join import joined_frame
from cytepool._records import ID_COLUMNS
from cytepool._utf8 import Utf8Buffer, categories_not_unicode, is_unicode, not_unicode
from cytepool._words import brief
from cytepool.errors import InputError, InputTypeError, UnknownIdError
from cytepool.layers import Index, positions

if TYPE_CHECKING:
    import narwhals.stable.v2 as nw

__all__ = [
    "AxisTable",
    "FrameMaker",
    "TableIds",
    "check_unique",
    "id_list",
    "reset_index",
    "unique_positions",
]

# Up to as many stored ids (cell types, samples), a lookup uses a dict of the ids as str, made
# once (about 10 µs for a dozen); more (genes) are found in the UTF-8 buffer, with no str each.
_FEW_IDS = 1024


class FrameMaker(Protocol):
    """What makes a deferred table's frame when it is first used; picklable (no closure)."""

    def __call__(self) -> nw.DataFrame[Any]: ...


def reset_index(frame: Any) -> Any:
    """Give a pandas-like frame a fresh default index (narwhals keeps index labels)."""
    import narwhals.stable.v2 as nw

    if frame.implementation.is_pandas_like():
        return nw.from_native(frame.to_native().reset_index(drop=True), eager_only=True)
    return frame


def _check_storable(df: Any, axis: str) -> None:
    """InputError for what a cube file cannot store, so that every cube can be written: a
    column name that cannot name a Zarr node or is anndata's index key (``_index``), and
    floats of 16 bits with missing values (anndata's nullable floats are of 32 or 64)."""
    import narwhals.stable.v2 as nw

    from cytepool.io.tables.backends import check_column_names

    try:
        check_column_names(df.columns)
    except InputError as error:
        msg = f"{axis}: {error}"
        raise InputError(msg) from None
    for name in df.columns:
        try:
            dtype = df.get_column(name).dtype
        except UnicodeEncodeError:  # pandas 2 hashes the categories of a categorical
            msg = f"{axis}: {categories_not_unicode(name)}"
            raise InputError(msg) from None
        if dtype == nw.Categorical and _nan_categories(df.get_column(name)):
            msg = (
                f"{axis}: column {name!r}: its categories hold NaN, which a cube file (and "
                "anndata) cannot hold among categories; replace it or drop that category"
            )
            raise InputError(msg)
        if dtype == nw.Float16 and df.get_column(name).null_count():
            msg = (
                f"{axis}: column {name!r}: floats with missing values must be float32 or "
                "float64, as a cube file stores them; cast it (found float16)"
            )
            raise InputTypeError(msg)


def _nan_categories(series: Any) -> bool:
    """Whether a pyarrow dictionary column (the one backend whose categories may be NaN:
    pandas and polars refuse them) holds NaN among its categories."""
    native = series.to_native()
    if not type(native).__module__.startswith("pyarrow"):
        return False
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = native.chunks if isinstance(native, pa.ChunkedArray) else [native]
    return any(
        pa.types.is_floating(chunk.type.value_type)
        and pc.any(pc.is_nan(chunk.dictionary)).as_py() is True
        for chunk in chunks
        if pa.types.is_dictionary(chunk.type)
    )


class AxisTable:
    """A validated table: the id column first, then covariates; pandas with a default index."""

    def __init__(
        self,
        axis: str,
        frame: nw.DataFrame[Any] | None,
        ids: list[str] | BufferIds,
        digest: str | None = None,
        algorithm: str = _fp.BLAKE3,
    ):
        """``digest``, if given, is the table digest of ``frame`` made with ``algorithm``,
        known from elsewhere."""
        self.axis = axis
        self.id_column = ID_COLUMNS[axis]
        self._frame = frame
        self._make: FrameMaker | None = None
        self._schema: dict[str, str] | None = None
        self._ids = ids if isinstance(ids, list) else None
        self._stored = ids if isinstance(ids, BufferIds) else None
        self._position: dict[str, int] | None = None
        self._digests: dict[str, str] = {}  # by hash algorithm
        self._columns: tuple[str, ...] | None = None  # the BLAKE3 digest of each column
        if digest is not None:
            self._digests[algorithm] = digest
        elif frame is not None:  # now: a column the digest does not cover is an error now
            try:
                self.digest(algorithm)
            except InputError as error:  # a column's value, such as one that is not Unicode
                msg = f"{axis}: {error}"
                raise InputError(msg) from None

    @classmethod
    def deferred(
        cls,
        axis: str,
        make: FrameMaker,
        ids: list[str] | BufferIds,
        schema: dict[str, str] | None,
        digest: str | None = None,
        position: dict[str, int] | None = None,
        algorithm: str = _fp.BLAKE3,
    ) -> AxisTable:
        """A table of checked rows whose frame ``make`` gives when first used.

        ``ids`` are the checked ids (strings, unique; a list or a buffer), ``schema`` the column
        names (the id column first) with their narwhals data type names, if known (else asked
        of the frame when needed); ``digest`` is the table digest made with ``algorithm`` if
        known (others are computed from the frame when first asked for). ``position`` is each
        id's position, if known (:func:`unique_positions`).
        """
        table = cls(axis, None, ids, digest, algorithm)
        table._make, table._schema = make, None if schema is None else dict(schema)
        table._position = position
        return table

    def with_column_digests(self, digests: Sequence[str]) -> AxisTable:
        """This table, knowing the BLAKE3 :func:`~cytepool.fingerprint.column_digest` of each
        of its columns (those a cube file of format 1.2 stores, checked against its digest)."""
        self._columns = tuple(digests)
        return self

    @classmethod
    def of_ids(cls, axis: str, ids: list[str], backend: Any) -> AxisTable:
        """A table of ids alone (strings; InputError if one repeats), its digest known now
        and its frame made with ``backend`` (a narwhals backend) when first used."""
        position = unique_positions(ids, axis, "holds")
        column = ID_COLUMNS[axis]
        try:
            buffer = Utf8Buffer.from_str(ids)
        except UnicodeEncodeError:
            raise not_unicode(ids, f"{axis}: column {column!r}") from None
        strings = _fp.CanonicalColumn(column, "string", np.zeros(len(ids), dtype=bool), buffer)

        digest = _fp.columns_digest(len(ids), [strings])
        make = _IdsFrame(axis, ids, backend)
        return cls.deferred(axis, make, ids, {column: "String"}, digest, position)

    def __len__(self) -> int:
        """The number of rows."""
        return len(self._ids) if self._ids is not None else len(cast("BufferIds", self._stored))

    @property
    def ids(self) -> list[str]:
        """The ids as ``str`` (made from the stored buffer when first asked for)."""
        if self._ids is None:
            self._ids = cast("BufferIds", self._stored).to_list()
        return self._ids

    @property
    def frame(self) -> nw.DataFrame[Any]:
        """The table as a narwhals frame (made now if it was deferred)."""
        if self._make is not None:
            self._frame, self._make = self._make(), None
        return cast("nw.DataFrame[Any]", self._frame)  # a table has a frame or its maker

    def digest(self, algorithm: str = _fp.BLAKE3) -> str:
        """The table digest (:func:`cytepool.fingerprint.table_digest`) of the frame, made
        with ``algorithm`` (known, or computed from the frame once)."""
        if algorithm not in self._digests:
            if algorithm == _fp.BLAKE3:
                digest = _fp.combined_digest(len(self), self.column_digests())
            else:
                digest = _fp.table_digest(self.frame, algorithm)
            self._digests[algorithm] = digest
        return self._digests[algorithm]

    def column_digests(self) -> tuple[str, ...]:
        """The BLAKE3 :func:`~cytepool.fingerprint.column_digest` of each column, the id
        column first (known, or computed from the frame once)."""
        if self._columns is None:
            columns = _fp.canonical_table(self.frame)
            self._columns = tuple(_fp.column_digest(len(self), column) for column in columns)
        return self._columns

    def schema(self) -> dict[str, str]:
        """The column names (the id column first) with their narwhals data type names (asked
        of the frame's maker if it can tell them without a frame, else of the frame)."""
        if self._schema is None and self._make is not None:
            stored = getattr(self._make, "schema", None)  # a cube file's table: its columns
            self._schema = None if stored is None else stored()
        if self._schema is None:
            self._schema = {str(name): str(dtype) for name, dtype in self.frame.schema.items()}
        return self._schema

    @classmethod
    def from_user(cls, data: Any, axis: str) -> AxisTable:
        """The checked table of a frame; a table already checked (an AxisTable) as it is."""
        if isinstance(data, AxisTable) and data.axis == axis:
            return data
        df = cls.user_frame(data, axis)
        return cls(axis, df, _check_ids(df, axis))

    @classmethod
    def user_frame(cls, data: Any, axis: str) -> nw.DataFrame[Any]:
        """A frame in the form a table holds (the id column first), its ids not checked."""
        import narwhals.stable.v2 as nw

        id_column = ID_COLUMNS[axis]
        try:
            df = nw.from_native(data, eager_only=True)
        except TypeError as err:
            msg = (
                f"{axis}: expected a table (a pandas, polars or pyarrow frame), "
                f"found {type(data).__name__}"
            )
            raise InputTypeError(msg) from err
        except ValueError as err:  # such as duplicate column names
            msg = f"{axis}: {err}"
            raise InputError(msg) from err
        if df.implementation.is_pandas_like():
            df = cls._from_pandas(df, axis)
        names = list(df.columns)
        for name in names:
            if not isinstance(name, str):
                msg = f"{axis}: column names must be strings, found {name!r}"
                raise InputTypeError(msg)
        if id_column not in names:
            msg = f"{axis}: expected an id column {id_column!r}, found columns {names}"
            raise InputError(msg)
        _check_storable(df, axis)
        df = df.select([id_column, *(n for n in names if n != id_column)])
        if len(df) == 0 and df.schema[id_column] != nw.String:
            df = df.with_columns(nw.col(id_column).cast(nw.String()))
        return df

    @staticmethod
    def _from_pandas(df: Any, axis: str) -> Any:
        import narwhals.stable.v2 as nw

        id_column = ID_COLUMNS[axis]
        native = df.to_native()
        index = native.index
        if index.nlevels != 1:
            msg = f"{axis}: a MultiIndex is not supported; reset it into columns"
            raise InputError(msg)
        if index.name == id_column:
            if id_column in native.columns:
                msg = f"{axis}: both the index and a column are named {id_column!r}"
                raise InputError(msg)
            native = native.reset_index()
        elif index.name is not None:
            msg = (
                f"{axis}: the index is named {index.name!r}; expected the ids in an index or "
                f"column named {id_column!r} (reset the index to keep it as a column)"
            )
            raise InputError(msg)
        else:
            native = native.reset_index(drop=True)
        return nw.from_native(native, eager_only=True)

    def native(self) -> Any:
        """The table in its backend; pandas indexed by the ids."""
        native = self.frame.to_native()
        if self.frame.implementation.is_pandas_like():
            return native.set_index(self.id_column)
        return native

    @property
    def position(self) -> dict[str, int]:
        if self._position is None:
            self._position = _positions(self.ids)
        return self._position

    def locate(self, ids: Sequence[str]) -> Index:
        if self._position is None and self._stored is not None and len(self) > _FEW_IDS:
            found = self._find(ids)
            if found is not None:
                return found
        pos = self.position
        unknown = [i for i in ids if i not in pos]
        if unknown:
            more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
            msg = f"{self.axis}: unknown ids {unknown[:10]}{more}"
            raise UnknownIdError(msg, unknown=unknown[0], known=self.ids)
        return np.array([pos[i] for i in ids], dtype=np.intp)

    def _find(self, ids: Sequence[str]) -> Index | None:
        """The positions of ``ids`` found in the stored buffer; None if one is unknown (or
        cannot be UTF-8), left to :meth:`locate` to name."""
        try:
            found = cast("BufferIds", self._stored).find(ids)
        except UnicodeEncodeError:
            return None
        return found if not (found < 0).any() else None

    def resolve(self, selection: Any) -> Index | None:
        """Positions selected by ids, positions or a boolean mask (None: all)."""
        if selection is None:
            return None
        n = len(self)
        if isinstance(selection, str):
            return self.locate([selection])
        if isinstance(selection, slice | int | np.integer) and not isinstance(selection, bool):
            return positions(selection, n, what=self.axis)
        items = selection_items(selection, self.axis)
        arr = np.asarray(items)
        if arr.ndim != 1:
            msg = f"{self.axis}: expected ids, positions or a mask, found shape {arr.shape}"
            raise InputTypeError(msg)
        idx: Index
        if arr.size == 0:
            idx = np.zeros(0, dtype=np.intp)
        elif arr.dtype.kind in "biu":
            _refuse_bools_and_integers(items, arr, self.axis)
            idx = positions(arr, n, what=self.axis)  # type: ignore[assignment]
        elif arr.dtype.kind in "UOT" and all(isinstance(i, str) for i in items):
            idx = self.locate(list(items))
        else:
            _refuse_missing(items, arr, self.axis)
            raise InputTypeError(_mixed_message(self.axis, items, arr))
        if len(np.unique(idx)) != len(idx):  # the ids are unique: a position twice, an id twice
            check_unique([self.ids[i] for i in idx.tolist()], self.axis, "selects")
        return idx

    def take(self, idx: Index | None) -> AxisTable:
        if idx is None:
            return self
        ids: list[str] | BufferIds
        if self._ids is None and self._stored is not None:
            ids = self._stored.take(idx)
        else:
            ids = [self.ids[i] for i in idx.tolist()]
        if self._frame is None:  # still deferred: so is the selection
            return AxisTable.deferred(self.axis, _Taken(self, idx), ids, self._schema)
        return AxisTable(self.axis, reset_index(self.frame[idx, :]), ids)

    def pooled(self, members: Sequence[Index], new_ids: list[str]) -> AxisTable:
        """One row per pool: the new ids and the covariates constant within every pool."""
        import narwhals.stable.v2 as nw

        if not is_unicode("".join(new_ids)):  # checked before a backend meets them
            raise not_unicode(new_ids, f"{self.axis}: column {self.id_column!r}")
        keep = [self.id_column]
        for column in _fp.canonical_table(self.frame)[1:]:
            keys = column.row_keys()
            if all(all(keys[i] == keys[m[0]] for i in m.tolist()) for m in members):
                keep.append(column.name)
        first = np.array([m[0] for m in members], dtype=np.intp)
        frame = reset_index(self.frame.select(keep)[first, :])
        backend = frame.implementation
        ids = nw.new_series(self.id_column, new_ids, nw.String(), backend=backend)
        frame = frame.with_columns(ids)
        return AxisTable(self.axis, frame, list(new_ids))

    @staticmethod
    def joined(tables: Sequence[AxisTable], axis: str) -> AxisTable:
        """The rows of ``tables`` one after the other (:func:`cytepool._join.joined_frame`),
        checked as a table given to ``Cube`` is: unique ids, and storable in a cube file."""
        frame = reset_index(joined_frame([t.frame for t in tables], axis))
        ids = [i for t in tables for i in t.ids]
        check_unique(ids, axis, "would hold")
        _check_storable(frame, axis)
        return AxisTable(axis, frame, ids)


def as_items(values: Any) -> Any:
    """``values`` as Python values if they are a pandas or polars Series or a pyarrow Array or
    ChunkedArray (whose items are pyarrow scalars); other values as they are."""
    if hasattr(values, "to_pylist"):  # pyarrow
        return values.to_pylist()
    return values.to_list() if hasattr(values, "to_list") else values


def selection_items(selection: Any, axis: str) -> Any:
    """The items of a selection of ids, positions or a mask (:func:`as_items`).

    Raises
    ------
    InputTypeError
        For a set or a mapping (or its keys): they have no order to keep.
    """
    if isinstance(selection, AbstractSet | Mapping):
        msg = (
            f"{axis}: expected ids, positions or a mask in order, found a "
            f"{type(selection).__name__}, which has no order; give a list"
        )
        raise InputTypeError(msg)
    return as_items(selection)


def _refuse_bools_and_integers(items: Any, arr: np.ndarray[Any, Any], axis: str) -> None:
    """InputTypeError for a sequence mixing booleans and integers (numpy makes integers of
    them: ``[1, True, 0]`` would be positions)."""
    if arr.dtype.kind == "b" or isinstance(items, np.ndarray):
        return
    kinds = set(map(type, items))  # one pass in C
    bools = {kind for kind in kinds if issubclass(kind, bool | np.bool_)}
    if bools and kinds - bools:
        at = next(i for i, item in enumerate(items) if isinstance(item, bool | np.bool_))
        msg = (
            f"{axis}: expected positions (integers) or a boolean mask, found integers mixed "
            f"with booleans ({items[at]!r} at position {at}); give either"
        )
        raise InputTypeError(msg)


def _refuse_missing(items: Any, arr: np.ndarray[Any, Any], axis: str) -> None:
    """InputTypeError (as for other values of the wrong type) for a selection holding a
    missing value (None, NaN, NA, a null)."""
    if arr.dtype.kind == "f":
        nan = np.flatnonzero(np.isnan(arr))
        at = int(nan[0]) if nan.size else None
    else:
        at = next((i for i, item in enumerate(items) if _is_missing(item)), None)
    if at is not None:
        msg = (
            f"{axis}: the selection holds a missing value (null/NA) at position {at}; "
            "expected ids, positions or a boolean mask without missing values (fill or drop "
            "them first)"
        )
        raise InputTypeError(msg)


def _mixed_message(axis: str, items: Any, arr: np.ndarray[Any, Any]) -> str:
    """The message for a selection that is neither ids, positions nor a mask: it names the
    first value of the wrong type (ids mixed with others), else the values' data type."""
    expected = f"{axis}: expected ids (strings), positions (integers) or a boolean mask"
    if arr.dtype.kind not in "UOT":
        return f"{expected}, found {arr.dtype} values"
    strings = any(isinstance(i, str) for i in items)
    bad = next(i for i in items if not isinstance(i, str) or not strings)
    if strings:
        return (
            f"{expected}, found ids (strings) mixed with {bad!r} ({type(bad).__name__}); "
            "give every id as a string"
        )
    return f"{expected}, found {bad!r} ({type(bad).__name__})"


class TableIds(Sequence[str]):
    """A table's ids as a sequence that makes their list only when an item is asked for (the
    ids named in messages)."""

    def __init__(self, table: AxisTable):
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, index: Any) -> Any:
        return self._table.ids[index]


@dataclass(frozen=True)
class _IdsFrame:
    """Makes the frame of a table of ids alone (:meth:`AxisTable.of_ids`)."""

    axis: str
    ids: list[str]
    backend: Any

    def __call__(self) -> nw.DataFrame[Any]:
        import narwhals.stable.v2 as nw

        column = ID_COLUMNS[self.axis]
        frame = nw.from_dict({column: self.ids}, {column: nw.String()}, backend=self.backend)
        return AxisTable.user_frame(frame.to_native(), self.axis)


@dataclass(frozen=True)
class _Taken:
    """Makes the frame of rows ``idx`` of a table whose own frame is deferred."""

    table: AxisTable
    idx: Index

    def __call__(self) -> nw.DataFrame[Any]:
        return reset_index(self.table.frame[self.idx, :])

    def schema(self) -> dict[str, str]:
        """The schema of the table the rows are taken from (told without its frame if it can)."""
        return self.table.schema()


def unique_positions(ids: Sequence[str], axis: str, verb: str) -> dict[str, int]:
    """Each id's position, for ids checked to be unique (InputError naming those that are not)."""
    position = _positions(ids)
    if len(position) != len(ids):
        check_unique(ids, axis, verb)
    return position


def _positions(ids: Sequence[str]) -> dict[str, int]:
    return dict(zip(ids, range(len(ids)), strict=True))


def check_unique(ids: Sequence[str], axis: str, verb: str) -> None:
    if len(set(ids)) != len(ids):
        dup = sorted(i for i, count in Counter(ids).items() if count > 1)
        msg = f"{axis}: the ids must be unique; it {verb} {dup[:10]} more than once"
        raise InputError(msg)


def _check_ids(df: Any, axis: str) -> list[str]:
    import narwhals.stable.v2 as nw

    id_column = ID_COLUMNS[axis]
    column = df.get_column(id_column)
    if column.dtype != nw.String:
        msg = f"{axis}: the ids in {id_column!r} must be strings, found data type {column.dtype}"
        raise InputTypeError(msg)
    missing = np.flatnonzero(np.asarray(column.is_null().to_numpy(), dtype=bool))
    if missing.size:
        msg = (
            f"{axis}: {missing.size} ids in {id_column!r} are missing (rows "
            f"{missing[:5].tolist()}); expected a non-null string id on every row"
        )
        raise InputError(msg)
    ids = column.to_list()
    if not all(issubclass(kind, str) for kind in set(map(type, ids))):  # one pass in C
        for i in ids:
            if not isinstance(i, str):
                msg = f"{axis}: the ids in {id_column!r} must be strings, found {i!r}"
                raise InputTypeError(msg)
    check_unique(ids, axis, "holds")
    return ids


def id_list(values: Any, axis: str) -> list[str]:
    """The ids given as a sequence of strings (not a table), such as ``adata.var_names``;
    refused as the ids of a table are, naming ``axis``: InputTypeError for one string or for
    ids that are not strings (never converted), InputError for missing ids."""
    collection = isinstance(values, str | bytes | Mapping | AbstractSet)
    if collection or not hasattr(values, "__iter__"):
        found = f"a {type(values).__name__}" if collection else brief(values)
        msg = (
            f"{axis}: expected a table (pandas, polars or pyarrow) or a sequence of string ids "
            f"(such as adata.var_names), found {found}"
        )
        raise InputTypeError(msg)
    refuse_masked(values, axis)
    for name in ("to_pylist", "tolist", "to_list"):  # pyarrow, numpy and pandas, polars
        if hasattr(values, name):
            ids = list(getattr(values, name)())
            break
    else:
        ids = list(values)
    if not set(map(type, ids)) <= {str}:  # one pass in C
        _refuse_non_strings(ids, axis)
        ids = [str.__str__(value) for value in ids]  # a str subclass's text (numpy.str_, enums)
    return ids


def _refuse_non_strings(ids: list[Any], axis: str) -> None:
    """InputError for missing ids (None, NaN, NA), else InputTypeError for one that is not a
    string (a subclass of ``str`` is one)."""
    missing = [i for i, value in enumerate(ids) if _is_missing(value)]
    if missing:
        msg = (
            f"{axis}: {len(missing)} {'id is' if len(missing) == 1 else 'ids are'} missing "
            f"(positions {missing[:5]}); expected a non-null string id for every one"
        )
        raise InputError(msg)
    wrong = ((i, v) for i, v in enumerate(ids) if not isinstance(v, str))
    position, found = next(wrong, (-1, None))
    if position < 0:
        return
    msg = (
        f"{axis}: the ids must be strings, found {found!r} ({type(found).__name__}) at "
        f"position {position}; convert them first, such as [str(i) for i in ids]"
    )
    raise InputTypeError(msg)


def _is_missing(value: Any) -> bool:
    """None, NaN or a pandas NA."""
    if isinstance(value, float | np.floating):
        return bool(np.isnan(value))
    return value is None or type(value).__name__ == "NAType"
