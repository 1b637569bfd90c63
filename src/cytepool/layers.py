"""Lazy layers: selections and sums of layers, read one group at a time.

A layer is an array ``(n_groups, n_samples, n_features)``. A lazy layer reads nothing until
asked for values, and then reads one group at a time: :meth:`LazyLayer.read` returns one
group's block ``(n_selected_samples, n_selected_features)`` and asks the layers below it for
only the samples and features it needs, so an array stored in chunks (a
:class:`cytepool.io.zarr.ZarrArray`) has only the chunks holding them read, through its
``oindex``.

Stored values are checked when read (:class:`cytepool.errors.ConstraintError`, naming the
layer, group and sample). Integer sums are exact: integers are added in 64 bits with a check
on every addition, and a sum that does not fit the layer's data type raises
:class:`OverflowError` naming the layer and group -- never a wraparound, never a silent
conversion to float. Floats are added in float64 in a fixed order (a merge's members in their
order in the base; the parts of :class:`SumLayer` ascending per value), so a rounded sum does
not depend on the order its terms were listed in.

Lazy layers are made by :meth:`cytepool.Cube.select`, :meth:`cytepool.Cube.merge_groups`,
:meth:`cytepool.Cube.pool_samples`, :func:`cytepool.concat` and :func:`cytepool.add`; they
behave like read-only arrays (``shape``, ``dtype``, ``layer[...]``, ``layer.oindex[...]``,
``numpy.asarray(layer)``).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from cytepool.errors import ConstraintError, FormatError, InputIndexError, SumOverflowError
from cytepool.fingerprint import BLAKE3, group_digest, layer_dtype

__all__ = [
    "ArrayLayer",
    "CheckedLayer",
    "ConcatLayer",
    "GroupSumLayer",
    "LazyLayer",
    "SampleSumLayer",
    "SelectLayer",
    "SumLayer",
    "layer_source",
]

Index = np.ndarray[Any, np.dtype[np.intp]]


def _block_shape(
    shape: tuple[int, int, int], samples: Index | None, features: Index | None
) -> tuple[int, int]:
    return (
        shape[1] if samples is None else len(samples),
        shape[2] if features is None else len(features),
    )


def is_full(index: Index | None, n: int) -> bool:
    return index is None or (len(index) == n and bool(np.array_equal(index, np.arange(n))))


def _compose(outer: Index | None, inner: Index | None) -> Index | None:
    """Positions in the base of ``inner`` positions taken within ``outer``."""
    if outer is None:
        return inner
    if inner is None:
        return outer
    return outer[inner]


def positions(selection: Any, n: int, *, what: str) -> Index | None:
    """1-D positions from None, a slice, an integer, integer array or boolean mask."""
    if selection is None:
        return None
    if isinstance(selection, slice):
        return np.arange(n, dtype=np.intp)[selection]
    if isinstance(selection, int | np.integer) and not isinstance(selection, bool | np.bool_):
        selection = [operator.index(selection)]
    arr = np.asarray(selection)
    if arr.ndim != 1:
        msg = f"{what}: expected a 1-D selection, found shape {arr.shape}"
        raise InputIndexError(msg)
    if arr.dtype.kind == "b":
        if len(arr) != n:
            msg = f"{what}: a boolean mask needs {n} values, found {len(arr)}"
            raise InputIndexError(msg)
        return np.flatnonzero(arr).astype(np.intp)
    if arr.size == 0:
        return np.zeros(0, dtype=np.intp)
    if arr.dtype.kind not in "iu":
        msg = f"{what}: expected integer positions or a boolean mask, found data type {arr.dtype}"
        raise InputIndexError(msg)
    out = arr.astype(np.intp)
    bad = (out < -n) | (out >= n)
    if bad.any():
        msg = f"{what}: position {arr[bad][0]} is out of range for length {n}"
        raise InputIndexError(msg)
    return np.where(out < 0, out + n, out).astype(np.intp)


# --------------------------------------------------------------------------- checks


def _cell(ids: Sequence[str] | None, index: Index | None, k: int) -> str:
    pos = k if index is None else int(index[k])
    return repr(ids[pos]) if ids is not None else f"#{pos}"


def values_fine(array: np.ndarray[Any, Any]) -> bool:
    """Whether every value is finite and >= 0, by reductions (no temporary array): none for
    unsigned integers, the minimum for signed ones, minimum and maximum for floats (NaN
    makes the minimum NaN)."""
    if not array.size or array.dtype.kind == "u":
        return True
    low = array.min()
    if array.dtype.kind == "i":
        return bool(low >= 0)
    return bool(np.isfinite(low) and low >= 0 and np.isfinite(array.max()))


def check_block(
    block: np.ndarray[Any, Any],
    *,
    layer: str,
    group: str,
    sample_ids: Sequence[str] | None,
    feature_ids: Sequence[str] | None,
    samples: Index | None,
    features: Index | None,
    cells: np.ndarray[Any, Any] | None,
    fine: bool | None = None,
    source: str | None = None,
) -> None:
    """Raise ConstraintError naming layer, group, sample (and feature) for a bad value.

    ``block`` holds the selected samples x features of one group; ``cells`` the cell numbers
    of the selected samples (or None to skip the empty-profile check); ``fine`` what
    :func:`values_fine` gives for ``block``, if known already; ``source`` where the values
    were read (:func:`layer_source`), named at the end of the message.
    """
    fine = values_fine(block) if fine is None else fine
    found = None if fine else _bad_value(block)
    if found is None and cells is not None and block.size:
        found = _filled_empty_profile(block, np.asarray(cells))
    if found is None:
        return
    i, j, problem = found
    sample, feature = _cell(sample_ids, samples, i), _cell(feature_ids, features, j)
    msg = f"layer {layer!r}, group {group!r}, sample {sample}: " + problem.format(feature=feature)
    raise ConstraintError(msg + read_from(source))


def _bad_value(block: np.ndarray[Any, Any]) -> tuple[int, int, str] | None:
    """The first value that is not finite or is negative: its row, its column and the
    problem (``{feature}`` standing for the feature's name)."""
    if block.dtype.kind == "f":
        finite = np.isfinite(block)
        if not finite.all():
            i, j = np.argwhere(~finite)[0]
            problem = "is not finite; expected finite values >= 0"
            return i, j, f"value {block[i, j]} at feature {{feature}} {problem}"
    if block.dtype.kind != "u":
        negative = block < 0
        if negative.any():
            i, j = np.argwhere(negative)[0]
            problem = "is negative; expected values >= 0"
            return i, j, f"value {block[i, j]} at feature {{feature}} {problem}"
    return None


def _filled_empty_profile(
    block: np.ndarray[Any, Any], cells: np.ndarray[Any, Any]
) -> tuple[int, int, str] | None:
    """The first nonzero value of a profile of 0 cells: its row, column and problem."""
    rows = np.flatnonzero(cells == 0)
    if not len(rows):
        return None
    nonzero = block[rows] != 0
    if not nonzero.any():
        return None
    r, j = np.argwhere(nonzero)[0]
    i = rows[r]
    problem = (
        f"the profile pools 0 cells but holds {block[i, j]} at feature {{feature}}; "
        "expected 0 where cells == 0"
    )
    return i, j, problem


def read_from(source: str | None) -> str:
    """What to add to a message about values read from ``source`` (nothing if in memory)."""
    return "" if source is None else f" (read from {source})"


def layer_source(layer: object) -> str | None:
    """Where a lazy layer reads its values: the path (or URL) of the Zarr array under it,
    through the layers it derives from; None for values in memory."""
    while layer is not None:
        array = getattr(layer, "array", None)
        if array is not None:  # a path only cytepool's ZarrArray gives (zarr-python's: a key)
            ours = type(array).__module__.startswith("cytepool.io.zarr")
            path = getattr(array, "path", None) if ours else None
            return None if path is None else str(path)
        layer = getattr(layer, "base", None)
    return None


def _wider_advice(dtype: np.dtype[Any]) -> str:
    """What to do when a sum of a layer of ``dtype`` does not fit it."""
    if dtype.kind == "f":
        wider = dtype.itemsize < 8  # float64 holds no larger value
        return "; store the layer as float64 first" if wider else ""
    if dtype == np.dtype(np.int64):  # sums of values >= 0: uint64 holds twice as much
        return "; store the layer as uint64 (sums up to 2**64 - 1) or float64 first"
    if dtype.itemsize == 8:  # uint64: no wider integer type
        return (
            "; no integer data type holds it: store the layer as float64 first (its sums are"
            " then rounded above 2**53)"
        )
    return "; store the layer with a wider data type (int64, uint64 or float64) first"


class Accumulator:
    """Exact sums of non-negative blocks; OverflowError when a sum does not fit.

    Integers are added in 64 bits. 32-bit values cannot wrap an int64/uint64 accumulator
    (that would take 2**31 additions); for 64-bit values an addition of a value >= 0 wrapped
    if and only if the result is smaller than the value added, which is checked every time.
    """

    def __init__(self, dtype: np.dtype[Any], shape: tuple[int, ...], *, where: str):
        self.dtype = dtype
        wide = {"i": np.int64, "u": np.uint64, "f": np.float64}[dtype.kind]
        self.acc = np.zeros(shape, dtype=wide)
        self.where = where
        self.check_wrap = dtype.kind in "iu" and dtype.itemsize == 8

    def overflow(self) -> OverflowError:
        if self.dtype.kind == "f":
            limit = f"(largest {np.finfo(self.dtype).max})"
        else:
            limit = f"(largest {np.iinfo(self.dtype).max})"
        msg = f"{self.where}: a sum does not fit the data type {self.dtype.name} {limit}"
        if self.where.startswith("layer"):
            msg += _wider_advice(self.dtype)
        return SumOverflowError(msg)

    def add(self, block: np.ndarray[Any, Any], rows: Index | None = None) -> None:
        target = self.acc if rows is None else self.acc[rows]
        with np.errstate(over="ignore"):
            np.add(target, block, out=target, casting="unsafe")
        if self.check_wrap and (target < block).any():
            raise self.overflow()
        if rows is not None:
            self.acc[rows] = target

    def result(self) -> np.ndarray[Any, Any]:
        if self.dtype.kind == "f":
            with np.errstate(over="ignore"):
                out = self.acc.astype(self.dtype)
            if not np.isfinite(out).all():
                raise self.overflow()
            return out
        if self.acc.size and self.acc.max() > np.iinfo(self.dtype).max:
            raise self.overflow()
        return self.acc.astype(self.dtype)


# --------------------------------------------------------------------------- base


class _OIndex:
    def __init__(self, layer: LazyLayer):
        self._layer = layer

    def __getitem__(self, key: Any) -> Any:
        return self._layer._get(key, orthogonal=True)


class LazyLayer:
    """A read-only layer ``(n_groups, n_samples, n_features)`` that reads on demand.

    Subclasses implement :meth:`read`, one group's block. Indexing (``layer[...]`` with
    integers and slices, ``layer.oindex[...]`` also with integer arrays and boolean masks
    per axis) and ``numpy.asarray(layer)`` read group by group through it.

    Examples
    --------
    >>> import numpy as np
    >>> from cytepool.layers import ArrayLayer, SelectLayer
    >>> base = ArrayLayer(np.arange(24).reshape(2, 3, 4), name="counts")
    >>> lazy = SelectLayer(base, features=np.array([3, 0]))
    >>> lazy.shape
    (2, 3, 2)
    >>> lazy.read(1, np.array([2]))
    array([[23, 20]])
    >>> lazy.oindex[0, [0, 1], :]
    array([[3, 0],
           [7, 4]])
    """

    shape: tuple[int, int, int]
    dtype: np.dtype[Any]
    name: str
    #: Whether the values are held in memory and were checked when the layer was made.
    eager: bool = False

    @property
    def ndim(self) -> int:
        """The number of dimensions, 3."""
        return 3

    def __len__(self) -> int:
        return self.shape[0]

    def read(self, group: int, samples: Index | None = None, features: Index | None = None) -> Any:
        """Read one group's block ``(len(samples), len(features))``; None selects all."""
        raise NotImplementedError  # pragma: no cover

    def reading(
        self, groups: Sequence[int], samples: Index | None = None, features: Index | None = None
    ) -> contextlib.AbstractContextManager[object]:
        """A block in which the reads of ``groups`` (with these samples and features, None:
        all) come next: a layer over a store that fetches ahead (a remote one) asks for all
        their chunks at once, and the reads share one opening of the store. A no-op here."""
        return contextlib.nullcontext()

    def checked_against(self, cells: Any) -> bool:
        """Whether every read is checked already against the cell numbers ``cells`` (the
        cube's): a cube then need not check a block again."""
        return False

    def _where(self, group: int) -> str:
        ids = getattr(self, "group_ids", None)
        gid = repr(ids[group]) if ids is not None else f"#{group}"
        return f"layer {self.name!r}, group {gid}"

    @property
    def oindex(self) -> _OIndex:
        """Orthogonal indexing: integers, slices, integer arrays or masks per axis."""
        return _OIndex(self)

    def __getitem__(self, key: Any) -> Any:
        return self._get(key, orthogonal=False)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        out = self._get(Ellipsis, orthogonal=True)
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        shape = " x ".join(map(str, self.shape))
        return f"<{type(self).__name__} {self.name!r} {shape} {self.dtype.name}>"

    def _get(self, key: Any, *, orthogonal: bool) -> Any:
        keys = _expand_key(key)
        picks: list[Index | None] = []
        drop: list[bool] = []
        for axis, (k, n) in enumerate(zip(keys, self.shape, strict=True)):
            scalar = isinstance(k, int | np.integer) and not isinstance(k, bool | np.bool_)
            if not orthogonal and not scalar and not isinstance(k, slice):
                msg = "lazy layers take integers and slices; use .oindex for arrays and masks"
                raise InputIndexError(msg)
            if scalar and not -n <= int(k) < n:
                msg = f"index {k} is out of bounds for axis {axis} with size {n}"
                raise InputIndexError(msg)
            pick = positions(k, n, what=f"axis {axis}")
            picks.append(None if isinstance(k, slice) and is_full(pick, n) else pick)
            drop.append(scalar)
        groups = picks[0] if picks[0] is not None else np.arange(self.shape[0])
        n_s = self.shape[1] if picks[1] is None else len(picks[1])
        n_f = self.shape[2] if picks[2] is None else len(picks[2])
        out = np.empty((len(groups), n_s, n_f), dtype=self.dtype)
        with self.reading(groups.tolist(), picks[1], picks[2]):
            for k, g in enumerate(groups.tolist()):
                out[k] = self.read(g, picks[1], picks[2])
        return out[tuple(0 if d else slice(None) for d in drop)]


def _expand_key(key: Any) -> list[Any]:
    keys = list(key) if isinstance(key, tuple) else [key]
    if sum(k is Ellipsis for k in keys) > 1:
        msg = "an index can only have a single ellipsis ('...')"
        raise InputIndexError(msg)
    for i, k in enumerate(keys):
        if k is Ellipsis:
            keys[i : i + 1] = [slice(None)] * (3 - len(keys) + 1)
            break
    if len(keys) > 3:
        msg = f"too many indices for a 3-D layer: {len(keys)}"
        raise InputIndexError(msg)
    return keys + [slice(None)] * (3 - len(keys))


# --------------------------------------------------------------------------- leaves


def _as_key(index: Index | None) -> Any:
    """A slice for None or a contiguous increasing run, else the positions."""
    if index is None:
        return slice(None)
    if len(index) and bool(np.all(np.diff(index) == 1)):
        return slice(int(index[0]), int(index[-1]) + 1)
    return index


class ArrayLayer(LazyLayer):
    """A layer over an array: numpy, a ZarrArray or any array with ``shape``/``dtype``/indexing.

    Reads go through the array's ``oindex`` when it has one, so only the chunks holding the
    selected samples and features of a group are read. Values are checked when read, unless
    ``checked`` says they were checked already; a group read whole is verified against its
    digest when ``digests`` knows it.

    Parameters
    ----------
    array
        The values, shape ``(n_groups, n_samples, n_features)``.
    name
        The layer name, for messages.
    group_ids, sample_ids, feature_ids
        The ids of the axes, for messages (positions are named otherwise).
    cells
        The cell numbers ``(n_groups, n_samples)`` (profiles with 0 cells must hold 0s).
    digests
        Known group digests (None entries for unknown ones).
    algorithm
        The hash algorithm of the digests (:mod:`cytepool.fingerprint`); BLAKE3 by default.
    checked
        Whether the values were checked already (numpy arrays checked on construction).
    """

    def __init__(
        self,
        array: Any,
        *,
        name: str,
        group_ids: Sequence[str] | None = None,
        sample_ids: Sequence[str] | None = None,
        feature_ids: Sequence[str] | None = None,
        cells: np.ndarray[Any, Any] | None = None,
        digests: Sequence[str | None] | None = None,
        checked: bool = False,
        algorithm: str = BLAKE3,
    ):
        self.array = array
        self.name = name
        self.shape = tuple(int(n) for n in array.shape)  # type: ignore[assignment]
        self.dtype = layer_dtype(array.dtype, what=f"layer {name!r}")
        self.group_ids = group_ids
        self.sample_ids = sample_ids
        self.feature_ids = feature_ids
        self.cells = cells
        self.digests = tuple(digests) if digests is not None else None
        self.algorithm = algorithm
        self.checked = checked
        self.eager = checked and isinstance(array, np.ndarray)

    def reading(
        self, groups: Sequence[int], samples: Index | None = None, features: Index | None = None
    ) -> contextlib.AbstractContextManager[object]:
        """The array's ``reading`` block for these groups' blocks, if it has one (ZarrArray)."""
        reading = getattr(self.array, "reading", None)
        if reading is None or isinstance(self.array, np.ndarray):
            return contextlib.nullcontext()
        samples = None if is_full(samples, self.shape[1]) else samples
        features = None if is_full(features, self.shape[2]) else features
        return reading([(g, _as_key(samples), _as_key(features)) for g in groups])

    def _fetch(self, group: int, samples: Index | None, features: Index | None) -> Any:
        arr = self.array
        if isinstance(arr, np.ndarray):
            block = arr[group]
            if samples is not None and features is not None:
                return block[np.ix_(samples, features)]
            return np.array(block[_as_key(samples)][:, _as_key(features)])  # a new array
        if hasattr(arr, "oindex"):
            return arr.oindex[group, _as_key(samples), _as_key(features)]
        block = np.asarray(arr[group])
        return block[_as_key(samples)][:, _as_key(features)]

    def read(
        self, group: int, samples: Index | None = None, features: Index | None = None
    ) -> np.ndarray[Any, Any]:
        """Read one group's block, checked and (when whole and known) verified."""
        samples = None if is_full(samples, self.shape[1]) else samples
        features = None if is_full(features, self.shape[2]) else features
        whole = samples is None and features is None
        expected = self.digests[group] if whole and self.digests is not None else None
        with self.reading([group], samples, features):  # a digest that fails asks the store
            block = np.asarray(self._fetch(group, samples, features))  # whether it changed
            if block.dtype != self.dtype:
                block = block.astype(self.dtype)
            fine = None
            if expected is not None:
                fine = self._verify_fine(group, block, expected)[1]
        self._check(group, block, samples, features, fine)
        return block

    def read_all(self, out: np.ndarray[Any, Any]) -> list[str] | None:
        """Read every group into ``out`` (C-contiguous, the layer's shape and data type),
        checked and verified on the threads that decode the array, each group as soon as its
        chunks are in; the digest of every group (made with the layer's algorithm), or None
        (and ``out`` untouched) if the array cannot be read that way (then read group by group).
        """
        read_into = getattr(self.array, "read_into", None)
        if read_into is None or self.checked or self.array.dtype != self.dtype:
            return None
        digests: list[str] = [""] * self.shape[0]

        def accept(start: int, stop: int) -> None:
            for group in range(start, stop):
                block = out[group]
                known = None if self.digests is None else self.digests[group]
                digests[group], fine = self._verify_fine(group, block, known)
                self._check(group, block, None, None, fine)

        read_into(out, on_rows=accept)
        return digests

    def checked_against(self, cells: Any) -> bool:
        """Whether the values were checked already, or are checked against ``cells``."""
        return self.checked or cells is self.cells

    def _group_id(self, group: int) -> str:
        return self.group_ids[group] if self.group_ids is not None else f"#{group}"

    def _verify_fine(
        self, group: int, block: np.ndarray[Any, Any], expected: str | None
    ) -> tuple[str, bool | None]:
        """The digest of a whole group's block (FormatError if it is not ``expected``) and, for
        values not checked already, whether they are fine (:func:`values_fine`), found band by
        band as the bands are hashed, while they are in cache: the block is read once."""
        if self.checked:
            return self._verify(group, block, expected), None
        bands: list[bool] = []
        digest = self._verify(group, block, expected, lambda band: bands.append(values_fine(band)))
        return digest, all(bands)

    def _verify(
        self,
        group: int,
        block: np.ndarray[Any, Any],
        expected: str | None,
        each: Callable[[np.ndarray[Any, Any]], object] | None = None,
    ) -> str:
        """The digest of a whole group's block; FormatError if it is not ``expected``."""
        found = group_digest(self.dtype, block, self.algorithm, each=each)
        if expected is not None and found != expected:
            msg = (
                f"layer {self.name!r}, group {self._group_id(group)!r}: the values do not match"
                f" their stored digest (expected {expected[:16]}..., found {found[:16]}...);"
                " the store is corrupt or was modified" + read_from(layer_source(self))
            )
            raise FormatError(msg)
        return found

    def _check(
        self,
        group: int,
        block: np.ndarray[Any, Any],
        samples: Index | None,
        features: Index | None,
        fine: bool | None = None,
    ) -> None:
        """Check a block's values, unless they were checked already (``fine``: what
        :func:`values_fine` gives for it, if known)."""
        if not self.checked:
            _check_read(self, group, block, (samples, features), fine)


def _check_read(
    layer: ArrayLayer | CheckedLayer,
    group: int,
    block: np.ndarray[Any, Any],
    where: tuple[Index | None, Index | None],
    fine: bool | None = None,
) -> None:
    """:func:`check_block` of a block ``layer`` read of ``group`` at ``where`` (the samples
    and features read, None: all), against the layer's cell numbers (if it has them) and
    named by its ids."""
    samples, features = where
    cells = None
    if layer.cells is not None:
        row = layer.cells[group]
        cells = row if samples is None else row[samples]
    check_block(
        block,
        layer=layer.name,
        group=layer.group_ids[group] if layer.group_ids is not None else f"#{group}",
        sample_ids=layer.sample_ids,
        feature_ids=layer.feature_ids,
        samples=samples,
        features=features,
        cells=cells,
        fine=fine,
        source=layer_source(layer),
    )


# --------------------------------------------------------------------------- derived


class CheckedLayer(LazyLayer):
    """A lazy layer given to a cube (another cube's layer, a statistic), read through and
    each block checked against that cube's cell numbers and ids, as a stored array is: the
    values it reads were checked against other profiles, or never, and a cube's sums
    (``merge_groups``, ``pool_samples``) read it directly."""

    def __init__(
        self,
        base: LazyLayer,
        *,
        name: str,
        group_ids: Sequence[str],
        sample_ids: Sequence[str],
        feature_ids: Sequence[str],
        cells: np.ndarray[Any, Any],
    ):
        self.base = base
        self.name, self.dtype, self.shape = name, base.dtype, base.shape
        self.group_ids, self.sample_ids, self.feature_ids = group_ids, sample_ids, feature_ids
        self.cells = cells

    def read(
        self, group: int, samples: Index | None = None, features: Index | None = None
    ) -> np.ndarray[Any, Any]:
        """Read one group's block from the base layer, checked."""
        block = self.base.read(group, samples, features)
        _check_read(self, group, block, (samples, features))
        return block

    def reading(
        self, groups: Sequence[int], samples: Index | None = None, features: Index | None = None
    ) -> contextlib.AbstractContextManager[object]:
        """The base layer's ``reading`` block."""
        return self.base.reading(groups, samples, features)

    def checked_against(self, cells: Any) -> bool:
        """Whether ``cells`` are those this layer checks against."""
        return cells is self.cells


class SelectLayer(LazyLayer):
    """The groups, samples and features of ``base`` at the given positions (None: all).

    ``cells``: the cell numbers of the selection, when ``base`` checks every read against
    those it was selected from (then a cube holding ``cells`` need not check a block again).
    """

    def __init__(
        self,
        base: LazyLayer,
        groups: Index | None = None,
        samples: Index | None = None,
        features: Index | None = None,
        *,
        cells: np.ndarray[Any, Any] | None = None,
    ):
        self.base = base
        self.cells = cells
        self.name = base.name
        self.dtype = base.dtype
        self.groups, self.samples, self.features = groups, samples, features
        self.shape = tuple(  # type: ignore[assignment]
            n if p is None else len(p)
            for n, p in zip(base.shape, (groups, samples, features), strict=True)
        )

    def read(
        self, group: int, samples: Index | None = None, features: Index | None = None
    ) -> np.ndarray[Any, Any]:
        """Read one group's block from the base layer."""
        g = group if self.groups is None else int(self.groups[group])
        return self.base.read(g, _compose(self.samples, samples), _compose(self.features, features))

    def reading(
        self, groups: Sequence[int], samples: Index | None = None, features: Index | None = None
    ) -> contextlib.AbstractContextManager[object]:
        """The base layer's ``reading`` block for the same reads."""
        base_groups = [g if self.groups is None else int(self.groups[g]) for g in groups]
        return self.base.reading(
            base_groups, _compose(self.samples, samples), _compose(self.features, features)
        )

    def checked_against(self, cells: Any) -> bool:
        """Whether ``cells`` are the selection's, whose every read the base layer checks."""
        return self.cells is not None and cells is self.cells


class SumLayer(LazyLayer):
    """The element-wise sum of layers of the same shape and data type (``cytepool.add``)."""

    def __init__(self, parts: Sequence[LazyLayer], *, name: str, group_ids: Sequence[str]):
        self.parts = list(parts)
        self.name = name
        self.group_ids = group_ids
        self.shape = parts[0].shape
        self.dtype = parts[0].dtype

    def read(
        self, group: int, samples: Index | None = None, features: Index | None = None
    ) -> np.ndarray[Any, Any]:
        """Read one group's block: the sum of the parts' blocks (exact for integers; for
        floats in float64, in an order that does not depend on the order of the parts)."""
        shape = _block_shape(self.shape, samples, features)
        acc = Accumulator(self.dtype, shape, where=self._where(group))
        blocks: Iterable[np.ndarray[Any, Any]] = (
            part.read(group, samples, features) for part in self.parts
        )
        if self.dtype.kind == "f" and len(self.parts) > 2:
            blocks = _ascending(list(blocks))  # two terms add the same in either order
        for block in blocks:
            acc.add(block)
        return acc.result()


def _ascending(blocks: Sequence[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """Float blocks as one array, each position's values sorted in ascending order.

    Rounded float sums depend on the order of their terms (but for two terms); summed in
    this order, a sum depends on the set of terms only.
    """
    return np.sort(np.stack([np.asarray(b, dtype=np.float64) for b in blocks]), axis=0)


class _MemberSumLayer(LazyLayer):
    """Each position along ``axis`` (0 groups, 1 samples) sums some positions of ``base``."""

    axis: int

    def __init__(
        self,
        base: LazyLayer,
        members: Sequence[Index],
        *,
        name: str,
        group_ids: Sequence[str],
    ):
        self.base = base
        # summed in the order the members hold in the base: the order listed does not
        # change a rounded float sum
        self.members = [np.sort(np.asarray(m, dtype=np.intp)) for m in members]
        self.name = name
        self.group_ids = group_ids
        self.dtype = base.dtype
        shape = list(base.shape)
        shape[self.axis] = len(self.members)
        self.shape = (shape[0], shape[1], shape[2])


class GroupSumLayer(_MemberSumLayer):
    """Each group is the sum of some groups of ``base`` (``Cube.merge_groups``)."""

    axis = 0

    def read(
        self, group: int, samples: Index | None = None, features: Index | None = None
    ) -> np.ndarray[Any, Any]:
        """Read one group's block: the sum of its members' blocks, in their order in the base
        (exact for integers)."""
        members = self.members[group].tolist()
        if len(members) == 1:
            return self.base.read(members[0], samples, features)
        shape = _block_shape(self.shape, samples, features)
        acc = Accumulator(self.dtype, shape, where=self._where(group))
        for m in members:
            acc.add(self.base.read(m, samples, features))
        return acc.result()


class SampleSumLayer(_MemberSumLayer):
    """Each sample is the sum of some samples of ``base`` (``Cube.pool_samples``)."""

    axis = 1

    def read(
        self, group: int, samples: Index | None = None, features: Index | None = None
    ) -> np.ndarray[Any, Any]:
        """Read one group's block: each selected sample sums its members."""
        outs = self.members if samples is None else [self.members[i] for i in samples]
        n_f = self.shape[2] if features is None else len(features)
        if not outs:
            return np.zeros((0, n_f), dtype=self.dtype)
        needed = np.unique(np.concatenate(outs))
        block = self.base.read(group, needed, features)
        where = [np.searchsorted(needed, m) for m in outs]
        if all(len(w) == 1 for w in where):
            return block[np.concatenate(where)]
        acc = Accumulator(self.dtype, (len(outs), n_f), where=self._where(group))
        lengths = np.array([len(w) for w in where])
        for r in range(int(lengths.max())):
            rows = np.flatnonzero(lengths > r)
            acc.add(block[[where[k][r] for k in rows.tolist()]], rows)
        return acc.result()


class ConcatLayer(LazyLayer):
    """Layers joined along one axis (0 groups, 1 samples, 2 features) (``cytepool.concat``)."""

    def __init__(self, parts: Sequence[LazyLayer], axis: int):
        self.parts = list(parts)
        self.axis = axis
        self.name = parts[0].name
        self.dtype = parts[0].dtype
        sizes = [p.shape[axis] for p in parts]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.intp)
        shape = list(parts[0].shape)
        shape[axis] = int(self.offsets[-1])
        self.shape = tuple(shape)  # type: ignore[assignment]

    def read(
        self, group: int, samples: Index | None = None, features: Index | None = None
    ) -> np.ndarray[Any, Any]:
        """Read one group's block from the parts that hold it."""
        if self.axis == 0:
            p = int(np.searchsorted(self.offsets, group, side="right")) - 1
            return self.parts[p].read(group - int(self.offsets[p]), samples, features)
        along = samples if self.axis == 1 else features
        if along is None:
            blocks = [
                p.read(group, None, features) if self.axis == 1 else p.read(group, samples, None)
                for p in self.parts
            ]
            return np.concatenate(blocks, axis=self.axis - 1)
        out = np.empty(_block_shape(self.shape, samples, features), dtype=self.dtype)
        owner = np.searchsorted(self.offsets, along, side="right") - 1
        for p in np.unique(owner).tolist():
            hits = np.flatnonzero(owner == p)
            local = (along[hits] - self.offsets[p]).astype(np.intp)
            if self.axis == 1:
                out[hits] = self.parts[p].read(group, local, features)
            else:
                out[:, hits] = self.parts[p].read(group, samples, local)
        return out
