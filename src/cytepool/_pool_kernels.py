"""The numba kernels behind :func:`cytepool.from_cells`.

This module imports numba at the top, so only :mod:`cytepool.pooling` imports it, and only
inside the functions that pool. One kernel, :func:`scatter`, pools every kind of input: a
block of rows in CSR form (``data``, ``indices``, ``indptr``) whose rows are sorted by
profile (:func:`sort_rows`). Dense and CSC inputs reach it as CSR blocks.
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
def check_row(values: Any, columns: Any, n_columns: int) -> int:  # pragma: no cover
    """Flags of one row: unsorted columns, non-integer values, invalid values or columns.

    The loop has no branches, so it runs on vector registers; the row then stays in cache
    for the scatter that follows.
    """
    unsorted = not_integer = invalid_value = invalid_index = False
    for k in range(values.shape[0]):
        v = values[k]
        c = columns[k]
        invalid_index |= (c < 0) | (c >= n_columns)
        invalid_value |= (not v >= 0) | (v == np.inf)
        not_integer |= (v >= INTEGER_BOUND) | (np.floor(v) != v)
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
    columns: Any,
    out: Any,
    detected: Any,
    resume: Any,
    integers: bool,
    group: int,
) -> int:  # pragma: no cover - compiled
    """Add the rows of one group's profiles into their output rows; return the status.

    ``out`` and ``detected`` are ``(n_profiles, n_features)``, profile ``p = group *
    n_samples + sample``; the block's columns are ``columns = (start, stop)`` of them.
    ``detected`` has no columns when it is not wanted. ``resume[group]`` is the position in
    ``rows`` where the group starts, and is set to where it stopped. The status is DONE,
    NOT_INTEGER (with ``integers``: a value that is no whole number below INTEGER_BOUND),
    INVALID_VALUE (negative, infinite or NaN) or INVALID_INDEX (a column out of range); the
    row at ``resume[group]`` was then not added. Releases the GIL: groups run in threads.
    """
    n_samples = (starts.shape[0] - 1) // resume.shape[0]
    start, stop = columns
    count = detected.shape[1] > 0
    stamp = np.full(0, -1, np.int64)
    first = resume[group]
    resume[group] = starts[(group + 1) * n_samples]
    for p in range(group * n_samples, (group + 1) * n_samples):
        total = out[p, start:stop]
        found = detected[p, start:stop]
        for i in range(max(starts[p], first), starts[p + 1]):
            r = rows[i]
            values = data[indptr[r] : indptr[r + 1]]
            cols = indices[indptr[r] : indptr[r + 1]]
            flags = check_row(values, cols, stop - start)
            status = problem(flags, integers)
            if status != DONE:
                resume[group] = i
                return status
            if count and flags & _UNSORTED and stamp.shape[0] == 0:
                stamp = np.full(stop - start, -1, np.int64)
            add_row(total, found, values, cols, integers, stamp, r)
    return DONE
