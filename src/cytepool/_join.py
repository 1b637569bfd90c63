"""The rows of several tables of one axis as one table, the same in every backend.

``cytepool.concat`` joins the tables along its axis so that the joined table, and so its
digest, do not depend on the backend that holds them (see ``docs/cube.md``): a column a table
lacks is missing there in the column's nullable type, numbers of other types take numpy's
common type, times of other units the finest unit, categoricals joined with strings become
strings and categoricals keep the union of their categories, but for ordered ones, which stay
as they are if they have the same categories in the same order and otherwise become their
values, as with pandas and anndata; floats of 16 bits that get
missing values become float32 (exactly), which a cube file can store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cytepool.errors import InputError, InputTypeError

__all__ = ["joined_frame", "numbers_alike", "pandas_joined"]

_NUMBERS: tuple[str, ...] = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32")
_NUMBERS += ("UInt64", "Float16", "Float32", "Float64")
_UNITS = ("s", "ms", "us", "ns")


def joined_frame(frames: Sequence[Any], axis: str) -> Any:
    """The rows of narwhals ``frames`` one after the other, in the first frame's backend.

    Raises
    ------
    InputError
        If a column holds values of types that do not join (strings and numbers, times of
        other time zones, ...), naming the types.
    """
    import narwhals.stable.v2 as nw

    impl = frames[0].implementation
    frames = [
        f if f.implementation == impl else nw.from_arrow(f.to_arrow(), backend=impl) for f in frames
    ]
    same = all(f.columns == frames[0].columns for f in frames)
    try:
        if impl is nw.Implementation.PANDAS:  # its own rules would change types
            natives = [f.to_native() for f in frames]
            return nw.from_native(pandas_joined(natives), eager_only=True)
        if impl.is_pyarrow():  # before numbers_alike makes categories joined with strings strings
            _check_arrow_columns(frames)
        frames = _arrow_alike(numbers_alike(frames))
        return nw.concat(frames, how="vertical" if same else "diagonal")
    except Exception as err:
        msg = (
            f"{axis}: the tables cannot be joined ({type(err).__name__}: {err}); give the "
            "columns of the same name types that join (numbers, times of one time zone, "
            "strings and categoricals)"
        )
        raise InputError(msg) from err


def numbers_alike(frames: Sequence[Any]) -> list[Any]:
    """The narwhals ``frames`` with each column of types that polars and pyarrow do not join
    cast to the type pandas gives it: numbers of other types to their common type (numpy's:
    integers and floats make floats), times of other units to the finest, categoricals
    joined with strings, and polars Enums (ordered) joined with other categoricals, to
    strings, and floats of 16 bits that a frame lacks to float32."""
    kinds: dict[str, list[Any]] = {}
    for frame in frames:
        for name, dtype in frame.schema.items():
            kinds.setdefault(name, []).append(dtype)
    lacking = {name for frame in frames for name in kinds if name not in frame.columns}
    targets = {}
    for name, dtypes in kinds.items():
        target = _common_type(dtypes, missing=name in lacking)
        if target is not None:
            targets[name] = target
    return [_cast(frame, targets) for frame in frames]


def _common_type(dtypes: list[Any], *, missing: bool) -> Any:
    """The narwhals type that values of ``dtypes`` join as (None: as they are)."""
    import narwhals.stable.v2 as nw

    names = {str(dtype) for dtype in dtypes}
    if names <= set(_NUMBERS):
        common = str(np.result_type(*(name.lower() for name in names)))
        if common == "float16" and missing:  # a cube file stores no float16 with missing values
            common = "float32"
        target = getattr(nw, {n.lower(): n for n in _NUMBERS}[common])
        return None if names == {str(target)} else target
    if len(names) > 1 and all(d in (nw.String, nw.Categorical, nw.Enum) for d in dtypes):
        return nw.String  # a polars Enum is ordered: with others, strings (as pandas)
    for kind in (nw.Datetime, nw.Duration):
        if len(names) > 1 and all(d == kind for d in dtypes):
            zones = {getattr(d, "time_zone", None) for d in dtypes}
            if len(zones) == 1:
                unit = max((d.time_unit for d in dtypes), key=_UNITS.index)
                return nw.Duration(unit) if kind == nw.Duration else nw.Datetime(unit, *zones)
    return None


def _cast(frame: Any, targets: dict[str, Any]) -> Any:
    """``frame`` with its columns named in ``targets`` cast to their narwhals types; pyarrow
    casts numbers as numpy does (rounding integers beyond a float's precision, which its safe
    cast refuses)."""
    import narwhals.stable.v2 as nw

    casts = {n: t for n, t in targets.items() if n in frame.columns and frame.schema[n] != t}
    if not casts:
        return frame
    if not frame.implementation.is_pyarrow():
        return frame.with_columns(*(nw.col(n).cast(t) for n, t in casts.items()))
    import pyarrow as pa

    native = frame.to_native()
    for name, target in casts.items():
        if str(target) in _NUMBERS:
            column = _arrow_cast(native[name], pa.type_for_alias(str(target).lower()))
            native = native.set_column(native.schema.get_field_index(name), name, column)
    frame = nw.from_native(native, eager_only=True)
    rest = [nw.col(n).cast(t) for n, t in casts.items() if str(t) not in _NUMBERS]
    return frame.with_columns(*rest) if rest else frame


def _arrow_alike(frames: list[Any]) -> list[Any]:
    """pyarrow ``frames`` with strings (``string``, ``large_string``, ``string_view``) as
    ``large_string`` and categoricals as ``dictionary<int32, large_string>`` where frames
    hold them in other arrow types (a polars frame's and a pyarrow frame's); others as they
    are."""
    import narwhals.stable.v2 as nw

    if not frames[0].implementation.is_pyarrow():
        return frames
    natives = [frame.to_native() for frame in frames]
    types = _arrow_types(natives)
    targets = {n: _arrow_target(found) for n, found in types.items() if len(found) > 1}
    for name in types:
        columns = [native[name] for native in natives if name in native.column_names]
        targets[name] = _ordered_target(columns) or targets.get(name)
    targets = {n: t for n, t in targets.items() if t is not None}
    out = []
    for native in natives:
        for name, target in targets.items():
            if name in native.column_names:
                index = native.schema.get_field_index(name)
                native = native.set_column(index, name, _arrow_cast(native[name], target))
        out.append(nw.from_native(native, eager_only=True))
    return out


def _check_arrow_columns(frames: list[Any]) -> None:
    """:func:`_check_categories` of each column of the pyarrow ``frames``, as they are."""
    for name, found in _arrow_types([frame.to_native() for frame in frames]).items():
        _check_categories(name, found)


def _arrow_types(natives: list[Any]) -> dict[str, set[Any]]:
    """The arrow types each column has in the pyarrow tables ``natives``."""
    types: dict[str, set[Any]] = {}
    for native in natives:
        for field in native.schema:
            types.setdefault(field.name, set()).add(field.type)
    return types


def _arrow_cast(column: Any, target: Any) -> Any:
    """``column`` cast to ``target``; to numbers as numpy casts (rounding integers beyond a
    float's precision, which pyarrow's safe cast refuses)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_integer(target) or pa.types.is_floating(target):
        return pc.cast(column, target, safe=False)
    return column.cast(target)


