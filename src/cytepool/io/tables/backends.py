"""Native frames to columns and back: pandas, polars and pyarrow.

narwhals accepts any eager frame and names its backend; the conversions of single columns are
written per backend, because each keeps distinctions narwhals does not show (pandas' nullable
and numpy dtypes, categorical codes, the UTC values behind a time zone).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from cytepool._utf8 import categories_not_unicode
from cytepool.errors import FormatError, InputError, InputTypeError
from cytepool.io.tables import strings as _s
from cytepool.io.tables.columns import (
    Categorical,
    Column,
    Dense,
    Kind,
    LazyRows,
    codes_dtype,
    has_missing_category,
)
from cytepool.io.tables.zones import zone_name
from cytepool.io.zarr.names import node_name_problem

if TYPE_CHECKING:  # narwhals is imported when a frame is first written or built
    import narwhals.stable.v2 as nw

__all__ = ["BACKENDS", "Source", "build_frame", "check_backend", "import_backend", "source_of"]

BACKENDS = ("pandas", "polars", "pyarrow")
INDEX = "_index"
_NAT = np.iinfo(np.int64).min
_STRING = np.dtypes.StringDType()
_OBJECT = np.dtype(object)


def check_backend(backend: object) -> str:
    """Return ``backend`` if it names a table backend, else raise InputTypeError/InputError."""
    if not isinstance(backend, str):
        msg = f"backend must be a string, found {type(backend).__name__}"
        raise InputTypeError(msg)
    if backend not in BACKENDS:
        msg = f"backend must be one of {', '.join(map(repr, BACKENDS))}, found {backend!r}"
        raise InputError(msg)
    return backend


def import_backend(backend: str) -> ModuleType:
    """Import and return the module of ``backend``, with an error naming what is missing."""
    check_backend(backend)
    try:
        return importlib.import_module(backend)
    except ImportError as error:
        raise _missing(backend) from error


def check_installed(backend: str) -> None:
    """Raise the ImportError of :func:`import_backend` if ``backend`` is not installed,
    without importing it (a frame to be built later)."""
    if check_backend(backend) in sys.modules:
        if sys.modules[backend] is None:  # import blocked
            raise _missing(backend)
    elif importlib.util.find_spec(backend) is None:
        raise _missing(backend)


def _missing(backend: str) -> ImportError:
    msg = (
        f"read_table(backend={backend!r}) needs the package {backend!r}, which is not "
        f"installed; install it with: pip install {backend}"
    )
    return ImportError(msg, name=backend)


# --------------------------------------------------------------------------------------------
# Writing: native frame -> columns


@dataclass(frozen=True)
class Source:
    """A frame ready to write: the column order, the index node, and a maker for each column."""

    column_order: list[str]
    index_name: str
    columns: dict[str, Callable[[], Column]]


def source_of(frame: Any, index: str | None) -> Source:
    """Check a frame's names and dtypes and return how to write it (nothing converted yet)."""
    import narwhals.stable.v2 as nw

    if _is_pandas_frame(frame):  # before narwhals, which refuses repeated names its own way
        check_column_names(frame.columns)
    try:
        nw_frame = nw.from_native(frame, eager_only=True)
    except TypeError as error:
        hint = "; make it a frame with .to_frame()" if hasattr(frame, "to_frame") else ""
        msg = (
            f"frame must be a pandas, polars or pyarrow table, or a narwhals DataFrame; "
            f"found {type(frame).__name__}{hint}"
        )
        raise InputTypeError(msg) from error
    if index is not None and not isinstance(index, str):
        msg = f"index must be a column name (str) or None, found {index!r}"
        raise InputTypeError(msg)
    implementation = nw_frame.implementation
    if implementation is nw.Implementation.POLARS:
        return _source_from_polars(nw_frame, index)
    if implementation is nw.Implementation.PYARROW:
        return _source_from_arrow(nw_frame, index)
    native = nw.to_native(nw_frame) if implementation.is_pandas() else nw_frame.to_pandas()
    return _source_from_pandas(native, nw_frame, index)


