"""The numba kernels behind :func:`cytepool.from_cells`.

This module imports numba at the top, so only :mod:`cytepool.pooling` imports it, and only
inside the functions that pool. :func:`scatter` adds a block of rows in CSR form (``data``,
``indices``, ``indptr``), its rows sorted by profile (:func:`sort_rows`), one group at a time;
dense inputs reach it as CSR blocks. :func:`scatter_columns` reads a CSC matrix in place.
Both check each row (or column) first with :func:`check_row` and stop where a value is not a
whole number, so the caller can switch the sums to float64 and go on from there. Besides the
sums of the values they add, in the same pass, the number of cells with a nonzero value
(``detected``) and the sums of the squared values (``squares``), where wanted.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from cytepool._pool_sums import INTEGER_BOUND

# A group's status after scatter; for all but DONE, its resume position is the failing row.
DONE, NOT_INTEGER, INVALID_VALUE, INVALID_INDEX, OVERFLOW, FULL = 0, 1, 2, 3, 4, 5
# The largest sum narrow (uint32) sums hold (see add_narrow).
NARROW_LIMIT = 2**32 - 1

# Flags of check_row.
_UNSORTED, _NOT_INTEGER, _INVALID_VALUE, _INVALID_INDEX = 1, 2, 4, 8
# scatter asks for the row this many rows ahead to be brought into cache (see prefetch_row).
_AHEAD = 8
_LINE = 64  # bytes of a cache line


def _prefetch_typing(typingctx: Any, array: Any, index: Any) -> Any:  # pragma: no cover
    """Ask the CPU to bring ``array[index]`` into cache (LLVM's prefetch: a hint that never
    faults, so any index will do; ``index`` must be below the array's length to mean anything)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        kind = signature.args[0]
        view = context.make_array(kind)(context, builder, args[0])
        where = cgutils.get_item_pointer(context, builder, kind, view, [args[1]])
        byte, word = ir.IntType(8).as_pointer(), ir.IntType(32)
        function = builder.module.declare_intrinsic(
            "llvm.prefetch", [byte], ir.FunctionType(ir.VoidType(), [byte, word, word, word])
        )  # read, keep in all cache levels, data
        builder.call(function, [builder.bitcast(where, byte), word(0), word(3), word(1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen


_prefetch: Any = intrinsic(_prefetch_typing)  # a function of (array, index) in compiled code


@numba.njit(cache=True, nogil=True, inline="always")
def prefetch_row(data: Any, indices: Any, start: int, stop: int) -> None:  # pragma: no cover
    """Ask for the values and columns of a row (``[start, stop)``) to be brought into cache.

    scatter adds rows in profile order, so each row lies somewhere else in memory: asked for
    some rows ahead, a row has arrived by the time check_row reads it (~4 % faster).
    """
    for k in range(start, stop, _LINE // data.itemsize):
        _prefetch(data, k)
    for k in range(start, stop, _LINE // indices.itemsize):
        _prefetch(indices, k)


@numba.njit(cache=True, nogil=True)
def sort_rows(profiles: Any, n_profiles: int) -> Any:  # pragma: no cover - compiled
    """Counting sort of row positions by profile: ``(rows, starts)``."""
    starts = np.zeros(n_profiles + 1, np.int64)
    for p in profiles:
        starts[p + 1] += 1
    for p in range(n_profiles):
        starts[p + 1] += starts[p]
    fill = starts[:-1].copy()
    rows = np.empty(profiles.shape[0], np.int64)
    for r in range(profiles.shape[0]):
        p = profiles[r]
        rows[fill[p]] = r
        fill[p] += 1
    return rows, starts


@numba.njit(cache=True, nogil=True)
def check_row(
    values: Any, columns: Any, n_columns: int, order: bool, integers: bool
) -> int:  # pragma: no cover - compiled
    """Flags of one row: non-integer values, invalid values or columns; unsorted columns
    (repeats possible) if ``order`` is asked for.

    A first loop asks only whether every value and column is fine (a whole number below
    INTEGER_BOUND with ``integers``, else finite and not negative): it has no branches, so it
    runs on vector registers, and the row then stays in cache for the scatter that follows.
    Only a row that is not fine is looked at again, by :func:`_flags`.
    """
    bound = np.uint64(n_columns)
    fine: Any = True  # numpy booleans once and-ed: Any for mypy
    if integers:
        for k in range(values.shape[0]):
            v = values[k]
            fine &= (v >= 0) & (v < INTEGER_BOUND) & (np.floor(v) == v)
            fine &= np.uint64(columns[k]) < bound  # negative ones wrap around: too
    else:
        for k in range(values.shape[0]):
            v = values[k]
            fine &= (v >= 0) & (v < np.inf) & (np.uint64(columns[k]) < bound)
    flags = 0 if fine else _flags(values, columns, bound)
    if order:
        unsorted: Any = False
        for k in range(1, columns.shape[0]):
            unsorted |= columns[k] <= columns[k - 1]
        flags += _UNSORTED * unsorted
    return flags


@numba.njit(cache=True, nogil=True)
def _flags(values: Any, columns: Any, bound: Any) -> int:  # pragma: no cover - compiled
    """The flags of a row that is not fine: which of its values or columns are not."""
    not_integer: Any = False
    invalid_value: Any = False
    invalid_index: Any = False
    for k in range(values.shape[0]):
        v = values[k]
        invalid_index |= np.uint64(columns[k]) >= bound
        invalid_value |= (not v >= 0) | (v == np.inf)
        not_integer |= (v >= INTEGER_BOUND) | (np.floor(v) != v)
    flags = _NOT_INTEGER * not_integer + _INVALID_VALUE * invalid_value
    return flags + _INVALID_INDEX * invalid_index


@numba.njit(cache=True, nogil=True)
def add_row(
    sums: Any, values: Any, columns: Any, integers: bool, stamp: Any, row: int
) -> bool:  # pragma: no cover - compiled
    """Add one checked row into a profile's rows ``sums = (total, detected, squares)``.

    ``detected`` and ``squares`` have no columns when they are not wanted. Each value is
    read once and added into every wanted row in the same loop. Columns are cast to
    unsigned: check_row has proved them in range, and numba then leaves out its
    negative-index wraparound. A row whose columns are not strictly increasing may repeat a
    column; ``stamp`` (the last row counted per column) then counts such a cell once.
    Returns False if a sum of squares of whole numbers overflowed int64 (each square is
    below 2**62, so a sum of them wrapped if and only if it turned negative).
    """
    total, detected, squares = sums
    count = detected.shape[0] > 0 and stamp.shape[0] == 0
    if integers:
        fits = _add_integers(total, detected, squares, values, columns, count)
    else:
        fits = _add_floats(total, detected, squares, values, columns, count)
    if detected.shape[0] > 0 and not count:
        for k in range(values.shape[0]):
            c = np.uint64(columns[k])
            if values[k] > 0 and stamp[c] != row:
                stamp[c] = row
                detected[c] += 1
    return fits


@numba.njit(cache=True, nogil=True, inline="always")
def add_narrow(
    total: Any, values: Any, columns: Any, bound: Any, p: int
) -> bool:  # pragma: no cover - compiled
    """Add one checked row of whole numbers into a profile's uint32 row ``total``; False
    (nothing added) if its sums might then pass :data:`NARROW_LIMIT`.

    ``bound[p]`` is the sum of every value added into the row so far, so no sum in it is
    larger: while it stays within the limit, every uint32 sum is exact. Half as wide as
    int64, the rows of all profiles take half the cache, which a block of cells in random
    order walks through (~30 % less kernel time).
    """
    added = np.int64(0)
    for k in range(values.shape[0]):  # below 2**31 each: fewer than 2**32 never wrap int64
        added += np.int64(values[k])
    if values.shape[0] >= 2**32 or bound[p] + added > NARROW_LIMIT:
        return False
    bound[p] += added
    for k in range(values.shape[0]):
        total[np.uint64(columns[k])] += np.uint32(values[k])
    return True


@numba.njit(cache=True, nogil=True)
def _add_integers(
    total: Any, detected: Any, squares: Any, values: Any, columns: Any, count: bool
) -> bool:  # pragma: no cover - compiled
    """The loops of :func:`add_row` for whole numbers: one per set of wanted rows."""
    fits = True
    if count and squares.shape[0] > 0:
        for k in range(values.shape[0]):
            c, v = np.uint64(columns[k]), np.int64(values[k])
            total[c] += v
            detected[c] += v > 0
            square = squares[c] + v * v
            squares[c] = square
            fits &= square >= 0
    elif squares.shape[0] > 0:
        for k in range(values.shape[0]):
            c, v = np.uint64(columns[k]), np.int64(values[k])
            total[c] += v
            square = squares[c] + v * v
            squares[c] = square
            fits &= square >= 0
    elif count:
        for k in range(values.shape[0]):
            c, v = np.uint64(columns[k]), np.int64(values[k])
            total[c] += v
            detected[c] += v > 0
    else:
        for k in range(values.shape[0]):
            total[np.uint64(columns[k])] += np.int64(values[k])
    return fits


@numba.njit(cache=True, nogil=True)
def _add_floats(
    total: Any, detected: Any, squares: Any, values: Any, columns: Any, count: bool
) -> bool:  # pragma: no cover - compiled
    """The loop of :func:`add_row` for other values, in float64."""
    square = squares.shape[0] > 0
    for k in range(values.shape[0]):
        c, v = np.uint64(columns[k]), np.float64(values[k])
        total[c] += v
        if count:
            detected[c] += v > 0
        if square:
            squares[c] += v * v
    return True


# Beyond this, a whole number's square does not fit int64 (3037000499**2 < 2**63 - 1).
_ROOT_INT64 = 3037000499


@numba.njit(cache=True, nogil=True)
def cell_scratch(n: int, squares: Any) -> Any:  # pragma: no cover - compiled
    """The scratch of :func:`add_cell_squares` for lines of ``n`` positions: (mark, cell)."""
    return np.full(n, -1, np.int64), np.zeros(n, squares.dtype)


@numba.njit(cache=True, nogil=True)
def add_cell_squares(
    squares: Any,
    values: Any,
    positions: Any,
    targets: Any,
    scratch: Any,
    line: int,
    integers: bool,
) -> bool:  # pragma: no cover - compiled
    """Add the square of each cell of a line (a CSR row, a CSC column) that may repeat a
    position into ``squares[targets[position]]``: the values at a repeated position are one
    cell, whose value is their sum (as scipy reads it), so its square is added once.

    ``targets`` maps a position to its place in ``squares``: a CSR row's columns to
    themselves (``squares``: the profile's row), a CSC column's rows to their profiles
    (``squares``: the column of every profile). ``scratch = (mark, cell)``: the last line seen
    at each position (never a negative one) and a value per position. False if a sum of
    squares of whole numbers (``integers``) no longer fits int64 (a cell's square alone may
    not)."""
    mark, cell = scratch
    for k in range(values.shape[0]):
        c = np.uint64(positions[k])
        if mark[c] != line:
            mark[c] = line
            cell[c] = values[k]
        else:
            cell[c] += values[k]
    fits = True
    for k in range(values.shape[0]):
        c = np.uint64(positions[k])
        if mark[c] == line:
            mark[c] = -1  # squared: once
            x, t = cell[c], targets[c]
            if integers and x > _ROOT_INT64:
                fits = False
                continue
            total = squares[t] + x * x
            squares[t] = total
            fits &= total >= 0
    return fits


@numba.njit(cache=True, nogil=True)
def problem(flags: int, integers: bool) -> int:  # pragma: no cover - compiled
    """The status a row with these check_row flags gives: DONE if it can be added."""
    if flags & _INVALID_INDEX:
        return INVALID_INDEX
    if flags & _INVALID_VALUE:
        return INVALID_VALUE
    if integers and flags & _NOT_INTEGER:
        return NOT_INTEGER
    return DONE


@numba.njit(cache=True, nogil=True)
def scatter(
    data: Any,
    indices: Any,
    indptr: Any,
    rows: Any,
    starts: Any,
    sums: Any,
    resume: Any,
    integers: bool,
    group: int,
) -> int:  # pragma: no cover - compiled
    """Add the rows of one group's profiles into their output rows; return the status.

    ``sums`` is ``(total, detected, squares, bound)``, each but ``bound``
    ``(n_profiles, n_features)``, profile ``p = group * n_samples + sample``; ``detected``
    and ``squares`` have no columns when they are not wanted. ``total`` may be narrow
    (uint32, for whole numbers alone): ``bound`` then holds a bound on each profile's sums
    (see :func:`add_narrow`), else it is empty. ``resume[group]`` is the position in
    ``rows`` where the group starts, and is set to where it stopped. The status is DONE,
    NOT_INTEGER (with ``integers``: a value that is no whole number below INTEGER_BOUND),
    INVALID_VALUE (negative, infinite or NaN), INVALID_INDEX (a column out of range),
    OVERFLOW (a sum of squares no longer fits int64) or FULL (narrow sums that might no
    longer fit uint32); the row at ``resume[group]`` was then not added (for OVERFLOW: not
    wholly). Releases the GIL: groups run in threads.
    """
    out, detected, squares, bound = sums
    n_samples = (starts.shape[0] - 1) // resume.shape[0]
    n_columns = out.shape[1]
    count = detected.shape[1] > 0
    square = squares.shape[1] > 0
    plain = integers and not count and not square
    stamp = np.full(0, -1, np.int64)
    mark, cell = cell_scratch(0, squares)  # made when a row repeats a column
    itself = np.arange(0)
    first = resume[group]
    resume[group] = starts[(group + 1) * n_samples]
    for p in range(group * n_samples, (group + 1) * n_samples):
        row_sums = (out[p], detected[p], squares[p])
        for i in range(max(starts[p], first), starts[p + 1]):
            if i + _AHEAD < rows.shape[0]:
                ahead = rows[i + _AHEAD]
                prefetch_row(data, indices, indptr[ahead], indptr[ahead + 1])
            r = rows[i]
            values = data[indptr[r] : indptr[r + 1]]
            cols = indices[indptr[r] : indptr[r + 1]]
            flags = check_row(values, cols, n_columns, count or square, integers)
            status = problem(flags, integers)
            if status != DONE:
                resume[group] = i
                return status
            if square and flags & _UNSORTED:  # a column may repeat: its cell squared once
                if mark.shape[0] == 0:
                    mark, cell = cell_scratch(n_columns, squares)
                    itself = np.arange(n_columns)
                if count and stamp.shape[0] == 0:
                    stamp = np.full(n_columns, -1, np.int64)
                add_row((out[p], detected[p], squares[p, :0]), values, cols, integers, stamp, r)
                scratch = (mark, cell)
                if not add_cell_squares(squares[p], values, cols, itself, scratch, r, integers):
                    resume[group] = i
                    return OVERFLOW
                continue
            if plain:  # counts alone, whole numbers: the loop here saves a call per row
                if bound.shape[0]:  # narrow sums
                    if not add_narrow(out[p], values, cols, bound, p):
                        resume[group] = i
                        return FULL
                    continue
                for k in range(values.shape[0]):
                    out[p, np.uint64(cols[k])] += np.int64(values[k])
                continue
            if count and flags & _UNSORTED and stamp.shape[0] == 0:
                stamp = np.full(n_columns, -1, np.int64)
            if not add_row(row_sums, values, cols, integers, stamp, r):
                resume[group] = i
                return OVERFLOW
    return DONE


@numba.njit(cache=True, nogil=True)
def scatter_columns(
    data: Any,
    indices: Any,
    indptr: Any,
    profiles: Any,
    bounds: Any,
    column0: int,
    sums: Any,
    resume: Any,
    integers: bool,
    task: int,
) -> int:  # pragma: no cover - compiled
    """Add the columns of a CSC matrix from ``resume[task]`` to ``bounds[task + 1]``.

    The CSC counterpart of :func:`scatter`, reading the matrix in place: the value of column
    ``j`` goes to ``out[profiles[row], column0 + j]`` (a block of the columns from
    ``column0`` adds into its own columns of the sums); the output rows of all profiles stay
    in cache as the columns go by. ``resume[task]`` is set to the column (of the matrix)
    where the task stopped; the status is as for :func:`scatter`, the column at
    ``resume[task]`` then not added. The sums are never narrow (``bound`` is empty).
    """
    out, detected, squares, _ = sums
    n_rows = profiles.shape[0]
    count = detected.shape[1] > 0
    square = squares.shape[1] > 0
    stamp = np.full(0, -1, np.int64)
    mark, cell = cell_scratch(0, squares)  # made when a column repeats a row
    first = resume[task]
    resume[task] = bounds[task + 1]
    for j in range(first, bounds[task + 1]):
        values = data[indptr[j] : indptr[j + 1]]
        rows = indices[indptr[j] : indptr[j + 1]]
        flags = check_row(values, rows, n_rows, count or square, integers)
        status = problem(flags, integers)
        if status != DONE:
            resume[task] = j
            return status
        fits = True
        c = column0 + j
        repeats = square and (flags & _UNSORTED) != 0  # a row may repeat: its cell squared once
        each = square and not repeats  # each value squared as it is added
        if integers:
            for k in range(values.shape[0]):
                p, v = profiles[np.uint64(rows[k])], np.int64(values[k])
                out[p, c] += v
                if each:
                    total = squares[p, c] + v * v
                    squares[p, c] = total
                    fits &= total >= 0
        else:
            for k in range(values.shape[0]):
                p, x = profiles[np.uint64(rows[k])], np.float64(values[k])
                out[p, c] += x
                if each:
                    squares[p, c] += x * x
        if repeats:
            if mark.shape[0] == 0:
                mark, cell = cell_scratch(n_rows, squares)
            scratch = (mark, cell)
            fits = add_cell_squares(squares[:, c], values, rows, profiles, scratch, j, integers)
        if not fits:
            resume[task] = j
            return OVERFLOW
        if not count:
            continue
        if flags & _UNSORTED and stamp.shape[0] == 0:
            stamp = np.full(n_rows, -1, np.int64)
        for k in range(values.shape[0]):
            r = np.uint64(rows[k])
            if values[k] > 0 and (stamp.shape[0] == 0 or stamp[r] != j):
                if stamp.shape[0]:
                    stamp[r] = j
                detected[profiles[r], c] += 1
    return DONE
