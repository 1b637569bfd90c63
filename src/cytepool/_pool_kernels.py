"""The numba kernels behind :func:`cytepool.from_cells`.

This module imports numba at the top, so only :mod:`cytepool.pooling` imports it, and only
inside the functions that pool. :func:`scatter` adds a block of rows in CSR form (``data``,
``indices``, ``indptr``), its rows sorted by profile (:func:`sort_rows`), one group at a time;
dense inputs reach it as CSR blocks. :func:`scatter_columns` reads a CSC matrix in place.
Both check each row (or column) first with :func:`check_row` and stop where a value is not a
whole number, so the caller can switch the sums to float64 and go on from there.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

# Whole numbers below this bound pool to int64 exactly: even 2**32 cells of such values
# cannot overflow an int64 sum.
INTEGER_BOUND = 2**31

# A group's status after scatter; for all but DONE, its resume position is the failing row.
DONE, NOT_INTEGER, INVALID_VALUE, INVALID_INDEX = 0, 1, 2, 3

# Flags of check_row.
_UNSORTED, _NOT_INTEGER, _INVALID_VALUE, _INVALID_INDEX = 1, 2, 4, 8


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
def check_row(values: Any, columns: Any, n_columns: int, order: bool) -> int:  # pragma: no cover
    """Flags of one row: non-integer values, invalid values or columns; unsorted columns
    (repeats possible) if ``order`` is asked for.

    The loops have no branches, so they run on vector registers; the row then stays in
    cache for the scatter that follows.
    """
    unsorted: Any = False  # numpy booleans once or-ed: Any for mypy
    not_integer: Any = False
    invalid_value: Any = False
    invalid_index: Any = False
    bound = np.uint64(n_columns)
    for k in range(values.shape[0]):
        v = values[k]
        invalid_index |= np.uint64(columns[k]) >= bound  # negative ones wrap around: too
        invalid_value |= (not v >= 0) | (v == np.inf)
        not_integer |= (v >= INTEGER_BOUND) | (np.floor(v) != v)
    if order:
        for k in range(1, columns.shape[0]):
            unsorted |= columns[k] <= columns[k - 1]
    return (
        _UNSORTED * unsorted
        + _NOT_INTEGER * not_integer
        + _INVALID_VALUE * invalid_value
        + _INVALID_INDEX * invalid_index
    )


@numba.njit(cache=True, nogil=True)
def add_row(
    total: Any, detected: Any, values: Any, columns: Any, integers: bool, stamp: Any, row: int
) -> None:  # pragma: no cover - compiled
    """Add one checked row into a profile's ``total`` (and ``detected``) row.

    Columns are cast to unsigned: check_row has proved them in range, and numba then leaves
    out its negative-index wraparound. A row whose columns are not strictly increasing may
    repeat a column; ``stamp`` (the last row counted per column) counts such a cell once.
    """
    if integers:
        for k in range(values.shape[0]):
            total[np.uint64(columns[k])] += np.int64(values[k])
    else:
        for k in range(values.shape[0]):
            total[np.uint64(columns[k])] += values[k]
    if detected.shape[0] == 0:
        return
    if stamp.shape[0] == 0:
        for k in range(values.shape[0]):
            detected[np.uint64(columns[k])] += values[k] > 0
        return
    for k in range(values.shape[0]):
        c = np.uint64(columns[k])
        if values[k] > 0 and stamp[c] != row:
            stamp[c] = row
            detected[c] += 1


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
    out: Any,
    detected: Any,
    resume: Any,
    integers: bool,
    group: int,
) -> int:  # pragma: no cover - compiled
    """Add the rows of one group's profiles into their output rows; return the status.

    ``out`` and ``detected`` are ``(n_profiles, n_features)``, profile ``p = group *
    n_samples + sample``; ``detected`` has no columns when it is not wanted.
    ``resume[group]`` is the position in ``rows`` where the group starts, and is set to
    where it stopped. The status is DONE, NOT_INTEGER (with ``integers``: a value that is no
    whole number below INTEGER_BOUND), INVALID_VALUE (negative, infinite or NaN) or
    INVALID_INDEX (a column out of range); the row at ``resume[group]`` was then not added.
    Releases the GIL: groups run in threads.
    """
    n_samples = (starts.shape[0] - 1) // resume.shape[0]
    n_columns = out.shape[1]
    count = detected.shape[1] > 0
    stamp = np.full(0, -1, np.int64)
    first = resume[group]
    resume[group] = starts[(group + 1) * n_samples]
    for p in range(group * n_samples, (group + 1) * n_samples):
        total = out[p]
        found = detected[p]
        for i in range(max(starts[p], first), starts[p + 1]):
            r = rows[i]
            values = data[indptr[r] : indptr[r + 1]]
            cols = indices[indptr[r] : indptr[r + 1]]
            flags = check_row(values, cols, n_columns, count)
            status = problem(flags, integers)
            if status != DONE:
                resume[group] = i
                return status
            if count and flags & _UNSORTED and stamp.shape[0] == 0:
                stamp = np.full(n_columns, -1, np.int64)
            add_row(total, found, values, cols, integers, stamp, r)
    return DONE


@numba.njit(cache=True, nogil=True)
def scatter_columns(
    data: Any,
    indices: Any,
    indptr: Any,
    profiles: Any,
    bounds: Any,
    out: Any,
    detected: Any,
    resume: Any,
    integers: bool,
    task: int,
) -> int:  # pragma: no cover - compiled
    """Add the columns of a CSC matrix from ``resume[task]`` to ``bounds[task + 1]``.

    The CSC counterpart of :func:`scatter`, reading the matrix in place: each value goes to
    ``out[profiles[row], column]``; the output rows of all profiles stay in cache as the
    columns go by. ``resume[task]`` is set to the column where the task stopped; the status
    is as for :func:`scatter`, the column at ``resume[task]`` then not added.
    """
    n_rows = profiles.shape[0]
    count = detected.shape[1] > 0
    stamp = np.full(0, -1, np.int64)
    first = resume[task]
    resume[task] = bounds[task + 1]
    for j in range(first, bounds[task + 1]):
        values = data[indptr[j] : indptr[j + 1]]
        rows = indices[indptr[j] : indptr[j + 1]]
        flags = check_row(values, rows, n_rows, count)
        status = problem(flags, integers)
        if status != DONE:
            resume[task] = j
            return status
        if integers:
            for k in range(values.shape[0]):
                out[profiles[np.uint64(rows[k])], j] += np.int64(values[k])
        else:
            for k in range(values.shape[0]):
                out[profiles[np.uint64(rows[k])], j] += values[k]
        if not count:
            continue
        if flags & _UNSORTED and stamp.shape[0] == 0:
            stamp = np.full(n_rows, -1, np.int64)
        for k in range(values.shape[0]):
            r = np.uint64(rows[k])
            if values[k] > 0 and (stamp.shape[0] == 0 or stamp[r] != j):
                if stamp.shape[0]:
                    stamp[r] = j
                detected[profiles[r], j] += 1
    return DONE