def _arrow_strings(kind: Any) -> bool:
    """Whether arrow type ``kind`` is one of strings."""
    import pyarrow as pa

    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind)) or (
        str(kind) == "string_view"
    )


def _check_categories(name: str, found: set[Any]) -> None:
    """InputTypeError if arrow types ``found`` (of column ``name``) hold categories of types
    that do not join (integers and strings, ...), or categories and values of other kinds
    (categories of integers and strings), as pandas refuses them."""
    import pyarrow as pa

    dictionaries = {_arrow_kind(k.value_type) for k in found if pa.types.is_dictionary(k)}
    if len(dictionaries) > 1:
        msg = f"column {name!r} holds categories of types {sorted(dictionaries)}, which do not join"
        raise InputTypeError(msg)
    values = {
        _arrow_kind(k) for k in found if not (pa.types.is_dictionary(k) or pa.types.is_null(k))
    }
    if dictionaries and values and dictionaries | values != dictionaries:
        msg = (
            f"column {name!r} holds categories of {dictionaries.pop()}s and values of types "
            f"{sorted(values)}, which do not join"
        )
        raise InputTypeError(msg)


def _arrow_kind(value_type: Any) -> str:
    """The kind of arrow categories of ``value_type`` as :func:`_categories_type` names it."""
    import pyarrow as pa

    if _arrow_strings(value_type):
        return "string"
    if pa.types.is_integer(value_type) or pa.types.is_floating(value_type):
        return "number"
    if pa.types.is_timestamp(value_type):
        return "time"
    return str(value_type)


