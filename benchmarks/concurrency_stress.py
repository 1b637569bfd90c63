"""Writers and readers of one cube file at the same time, in separate processes.

Every cube written here holds one number ``k`` everywhere (each layer value, each cell number,
its metadata), so a read that mixes two stores shows two numbers.

1. **Two writers at once** (``--runs``, 200 by default): two processes, released together,
   write different cubes to the same path with ``overwrite=True`` (half of the runs to a path
   that holds a cube, half to a new path). Both must succeed, the path must then hold one of
   the two cubes, complete (every group read and checked against its digest), and no temporary
   directory may be left.
2. **Without overwrite** (``--runs-without-overwrite``, 100): the same with
   ``overwrite=False`` on a new path: exactly one writer must raise FileExistsError.
3. **Reading while overwriting** (``--overwrites``, 50): one process replaces the cube 50
   times while two processes read it in a loop (``read_cube``, then the whole layer and three
   whole groups). Each read must return one cube's values only, or raise StoreChangedError;
   a mixed read or any other error counts as a failure.

Usage::

    .venv/bin/python benchmarks/concurrency_stress.py
    .venv/bin/python benchmarks/concurrency_stress.py --runs 20 --overwrites 10   # quick
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cytepool import Cube
from cytepool.errors import StoreChangedError
from cytepool.io import read_cube, write_cube

N_GROUPS, N_SAMPLES, N_FEATURES = 32, 16, 2000
CONTEXT = multiprocessing.get_context("fork")  # the children share the imports made here


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


def read_whole(path: Path, *, groups: int = 3) -> int:
    """Read the cube and check it holds one ``k``; return it (ValueError if mixed)."""
    cube = read_cube(path)
    k = cube.metadata["k"]
    values = np.asarray(cube.layers["counts"])
    if not ((values == k).all() and (cube.cells == k).all()):
        message = f"a mixed read: values {np.unique(values)}, cells {np.unique(cube.cells)}"
        raise ValueError(message)
    for group in range(groups):  # whole groups: each is checked against its digest
        if not (cube.profiles(group) == k).all():
            raise ValueError(f"a mixed read of group {group}")
    return int(k)


def leftovers(path: Path) -> list[Path]:
    return [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.cytepool-")]


def _writer(path: str, k: int, overwrite: bool, barrier: Any, results: Any) -> None:
    cube = constant_cube(k)
    barrier.wait()
    try:
        write_cube(cube, path, overwrite=overwrite, compression="gzip", level=1)
        results.put((k, "ok"))
    except BaseException as error:  # reported by the parent
        results.put((k, f"{type(error).__name__}: {error}"))


def two_writers(path: Path, overwrite: bool) -> list[str]:
    """Two writer processes released at once; return their outcomes."""
    barrier, results = CONTEXT.Barrier(2), CONTEXT.Queue()
    processes = [
        CONTEXT.Process(target=_writer, args=(str(path), k, overwrite, barrier, results))
        for k in (1, 2)
    ]
    for process in processes:
        process.start()
    outcomes = dict(results.get(timeout=600) for _ in processes)
    for process in processes:
        process.join()
    return [outcomes[1], outcomes[2]]


def run_writers(directory: Path, runs: int, overwrite: bool) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for run in range(runs):
        path = directory / f"w{int(overwrite)}-{run}.cube.zarr"
        if overwrite and run % 2 == 0:
            write_cube(constant_cube(0), path)
        outcomes = two_writers(path, overwrite)
        succeeded = outcomes.count("ok")
        refused = sum(outcome.startswith("FileExistsError") for outcome in outcomes)
        counts[f"{succeeded} succeeded, {refused} FileExistsError"] += 1
        others = [o for o in outcomes if o != "ok" and not o.startswith("FileExistsError")]
        counts["other errors"] += len(others)
        try:
            counts[f"path holds cube {read_whole(path, groups=N_GROUPS)}"] += 1
        except Exception as error:
            counts[f"path unreadable: {type(error).__name__}"] += 1
        counts["runs with leftovers"] += bool(leftovers(path))
    return counts


def _reader(path: str, stop: Any, results: Any) -> None:
    counts: collections.Counter[str] = collections.Counter()
    while not stop.is_set():
        try:
            read_whole(Path(path))
        except StoreChangedError:
            counts["StoreChangedError"] += 1
        except ValueError as error:
            counts["mixed read" if "mixed" in str(error) else f"ValueError: {error}"] += 1
        except Exception as error:
            counts[f"{type(error).__name__}: {error}"] += 1
        else:
            counts["whole read of one cube"] += 1
    results.put(dict(counts))


def read_while_overwriting(directory: Path, overwrites: int) -> collections.Counter[str]:
    path = directory / "read.cube.zarr"
    write_cube(constant_cube(0), path)
    stop, results = CONTEXT.Event(), CONTEXT.Queue()
    readers = [CONTEXT.Process(target=_reader, args=(str(path), stop, results)) for _ in "ab"]
    for reader in readers:
        reader.start()
    counts: collections.Counter[str] = collections.Counter()
    try:
        for k in range(1, overwrites + 1):
            write_cube(constant_cube(k), path, overwrite=True, compression="gzip", level=1)
            counts["overwrites"] += 1
    finally:
        stop.set()
        for _ in readers:
            counts.update(results.get(timeout=600))
        for reader in readers:
            reader.join()
    counts[f"last read gives cube {read_whole(path)}"] += 1
    return counts


def table(title: str, counts: collections.Counter[str]) -> None:
    print(f"\n### {title}\n\n| outcome | count |\n|---|---:|")
    for outcome, count in sorted(counts.items()):
        print(f"| {outcome} | {count} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--runs-without-overwrite", type=int, default=100)
    parser.add_argument("--overwrites", type=int, default=50)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        writers = run_writers(directory, args.runs, overwrite=True)
        refusing = run_writers(directory, args.runs_without_overwrite, overwrite=False)
        reading = read_while_overwriting(directory, args.overwrites)
    elapsed = time.perf_counter() - start
    shape = f"{N_GROUPS} x {N_SAMPLES} x {N_FEATURES} int32"
    print(f"## Concurrent writers and readers of one cube file ({shape}, {elapsed:.0f} s)")
    table(f"{args.runs} runs of two writers at once, overwrite=True", writers)
    table(f"{args.runs_without_overwrite} runs of two writers at once, overwrite=False", refusing)
    table(f"Two reading processes while one process overwrites {args.overwrites} times", reading)
    failures = (
        writers["other errors"]
        + refusing["other errors"]
        + writers["runs with leftovers"]
        + refusing["runs with leftovers"]
        + sum(count for outcome, count in reading.items() if ":" in outcome or "mixed" in outcome)
        + sum(count for outcome, count in writers.items() if "unreadable" in outcome)
        + args.runs
        - writers["2 succeeded, 0 FileExistsError"]
        + args.runs_without_overwrite
        - refusing["1 succeeded, 1 FileExistsError"]
    )
    print(f"\nfailures (mixed reads, failed writers, leftovers, wrong errors): {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
