"""Canonical per-part digests of a cube and the fingerprint built from them.

A cube's fingerprint is a BLAKE3 hash (256 bits) that depends on its content only: the three
tables, the cell numbers, the normalization, the layer names, their data types and their values. It
does not depend on memory layout, byte order, the table backend (pandas, polars, pyarrow),
chunking, compression or whether a layer is lazy. It is built from per-part digests -- one
per table, one for the cells, one for the normalization and one per (layer, group) -- so a
cube file can store them, give the fingerprint without reading its layers and verify each
group when it is read whole. The byte encodings are specified in ``docs/cube.md``.

Every digest is made with one hash algorithm, :data:`BLAKE3` (cube files of format 1.2 and
every cube in memory), or :data:`SHA256` (cube files of formats 1.0 and 1.1, which are read
and verified as they were written): the same canonical bytes, another hash. A fingerprint
says which algorithm made it: ``"blake3:"`` and 64 hex digits, or the 64 hex digits alone
for SHA-256 (as files of formats 1.0 and 1.1 store it). BLAKE3 hashes large inputs with the
GIL released, so groups are hashed on the threads that decode them.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from cytepool._records import HEX
from cytepool._utf8 import (
    Utf8Buffer,
    encode,
    gathered,
    move_by_size,
    not_unicode,
    size_runs,
    windows,
)
from cytepool.errors import FormatError, InputError, InputTypeError, check_keys

if TYPE_CHECKING:
    from cytepool._records import Normalization

__all__ = [
    "ALGORITHMS",
    "BLAKE3",
    "LAYER_DTYPES",
    "SHA256",
    "TABLE_NAMES",
    "Digests",
    "cells_digest",
    "column_digest",
    "columns_digest",
    "combined_digest",
    "group_digest",
    "normalization_digest",
    "positive_zeros",
    "table_digest",
]

#: The data types a layer may have, by name.
LAYER_DTYPES: Mapping[str, np.dtype[Any]] = {
    name: np.dtype(name) for name in ("int32", "int64", "uint32", "uint64", "float32", "float64")
}
# Each layer data type, in either byte order, to the native one: numpy's ``dtype.name`` is slow
# enough to count when a small block is read.
_NATIVE = {dt.newbyteorder(order): dt for dt in LAYER_DTYPES.values() for order in ("<", ">")}

#: The hash algorithm of every digest made in memory and of cube files of format 1.2.
BLAKE3 = "blake3"
#: The hash algorithm of the digests of cube files of formats 1.0 and 1.1.
SHA256 = "sha256"
#: The hash algorithms a digest may be made with.
ALGORITHMS = (BLAKE3, SHA256)

#: The names of the three tables, in the order the fingerprint uses them.
TABLE_NAMES = ("samples", "groups", "features")

_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_TIME_UNITS = ("s", "ms", "us", "ns")
_PIECE_BYTES = 1 << 20
_PIECE_ROWS = 1 << 16
_MIN_DAY = _dt.date.min.toordinal() - _EPOCH_ORDINAL
_MAX_DAY = _dt.date.max.toordinal() - _EPOCH_ORDINAL


def hasher(algorithm: str, tag: bytes) -> Any:
    """A new hash object of ``algorithm`` (:data:`ALGORITHMS`) that has hashed ``tag``.

    Raises
    ------
    ValueError
        If ``algorithm`` is not one of :data:`ALGORITHMS`.
    """
    if algorithm == BLAKE3:
        from blake3 import blake3  # releases the GIL while it hashes a large input

        return blake3(tag)
    if algorithm == SHA256:
        return hashlib.sha256(tag)
    msg = f"digests: the hash algorithm must be one of {list(ALGORITHMS)}, found {algorithm!r}"
    raise InputError(msg)


def _raw(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The bytes of a C-contiguous array, as a flat uint8 view (what every hash accepts)."""
    return array.reshape(-1).view(np.uint8)


def _u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def prefixed_text(value: str) -> bytes:
    data = value.encode("utf-8")
    return _u64(len(data)) + data


_HASHED_NAMES = {dt: prefixed_text(name) for name, dt in LAYER_DTYPES.items()}  # native: hashed


# --------------------------------------------------------------------------- layers, cells


def layer_dtype(dtype: Any, *, what: str = "layer") -> np.dtype[Any]:
    """Return ``dtype`` as a native numpy dtype if a layer may have it, else raise TypeError."""
    try:
        found = np.dtype(dtype)
    except TypeError:
        found = None
    native = None if found is None else _NATIVE.get(found)
    if native is None:
        msg = f"{what}: expected a data type among {', '.join(LAYER_DTYPES)}, found {dtype!r}"
        raise InputTypeError(msg)
    return native


