"""A small shared thread pool for chunk codecs: zlib and zstd release the GIL while they work.

Reads decode, and writes encode, up to :func:`threads` chunks at a time. Results come back in
the order of their inputs, at most a few tasks are in flight (so memory stays at about one chunk
per thread), and a failure waits for the tasks already running before it is raised, so nothing
runs on after a call has returned. Set the environment variable ``CYTEPOOL_ZARR_THREADS`` to
``1`` to work on one chunk at a time in the calling thread.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["ENV_THREADS", "MAX_THREADS", "ordered_map", "threads"]

ENV_THREADS = "CYTEPOOL_ZARR_THREADS"
MAX_THREADS = 4
"""Threads used by default: the CPUs this process may use, at most this many."""

_MOST_THREADS = 64

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}


def _cpus() -> int:
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counter is not None:
        return int(counter() or 1)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def threads() -> int:
    """How many chunks are encoded or decoded at a time.

    ``CYTEPOOL_ZARR_THREADS`` if set (an integer from 1 to 64), else the CPUs available, at most
    :data:`MAX_THREADS`.
    """
    value = os.environ.get(ENV_THREADS)
    if value is None:
        return max(1, min(MAX_THREADS, _cpus()))
    if not value.strip().isdigit() or not 1 <= int(value) <= _MOST_THREADS:
        expected = f"an integer from 1 to {_MOST_THREADS}"
        msg = f"{ENV_THREADS} must be {expected}, found {value!r}; unset it or set it to 1"
        raise ValueError(msg)
    return int(value)


def _executor(workers: int) -> ThreadPoolExecutor:
    with _lock:
        if workers not in _pools:
            _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="cytepool-zarr")
        return _pools[workers]


def _forget_pools() -> None:
    """A forked child has none of the parent's threads: start fresh pools when needed."""
    global _lock
    _pools.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools)


def ordered_map(function: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
    """``map(function, items)`` on the shared pool: results in order, a few items in flight.

    Runs in the calling thread when one thread is configured or there is only one item.
    """
    iterator = iter(items)
    head = deque(itertools.islice(iterator, 2))
    workers = threads()
    if len(head) < 2 or workers == 1:
        return map(function, _resume(head, iterator))
    return _pooled(function, _resume(head, iterator), workers)


def _resume(head: deque[T], rest: Iterator[T]) -> Iterator[T]:
    """The items taken from ``head`` (letting go of each), then the rest."""
    while head:
        yield head.popleft()
    yield from rest


def _pooled(function: Callable[[T], R], items: Iterator[T], workers: int) -> Iterator[R]:
    pool, window = _executor(workers), workers + 1
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        _settle(pending)


def _settle(pending: deque[Future[R]]) -> None:
    """Cancel what has not started and wait for what has (after a failure or an early stop)."""
    for future in pending:
        future.cancel()
    for future in pending:
        if not future.cancelled():
            future.exception()
