"""Chunks encoded and decoded a few at a time: same bytes, same errors, bounded, fork-safe."""

from __future__ import annotations

import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.errors import FormatError
from cytepool.io.zarr import _threads as threads_module
from cytepool.io.zarr import open_array, write_array
from cytepool.io.zarr._threads import ENV_THREADS, for_each, threads


@pytest.fixture(params=["1", "2", "5"])
def n_threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv(ENV_THREADS, request.param)
    return int(request.param)


def stored_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


# ---------------------------------------------------------------------------------------------
# the pool


def test_threads_default_to_the_cpus_at_most_four(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_THREADS, raising=False)
    assert 1 <= threads() <= min(4, os.cpu_count() or 1)
    monkeypatch.setenv(ENV_THREADS, "3")
    assert threads() == 3


@pytest.mark.parametrize("value", ["0", "-1", "two", "", "1.5", "65", "\u00b2", "\u0663", "1_0"])
def test_a_bad_thread_count_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(ENV_THREADS, value)
    with pytest.raises(ValueError, match=f"{ENV_THREADS} must be an integer from 1 to 64"):
        threads()
    with pytest.raises(ValueError, match=ENV_THREADS):
        for_each(abs, [1, 2])


def test_every_item_once_a_few_at_a_time(n_threads: int) -> None:
    lock, running, most = threading.Lock(), [0], [0]
    seen: list[int] = []
    names: set[str] = set()

    def work(item: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            names.add(threading.current_thread().name)
        time.sleep(0.002 * (item % 3))
        with lock:
            running[0] -= 1
            seen.append(item)

    for_each(work, range(40))
    assert sorted(seen) == list(range(40))
    assert most[0] <= n_threads
    assert threading.current_thread().name in names  # the caller works too
    assert all(n.startswith("cytepool-zarr") for n in names - {threading.current_thread().name})


def test_a_single_item_runs_on_the_calling_thread(n_threads: int) -> None:
    """A small array's one chunk wakes no pool thread (a hand-off costs more than the work)."""
    seen: list[threading.Thread] = []
    for_each(lambda item: seen.append(threading.current_thread()), [1])
    for_each(lambda item: seen.append(threading.current_thread()), iter([2]))
    assert seen == [threading.current_thread()] * 2
    for_each(lambda item: seen.append(threading.current_thread()), [])
    assert len(seen) == 2


def test_items_are_taken_lazily_and_stop_at_a_failure(n_threads: int) -> None:
    taken: list[int] = []

    def items() -> Any:
        for i in range(1000):
            taken.append(i)
            yield i

    def work(item: int) -> None:
        if item == 5:
            raise KeyError(item)
        time.sleep(0.01)

    with pytest.raises(KeyError, match="5"):
        for_each(work, items())
    assert len(taken) < 100  # a few past the failure (6 + n_threads on an idle machine), not 1000


def test_the_first_failure_in_order_is_raised_after_running_work_settles(n_threads: int) -> None:
    finished: list[int] = []

    def work(item: int) -> None:
        if item == 7:
            raise KeyError(7)  # fails at once
        time.sleep(0.02 if item == 5 else 0.001)
        if item == 5:
            raise KeyError(5)  # fails later, but comes first
        finished.append(item)

    with pytest.raises(KeyError, match="5"):
        for_each(work, range(50))
    count = len(finished)
    time.sleep(0.05)
    assert len(finished) == count  # nothing runs on after the call has failed


def test_a_failing_source_is_raised_in_its_place(n_threads: int) -> None:
    done: list[int] = []

    def items() -> Any:
        yield from range(10)
        raise OSError("the source broke")

    with pytest.raises(OSError, match="the source broke"):
        for_each(done.append, items())
    assert sorted(done) == list(range(10))


def test_nested_calls_from_pool_threads_finish(n_threads: int) -> None:
    totals: list[int] = []

    def outer(item: int) -> None:
        inner: list[int] = []
        for_each(inner.append, range(item * 10))
        totals.append(len(inner))

    runner = threading.Thread(target=for_each, args=(outer, range(12)), daemon=True)
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "for_each deadlocked when called from pool threads"
    assert sorted(totals) == [i * 10 for i in range(12)]


def test_a_forked_child_gets_a_fresh_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_THREADS, raising=False)
    threads()  # the CPUs counted
    assert threads_module._COUNTED
    monkeypatch.setenv(ENV_THREADS, "2")
    data = np.arange(4000, dtype=np.int32)
    write_array(tmp_path / "a", data, chunks=(100,), compression="zstd")
    assert open_array(tmp_path / "a")[...].sum() == data.sum()  # the parent's pool is running
    with warnings.catch_warnings():  # Python 3.12+ warns that the parent has threads
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover (child)
        recounts = not threads_module._COUNTED  # its CPUs may differ from the parent's
        ok = open_array(tmp_path / "a")[...].sum() == data.sum()
        os._exit(0 if ok and recounts and threads_module._pools else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# ---------------------------------------------------------------------------------------------
# reads and writes


@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_same_store_and_values_with_any_thread_count(
    tmp_path: Path, n_threads: int, compression: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(n_threads)
    data = rng.poisson(0.3, (7, 33, 50)).astype(np.float32)
    data[2] = 0  # chunks equal to the fill value are not stored
    write_array(tmp_path / "a", data, chunks=(2, 8, 16), compression=compression)
    monkeypatch.setenv(ENV_THREADS, "1")
    write_array(tmp_path / "b", data, chunks=(2, 8, 16), compression=compression)
    assert stored_bytes(tmp_path / "a") == stored_bytes(tmp_path / "b")
    monkeypatch.setenv(ENV_THREADS, str(n_threads))
    array = open_array(tmp_path / "a")
    np.testing.assert_array_equal(array[...], data)
    np.testing.assert_array_equal(array[1:6, ::3, 7:45], data[1:6, ::3, 7:45])
    picks = [[4, 0, 4, 6], [32, 1, 1, 17], [49, 0, 20, 20, 3]]
    np.testing.assert_array_equal(array.oindex[tuple(picks)], data[np.ix_(*picks)])


def test_strings_and_shards_read_with_threads(tmp_path: Path, n_threads: int) -> None:
    import zarr

    words = np.array([f"w{i}é" * (i % 4) for i in range(300)])
    write_array(tmp_path / "s", words, chunks=(7,), compression="zstd")
    assert open_array(tmp_path / "s")[...].tolist() == words.tolist()
    data = np.arange(24 * 30, dtype=np.int16).reshape(24, 30)
    z = zarr.create_array(
        tmp_path / "z", shape=data.shape, dtype="int16", chunks=(4, 5), shards=(8, 10), fill_value=0
    )
    z[...] = data
    np.testing.assert_array_equal(open_array(tmp_path / "z")[...], data)
    np.testing.assert_array_equal(
        open_array(tmp_path / "z").oindex[[23, 0], 3:29], data[[23, 0], 3:29]
    )


def test_the_first_bad_chunk_in_order_is_reported(tmp_path: Path, n_threads: int) -> None:
    write_array(tmp_path / "a", np.arange(1000.0), chunks=(100,), compression="gzip")
    for name in ("3", "6"):
        (tmp_path / "a" / "c" / name).write_bytes(b"not gzip")
    with pytest.raises(FormatError, match=r"corrupt chunk .*c/3: invalid gzip data"):
        open_array(tmp_path / "a")[...]
    with pytest.raises(FormatError, match=r"corrupt chunk .*c/6"):
        open_array(tmp_path / "a")[450:]