def positive_zeros(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A copy of the floats ``values`` with ``-0.0`` made ``+0.0`` (adding 0), the one form
    of a zero the canonical encodings hold. A signalling NaN, which a damaged or hostile file
    may hold, comes out quiet, without numpy's "invalid value" warning: every NaN is a
    missing value or an error to the callers.

    Examples
    --------
    >>> import numpy as np
    >>> positive_zeros(np.array([-0.0, 1.5])).tolist(), np.signbit(positive_zeros(np.array([-0.0])))
    ([0.0, 1.5], array([False]))
    >>> signalling = np.array([0x7F800001], dtype=np.uint32).view(np.float32)
    >>> bool(np.isnan(positive_zeros(signalling))[0])
    True
    """
    with np.errstate(invalid="ignore"):
        return values + values.dtype.type(0)


def group_digest(
    dtype: Any,
    block: Any,
    algorithm: str = BLAKE3,
    *,
    each: Callable[[np.ndarray[Any, Any]], object] | None = None,
) -> str:
    """Digest of one group of a layer: its samples x features matrix.

    Parameters
    ----------
    dtype
        The layer's data type (int32, int64, uint32, uint64, float32 or float64).
    block
        A 2-D array ``(n_samples, n_features)`` of that data type, in any byte order or
        memory layout.
    algorithm
        The hash algorithm: :data:`BLAKE3` (the default) or :data:`SHA256` (cube files of
        formats 1.0 and 1.1).
    each
        Called with each band of rows of ``block`` (2-D, as given, about 1 MiB) right after
        the band is hashed, while it is still in the processor's cache, so that a check of
        the values finds them there instead of reading the block from memory again (see
        :meth:`cytepool.layers.ArrayLayer.read_all`). The bands cover ``block`` in order.

    Returns
    -------
    str
        The lowercase hex hash (256 bits) of the canonical encoding (see ``docs/cube.md``).

    Raises
    ------
    TypeError
        If ``dtype`` is not a layer data type or ``block`` has another data type.
    ValueError
        If ``block`` is not 2-D.

    Examples
    --------
    >>> import numpy as np
    >>> from cytepool.fingerprint import group_digest
    >>> a = np.array([[1, 2], [3, 4]], dtype="int32")
    >>> group_digest("int32", a) == group_digest("int32", np.asfortranarray(a))
    True
    >>> group_digest("int32", a) == group_digest("int64", a.astype("int64"))
    False
    """
    dt = layer_dtype(dtype)
    arr = np.asarray(block)
    if arr.ndim != 2:
        msg = f"group block: expected a 2-D (samples, features) array, found shape {arr.shape}"
        raise InputError(msg)
    if arr.dtype.newbyteorder("=") != dt:
        msg = f"group block: expected data type {dt.name}, found {arr.dtype}"
        raise InputTypeError(msg)
    h = hasher(algorithm, b"cytepool.group/1\0")
    h.update(_HASHED_NAMES[dt] + _u64(arr.shape[0]) + _u64(arr.shape[1]))
    canonical = dt.kind != "f" and arr.flags.c_contiguous and arr.dtype == dt.newbyteorder("<")
    if canonical and each is None:
        h.update(_raw(arr))  # its bytes are the canonical encoding: hashed in one call
        return str(h.hexdigest())
    rows = max(1, _PIECE_BYTES // max(1, arr.shape[1] * dt.itemsize))
    for start in range(0, arr.shape[0], rows):  # in pieces: little memory beyond the block
        band = arr[start : start + rows]
        if canonical:
            h.update(_raw(band))
        else:
            piece = positive_zeros(band) if dt.kind == "f" else band
            h.update(_raw(np.ascontiguousarray(piece, dtype=dt.newbyteorder("<"))))
        if each is not None:
            each(band)
    return str(h.hexdigest())


def cells_digest(cells: Any, algorithm: str = BLAKE3) -> str:
    """Digest of the cell numbers, an integer array ``(n_groups, n_samples)``.

    The values are encoded as int64, whatever the integer type given.

    Raises
    ------
    TypeError
        If ``cells`` is not an integer array.
    ValueError
        If ``cells`` is not 2-D or holds a value int64 cannot hold.

    Examples
    --------
    >>> import numpy as np
    >>> from cytepool.fingerprint import cells_digest
    >>> cells_digest(np.array([[1, 0]], dtype="int32")) == cells_digest([[1, 0]])
    True
    """
    arr = np.asarray(cells)
    if arr.dtype.kind not in "iu":
        msg = f"cells: expected an integer array, found data type {arr.dtype}"
        raise InputTypeError(msg)
    if arr.ndim != 2:
        msg = f"cells: expected a 2-D (groups, samples) array, found shape {arr.shape}"
        raise InputError(msg)
    if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
        msg = "cells: a value does not fit int64"
        raise InputError(msg)
    data = np.ascontiguousarray(arr, dtype="<i8")
    h = hasher(algorithm, b"cytepool.cells/1\0")
    h.update(_u64(arr.shape[0]) + _u64(arr.shape[1]))
    h.update(_raw(data))
    return str(h.hexdigest())


def normalization_digest(normalization: Normalization | None, algorithm: str = BLAKE3) -> str:
    """Digest of a normalization (or of its absence, ``None``).

    Examples
    --------
    >>> import numpy as np
    >>> from cytepool import Normalization
    >>> from cytepool.fingerprint import normalization_digest
    >>> n = Normalization("size_factors", np.ones((2, 3)))
    >>> normalization_digest(n) != normalization_digest(None)
    True
    """
    h = hasher(algorithm, b"cytepool.normalization/1\0")
    if normalization is None:
        h.update(b"\0")
        return str(h.hexdigest())
    factors = positive_zeros(np.ascontiguousarray(normalization.factors, dtype="<f8"))
    h.update(b"\1" + prefixed_text(normalization.method))
    h.update(_u64(factors.shape[0]) + _u64(factors.shape[1]))
    h.update(_raw(np.ascontiguousarray(factors, dtype="<f8")))
    return str(h.hexdigest())


# --------------------------------------------------------------------------- tables


def _as_stored(values: Utf8Buffer, width: int) -> np.ndarray[Any, Any] | None:
    """The canonical encoding of string values with ``width``-byte lengths, if the buffer holds
    it already: a reader's vlen-utf8 items (:meth:`~cytepool._utf8.Utf8Buffer.prefixed`)."""
    return values.prefixed() if width == 4 else None


def _prefixed_size(values: Utf8Buffer, width: int) -> int:
    """The number of bytes of the canonical encoding of string values (:func:`_prefixed_rows`)."""
    n = len(values)
    prefixed = _as_stored(values, width)
    if prefixed is not None:
        return len(prefixed)
    return width * n + (int(values.offsets[-1] - values.offsets[0]) if n else 0)


def _prefixed_rows(values: Utf8Buffer, width: int) -> Iterator[memoryview]:
    """The canonical encoding of string values: each row as its byte count, a little-endian
    integer of ``width`` bytes (8: ``text``; 4: the form of a column digest, which is how a
    vlen-utf8 chunk stores strings), then its bytes; in pieces of at most ``_PIECE_ROWS``
    rows, built with numpy from the bytes where they are
    (:meth:`~cytepool._utf8.Utf8Buffer.located`), or, for strings a reader kept as a chunk
    holds them (:meth:`~cytepool._utf8.Utf8Buffer.prefixed`), those bytes themselves."""
    prefixed = _as_stored(values, width)
    if prefixed is not None:
        yield memoryview(prefixed)
        return
    sizes = values.sizes()
    for start in range(0, len(sizes), _PIECE_ROWS):
        stop = min(start + _PIECE_ROWS, len(sizes))
        source, starts, gap = values.located(slice(start, stop))
        yield memoryview(_length_prefixed(source, starts, sizes[start:stop], gap, width))


def _prefixed_record(size: int, width: int) -> np.dtype[Any]:
    """A packed record of a little-endian unsigned ``size`` of ``width`` bytes and ``size``
    bytes."""
    return np.dtype(
        {"names": ["size", "bytes"], "formats": [f"<u{width}", f"V{size}"], "offsets": [0, width]}
    )


def _length_prefixed(
    source: np.ndarray[Any, Any],
    starts: np.ndarray[Any, Any],
    sizes: np.ndarray[Any, Any],
    gap: int,
    width: int = 8,
) -> Any:
    """Each row's size as a little-endian unsigned integer of ``width`` bytes followed by its
    bytes, for all rows: row ``i`` is ``sizes[i]`` bytes of ``source`` from ``starts[i]``, and
    ``gap`` bytes lie between one row and the next (0: back to back; 4: a vlen-utf8 chunk's
    length fields).

    Rows in runs of one size (fixed-width ids, ids numbered in order) are written a run at a
    time as the records of a structured array (a size field, then the bytes as one field: numpy
    copies a record field as one piece, far faster than a narrow 2-D block); rows of sizes that
    change often are moved a size at a time (:func:`~cytepool._utf8.move_by_size`), or, of
    many sizes, placed with a mask."""
    n = len(sizes)
    out = np.empty(width * n + int(sizes.sum()), dtype=np.uint8)
    runs = size_runs(sizes)
    if runs is not None:
        at = 0
        for start, stop in runs:
            size, count = int(sizes[start]), stop - start
            block = out[at : at + count * (width + size)]
            if size:
                records = block.view(_prefixed_record(size, width))
                records["size"] = sizes[start:stop]
                records["bytes"] = np.ndarray(
                    (count,), f"V{size}", source, int(starts[start]), (size + gap,)
                )
            else:
                block.view(f"<u{width}")[:] = 0
            at += block.size
        return out
    places = np.cumsum(sizes) - sizes + width * np.arange(1, n + 1)  # each row's bytes in out
    if move_by_size(source, starts, sizes, out, places):
        windows(out, f"<u{width}")[places - width] = sizes
        return out
    prefixes = sizes.astype(f"<u{width}").view(np.uint8)
    counts = np.empty(2 * n, dtype=np.int64)
    counts[0::2] = width
    counts[1::2] = sizes
    is_prefix = np.repeat(np.tile([True, False], n), counts)
    out[is_prefix] = prefixes
    out[~is_prefix] = _back_to_back(source, starts, sizes, gap)
    return out


def _back_to_back(
    source: np.ndarray[Any, Any],
    starts: np.ndarray[Any, Any],
    sizes: np.ndarray[Any, Any],
    gap: int,
) -> np.ndarray[Any, Any]:
    """The bytes of the rows (see :func:`_length_prefixed`) back to back."""
    total = int(sizes.sum())
    if not gap or not total:
        first = int(starts[0]) if len(starts) else 0
        return source[first : first + total]
    return gathered(source, starts, sizes)


@dataclass(frozen=True)
class CanonicalColumn:
    """A column in canonical form: a type tag, a null mask and one value per row.

    ``values`` is a little-endian fixed-width numpy array (null rows hold 0) or, for the
    ``string`` tag, :class:`Utf8Buffer` (null rows are empty).
    """

    name: str
    tag: str
    mask: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any] | Utf8Buffer

    def encoded(self, width: int = 8) -> Iterator[bytes | memoryview]:
        """The canonical bytes of the column (see ``docs/cube.md``), in pieces: each string
        value after its byte count as a little-endian integer of ``width`` bytes (8: the
        table digests of formats 1.0 and 1.1; 4: a column digest)."""
        bits = np.packbits(self.mask.astype(np.uint8), bitorder="little").tobytes()
        head = prefixed_text(self.name) + prefixed_text(self.tag) + bits
        if isinstance(self.values, Utf8Buffer):  # also the values of a categorical[string]
            yield head + _u64(_prefixed_size(self.values, width))
            yield from _prefixed_rows(self.values, width)
        else:
            payload = np.ascontiguousarray(self.values).tobytes()
            yield head + _u64(len(payload)) + payload

    def encode(self) -> bytes:
        """The canonical bytes of the column (see ``docs/cube.md``)."""
        return b"".join(self.encoded())

    def row_keys(self) -> list[Any]:
        """One hashable, comparable key per row (None for a null)."""
        if isinstance(self.values, Utf8Buffer):
            vals: list[Any] = self.values.to_list()
        else:
            vals = self.values.tolist()
        return [None if m else v for m, v in zip(self.mask.tolist(), vals, strict=True)]


