"""Reading a whole HDF5 dataset: cytepool's direct chunk reader against h5py (issue 23).

One 1-D float32 dataset of negative-binomial counts (70 % zeros, as the values of a sparse
``X``), stored five ways in one file: chunked without compression, gzip level 4, gzip level 4
with shuffle, lzf (each in the chunks h5py chooses, as anndata writes ``X/data``), and
contiguous. Each is read whole, into memory, by h5py (``dataset[()]``: one call, h5py's lock,
one thread) and by ``DirectDataset.read(0, n)`` (the chunks read with ``os.pread`` and decoded
on cytepool's decode threads), alternately, after one warm-up read of each (the file is in the
page cache). The table gives the median wall and CPU time of each and the ratio of the walls,
and the direct read on one thread (``CYTEPOOL_ZARR_THREADS=1``): its CPU time against h5py's
says how much less work decoding is, whatever the other jobs on the machine leave of the
second core; the results are checked to be equal. ``--h5ad`` adds the datasets ``X/data`` and ``X/indices``
of an existing ``.h5ad`` file (the files of benchmarks/pool_files.py, say). (``--quick``
datasets fit h5py's chunk cache of 1 MiB, so its repeated reads there decode nothing: a smoke
run, not a measurement.)

Usage (under the shared benchmark lock)::

    flock /tmp/cytepool-bench.lock .venv/bin/python benchmarks/hdf5_direct.py
    flock /tmp/cytepool-bench.lock .venv/bin/python benchmarks/hdf5_direct.py \\
        --h5ad /tmp/cytepool-bench-data/pool-files-200000x20000/gzip.h5ad
    .venv/bin/python benchmarks/hdf5_direct.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path("/tmp/cytepool-bench-data")
LAYOUTS: dict[str, dict[str, Any]] = {
    "chunked": {"chunks": True},
    "gzip 4": {"compression": "gzip", "compression_opts": 4},
    "gzip 4 + shuffle": {"compression": "gzip", "compression_opts": 4, "shuffle": True},
    "lzf": {"compression": "lzf"},
    "contiguous": {},
}


def build(path: Path, n: int) -> None:
    """Write the file of the benchmark (atomically: a half-written file is never reused)."""
    import h5py

    rng = np.random.default_rng(23)
    values = (rng.negative_binomial(1, 0.3, n) * (rng.random(n) < 0.3)).astype(np.float32)
    partial = path.with_suffix(".partial")
    with h5py.File(partial, "w") as file:
        for name, options in LAYOUTS.items():
            file.create_dataset(name, data=values, **options)
    partial.replace(path)


def timed(read: Callable[[], np.ndarray]) -> tuple[float, float, np.ndarray]:
    """Wall and CPU seconds of one read, and its result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = read()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def one_thread(direct: Any) -> np.ndarray:
    """The direct read on the calling thread alone."""
    from cytepool.io.zarr._threads import ENV_THREADS

    before = os.environ.get(ENV_THREADS)
    os.environ[ENV_THREADS] = "1"
    try:
        return direct.read(0, direct.shape[0])
    finally:
        if before is None:
            del os.environ[ENV_THREADS]
        else:
            os.environ[ENV_THREADS] = before


def measure(path: Path, name: str, repeats: int) -> dict[str, Any]:
    """Median wall and CPU of h5py's and the direct read of dataset ``name``."""
    import h5py

    from cytepool.io.anndata._hdf5 import DirectDataset

    direct = DirectDataset.open_or_reason(path, name)
    if isinstance(direct, str):
        return {"name": name, "skipped": direct}
    with h5py.File(path, "r") as file, direct:
        dataset = file[name]
        readers = {
            "h5py": lambda: dataset[()],
            "direct": lambda: direct.read(0, direct.shape[0]),
            "direct, 1 thread": lambda: one_thread(direct),
        }
        times: dict[str, list[tuple[float, float]]] = {key: [] for key in readers}
        results = {key: read() for key, read in readers.items()}  # warm-up
        if not all(np.array_equal(results["h5py"], result) for result in results.values()):
            msg = f"{path}:{name}: the direct read differs from h5py's"
            raise AssertionError(msg)
        del results
        for _ in range(repeats):
            for key, read in readers.items():
                wall, cpu, _result = timed(read)
                times[key].append((wall, cpu))
        storage = dataset.id.get_storage_size()
        chunks = dataset.chunks
        filters = ", ".join(direct.filters) or "none"
    row: dict[str, Any] = {"name": name, "chunks": chunks, "filters": filters}
    row["stored"] = storage / 2**20
    row["values"] = direct.shape[0]
    for key, pairs in times.items():
        row[key] = (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))
    return row


def ratio(value: float, peer: float) -> str:
    return f"{value / peer:.2f}" if peer > 0 else "-"


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| dataset | values | stored (MiB) | chunks | h5py wall / CPU (s) | direct wall / CPU (s) "
        "| direct / h5py (wall) | direct, 1 thread: wall / CPU (s) | CPU, 1 thread / h5py |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['name']} | left to h5py: {row['skipped']} |||||||")
            continue
        h5py_wall, h5py_cpu = row["h5py"]
        wall, cpu = row["direct"]
        alone_wall, alone_cpu = row["direct, 1 thread"]
        lines.append(
            f"| {row['name']} | {row['values']:,} | {row['stored']:,.0f} | {row['chunks']} "
            f"| {h5py_wall:.3f} / {h5py_cpu:.3f} | {wall:.3f} / {cpu:.3f} "
            f"| {ratio(wall, h5py_wall)} | {alone_wall:.3f} / {alone_cpu:.3f} "
            f"| {ratio(alone_cpu, h5py_cpu)} |"
        )
    return "\n".join(lines)


def environment() -> str:
    import h5py

    from cytepool.io.zarr._fast import describe
    from cytepool.io.zarr._threads import threads

    return (
        f"Python {platform.python_version()}, numpy {np.__version__}, h5py {h5py.__version__} "
        f"(HDF5 {h5py.version.hdf5_version}); {os.cpu_count()} CPUs, {threads()} decode "
        f"threads; {describe()}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--values", type=int, default=50_000_000, help="values in the dataset")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the file is written")
    parser.add_argument("--h5ad", type=Path, action="append", default=[], help="also X/...")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small, once")
    args = parser.parse_args(argv)
    if args.quick:
        args.values, args.repeats = 200_000, 1
    with tempfile.TemporaryDirectory() as scratch:
        where = args.dir or (Path(scratch) if args.quick else DATA)
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"hdf5-direct-{args.values}.h5"
        if not path.exists():
            build(path, args.values)
        rows = [measure(path, name, args.repeats) for name in LAYOUTS]
        for h5ad in args.h5ad:
            for part in ("data", "indices"):
                rows.append(measure(h5ad, f"X/{part}", args.repeats))
                rows[-1]["name"] = f"{h5ad.name}: X/{part}"
        print(environment())
        print(f"file: {path}; medians of {args.repeats} reads each\n")
        print(table(rows))
        if args.quick and args.dir is not None:
            path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