def _is_pandas_frame(frame: Any) -> bool:
    """Whether ``frame`` is a pandas DataFrame (not a Series or an Index, which narwhals
    refuses as frames), without importing pandas for another frame."""
    if type(frame).__module__.split(".")[0] != "pandas":  # "pandas" in pandas 3
        return False
    import pandas as pd

    return isinstance(frame, pd.DataFrame)


def check_column_names(names: Iterable[Any]) -> list[str]:
    """The column names of a table to be written (InputError for one a table cannot hold:
    not a string, anndata's index key ``_index``, one that cannot name a Zarr node, or one
    given twice)."""
    names = list(names)
    for name in names:
        if not isinstance(name, str):
            msg = f"column names must be strings, found {name!r} ({type(name).__name__})"
            raise InputError(msg)
        if name == INDEX:
            msg = f"{INDEX!r} is a reserved name for table columns (anndata's index key)"
            raise InputError(msg)
        _check_node_name(name, "column")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        msg = f"column names must be unique, found repeated names {duplicates}"
        raise InputError(msg)
    return names


def _check_node_name(name: str, what: str) -> None:
    """Refuse what readers refuse, and the names Zarr reserves (``node_name_problem``)."""
    problem = node_name_problem(name, new=True)
    if problem is not None:
        msg = (
            f"{what} name {name!r} cannot name a Zarr node: {problem}. A name must not be "
            "empty, '.', '..' or 'zarr.json', contain '/', '\\' or NUL, consist only of "
            "periods, start with '__', or take more than 255 bytes of UTF-8"
        )
        raise InputError(msg)


def series_dtype(series: Any) -> Any:
    """The narwhals data type of the narwhals ``series``: as narwhals gives it, but a
    datetime's zone named as every backend names it (:func:`zone_name`: pandas calls an
    offset ``UTC+05:30``, pyarrow ``+05:30``), also for a pandas datetime in a zone whose name
    narwhals does not parse, which it calls Unknown (``America/New_York``, ``Etc/GMT+1``:
    names with ``_``, digits, ``+`` or ``-``). InputError for a zone with no such name."""
    import narwhals.stable.v2 as nw

    dtype = series.dtype
    if series.implementation.is_pandas_like() and (dtype == nw.Unknown or dtype == nw.Datetime):
        native = series.to_native().dtype
        unit, zone = getattr(native, "unit", None), getattr(native, "tz", None)
        if zone is not None and unit in ("s", "ms", "us", "ns"):
            return nw.Datetime(unit, zone_name(zone))
    elif dtype == nw.Datetime and dtype.time_zone is not None:
        return nw.Datetime(dtype.time_unit, zone_name(dtype.time_zone))
    return dtype


def _check_dtypes(nw_frame: nw.DataFrame[Any]) -> None:
    import narwhals.stable.v2 as nw

    for name in nw_frame.columns:
        series = nw_frame.get_column(name)
        try:
            dtype = series_dtype(series)
        except UnicodeEncodeError:  # pandas 2 hashes the categories of a categorical
            raise InputError(categories_not_unicode(name)) from None
        if isinstance(dtype, nw.Object) and not _pandas_dates(series):
            msg = (
                f"column {name!r} has dtype {dtype} (mixed-object): only strings, with None or "
                f"NaN for missing values, can be stored from an object column"
            )
            raise InputTypeError(msg)
        if dtype.is_nested() or isinstance(
            dtype, nw.Unknown | nw.Time | nw.Binary | nw.Decimal | nw.Int128 | nw.UInt128
        ):
            shown = _native_dtype(series) if isinstance(dtype, nw.Unknown) else dtype
            msg = f"column {name!r} has dtype {shown}, which a table cannot store"
            raise InputTypeError(msg)


def _native_dtype(series: Any) -> Any:
    """The data type of a narwhals series as its backend names it (narwhals' Unknown does not
    say which: complex128, arrow ``date64[ms]`` or ``null``)."""
    native = series.to_native()
    return native.type if series.implementation.is_pyarrow() else native.dtype