def _dtype_tag(dtype: Any) -> str | None:
    """The tag of a simple narwhals dtype, or None."""
    import narwhals.stable.v2 as nw

    simple = {
        nw.Boolean: "bool",
        nw.Int8: "int8",
        nw.Int16: "int16",
        nw.Int32: "int32",
        nw.Int64: "int64",
        nw.UInt8: "uint8",
        nw.UInt16: "uint16",
        nw.UInt32: "uint32",
        nw.UInt64: "uint64",
        nw.Float16: "float16",
        nw.Float32: "float32",
        nw.Float64: "float64",
        nw.String: "string",
        nw.Date: "date",
    }
    for kind, tag in simple.items():
        if dtype == kind:
            return tag
    return None


def _unsupported(name: str, dtype: Any) -> TypeError:
    msg = (
        f"table column {name!r}: data type {dtype} is not supported; expected booleans, "
        "integers, floats, strings, categoricals, dates, datetimes or durations"
    )
    return InputTypeError(msg)


def _type_name(s: Any, dtype: Any) -> Any:
    """narwhals' name of the data type of ``s``, or, for one narwhals calls Unknown (numpy's
    complex numbers, say), the backend's own name of it (``complex128``)."""
    import narwhals.stable.v2 as nw

    if dtype != nw.Unknown:
        return dtype
    native = s.to_native()
    return getattr(native, "dtype", None) or getattr(native, "type", None) or dtype


