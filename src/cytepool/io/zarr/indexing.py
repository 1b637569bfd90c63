"""Chunk-grid arithmetic without I/O: selections become per-chunk pieces.

A selection gives each axis an integer, a slice, or (orthogonal indexing) a 1-D integer array
or boolean mask. Each axis is turned into an indexer whose :class:`AxisPlan` gives, for each
chunk the axis touches, an :class:`AxisPiece` record (chunk index along the axis, selection
inside that chunk, positions in the output), made only when asked for; the pieces of all axes
are combined one at a time, in C order of the chunk grid, into :class:`ChunkPiece` records.
So a plan holds no record per chunk: a read that touches a million chunks holds a few numbers
per axis (for integer arrays, a few per selected position), not a million records. Chunk keys
of the ``default`` and ``v2`` encodings are made here too.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import numpy as np

from cytepool.errors import InputError, InputIndexError, InputTypeError

__all__ = [
    "ArrayAxis",
    "AxisPiece",
    "AxisPlan",
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

    def pieces(self, chunk: int) -> AxisPlan:
        """The pieces along an axis of chunk length ``chunk``."""
        offset = self.index % chunk
        return _OnePiece(
            AxisPiece(self.index // chunk, slice(offset, offset + 1, 1), slice(0, 1, 1))
        )


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

    def pieces(self, chunk: int) -> AxisPlan:
        """The pieces along an axis of chunk length ``chunk``."""
        if self.size == 0:
            return _Points(np.empty(0, dtype=np.intp), chunk)
        if self.step >= chunk:  # one position in each chunk touched
            return _Strided(self, chunk)
        last = self.start + (self.size - 1) * self.step
        # a step shorter than a chunk leaves no chunk between the first and last one untouched
        return _Range(self, chunk, self.start // chunk, last // chunk + 1)

    def piece(self, c: int, chunk: int) -> AxisPiece:
        """The piece in chunk ``c``, which must hold a selected position."""
        if self.step == 1:
            low = c * chunk
            first, end = max(low, self.start), min(low + chunk, self.stop)
            out = first - self.start
            return AxisPiece(c, slice(first - low, end - low, 1), slice(out, out + end - first, 1))
        low, high = c * chunk, min((c + 1) * chunk, self.stop)
        first = self.start + max(0, _ceil_div(low - self.start, self.step)) * self.step
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

    def pieces(self, chunk: int) -> AxisPlan:
        """The pieces along an axis of chunk length ``chunk``."""
        return _Points(self.positions, chunk)


class AxisPlan(Sequence[AxisPiece]):
    """The pieces of one axis, one per chunk it touches in increasing chunk order, each made
    when it is asked for."""

    def chunk(self, i: int) -> int:
        """The chunk index of piece ``i`` (increasing with ``i``)."""
        raise NotImplementedError

    def piece(self, i: int) -> AxisPiece:
        """Piece ``i``, with ``0 <= i < len(self)``."""
        raise NotImplementedError

    def __getitem__(self, i: Any) -> Any:
        if not isinstance(i, int):
            msg = f"an axis plan takes integer indices, not {i!r}"
            raise InputTypeError(msg)
        n = len(self)
        if not -n <= i < n:
            msg = f"piece {i} of {n}"
            raise InputIndexError(msg)
        return self.piece(i % n)


class _OnePiece(AxisPlan):
    def __init__(self, piece: AxisPiece):
        self._piece = piece

    def __len__(self) -> int:
        return 1

    def chunk(self, i: int) -> int:
        return self._piece.chunk

    def piece(self, i: int) -> AxisPiece:
        return self._piece


class _Range(AxisPlan):
    """A slice whose step is shorter than a chunk: chunks ``first`` to ``stop - 1``, all touched."""

    def __init__(self, axis: SliceAxis, chunk: int, first: int, stop: int):
        self._axis, self._chunk, self._first, self._stop = axis, chunk, first, stop

    def __len__(self) -> int:
        return self._stop - self._first

    def chunk(self, i: int) -> int:
        return self._first + i

    def piece(self, i: int) -> AxisPiece:
        return self._axis.piece(self._first + i, self._chunk)


class _Strided(AxisPlan):
    """A slice whose step is at least a chunk: one position in each chunk it touches."""

    def __init__(self, axis: SliceAxis, chunk: int):
        self._axis, self._chunk = axis, chunk

    def __len__(self) -> int:
        return self._axis.size

    def chunk(self, i: int) -> int:
        return (self._axis.start + i * self._axis.step) // self._chunk

    def piece(self, i: int) -> AxisPiece:
        c, offset = divmod(self._axis.start + i * self._axis.step, self._chunk)
        return AxisPiece(c, slice(offset, offset + 1, 1), slice(i, i + 1, 1))


class _Points(AxisPlan):
    """Positions grouped by chunk (stably); contiguous runs become slices.

    Strictly increasing positions (the usual selection) need no sort: the positions in each
    chunk are a run of them, and their place in the result a slice.
    """

    def __init__(self, positions: np.ndarray[Any, Any], chunk: int):
        self._positions, self._size = positions, chunk
        chunk_ids = positions // chunk
        increasing = bool(np.all(positions[1:] > positions[:-1]))
        self._order = None if increasing else np.argsort(chunk_ids, kind="stable")
        ids = chunk_ids if self._order is None else chunk_ids[self._order]
        starts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
        bounds = [0, *starts.tolist(), len(ids)] if len(ids) else [0]
        self._bounds: list[int] = bounds
        self._chunks: list[int] = ids[bounds[:-1]].tolist()

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def chunk(self, i: int) -> int:
        return self._chunks[i]

    def piece(self, i: int) -> AxisPiece:
        start, stop, c = self._bounds[i], self._bounds[i + 1], self._chunks[i]
        if self._order is None:  # a run of increasing positions, contiguous if it spans n
            inner = self._positions[start:stop] - c * self._size
            first, n = int(inner[0]), stop - start
            whole = int(inner[-1]) - first == n - 1
            within = slice(first, first + n, 1) if whole else inner.astype(np.intp, copy=False)
            return AxisPiece(c, within, slice(start, stop, 1))
        group = self._order[start:stop]
        inner = self._positions[group] - c * self._size
        return AxisPiece(c, _as_slice(inner), _as_slice(group))


def _as_slice(values: np.ndarray[Any, Any]) -> AxisSel:
    first, n = int(values[0]), len(values)
    if n == 1 or (int(values[-1]) - first == n - 1 and bool(np.all(np.diff(values) == 1))):
        return slice(first, first + n, 1)  # a run of steps of 1 spans exactly n - 1
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
        """The chunk pieces, in C order of the chunk grid, each made when it is reached."""
        plans = [axis.pieces(c) for axis, c in zip(self.axes, chunks, strict=True)]
        pieces = _kept(plans)
        for index in _odometer([(0, len(plan)) for plan in plans]):
            yield _combine(pieces, index)

    def only_piece(self, chunks: Sequence[int]) -> ChunkPiece | None:
        """The piece of a selection of a whole array that one chunk (of shape ``chunks``)
        holds, made without planning each axis (a small array read whole, a table's column):
        what :meth:`pieces` yields alone; None for any other selection.

        Examples
        --------
        >>> parse_selection(..., (3, 4), orthogonal=False).only_piece((4, 4)).chunk_sel
        (slice(0, 3, 1), slice(0, 4, 1))
        >>> parse_selection(..., (5,), orthogonal=False).only_piece((4,)) is None
        True
        """
        if not self.axes:
            return None
        whole = []
        for axis, chunk in zip(self.axes, chunks, strict=True):
            if type(axis) is not SliceAxis or axis.start or axis.step != 1:
                return None
            if not 0 < axis.stop <= chunk:
                return None
            whole.append(slice(0, axis.stop, 1))
        return ChunkPiece((0,) * len(whole), tuple(whole), tuple(whole))

    def count(self, chunks: Sequence[int]) -> int:
        """The number of chunks (of shape ``chunks``) the selection touches.

        Examples
        --------
        >>> parse_selection((slice(1, 7), 0), (8, 8), orthogonal=False).count((2, 4))
        4
        """
        return math.prod(len(axis.pieces(c)) for axis, c in zip(self.axes, chunks, strict=True))

    def pieces_at(
        self, chunks: Sequence[int], coords: Iterable[tuple[int, ...]]
    ) -> Iterator[ChunkPiece]:
        """The pieces of the chunks at ``coords`` (grid coordinates), in the order given; those
        the selection does not touch are left out.

        Examples
        --------
        >>> s = parse_selection(slice(3, 9), (10,), orthogonal=False)
        >>> [p.out_sel for p in s.pieces_at((4,), [(0,), (2,), (3,)])]
        [(slice(0, 1, 1),), (slice(5, 6, 1),)]
        """
        plans = [axis.pieces(c) for axis, c in zip(self.axes, chunks, strict=True)]
        for where in coords:
            index = [_find(plan, c) for plan, c in zip(plans, where, strict=True)]
            if all(i >= 0 for i in index):
                yield _combine(plans, tuple(index))

    def shards_at(
        self,
        shard_shape: Sequence[int],
        chunks: Sequence[int],
        coords: Iterable[tuple[int, ...]],
    ) -> Iterator[tuple[tuple[int, ...], Iterator[tuple[int, ChunkPiece]]]]:
        """:meth:`shards` for the shards at ``coords`` only, in the order given; those the
        selection does not touch are left out."""
        plans = [axis.pieces(c) for axis, c in zip(self.axes, chunks, strict=True)]
        per_shard = [s // c for s, c in zip(shard_shape, chunks, strict=True)]
        for where in coords:
            runs = tuple(
                _shard_run(plan, shard, k)
                for plan, shard, k in zip(plans, where, per_shard, strict=True)
            )
            if all(first < stop for _, first, stop in runs):
                yield where, _shard_pieces(plans, per_shard, runs)

    def shards(
        self, shard_shape: Sequence[int], chunks: Sequence[int]
    ) -> Iterator[tuple[tuple[int, ...], Iterator[tuple[int, ChunkPiece]]]]:
        """The shards touched, in C order of the shard grid, each with its chunk pieces.

        For each shard: its coordinates, and its pieces in C order with the position of their
        inner chunk in the shard (C order). ``chunks`` is the inner chunk shape, which divides
        ``shard_shape``.
        """
        plans = [axis.pieces(c) for axis, c in zip(self.axes, chunks, strict=True)]
        pieces = _kept(plans)
        per_shard = [s // c for s, c in zip(shard_shape, chunks, strict=True)]
        for runs in _run_product(plans, per_shard, ()):
            coords = tuple(shard for shard, _, _ in runs)
            yield coords, _shard_pieces(pieces, per_shard, runs)


Run: TypeAlias = "tuple[int, int, int]"
KEPT_PIECES = 1024
"""An inner axis of at most this many pieces keeps them while a read walks its plan, since the
walk comes back to them for each position of the outer axes; others make each when reached."""


def _kept(plans: Sequence[AxisPlan]) -> list[Sequence[AxisPiece]]:
    kept: list[Sequence[AxisPiece]] = []
    outer = 1
    for plan in plans:
        kept.append(list(plan) if outer > 1 and len(plan) <= KEPT_PIECES else plan)
        outer *= len(plan)
    return kept


def _odometer(bounds: Sequence[tuple[int, int]]) -> Iterator[tuple[int, ...]]:
    """Every index tuple within ``bounds`` (start, stop per axis), in C order."""
    if any(start >= stop for start, stop in bounds):
        return
    index = [start for start, _ in bounds]
    while True:
        yield tuple(index)
        for axis in reversed(range(len(bounds))):
            index[axis] += 1
            if index[axis] < bounds[axis][1]:
                break
            index[axis] = bounds[axis][0]
        else:
            return


def _combine(plans: Sequence[Sequence[AxisPiece]], index: tuple[int, ...]) -> ChunkPiece:
    pieces = [plan[i] for plan, i in zip(plans, index, strict=True)]
    coords = tuple(p.chunk for p in pieces)
    return ChunkPiece(coords, tuple(p.chunk_sel for p in pieces), tuple(p.out_sel for p in pieces))


def _find(plan: AxisPlan, chunk: int) -> int:
    """The piece of ``plan`` in chunk ``chunk``, or -1 if the plan does not touch it."""
    i = bisect.bisect_left(range(len(plan)), chunk, key=plan.chunk)
    return i if i < len(plan) and plan.chunk(i) == chunk else -1


def _shard_run(plan: AxisPlan, shard: int, per_shard: int) -> Run:
    """The pieces of ``plan`` in shard ``shard`` (first piece, stop piece; empty if none)."""
    n = len(plan)
    first = bisect.bisect_left(range(n), shard * per_shard, key=plan.chunk)
    stop = bisect.bisect_left(range(n), (shard + 1) * per_shard, lo=first, key=plan.chunk)
    return shard, first, stop


def _runs(plan: AxisPlan, per_shard: int) -> Iterator[Run]:
    """The shards one axis touches: (shard index, first piece, stop piece), in order."""
    i, n = 0, len(plan)
    while i < n:
        shard = plan.chunk(i) // per_shard
        stop = bisect.bisect_left(range(n), (shard + 1) * per_shard, lo=i, key=plan.chunk)
        yield shard, i, stop
        i = stop


def _run_product(
    plans: Sequence[AxisPlan], per_shard: Sequence[int], prefix: tuple[Run, ...]
) -> Iterator[tuple[Run, ...]]:
    depth = len(prefix)
    if depth == len(plans):
        yield prefix
        return
    for run in _runs(plans[depth], per_shard[depth]):
        yield from _run_product(plans, per_shard, (*prefix, run))


def _shard_pieces(
    plans: Sequence[Sequence[AxisPiece]], per_shard: Sequence[int], runs: tuple[Run, ...]
) -> Iterator[tuple[int, ChunkPiece]]:
    strides = [math.prod(per_shard[axis + 1 :]) for axis in range(len(plans))]
    for index in _odometer([(first, stop) for _, first, stop in runs]):
        piece = _combine(plans, index)
        flat = sum((c % k) * s for c, k, s in zip(piece.coords, per_shard, strides, strict=True))
        yield int(flat), piece


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
        raise InputIndexError(msg)
    n_given = len(parts) - n_ellipsis
    if n_given > ndim:
        msg = f"too many indices for array: array is {ndim}-dimensional, but {n_given} were indexed"
        raise InputIndexError(msg)
    fill = [slice(None)] * (ndim - n_given)
    if n_ellipsis:
        i = next(k for k, part in enumerate(parts) if part is Ellipsis)
        return [*parts[:i], *fill, *parts[i + 1 :]]
    return parts + fill


def _parse_axis(part: Any, n: int, orthogonal: bool) -> Axis:
    if isinstance(part, slice):
        start, stop, step = _slice_bounds(part, n)
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
    raise InputIndexError(msg)


def _slice_bounds(part: slice, n: int) -> tuple[int, int, int]:
    """``part.indices(n)``, its errors as cytepool's (the same builtin types as numpy's)."""
    try:
        return part.indices(n)
    except ValueError:  # a step of 0
        msg = f"a slice step cannot be zero, found {part!r}"
        raise InputError(msg) from None
    except TypeError:
        msg = f"slice bounds must be integers or None, found {part!r}"
        raise InputTypeError(msg) from None


def _is_integer(part: Any) -> bool:
    if isinstance(part, bool | np.bool_):
        return False
    return isinstance(part, int | np.integer)


def _check_position(index: int, n: int) -> int:
    if not -n <= index < n:
        msg = f"index {index} is out of bounds for axis with size {n}"
        raise InputIndexError(msg)
    return index % n


def _parse_positions(values: np.ndarray[Any, Any], n: int) -> np.ndarray[Any, Any]:
    if values.ndim != 1:
        msg = f"an index array must be 1-D, not {values.ndim}-D"
        raise InputIndexError(msg)
    if values.dtype == np.bool_:
        if len(values) != n:
            msg = f"boolean index of length {len(values)} does not match axis of length {n}"
            raise InputIndexError(msg)
        return np.flatnonzero(values).astype(np.intp)
    if len(values) == 0:
        return np.empty(0, dtype=np.intp)
    if values.dtype.kind not in "iu":
        msg = f"an index array must hold integers or booleans, not {values.dtype}"
        raise InputIndexError(msg)
    low, high = int(values.min()), int(values.max())
    if low < -n or high >= n:
        bad = low if low < -n else high
        msg = f"index {bad} is out of bounds for axis with size {n}"
        raise InputIndexError(msg)
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