def _pandas_dates(series: Any) -> bool:
    """Whether a narwhals series is a pandas column of ``datetime.date`` objects."""
    return bool(series.implementation.is_pandas_like() and date_objects(series.to_native()))


def date_objects(series: Any) -> bool:
    """Whether the pandas ``series`` holds ``datetime.date`` objects (missing: None, NaN or
    NaT), a column a cube digests and stores as dates."""
    import pandas as pd

    return series.dtype == object and pd.api.types.infer_dtype(series, skipna=True) == "date"


def is_arrow_dictionary(dtype: Any) -> bool:
    """Whether ``dtype`` is pandas' type of a pyarrow dictionary (``pd.ArrowDtype``), a
    column a cube holds as a categorical."""
    arrow = getattr(dtype, "pyarrow_dtype", None)
    if arrow is None:  # pandas' own types: no pyarrow needed
        return False
    import pyarrow as pa

    return bool(pa.types.is_dictionary(arrow))


def arrow_of(native: Any) -> Any:
    """The pyarrow ChunkedArray of a pandas series of a ``pd.ArrowDtype``."""
    import pyarrow as pa

    arrow = native.array.__arrow_array__()
    return arrow if isinstance(arrow, pa.ChunkedArray) else pa.chunked_array([arrow])


def _row_numbers(n: int, start: int = 0, step: int = 1) -> Dense:
    """Row numbers as strings, ``start``, ``start + step``, ..., made a chunk at a time."""
    return Dense("string", _s.RowNumbers(n, start, step))


def _take_index_column(names: list[str], index: str) -> list[str]:
    if index not in names:
        msg = f"index {index!r} is not a column of the frame; its columns are {names}"
        raise InputError(msg)
    return [name for name in names if name != index]


