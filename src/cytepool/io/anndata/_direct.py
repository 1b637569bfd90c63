"""The cells matrix of a file, read block by block while the blocks before are pooled.

:func:`open_matrix` opens X (or a layer, or raw.X) of an ``.h5ad`` file or AnnData ``.zarr``
store for pooling: a :class:`SparseMatrix` (CSR or CSC) or a :class:`DenseMatrix` whose arrays
are read through array sources (:mod:`cytepool.io.anndata._sources`), without anndata. It
returns None for what it does not read (a Zarr v2 array with filters, say), and the caller
falls back to anndata's backed reader, which gives the same sums.

Blocks are read on a reader thread ahead of the one being pooled (:func:`prefetched`): the
pooling kernel adds block *k* while block *k+1* (and more) is read and decoded (the decoding
itself runs on cytepool's decode threads), and memory holds a bounded number of blocks,
whatever the size of the file: for CSR, two blocks of about :data:`BLOCK_VALUES` stored
values (one pooled, one read ahead); for CSC, ``AHEAD + 1`` blocks of a third as many; for a
dense matrix, ``AHEAD + 1`` blocks of :data:`DENSE_BLOCK_BYTES`. A sparse block is read into
arrays kept for the purpose (:class:`Buffers`), each taken again once no block refers to it:
blocks read into new arrays each time left the C heap fragmented, the process's memory growing
block by block (the extra memory of the benchmark's Zarr file 151 MiB with new arrays, 127 with
kept ones; the uncompressed .h5ad 118 and 104).

A sparse matrix is checked before anything is allocated for it: ``indptr`` must have one entry
per row (CSR) or column (CSC) plus one, start at 0, never decrease and end within ``data``, and
``data`` and ``indices`` must have the same length; else a
:class:`~cytepool.errors.FormatError` names the file and the array.
"""

from __future__ import annotations

import collections
import functools
import itertools
import sys
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from cytepool.errors import FormatError, UnsupportedFeatureError
from cytepool.io.anndata._sources import (
    ArraySource,
    ZarrV3Source,
    h5_source,
    read_pair,
    zarr_v2_source,
)

__all__ = [
    "AHEAD",
    "BLOCK_VALUES",
    "Buffers",
    "DenseMatrix",
    "LibraryArray",
    "SparseMatrix",
    "check_library_sparse",
    "checked_indptr",
    "major_bounds",
    "matrix_shape",
    "open_matrix",
    "prefetched",
    "row_bounds",
]

BLOCK_VALUES = 3 << 20
"""Stored values per block of rows of a CSR matrix (24 MiB of float32 values and int32
indices), read one block ahead. A block of rows adds into the sums of every profile its cells
belong to, so larger blocks use each profile's sums more while they are in the CPU's cache:
blocks of 3 * 2**20 values one ahead hold the memory of 2**21 two ahead and pool 5-10 %
faster. A CSC block adds only into its own columns of the sums: 2**20 values (a third),
AHEAD ahead."""
DENSE_BLOCK_BYTES = 1 << 22
"""Bytes per block of a dense matrix (4 MiB: with the blocks read ahead, 12 MiB in memory;
pooling a dense block has no cost per block that larger blocks would spread)."""
AHEAD = 2
"""Blocks read ahead of the one being pooled."""

T = TypeVar("T")


def prefetched(tasks: Iterable[Callable[[], T]], ahead: int = AHEAD) -> Generator[T, None, None]:
    """The results of ``tasks``, in order, each run on a reader thread ``ahead`` of its use.

    At most ``ahead`` tasks are under way or done-but-not-taken while the caller holds the
    result before them. When the caller stops early (an error, a closed generator), tasks
    not started are cancelled and the one running is waited for.
    """
    executor = ThreadPoolExecutor(1, thread_name_prefix="cytepool-read")
    pending: collections.deque[Future[T]] = collections.deque()
    queue = iter(tasks)
    try:
        for task in itertools.islice(queue, ahead):
            pending.append(executor.submit(task))
        while pending:
            result = pending.popleft().result()
            for task in itertools.islice(queue, 1):
                pending.append(executor.submit(task))
            yield result
            del result
    finally:
        for future in pending:
            future.cancel()
        executor.shutdown(wait=True)


# --------------------------------------------------------------------------- opening


