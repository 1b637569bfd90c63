"""Read an HDF5 dataset of an ``.h5ad`` file from its stored chunks, outside h5py (work in progress).

API: see :class:`DirectDataset` and :func:`read_together`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DirectDataset", "read_together"]


class DirectDataset:
    """An HDF5 dataset (1-D, or 2-D for dense X) read from its stored chunks, outside h5py."""

    path: Path
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    chunks: tuple[int, ...] | None
    filters: tuple[str, ...]

    @classmethod
    def open(cls, path: str | os.PathLike[str], name: str) -> DirectDataset | None:
        """None when the dataset uses something we do not decode (the caller falls back to h5py)."""
        found = cls.open_or_reason(path, name)
        return found if isinstance(found, DirectDataset) else None

    @classmethod
    def open_or_reason(cls, path: str | os.PathLike[str], name: str) -> DirectDataset | str:
        """As :meth:`open`, but the reason instead of None."""
        raise NotImplementedError

    def read(self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        """Elements [start, stop) of a 1-D dataset, or rows [start, stop) of a 2-D one."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the file descriptor."""
        raise NotImplementedError


def read_together(requests: Sequence[tuple[DirectDataset, int, int]]) -> list[np.ndarray[Any, Any]]:
    """:meth:`DirectDataset.read` of several ``(dataset, start, stop)`` in one pass."""
    raise NotImplementedError
