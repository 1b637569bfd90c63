"""Pooling without numba: small blocks with numpy alone, and the checks of sums of squares.

The first :func:`cytepool.from_cells` of a process need not start numba (its set-up takes
about 0.35 s, more than pooling a million values with numpy).

:func:`scatter` adds a CSR or CSC block into the running sums as the numba kernels of
:mod:`cytepool._pool_kernels` do, with the same results: int64 sums of whole numbers, float64
sums of other values added in the same order (so bit for bit the same), each cell counted
once in ``detected`` even where a row repeats a column, and the same statuses. It checks the
whole block before adding anything, so a block either is added or is not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cytepool.errors import SumOverflowError

__all__ = [
    "INVALID",
    "SMALL_VALUES",
    "SQUARES_LIMIT",
    "Overflow",
    "check_wrap",
    "is_small",
    "overflow_error",
    "scatter",
]

# Blocks of at most this many stored values are pooled here (np.add.at: ~15 ms per million).
SMALL_VALUES = 2**20
# Below this bound on a profile's sums of squares no int64 sum of squares can wrap; above it
# the numba kernels, which check every addition, take over.
SQUARES_LIMIT = 2.0**62
# Statuses besides those of the kernels: DONE 0 and NOT_INTEGER 1.
INVALID = 2
_BOUND = 2**31  # the kernels' INTEGER_BOUND


def is_small(n_values: int, squares_bound: float) -> bool:
    """Whether a block of ``n_values`` is pooled here, given a bound on the sums of squares."""
    return n_values <= SMALL_VALUES and squares_bound < SQUARES_LIMIT


def scatter(
    block: tuple[Any, Any, Any],
    by_row: bool,
    n_positions: int,
    profiles: Any,
    sums: tuple[Any, Any, Any],
    integers: bool,
) -> tuple[int, int]:
    """Add a CSR (``by_row``) or CSC block into ``sums = (total, detected, squares)``.

    ``n_positions`` is the number of columns (CSR) or rows (CSC) the indices must be below;
    ``profiles`` the profile of each row of the block. Returns ``(status, line)``: DONE, or
    INVALID for a value that is negative, infinite or NaN or an index out of range, or (with
    ``integers``) NOT_INTEGER for a value that is no whole number below 2**31, with the first
    row (CSR) or column (CSC) that holds one; nothing was added then.
    """
    data, indices, indptr = block
    n_values = int(indptr[-1])
    values, positions = data[:n_values], indices[:n_values]
    lines = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    bad = (positions < 0) | (positions >= n_positions) | ~((values >= 0) & (values != np.inf))
    if bad.any():
        return INVALID, int(lines[np.argmax(bad)])
    if integers:
        fraction = (values >= _BOUND) | (np.floor(values) != values)
        if fraction.any():
            return 1, int(lines[np.argmax(fraction)])
    rows, columns = (lines, positions) if by_row else (positions, lines)
    total, detected, squares = sums
    n_features = total.shape[1]
    keys = profiles[rows] * n_features + columns
    added = values.astype(total.dtype)
    np.add.at(total.reshape(-1), keys, added)
    if squares.shape[1]:
        with np.errstate(over="ignore"):  # float64 squares: infinite ones raise later
            np.add.at(squares.reshape(-1), keys, added * added)
    if detected.shape[1]:
        _count(detected, (rows, columns), values > 0, profiles, _sorted(positions, indptr))
    return 0, -1


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
    """A sum of squares of a profile (``args[0]``) does not fit int64, or is infinite."""


def overflow_error(profile: int, group_ids: list[str], sample_ids: list[str]) -> OverflowError:
    """The error for an Overflow: the layer, group and sample named."""
    group, sample = divmod(profile, len(sample_ids))
    msg = (
        f"layer 'squares': a sum of squares of group {group_ids[group]!r} in sample "
        f"{sample_ids[sample]!r} does not fit its data type (int64: at most 2**63 - 1; "
        "float64: finite); expected smaller sums: pool without 'squares', or fewer cells "
        "or smaller values per profile"
    )
    return SumOverflowError(msg)


def check_wrap(total: Any, added: Any) -> None:
    """Raise Overflow if an int64 sum of values >= 0 wrapped (it is then below the value added)."""
    if total.dtype.kind == "i":
        wrapped = (total < added).any(axis=1)
        if wrapped.any():
            raise Overflow(int(np.argmax(wrapped)))