@functools.cache
def _has_pyarrow() -> bool:
    """Whether pyarrow can be imported (polars strings go through Arrow buffers with it)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


# pandas ---------------------------------------------------------------------------------------


def _source_from_pandas(df: Any, nw_frame: nw.DataFrame[Any], index: str | None) -> Source:
    import pandas as pd

    names = check_column_names(df.columns)
    _check_dtypes(nw_frame)
    makers: dict[str, Callable[[], Column]] = {
        name: _maker(_pandas_column, df[name], name) for name in names
    }
    pandas_index = df.index
    if isinstance(pandas_index, pd.MultiIndex):
        msg = "a pandas MultiIndex cannot be stored as a table index; call reset_index() first"
        raise InputTypeError(msg)
    if index is not None and pandas_index.name != index:
        if not _is_default_index(pandas_index):
            msg = (
                f"index={index!r} names a column, but the frame also has its own index "
                f"{pandas_index.name!r} that would be lost; call reset_index() or pass index=None"
            )
            raise InputError(msg)
        names = _take_index_column(names, index)
        return Source(names, index, {index: makers[index], **{n: makers[n] for n in names}})
    name = pandas_index.name
    if name is not None and not isinstance(name, str):
        msg = f"the index name must be a string or None, found {name!r} ({type(name).__name__})"
        raise InputError(msg)
    if name is None:
        name = INDEX
    _check_node_name(name, "index")
    if name in makers:
        if not pd.Series(pandas_index, index=pandas_index).equals(df[name]):
            msg = (
                f"the index name {name!r} is also used by a column whose values are different; "
                f"make the values the same or rename one of them"
            )
            raise InputError(msg)
        return Source(names, name, makers)
    make_index: Callable[[], Column]
    if _is_default_index(pandas_index):  # its numbers as strings, made chunk by chunk
        make_index = partial(_row_numbers, len(pandas_index), pandas_index.start, pandas_index.step)
    else:
        make_index = _maker(_pandas_column, pandas_index, name)
    return Source(names, name, {name: make_index, **makers})


def _is_default_index(index: Any) -> bool:
    """Whether ``index`` is an unnamed RangeIndex, written as row numbers that are strings
    (a named one is written as its integers, as anndata writes it)."""
    import pandas as pd

    return isinstance(index, pd.RangeIndex) and index.name is None


def _maker(convert: Callable[[Any, str], Column], values: Any, name: str) -> Callable[[], Column]:
    return lambda: convert(values, name)


def _pandas_column(values: Any, name: str) -> Column:
    """Convert a pandas Series or Index.

    Only the underlying arrays are used: a numpy function given a Series looks up attributes
    that make pandas hash the Series' index, which costs a lot for a long string index.
    """
    import pandas as pd

    dtype = values.dtype
    array = values.array
    if isinstance(dtype, pd.CategoricalDtype):
        categories = _plain(_pandas_column(dtype.categories, name), name)
        codes = np.asarray(array.codes).astype(codes_dtype(len(dtype.categories)), copy=False)
        return Categorical(codes, categories, bool(dtype.ordered))
    if isinstance(dtype, pd.StringDtype):
        missing = np.asarray(array.isna(), dtype=bool)
        strings = array.to_numpy(dtype=object, na_value="")
        if dtype.na_value is pd.NA:
            return Dense("nullable-string", strings, missing, na_value="NA")
        return Dense("nullable-string", strings, missing, na_value="NaN")
    if isinstance(array, pd.arrays.BooleanArray | pd.arrays.IntegerArray | pd.arrays.FloatingArray):
        kinds: dict[str, Kind] = {"b": "nullable-boolean", "f": "nullable-float"}
        numbers = array.to_numpy(dtype=dtype.numpy_dtype, na_value=0)
        missing = np.asarray(array.isna(), dtype=bool)
        return Dense(kinds.get(dtype.kind, "nullable-integer"), numbers, missing)
    if isinstance(dtype, pd.DatetimeTZDtype):
        utc = np.asarray(array.tz_convert(None).to_numpy())
        return Dense("datetime", utc, time_zone=zone_name(dtype.tz))
    if isinstance(dtype, pd.ArrowDtype):
        import pyarrow as pa

        return _arrow_column(pa.chunked_array([pa.array(array)]), name)
    if isinstance(dtype, np.dtype):
        numbers = values.to_numpy()
        if dtype.kind == "M":
            return Dense("datetime", numbers)
        if dtype.kind == "m":
            return Dense("duration", numbers)
        if dtype.kind in "biufc":
            return Dense("array", numbers)
        if dtype.kind == "O":
            return _pandas_objects(numbers, name)
        if dtype.kind in "UT":
            return Dense("string", numbers)
    msg = f"column {name!r} has dtype {dtype}, which a table cannot store"
    raise InputTypeError(msg)


_PLAIN: dict[str, Kind] = {
    "nullable-integer": "array",
    "nullable-boolean": "array",
    "nullable-float": "array",
    "nullable-string": "string",
}


def _plain(categories: Column, name: str) -> Dense:
    """Categories as anndata writes them: a plain array, never a nullable group."""
    if not isinstance(categories, Dense) or has_missing_category(categories):
        msg = f"column {name!r}: categories must be plain values without missing ones or NaN"
        raise InputTypeError(msg)
    if categories.kind in _PLAIN:
        return Dense(_PLAIN[categories.kind], categories.values)
    return categories


def _pandas_objects(objects: np.ndarray, name: str) -> Column:
    import pandas as pd

    if pd.api.types.infer_dtype(objects, skipna=False) == "string":  # nothing missing
        return Dense("string", objects)
    inferred = pd.api.types.infer_dtype(objects, skipna=True)
    if inferred == "date":  # datetime.date objects (None, NaN or NaT for missing ones)
        missing = pd.isna(objects)
        days = np.where(missing, None, objects).astype("datetime64[D]")
        return Dense("date", days)
    if inferred not in ("string", "empty"):
        msg = (
            f"column {name!r} has dtype object holding {inferred} values (mixed-object): only "
            f"strings, with None or NaN for missing values, can be stored from an object column"
        )
        raise InputTypeError(msg)
    missing = pd.isna(objects)
    if missing.any():
        objects = objects.copy()
        objects[missing] = ""
        return Dense("nullable-string", objects, missing)
    return Dense("string", objects)


# polars ---------------------------------------------------------------------------------------


def _source_from_polars(nw_frame: nw.DataFrame[Any], index: str | None) -> Source:
    import narwhals.stable.v2 as nw

    df = nw.to_native(nw_frame)
    names = check_column_names(df.columns)
    _check_dtypes(nw_frame)
    makers = {name: _maker(_polars_column, df.get_column(name), name) for name in names}
    return _source_without_index(names, makers, index, df.height)


def _source_without_index(
    names: list[str], makers: dict[str, Callable[[], Column]], index: str | None, n: int
) -> Source:
    if index is None:
        return Source(names, INDEX, {INDEX: lambda: _row_numbers(n), **makers})
    names = _take_index_column(names, index)
    return Source(names, index, {index: makers[index], **{name: makers[name] for name in names}})


def _polars_column(series: Any, name: str) -> Column:
    """Convert a polars Series."""
    import polars as pl

    dtype = series.dtype
    if isinstance(dtype, pl.Enum | pl.Categorical):
        return _polars_categorical(series, name)
    if isinstance(dtype, pl.Datetime | pl.Duration | pl.Date):
        physical = series.to_physical().cast(pl.Int64).fill_null(_NAT).to_numpy()
        if isinstance(dtype, pl.Date):
            return Dense("date", physical.view("datetime64[D]"))
        if isinstance(dtype, pl.Duration):
            return Dense("duration", physical.view(f"timedelta64[{dtype.time_unit}]"))
        values = physical.view(f"datetime64[{dtype.time_unit}]")
        return Dense("datetime", values, time_zone=dtype.time_zone)
    has_nulls = series.null_count() > 0
    if dtype == pl.String:
        filled = series.fill_null("")
        strings: LazyRows | _s.StringRows
        if _has_pyarrow():  # the UTF-8 buffers, no str objects
            strings = _s.Utf8Strings.from_arrow(filled.to_arrow())
        else:
            strings = LazyRows(len(series), _OBJECT, lambda a, b: filled.slice(a, b - a).to_numpy())
        if has_nulls:
            return Dense("nullable-string", strings, series.is_null().to_numpy())
        return Dense("string", strings)
    if dtype.is_numeric() or dtype == pl.Boolean:
        if not has_nulls:
            return Dense("array", series.to_numpy())
        kind: Kind = "nullable-float" if dtype.is_float() else "nullable-integer"
        if dtype == pl.Boolean:
            kind = "nullable-boolean"
        values = series.fill_null(False if dtype == pl.Boolean else 0).to_numpy()
        return Dense(kind, values, series.is_null().to_numpy())
    msg = f"column {name!r} has dtype {dtype}, which a table cannot store"
    raise InputTypeError(msg)


def _polars_categorical(series: Any, name: str) -> Categorical:
    import polars as pl

    physical = series.to_physical()  # a category's id (an Enum's position), null if missing
    if isinstance(series.dtype, pl.Enum):
        categories = series.dtype.categories.to_numpy().astype(_STRING)
        codes = physical.cast(pl.Int64).fill_null(-1).to_numpy()
        ordered = True
    else:  # categories in order of first appearance: renumber the ids in that order
        present = physical.drop_nulls().unique(maintain_order=True).to_numpy().astype(np.int64)
        names = series.drop_nulls().unique(maintain_order=True).cast(pl.String)
        categories = names.to_numpy().astype(_STRING)
        renumber = np.full(int(present.max(initial=-1)) + 2, -1, dtype=np.int64)
        renumber[present] = np.arange(len(present))
        missing = len(renumber) - 1  # reads -1
        codes = renumber[physical.cast(pl.Int64).fill_null(missing).to_numpy()]
        ordered = False
    return Categorical(
        codes.astype(codes_dtype(len(categories))), Dense("string", categories), ordered
    )


# pyarrow --------------------------------------------------------------------------------------


def _unique_dictionary(array: Any) -> Any:
    """A pyarrow DictionaryArray with each value once in its dictionary, at its first place,
    and the indices of a repeated value moved to it: anndata's categories (and pandas') are
    unique, and a dictionary that repeats a value holds the same values without the repeat."""
    import pyarrow as pa
    import pyarrow.compute as pc

    dictionary = array.dictionary
    unique = pc.unique(dictionary)
    if len(unique) == len(dictionary):
        return array
    positions = pc.index_in(dictionary, value_set=unique).cast(array.indices.type)
    indices = pc.take(positions, array.indices)
    return pa.DictionaryArray.from_arrays(indices, unique, ordered=array.type.ordered)


def _source_from_arrow(nw_frame: nw.DataFrame[Any], index: str | None) -> Source:
    import narwhals.stable.v2 as nw

    table = nw.to_native(nw_frame)
    names = check_column_names(table.column_names)
    _check_dtypes(nw_frame)
    makers = {name: _maker(_arrow_column, table.column(name), name) for name in names}
    return _source_without_index(names, makers, index, table.num_rows)


def _arrow_column(chunked: Any, name: str) -> Column:
    """Convert a pyarrow ChunkedArray."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = chunked.type
    if pa.types.is_dictionary(kind):
        array = chunked.unify_dictionaries().combine_chunks() if chunked.num_chunks else None
        if array is None:
            array = pa.array([], kind)
        array = _unique_dictionary(array)
        categories = _plain(_arrow_column(pa.chunked_array([array.dictionary]), name), name)
        codes = pc.fill_null(array.indices.cast(pa.int64()), -1).to_numpy()
        return Categorical(codes.astype(codes_dtype(len(categories))), categories, kind.ordered)
    array = chunked.combine_chunks()
    has_nulls = array.null_count > 0
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind) or pa.types.is_date(kind):
        if pa.types.is_date64(kind):
            array = array.cast(pa.date32())
        physical = array.view(pa.int32() if pa.types.is_date(kind) else pa.int64())
        values = pc.fill_null(physical.cast(pa.int64()), _NAT).to_numpy()
        if pa.types.is_date(kind):
            return Dense("date", values.view("datetime64[D]"))
        if pa.types.is_duration(kind):
            return Dense("duration", values.view(f"timedelta64[{kind.unit}]"))
        return Dense("datetime", values.view(f"datetime64[{kind.unit}]"), time_zone=kind.tz)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        strings = _s.Utf8Strings.from_arrow(array)  # the UTF-8 buffers, no str objects
        if has_nulls:
            return Dense("nullable-string", strings, array.is_null().to_numpy(zero_copy_only=False))
        return Dense("string", strings)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        if not has_nulls:
            return Dense("array", array.to_numpy(zero_copy_only=False))
        column_kind: Kind = "nullable-integer"
        if pa.types.is_floating(kind):
            column_kind = "nullable-float"
            if pa.types.is_float16(kind):  # refused when written; pyarrow 18 cannot fill it
                msg = (
                    f"column {name!r}: floats with missing values must be float32 or float64, "
                    "found float16"
                )
                raise InputTypeError(msg)
        if pa.types.is_boolean(kind):
            column_kind = "nullable-boolean"
        filler = pa.scalar(False if pa.types.is_boolean(kind) else 0, kind)
        values = pc.fill_null(array, filler).to_numpy(zero_copy_only=False)
        mask = array.is_null().to_numpy(zero_copy_only=False)
        return Dense(column_kind, values, mask)
    msg = f"column {name!r} has dtype {kind}, which a table cannot store"
    raise InputTypeError(msg)


