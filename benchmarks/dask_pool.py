"""Benchmark: pool a zarr AnnData on dask (issue 8, item 5).

The counts (whole numbers as float32 CSR, ~5% nonzero, 24 samples x 12 groups, cells in random
order; the generator of ``benchmarks/pooling.py``) are written once, block by block, as a zarr
(v3, zstd) AnnData. Each case then runs in a fresh process and pools them with ``from_cells``:

- ``memory-read-1``: the whole in-memory path: X read into a scipy CSR matrix with anndata's
  ``read_elem`` (zarr-python), then pooled with one numba thread, both timed;
- ``memory-N``: X read whole into a scipy CSR matrix first (as above, untimed), pooled with N
  threads;
- ``dask-memory-N``: the same X in memory as a dask array of CSR chunks of ``--chunk-rows``
  rows, on dask's threaded scheduler with N workers: the cost of the map-reduce itself;
- ``zarr-threads-N``: X opened lazily (``anndata.experimental.read_elem_lazy``, CSR chunks of
  ``--chunk-rows`` rows), read and pooled on dask's threaded scheduler with N workers;
- ``zarr-cluster-N``: the same on a ``dask.distributed`` ``LocalCluster`` of N worker
  processes of one thread each;
- ``zarr-cluster-untrimmed-N``: the same, without the ``MALLOC_TRIM_THRESHOLD_=65536`` that
  distributed sets for its worker processes by default (freed memory then stays with the
  process instead of being handed back to the OS and page-faulted in again);
- ``zarr-read-N``: a floor: the threaded scheduler only reads the chunks (counts their
  nonzeros), so the zarr cases can be compared with what reading X costs.

Peak memory is ``ru_maxrss`` after minus before the call (the peak reset first where Linux
allows): of the process, or of each worker process for the cluster (the largest worker). CPU
time sums every thread of the process (zarr-python decodes on threads of its own), and for the
cluster every worker process plus the client. Every pooling case must give the same
fingerprint. Prints a markdown table with the wall-clock time, the CPU time, the throughput per
core (cells per CPU second, which a busy machine and threads outside dask's count do not
distort) and how many times more CPU time a cell takes than on the in-memory paths on one
thread: pooling X already in memory, and reading X from the store first.

Run: ``.venv/bin/python benchmarks/dask_pool.py`` (``--help`` for the size and the cases).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np


def _sibling(name: str) -> Any:
    """Load another benchmark script as a module (without putting benchmarks/ on sys.path)."""
    path = Path(__file__).resolve().with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_benchmark_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_pooling = _sibling("pooling")
cell_labels, csr_rows, obs = _pooling.cell_labels, _pooling.csr_rows, _pooling.obs

CASES = (
    "memory-read-1",
    "memory-1",
    "memory-2",
    "dask-memory-1",
    "dask-memory-2",
    "zarr-read-1",
    "zarr-read-2",
    "zarr-threads-1",
    "zarr-threads-2",
    "zarr-cluster-1",
    "zarr-cluster-2",
    "zarr-cluster-untrimmed-1",
    "zarr-cluster-untrimmed-2",
)
NAMES = {
    "memory-read": "in memory incl. reading X (anndata read_elem), 1 numba thread",
    "memory": "in memory, numba threads",
    "dask-memory": "dask threads, X in memory",
    "zarr-read": "floor: dask threads, only reading X from zarr",
    "zarr-threads": "dask threads, X from zarr",
    "zarr-cluster": "LocalCluster processes, X from zarr",
    "zarr-cluster-untrimmed": "the same, workers without MALLOC_TRIM_THRESHOLD_=65536",
}


def generate(directory: Path, args: argparse.Namespace) -> Path:
    """Write the zarr AnnData once, X appended block by block (never whole in memory)."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp
    import zarr
    from anndata.io import sparse_dataset, write_elem

    name = f"dask-pool-{args.cells}x{args.genes}-d{args.density}-seed{args.seed}.zarr"
    path = directory / name
    if (path / "done").exists():
        return path
    s, g = cell_labels(args)
    var = pd.DataFrame(index=[f"gene{j}" for j in range(args.genes)])
    ad.settings.zarr_write_format = 3
    root = zarr.open_group(path, mode="w", zarr_format=3)
    write_elem(root, "/", ad.AnnData(obs=obs(s, g), var=var))
    for i, (data, indices, counts) in enumerate(csr_rows(args)):
        indptr = np.concatenate([[0], np.cumsum(counts)])
        block = sp.csr_matrix((data, indices, indptr), shape=(len(counts), args.genes))
        if i == 0:
            write_elem(root, "X", block, dataset_kwargs={"chunks": (2**22,)})
        else:
            sparse_dataset(root["X"]).append(block)
    (path / "done").touch()
    return path


