"""Thread pools kept for the calls that follow, one per number of threads.

Starting and joining threads for each call costs more than the work handed to them when the
calls are many and short (a block of cells pooled by the kernel, a chunk read by the Zarr
module). A forked child has none of its parent's threads: its pools start again when needed.
"""

from __future__ import annotations

import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

__all__ = ["KeptPools"]

_every: weakref.WeakSet[KeptPools] = weakref.WeakSet()


class KeptPools:
    """Thread pools by number of threads, their threads named ``prefix``-N.

    Examples
    --------
    >>> pools = KeptPools("example")
    >>> pools.get(2) is pools.get(2), len(pools)
    (True, 1)
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._pools: dict[int, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        _every.add(self)

    def get(self, workers: int) -> ThreadPoolExecutor:
        """The pool of ``workers`` threads, started on first use."""
        with self._lock:
            if workers not in self._pools:
                pool = ThreadPoolExecutor(workers, thread_name_prefix=self.prefix)
                self._pools[workers] = pool
            return self._pools[workers]

    def __len__(self) -> int:
        return len(self._pools)

    def _forget(self) -> None:
        self._pools = {}
        self._lock = threading.Lock()


def _forget_every_pool() -> None:
    """In a forked child: no pool has threads any more."""
    for pools in list(_every):
        pools._forget()


os.register_at_fork(after_in_child=_forget_every_pool)
