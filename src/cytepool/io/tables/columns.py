"""Column encodings of the anndata dataframe format, and cytepool's extensions.

A column in memory is a :class:`Dense` (numpy values, maybe a missing-value mask) or a
:class:`Categorical` (codes and categories). Each ``write_*`` function turns one into a plan of
what to store (an :class:`ArrayPlan` or a :class:`GroupPlan` whose children are columns again);
each ``read_*`` function turns a stored node back into a column. Neither touches files nor sets
the ``encoding-type``/``encoding-version`` attributes: the dispatcher in
:mod:`cytepool.io.tables.registry` does both, from its one table of encodings.

Types that anndata cannot store are written as ``array`` elements that anndata reads without
error, with the exact type in the attribute ``cytepool-dtype`` where the Zarr data type alone
does not say it (see ``docs/tables.md``):

* datetime without a time zone: a ``numpy.datetime64`` array (no extra attribute);
* datetime with a time zone: a ``numpy.datetime64`` array of UTC times,
  ``{"type": "datetime", "time_zone": "<zone>"}``;
* date: a ``numpy.datetime64`` array with unit ``D``, ``{"type": "date"}``;
* duration: a ``numpy.timedelta64`` array (no extra attribute);
* float with missing values: a float array in which a missing value is the NaN whose payload
  is 1954 (R's ``NA_real_``), ``{"type": "nullable-float"}``; anndata and zarr-python see NaN.
  A NaN that is not missing is never that NaN (one with its bits is stored as the quiet NaN).

Complex numbers are not a table type: written, they are refused; read (anndata writes them as
an ``array``), they raise UnsupportedFeatureError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from cytepool.errors import FormatError, InputIndexError, InputTypeError, UnsupportedFeatureError
from cytepool.io.tables import strings as _s

if TYPE_CHECKING:
    from cytepool.io.zarr import ZarrArray
    from cytepool.io.zarr.store import StorePath

__all__ = [
    "DTYPE_ATTRIBUTE",
    "ArrayPlan",
    "Categorical",
    "Column",
    "Dense",
    "GroupPlan",
    "Kind",
    "LazyRows",
    "Node",
    "codes_dtype",
    "has_missing_category",
    "kind_of",
]

DTYPE_ATTRIBUTE = "cytepool-dtype"
"""The attribute that records a type the Zarr data type alone does not say."""

Kind = Literal[
    "array",
    "string",
    "nullable-integer",
    "nullable-boolean",
    "nullable-string",
    "nullable-float",
    "datetime",
    "date",
    "duration",
    "categorical",
]

# Missing floats are this NaN (R's NA_real_ payload 1954 on a quiet NaN); other NaNs are NaN.
_NA_FLOAT_BITS: dict[np.dtype, tuple[int, np.dtype]] = {
    np.dtype("float64"): (0x7FF8_0000_0000_07A2, np.dtype("uint64")),
    np.dtype("float32"): (0x7FC0_07A2, np.dtype("uint32")),
}
# A NaN that is not missing but has the bits of the marker is stored as the canonical quiet NaN.
_QUIET_NAN_BITS: dict[np.dtype, int] = {
    np.dtype("float64"): 0x7FF8_0000_0000_0000,
    np.dtype("float32"): 0x7FC0_0000,
}
_NAT = np.iinfo(np.int64).min


class LazyRows:
    """A 1-D column whose rows are made on demand, a slice at a time, for ``write_array``.

    A large string column is converted to Python strings one row of chunks at a time, so a
    write never holds the whole column as Python objects (polars without pyarrow; with it,
    strings are written from their buffers, see :mod:`cytepool.io.tables.strings`).
    """

    def __init__(self, length: int, dtype: np.dtype, rows: Callable[[int, int], np.ndarray]):
        self.shape = (length,)
        self.ndim = 1
        self.dtype = dtype
        self._rows = rows

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            msg = f"LazyRows takes slices with step 1, found {key!r}"
            raise InputIndexError(msg)
        return self._rows(start, max(start, stop))


@dataclass(frozen=True, eq=False)
class Dense:
    """A column of plain values.

    ``kind`` says how the values are meant: ``"array"`` (numbers or booleans, nothing missing),
    ``"string"`` (nothing missing), ``"nullable-integer"``, ``"nullable-boolean"``,
    ``"nullable-string"``, ``"nullable-float"`` (values plus ``mask``, True = missing),
    ``"datetime"`` (``time_zone`` set when the UTC values belong to a zone), ``"date"`` and
    ``"duration"`` (missing = NaT). Strings are numpy StringDType, ``U`` or object arrays of
    ``str`` (the Zarr module writes all three), :class:`LazyRows` of them, or
    :class:`~cytepool.io.tables.strings.StringRows` (UTF-8 buffers, row numbers), whose
    missing values already read ``""``.
    """

    kind: Kind
    values: np.ndarray | LazyRows | _s.StringRows
    mask: np.ndarray | None = None
    time_zone: str | None = None
    na_value: Literal["NA", "NaN"] = "NA"

    def __len__(self) -> int:
        return len(self.values)

    @property
    def array(self) -> np.ndarray:
        """The values as one numpy array (lazy rows are made now)."""
        if isinstance(self.values, LazyRows | _s.StringRows):
            return self.values[0 : len(self.values)]
        return self.values

    def missing(self) -> np.ndarray:
        """Return a boolean array, True where a value is missing."""
        if self.mask is not None:
            return self.mask
        if self.values.dtype.kind in "mM":
            return np.isnat(self.array)
        return np.zeros(len(self.values), dtype=bool)


@dataclass(frozen=True, eq=False)
class Categorical:
    """A categorical column: signed integer ``codes`` (−1 = missing) into ``categories``."""

    codes: np.ndarray
    categories: Dense
    ordered: bool
    kind: Kind = field(default="categorical", init=False)

    def __len__(self) -> int:
        return len(self.codes)


Column = Dense | Categorical


@dataclass(frozen=True, eq=False)
class ArrayPlan:
    """An array to store, with its attributes (besides the encoding attributes)."""

    data: np.ndarray | LazyRows | _s.StringRows
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class GroupPlan:
    """A group to store: attributes and children, each a column or a function that makes one."""

    attributes: dict[str, Any]
    children: Mapping[str, Column | Callable[[], Column]]


@dataclass(frozen=True, eq=False)
class Node:
    """A stored element to read: where it is, its attributes, and the array if it is one.

    ``objects`` asks for strings as an object array of ``str`` (fast for pandas), else as
    UTF-8 buffers (:class:`~cytepool.io.tables.strings.Utf8Strings`, for polars and pyarrow).
    """

    path: StorePath
    attributes: Mapping[str, Any]
    array: ZarrArray | None = None
    objects: bool = True


def has_missing_category(categories: Dense) -> bool:
    """Whether ``categories`` hold a missing value: a masked one, NaT, or a float NaN (pandas
    allows no missing category; a missing value is a code of −1)."""
    if categories.missing().any():
        return True
    array = categories.array
    return bool(array.dtype.kind == "f" and np.isnan(array).any())


def kind_of(column: Column) -> Kind:
    """Return the kind of a column, the key of its writer in the registry."""
    return column.kind


def codes_dtype(n_categories: int) -> np.dtype:
    """Return the smallest signed integer type pandas uses for codes into ``n_categories``."""
    for dtype in (np.int8, np.int16, np.int32):
        if n_categories < np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


# --------------------------------------------------------------------------------------------
# Writers: column -> plan


def write_array(column: Column) -> ArrayPlan:
    """Plan an ``array`` or ``string-array``: the values as they are."""
    assert isinstance(column, Dense)
    return ArrayPlan(column.values)


def write_datetime(column: Column) -> ArrayPlan:
    """Plan a datetime array; a time zone goes to ``cytepool-dtype``, the values stay UTC."""
    assert isinstance(column, Dense)
    if column.time_zone is None:
        return ArrayPlan(column.values)
    extra = {"type": "datetime", "time_zone": column.time_zone}
    return ArrayPlan(column.values, {DTYPE_ATTRIBUTE: extra})


def write_date(column: Column) -> ArrayPlan:
    """Plan a date array: ``numpy.datetime64`` days, marked as dates."""
    assert isinstance(column, Dense)
    return ArrayPlan(column.array.astype("datetime64[D]"), {DTYPE_ATTRIBUTE: {"type": "date"}})


def write_nullable_float(column: Column) -> ArrayPlan:
    """Plan a float array in which a missing value is the NaN with payload 1954.

    A value that is not missing but is that NaN (R's ``NA_real_`` read as a number) is stored
    as the canonical quiet NaN, so that it reads back as NaN, not as a missing value.
    """
    assert isinstance(column, Dense)
    values = np.array(column.array, copy=True)
    if values.dtype not in _NA_FLOAT_BITS:
        msg = f"floats with missing values must be float32 or float64, found {values.dtype}"
        raise InputTypeError(msg)
    bits, view = _NA_FLOAT_BITS[values.dtype]
    stored = values.view(view)
    stored[stored == bits] = _QUIET_NAN_BITS[values.dtype]  # a NaN, not missing: not the marker
    if column.mask is not None and column.mask.any():
        stored[column.mask] = bits
    return ArrayPlan(values, {DTYPE_ATTRIBUTE: {"type": "nullable-float"}})


def write_categorical(column: Column) -> GroupPlan:
    """Plan a ``categorical`` group: ``ordered``, then ``codes`` and ``categories``."""
    assert isinstance(column, Categorical)
    codes = Dense("array", column.codes)
    return GroupPlan({"ordered": column.ordered}, {"codes": codes, "categories": column.categories})


def write_nullable(column: Column) -> GroupPlan:
    """Plan a ``nullable-*`` group: ``values`` (missing ones zeroed) and ``mask``."""
    assert isinstance(column, Dense)
    mask = column.missing()
    values = column.values
    if mask.any() and isinstance(values, np.ndarray):
        values = np.array(values, copy=True)
        values[mask] = "" if values.dtype.kind in "OTU" else 0
    kind: Kind = "string" if values.dtype.kind in "OTU" else "array"
    attributes: dict[str, Any] = {}
    if column.kind == "nullable-string":
        attributes["na-value"] = column.na_value
    return GroupPlan(attributes, {"values": Dense(kind, values), "mask": Dense("array", mask)})


# --------------------------------------------------------------------------------------------
# Readers: node -> column

Read = Callable[["StorePath"], Column]


def read_array(node: Node, read: Read) -> Column:
    """Read an ``array`` or ``string-array`` (or an array without encoding attributes)."""
    array = _need_array(node)
    if array.dtype.kind in "TOU":
        if node.objects:  # straight into str objects
            return Dense("string", np.asarray(array, dtype=object))
        return Dense("string", _s.read_strings(array))  # UTF-8 buffers, no str objects
    if array.dtype.kind == "c":  # refused before any value is read
        msg = (
            f"{node.path}: column {node.path.name!r} has data type {array.dtype}, which "
            "cytepool tables do not read: complex numbers are not a table type (write_table "
            "refuses them too)"
        )
        raise UnsupportedFeatureError(msg)
    values = np.asarray(array)
    extra = node.attributes.get(DTYPE_ATTRIBUTE)
    kind = values.dtype.kind
    if kind == "M":
        return _read_datetime(node, values, extra)
    if kind == "m":
        return Dense("duration", _fixed_length(node, values))
    if kind == "f" and extra is not None:
        _check_extra(node, extra, "nullable-float")
        if values.dtype not in _NA_FLOAT_BITS:
            msg = f"{node.path}: nullable floats must be float32 or float64, not {values.dtype}"
            raise FormatError(msg)
        bits, view = _NA_FLOAT_BITS[values.dtype]
        return Dense("nullable-float", values, mask=values.view(view) == bits)
    if kind in "biuf":
        return Dense("array", values)
    msg = f"{node.path}: arrays of data type {values.dtype} are not supported in tables"
    raise UnsupportedFeatureError(msg)


def read_categorical(node: Node, read: Read) -> Column:
    """Read a ``categorical`` group; codes of any signed integer type, −1 for missing."""
    ordered = node.attributes.get("ordered")
    if not isinstance(ordered, bool | np.bool_):
        msg = f"{node.path}: a categorical needs a boolean attribute 'ordered', found {ordered!r}"
        raise FormatError(msg)
    codes = read(node.path / "codes")
    categories = read(node.path / "categories")
    if not isinstance(codes, Dense) or codes.kind != "array" or codes.values.dtype.kind != "i":
        msg = f"{node.path}/codes: expected signed integer codes, found {_describe(codes)}"
        raise FormatError(msg)
    if not isinstance(categories, Dense) or has_missing_category(categories):
        found = "a missing value or NaN" if isinstance(categories, Dense) else "a categorical"
        msg = (
            f"{node.path}/categories: expected categories without missing values, found "
            f"{found}; pandas and anndata allow none (a missing value is a code of -1): "
            "rewrite the column"
        )
        raise FormatError(msg)
    n = len(categories)
    if len(np.unique(categories.array)) != n:
        msg = f"{node.path}/categories: the categories must be unique, found repeated values"
        raise FormatError(msg)
    values = codes.array
    if len(values) and (values.min() < -1 or values.max() >= n):
        msg = f"{node.path}/codes: codes must lie in [-1, {n}) for {n} categories"
        raise FormatError(msg)
    return Categorical(values, categories, bool(ordered))


def read_nullable_integer(node: Node, read: Read) -> Column:
    """Read a ``nullable-integer`` group."""
    values, mask = _read_values_and_mask(node, read, "iu")
    return Dense("nullable-integer", values, mask)


def read_nullable_boolean(node: Node, read: Read) -> Column:
    """Read a ``nullable-boolean`` group."""
    values, mask = _read_values_and_mask(node, read, "b")
    return Dense("nullable-boolean", values, mask)


def read_nullable_string(node: Node, read: Read) -> Column:
    """Read a ``nullable-string-array`` group, with or without anndata 0.13's ``na-value``."""
    values, mask = _read_values_and_mask(node, read, "OTU")
    na_value = node.attributes.get("na-value", "NA")
    if na_value not in ("NA", "NaN"):
        msg = f"{node.path}: attribute 'na-value' must be 'NA' or 'NaN', found {na_value!r}"
        raise FormatError(msg)
    return Dense("nullable-string", values, mask, na_value=na_value)


def _read_values_and_mask(
    node: Node, read: Read, kinds: str
) -> tuple[np.ndarray | LazyRows | _s.StringRows, np.ndarray]:
    values = read(node.path / "values")
    mask = read(node.path / "mask")
    if (
        not isinstance(values, Dense)
        or values.mask is not None
        or values.values.dtype.kind not in kinds
    ):
        msg = f"{node.path}/values: expected values of kind {kinds!r}, found {_describe(values)}"
        raise FormatError(msg)
    if not isinstance(mask, Dense) or mask.values.dtype != np.bool_:
        msg = f"{node.path}/mask: expected a bool array, found {_describe(mask)}"
        raise FormatError(msg)
    if len(mask) != len(values):
        msg = f"{node.path}: values has {len(values)} elements but mask has {len(mask)}"
        raise FormatError(msg)
    return values.values, mask.array


def _read_datetime(node: Node, values: np.ndarray, extra: Any) -> Dense:
    if extra is None:
        return Dense("datetime", values)
    kind = _check_extra(node, extra, "datetime", "date")
    if kind == "date":
        return Dense("date", values.astype("datetime64[D]"))
    zone = extra.get("time_zone")
    if zone is not None and not isinstance(zone, str):
        msg = f"{node.path}: time_zone in {DTYPE_ATTRIBUTE} must be a string, found {zone!r}"
        raise FormatError(msg)
    if zone == "":  # no zone: pandas failed on it, polars and pyarrow read UTC or naive times
        msg = (
            f"{node.path}: time_zone in {DTYPE_ATTRIBUTE} must name a zone (such as "
            f"'Europe/Berlin', 'UTC' or '+05:30'), found {zone!r}; the stored times are UTC: "
            "correct the attribute, or remove it to read them as naive UTC times"
        )
        raise FormatError(msg)
    return Dense("datetime", values, time_zone=zone)


def _fixed_length(node: Node, values: np.ndarray) -> np.ndarray:
    """Durations ``values`` unless their unit is months or years, which have no fixed length
    (numpy converts them with an average, pandas as dates: UnsupportedFeatureError)."""
    unit, _ = np.datetime_data(values.dtype)
    if unit in ("M", "Y"):
        msg = (
            f"{node.path}: column {node.path.name!r} holds durations in unit {unit!r} "
            f"({values.dtype}), which cytepool tables do not read: months and years have no "
            "fixed length; store the durations in days or a finer unit"
        )
        raise UnsupportedFeatureError(msg)
    return values


def _check_extra(node: Node, extra: Any, *allowed: str) -> str:
    kind = extra.get("type") if isinstance(extra, dict) else None
    if kind not in allowed:
        expected = " or ".join(repr(a) for a in allowed)
        msg = (
            f"{node.path}: attribute {DTYPE_ATTRIBUTE} must be an object with type {expected} for "
            f"data type {node.array.dtype if node.array is not None else '?'}, found {extra!r}"
        )
        raise FormatError(msg)
    return str(kind)


def _need_array(node: Node) -> ZarrArray:
    if node.array is None:
        msg = f"{node.path}: expected an array, found a group"
        raise FormatError(msg)
    if node.array.ndim != 1:
        msg = f"{node.path}: a table column must be 1-D, found shape {node.array.shape}"
        raise FormatError(msg)
    return node.array


def _describe(column: Column) -> str:
    if isinstance(column, Categorical):
        return "a categorical"
    return f"{column.kind} of data type {column.values.dtype}"
