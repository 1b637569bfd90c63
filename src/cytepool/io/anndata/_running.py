"""Running one function over many files: in this process, in worker processes with it, or on
a dask client's workers (see :class:`Runner`); a failure raised naming its file."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import sys
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from cytepool._unused import hide_unused
from cytepool.errors import CytepoolError

__all__ = ["Runner", "Task", "give_back_memory", "naming_file", "portable"]

# What a worker needs, imported once by the fork server rather than by every worker
_PRELOAD = ("cytepool.io.anndata", "cytepool.pooling", "pandas", "scipy.sparse", "h5py", "zarr")


class Task(Protocol):
    """A unit of work: its position in the run, and the file it names."""

    @property
    def index(self) -> int: ...

    @property
    def path(self) -> str: ...


_Run = Callable[..., Iterator[tuple[int, Any]]]


class Runner:
    """``run(function, tasks, extra, here=...)`` returns an iterator of ``(task index,
    function(task, extra))`` as they finish; the first failure stops the run (the tasks not
    started are not started, those under way end on leaving the ``with`` block) and is raised
    naming its file.

    - ``jobs=1``: the tasks run one after another in this process, as the results are taken;
    - ``jobs`` > 1: ``jobs - 1`` worker processes and this process take the tasks in order,
      one at a time each (``here=True``: this process alone, as the results are taken): the
      workers start at once, and this process, which has its imports already, works while
      they start;
    - a client: the tasks are submitted to its workers at once.
    """

    def __init__(self, jobs: int, client: Any) -> None:
        self.jobs, self.client = jobs, client
        self.executor: Any = None
        self.submitted: list[Any] = []  # the client's futures, cancelled on leaving
        self.feeders: list[Any] = []  # the threads that hand tasks to the worker processes
        self.takers: list[_Taker] = []

    def __enter__(self) -> _Run:
        if self.client is not None:
            return self._on_client
        if self.jobs == 1:
            return self._here
        from concurrent.futures import ProcessPoolExecutor

        # numba's threads and fork do not mix. A fork server imports once for all workers, but
        # it is one more process that holds those imports: for one worker, spawn it directly
        workers = self.jobs - 1
        forkserver = workers > 1 and "forkserver" in multiprocessing.get_all_start_methods()
        method = "forkserver" if forkserver else "spawn"
        context = multiprocessing.get_context(method)
        if method == "forkserver":  # its workers start with these imported (once per process)
            context.set_forkserver_preload(list(_PRELOAD))
        self.executor = ProcessPoolExecutor(workers, mp_context=context, initializer=hide_unused)
        return self._shared

    def __exit__(self, *failure: object) -> None:
        for taker in self.takers:
            taker.stop()
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
        for feeder in self.feeders:
            feeder.join()
        if self.submitted:
            self.client.cancel(self.submitted)

    @staticmethod
    def _here(
        function: Callable[..., Any], tasks: list[Task], extra: Any, *, here: bool = True
    ) -> Iterator[Any]:
        """The tasks run one after another in this process, as the results are taken."""
        for task in tasks:
            yield _here_one(function, task, extra)

    def _shared(
        self, function: Callable[..., Any], tasks: list[Task], extra: Any, *, here: bool
    ) -> Iterator[Any]:
        """The tasks taken in order by the worker processes (handed to them from now on, by
        a thread each) and by this process, as the results are taken; results as they come."""
        import queue
        import threading
        from concurrent.futures import Future

        if here:
            return self._here(function, tasks, extra)
        taker = _Taker(tasks)
        self.takers.append(taker)
        finished: queue.SimpleQueue[tuple[Any, Task]] = queue.SimpleQueue()

        def feed() -> None:  # hand one worker process a task at a time
            while (task := taker.take()) is not None:
                try:
                    future = self.executor.submit(function, task, extra)
                    failed = future.exception() is not None  # waits for it
                except BaseException as error:  # cancelled, or the run shut down
                    future, failed = Future(), True
                    future.set_exception(error)
                if failed:
                    taker.stop()
                finished.put((future, task))

        for _ in range(self.jobs - 1):
            feeder = threading.Thread(target=feed, name="cytepool-files", daemon=True)
            feeder.start()
            self.feeders.append(feeder)
        return self._taken(function, extra, taker, finished, len(tasks))

    @staticmethod
    def _taken(
        function: Callable[..., Any], extra: Any, taker: _Taker, finished: Any, n_tasks: int
    ) -> Iterator[Any]:
        """The results of the workers as they come; between them, tasks run in this process."""
        import queue

        try:
            for _ in range(n_tasks):
                try:
                    future, task = finished.get_nowait()
                except queue.Empty:
                    mine = taker.take()
                    if mine is not None:
                        yield _here_one(function, mine, extra)
                        continue
                    future, task = finished.get()
                yield _outcome(future, task)
        finally:
            taker.stop()

    def _on_client(
        self, function: Callable[..., Any], tasks: list[Task], extra: Any, *, here: bool
    ) -> Iterator[Any]:
        """The tasks submitted to the client's workers now; their results as they finish."""
        futures = {self.client.submit(function, task, extra, pure=False): task for task in tasks}
        self.submitted.extend(futures)
        return self._on_client_finished(futures)

    def _on_client_finished(self, futures: dict[Any, Task]) -> Iterator[Any]:
        from distributed import as_completed

        try:
            for future in as_completed(list(futures)):
                yield _outcome(future, futures[future])
        finally:
            self.client.cancel(list(futures))


