"""Readers and writers of one path at the same time: no mixed read, no failed writer.

Each cube written here holds one number ``k`` everywhere (every layer value, every cell number,
its metadata), so a read that mixes two stores shows two numbers. The threads are real and the
stores real directories; ``benchmarks/concurrency_stress.py`` runs the same checks with
processes and many more rounds.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool import Cube
from cytepool.errors import StoreChangedError
from cytepool.io import read_cube, write_cube
from cytepool.io.zarr import open_array, write_array
from cytepool.io.zarr._reading import Reader
from cytepool.io.zarr._threads import ENV_THREADS

pd = pytest.importorskip("pandas")

N_GROUPS, N_SAMPLES, N_FEATURES = 24, 6, 50


def constant_cube(k: int) -> Cube:
    """A cube whose every layer value and cell number is ``k`` (metadata ``{"k": k}``)."""
    return Cube(
        {"counts": np.full((N_GROUPS, N_SAMPLES, N_FEATURES), k, dtype=np.int32)},
        samples=pd.DataFrame({"sample_id": [f"s{i}" for i in range(N_SAMPLES)]}),
        groups=pd.DataFrame({"group_id": [f"g{i}" for i in range(N_GROUPS)]}),
        features=pd.DataFrame({"feature_id": [f"f{i}" for i in range(N_FEATURES)]}),
        cells=np.full((N_GROUPS, N_SAMPLES), k),
        metadata={"k": k},
    )


def leftovers(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if ".cytepool-" in p.name)


def read_whole(path: Path) -> int:
    """Open the cube and read all of it; return its ``k`` (AssertionError if mixed)."""
    cube = read_cube(path)
    k = cube.metadata["k"]
    assert (cube.cells == k).all(), f"cells {np.unique(cube.cells)} in the cube of {k}"
    values = np.asarray(cube.layers["counts"])
    assert (values == k).all(), f"values {np.unique(values)} in the cube of {k}"
    for group in cube.groups.index[:3]:  # whole groups: their digests are verified too
        assert (cube.profiles(group) == k).all()
    return int(k)


def run_together(*calls: Any) -> list[Any]:
    """Start the calls in threads at the same moment; return each result or exception."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = calls[i]()
        except BaseException as error:
            outcomes[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


# ---------------------------------------------------------------------------------------------
# Writers


@pytest.mark.parametrize("existing", [True, False])
def test_two_writers_with_overwrite_both_succeed(tmp_path: Path, existing: bool) -> None:
    cubes = [constant_cube(1), constant_cube(2)]
    for round_ in range(8):
        path = tmp_path / f"r{round_}.cube.zarr"
        if existing:
            write_cube(constant_cube(0), path)
        outcomes = run_together(
            *(lambda cube=cube, path=path: write_cube(cube, path, overwrite=True) for cube in cubes)
        )
        assert outcomes == [None, None], outcomes
        assert read_whole(path) in (1, 2)
        assert leftovers(path) == []


def test_two_writers_without_overwrite_one_fails(tmp_path: Path) -> None:
    cubes = [constant_cube(1), constant_cube(2)]
    for round_ in range(8):
        path = tmp_path / f"r{round_}.cube.zarr"
        outcomes = run_together(
            *(lambda cube=cube, path=path: write_cube(cube, path) for cube in cubes)
        )
        failed = [outcome for outcome in outcomes if outcome is not None]
        assert len(failed) == 1, outcomes
        assert isinstance(failed[0], FileExistsError)
        assert read_whole(path) == cubes[outcomes.index(None)].metadata["k"]
        assert leftovers(path) == []


def test_writer_and_clean_up_of_another_writer(tmp_path: Path) -> None:
    # Every write first removes the leftovers of earlier writes to its path: it must never take
    # the directory another writer has just made for the same path for one.
    path = tmp_path / "a.cube.zarr"
    write_cube(constant_cube(0), path)
    for round_ in range(10):
        outcomes = run_together(
            lambda: write_cube(constant_cube(1), path, overwrite=True),
            lambda: write_cube(constant_cube(2), path, overwrite=True),
            lambda: write_cube(constant_cube(3), path, overwrite=True),
        )
        assert outcomes == [None, None, None], (round_, outcomes)
        assert leftovers(path) == []
    assert read_whole(path) in (1, 2, 3)


# ---------------------------------------------------------------------------------------------
# Readers


def test_reads_racing_overwrites_never_mix(tmp_path: Path) -> None:
    path = tmp_path / "a.cube.zarr"
    write_cube(constant_cube(1), path)
    stop = threading.Event()
    seen: Counter[str] = Counter()
    problems: list[BaseException] = []

    def read_loop() -> None:
        while not stop.is_set():
            try:
                read_whole(path)
            except StoreChangedError:
                seen["replaced while read"] += 1
            except BaseException as error:
                problems.append(error)
            else:
                seen["read"] += 1

    readers = [threading.Thread(target=read_loop) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for k in range(2, 17):
            write_cube(constant_cube(k), path, overwrite=True)
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert problems == [], problems[:3]
    assert read_whole(path) == 16


def sparse_ones() -> np.ndarray:
    data = np.zeros(512, dtype=np.int32)
    data[::64] = 1
    return data


@pytest.mark.parametrize(
    "first", [np.full(8, 1), sparse_ones()], ids=["every chunk stored", "most chunks absent"]
)
def test_a_read_never_mixes_two_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: np.ndarray
) -> None:
    # After the first chunk of a read, the store is replaced as write_cube replaces one: the
    # new directory takes the path and the old one is removed. With most chunks absent the
    # read lists the directory instead of opening each chunk: the same check holds.
    monkeypatch.setenv(ENV_THREADS, "1")
    write_array(tmp_path / "a", first, chunks=(1,), compression=None)
    write_array(tmp_path / "new", np.full_like(first, 2), chunks=(1,), compression=None)
    array = open_array(tmp_path / "a")
    original = Reader._read_file_chunk
    replaced: list[bool] = []

    def replace_after_the_first_chunk(self: Reader, piece: Any, work: Any) -> None:
        original(self, piece, work)
        if not replaced:
            os.rename(tmp_path / "a", tmp_path / "old")
            os.rename(tmp_path / "new", tmp_path / "a")
            shutil.rmtree(tmp_path / "old")
            replaced.append(True)

    monkeypatch.setattr(Reader, "_read_file_chunk", replace_after_the_first_chunk)
    with pytest.raises(StoreChangedError, match="replaced while it was being read"):
        array[...]
    assert replaced == [True]


def test_a_group_read_during_a_replacement_is_not_called_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A whole group is checked against its digest; a replacement must not make it look corrupt.
    monkeypatch.setenv(ENV_THREADS, "1")
    path = tmp_path / "a.cube.zarr"
    write_cube(constant_cube(1), path)
    cube = read_cube(path)
    original = Reader._read_file_chunk

    def replace_first(self: Reader, piece: Any, work: Any) -> None:
        monkeypatch.setattr(Reader, "_read_file_chunk", original)
        write_cube(constant_cube(2), path, overwrite=True)
        original(self, piece, work)

    monkeypatch.setattr(Reader, "_read_file_chunk", replace_first)
    with pytest.raises(StoreChangedError):
        cube.profiles("g0")