def open_lazy(path: Path, chunk_rows: int) -> tuple[Any, Any, Any]:
    import zarr
    from anndata.experimental import read_elem_lazy
    from anndata.io import read_elem

    root = zarr.open_group(path, mode="r")
    frame = read_elem(root["obs"])
    n_genes = root["X"].attrs["shape"][1]
    x = read_elem_lazy(root["X"], chunks=(chunk_rows, n_genes))
    return x, frame["sample"], frame["group"]


def maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_maxrss() -> None:
    """Make the peak the current resident memory, where Linux allows (else it stays)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def pool(x: Any, s: Any, g: Any) -> str:
    import cytepool

    return cytepool.from_cells(x, sample_labels=s, group_labels=g).fingerprint


def warm_up() -> None:
    """Imports and the kernels (from numba's cache), on a few cells of the same types (pooled
    with the kernels, which from_cells would spare so small an input)."""
    import scipy.sparse as sp

    from cytepool import _pool_sums

    x = sp.random(40, 10, density=0.3, format="csr", dtype=np.float32, random_state=0)
    x.data[:] = 1
    with mock.patch.multiple(_pool_sums, SMALL_VALUES=-1, FIRST_VALUES=-1):
        pool(x, ["a", "b"] * 20, ["g"] * 40)


def worker(case: str, path: Path, chunk_rows: int) -> dict[str, Any]:
    kind, n = case.rsplit("-", 1)
    workers = int(n)
    x, s, g = open_lazy(path, chunk_rows)
    chunk = x.blocks[0].compute()
    chunk_bytes = chunk.data.nbytes + chunk.indices.nbytes + chunk.indptr.nbytes
    warm_up()
    if kind == "memory-read":
        return run_memory_read(path, s, g, chunk_bytes)
    if kind in ("memory", "dask-memory"):
        x = read_x(path)  # one copy of X (computing the dask array would hold two at once)
    if kind == "dask-memory":
        x = dask_of_rows(x, chunk_rows)
    if kind == "memory":
        return run_memory(x, s, g, workers, chunk_bytes)
    if kind.startswith("zarr-cluster"):
        return run_cluster(x, s, g, workers, chunk_bytes, trim=kind == "zarr-cluster")
    return run_threads(x, s, g, workers, chunk_bytes, read_only=kind == "zarr-read")


def dask_of_rows(x: Any, chunk_rows: int) -> Any:
    """A dask array of CSR blocks that share the memory of ``x`` (no copy, no hashing of X).

    Each block is a task that makes a view of its rows; ``x`` is one node of the graph, named
    rather than hashed.
    """
    import dask
    import dask.array as da

    whole = dask.delayed(x, name=f"x-in-memory-{id(x)}")
    rows_of = dask.delayed(row_view, pure=True)
    meta = x[:0]
    blocks = []
    for a in range(0, x.shape[0], chunk_rows):
        b = min(a + chunk_rows, x.shape[0])
        blocks.append(
            da.from_delayed(rows_of(whole, a, b), (b - a, x.shape[1]), x.dtype, meta=meta)
        )
    return da.concatenate(blocks, axis=0)


def row_view(x: Any, a: int, b: int) -> Any:
    """Rows ``a:b`` of a CSR matrix as views of its arrays (scipy's constructor would copy)."""
    import scipy.sparse as sp

    s, e = x.indptr[a], x.indptr[b]
    block = sp.csr_matrix((b - a, x.shape[1]), dtype=x.dtype)
    block.data, block.indices, block.indptr = x.data[s:e], x.indices[s:e], x.indptr[a : b + 1] - s
    return block


def run_memory(x: Any, s: Any, g: Any, threads: int, chunk_bytes: int) -> dict[str, Any]:
    import numba

    numba.set_num_threads(threads)
    reset_maxrss()
    before = maxrss()
    start, cpu = time.perf_counter(), time.process_time()
    fingerprint = pool(x, s, g)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return record(seconds, cpu, maxrss() - before, fingerprint, threads, chunk_bytes)


def read_x(path: Path) -> Any:
    """X as a scipy CSR matrix, read whole with anndata (the in-memory path's first step)."""
    import zarr
    from anndata.io import read_elem

    return read_elem(zarr.open_group(path, mode="r")["X"])


def run_memory_read(path: Path, s: Any, g: Any, chunk_bytes: int) -> dict[str, Any]:
    import numba

    numba.set_num_threads(1)
    reset_maxrss()
    before = maxrss()
    start, cpu = time.perf_counter(), time.process_time()
    fingerprint = pool(read_x(path), s, g)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return record(seconds, cpu, maxrss() - before, fingerprint, 1, chunk_bytes)


def run_threads(
    x: Any, s: Any, g: Any, workers: int, chunk_bytes: int, *, read_only: bool
) -> dict[str, Any]:
    import dask

    reset_maxrss()
    before = maxrss()
    start, cpu = time.perf_counter(), time.process_time()
    with dask.config.set(scheduler="threads", num_workers=workers):
        if read_only:
            nnz = x.map_blocks(lambda b: np.full((1, 1), b.nnz), dtype=int, chunks=(1, 1))
            fingerprint = str(int(nnz.sum().compute()))
        else:
            fingerprint = pool(x, s, g)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return record(seconds, cpu, maxrss() - before, fingerprint, workers, chunk_bytes)


def run_cluster(
    x: Any, s: Any, g: Any, workers: int, chunk_bytes: int, *, trim: bool
) -> dict[str, Any]:
    """Pool on a LocalCluster; ``trim=False`` drops distributed's default MALLOC_TRIM_THRESHOLD_
    for worker processes (which hands freed memory back to the OS at once)."""
    import dask
    from distributed import Client, LocalCluster

    if not trim:
        environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
        environ.pop("MALLOC_TRIM_THRESHOLD_", None)
        dask.config.set({"distributed.nanny.pre-spawn-environ": environ})

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        client.run(warm_up)
        client.run(reset_maxrss)
        before, cpu_before = client.run(maxrss), client.run(time.process_time)
        start, cpu = time.perf_counter(), time.process_time()
        fingerprint = pool(x, s, g)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        after, cpu_after = client.run(maxrss), client.run(time.process_time)
    peak = max(after[w] - before[w] for w in after)
    cpu += sum(cpu_after[w] - cpu_before[w] for w in cpu_after)
    return record(seconds, cpu, peak, fingerprint, workers, chunk_bytes)


def record(
    seconds: float, cpu: float, peak: int, fingerprint: str, cores: int, chunk: int
) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "cpu": cpu,
        "peak": peak,
        "fingerprint": fingerprint,
        "cores": cores,
        "chunk": chunk,
    }