def canonical_column(series: Any, name: str | None = None) -> CanonicalColumn:
    """Return a narwhals (or native) series in canonical form.

    Raises TypeError naming the column for a data type the fingerprint does not cover.
    """
    import narwhals.stable.v2 as nw

    from cytepool.io.tables.backends import series_dtype

    s = nw.from_native(series, series_only=True, allow_series=True)
    name = str(s.name) if name is None else name
    dtype = series_dtype(s)
    if dtype == nw.Categorical or dtype == nw.Enum:
        inner, extra = _decode_categorical(s)
        col = canonical_column(inner, name)
        mask = col.mask | extra
        return CanonicalColumn(name, f"categorical[{col.tag}]", mask, _blanked(col.values, mask))
    mask = np.asarray(s.is_null().to_numpy(), dtype=bool)
    if dtype == nw.Datetime or dtype == nw.Duration:
        return _temporal(s, dtype, name, mask)
    if dtype == nw.Object:
        return _object_column(s, name, mask)
    tag = _dtype_tag(dtype)
    if tag is None:
        raise _unsupported(name, _type_name(s, dtype))
    if tag == "string":
        return CanonicalColumn(name, "string", mask, _string_values(s, name, mask))
    if tag == "date":
        return CanonicalColumn(name, "date", mask, _date_values(s, name, mask))
    fill: Any = False if tag == "bool" else 0
    if tag == "float16":  # pyarrow 18 makes no float16 scalar to fill with: float32 holds them
        s = s.cast(nw.Float32())
    values = np.asarray(s.fill_null(fill).to_numpy())
    if tag == "bool":
        values = values.astype(np.uint8)
    else:
        values = values.astype(np.dtype(tag).newbyteorder("<"))
    if tag.startswith("float"):
        mask = mask | np.isnan(values)
        values = positive_zeros(values)
    values[mask] = 0
    return CanonicalColumn(name, tag, mask, values)


