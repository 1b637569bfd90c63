"""Pooling without numba: small blocks with numpy alone, and the checks of sums of squares.

The first :func:`cytepool.from_cells` of a process need not start numba: its set-up takes
0.4-0.6 s with the kernel cache warm, while numpy pools about 5 ms per million values and the
kernels about 3 (two threads), so below some 120 million values a first call is done sooner
without numba (measured on two cores; with more, the kernels gain and the crossover falls,
hence the margin). So until the kernels are loaded, an input of at most ``FIRST_VALUES``
stored values is pooled here; once they are, only blocks of at most ``SMALL_VALUES``. Such
inputs draw on ``NUMPY_BUDGET`` values per process (about what numpy's slower pooling may cost
against numba's set-up): a process that pools many of them starts numba once the budget is
spent, and does not pay numpy's slower pooling for ever. A block is added in pieces of whole
rows (CSR) or columns (CSC) of about ``PIECE_VALUES`` values, so numpy's temporary arrays stay
small whatever the block.

:func:`scatter` adds a CSR or CSC block into the running sums as the numba kernels of
:mod:`cytepool._pool_kernels` do, with the same results: int64 sums of whole numbers, float64
sums of other values added in the same order (so bit for bit the same), each cell counted
once in ``detected`` even where a row repeats a column, and the same statuses. It checks the
whole block (a piece) before adding anything, so a piece either is added or is not: a caller
that meets a fraction switches the sums to float64 and adds that piece again.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from cytepool.errors import InputError, SumOverflowError

__all__ = [
    "EXACT_FLOAT",
    "FIRST_VALUES",
    "INTEGER_BOUND",
    "INVALID",
    "KEPT",
    "KERNELS",
    "NUMPY_BUDGET",
    "PIECE_VALUES",
    "SMALL_VALUES",
    "SQUARES_LIMIT",
    "Inexact",
    "Overflow",
    "check_finite",
    "check_indptr",
    "check_wrap",
    "distinct_lines",
    "first_fraction",
    "fraction_in",
    "overflow_error",
    "overflows_kept",
    "piece",
    "pieces",
    "scatter",
    "small_values",
]

# Blocks of at most this many stored values are pooled here (~5 ms per million); while the
# numba kernels are not loaded, inputs of at most FIRST_VALUES.
SMALL_VALUES = 2**20
FIRST_VALUES = 2**26
NUMPY_BUDGET = 2**27
PIECE_VALUES = 2**16  # temporaries in cache: faster than larger pieces, and a few MiB
KERNELS = "cytepool._pool_kernels"  # the module of numba's kernels: once imported, numba runs
_spent = [0]  # values of inputs that small_values let numpy pool, in this process
# Below this bound on a profile's sums of squares no int64 sum of squares can wrap; above it
# the numba kernels, which check every addition, take over.
SQUARES_LIMIT = 2.0**62
# Statuses besides those of the kernels: DONE 0 and NOT_INTEGER 1.
INVALID = 2
# Whole numbers below this bound pool to int64 exactly (here and in the kernels): even 2**32
# cells of such values cannot overflow an int64 sum.
INTEGER_BOUND = 2**31
# Whole-number sums up to this bound are the same in float64, however they were added: int64
# sums carried over into float64 sums are what a float64 pass gives while none passes it.
EXACT_FLOAT = 2**53


def check_indptr(matrix: Any, fmt: str, what: str) -> np.ndarray[Any, Any]:
    """The row (CSR) or column (CSC) pointers of a scipy.sparse ``matrix`` as int64, checked
    in O(lines): one per line and one more, from 0, never decreasing and ending within the
    values stored (as many in ``data`` as in ``indices``); else an InputError naming ``what``.
    """
    indptr = np.asarray(matrix.indptr).astype(np.int64, copy=False)
    problem = _indptr_problem(indptr, matrix.shape[fmt == "csc"], matrix.indices.size)
    if matrix.data.size != matrix.indices.size:
        problem = f"data holds {matrix.data.size} values and its indices {matrix.indices.size}"
    if problem is not None:
        msg = (
            f"{what}: not a valid {fmt.upper()} matrix: its {problem}; expected an indptr "
            "that starts at 0, never decreases and ends within the values stored: rebuild "
            "the matrix (scipy's .check_format(full_check=True) tells what is wrong)"
        )
        raise InputError(msg)
    return indptr


def _indptr_problem(indptr: np.ndarray[Any, Any], n_lines: int, n_values: int) -> str | None:
    """What is wrong with ``indptr`` for ``n_lines`` rows (columns) of ``n_values``, if any."""
    if indptr.ndim != 1 or indptr.size != n_lines + 1:
        return f"indptr has {indptr.size} entries, expected {n_lines + 1}"
    if indptr[0] != 0:
        return f"indptr starts at {indptr[0]}, not 0"
    steps = np.diff(indptr)
    if steps.size and steps.min() < 0:
        at = int(np.argmax(steps < 0))
        return f"indptr decreases after entry {at} ({indptr[at]} then {indptr[at + 1]})"
    if indptr[-1] > n_values:
        return f"indptr ends at {indptr[-1]}, past the {n_values} stored values"
    return None


def small_values(total: int | None) -> int:
    """The most stored values of a block pooled here, for an input of ``total`` (None: not
    known): ``FIRST_VALUES`` while numba's kernels are not loaded, the input is no larger and
    the process has not spent ``NUMPY_BUDGET`` on such inputs (this one is then counted)."""
    if total is None or total > FIRST_VALUES or KERNELS in sys.modules:
        return SMALL_VALUES
    if total > SMALL_VALUES and _spent[0] + total > NUMPY_BUDGET:
        return SMALL_VALUES
    _spent[0] += total if total > SMALL_VALUES else 0
    return max(FIRST_VALUES, SMALL_VALUES)


def pieces(indptr: Any, size: int) -> Iterator[tuple[int, int]]:
    """Ranges ``[start, stop)`` of the lines (rows of CSR, columns of CSC) of a block, each
    holding at most ``size`` values, or one line."""
    n_lines, start = len(indptr) - 1, 0
    while start < n_lines:
        stop = int(np.searchsorted(indptr, indptr[start] + size, side="right")) - 1
        stop = min(max(stop, start + 1), n_lines)
        yield start, stop
        start = stop


def piece(block: tuple[Any, Any, Any], start: int, stop: int) -> tuple[Any, Any, Any]:
    """The lines ``[start, stop)`` of a CSR or CSC block, as a block (views but ``indptr``)."""
    data, indices, indptr = block
    first, last = int(indptr[start]), int(indptr[stop])
    return data[first:last], indices[first:last], indptr[start : stop + 1] - first


def scatter(
    block: tuple[Any, Any, Any],
    by_row: bool,
    n_positions: int,
    profiles: Any,
    sums: tuple[Any, Any, Any],
    integers: bool,
    first_line: int = 0,
) -> tuple[int, int]:
    """Add a CSR (``by_row``) or CSC block into ``sums = (total, detected, squares)``.

    ``n_positions`` is the number of columns (CSR) or rows (CSC) the indices must be below;
    ``profiles`` the profile of each row; the block's lines (rows of CSR, columns of CSC) are
    those from ``first_line`` on (a :func:`piece`). With squares wanted, no line may repeat a
    position (:func:`distinct_lines`). Returns ``(status, line)``: DONE, or
    INVALID for a value that is negative, infinite or NaN or an index out of range, or (with
    ``integers``) NOT_INTEGER for a value that is no whole number below 2**31, with the first
    line that holds one; nothing was added then.
    """
    data, indices, indptr = block
    n_values = int(indptr[-1])
    values, positions = data[:n_values], indices[:n_values]
    sizes = np.diff(indptr)
    own = np.arange(first_line, first_line + len(sizes))  # the block's lines
    if not _fine(values, positions, n_positions, integers):  # then find the first problem
        return _problem(values, positions, n_positions, integers, np.repeat(own, sizes))
    total, detected, squares = sums
    n_features = total.shape[1]
    if by_row:  # a row's profile times n_features, repeated over its values
        keys = np.repeat(profiles[own] * n_features, sizes) + positions
    else:
        keys = profiles[positions] * n_features + np.repeat(own, sizes)
    added = values.astype(total.dtype)
    with np.errstate(over="ignore"):  # infinite float64 sums raise later (check_finite)
        np.add.at(total.reshape(-1), keys, added)
        if squares.shape[1]:
            np.add.at(squares.reshape(-1), keys, added * added)
    if detected.shape[1]:
        lines = np.repeat(own, sizes)
        cells = (lines, positions) if by_row else (positions, lines)
        _count(detected, cells, values > 0, profiles, _sorted(positions, indptr))
    return 0, -1


def _fine(values: Any, positions: Any, n_positions: int, integers: bool) -> bool:
    """Whether every index is in range and every value finite and >= 0 (with ``integers``:
    a whole number below INTEGER_BOUND): one question per value, with few temporaries."""
    if not (_unsigned(positions) < n_positions).all():
        return False
    if integers:
        return bool(((values >= 0) & (values < INTEGER_BOUND) & (np.floor(values) == values)).all())
    return bool(((values >= 0) & (values < np.inf)).all())


def _problem(
    values: Any, positions: Any, n_positions: int, integers: bool, lines: Any
) -> tuple[int, int]:
    """For a block that is not :func:`_fine`: its status and the first line with a problem.

    An invalid value or index comes first; else, with ``integers``, a value that is no whole
    number below INTEGER_BOUND (the only other way a block is not fine).
    """
    bad = (_unsigned(positions) >= n_positions) | ~((values >= 0) & (values < np.inf))
    if bad.any() or not integers:
        return INVALID, int(lines[np.argmax(bad)])
    return 1, int(lines[np.argmax(_not_whole(values))])


def first_fraction(
    block: tuple[Any, Any, Any], line: int, at: tuple[int, int], by_row: bool
) -> tuple[int, int, float]:
    """The first value of a line (a row of CSR, a column of CSC) of ``block`` that is no
    whole number below INTEGER_BOUND, with its row and column in the input (the line's first
    cell is at ``at``)."""
    data, indices, indptr = block
    values = np.asarray(data[indptr[line] : indptr[line + 1]], dtype=np.float64)
    k = int(np.argmax(_not_whole(values)))
    i = int(indices[indptr[line] + k])
    row, column = (at[0], at[1] + i) if by_row else (at[0] + i, at[1])
    return row, column, float(values[k])


def fraction_in(
    block: tuple[Any, Any, Any], by_row: bool, at: tuple[int, int]
) -> tuple[int, int, float] | None:
    """The first value of a CSR (``by_row``) or CSC block, in the order stored, that is no
    whole number below INTEGER_BOUND, with its row and column in the input (the block's first
    cell is at ``at``); None if every value is one."""
    data, indices, indptr = block
    found = np.flatnonzero(_not_whole(data[: int(indptr[-1])]))
    if not found.size:
        return None
    k = int(found[0])
    line, i = int(np.searchsorted(indptr, k, side="right")) - 1, int(indices[k])
    row, column = (at[0] + line, at[1] + i) if by_row else (at[0] + i, at[1] + line)
    return row, column, float(data[k])


def _not_whole(values: Any) -> Any:
    """Where a value (finite, >= 0) is no whole number below INTEGER_BOUND: a boolean array."""
    return (values >= INTEGER_BOUND) | (np.floor(values) != values)


def _unsigned(positions: Any) -> Any:
    """Signed indices seen as unsigned (a view): negative ones are then too large."""
    return (
        positions.view(f"u{positions.dtype.itemsize}") if positions.dtype.kind == "i" else positions
    )


def distinct_lines(block: tuple[Any, Any, Any]) -> bool:
    """Whether the positions increase strictly within each line of a CSR or CSC block: no
    line repeats a position (a repeated one is one cell, its values summed, which
    :func:`scatter` would square apart; the kernels square it once)."""
    indptr = block[2]
    return _sorted(block[1][: int(indptr[-1])], indptr)


def _sorted(positions: Any, indptr: Any) -> bool:
    """Whether the indices increase strictly within each row (CSR) or column (CSC)."""
    steps = np.diff(positions) > 0
    starts = indptr[1:-1]
    starts = starts[(starts > 0) & (starts < len(positions))]
    steps[starts - 1] = True  # a new line may start lower
    return bool(steps.all())


def _count(
    detected: Any, cells: tuple[Any, Any], nonzero: Any, profiles: Any, distinct: bool
) -> None:
    """Count each (row, column) with a value > 0 once into ``detected``."""
    rows, columns = cells[0][nonzero], cells[1][nonzero]
    if not distinct:
        width = int(columns.max(initial=0)) + 1
        pairs = np.unique(rows.astype(np.int64) * width + columns)
        rows, columns = pairs // width, pairs % width
    np.add.at(detected.reshape(-1), profiles[rows] * detected.shape[1] + columns, 1)


class Overflow(Exception):
    """A sum of a profile does not fit its layer's data type: a sum of squares that does not
    fit int64 or is infinite, or a float64 sum of counts that is infinite. ``args`` are the
    profile and the layer."""

    def __init__(self, profile: int, layer: str = "squares") -> None:
        super().__init__(profile, layer)
        self.profile, self.layer = profile, layer


class Inexact(Exception):
    """Whole-number sums past EXACT_FLOAT were about to be carried over into float64 sums:
    those would not be what a float64 pass over the cells gives, so the caller pools the
    cells again in float64 (see :func:`cytepool.pooling.from_cells`)."""


def overflow_error(
    error: Overflow, group_ids: list[str], sample_ids: list[str], file: str | None = None
) -> OverflowError:
    """The error for an Overflow: the layer, group and sample named, and the ``file`` whose
    sums, added to those of the files before it, made it (files pooled into one cube)."""
    group, sample = divmod(error.profile, len(sample_ids))
    where = f"group {group_ids[group]!r} in sample {sample_ids[sample]!r}"
    if file is not None:
        where += f", with the sums of {file} added,"
    if error.layer == "counts":
        msg = (
            f"layer 'counts': a sum of {where} does not fit its data type (float64: finite, "
            "as each value is); expected smaller sums: fewer cells or smaller values per "
            "profile (such as the values divided by a constant)"
        )
    else:
        msg = (
            f"layer 'squares': a sum of squares of {where} does not fit its data type (int64: "
            "at most 2**63 - 1; float64: finite); expected smaller sums: pool without "
            "'squares', or fewer cells or smaller values per profile"
        )
    return SumOverflowError(msg)


def check_finite(sums: Mapping[str, Any], layers: Sequence[str]) -> None:
    """Raise Overflow for the first profile with an infinite float64 sum in ``sums`` (each
    ``(n_groups, n_samples, n_features)``), of counts, then of squares, among ``layers``:
    the values are finite, so such a sum did not fit (a square is infinite from ~1.3e154)."""
    for layer in ("counts", "squares"):
        array = sums.get(layer)
        if layer in layers and array is not None and array.dtype.kind == "f":
            infinite = ~np.isfinite(array).all(axis=-1).reshape(-1)
            if infinite.any():
                raise Overflow(int(np.argmax(infinite)), layer)


def check_wrap(total: Any, added: Any) -> None:
    """Raise Overflow if an int64 sum of values >= 0 wrapped (it is then below the value added)."""
    if total.dtype.kind == "i":
        wrapped = (total < added).any(axis=1)
        if wrapped.any():
            raise Overflow(int(np.argmax(wrapped)))


KEPT: contextvars.ContextVar[list[OverflowError] | None] = contextvars.ContextVar(
    "cytepool_overflows_kept", default=None
)


@contextlib.contextmanager
def overflows_kept() -> Iterator[list[OverflowError]]:
    """Within, a pooling of whole numbers whose int64 sum of squares does not fit gives its
    layers in float64, pooled again from the first cell, and appends its
    :class:`~cytepool.errors.SumOverflowError` to the list yielded instead of raising it.

    For one file of several pooled into one cube: another file may yet make the layers
    float64 (a value that is no whole number below 2**31), and then these float64 sums are
    this file's part of them, as pooling the files concatenated gives; if none does, the
    layers are int64 and the caller raises the error.
    """
    kept: list[OverflowError] = []
    token = KEPT.set(kept)
    try:
        yield kept
    finally:
        KEPT.reset(token)