def table(results: dict[str, list[dict[str, Any]]], cells: int) -> str:
    def median(runs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    def per_cpu(runs: list[dict[str, Any]]) -> float:
        return cells / median(runs, "cpu")

    bases = [results.get("memory-1"), results.get("memory-read-1")]
    chunk = next(iter(results.values()))[0]["chunk"]
    lines = [
        f"One CSR chunk: {chunk / 2**20:,.0f} MiB decompressed.",
        "",
        "| case | workers | median s | CPU s | cells per CPU s | CPU per cell ÷ in memory "
        "(pooling only) | ÷ in memory (reading X + pooling) | peak memory (per worker) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case, runs in results.items():
        name = NAMES[case.rsplit("-", 1)[0]]
        ratios = [f"{per_cpu(base) / per_cpu(runs):.2f}" if base else "–" for base in bases]
        peak = median(runs, "peak")
        lines.append(
            f"| {name} | {runs[0]['cores']} | {median(runs, 'seconds'):.2f} "
            f"| {median(runs, 'cpu'):.2f} | {per_cpu(runs):,.0f} | {ratios[0]} | {ratios[1]} "
            f"| {peak / 2**20:,.0f} MiB ({peak / chunk:.1f} chunks) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=500_000)
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--samples", type=int, default=24)
    parser.add_argument("--groups", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-rows", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES), help="from: " + ", ".join(CASES))
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "cytepool-bench"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.path, args.chunk_rows)))
        return 0
    cases = args.cases.split(",")
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}")
    args.cache.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's and anndata's notes on future defaults
        path = generate(args.cache, args)
    print(f"data: {path} ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    results: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
    for _ in range(args.repeats):
        for case in cases:
            command = [sys.executable, __file__, "--worker", case, "--path", str(path)]
            command += ["--chunk-rows", str(args.chunk_rows)]
            env = {**os.environ, "PYTHONWARNINGS": "ignore"}
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{case} failed:\n{done.stderr[-3000:]}")
            results[case].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(case, results[case][-1]["seconds"], file=sys.stderr)
    fingerprints = {
        r["fingerprint"]
        for case, runs in results.items()
        for r in runs
        if not case.startswith("zarr-read")
    }
    if len(fingerprints) != 1:
        raise AssertionError(f"the cases gave {len(fingerprints)} different fingerprints")
    command = "python benchmarks/dask_pool.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    print(
        f"`{command.strip()}` — {args.cells:,} cells × {args.genes:,} genes, density "
        f"{args.density}, chunks of {args.chunk_rows:,} rows, {args.repeats} runs each, "
        f"{os.cpu_count()} CPUs; every case gave the same fingerprint\n"
    )
    print(table(results, args.cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