def open_matrix(
    root: Any, element: str, path: Path, owner: str
) -> SparseMatrix | DenseMatrix | None:
    """The matrix at ``element`` of the opened file ``root`` (h5py File or zarr Group) at
    ``path``, or None if it is read by anndata instead. ``owner`` names the file in messages."""
    node = root[element]
    encoding = str(node.attrs.get("encoding-type", ""))
    if encoding in ("csr_matrix", "csc_matrix"):
        shape = _shape(node.attrs.get("shape"), f"{element} of {owner}")
        arrays = []
        for name in ("data", "indices", "indptr"):
            key = f"{element}/{name}"
            if name not in node:
                msg = f"{element} of {owner} ({encoding}) lacks its array {name!r}"
                raise FormatError(msg)
            source = _source(root, key, path, f"{key} of {owner}")
            if source is None:
                return None
            arrays.append(source)
        data, indices, indptr = arrays
        return SparseMatrix(encoding[:3], shape, data, indices, indptr, f"{element} of {owner}")
    if not hasattr(node, "shape") or len(node.shape) != 2 or encoding not in ("array", ""):
        return None
    source = _source(root, element, path, f"{element} of {owner}")
    return None if source is None else DenseMatrix(source)


def matrix_shape(node: Any, where: str) -> tuple[int, int] | None:
    """The shape of the matrix ``node`` (a sparse group's attribute, a dense array's shape;
    FormatError if a sparse group's is not two integers >= 0), None for any other node."""
    encoding = str(node.attrs.get("encoding-type", ""))
    if encoding in ("csr_matrix", "csc_matrix"):
        return _shape(node.attrs.get("shape"), where)
    shape = getattr(node, "shape", None)
    if shape is None or len(shape) != 2 or encoding not in ("array", ""):
        return None
    return int(shape[0]), int(shape[1])


def _shape(value: Any, where: str) -> tuple[int, int]:
    try:
        shape = tuple(int(n) for n in value)
    except (TypeError, ValueError, OverflowError):
        shape = ()
    if len(shape) != 2 or min(shape) < 0:
        msg = f"{where}: its attribute 'shape' is {value!r}; expected two integers >= 0"
        raise FormatError(msg)
    return shape[0], shape[1]


def _source(root: Any, key: str, path: Path, where: str) -> ArraySource | None:
    """The array source of ``key``; None when it must be read by anndata."""
    if not path.is_dir():
        return h5_source(root[key], path, where)
    folder = path / key
    if not folder.is_dir():  # listed by the group's metadata (consolidated), gone from the store
        msg = f"{where} is missing from the store ({folder} does not exist): it is damaged"
        raise FormatError(msg)
    if (folder / ".zarray").exists():
        found = zarr_v2_source(folder, where)
        return None if isinstance(found, str) else found
    try:
        return ZarrV3Source(folder, where)
    except UnsupportedFeatureError:
        return None


def _close(array: ArraySource) -> None:
    close = getattr(array, "close", None)
    if close is not None:
        close()


# --------------------------------------------------------------------------- sparse


