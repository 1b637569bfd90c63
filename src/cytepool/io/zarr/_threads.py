"""A small shared thread pool for chunk codecs: zlib and zstd release the GIL while they work.

Reads decode, and writes encode, up to :func:`threads` chunks at a time: the calling thread and
``threads() - 1`` pool threads take the chunks in order, one at a time each, so memory stays at what
one chunk takes per thread (its stored bytes and, for a compressed chunk not decoded straight into
the result, its decoded bytes: see :mod:`cytepool.io.zarr`), and the caller starts at once instead
of waiting for a pool thread to wake up. A failure is raised for the first chunk in order, as a
plain loop would raise it, once every call under way has returned, so nothing runs on after a read
or write has returned. Set the environment variable ``CYTEPOOL_ZARR_THREADS`` to ``1`` to work on
one chunk at a time in the calling thread.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from cytepool._kept_pools import KeptPools
from cytepool.errors import InputError

__all__ = ["ENV_THREADS", "MAX_THREADS", "for_each", "threads"]

ENV_THREADS = "CYTEPOOL_ZARR_THREADS"
MAX_THREADS = 4
"""Threads used by default: the CPUs this process may use, at most this many."""

_MOST_THREADS = 64

T = TypeVar("T")

_pools = KeptPools("cytepool-zarr")


_COUNTED: list[int] = []  # this process's CPUs, once counted


def _cpus() -> int:
    """The CPUs this process may use, counted once per process (every read asks; a process
    forked later counts its own)."""
    if not _COUNTED:
        _COUNTED.append(_count_cpus())
    return _COUNTED[0]


os.register_at_fork(after_in_child=_COUNTED.clear)  # a child may be bound to fewer CPUs


def _count_cpus() -> int:
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counter is not None:
        return int(counter() or 1)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def threads() -> int:
    """How many chunks are encoded or decoded at a time.

    ``CYTEPOOL_ZARR_THREADS`` if set (an integer from 1 to 64), else the CPUs available to the
    process (counted at its first read), at most :data:`MAX_THREADS`.
    """
    value = os.environ.get(ENV_THREADS)
    if value is None:
        return max(1, min(MAX_THREADS, _cpus()))
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit()) or not 1 <= int(digits) <= _MOST_THREADS:
        expected = f"an integer from 1 to {_MOST_THREADS}"
        msg = f"{ENV_THREADS} must be {expected}, found {value!r}; unset it or set it to 1"
        raise InputError(msg)
    return int(digits)


def for_each(function: Callable[[T], object], items: Iterable[T]) -> None:
    """Call ``function`` on every item: the calling thread and ``threads() - 1`` pool threads
    take the items in order, one at a time each. A single item (a small array of one chunk)
    is worked on by the calling thread alone, with no pool thread woken for nothing.

    If calls fail, the failure of the first item in order is raised (as a plain loop would),
    once every call under way has returned.
    """
    iterator = iter(items)
    workers = threads()
    ahead: list[T] = list(itertools.islice(iterator, 2)) if workers > 1 else []
    if len(ahead) < 2:  # one item (a small array's chunk) or one thread: no pool hand-off
        for item in itertools.chain(ahead, iterator):
            function(item)
        return
    shared = _Shared(function, itertools.chain(ahead, iterator))
    helpers = [_pools.get(workers - 1).submit(shared.work) for _ in range(workers - 1)]
    try:
        shared.work()
    finally:
        shared.stop()
        for helper in helpers:
            # A helper never started has nothing to wait for (and no deadlock when a pool thread
            # itself called for_each); nor has one whose calls have all returned.
            if not helper.cancel() and shared.running:
                helper.result()
    shared.raise_first()


class _Shared:
    """The items handed out in order under a lock, the calls under way, and the failures by
    position."""

    def __init__(self, function: Callable[[T], object], iterator: Iterator[T]):
        self.function, self.iterator = function, iterator
        self.lock = threading.Lock()
        self.position, self.stopped = 0, False
        self.running = 0
        self.failures: dict[int, BaseException] = {}

    def _take(self, done: bool = False) -> tuple[int, Any]:
        with self.lock:
            self.running -= done
            if self.stopped:
                return -1, None
            try:
                item = next(self.iterator, _END)
            except BaseException as error:  # the source itself failed: as item `position`
                self.failures[self.position] = error
                item = _END
            if item is _END:
                self.stopped = True
                return -1, None
            self.position += 1
            self.running += 1
            return self.position - 1, item

    def work(self) -> None:
        done = False
        while True:
            position, item = self._take(done)
            done = True
            if position < 0:
                return
            try:
                self.function(item)
            except BaseException as error:
                with self.lock:
                    self.failures[position] = error
                    self.stopped = True
                    self.running -= 1
                return

    def stop(self) -> None:
        with self.lock:
            self.stopped = True

    def raise_first(self) -> None:
        if self.failures:
            raise self.failures[min(self.failures)]


_END = object()
