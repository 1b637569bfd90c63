"""What pooling a dask array needs of dask itself: dask imported (or the extra named), the
input told apart from dask's other collections, the scheduler's width and a tree of additions.

Nothing here imports dask at import time; :mod:`cytepool.pooling` calls these only for a dask
input, so ``import cytepool`` never imports dask.
"""

from __future__ import annotations

import os
from typing import Any

from cytepool.errors import InputTypeError

__all__ = ["dask_workers", "is_dask_array", "require_dask", "tree"]

# Partial sums are added this many at a time, in a tree.
_FAN_IN = 4


def is_dask_array(counts: Any) -> bool:
    """Whether ``counts`` is a dask array; InputTypeError for another dask collection (a
    DataFrame or a Bag is no matrix of cells, and iterating one would compute it).

    Examples
    --------
    >>> is_dask_array([[1, 2]])
    False
    """
    module = type(counts).__module__
    if not module.startswith("dask."):
        return False
    if module.startswith("dask.array") and hasattr(counts, "to_delayed"):
        return True
    msg = (
        f"counts: expected a dask array, found a dask {type(counts).__name__} ({module}); "
        "convert it, e.g. ddf.to_dask_array(lengths=True) for a dask DataFrame"
    )
    raise InputTypeError(msg)


def require_dask() -> Any:
    """Import dask, or raise an ImportError that names the extra to install."""
    try:
        import dask
        import dask.array
    except ImportError as err:
        msg = (
            "pooling a dask array needs dask[array]: install cytepool's extra 'dask' (in a "
            "checkout of cytepool: pip install -e '.[dask]')"
        )
        raise ImportError(msg) from err
    return dask


def dask_workers(dask: Any) -> int:
    """How many tasks the scheduler in use runs at once: a client's threads, else dask's."""
    try:
        from distributed import default_client

        return sum(default_client().nthreads().values())
    except (ImportError, ValueError):
        return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


def tree(add: Any, parts: list[Any]) -> Any:
    """Add delayed partial sums in a tree, ``_FAN_IN`` at a time.

    Examples
    --------
    >>> tree(lambda *numbers: sum(numbers), list(range(10)))
    45
    """
    while len(parts) > 1:
        parts = [add(*parts[i : i + _FAN_IN]) for i in range(0, len(parts), _FAN_IN)]
    return parts[0]