def _ordered_target(columns: list[Any]) -> Any:
    """The arrow type that pyarrow dictionary ``columns`` join as when one is ordered, as
    pandas joins them: None (as they are) if all are ordered with the same values in the same
    order (empty ones do not count), else the values' type (strings as ``large_string``)."""
    import pyarrow as pa

    kinds = [column.type for column in columns]
    if not all(pa.types.is_dictionary(kind) for kind in kinds):
        return None
    if not any(kind.ordered for kind in kinds):
        return None
    values = [chunk.dictionary.to_pylist() for column in columns for chunk in column.chunks]
    given = [value for value in values if value]
    if all(kind.ordered for kind in kinds) and all(value == given[0] for value in given):
        return None
    if all(_arrow_strings(kind.value_type) for kind in kinds):
        return pa.large_string()
    return kinds[0].value_type


def _arrow_target(found: set[Any]) -> Any:
    """The arrow type that strings or categoricals of types ``found`` are joined as."""
    import pyarrow as pa

    if all(_arrow_strings(kind) for kind in found):
        return pa.large_string()
    decoded = {kind.value_type if pa.types.is_dictionary(kind) else kind for kind in found}
    if len(decoded) == 1 and not all(pa.types.is_dictionary(kind) for kind in found):
        return decoded.pop()  # categories of numbers joined with such numbers: numbers
    if all(pa.types.is_dictionary(kind) and _arrow_strings(kind.value_type) for kind in found):
        ordered = {kind.ordered for kind in found}
        if len(ordered) == 1:
            return pa.dictionary(pa.int32(), pa.large_string(), ordered.pop())
    if {_arrow_kind(kind) for kind in decoded} == {"number"}:  # categories of other widths:
        return _common_number(decoded)  # their values, in their common type, as pandas gives
    return None


def _common_number(types: set[Any]) -> Any:
    """The arrow type numbers of ``types`` join in, as numpy promotes them (int8 and int64:
    int64; an integer and a float: float64)."""
    import pyarrow as pa

    common = np.result_type(*(kind.to_pandas_dtype() for kind in types))
    return pa.from_numpy_dtype(common)


def pandas_joined(frames: Sequence[Any]) -> Any:
    """The rows of pandas ``frames`` one after the other, their columns in the order they
    first appear, each column of the type polars and pyarrow give it (so a cube's table, and
    its digest, do not depend on its backend): a column a frame lacks is missing there in the
    column's nullable type (integers stay integers, booleans booleans, where pandas' own
    concat makes floats and objects), and categoricals of different categories stay one
    categorical over the union of their categories (pandas makes strings)."""
    import pandas as pd

    names = list(dict.fromkeys(name for frame in frames for name in frame.columns))
    columns = {}
    for name in names:
        like = next(frame[name].dtype for frame in frames if name in frame.columns)
        parts = [
            frame[name].reset_index(drop=True)
            if name in frame.columns
            else pd.Series([None] * len(frame), dtype=_nullable(like))
            for frame in frames
        ]
        columns[name] = _joined_column(name, parts)
        _check_joined(name, parts, columns[name])
    return pd.DataFrame(columns)


