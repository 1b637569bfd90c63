"""One representation of many strings: their UTF-8 bytes back to back and where each ends.

This is Arrow's string layout (``offsets``: n + 1 positions into ``data``), used by the Zarr
``vlen-utf8`` codec to encode chunks, by the table serialisers to write and read string
columns without a Python ``str`` per row, and by the fingerprint to hash string columns.
:func:`encode` turns ``str`` values into UTF-8 in one call (joined by NUL, split with numpy),
and :class:`Utf8Buffer` holds, slices, blanks, joins and converts the buffers.

Examples
--------
>>> import numpy as np
>>> from cytepool._utf8 import Utf8Buffer
>>> buffer = Utf8Buffer.from_str(["ab", "", "é"])
>>> buffer.offsets.tolist(), buffer.data.tobytes()
([0, 2, 2, 4], b'ab\\xc3\\xa9')
>>> buffer.blank(np.array([True, False, False])).to_list()
[b'', b'', b'\\xc3\\xa9']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, TypeAlias

import numpy as np

from cytepool.errors import InputError

__all__ = [
    "Encoded",
    "Located",
    "Piece",
    "SpacedUtf8Buffer",
    "Utf8Buffer",
    "categories_not_unicode",
    "encode",
    "gathered",
    "is_unicode",
    "move_by_size",
    "not_unicode",
    "offsets_dtype",
    "size_runs",
    "windows",
]

INT32_MAX = np.iinfo(np.int32).max
_ALL = slice(None)
Piece: TypeAlias = "tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]"
"""Items as their byte lengths and their bytes back to back."""
Located: TypeAlias = "tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]"
"""Items in a uint8 array: the array, each item's first byte in it and the bytes between one
item and the next (see :meth:`Utf8Buffer.located`)."""


@dataclass(frozen=True)
class Encoded:
    """``str`` values in UTF-8: ``raw`` holds the items back to back, joined by one NUL byte
    each if ``separated`` (so that no copy is made to drop them), and ``sizes`` their lengths."""

    raw: np.ndarray[Any, Any]
    sizes: np.ndarray[Any, Any]
    separated: bool

    def data(self) -> np.ndarray[Any, Any]:
        """The items' bytes back to back, without separators."""
        if not self.separated or len(self.sizes) < 2:
            return self.raw
        return self.raw[self.raw != 0]


def encode(values: Sequence[str]) -> Encoded:
    """The UTF-8 of ``str`` values, encoded once.

    The values are joined with NUL separators and encoded in one call; the separators are
    found with numpy, and only when a value holds a NUL is each value encoded on its own.
    Raises TypeError if a value is not a ``str``, and the UnicodeEncodeError of the first
    value holding a lone surrogate.
    """
    strings = values if isinstance(values, list) else list(values)
    n = len(strings)
    raw = np.frombuffer(_encoded("\0".join(strings), strings), dtype=np.uint8)
    if n:
        separators = np.flatnonzero(raw == 0)
        if len(separators) == n - 1:  # no value holds a NUL: the usual case
            bounds = np.concatenate([[-1], separators, [len(raw)]])
            return Encoded(raw, np.diff(bounds) - 1, True)
    encoded = [s.encode("utf-8") for s in strings]
    sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    return Encoded(np.frombuffer(b"".join(encoded), dtype=np.uint8), sizes, False)