# --------------------------------------------------------------------------------------------
# Reading: columns -> native frame


def build_frame(
    backend: str,
    index_name: str | None,
    index: Column | None,
    n_rows: int,
    columns: dict[str, Column],
) -> Any:
    """Build a native frame; ``index_name`` None means an unnamed index.

    pandas needs the ``index``; polars and pyarrow need it only when it is named.
    """
    module = import_backend(backend)
    if backend == "pandas":
        assert index is not None
        pandas_index = module.Index(_to_pandas(index, module), name=index_name)
        data = {
            name: _pandas_series(column, module, pandas_index) for name, column in columns.items()
        }
        return module.DataFrame(data, index=pandas_index, columns=list(columns) or None)
    convert = _to_polars if backend == "polars" else _to_arrow
    data = {}
    if index_name is not None and index_name not in columns:
        assert index is not None
        data[index_name] = convert(index, index_name)
    data.update({name: convert(column, name) for name, column in columns.items()})
    if backend == "polars":
        return module.DataFrame(list(data.values()) or None, height=n_rows)
    if not data:  # keep the number of rows of a table without columns
        return module.table({"": module.nulls(n_rows)}).drop_columns([""])
    return module.table(data)


_FINER_THAN_NS = ("ps", "fs", "as")


def _with_unit(values: np.ndarray, units: tuple[str, ...], fallback: str) -> np.ndarray:
    """Return datetime/timedelta ``values`` in a unit of ``units``: a unit finer than ``ns``
    (``ps``, ``fs``, ``as``) in ``ns``, any other in ``fallback``.

    A unit finer than ``ns`` is floored to whole nanoseconds, as pandas, and so anndata's
    ``read_elem``, reads it (never out of range: ``ps`` spans ±106 days). A unit with a scale
    factor (``datetime64[7s]``) is converted too. Where a conversion to a finer unit
    overflows, numpy wraps around (numpy 2.5 and later raise OverflowError), so such values
    raise FormatError instead.
    """
    unit, count = np.datetime_data(values.dtype)
    if unit in units and count == 1:
        return values
    kind = "datetime64" if values.dtype.kind == "M" else "timedelta64"
    target_unit = unit if unit in units else "ns" if unit in _FINER_THAN_NS else fallback
    target = np.dtype(f"{kind}[{target_unit}]")
    msg = (
        f"{kind} values in unit {count}{unit} do not fit in {target} (the unit pandas, "
        "polars and pyarrow share): the stored values are out of range"
    )
    try:
        converted = values.astype(target)
    except OverflowError as error:
        raise FormatError(msg) from error
    if np.can_cast(values.dtype, target, casting="safe"):  # a multiplication: check it
        back = converted.astype(values.dtype)
        if not np.array_equal(back.view(np.int64), values.view(np.int64)):
            raise FormatError(msg)
    return converted