def _nullable(dtype: Any) -> Any:
    """A pandas type that holds the values of ``dtype`` and missing values."""
    import pandas as pd

    if isinstance(dtype, pd.CategoricalDtype):
        return pd.CategoricalDtype(dtype.categories[:0], ordered=dtype.ordered)
    kind = getattr(dtype, "kind", "O") if isinstance(dtype, np.dtype) else "O"
    if dtype == np.float16:  # a cube file stores no float16 with missing values: float32 holds it
        return "float32"
    if kind in "iu":
        return f"{'U' if kind == 'u' else ''}Int{8 * dtype.itemsize}"
    return "boolean" if kind == "b" else dtype


def _joined_column(name: str, parts: list[Any]) -> Any:
    """One column ``name`` of pandas Series ``parts`` joined: categoricals as
    :func:`_joined_categoricals`, others as pandas joins them."""
    import pandas as pd

    if all(isinstance(part.dtype, pd.CategoricalDtype) for part in parts):
        return _joined_categoricals(name, parts)
    return pd.concat(parts, ignore_index=True)


def _joined_categoricals(name: str, parts: list[Any]) -> Any:
    """pandas categoricals ``parts`` (of column ``name``) joined as pandas and anndata join
    them: unordered ones over the union of their categories, ordered ones of the same
    categories in the same order as they are, others (ordered ones of other categories, or
    ordered and unordered ones) as their values, in their categories' type. Parts without
    categories (a column a frame lacks) do not count.

    Raises
    ------
    InputTypeError
        If the categories are of types that do not join (integers and strings, ...).
    """
    import pandas as pd

    given = [part.dtype for part in parts if len(part.dtype.categories)]
    types = {_categories_type(dtype.categories) for dtype in given}
    if len(types) > 1:
        msg = f"column {name!r} holds categories of types {sorted(types)}, which do not join"
        raise InputTypeError(msg)
    ordered = {dtype.ordered for dtype in given}
    alike = all(dtype.categories.equals(given[0].categories) for dtype in given)
    if (ordered == {True} and not alike) or len(ordered) > 1:
        return pd.concat(_decoded(parts, given[0].categories.dtype), ignore_index=True)
    try:
        joined = pd.api.types.union_categoricals(parts, ignore_order=True)
    except TypeError:  # categories of one kind but other types (int8, int64): as pandas does
        return pd.concat(parts, ignore_index=True)
    return pd.Series(joined.as_ordered() if ordered == {True} else joined)


_KINDS = {"i": "number", "u": "number", "f": "number", "b": "bool", "M": "time", "m": "duration"}


def _categories_type(categories: Any) -> str:
    """The kind of pandas ``categories``, as far as joining goes: ``string`` for strings (of
    any dtype), ``number`` for integers and floats of any width (joined in their common type,
    as pandas does), ``time`` for datetimes of any unit, else the dtype's name."""
    if categories.inferred_type == "string":
        return "string"
    dtype = getattr(categories.dtype, "numpy_dtype", categories.dtype)
    kind = getattr(dtype, "kind", "")
    return _KINDS.get(kind, str(categories.dtype))


def _decoded(parts: list[Any], dtype: Any) -> list[Any]:
    """The values of pandas categoricals ``parts`` in the categories' ``dtype`` (in its
    nullable type if a value is missing)."""
    if any(part.isna().any() for part in parts):
        dtype = _nullable(dtype)
    return [part.astype(dtype) for part in parts]


def _check_joined(name: str, parts: list[Any], joined: Any) -> None:
    """InputTypeError if pandas made objects of values of types that do not join (booleans and
    numbers, strings and numbers, datetimes of other time zones), as polars and pyarrow
    refuse them, rather than a column a cube cannot hold."""
    dtypes = {str(part.dtype) for part in parts}
    if joined.dtype != object or len(dtypes) == 1:
        return
    made = all(part.dtype != object for part in parts)  # objects of no objects: mixed types
    if made or len({type(value) for value in joined.dropna()}) > 1:
        msg = f"column {name!r} holds values of types {sorted(dtypes)}, which do not join"
        raise InputTypeError(msg)