def _encoded(text: str, strings: Sequence[str]) -> bytes:
    """``text`` in UTF-8; for a lone surrogate, the error of the value holding it."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        for value in strings:
            value.encode("utf-8")
        raise  # pragma: no cover - a value raised above


def not_unicode(
    values: Sequence[str], what: str, rows: Any = None, item: str = "row"
) -> InputError:
    """The InputError naming ``what`` for the first of ``values`` that is not valid Unicode
    (it holds a lone surrogate, as ``os.fsdecode`` makes of bytes that are not UTF-8), with
    its ``item`` (a row, a cell) ``rows[i]`` (by default ``i``, a sequence of positions).

    Examples
    --------
    >>> print(not_unicode(["a", "b\\udcff"], "samples: column 'file'"))
    samples: column 'file': row 1 holds 'b\\udcff', which is not valid Unicode (it holds a lone surrogate); expected valid Unicode strings: decode such names with errors='replace', or fix them
    """  # noqa: E501
    i = next(i for i, value in enumerate(values) if not is_unicode(value))
    row = i if rows is None else int(rows[i])
    msg = (
        f"{what}: {item} {row} holds {values[i]!r}, which is not valid Unicode (it holds a "
        "lone surrogate); expected valid Unicode strings: decode such names with "
        "errors='replace', or fix them"
    )
    return InputError(msg)


def categories_not_unicode(name: str) -> str:
    """The message for column ``name``, a categorical whose categories hold a string with a
    lone surrogate (found when pandas 2 hashes them, before any value is read)."""
    return (
        f"column {name!r} holds a string with a lone surrogate (in its categories); strings "
        "must be valid Unicode (no lone surrogates): fix or drop it"
    )


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode: it encodes to UTF-8 (no lone surrogate).

    >>> is_unicode("é"), is_unicode("a\\ud800")
    (True, False)
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Utf8Buffer:
    """Strings as UTF-8 buffers: ``offsets`` (n + 1 int32 or int64) into ``data`` (uint8).

    A missing value, if any, is held as ``""``; its mask is kept by whoever knows it.
    """

    def __init__(self, offsets: np.ndarray[Any, Any], data: np.ndarray[Any, Any]):
        self.offsets = offsets
        self.data = data

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def located(self, rows: slice | np.ndarray[Any, Any] = _ALL) -> Located:
        """Where the bytes of the items at ``rows`` (a slice or positions) are: a uint8 array,
        the position of each item's first byte in it (int64) and the bytes between one item
        and the next (0 here: the items are back to back)."""
        return self.data, self.offsets[:-1][rows].astype(np.int64), 0

    def prefixed(self) -> np.ndarray[Any, Any] | None:
        """Each item as its byte length (a little-endian uint32) and its bytes, if the buffer
        holds them so (None here)."""
        return None

    def check(self) -> None:
        """Check that every item is valid UTF-8 (here: checked when the buffer was made)."""

    def item(self, row: int) -> bytes:
        """The bytes of item ``row``."""
        source, (start,), _ = self.located(np.array([row]))
        return source[start : start + int(self.sizes_at(np.array([row]))[0])].tobytes()

    def uniform_size(self) -> int | None:
        """The byte length every item has, if the buffer knows it without measuring each item
        (None here; see :class:`SpacedUtf8Buffer`)."""
        return None

    @classmethod
    def from_sizes(cls, sizes: np.ndarray[Any, Any], data: np.ndarray[Any, Any]) -> Utf8Buffer:
        """The buffer of items of byte lengths ``sizes`` whose bytes are ``data``, back to back."""
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return cls(offsets, data)

    @classmethod
    def from_str(cls, values: Sequence[str]) -> Utf8Buffer:
        """The buffer of ``str`` values (see :func:`encode`)."""
        encoded = encode(values)
        return cls.from_sizes(encoded.sizes, encoded.data())

    @classmethod
    def from_arrow(cls, array: Any) -> Utf8Buffer:
        """The buffers of a pyarrow string, large_string or string_view array (or a chunked
        one), taken without a copy where they can be; missing values become ``""``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
        if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
            array = array.cast(pa.large_string())
        if array.null_count:
            array = pc.fill_null(array, "")
        n = len(array)
        offset_dtype = np.int32 if pa.types.is_string(array.type) else np.int64
        _, offsets, data = array.buffers()
        if offsets is None:  # an empty array may have no buffers
            return cls(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.uint8))
        positions = np.frombuffer(offsets, dtype=offset_dtype)[array.offset : array.offset + n + 1]
        values = np.zeros(0, np.uint8) if data is None else np.frombuffer(data, dtype=np.uint8)
        return cls(positions, values)

    @classmethod
    def from_parts(
        cls, parts: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]
    ) -> Utf8Buffer:
        """The buffer of pieces ``(sizes, data)`` in order; ``parts`` is emptied as the
        pieces are copied, so that each is freed once copied (the data of a single piece, a
        uint8 array that owns its bytes, is taken over, not copied)."""
        n = sum(len(sizes) for sizes, _ in parts)
        size = sum(len(body) for _, body in parts)
        offsets = np.empty(n + 1, dtype=offsets_dtype(size))
        single = len(parts) == 1 and _is_bytes(parts[0][1])
        data = parts[0][1] if single else np.empty(size, dtype=np.uint8)
        offsets[0] = row = position = 0
        parts.reverse()
        while parts:
            sizes, body = parts.pop()
            stop = row + len(sizes)
            segment = offsets[row + 1 : stop + 1]
            np.cumsum(sizes, out=segment)
            np.add(segment, position, out=segment)
            if not single:
                data[position : position + len(body)] = body
            row, position = stop, position + len(body)
        return cls(offsets, data)

    def take(self, rows: np.ndarray[Any, Any]) -> Utf8Buffer:
        """The buffer of the items at ``rows`` (positions), in that order; gathered with numpy.

        >>> Utf8Buffer.from_str(["ab", "", "é"]).take(np.array([2, 0, 2])).to_str()
        ['é', 'ab', 'é']
        """
        sizes = self.sizes_at(rows)
        source, starts, _ = self.located(rows)
        return Utf8Buffer.from_sizes(sizes, gathered(source, starts, sizes))

    def sizes(self) -> np.ndarray[Any, Any]:
        """The byte length of each item (int64)."""
        return np.diff(self.offsets).astype(np.int64, copy=False)

    def sizes_at(self, rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The byte length of the items at ``rows`` (positions of any integer type; int64)."""
        offsets, rows = self.offsets, np.asarray(rows, dtype=np.intp)  # int8 + 1 would wrap
        return (offsets[rows + 1] - offsets[rows]).astype(np.int64, copy=False)

    def utf8(self, start: int, stop: int) -> Piece:
        """The byte length of each item in ``[start, stop)`` and their bytes back to back."""
        offsets = self.offsets[start : stop + 1]
        if not len(offsets):
            return np.zeros(0, dtype=np.int64), self.data[:0]
        return np.diff(offsets), self.data[offsets[0] : offsets[-1]]

    def blank(self, mask: np.ndarray[Any, Any]) -> Utf8Buffer:
        """The buffer with the items in ``mask`` made empty."""
        if not mask.any():
            return self
        sizes = self.sizes()
        if not sizes[mask].any():
            return self
        base = int(self.offsets[0]) if len(self) else 0
        data = self.data[base : base + int(sizes.sum())]
        return Utf8Buffer.from_sizes(np.where(mask, 0, sizes), data[np.repeat(~mask, sizes)])

    def to_list(self) -> list[bytes]:
        """One ``bytes`` per item."""
        data = self.data.tobytes()
        return [data[a:b] for a, b in pairwise(self.offsets.tolist())]

    def to_str(self) -> list[str]:
        """One ``str`` per item, for items each valid UTF-8 (as every reader here checks).

        The items are joined with a NUL before each, decoded once and split in C; items that
        hold a NUL themselves are decoded one by one.
        """
        n = len(self)
        first, last = (int(self.offsets[0]), int(self.offsets[-1])) if n else (0, 0)
        data = self.data[first:last]
        if np.count_nonzero(data) != len(data):
            return [item.decode("utf-8") for item in self.to_list()]
        separators = self.offsets[:-1] - first + np.arange(n)
        joined = np.zeros(len(data) + n, dtype=np.uint8)
        keep = np.ones(len(joined), dtype=bool)
        keep[separators] = False
        joined[keep] = data
        return str(joined.data, "utf-8").split("\0")[1:]

    def to_arrow(self, mask: np.ndarray[Any, Any] | None = None, *, large: bool = False) -> Any:
        """A pyarrow ``string`` array (``large_string`` beyond 2 GiB, or if ``large``: what
        pandas keeps its strings in), null where ``mask``."""
        import pyarrow as pa

        n = len(self)
        base = int(self.offsets[0]) if n else 0
        end = int(self.offsets[-1]) if n else 0
        data = self.data[base:end]
        offsets = self.offsets - base if base else self.offsets
        if large or end - base > INT32_MAX:
            kind, offsets = pa.large_string(), offsets.astype(np.int64, copy=False)
        else:
            kind, offsets = pa.string(), offsets.astype(np.int32, copy=False)
        validity, nulls = None, 0
        if mask is not None and mask.any():
            validity = pa.py_buffer(np.packbits(~mask, bitorder="little"))
            nulls = int(mask.sum())
        buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
        return pa.Array.from_buffers(kind, n, buffers, null_count=nulls)


class SpacedUtf8Buffer(Utf8Buffer):
    """A :class:`Utf8Buffer` whose ``n`` items are still where a reader found them, each after
    its byte length as a little-endian uint32 (the items of a vlen-utf8 chunk).

    A reader keeps a string column so when what it needs first is the column's digest: that
    hashes the items as they are (:meth:`prefixed`, the form a cube file's column digests
    take), so a column that is only verified is neither parsed nor copied. The lengths come
    from ``lengths`` (an array, or a function that parses them, with every check of the
    chunk's layout, when first needed; items of one size need neither: see
    :meth:`uniform_size`); ``data``, the items back to back, comes from
    ``join(lengths)`` (which checks the UTF-8) when first asked for. :meth:`located`,
    :meth:`item` and :meth:`take` give the bytes as stored, their UTF-8 not checked: call
    :meth:`check` first where that matters (ids).

    Examples
    --------
    >>> items = [len(s).to_bytes(4, "little") + s for s in (b"ab", b"cde")]
    >>> stored = np.frombuffer(b"".join(items), dtype=np.uint8)
    >>> joined = lambda lengths: np.frombuffer(b"abcde", dtype=np.uint8)
    >>> buffer = SpacedUtf8Buffer(stored, 2, lambda: np.array([2, 3]), joined)
    >>> buffer.prefixed() is stored, len(buffer)
    (True, 2)
    >>> buffer.located()[1].tolist(), buffer.item(1), buffer.take(np.array([1, 0])).to_list()
    ([4, 10], b'cde', [b'cde', b'ab'])
    >>> buffer.to_list(), buffer.prefixed()
    ([b'ab', b'cde'], None)
    """

    def __init__(
        self,
        spaced: np.ndarray[Any, Any],
        n: int,
        lengths: np.ndarray[Any, Any] | Callable[[], np.ndarray[Any, Any]],
        join: Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]],
    ):
        self._spaced: np.ndarray[Any, Any] | None = spaced
        self._n = n
        self._lengths: np.ndarray[Any, Any] | Callable[[], np.ndarray[Any, Any]] | None = lengths
        self._join: Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]] | None = join
        self._offsets: np.ndarray[Any, Any] | None = None
        self._joined: np.ndarray[Any, Any] | None = None
        self._uniform: int | None = _UNCHECKED

    def __len__(self) -> int:
        return self._n

    def uniform_size(self) -> int | None:
        """The byte length every item has, if every length field, read where it is stored,
        gives the same one and the items fill the stored bytes exactly; else None. Checked
        once, with numpy and no copy, before the lengths are parsed: it proves the layout the
        parser checks, so ids of one length (Ensembl gene ids, say) are never parsed."""
        if self._uniform == _UNCHECKED:
            spaced = self._spaced  # None once joined; offsets made: measured already
            if spaced is None or self._offsets is not None:
                self._uniform = None
            else:
                self._uniform = _one_size(spaced, self._n)
        return self._uniform

    def sizes_at(self, rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """:meth:`Utf8Buffer.sizes_at`, with no offsets made for items of one size."""
        size = self.uniform_size()
        if size is None:
            return super().sizes_at(rows)
        return np.full(len(rows), size, dtype=np.int64)

    @property
    def offsets(self) -> np.ndarray[Any, Any]:
        """Where each item ends in ``data``, from the lengths (parsed when first needed, unless
        the items have one size)."""
        offsets, found = self._offsets, self._lengths
        if offsets is None and found is not None:
            size = self.uniform_size()
            if size is None:
                offsets = _ends(found() if callable(found) else found)
            else:  # evenly spaced: no lengths needed
                offsets = np.arange(self._n + 1, dtype=offsets_dtype(self._n * size)) * size
            self._offsets, self._lengths = offsets, None  # the lengths (and a parser) let go
        elif offsets is None:  # another thread made them meanwhile
            offsets = self._offsets
        assert offsets is not None  # internal invariant: set before the lengths are let go
        return offsets

    @offsets.setter
    def offsets(self, offsets: np.ndarray[Any, Any]) -> None:
        self._offsets = offsets

    @property
    def data(self) -> np.ndarray[Any, Any]:
        """The items back to back, joined on first use (then the spaced bytes are let go)."""
        joined, join = self._joined, self._join
        if joined is None and join is not None:
            self.data = joined = join(self.sizes())
        elif joined is None:  # another thread joined meanwhile
            joined = self._joined
        assert joined is not None  # internal invariant: set before the join is let go
        return joined

    @data.setter
    def data(self, joined: np.ndarray[Any, Any]) -> None:  # the stored bytes let go
        self._joined, self._spaced, self._join = joined, None, None

    def prefixed(self) -> np.ndarray[Any, Any] | None:
        """Each item as its byte length (a little-endian uint32) and its bytes, as stored; None
        once joined."""
        return self._spaced

    def check(self) -> None:
        """Check that every item is valid UTF-8 (the error of ``join``), without joining
        items that are ASCII (no byte, length fields included, of 0x80 or more)."""
        spaced = self._spaced
        if spaced is None or spaced.max(initial=0) >= 0x80:
            self.data  # noqa: B018 -- joining checks them

    def located(self, rows: slice | np.ndarray[Any, Any] = _ALL) -> Located:
        spaced = self._spaced  # read once: another thread may join meanwhile
        if spaced is None:
            return super().located(rows)
        if isinstance(rows, slice):
            places = np.arange(*rows.indices(len(self)), dtype=np.int64)
        else:
            places = np.asarray(rows, dtype=np.int64)
        size = self.uniform_size()
        if size is not None:  # evenly spaced: no offsets needed
            return spaced, places * (size + 4) + 4, 4
        return spaced, self.offsets[:-1][rows] + 4 * (places + 1), 4


_UNCHECKED = -1  # not yet known whether the items have one size


def offsets_dtype(total: int) -> type[np.integer[Any]]:
    """The type of the offsets of items of ``total`` bytes in all: int32 where they fit."""
    return np.int32 if total <= INT32_MAX else np.int64


def _ends(lengths: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The offsets of items of byte lengths ``lengths``."""
    offsets = np.zeros(len(lengths) + 1, dtype=offsets_dtype(int(lengths.sum())))
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _one_size(spaced: np.ndarray[Any, Any], n: int) -> int | None:
    """The size of every item of ``spaced`` (``n`` items, each after its uint32 length field),
    if they have one and fill it exactly; else None."""
    if not n or len(spaced) < 4:
        return None
    size = int(spaced[:4].view("<u4")[0])
    if n * (4 + size) != len(spaced):
        return None
    fields = np.ndarray((n,), dtype="<u4", buffer=spaced, strides=(4 + size,))
    return size if bool((fields == size).all()) else None


def gathered(
    source: np.ndarray[Any, Any], starts: np.ndarray[Any, Any], sizes: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """The bytes of items (item ``i``: ``sizes[i]`` bytes of the uint8 array ``source`` from
    ``starts[i]``) back to back, gathered with numpy.

    Examples
    --------
    >>> source = np.frombuffer(b"..ab...cde", dtype=np.uint8)
    >>> gathered(source, np.array([7, 2]), np.array([3, 2])).tobytes()
    b'cdeab'
    """
    firsts = np.cumsum(sizes) - sizes  # of each item in the result
    total = int(sizes.sum())
    return source[np.repeat(starts - firsts, sizes) + np.arange(total, dtype=np.int64)]


def size_runs(sizes: np.ndarray[Any, Any], least: int = 64) -> list[tuple[int, int]] | None:
    """The runs ``(start, stop)`` of items of one size, if there are few: at least ``least``
    items each on average (fixed-width ids, ids numbered in order), to be copied a run at a
    time as 2-D blocks; else None (sizes that change often).

    Examples
    --------
    >>> size_runs(np.array([5] * 100 + [6] * 100))
    [(0, 100), (100, 200)]
    >>> size_runs(np.array([5, 6] * 100)) is None
    True
    >>> size_runs(np.array([], dtype=np.int64))
    []
    """
    n = len(sizes)
    if not n:
        return []
    cuts = np.flatnonzero(sizes[1:] != sizes[:-1]) + 1
    if len(cuts) + 1 > max(1, n // least):
        return None
    return list(pairwise([0, *cuts.tolist(), n]))


def windows(data: np.ndarray[Any, Any], dtype: Any) -> np.ndarray[Any, Any]:
    """Every run of ``dtype``'s size in bytes of the uint8 array ``data``, as one element each
    (a byte-strided view: items of that size anywhere in ``data`` are read or written by their
    start).

    Examples
    --------
    >>> windows(np.frombuffer(b"abcd", dtype=np.uint8), "V2")[[0, 2]].tolist()
    [b'ab', b'cd']
    """
    dtype = np.dtype(dtype)
    shape = (max(len(data) - dtype.itemsize + 1, 0),)
    return np.ndarray(shape, dtype=dtype, buffer=data, strides=(1,))


_MOST_SIZES = 32  # beyond as many distinct item sizes, a caller places the items with a mask


def move_by_size(
    source: np.ndarray[Any, Any],
    starts: np.ndarray[Any, Any],
    sizes: np.ndarray[Any, Any],
    out: np.ndarray[Any, Any],
    places: np.ndarray[Any, Any],
) -> bool:
    """Copy item ``i`` (``sizes[i]`` bytes of the uint8 array ``source`` from ``starts[i]``) to
    ``out`` at ``places[i]``, the items of each size at once, each as one numpy void element
    of byte-strided views; False (nothing copied) if the items have more than ``_MOST_SIZES``
    sizes. Items of sizes that change from one to the next (gene symbols) are copied so far
    faster than bytes picked by a mask.

    Examples
    --------
    >>> source = np.frombuffer(b"abcdefgh", dtype=np.uint8)
    >>> out = np.zeros(10, dtype=np.uint8)
    >>> move_by_size(source, np.array([0, 2, 5]), np.array([2, 3, 3]), out, np.array([0, 3, 7]))
    True
    >>> out.tobytes()
    b'ab\\x00cde\\x00fgh'
    """
    counted = np.bincount(sizes) if len(sizes) else sizes
    found = np.flatnonzero(counted)
    if len(found) > _MOST_SIZES:
        return False
    for size in found.tolist():
        if not size:
            continue
        rows = np.flatnonzero(sizes == size) if len(found) > 1 else slice(None)
        windows(out, f"V{size}")[places[rows]] = windows(source, f"V{size}")[starts[rows]]
    return True


def _is_bytes(array: np.ndarray[Any, Any]) -> bool:
    """Whether ``array`` is a 1-D uint8 array that owns its bytes (kept as a buffer's data: a
    view of a larger array would keep all of it alive)."""
    return array.dtype == np.uint8 and array.ndim == 1 and array.base is None
