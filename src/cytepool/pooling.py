"""Pool cells into a cube: :func:`from_cells`.

Every cell adds its counts to one profile, the (group, sample) its labels name. The cells are
sorted by profile with a counting sort of their row positions, and each profile's rows are then
added one after the other, so the profile's output row stays in cache while its cells stream
past; the groups run in threads. The numba kernels (:mod:`cytepool._pool_kernels`) read CSR rows
and CSC columns in place; dense arrays are handed over as CSR blocks, row blocks from an
iterable one at a time, and the blocks of a dask array as dask tasks whose partial sums add up
in a tree. Row blocks of counts alone add into narrow (uint32) sums while they fit (see
:class:`_Sums`), on one thread while the blocks come late (see :class:`cytepool._waits.Waits`).
"""

from __future__ import annotations

import itertools
import math
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from cytepool import _pool_sums, _words
from cytepool._arrays import refuse_masked
from cytepool._assemble import from_parts, provenance_record
from cytepool._blocks import ColumnBlocks, RowBlocks
from cytepool._dask import dask_workers, is_dask_array, require_dask, tree
from cytepool._kept_pools import KeptPools
from cytepool._labels import factorize
from cytepool._pool_tables import axis_table, backend_of, feature_table
from cytepool._waits import Waits
from cytepool.cube import Cube
from cytepool.errors import InputError, InputTypeError, NotCountsWarning

__all__ = ["LAYERS", "from_cells"]

LAYERS = ("counts", "detected", "squares")
"""The layers :func:`from_cells` can make."""

# Data types the kernel reads (bool is read as uint8).
_KINDS = "biuf"
# A dense array is converted to CSR this many elements at a time (at least: a 64th of it at
# most); a CSC matrix is read in place in this many tasks of columns (of equal nonzeros).
_DENSE_BLOCK = 2**16
_COLUMN_TASKS = 16

Block = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]
# A row of a CSR block or a column of a CSC matrix: (block, line, (row, column) it starts at,
# by_row)
_Line = tuple[Block, int, tuple[int, int], bool]
# The key of partial sums under which the first value that is not a whole number is noted
_FRACTION = "first fraction"
# The layers pooled besides the sums, in the kernels' order
_EXTRA = ("detected", "squares")


