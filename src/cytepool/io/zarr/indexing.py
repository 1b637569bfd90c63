"""Chunk-grid arithmetic without I/O: selections become per-chunk pieces.

A selection gives each axis an integer, a slice, or (orthogonal indexing) a 1-D integer array
or boolean mask. Each axis is turned into an indexer that yields :class:`AxisPiece` records
(chunk index along the axis, selection inside that chunk, positions in the output); the pieces
of all axes are combined by a Cartesian product into :class:`ChunkPiece` records. Chunk keys of
the ``default`` and ``v2`` encodings are made here too.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import numpy as np

__all__ = [
    "ArrayAxis",
    "AxisPiece",
    "ChunkPiece",
    "IntAxis",
    "Selection",
    "SliceAxis",
    "as_index",
    "chunk_key",
    "grid_shape",
    "parse_selection",
]

AxisSel: TypeAlias = "slice | np.ndarray[Any, np.dtype[np.intp]]"


class AxisPiece(NamedTuple):
    """One chunk's part of an axis selection."""

    chunk: int
    chunk_sel: AxisSel
    out_sel: AxisSel


class ChunkPiece(NamedTuple):
    """One chunk's part of a selection: its grid coordinates and the two selections."""

    coords: tuple[int, ...]
    chunk_sel: tuple[AxisSel, ...]
    out_sel: tuple[AxisSel, ...]

    def is_full(self, chunk_shape: Sequence[int]) -> bool:
        """Whether the piece selects the whole chunk, in order."""
        return all(
            isinstance(s, slice) and s.start == 0 and s.stop == n and s.step == 1
            for s, n in zip(self.chunk_sel, chunk_shape, strict=True)
        )