def _blanked(
    values: np.ndarray[Any, Any] | Utf8Buffer, mask: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any] | Utf8Buffer:
    """The values with the rows in ``mask`` set to the null value (0 or empty)."""
    if isinstance(values, Utf8Buffer):
        return values.blank(mask)
    out = values.copy()
    out[mask] = 0
    return out


def _object_values(s: Any) -> np.ndarray[Any, Any]:
    """The values of a series as a 1-D object array of Python objects."""
    values = np.asarray(s.to_numpy())
    if values.dtype == object and values.ndim == 1:
        return values
    return np.fromiter(s.to_list(), dtype=object, count=len(s))


def _string_values(s: Any, name: str, mask: np.ndarray[Any, Any]) -> Utf8Buffer:
    """The values of a string column: from its Arrow buffers if it has them, else from str."""
    arrow = _arrow_strings(s)
    if arrow is not None:
        return _utf8_from_arrow(arrow, name, mask, s.dtype)
    return _utf8_from_objects(_object_values(s), name, mask, s.dtype)


def _arrow_strings(s: Any) -> Any:
    """The column as a pyarrow Array if it is Arrow-backed (pyarrow, polars, pandas), or None."""
    impl = s.implementation
    if impl.is_pandas():
        import pandas as pd

        dtype = s.to_native().dtype
        storage = str(getattr(dtype, "storage", ""))  # StringDtype: "python" or "pyarrow"
        if not isinstance(dtype, pd.ArrowDtype) and not storage.startswith("pyarrow"):
            return None
    elif impl.is_polars():
        try:
            import pyarrow  # noqa: F401  (polars needs it for to_arrow)
        except ImportError:  # pragma: no cover - the polars extra installs pyarrow
            return None
    elif not impl.is_pyarrow():
        return None
    return s.to_arrow()


def _utf8_from_arrow(array: Any, name: str, mask: np.ndarray[Any, Any], dtype: Any) -> Utf8Buffer:
    """Values from a pyarrow string Array (any offset width or view), by its buffers."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    nulls = np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if (nulls & ~mask).any():  # pragma: no cover - narwhals' null mask is Arrow's
        raise _unsupported(name, f"{dtype} holding NoneType")
    return Utf8Buffer.from_arrow(array).blank(mask)


def _utf8_from_objects(
    items: np.ndarray[Any, Any], name: str, mask: np.ndarray[Any, Any], dtype: Any
) -> Utf8Buffer:
    """Values from an object array holding str (or anything at the null rows)."""
    present = items[~mask]
    try:
        encoded = encode(present.tolist())
    except TypeError:
        found = next(type(v).__name__ for v in present if not isinstance(v, str))
        raise _unsupported(name, f"{dtype} holding {found}") from None
    except UnicodeEncodeError:
        raise not_unicode(present.tolist(), f"column {name!r}", np.flatnonzero(~mask)) from None
    sizes = np.zeros(len(items), dtype=np.int64)
    sizes[~mask] = encoded.sizes
    return Utf8Buffer.from_sizes(sizes, encoded.data())


def _date_values(s: Any, name: str, mask: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Days since 1970-01-01 (int32, 0 at the null rows) of a Date column."""
    raw = np.asarray(s.to_numpy())
    if raw.dtype == np.dtype("datetime64[D]"):
        days = np.where(mask, 0, raw.view(np.int64))
        if days.size == 0 or (days.min() >= _MIN_DAY and days.max() <= _MAX_DAY):
            return days.astype("<i4")
    return _days_from_objects(_object_values(s), name, mask, s.dtype)


def _days_from_objects(
    items: np.ndarray[Any, Any], name: str, mask: np.ndarray[Any, Any], dtype: Any
) -> np.ndarray[Any, Any]:
    """Days since 1970-01-01 from an object array holding datetime.date (not datetime)."""
    present = items[~mask]
    if any(_not_a_date(kind) for kind in set(map(type, present))):
        found = next(type(v).__name__ for v in present if _not_a_date(type(v)))
        raise _unsupported(name, f"{dtype} holding {found}")
    out = np.zeros(len(items), dtype="<i4")
    ordinals = np.fromiter(map(_dt.date.toordinal, present), dtype=np.int64, count=len(present))
    out[~mask] = ordinals - _EPOCH_ORDINAL
    return out


def _not_a_date(kind: type) -> bool:
    return not issubclass(kind, _dt.date) or issubclass(kind, _dt.datetime)