def from_cells(
    counts: Any,
    *,
    sample_labels: Any,
    group_labels: Any,
    samples: Any = None,
    groups: Any = None,
    features: Any = None,
    layers: Sequence[str] = ("counts",),
    allow_float: bool = False,
) -> Cube:
    """Pool a cells x features matrix into a cube, in one pass over its nonzeros.

    Each cell is added to the profile of its group and sample. Counts held as whole numbers
    (integers, or floats such as the float32 counts of most h5ad files) pool exactly into an
    int64 layer; as soon as a value is not a whole number below 2**31, the layer becomes
    float64 and, unless ``allow_float`` says such values are meant, a
    :class:`~cytepool.errors.NotCountsWarning` names one of them and where it is. A float64
    layer holds what a float64 pass over all the cells gives, each sum added in the order of
    the cells, whatever their storage: the int64 sums so far carry over as they are when every
    one is below 2**53 (exact in float64, as a float64 pass keeps them), and X is not read
    again; when one is not, or a sum of squares no longer fit int64 before that value came, X
    is pooled again in float64 from its first cell. So an int64 overflow is an error only if
    the layer ends int64 (every value a whole number below 2**31): whether the same cells give
    a cube or an error does not depend on their order or storage (the float64 sums
    themselves are added in the order of the cells; a sparse matrix whose duplicate entries
    store a cell in pieces is checked piece by piece, see ``counts``). (An iterator of row
    blocks cannot be read again: such an overflow raises as it comes, and such sums carry
    over rounded once; a dask array's float64 sums are added in a tree, see "Pooling an
    atlas on dask".) The layer is int64 even when int32 would hold the sums: the data type is
    part of the fingerprint, so it must not depend on the values, and cubes pooled from parts
    of the data must add up (:func:`cytepool.add`, :func:`cytepool.concat`,
    ``merge_groups``) without overflowing. Nothing is accumulated in float32 and X is never
    copied: the extra memory is the output, plus, for dense input, blocks of at most a 64th
    of X.

    Parameters
    ----------
    counts
        The counts, one row per cell: a numpy array, a scipy.sparse CSR or CSC matrix or
        array, an iterable of row blocks (numpy arrays or scipy.sparse matrices, read one at
        a time: for data that does not fit in memory; at least one, which gives the number
        of features: for no cells, one block of 0 rows), or a dask array of numpy or
        scipy.sparse chunks (such as anndata's lazy readers give), pooled on dask's scheduler
        in use (see "Pooling an atlas on dask"). Values must be finite and >= 0; data types
        bool, integers, float32 and float64. A sparse matrix that stores a cell's value in
        pieces (scipy's duplicate entries) holds their sum, as scipy reads it: that cell is
        detected once and squared once. Its pieces are checked one by one, though: each must
        be >= 0, and a piece that is no whole number below 2**31 makes the layers float64
        (it is the value a NotCountsWarning names) even where their sum is one, and pieces
        that are, summing to 2**31 or more, do not; call the matrix's ``sum_duplicates()``
        first to have the sums checked.
    sample_labels, group_labels
        One label per cell (any 1-D array-like: a pandas Categorical or Series, numpy array,
        pyarrow array, polars Series, list of strings or integers, ...). The ids are the
        labels' ``str`` values, in sorted order (by code point; ``"10"`` sorts before
        ``"9"``) whatever the cells' order or the labels' type, so pooling the same cells
        always gives the same cube. Categories that no cell has are left out. As an id is a
        label's text, labels and texts must match one to one: labels that differ but read
        the same (``1`` and ``"1"``, ``0.1`` and ``numpy.float32(0.1)``) or are equal but
        read differently (``1`` and ``1.0``, ``True`` and ``1``, ``0.0`` and ``-0.0``) are an
        error, never merged or split silently; give such labels one type first. Labels that
        are equal and read the same are one id (``1.0`` and ``numpy.float32(1.0)``).
    samples, groups
        Optional tables (pandas, polars or pyarrow) with one row per id, in any order, the
        ids in a column ``sample_id`` / ``group_id`` (pandas: or the index, so named). Rows
        are put in the order of the ids. Without a table, the cube's table holds the ids.
    features
        Optional: a table with one row per column of ``counts``, in that order, the ids in a
        column ``feature_id`` (pandas: or the index, so named), or a sequence of string ids
        (such as ``adata.var_names``; ids that are not strings are refused, as a cube
        refuses them, not converted). Without it, the ids are the column positions,
        ``"0"``, ``"1"``, ...
    layers
        The layers to make, in the order given, all pooled in the same pass over the
        nonzeros: ``"counts"`` (sums of the values), ``"detected"`` (the number of cells with
        a nonzero value, int64) and ``"squares"`` (sums of the squared values, x², from which
        a variance per profile can be recovered). ``"squares"`` has the data type of
        ``"counts"``: int64 for whole numbers, exactly, else float64; like every layer it is
        a sum over cells, so it stays exact when groups are merged or samples pooled.
    allow_float
        Values that are not whole numbers are meant (such as ambient-corrected counts or
        normalized values, summed on purpose): pool them into a float64 layer without a
        warning. Raw counts pool into an int64 layer either way.

    Returns
    -------
    Cube
        A cube with layers ``(n_groups, n_samples, n_features)``, the number of cells of
        every profile (0 and zero values for a profile no cell is labelled with) and one
        provenance record, ``"from_cells"``. Id-only tables are pandas frames, or take the
        backend of a table given.

    Warns
    -----
    NotCountsWarning
        When the layer ``"counts"`` is made from values that are not whole numbers below
        2**31 (log-normalized data, say) and ``allow_float`` is False; the message names one
        such value and where it is. The check costs nothing extra: the pooling kernels see
        every value anyway.

    Raises
    ------
    TypeError
        For an unsupported input type or data type, unknown layers or ``layers`` that is no
        sequence of names, labels that are not an array-like (None, a number), a label that
        cannot be hashed (a list, a dict), ``features`` ids that are not strings (or one
        string), or counts or labels given as a numpy masked array (whose mask would be
        lost: fill or drop the masked values first).
    ImportError
        For a dask array when dask's array module cannot be imported (the message names
        the extra to install).
    OverflowError
        When a sum of squares of an int64 layer does not fit int64, or a float64 sum of
        squares or of counts is infinite (of finite values): a
        :class:`~cytepool.errors.SumOverflowError` naming the layer, group and sample.
    ValueError
        For a missing label (None, NaN, NA or null: the message counts them), labels that
        are not 1-D, labels that do not match their texts one to one (naming two of them),
        labels and counts of different lengths, a value
        that is negative, infinite or NaN (naming the cell and feature), a sparse matrix
        that is not valid (indices out of range; an indptr that does not start at 0,
        decreases or ends past the values stored), a table lacking
        rows for ids the labels hold or holding rows for ids they do not (both named), a
        features table of the wrong length, or a missing ``features`` id.

    Examples
    --------
    >>> import numpy as np
    >>> import cytepool
    >>> counts = np.array([[1.0, 0.0], [2.0, 5.0], [0.0, 1.0]], dtype=np.float32)
    >>> cube = cytepool.from_cells(
    ...     counts,
    ...     sample_labels=["s2", "s1", "s2"],
    ...     group_labels=["T", "T", "B"],
    ...     features=["CD3E", "MS4A1"],
    ...     layers=("counts", "detected"),
    ... )
    >>> cube
    <Cube 2 groups x 2 samples x 2 features; layers: counts int64 (memory), detected int64 (memory); normalization: none>
    >>> cube.profiles("T")
    array([[2, 5],
           [1, 0]])
    >>> cube.cells
    array([[0, 1],
           [1, 1]])
    """  # noqa: E501
    names = _check_layers(layers)  # before the labels, whose errors are found later
    sample_codes, sample_ids = factorize(sample_labels, "sample_labels")
    group_codes, group_ids = factorize(group_labels, "group_labels")
    return from_codes(
        counts,
        (sample_codes, sample_ids),
        (group_codes, group_ids),
        samples=samples,
        groups=groups,
        features=features,
        layers=names,  # a tuple: an iterator given is read once
        allow_float=allow_float,
    )