@dataclass
class SparseMatrix:
    """A CSR or CSC matrix on disk: its three arrays, read in blocks of rows or columns."""

    format: str  # "csr" or "csc"
    shape: tuple[int, int]
    data: ArraySource
    indices: ArraySource
    indptr: ArraySource
    where: str

    def close(self) -> None:
        """Close the files its arrays hold open."""
        for array in (self.data, self.indices, self.indptr):
            _close(array)

    def major(self) -> int:
        """The number of rows (CSR) or columns (CSC): of entries of indptr, less one."""
        return self.shape[0] if self.format == "csr" else self.shape[1]

    def checked_indptr(self) -> np.ndarray[Any, Any]:
        """indptr, read and checked against the shape and data (see the module's text)."""
        return checked_indptr(self)

    def blocks(self) -> Generator[tuple[int, int, Any], None, None]:
        """``(start, stop, block)`` for runs of rows (CSR) or columns (CSC), read ahead: the
        block a scipy.sparse matrix of those rows (all columns) or columns (all rows)."""
        import scipy.sparse

        indptr = self.checked_indptr()
        n_major = self.major()
        kind = scipy.sparse.csr_matrix if self.format == "csr" else scipy.sparse.csc_matrix
        index_type = np.int32 if self.indices.dtype.itemsize <= 4 else np.int64
        csr = self.format == "csr"
        values, ahead = (BLOCK_VALUES, 1) if csr else (max(BLOCK_VALUES // 3, 1), AHEAD)
        bounds = list(major_bounds(indptr, n_major, values))
        largest = max(int(indptr[b] - indptr[a]) for a, b in bounds)  # a long row: > values
        size = min(largest, 2 * values) if self.data.into and self.indices.into else 0
        buffers = [Buffers(array.dtype, size) for array in (self.data, self.indices)]

        def read(start: int, stop: int) -> tuple[int, int, Any]:
            low, high = int(indptr[start]), int(indptr[stop])
            outs = (buffers[0].take(high - low), buffers[1].take(high - low))
            data, indices = read_pair(self.data, self.indices, low, high, outs)
            wide = index_type if high - low < 2**31 else np.int64
            local = (indptr[start : stop + 1] - low).astype(wide)
            n = stop - start
            shape = (n, self.shape[1]) if self.format == "csr" else (self.shape[0], n)
            block = kind((data, indices.astype(wide, copy=False), local), shape=shape)
            return start, stop, block

        return prefetched((functools.partial(read, a, b) for a, b in bounds), ahead)


def checked_indptr(matrix: SparseMatrix) -> np.ndarray[Any, Any]:
    """The indptr of ``matrix``, checked (see the module's text): the lengths its arrays
    declare against its shape before anything is read, then the values of indptr."""
    n_major = matrix.major()
    what = "row" if matrix.format == "csr" else "column"
    for array in (matrix.data, matrix.indices, matrix.indptr):
        if len(array.shape) != 1:
            msg = f"{array.where} has shape {array.shape}; expected a 1-D array"
            raise FormatError(msg)
    if matrix.data.shape != matrix.indices.shape:
        msg = (
            f"{matrix.where}: data and indices have different lengths "
            f"({matrix.data.shape[0]} and {matrix.indices.shape[0]})"
        )
        raise FormatError(msg)
    for array in (matrix.indices, matrix.indptr):
        if array.dtype.kind not in "iu":
            msg = f"{array.where} holds {array.dtype}; expected integers"
            raise FormatError(msg)
    if matrix.indptr.shape[0] != n_major + 1:
        msg = (
            f"{matrix.indptr.where} has {matrix.indptr.shape[0]} entries; expected one per "
            f"{what} plus one ({n_major + 1}) for shape {matrix.shape}"
        )
        raise FormatError(msg)
    return _checked_values(matrix.indptr, matrix.indptr.read(0, n_major + 1), matrix.data)


def _checked_values(
    source: ArraySource, indptr: np.ndarray[Any, Any], data: ArraySource
) -> np.ndarray[Any, Any]:
    """``indptr`` (read from ``source``) as int64, checked to start at 0, never decrease and
    end within the values of ``data``."""
    if indptr.dtype.kind == "u" and indptr.size and indptr.max() > np.iinfo(np.int64).max:
        msg = f"{source.where} holds entries beyond int64"
        raise FormatError(msg)
    indptr = indptr.astype(np.int64, copy=False)
    steps = np.diff(indptr)
    problem = None
    if indptr[0] != 0:
        problem = f"starts at {indptr[0]}, not 0"
    elif steps.size and steps.min() < 0:
        at = int(np.argmax(steps < 0))
        problem = f"decreases after entry {at} ({indptr[at]} then {indptr[at + 1]})"
    elif indptr[-1] > data.shape[0]:
        problem = f"ends at {indptr[-1]}, past the {data.shape[0]} stored values"
    if problem is not None:
        msg = f"{source.where} is not a valid index pointer: it {problem}"
        raise FormatError(msg)
    return indptr


class LibraryArray:
    """An array of a sparse group that anndata reads (an h5py Dataset or a zarr-python
    Array, one cytepool's reader does not read: a Zarr v2 array with a filter, say), as an
    :class:`~cytepool.io.anndata._sources.ArraySource` for :func:`checked_indptr`."""

    into = False  # read does not decode into a given ``out``

    def __init__(self, array: Any, where: str) -> None:
        self.array, self.where = array, where
        self.shape: tuple[int, ...] = tuple(int(n) for n in array.shape)
        self.dtype: np.dtype[Any] = np.dtype(array.dtype)

    def read(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        """Elements ``[start, stop)``, read by the array's library (``out`` is not used)."""
        return np.asarray(self.array[start:stop])


def check_library_sparse(matrix: Any, owner: str) -> None:
    """Check the sparse matrix ``matrix`` of the file ``owner`` that anndata reads (its
    backed CSR or CSC dataset, also of an ``.h5ad`` in the layout of anndata < 0.7) as
    :func:`checked_indptr` checks the matrices cytepool reads, before anndata reads (and
    allocates) any of it: a :class:`~cytepool.errors.FormatError` names the file and the
    array."""
    group = matrix.group
    element = str(group.name).strip("/")
    arrays = []
    for name in ("data", "indices", "indptr"):
        if name not in group:
            msg = f"{element} of {owner} ({matrix.format}_matrix) lacks its array {name!r}"
            raise FormatError(msg)
        arrays.append(LibraryArray(group[name], f"{element}/{name} of {owner}"))
    shape = (int(matrix.shape[0]), int(matrix.shape[1]))
    data, indices, indptr = arrays
    where = f"{element} of {owner}"
    checked_indptr(SparseMatrix(matrix.format, shape, data, indices, indptr, where))


class Buffers:
    """Arrays of one dtype that blocks are read into, each taken again once no block uses it.

    An array is free when nothing but this list refers to it: a block's arrays are views of
    it, and each view refers to it. ``size`` is the values each array holds, the largest
    block's (0: none are kept, each block gets a new array)."""

    def __init__(self, dtype: np.dtype[Any], size: int):
        self.dtype, self.size = dtype, size
        self.arrays: list[np.ndarray[Any, Any]] = []
        self.alone = _references([np.empty(0)], 0)  # an array only a list refers to

    def take(self, n: int) -> np.ndarray[Any, Any] | None:
        """A free array of ``n`` values (a view of a kept one), or None for a new one."""
        if not self.size or n > self.size or self.alone < 0:
            return None
        for i in range(len(self.arrays)):
            if _references(self.arrays, i) == self.alone:
                return self.arrays[i][:n]
        self.arrays.append(np.empty(self.size, dtype=self.dtype))
        return self.arrays[-1][:n]


def _references(arrays: list[np.ndarray[Any, Any]], i: int) -> int:
    """The references to ``arrays[i]`` as this function sees them (-1 where the interpreter
    does not count them): compared with those of an array only a list holds, taken the same
    way, so the interpreter's own way of counting cancels out."""
    count = getattr(sys, "getrefcount", None)
    return -1 if count is None else int(count(arrays[i]))


def _chunk_rows(source: ArraySource) -> int:
    """The rows of a storage chunk of ``source`` (h5py's or cytepool's dataset, a Zarr
    array), or 1 if it has none (a contiguous dataset)."""
    for owner in (source, getattr(source, "dataset", None), getattr(source, "array", None)):
        chunks = getattr(owner, "chunks", None)
        if chunks:
            return max(1, int(chunks[0]))
    return 1


def major_bounds(
    indptr: np.ndarray[Any, Any], n_major: int, values: int
) -> Iterator[tuple[int, int]]:
    """Runs of rows (or columns) of about ``values`` stored values, at least one each (one
    empty run when there are none)."""
    if n_major == 0:
        yield 0, 0
        return
    marks = np.searchsorted(indptr, np.arange(0, indptr[-1], values), "right")
    starts = np.unique(np.concatenate([[0], np.maximum(marks - 1, 0)]))
    stops = np.append(starts[1:], n_major)
    yield from ((int(a), int(b)) for a, b in zip(starts, stops, strict=True) if b > a)


# --------------------------------------------------------------------------- dense


def row_bounds(n_rows: int, step: int) -> Iterator[tuple[int, int]]:
    """Runs of ``step`` rows (one empty run when there are none)."""
    if n_rows == 0:
        yield 0, 0
    for start in range(0, n_rows, step):
        yield start, min(n_rows, start + step)


@dataclass
class DenseMatrix:
    """A dense matrix on disk, read in blocks of rows."""

    source: ArraySource
    format: str = "dense"

    @property
    def shape(self) -> tuple[int, int]:
        return self.source.shape[0], self.source.shape[1]

    def close(self) -> None:
        """Close the file its array holds open."""
        _close(self.source)

    def blocks(self) -> Generator[tuple[int, int, Any], None, None]:
        """``(start, stop, rows)`` for blocks of about DENSE_BLOCK_BYTES, read ahead.

        A block holds whole chunks of rows where that takes at most four times as many bytes
        (a chunk cut by a block's end would be decoded twice)."""
        n_rows, n_columns = self.shape
        row_bytes = max(1, n_columns * self.source.dtype.itemsize)
        step = max(1, DENSE_BLOCK_BYTES // row_bytes)
        chunk = _chunk_rows(self.source)
        if chunk > 1 and chunk * row_bytes <= 4 * DENSE_BLOCK_BYTES:
            step = -(-step // chunk) * chunk
        bounds = list(row_bounds(n_rows, step))

        def read(start: int, stop: int) -> tuple[int, int, Any]:
            return start, stop, self.source.read(start, stop)

        return prefetched(functools.partial(read, a, b) for a, b in bounds)