def _object_column(s: Any, name: str, mask: np.ndarray[Any, Any]) -> CanonicalColumn:
    items = _object_values(s)
    kinds = set(map(type, items[~mask]))
    if all(issubclass(kind, str) for kind in kinds):  # also when every row is null
        return CanonicalColumn(name, "string", mask, _utf8_from_objects(items, name, mask, s.dtype))
    if not any(_not_a_date(kind) for kind in kinds):
        return CanonicalColumn(name, "date", mask, _days_from_objects(items, name, mask, s.dtype))
    names = sorted({kind.__name__ for kind in kinds})
    raise _unsupported(name, f"Object holding {', '.join(names)}")


def _temporal(s: Any, dtype: Any, name: str, mask: np.ndarray[Any, Any]) -> CanonicalColumn:
    import narwhals.stable.v2 as nw

    unit = dtype.time_unit
    if unit not in _TIME_UNITS:  # pragma: no cover - narwhals knows only these
        raise _unsupported(name, dtype)
    if dtype == nw.Datetime:
        tz = dtype.time_zone
        if tz is not None and s.dtype == nw.Unknown:  # a pandas zone narwhals cannot parse
            native = s.to_native().dt.tz_convert("UTC").dt.tz_localize(None)
            s = nw.from_native(native, series_only=True)
        elif tz is not None:
            s = s.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
        tag = f"datetime[{unit}]" if tz is None else f"datetime[{unit},{tz}]"
        raw = np.asarray(s.to_numpy()).astype(f"datetime64[{unit}]")
    else:
        tag = f"duration[{unit}]"
        raw = np.asarray(s.to_numpy()).astype(f"timedelta64[{unit}]")
    values = raw.view(np.int64).astype("<i8")
    mask = mask | np.isnat(raw)
    values[mask] = 0
    return CanonicalColumn(name, tag, mask, values)


def _decode_categorical(s: Any) -> tuple[Any, np.ndarray[Any, Any]]:
    """The values of a categorical series in the type of its categories, and a null mask."""
    import narwhals.stable.v2 as nw

    from cytepool.io.tables.backends import arrow_of, is_arrow_dictionary

    impl = s.implementation
    native = s.to_native()
    n = len(s)
    if impl.is_pandas_like() and is_arrow_dictionary(native.dtype):
        return _decode_categorical(nw.from_native(arrow_of(native), series_only=True))
    if impl.is_pandas_like():
        cats = native.cat.categories
        codes = np.asarray(native.cat.codes.to_numpy())
        if len(cats):
            inner = native.__class__(cats.take(np.where(codes < 0, 0, codes)), name=native.name)
        else:  # no categories, so no type: every value is missing, counted as strings
            inner = native.__class__([None] * n, dtype=object, name=native.name)
        return nw.from_native(inner, series_only=True), codes < 0
    if impl.is_pyarrow():
        import pyarrow as pa

        value_type = native.type.value_type
        chunks = [c.dictionary_decode() for c in native.chunks]
        inner = pa.chunked_array(chunks, type=value_type)
        return nw.from_native(inner, series_only=True), np.zeros(n, dtype=bool)
    return s.cast(nw.String()), np.zeros(n, dtype=bool)


def canonical_table(frame: Any) -> list[CanonicalColumn]:
    """The columns of an eager frame in canonical form; a named pandas index comes first."""
    import narwhals.stable.v2 as nw

    df = nw.from_native(frame, eager_only=True)
    columns: list[CanonicalColumn] = []
    if df.implementation.is_pandas_like():
        native = df.to_native()
        index = native.index
        if getattr(index, "nlevels", 1) != 1:
            msg = "table: a pandas MultiIndex is not supported; reset it into columns"
            raise InputTypeError(msg)
        if index.name is not None:
            iname = index.name
            if not isinstance(iname, str):
                msg = f"table: column names must be strings, found index name {iname!r}"
                raise InputTypeError(msg)
            columns.append(canonical_column(index.to_series(), iname))
    for name in df.columns:
        if not isinstance(name, str):
            msg = f"table: column names must be strings, found {name!r}"
            raise InputTypeError(msg)
        columns.append(canonical_column(df.get_column(name), name))
    return columns


def table_digest(frame: Any, algorithm: str = BLAKE3) -> str:
    """Digest of a table: any eager frame narwhals supports.

    A named pandas index counts as the first column (so a pandas table indexed by
    ``sample_id`` has the digest of a polars table whose first column is ``sample_id``);
    an unnamed index is ignored. The digest depends on the column names and order, each
    column's logical type and values, and the row order -- not on the backend or on how a
    backend stores missing values. Floating-point NaN counts as missing.

    Parameters
    ----------
    frame
        A pandas, polars or pyarrow table (or a narwhals DataFrame).
    algorithm
        The hash algorithm: :data:`BLAKE3` (the default) or :data:`SHA256` (cube files of
        formats 1.0 and 1.1).

    Returns
    -------
    str
        The lowercase hex hash (256 bits) of the canonical encoding (see ``docs/cube.md``).

    Raises
    ------
    TypeError
        If a column has a type the digest does not cover (nested, binary, mixed objects),
        naming the column.

    Examples
    --------
    >>> import pandas as pd
    >>> import polars as pl
    >>> from cytepool.fingerprint import table_digest
    >>> a = pd.DataFrame({"donor": ["d1", None]}, index=pd.Index(["s1", "s2"], name="sample_id"))
    >>> b = pl.DataFrame({"sample_id": ["s1", "s2"], "donor": ["d1", None]})
    >>> table_digest(a) == table_digest(b)
    True
    """
    import narwhals.stable.v2 as nw

    columns = canonical_table(frame)
    return columns_digest(len(nw.from_native(frame, eager_only=True)), columns, algorithm)