@dataclass(frozen=True)
class IntAxis:
    """An integer index: one position, whose axis is dropped from the result."""

    index: int

    @property
    def size(self) -> int:
        """The number of selected positions."""
        return 1

    def pieces(self, chunk: int) -> list[AxisPiece]:
        """The pieces along an axis of chunk length ``chunk``."""
        offset = self.index % chunk
        return [AxisPiece(self.index // chunk, slice(offset, offset + 1, 1), slice(0, 1, 1))]


@dataclass(frozen=True)
class SliceAxis:
    """A slice with a positive step, its bounds already resolved."""

    start: int
    stop: int
    step: int

    @property
    def size(self) -> int:
        """The number of selected positions."""
        return len(range(self.start, self.stop, self.step))

    def pieces(self, chunk: int) -> list[AxisPiece]:
        """The pieces along an axis of chunk length ``chunk``."""
        if self.size == 0:
            return []
        if self.step >= chunk:
            return _points(np.arange(self.start, self.stop, self.step), chunk)
        last = self.start + (self.size - 1) * self.step
        chunks = range(self.start // chunk, last // chunk + 1)
        if self.step == 1:
            return [self._contiguous(c, chunk) for c in chunks]
        return [piece for c in chunks if (piece := self._piece(c, chunk)) is not None]

    def _contiguous(self, c: int, chunk: int) -> AxisPiece:
        low = c * chunk
        first, end = max(low, self.start), min(low + chunk, self.stop)
        out = first - self.start
        return AxisPiece(c, slice(first - low, end - low, 1), slice(out, out + end - first, 1))

    def _piece(self, c: int, chunk: int) -> AxisPiece | None:
        low, high = c * chunk, min((c + 1) * chunk, self.stop)
        first = self.start + max(0, _ceil_div(low - self.start, self.step)) * self.step
        if first >= high:
            return None
        count = _ceil_div(high - first, self.step)
        out = (first - self.start) // self.step
        inner = slice(first - low, first - low + (count - 1) * self.step + 1, self.step)
        return AxisPiece(c, inner, slice(out, out + count, 1))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, eq=False)
class ArrayAxis:
    """Positions in any order, with repeats, already made non-negative and checked."""

    positions: np.ndarray[Any, np.dtype[np.intp]]

    @property
    def size(self) -> int:
        """The number of selected positions."""
        return len(self.positions)

    def pieces(self, chunk: int) -> list[AxisPiece]:
        """The pieces along an axis of chunk length ``chunk``."""
        return _points(self.positions, chunk)


def _points(positions: np.ndarray[Any, Any], chunk: int) -> list[AxisPiece]:
    """Group positions by chunk; contiguous runs become slices."""
    if len(positions) == 0:
        return []
    chunk_ids = positions // chunk
    order = np.argsort(chunk_ids, kind="stable")
    ids = chunk_ids[order]
    starts = np.flatnonzero(np.diff(ids)) + 1
    pieces = []
    for group in np.split(order, starts):
        c = int(chunk_ids[group[0]])
        inner = positions[group] - c * chunk
        pieces.append(AxisPiece(c, _as_slice(inner), _as_slice(group)))
    return pieces


def _as_slice(values: np.ndarray[Any, Any]) -> AxisSel:
    first = int(values[0])
    if len(values) == 1 or bool(np.all(np.diff(values) == 1)):
        return slice(first, first + len(values), 1)
    return values.astype(np.intp)


Axis: TypeAlias = "IntAxis | SliceAxis | ArrayAxis"


@dataclass(frozen=True, eq=False)
class Selection:
    """A parsed selection: one indexer per axis, and whether the result is a scalar."""

    axes: tuple[Axis, ...]
    scalar: bool

    @property
    def full_shape(self) -> tuple[int, ...]:
        """The result shape with a length-1 axis for each integer index."""
        return tuple(axis.size for axis in self.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        """The result shape (integer-indexed axes dropped)."""
        return tuple(axis.size for axis in self.axes if not isinstance(axis, IntAxis))

    def pieces(self, chunks: Sequence[int]) -> Iterator[ChunkPiece]:
        """The chunk pieces, in C order of the chunk grid."""
        per_axis = [axis.pieces(c) for axis, c in zip(self.axes, chunks, strict=True)]
        for combination in itertools.product(*per_axis):
            coords, chunk_sel, out_sel = (
                zip(*combination, strict=True) if combination else ((),) * 3
            )
            yield ChunkPiece(coords, chunk_sel, out_sel)


def parse_selection(key: Any, shape: Sequence[int], *, orthogonal: bool) -> Selection:
    """Parse an indexing key against an array shape.

    Parameters
    ----------
    key
        What ``array[key]`` (``orthogonal=False``: integers, slices, one ellipsis) or
        ``array.oindex[key]`` (``orthogonal=True``: also 1-D integer arrays and boolean masks,
        as lists or numpy arrays) received.
    shape
        The array's shape.
    orthogonal
        Whether arrays and masks are allowed.

    Returns
    -------
    The parsed selection.

    Raises
    ------
    IndexError
        If the key is invalid or out of range.

    Examples
    --------
    >>> s = parse_selection((1, slice(None, None, 2)), (4, 5), orthogonal=False)
    >>> s.shape, s.scalar
    ((3,), False)
    >>> [p.coords for p in s.pieces((2, 2))]
    [(0, 0), (0, 1), (0, 2)]
    """
    parts = list(key) if isinstance(key, tuple) else [key]
    parts = _expand_ellipsis(parts, len(shape))
    axes = tuple(_parse_axis(part, n, orthogonal) for part, n in zip(parts, shape, strict=True))
    scalar = not any(part is Ellipsis for part in _as_list(key)) and all(
        isinstance(axis, IntAxis) for axis in axes
    )
    return Selection(axes, scalar)


def _as_list(key: Any) -> list[Any]:
    return list(key) if isinstance(key, tuple) else [key]


def _expand_ellipsis(parts: list[Any], ndim: int) -> list[Any]:
    n_ellipsis = sum(part is Ellipsis for part in parts)
    if n_ellipsis > 1:
        msg = "an index can only have a single ellipsis ('...')"
        raise IndexError(msg)
    n_given = len(parts) - n_ellipsis
    if n_given > ndim:
        msg = f"too many indices for array: array is {ndim}-dimensional, but {n_given} were indexed"
        raise IndexError(msg)
    fill = [slice(None)] * (ndim - n_given)
    if n_ellipsis:
        i = next(k for k, part in enumerate(parts) if part is Ellipsis)
        return [*parts[:i], *fill, *parts[i + 1 :]]
    return parts + fill


def _parse_axis(part: Any, n: int, orthogonal: bool) -> Axis:
    if isinstance(part, slice):
        start, stop, step = part.indices(n)
        if step > 0:
            return SliceAxis(start, stop, step)
        return ArrayAxis(np.arange(start, stop, step, dtype=np.intp))
    if _is_integer(part):
        return IntAxis(_check_position(operator.index(part), n))
    if orthogonal and isinstance(part, list | np.ndarray):
        return ArrayAxis(_parse_positions(np.asarray(part), n))
    allowed = "integers, slices (`:`), ellipsis (`...`)"
    if orthogonal:
        allowed += ", 1-D integer arrays and boolean masks"
    msg = f"only {allowed} are valid indices, not {part!r}"
    raise IndexError(msg)


def _is_integer(part: Any) -> bool:
    if isinstance(part, bool | np.bool_):
        return False
    return isinstance(part, int | np.integer)


def _check_position(index: int, n: int) -> int:
    if not -n <= index < n:
        msg = f"index {index} is out of bounds for axis with size {n}"
        raise IndexError(msg)
    return index % n


def _parse_positions(values: np.ndarray[Any, Any], n: int) -> np.ndarray[Any, Any]:
    if values.ndim != 1:
        msg = f"an index array must be 1-D, not {values.ndim}-D"
        raise IndexError(msg)
    if values.dtype == np.bool_:
        if len(values) != n:
            msg = f"boolean index of length {len(values)} does not match axis of length {n}"
            raise IndexError(msg)
        return np.flatnonzero(values).astype(np.intp)
    if len(values) == 0:
        return np.empty(0, dtype=np.intp)
    if values.dtype.kind not in "iu":
        msg = f"an index array must hold integers or booleans, not {values.dtype}"
        raise IndexError(msg)
    low, high = int(values.min()), int(values.max())
    if low < -n or high >= n:
        bad = low if low < -n else high
        msg = f"index {bad} is out of bounds for axis with size {n}"
        raise IndexError(msg)
    positions = values.astype(np.intp)
    return np.where(positions < 0, positions + n, positions)


def as_index(selection: Sequence[AxisSel]) -> tuple[Any, ...]:
    """A numpy index for orthogonal selections (``numpy.ix_`` when 2+ axes take arrays).

    Parameters
    ----------
    selection
        One slice (with explicit bounds) or integer array per axis.

    Returns
    -------
    An index that selects every combination of the positions.

    Examples
    --------
    >>> a = np.arange(12).reshape(3, 4)
    >>> a[as_index((np.array([2, 0]), np.array([1, 3])))]
    array([[ 9, 11],
           [ 1,  3]])
    """
    if sum(not isinstance(s, slice) for s in selection) < 2:
        return tuple(selection)
    ranges = [np.arange(s.start, s.stop, s.step) if isinstance(s, slice) else s for s in selection]
    return np.ix_(*ranges)


def grid_shape(shape: Sequence[int], chunks: Sequence[int]) -> tuple[int, ...]:
    """The number of chunks along each axis.

    Examples
    --------
    >>> grid_shape((10, 0, 3), (4, 1, 3))
    (3, 0, 1)
    """
    return tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))


def chunk_key(coords: Sequence[int], encoding: str, separator: str) -> str:
    """The key of a chunk under the ``default`` or ``v2`` chunk key encoding.

    Parameters
    ----------
    coords
        The chunk's coordinates in the chunk grid.
    encoding
        ``"default"`` or ``"v2"``.
    separator
        ``"/"`` or ``"."``.

    Returns
    -------
    The key, relative to the array's directory.

    Examples
    --------
    >>> chunk_key((0, 2), "default", "/"), chunk_key((0, 2), "default", ".")
    ('c/0/2', 'c.0.2')
    >>> chunk_key((0, 2), "v2", "."), chunk_key((), "v2", "."), chunk_key((), "default", "/")
    ('0.2', '0', 'c')
    """
    if encoding == "v2":
        return separator.join(map(str, coords)) if coords else "0"
    return "".join(["c", *(separator + str(c) for c in coords)])