def _pandas_series(column: Column, pd: Any, index: Any) -> Any:
    """A column for a pandas frame: a ``string-array`` stays object, as anndata reads it.

    (pandas 3 would infer its ``str`` dtype from an object array, but not from a Series.)
    """
    values = _to_pandas(column, pd)
    if isinstance(values, np.ndarray) and values.dtype == _OBJECT:
        return pd.Series(values, dtype=object, index=index, copy=False)
    return values


def _to_pandas(column: Column, pd: Any) -> Any:
    if isinstance(column, Categorical):
        categories = pd.Index(_to_pandas(column.categories, pd))
        return pd.Categorical.from_codes(
            column.codes, categories=categories, ordered=column.ordered
        )
    if column.kind == "nullable-string":
        return _pandas_strings(column, pd)
    kind, values, mask = column.kind, column.array, column.mask
    if kind == "string":
        return values.astype(object, copy=False)
    if kind == "nullable-integer":
        return pd.arrays.IntegerArray(values, mask)
    if kind == "nullable-boolean":
        return pd.arrays.BooleanArray(values, mask)
    if kind == "nullable-float" and mask is not None:
        return pd.arrays.FloatingArray(np.where(mask, 0, values).astype(values.dtype), mask)
    if kind in ("datetime", "date", "duration"):
        array = pd.array(_with_unit(values, ("s", "ms", "us", "ns"), "s"))
        if column.time_zone is not None:
            array = array.tz_localize("UTC").tz_convert(column.time_zone)
        return array
    return values