def columns_digest(n_rows: int, columns: Sequence[CanonicalColumn], algorithm: str = BLAKE3) -> str:
    """The table digest of ``n_rows`` rows held as these canonical columns, in this order.

    With BLAKE3, the digest of the columns' :func:`column_digest` values
    (:func:`combined_digest`), so that a cube file can verify each column alone; with SHA-256
    (files of formats 1.0 and 1.1), the hash of the columns' canonical bytes one after another.
    """
    if algorithm == BLAKE3:
        return combined_digest(n_rows, [column_digest(n_rows, column) for column in columns])
    h = hasher(algorithm, b"cytepool.table/1\0")
    h.update(_u64(n_rows) + _u64(len(columns)))
    for column in columns:
        for piece in column.encoded():
            h.update(piece)
    return str(h.hexdigest())


def column_digest(n_rows: int, column: CanonicalColumn) -> str:
    """The BLAKE3 digest of one column of a table of ``n_rows`` rows (see ``docs/cube.md``):
    its string values each after a 4-byte length, as vlen-utf8 stores them, so that a column
    read from a cube file is hashed as stored, without parsing it."""
    h = hasher(BLAKE3, b"cytepool.column/2\0")
    h.update(_u64(n_rows))
    for piece in column.encoded(4):
        h.update(piece)
    return str(h.hexdigest())


def combined_digest(n_rows: int, digests: Sequence[str]) -> str:
    """The BLAKE3 table digest of a table of ``n_rows`` rows whose columns, in order, have the
    :func:`column_digest` values ``digests`` (InputError if one is not 64 hex digits).

    Examples
    --------
    >>> combined_digest(0, []) == combined_digest(1, [])
    False
    """
    h = hasher(BLAKE3, b"cytepool.table/2\0")
    h.update(_u64(n_rows) + _u64(len(digests)))
    for digest in digests:
        h.update(bytes.fromhex(_check_hex(digest, "a column digest")))
    return str(h.hexdigest())


# --------------------------------------------------------------------------- digests


def _check_hex(value: Any, what: str) -> str:
    if not isinstance(value, str) or not HEX.fullmatch(value):
        msg = f"digests: {what} must be 64 lowercase hex digits, found {value!r}"
        raise InputError(msg)
    return value