def from_codes(
    counts: Any,
    sample_labels: tuple[np.ndarray[Any, Any], list[str]],
    group_labels: tuple[np.ndarray[Any, Any], list[str]],
    *,
    samples: Any,
    groups: Any,
    features: Any,
    layers: Sequence[str],
    allow_float: bool,
) -> Cube:
    """:func:`from_cells` of labels already factorized, each ``(codes, ids)``: an int64 code
    per cell into the sorted ids that occur, as :func:`cytepool._labels.factorize` gives them.

    :mod:`cytepool.io.anndata` factorizes the obs columns once (for the covariates too) and
    hands the codes on here, so they are not factorized again.
    """
    wanted = _check_layers(layers)
    (sample_codes, sample_ids), (group_codes, group_ids) = sample_labels, group_labels
    if sample_codes.size != group_codes.size:
        msg = (
            f"sample_labels and group_labels: expected one label per cell in each, found "
            f"{sample_codes.size} and {group_codes.size} labels"
        )
        raise InputError(msg)
    n_groups, n_samples = len(group_ids), len(sample_ids)
    backend = backend_of(samples, groups, features)
    tables = {
        "samples": axis_table(samples, sample_ids, "samples", backend),
        "groups": axis_table(groups, group_ids, "groups", backend),
    }
    is_dask_array(counts)  # refuses dask's other collections now (a Delayed's shape is lazy)
    shape: tuple[Any, ...] = getattr(counts, "shape", ())
    if len(shape) == 2:  # else known once pooled (row blocks)
        tables["features"] = feature_table(features, shape[1], backend)
    profiles = group_codes * n_samples + sample_codes
    extra = tuple(name for name in _EXTRA if name in wanted)
    kept = _pool_sums.KEPT.get()
    try:
        kind, sums, fraction, overflow = _pool_exactly(
            counts, profiles, (n_groups, n_samples), extra, kept is not None
        )
        _pool_sums.check_finite(sums, wanted)
    except _pool_sums.Overflow as error:
        raise _pool_sums.overflow_error(error, group_ids, sample_ids) from None
    if overflow is not None and kept is not None:  # float64 sums of whole numbers, kept
        kept.append(_pool_sums.overflow_error(overflow, group_ids, sample_ids))
    if fraction is not None and "counts" in wanted and not allow_float:
        _warn_not_counts(*fraction)
    if "features" not in tables:
        tables["features"] = feature_table(features, sums["counts"].shape[2], backend)
    record = provenance_record(
        "from_cells", {"layers": list(wanted), "cells": int(profiles.size), "input": kind}, ()
    )
    return from_parts(
        {name: sums[name] for name in wanted},
        **tables,
        cells=np.bincount(profiles, minlength=n_groups * n_samples).reshape(n_groups, n_samples),
        normalization=None,
        metadata=None,
        provenance=(record,),
        digests=None,
    )


def _pool_exactly(
    counts: Any, profiles: Any, axes: tuple[int, int], extra: tuple[str, ...], keep: bool
) -> tuple[
    str, dict[str, np.ndarray[Any, Any]], tuple[int, int, float] | None, _pool_sums.Overflow | None
]:
    """:func:`_pool`, and again in float64 from the start when the int64 sums cannot give
    the layers: a sum of squares that did not fit int64 (the layers may yet end float64), or
    sums past 2**53 when a value that is no whole number below 2**31 came (carried over, they
    would not be what a float64 pass gives). Then whole numbers alone raise Overflow: the
    layers are int64, and a sum of squares does not fit; with ``keep``, that Overflow comes
    back with the float64 sums, last of the four results (see
    :func:`cytepool._pool_sums.overflows_kept`). Counts that cannot be read again (an iterator
    of row blocks) are pooled once: such an Overflow is raised as it comes, and such sums are
    carried over.
    """
    again = _reader(counts)
    try:
        return (*_pool(counts, profiles, axes, extra, "once" if again is None else "first"), None)
    except (_pool_sums.Overflow, _pool_sums.Inexact) as error:
        if again is None:
            raise
        first = error
    _close_blocks(counts)  # the first pass's progress bar ends before the second's starts
    kind, sums, fraction = _pool(again(), profiles, axes, extra, "float")
    if fraction is not None:  # the layers are float64
        return kind, sums, fraction, None
    # Whole numbers: int64 layers, and the sum the first pass found did not fit (a float64 sum
    # near 2**63 could not tell which one).
    if not keep or not isinstance(first, _pool_sums.Overflow):
        raise first
    return kind, sums, fraction, first


def _close_blocks(counts: Any) -> None:
    """Close the generator of row or column blocks a pass stopped in (its ``finally``
    clauses run now: a progress bar ends), if ``counts`` are such blocks."""
    close = getattr(getattr(counts, "blocks", None), "close", None)
    if callable(close):
        close()


def _reader(counts: Any) -> Callable[[], Any] | None:
    """How to read ``counts`` again for a second pass, or None if it cannot be."""
    if isinstance(counts, RowBlocks | ColumnBlocks):
        return counts.again
    if isinstance(counts, np.ndarray) or _sparse_format(counts) or is_dask_array(counts):
        return lambda: counts
    if isinstance(counts, Iterable) and not isinstance(counts, Iterator):  # a list of blocks
        return lambda: counts
    return None


def _warn_not_counts(row: int, column: int, value: float) -> None:
    msg = (
        f"{_words.matrix()}: not every value is a count (a whole number below 2**31), e.g. "
        f"{value:.6g} at {_words.place(row, column)}; the layer 'counts' holds float64 sums. "
        f"If you meant to pool counts, {_words.pick_counts()}; if these values are meant, "
        f"pass {_words.option('allow_float')} to pool them without this warning"
    )
    warnings.warn(NotCountsWarning(msg), stacklevel=_words.stacklevel())