def pandas_strings_in_arrow() -> bool:
    """Whether pandas' default string arrays keep their strings in pyarrow (pandas 3 with
    pyarrow installed): a string column is then made from its UTF-8 buffers, no ``str`` per
    row."""
    import pandas as pd

    return bool(pd.StringDtype().storage == "pyarrow")


def _pandas_strings(column: Dense, pd: Any) -> Any:
    """A ``nullable-string-array`` column as pandas' string array, as anndata 0.13 reads it:
    of pandas' default storage, made from the UTF-8 buffers (no ``str`` per row) when that is
    pyarrow."""
    na_value = pd.NA if column.na_value == "NA" else np.nan
    dtype = pd.StringDtype(na_value=na_value)
    if dtype.storage == "pyarrow" and isinstance(column.values, _s.Utf8Strings):
        return pd.array(column.values.to_arrow(column.mask, large=True), dtype=dtype)
    objects = column.array.astype(object)  # a copy: missing values are set below
    objects[column.mask] = na_value
    return pd.array(objects, dtype=dtype)


def _polars_with_nulls(series: Any, mask: np.ndarray | None) -> Any:
    if mask is None or not mask.any():
        return series
    return series.scatter(np.flatnonzero(mask), None)


def _to_polars(column: Column, name: str) -> Any:
    import polars as pl

    if isinstance(column, Categorical):
        categories = _to_polars(column.categories, name)
        codes = column.codes.astype(np.int64)
        missing = codes < 0
        taken = categories.gather(
            _polars_with_nulls(pl.Series(np.where(missing, 0, codes)), missing)
        )
        if categories.dtype == pl.String:
            dtype = pl.Enum(categories) if column.ordered else pl.Categorical()
            taken = taken.cast(dtype)
        return taken.alias(name)
    kind = column.kind
    if isinstance(column.values, _s.Utf8Strings) and _has_pyarrow():
        return pl.Series(name, column.values.to_arrow(column.mask))
    values = column.array
    if kind == "string" or kind == "nullable-string":
        return _polars_with_nulls(pl.Series(name, values, dtype=pl.String), column.mask)
    if kind in ("datetime", "duration"):
        values = _with_unit(values, ("ms", "us", "ns"), "ms")
    if kind == "date":
        return pl.Series(name, values.astype("datetime64[D]"), dtype=pl.Date)
    series = pl.Series(name, values)
    if kind == "datetime" and column.time_zone is not None:
        series = _in_polars_zone(series.dt.replace_time_zone("UTC"), column.time_zone, name)
    return _polars_with_nulls(series, column.mask)


