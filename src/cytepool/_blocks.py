"""How a matrix too large to hand over whole reaches the pooling: as blocks of its rows or of
its columns, with the stored values of the whole matrix when they are known (which choose
numpy or numba for every block as for the whole, see :func:`cytepool._pool_sums.small_values`).
:func:`cytepool.pooling.from_codes` takes either as ``counts``; :mod:`cytepool.io.anndata`
makes them from the files it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["ColumnBlocks", "RowBlocks"]


class RowBlocks:
    """A cells x features matrix handed over as blocks of its rows, as any iterable of row
    blocks is (:func:`from_codes` takes it as ``counts``), with the stored values of the whole
    matrix: it chooses numpy or numba for the blocks as for a whole matrix (see
    :func:`cytepool._pool_sums.small_values`), so a small file read in blocks does not start
    numba.

    Parameters
    ----------
    blocks
        Row blocks in order (numpy arrays or scipy.sparse CSR/CSC matrices).
    values
        The stored values of the whole matrix, if known.
    again
        Hands over the same matrix anew, for a second pass (see
        :func:`cytepool.from_cells` on float64 sums); None if it cannot be read again.
    """

    def __init__(
        self,
        blocks: Iterable[Any],
        values: int | None = None,
        again: Callable[[], RowBlocks] | None = None,
    ):
        self.blocks = blocks
        self.values = values
        self.again = again


class ColumnBlocks:
    """A cells x features matrix handed over as blocks of its columns, pooled straight into
    the columns of the sums each block covers (:func:`from_codes` takes it as ``counts``).

    Parameters
    ----------
    shape
        ``(n_cells, n_features)``.
    blocks
        ``(start, stop, block)`` in order, ``block`` a scipy.sparse CSC matrix of every cell
        and the columns ``[start, stop)``; together they cover each column once.
    values
        The stored values of the whole matrix, if known (it chooses numpy or numba for the
        blocks as for a whole matrix; see :func:`cytepool._pool_sums.small_values`).
    again
        Hands over the same matrix anew, for a second pass (see
        :func:`cytepool.from_cells` on float64 sums); None if it cannot be read again.
    """

    def __init__(
        self,
        shape: tuple[int, int],
        blocks: Iterable[tuple[int, int, Any]],
        values: int | None = None,
        again: Callable[[], ColumnBlocks] | None = None,
    ):
        self.shape = shape
        self.blocks = blocks
        self.values = values
        self.again = again