def _check_layers(layers: Any) -> tuple[str, ...]:
    if not isinstance(layers, str | Iterable):
        msg = f"layers: expected a sequence of names among {list(LAYERS)}, found "
        msg += f"{_words.brief(layers)}"
        raise InputTypeError(msg)
    names = (layers,) if isinstance(layers, str) else tuple(layers)
    unknown = [name for name in names if name not in LAYERS]
    if unknown or not names or len(set(names)) != len(names):
        msg = f"layers: expected distinct names among {list(LAYERS)}, found {list(names)}"
        raise (InputTypeError if unknown else InputError)(msg)
    return names


# --------------------------------------------------------------------------- pooling


class _Sums:
    """Running sums of every profile: int64 while every value is whole, then float64.

    With ``narrow``, the sums of counts alone (no extra layers) start as uint32, each
    profile's with a bound on its sums (see :func:`cytepool._pool_kernels.add_narrow`), and
    become int64 when a bound would pass 2**32 - 1 or another path than the CSR kernel adds:
    blocks of cells in random order walk through the sums of every profile, and narrow sums
    take half the cache and memory.
    """

    def __init__(
        self,
        profiles: Any,
        n_groups: int,
        n_samples: int,
        n_features: int,
        extra: tuple[str, ...],
        offset: tuple[int, int] = (0, 0),
        start: dict[str, np.ndarray[Any, Any]] | None = None,
        small_values: int | None = None,
        narrow: bool = False,
        mode: str = "once",
    ):
        self.profiles = profiles
        self.offset = offset  # of these rows and columns in counts, for messages
        self.n_groups, self.n_samples, self.n_features = n_groups, n_samples, n_features
        n_profiles = n_groups * n_samples
        narrow = narrow and start is None and not extra and mode != "float"
        if start is None:  # else go on adding into the sums of arrays()
            dtype = np.float64 if mode == "float" else np.uint32 if narrow else np.int64
            start = {"counts": np.zeros((n_profiles, n_features), dtype=dtype)}
        self.totals = start["counts"]
        # while the sums are narrow, a bound on each profile's; else empty
        self.bound = np.zeros(n_profiles if narrow else 0, dtype=np.int64)
        # the first value that is not a whole number below 2**31: (row, column, value)
        self.fraction: tuple[int, int, float] | None = _fraction_of(start)
        dtype = np.int64 if narrow else self.totals.dtype
        self.detected = _start(start, "detected", "detected" in extra, n_features, np.int64)
        self.squares = _start(start, "squares", "squares" in extra, n_features, dtype)
        # a bound on every sum of squares, while the numpy path adds them unchecked (None:
        # not known yet, for sums that started from a partial sum)
        self.squares_bound: float | None = None if start is not None else 0.0
        # the most stored values of a block pooled with numpy (see _pool_sums.small_values)
        self.small_values = _pool_sums.SMALL_VALUES if small_values is None else small_values
        self.threads: int | None = None  # the kernel's threads (None: numba's count)
        # how the sums are pooled (see _pool): "once" (the cells cannot be read again), "first"
        # (int64 sums past EXACT_FLOAT are not carried over into float64: Inexact) or "float"
        # (float64 from the start; each block is searched for the first fraction)
        self.mode = mode

    def add(self, block: Block, first: int) -> None:
        """Add a CSR block of the cells from ``first``, one group per task."""
        if not self.n_groups:
            return
        indptr = block[2]
        profiles = self.profiles[first : first + len(indptr) - 1]
        self._note_fraction(block, True, (self.offset[0] + first, self.offset[1]))
        if self._add_small(block, profiles, first, by_row=True):
            return
        from cytepool import _pool_kernels as kernels  # numba: only for large blocks

        rows, starts = kernels.sort_rows(profiles, self.n_groups * self.n_samples)
        resume = starts[: -1 : self.n_samples].copy()
        groups = np.argsort(-np.diff(resume, append=starts[-1]), kind="stable")  # largest first

        def line(g: int) -> _Line:
            row = int(rows[resume[g]])
            return block, row, (self.offset[0] + first + row, self.offset[1]), True

        args = (*block, rows, starts)
        self._run(kernels.scatter, args, resume, list(groups), line)

    def add_columns(self, matrix: Any, first: int, column0: int = 0, what: str = "") -> None:
        """Add a CSC block of the cells from ``first``, read in place, in tasks of columns:
        its columns are those of the sums from ``column0`` on (a block of columns adds
        straight into its own columns of the sums); ``what`` names it in errors (by default
        the counts matrix)."""
        self._widen()
        indptr = _pool_sums.check_indptr(matrix, "csc", what or _words.matrix())
        block = (_data(matrix.data, "counts"), matrix.indices, indptr)
        profiles = self.profiles[first : first + matrix.shape[0]]
        at = (self.offset[0] + first, self.offset[1] + column0)
        self._note_fraction(block, False, at)
        if self._add_small(block, profiles, first, column0=column0):
            return
        from cytepool import _pool_kernels as kernels  # numba: only for large blocks

        n_columns = matrix.shape[1]
        target = max(int(indptr[-1]) // _COLUMN_TASKS, 1)
        bounds = [0]
        while bounds[-1] < n_columns:
            stop = int(np.searchsorted(indptr, indptr[bounds[-1]] + target, side="right")) - 1
            bounds.append(min(max(stop, bounds[-1] + 1), n_columns))
        resume = np.array(bounds[:-1], dtype=np.int64)

        def line(task: int) -> _Line:
            column = int(resume[task])
            at = (self.offset[0] + first, self.offset[1] + column0 + column)
            return block, column, at, False

        args = (*block, profiles, np.array(bounds, dtype=np.int64), column0)
        self._run(kernels.scatter_columns, args, resume, list(range(len(resume))), line)

    def _run(
        self,
        kernel: Any,
        args: tuple[Any, ...],
        resume: Any,
        tasks: list[int],
        line: Callable[[int], _Line],
    ) -> None:
        """Run the kernel's tasks in threads until all are done.

        A task that meets a value that is not a whole number stops there; once all have run,
        the first such value is noted, the sums become float64 and the stopped tasks go on
        from where they stopped. So too, with int64 sums, tasks whose narrow sums are full.
        A task that meets an invalid value raises. ``line(task)`` is where a stopped task
        stopped.
        """
        from cytepool import _pool_kernels as kernels

        while tasks:
            integers = self.totals.dtype.kind in "iu"
            sums = (self.totals, self.detected, self.squares, self.bound)
            status = _run_tasks(kernel, (*args, sums, resume, integers), tasks, self.threads)
            codes = dict(zip(tasks, status, strict=True))
            for task, code in codes.items():
                if code == kernels.OVERFLOW:
                    raise _pool_sums.Overflow(self.overflowed())
                if code not in (kernels.DONE, kernels.NOT_INTEGER, kernels.FULL):
                    _raise_invalid(*line(task))
            fractions = [task for task in tasks if codes[task] == kernels.NOT_INTEGER]
            if kernels.FULL in status:
                self._widen()
            if fractions:
                self._to_float64(line(fractions[0]))
            tasks = [task for task in tasks if codes[task]]
        self.squares_bound = np.inf if self.squares.shape[1] else 0.0  # numba checks from now

    def _add_small(
        self, block: Block, profiles: Any, first: int, *, by_row: bool = False, column0: int = 0
    ) -> bool:
        """Add a small CSR (``by_row``) or CSC block (of the columns from ``column0``) with
        numpy; False if it is not small."""
        values = block[0][: int(block[2][-1])]
        if values.size > self.small_values:
            return False
        if self.squares.shape[1] and not _pool_sums.distinct_lines(block):
            return False  # a repeated cell is squared once: the kernels do that
        self._widen()
        if self.squares_bound is None:
            self.squares_bound = float(self.squares.max(initial=0))
        bound = self.squares_bound
        if self.squares.shape[1] and self.squares.dtype.kind == "i":  # inf, NaN: not small
            with np.errstate(over="ignore", invalid="ignore"):
                bound += float(np.square(values, dtype=np.float64).sum())
        if not bound < _pool_sums.SQUARES_LIMIT:  # (or NaN) the kernels check every addition
            return False
        for start, stop in _pool_sums.pieces(block[2], _pool_sums.PIECE_VALUES):
            piece = _pool_sums.piece(block, start, stop)
            self._scatter(piece, column0 + start, profiles, first, by_row=by_row)
        self.squares_bound = bound
        return True

    def _scatter(self, piece: Block, line0: int, profiles: Any, first: int, by_row: bool) -> None:
        """Add a piece of a block (its lines from ``line0``) with numpy, whole or not at all."""
        n_positions = self.n_features if by_row else len(profiles)
        while True:
            integers = self.totals.dtype.kind == "i"
            sums = (self.totals, self.detected, self.squares)
            status, line = _pool_sums.scatter(
                piece, by_row, n_positions, profiles, sums, integers, line0
            )
            if status == 0:
                return
            row, column = self.offset[0] + first, self.offset[1]
            at = (row + line, column) if by_row else (row, column + line)
            where = (piece, line - line0, at, by_row)
            if status == _pool_sums.INVALID:
                _raise_invalid(*where)
            self._to_float64(where)

    def _note_fraction(self, block: Block, by_row: bool, at: tuple[int, int]) -> None:
        """In a float64 pass, note the block's first value that is no whole number (at
        ``at``: its first cell), until one is noted."""
        if self.mode == "float" and self.fraction is None:
            self.fraction = _pool_sums.fraction_in(block, by_row, at)

    def _to_float64(self, where: _Line) -> None:
        """Note the first value that is no whole number (at ``where``, if the first met) and
        make the sums float64; Inexact in a first pass if a sum so far is past EXACT_FLOAT."""
        if self.mode == "first" and self.totals.dtype.kind in "iu":
            largest = max(self.totals.max(initial=0), self.squares.max(initial=0))
            if largest > _pool_sums.EXACT_FLOAT:
                raise _pool_sums.Inexact
        self.fraction = self.fraction or _pool_sums.first_fraction(*where)
        self.totals = self.totals.astype(np.float64)
        self.squares = self.squares.astype(np.float64)
        self.bound = self.bound[:0]

    def _widen(self) -> None:
        """Make narrow sums int64 (exact: each is within its bound)."""
        if self.totals.dtype.kind == "u":
            self.totals = self.totals.astype(np.int64)
            self.bound = self.bound[:0]

    def overflowed(self) -> int:
        """The first profile with a sum of squares that wrapped around (turned negative)."""
        return int(np.argmax((self.squares < 0).any(axis=1)))

    def arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        """The sums, ``(n_profiles, n_features)``: counts, and detected and squares if wanted."""
        self._widen()
        arrays = {"counts": self.totals}
        if self.detected.shape[1] == self.n_features:
            arrays["detected"] = self.detected
        if self.squares.shape[1] == self.n_features:
            arrays["squares"] = self.squares
        if self.fraction is not None:
            arrays[_FRACTION] = np.array(self.fraction, dtype=np.float64)
        return arrays


def _start(
    start: Mapping[str, np.ndarray[Any, Any]], name: str, wanted: bool, n_features: int, dtype: Any
) -> np.ndarray[Any, Any]:
    """The running sums of an extra layer: those in ``start``, zeros, or no columns."""
    if name in start:
        return start[name]
    return np.zeros((len(start["counts"]), n_features if wanted else 0), dtype=dtype)


def _run_tasks(
    kernel: Any, args: tuple[Any, ...], tasks: list[int], threads: int | None = None
) -> list[int]:
    """``kernel(*args, task)`` for each task, in ``threads`` threads (None: numba's count)
    from the main thread."""
    import numba

    threads = numba.get_num_threads() if threads is None else threads
    if min(threads, len(tasks)) <= 1 or threading.current_thread() is not threading.main_thread():
        return [kernel(*args, task) for task in tasks]
    return list(_KERNEL_THREADS.get(threads).map(lambda task: kernel(*args, task), tasks))


_KERNEL_THREADS = KeptPools("cytepool-kernel")
"""The kernel's threads, kept for the blocks that follow: starting and joining two threads for
each block took 0.5 ms, handing a kept pool its tasks 0.15 ms."""


def _raise_invalid(block: Block, line: int, at: tuple[int, int], by_row: bool) -> None:
    """Raise the ValueError for the first invalid value or index of a row (or column).

    ``line`` is a row of a CSR block (``by_row``) or a column of a CSC matrix; ``at`` is the
    (row, column) in counts where it starts.
    """
    data, indices, indptr = block
    values = data[indptr[line] : indptr[line + 1]]
    positions = indices[indptr[line] : indptr[line + 1]]
    for value, i in zip(values.tolist(), positions.tolist(), strict=True):
        if not (value >= 0 and value != float("inf")):
            row, column = (at[0], at[1] + i) if by_row else (at[0] + i, at[1])
            msg = (
                f"{_words.matrix()}: {_words.place(row, column)} holds {value!r}; expected "
                f"counts, finite values >= 0: {_words.pick_counts()}"
            )
            raise InputError(msg)
    what = f"row {at[0]} holds column" if by_row else f"column {at[1]} holds row"
    msg = f"{_words.matrix()}: the sparse matrix is invalid: {what} indices out of range"
    raise _words.invalid_indices(msg)


def _fraction_of(arrays: Mapping[str, np.ndarray[Any, Any]]) -> tuple[int, int, float] | None:
    """The (row, column, value) a partial sum noted, if any (see :meth:`_Sums.arrays`)."""
    if _FRACTION not in arrays:
        return None
    row, column, value = arrays[_FRACTION].tolist()
    return int(row), int(column), float(value)


def _pool(
    counts: Any,
    profiles: Any,
    axes: tuple[int, int],
    extra: tuple[str, ...],
    mode: str = "once",
) -> tuple[str, dict[str, np.ndarray[Any, Any]], tuple[int, int, float] | None]:
    """Pool ``counts`` (any supported input) into layers; also a name for its kind, and the
    first value that is not a whole number below 2**31 with its row and column, if any.

    ``axes`` is ``(n_groups, n_samples)``; ``mode`` as :class:`_Sums` takes it.
    """
    n_cells, (n_groups, n_samples) = profiles.size, axes
    fmt = _sparse_format(counts)
    if is_dask_array(counts):
        kind, arrays = "dask", _pool_dask(counts, profiles, n_groups, n_samples, extra, mode)
    elif isinstance(counts, ColumnBlocks):
        sums = _pool_columns(counts, profiles, n_groups, n_samples, extra, mode)
        kind, arrays = "csc", sums.arrays()
    elif isinstance(counts, RowBlocks):
        args = (profiles, n_groups, n_samples, extra, counts.values, mode)
        kind, arrays = "row blocks", _pool_blocks(counts.blocks, *args).arrays()
    elif fmt is not None or isinstance(counts, np.ndarray):
        _check_rows(counts, n_cells)
        small = _pool_sums.small_values(counts.nnz if fmt else counts.size)
        shape = (n_groups, n_samples, counts.shape[1])
        sums = _Sums(profiles, *shape, extra, small_values=small, mode=mode)
        _add_block(sums, counts, 0, _words.matrix())
        kind, arrays = fmt or "dense", sums.arrays()
    elif hasattr(counts, "shape") or not isinstance(counts, Iterable) or isinstance(counts, str):
        msg = (
            "counts: expected a numpy array, a scipy.sparse CSR or CSC matrix, a dask array or "
            f"an iterable of row blocks, found {type(counts).__name__}"
        )
        raise InputTypeError(msg)
    else:
        sums = _pool_blocks(counts, profiles, n_groups, n_samples, extra, None, mode)
        kind, arrays = "row blocks", sums.arrays()
    fraction = _fraction_of(arrays)
    arrays.pop(_FRACTION, None)
    shape = (n_groups, n_samples, arrays["counts"].shape[1])
    return kind, {name: array.reshape(shape) for name, array in arrays.items()}, fraction


def _pool_blocks(
    blocks: Iterable[Any],
    profiles: Any,
    n_groups: int,
    n_samples: int,
    extra: tuple[str, ...],
    values: int | None = None,
    mode: str = "once",
) -> _Sums:
    """The sums of row blocks, of ``values`` stored values in all if known."""
    small = _pool_sums.small_values(values)
    sums: _Sums | None = None
    first = 0
    timed = Waits(blocks)
    for i, block in enumerate(timed):
        what = f"counts: row block {i}"
        if not (isinstance(block, np.ndarray) or _sparse_format(block)) or block.ndim != 2:
            msg = f"{what}: expected a 2-D numpy array or scipy.sparse matrix, found "
            msg += f"{type(block).__name__}{getattr(block, 'shape', '')}"
            raise InputTypeError(msg)
        if sums is None:
            shape = (n_groups, n_samples, block.shape[1])
            sums = _Sums(profiles, *shape, extra, small_values=small, narrow=True, mode=mode)
        if block.shape[1] != sums.n_features:
            msg = f"{what}: expected {sums.n_features} columns like the first, found {block.shape}"
            raise InputError(msg)
        if first + block.shape[0] > profiles.size:
            msg = f"{what}: the blocks hold more rows than the {profiles.size} labels"
            raise InputError(msg)
        sums.threads = 1 if timed.behind() else None
        _add_block(sums, block, first, what)
        first += block.shape[0]
    if sums is None and not profiles.size:  # the blocks tell the number of features
        msg = (
            "counts: expected at least one row block (it gives the number of features), found "
            "none; for no cells, give one block of 0 rows, such as numpy.zeros((0, n_features))"
        )
        raise InputError(msg)
    if sums is None or first != profiles.size:
        msg = f"counts: the row blocks hold {first} rows, expected {profiles.size} (one per label)"
        raise InputError(msg)
    return sums


def _pool_columns(
    counts: ColumnBlocks,
    profiles: Any,
    n_groups: int,
    n_samples: int,
    extra: tuple[str, ...],
    mode: str = "once",
) -> _Sums:
    """The sums of a matrix given as blocks of its columns, each added into its columns."""
    n_cells, n_features = counts.shape
    if n_cells != profiles.size:
        msg = f"counts: expected one row per label ({profiles.size}), found {n_cells} rows"
        raise InputError(msg)
    small = _pool_sums.small_values(counts.values)
    sums = _Sums(profiles, n_groups, n_samples, n_features, extra, small_values=small, mode=mode)
    done = 0
    for start, stop, block in counts.blocks:
        expected = (n_cells, stop - start)
        if _sparse_format(block) != "csc" or start != done or block.shape != expected:
            msg = (
                f"counts: column block [{start}, {stop}): expected a CSC matrix of shape "
                f"{expected} starting at column {done}, found "
                f"{type(block).__name__}{getattr(block, 'shape', '')}"
            )
            raise InputError(msg)
        sums.add_columns(block, 0, start, f"counts: column block [{start}, {stop})")
        done = stop
    if done != n_features:
        msg = f"counts: the column blocks cover {done} of the {n_features} columns"
        raise InputError(msg)
    return sums


def _add_block(sums: _Sums, block: Any, first: int, what: str) -> None:
    """Add a numpy array or scipy.sparse block of rows (a copy only for neither CSR nor CSC)."""
    refuse_masked(block, what)
    if isinstance(block, np.ndarray):  # a subclass (anndata's view of X, say) as a plain view
        for start, csr in _dense_csr(np.asarray(block), what):
            sums.add(csr, first + start)
        return
    fmt = _sparse_format(block)
    if fmt == "csc":
        sums.add_columns(block, first, what=what)
        return
    if fmt != "csr":
        block = block.tocsr()
    indptr = _pool_sums.check_indptr(block, "csr", what)
    sums.add((_data(block.data, what), block.indices, indptr), first)


def _dense_csr(array: np.ndarray[Any, Any], what: str) -> Iterator[tuple[int, Block]]:
    """CSR blocks of a dense array's rows, each of about a 64th of it at most."""
    step = max(1, max(_DENSE_BLOCK, array.size // 64) // max(array.shape[1], 1))
    for start in range(0, array.shape[0], step):
        block = _data(array[start : start + step], what)
        rows, columns = np.nonzero(block)
        indptr = np.zeros(block.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=block.shape[0]), out=indptr[1:])
        yield start, (block[rows, columns], _indices(columns), indptr)


# --------------------------------------------------------------------------- dask


def _pool_dask(
    counts: Any,
    profiles: Any,
    n_groups: int,
    n_samples: int,
    extra: tuple[str, ...],
    mode: str = "once",
) -> dict[str, np.ndarray[Any, Any]]:
    """Pool a dask array: chains of blocks into partial sums, then a tree of additions.

    Each chain of consecutive row blocks adds them, one task per block, into one partial sum
    (a dense ``(n_profiles, n_features)`` array: making one per block would cost as much as
    pooling a small block); there are enough chains for every worker. Whole-number blocks
    give int64 partial sums, so integer counts add exactly; a block with other values makes
    its chain's sums float64, and so does every sum that chain enters. One compute, on the
    scheduler in use (threads, processes or a dask.distributed client).
    """
    dask = require_dask()
    if any(np.isnan(size) for sizes in counts.chunks for size in sizes):
        msg = "counts: the dask array has unknown chunk sizes; call .compute_chunk_sizes() first"
        raise InputError(msg)
    _check_rows(counts, profiles.size)
    _data(np.empty(0, dtype=counts.dtype), "counts")
    rows = np.cumsum((0, *counts.chunks[0]))
    columns = np.cumsum((0, *counts.chunks[1]))
    blocks = counts.to_delayed()
    n_chains = min(len(blocks), max(4 * dask_workers(dask), math.isqrt(len(blocks) - 1) + 1))
    cuts = np.linspace(0, len(blocks), n_chains + 1).round().astype(int)
    pool = dask.delayed(_pool_chunk)
    trees = []
    for j in range(blocks.shape[1]):
        chains = []
        for first, stop in itertools.pairwise(cuts):
            partial = None
            for i in range(first, stop):
                where = (rows[i], columns[j])
                block_profiles = profiles[rows[i] : rows[i + 1]]
                shape = (rows[i + 1] - rows[i], columns[j + 1] - columns[j])
                args = (block_profiles, (n_groups, n_samples), extra, where, shape, mode)
                partial = pool(partial, blocks[i, j], *args)
            chains.append(partial)
        trees.append(tree(dask.delayed(_add_partials), chains))
    finals = dask.compute(*trees)
    fractions = [final.pop(_FRACTION) for final in finals if _FRACTION in final]
    arrays = {name: np.concatenate([f[name] for f in finals], axis=1) for name in finals[0]}
    first = min(fractions, key=lambda fraction: tuple(fraction[:2]), default=None)  # row, column
    return arrays if first is None else {**arrays, _FRACTION: first}


def _pool_chunk(
    partial: dict[str, np.ndarray[Any, Any]] | None,
    block: Any,
    profiles: Any,
    axes: tuple[int, int],
    extra: tuple[str, ...],
    offset: tuple[int, int],
    shape: tuple[int, int],
    mode: str = "once",
) -> dict[str, np.ndarray[Any, Any]]:
    """Add one block of a dask array, of the declared ``shape``, to the partial sums of its
    chain (a dask task).

    The chain's partial sums have this task as their one consumer: they are added into.
    """
    n_groups, n_samples = axes
    if not (isinstance(block, np.ndarray) or _sparse_format(block)):
        msg = (
            "counts: expected dask chunks that are numpy arrays or scipy.sparse matrices, "
            f"found {type(block).__name__}"
        )
        raise InputTypeError(msg)
    if tuple(block.shape) != tuple(map(int, shape)):  # dask trusts its declared chunks
        msg = (
            f"counts: the dask chunk at row {offset[0]}, column {offset[1]} has shape "
            f"{tuple(block.shape)}, but the array declares {tuple(map(int, shape))} (its "
            "chunks); a function mapped over the blocks must keep their shape, or declare "
            "the chunks it makes (map_blocks(..., chunks=...))"
        )
        raise InputError(msg)
    sums = _Sums(profiles, n_groups, n_samples, block.shape[1], extra, offset, partial, mode=mode)
    _add_block(sums, block, 0, "counts")
    return sums.arrays()


def _add_partials(*parts: dict[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
    """The sum of partial sums, into the first (each partial has this one consumer).

    int64 + float64 gives float64, exact below 2**53 (so is every sum of such counts).
    """
    total = dict(parts[0])
    for part in parts[1:]:
        for name, values in part.items():
            if name == _FRACTION:  # the first one noted, in the order of the rows
                total.setdefault(name, values)
                continue
            with np.errstate(over="ignore"):  # infinite float64 sums raise later
                if np.result_type(total[name], values) == total[name].dtype:
                    np.add(total[name], values, out=total[name])
                    _pool_sums.check_wrap(total[name], values)
                else:
                    total[name] = total[name] + values
    return total


def _data(values: np.ndarray[Any, Any], what: str) -> np.ndarray[Any, Any]:
    """The values as the kernel reads them: bool as uint8; other types than numbers refused."""
    kind, size = values.dtype.kind, values.dtype.itemsize
    if kind not in _KINDS or (kind == "f" and size < 4):
        msg = (
            f"{what}: expected bool, integer, float32 or float64 values, found {values.dtype} "
            "(convert with .astype(numpy.float32))"
        )
        raise InputTypeError(msg)
    return values.view(np.uint8) if kind == "b" else values


def _indices(columns: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Column indices as int32 where they fit (as scipy keeps them): fewer kernels to compile."""
    fits = columns.size == 0 or columns[-1] < np.iinfo(np.int32).max
    return columns.astype(np.int32) if fits else columns


def _sparse_format(counts: Any) -> str | None:
    """The scipy.sparse format of ``counts`` ('csr', 'csc', 'coo', ...), or None."""
    sparse = sys.modules.get("scipy.sparse")
    if sparse is None or not sparse.issparse(counts):
        return None
    return str(counts.format)


def _check_rows(counts: Any, n_cells: int) -> None:
    fmt = _sparse_format(counts)
    if fmt not in (None, "csr", "csc"):
        msg = f"counts: expected a CSR or CSC sparse matrix, found {fmt} (convert with .tocsr())"
        raise InputTypeError(msg)
    if counts.ndim != 2:
        msg = f"counts: expected a 2-D array (cells x features), found shape {counts.shape}"
        raise InputError(msg)
    if counts.shape[0] != n_cells:
        msg = f"counts: expected one row per label ({n_cells}), found {counts.shape[0]} rows"
        raise InputError(msg)