def _in_polars_zone(series: Any, zone: str, name: str) -> Any:
    """UTC times in ``zone``; InputError for a zone polars does not know (a fixed offset such
    as ``+05:30``, which pandas and pyarrow hold; polars takes IANA names only)."""
    import polars as pl

    try:
        return series.dt.convert_time_zone(zone)
    except pl.exceptions.ComputeError:
        msg = (
            f"column {name!r}: polars cannot hold the time zone {zone!r} (it takes zone "
            "names only); read it with backend='pandas' or backend='pyarrow'"
        )
        raise InputError(msg) from None


def _to_arrow(column: Column, name: str) -> Any:
    import pyarrow as pa

    if isinstance(column, Categorical):
        dictionary = _to_arrow(column.categories, name)
        codes = column.codes.astype(np.int32)
        indices = pa.array(codes, mask=codes < 0, type=pa.int32())
        return pa.DictionaryArray.from_arrays(indices, dictionary, ordered=column.ordered)
    if isinstance(column.values, _s.Utf8Strings):
        return column.values.to_arrow(column.mask)
    kind, values, mask = column.kind, column.array, column.mask
    if kind in ("string", "nullable-string"):
        return pa.array(values.astype(object, copy=False), type=pa.string(), mask=mask)
    if kind in ("datetime", "date", "duration"):
        missing = np.isnat(values)
        if kind == "date":
            days = values.astype("datetime64[D]").view(np.int64).astype(np.int32)
            return pa.array(days, mask=missing, type=pa.int32()).view(pa.date32())
        values = _with_unit(values, ("s", "ms", "us", "ns"), "s")
        unit = np.datetime_data(values.dtype)[0]
        if kind == "duration":
            arrow_type = pa.duration(unit)
        else:
            arrow_type = pa.timestamp(unit, tz=column.time_zone)
        return pa.array(values.view(np.int64), mask=missing, type=pa.int64()).view(arrow_type)
    return pa.array(values, mask=mask)
