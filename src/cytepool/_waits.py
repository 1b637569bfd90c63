"""How long the pooling sat idle waiting for its next block of rows: :class:`Waits`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

__all__ = ["Waits"]


class Waits:
    """An iterator of blocks that times how long the pooling sat idle waiting for each,
    against the time the pooling of the one before took.

    Row blocks read from a file come from reader threads that decode them on the other
    cores. When the pooling waits idle for its next block more than a tenth of the time it
    took to pool the last, the readers are behind: the kernel then pools on one thread and
    leaves the other cores to them (a gzip-compressed .h5ad pools ~7 % faster so); otherwise
    it takes all of numba's. Time the waiting thread spends making the block itself (a
    generator that reads on this thread) is not idle.
    """

    def __init__(self, blocks: Iterable[Any]):
        self.blocks = iter(blocks)
        self.returned = self.idle = self.pooled = 0.0

    def __iter__(self) -> Waits:
        return self

    def __next__(self) -> Any:
        asked, working = time.perf_counter(), time.thread_time()
        if self.returned:
            self.pooled = asked - self.returned
        block = next(self.blocks)
        self.returned = time.perf_counter()
        self.idle = (self.returned - asked) - (time.thread_time() - working)
        return block

    def behind(self) -> bool:
        """Whether the pooling sat idle waiting for the last block (see the class)."""
        return self.pooled > 0 and self.idle > self.pooled / 10