class _Taker:
    """The tasks handed out in order, one at a time, to the threads that ask; none once stopped."""

    def __init__(self, tasks: list[Task]) -> None:
        import threading

        self.tasks = iter(tasks)
        self.lock = threading.Lock()
        self.stopped = False

    def take(self) -> Task | None:
        with self.lock:
            return None if self.stopped else next(self.tasks, None)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True


def _here_one(function: Callable[..., Any], task: Task, extra: Any) -> tuple[int, Any]:
    """``(task index, function(task, extra))`` run in this process; a failure names the file."""
    try:
        return task.index, function(task, extra)
    except Exception as error:
        raise _naming(error, task.path) from error


def _outcome(future: Any, task: Task) -> tuple[int, Any]:
    """``(task index, result)`` of a finished future (concurrent.futures or dask); its
    failure raised naming the task's file."""
    try:
        return task.index, future.result()
    except Exception as error:
        raise _naming(error, task.path) from error


@contextlib.contextmanager
def naming_file(path: str | os.PathLike[str]) -> Iterator[None]:
    """Raise an error of the documented kinds (ValueError, TypeError, KeyError, OverflowError)
    from within naming ``path`` in its message, as a run over many files does, its type kept.

    Examples
    --------
    >>> from cytepool.errors import InputTypeError
    >>> try:
    ...     with naming_file("cells.h5ad"):
    ...         raise InputTypeError("counts: found float16")
    ... except InputTypeError as error:
    ...     print(error)
    cells.h5ad: counts: found float16
    """
    try:
        yield
    except (ValueError, TypeError, KeyError, OverflowError) as error:
        named = _naming(error, os.fspath(path))
        if named is error or type(named) is not type(error):  # named, or cannot be remade
            raise
        raise named from error


def _naming(error: Exception, path: str) -> Exception:
    """The error with ``path`` in its message (most already name it), of the same type."""
    from concurrent.futures.process import BrokenProcessPool

    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    if isinstance(error, BrokenProcessPool):
        text = (
            "a worker process ended abruptly while pooling it (out of memory? or, in a "
            "script, a call not under `if __name__ == '__main__':`); try fewer jobs="
        )
    if path in text:
        return error
    message = f"{path}: {text}"
    try:
        return type(error)(message)
    except Exception:  # a type that takes other arguments
        return CytepoolError(message)


def portable(error: Exception) -> Exception:
    """The error, or a CytepoolError of its text if it would not travel between processes."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return CytepoolError(f"{type(error).__name__}: {error}")
    return error


def give_back_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``), so that a
    process that pools one file after another (this one, or a worker) starts each at the
    memory of the first, not at its peak: the blocks of a file, freed, stay in the heaps of
    the threads that decoded them otherwise. Elsewhere (no glibc), nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # a C library without it (musl)
        return
    trim(0)