@dataclass(frozen=True)
class Digests:
    """The per-part digests of a cube, from which its fingerprint is built.

    Parameters
    ----------
    tables
        The digest of each table, keyed ``"samples"``, ``"groups"`` and ``"features"``.
    cells
        The digest of the cell numbers.
    normalization
        The digest of the normalization (or of its absence).
    layers
        For each layer, the digests of its groups in order; ``None`` for a digest not known
        yet (a lazy group not read).
    dtypes
        The data type name of each layer.
    algorithm
        The hash algorithm every digest was made with: :data:`BLAKE3` (the default) or
        :data:`SHA256` (cube files of formats 1.0 and 1.1).

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool import Cube
    >>> from cytepool._assemble import parts_of
    >>> cube = Cube(
    ...     {"counts": np.ones((1, 2, 3), dtype="int32")},
    ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
    ...     groups=pd.DataFrame({"group_id": ["T"]}),
    ...     features=pd.DataFrame({"feature_id": ["a", "b", "c"]}),
    ...     cells=[[1, 1]],
    ... )
    >>> d = parts_of(cube).digests()
    >>> d.fingerprint() == cube.fingerprint
    True
    >>> type(d).from_json(d.to_json()) == d
    True
    """

    tables: dict[str, str]
    cells: str
    normalization: str
    layers: dict[str, tuple[str | None, ...]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    algorithm: str = BLAKE3
    _made: tuple[Any, str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            msg = (
                f"digests: the algorithm must be one of {list(ALGORITHMS)}, "
                f"found {self.algorithm!r}"
            )
            raise InputError(msg)
        tables = dict(self.tables)
        if sorted(tables) != sorted(TABLE_NAMES):
            msg = f"digests: expected tables {list(TABLE_NAMES)}, found {sorted(tables)}"
            raise InputError(msg)
        for key, value in tables.items():
            _check_hex(value, f"table {key!r}")
        _check_hex(self.cells, "cells")
        _check_hex(self.normalization, "normalization")
        layers = {str(k): tuple(v) for k, v in self.layers.items()}
        dtypes = dict(self.dtypes)
        if sorted(layers) != sorted(dtypes):
            msg = (
                f"digests: the layers {sorted(layers)} and the layers with a data type "
                f"{sorted(dtypes)} differ"
            )
            raise InputError(msg)
        for name, groups in layers.items():
            for i, digest in enumerate(groups):
                if digest is not None:
                    _check_hex(digest, f"layer {name!r} group {i}")
            if dtypes[name] not in LAYER_DTYPES:
                msg = f"digests: layer {name!r} has data type {dtypes[name]!r}, not a layer type"
                raise InputError(msg)
        if len({len(v) for v in layers.values()}) > 1:
            msg = "digests: the layers have different numbers of groups"
            raise InputError(msg)
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "dtypes", dtypes)

    @property
    def complete(self) -> bool:
        """Whether every group digest is known."""
        return all(v is not None for groups in self.layers.values() for v in groups)

    def fingerprint(self) -> str:
        """The cube's fingerprint: a hash of the part digests (see ``docs/cube.md``).

        ``"blake3:"`` and 64 lowercase hex digits; for SHA-256 digests (cube files of formats
        1.0 and 1.1), the 64 hex digits alone, as those files store it.

        Raises
        ------
        ValueError
            If a group digest is not known.
        """
        if not self.complete:
            missing = [
                f"{name!r} group {i}"
                for name, groups in self.layers.items()
                for i, v in enumerate(groups)
                if v is None
            ]
            msg = f"digests: the fingerprint needs every group digest; missing {missing[:5]}"
            raise InputError(msg)
        state = self._state()
        if self._made is None or self._made[0] != state:  # made once for what they hold
            object.__setattr__(self, "_made", (state, self._made_fingerprint()))
        return cast("tuple[Any, str]", self._made)[1]

    def _state(self) -> tuple[Any, ...]:
        """What the fingerprint is made of, to tell a fingerprint made before from one to
        make again (a caller may have changed the dicts the digests hold)."""
        layers = tuple((name, tuple(groups)) for name, groups in self.layers.items())
        tables = tuple(self.tables.items())
        return tables, self.cells, self.normalization, layers, tuple(self.dtypes.items())

    def _made_fingerprint(self) -> str:
        h = hasher(self.algorithm, b"cytepool.fingerprint/1\0")
        for name in TABLE_NAMES:
            h.update(bytes.fromhex(self.tables[name]))
        h.update(bytes.fromhex(self.cells) + bytes.fromhex(self.normalization))
        names = sorted(self.layers, key=lambda n: n.encode("utf-8"))
        h.update(_u64(len(names)))
        for name in names:
            groups = self.layers[name]
            h.update(prefixed_text(name) + prefixed_text(self.dtypes[name]) + _u64(len(groups)))
            for value in groups:
                h.update(bytes.fromhex(value or ""))
        found = str(h.hexdigest())
        return found if self.algorithm == SHA256 else f"{self.algorithm}:{found}"

    def to_json(self) -> dict[str, Any]:
        """The digests as a JSON-serialisable dict (unknown group digests are null).

        The algorithm is named (``"algorithm"``) unless it is SHA-256, which formats 1.0 and
        1.1 store without naming it.
        """
        named = {} if self.algorithm == SHA256 else {"algorithm": self.algorithm}
        return named | {
            "tables": {name: self.tables[name] for name in TABLE_NAMES},
            "cells": self.cells,
            "normalization": self.normalization,
            "layers": {name: list(groups) for name, groups in self.layers.items()},
            "dtypes": dict(self.dtypes),
        }

    @classmethod
    def from_json(cls, data: Any) -> Digests:
        """Digests from the dict :meth:`to_json` gives (SHA-256 digests if it names none).

        Raises
        ------
        FormatError
            If ``data`` is not such a dict (a ValueError).
        """
        keys = {"tables", "cells", "normalization", "layers", "dtypes"}
        named = isinstance(data, Mapping) and "algorithm" in data
        check_keys("digests", data, keys | {"algorithm"} if named else keys)
        try:
            for key in ("tables", "layers", "dtypes"):
                if not isinstance(data[key], Mapping):
                    msg = f"digests: {key!r} must be an object, found {data[key]!r}"
                    raise InputError(msg)
            layers = {}
            for name, groups in data["layers"].items():
                if not isinstance(groups, Sequence) or isinstance(groups, str):
                    msg = f"digests: layer {name!r} must be a list, found {groups!r}"
                    raise InputError(msg)
                layers[name] = tuple(groups)
            return cls(
                tables=dict(data["tables"]),
                cells=data["cells"],
                normalization=data["normalization"],
                layers=layers,
                dtypes=dict(data["dtypes"]),
                algorithm=data["algorithm"] if named else SHA256,
            )
        except (TypeError, ValueError) as err:
            if isinstance(err, FormatError):
                raise
            raise FormatError(str(err)) from err
