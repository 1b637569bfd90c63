"""Benchmark: many .h5ad files into one cube, in worker processes, against concat + aggregate.

Generates once, under /tmp/cytepool-bench-data/ (or --dir), N files of C cells x 20,000 genes
each (.h5ad, X a CSR matrix of float32 whole numbers, 5 % nonzero, gzip), 3 donors per file
and 12 cell types, cells in random order. Then each case runs in a fresh process,
--repeats times:

- ``jobs=1`` / ``jobs=2``: ``from_anndata(paths, sample_key="donor", group_key="cell_type",
  jobs=...)``: each file pooled on its own (jobs=2: in two worker processes), the cubes
  added up;
- ``one file``: ``from_anndata(paths[0], ...)``, one file's working set (for the memory
  target: the memory ``jobs=2`` holds at once over all its processes should be at most
  twice this);
- ``concat + aggregate``: ``anndata.concat([read_h5ad(p) for p in paths])`` then scanpy's
  ``sc.get.aggregate(adata, by=["donor", "cell_type"], func="sum")``.

Wall time is the case's own; CPU time and memory cover the case's process and every
process it starts (the fork server, its resource tracker and the workers): a watcher reads
them every 0.05 s (CPU time of a process's last 0.05 s may be missed). Memory is reported
twice: the memory held at once (the largest sum, at one reading, of the processes'
proportional set sizes, which count a page that processes share once, divided among them:
the imports a worker shares with the fork server that started it), which the target
compares; and the sum of each process's own peak resident set (VmHWM), an upper bound that
counts shared pages once per process and adds peaks of different moments. The sums of the
cytepool cases and of scanpy are compared exactly. Prints a markdown table of medians and the
ratios the targets name (jobs=2 >= 1.8x faster than jobs=1, >= 4x faster than concat +
aggregate, memory held at once <= 2 x one file's), and two bounds on jobs=1 / jobs=2: the
cores over the cores jobs=1 keeps busy by itself, and jobs=1's wall time over jobs=2's CPU
time spread over every core (what jobs=2 would take with every core busy all the time: its
CPU counts the worker's own start, its imports).

    python benchmarks/pool_many_files.py             # 8 files x 50,000 cells
    python benchmarks/pool_many_files.py --small     # 3 files x 2,000 cells x 500 genes
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

DENSITY = 0.05
N_GROUPS, DONORS_PER_FILE = 12, 3
CHUNK_ROWS = 10_000
DATA = _common.DATA


def generate(path: Path, index: int, n_cells: int, n_genes: int) -> None:
    """Write one file: obs/var with anndata, X (CSR, gzip) with h5py, in row chunks."""
    import anndata as ad
    import h5py
    import pandas as pd

    rng = np.random.default_rng(index)
    donors = [f"f{index}d{k}" for k in range(DONORS_PER_FILE)]
    obs = pd.DataFrame(
        {
            "donor": pd.Categorical.from_codes(rng.integers(0, len(donors), n_cells), donors),
            "cell_type": pd.Categorical.from_codes(
                rng.integers(0, N_GROUPS, n_cells), [f"type{g:02d}" for g in range(N_GROUPS)]
            ),
        },
        index=[f"f{index}c{i}" for i in range(n_cells)],
    )
    var = pd.DataFrame(index=[f"gene{j}" for j in range(n_genes)])
    temporary = path.with_name(path.name + ".partial")
    ad.AnnData(obs=obs, var=var).write_h5ad(temporary)
    window = round(1 / DENSITY)  # one nonzero in each window of 20 genes: 5 %
    per_row = n_genes // window
    nnz = n_cells * per_row
    starts = np.arange(per_row, dtype=np.int32) * window
    with h5py.File(temporary, "a") as f:
        group = f.create_group("X")
        group.attrs.update(
            {
                "encoding-type": "csr_matrix",
                "encoding-version": "0.1.0",
                "shape": (n_cells, n_genes),
            }
        )
        chunk = min(nnz, 1 << 18)
        gzip = {"compression": "gzip", "compression_opts": 4, "chunks": (chunk,)}
        data = group.create_dataset("data", shape=(nnz,), dtype=np.float32, **gzip)
        indices = group.create_dataset("indices", shape=(nnz,), dtype=np.int32, **gzip)
        indptr = np.arange(n_cells + 1, dtype=np.int64) * per_row
        group.create_dataset("indptr", data=indptr, compression="gzip")
        for first in range(0, n_cells, CHUNK_ROWS):
            rows = min(CHUNK_ROWS, n_cells - first)
            columns = starts + rng.integers(0, window, (rows, per_row), dtype=np.int32)
            where = slice(first * per_row, (first + rows) * per_row)
            data[where] = rng.integers(1, 12, rows * per_row).astype(np.float32)
            indices[where] = columns.ravel()
    os.replace(temporary, path)


CASE = r"""
import json, sys, time
import numpy as np
{imports}
paths, out = sys.argv[1].split(","), sys.argv[2]
start = time.perf_counter()
{body}
total = time.perf_counter() - start
np.save(out, sums)
print(json.dumps({{"time": total}}))
"""

POOL = (
    "cube = from_anndata({paths}, sample_key='donor', group_key='cell_type', progress=False{jobs})\n"
    "sums = cube.to_numpy('counts')"
)

CASES = {
    "cytepool jobs=1": ("from cytepool.io.anndata import from_anndata", POOL, ", jobs=1"),
    "cytepool jobs=2": ("from cytepool.io.anndata import from_anndata", POOL, ", jobs=2"),
    "cytepool one file": ("from cytepool.io.anndata import from_anndata", POOL, "one"),
    "concat + aggregate": (
        "import anndata as ad, scanpy as sc",
        "adata = ad.concat([ad.read_h5ad(p) for p in paths])\n"
        "pb = sc.get.aggregate(adata, by=['donor', 'cell_type'], func='sum')\n"
        "donors = sorted(pb.obs['donor'].astype(str).unique())\n"
        "types = sorted(pb.obs['cell_type'].astype(str).unique())\n"
        "sums = np.zeros((len(types), len(donors), pb.n_vars))\n"
        "g = [types.index(t) for t in pb.obs['cell_type'].astype(str)]\n"
        "s = [donors.index(d) for d in pb.obs['donor'].astype(str)]\n"
        "sums[g, s] = pb.layers['sum']",
        "",
    ),
}


def case_code(name: str) -> str:
    imports, body, jobs = CASES[name]
    if "{paths}" in body:
        one = jobs == "one"
        body = body.format(paths="paths[0]" if one else "paths", jobs="" if one else jobs)
    return CASE.format(imports=imports, body=body)


def run_case(name: str, paths: list[Path], out: Path) -> dict[str, Any]:
    """Run one case in a fresh process, watching it and every process it starts."""
    command = [sys.executable, "-c", case_code(name), ",".join(map(str, paths)), str(out)]
    return _common.watch(command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--cells", type=int, default=50_000, help="per file")
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--small", action="store_true", help="3 files x 2,000 cells x 500 genes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=DATA, help=f"data directory ({DATA})")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv  # as this script takes them
    if args.small:
        args.files, args.cells, args.genes = 3, 2_000, 500
    directory = args.dir / f"i25-many-{args.files}x{args.cells}x{args.genes}"
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"part{i}.h5ad" for i in range(args.files)]
    for i, path in enumerate(paths):
        if not path.exists():
            start = time.perf_counter()
            generate(path, i, args.cells, args.genes)
            print(f"generated {path} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    size = sum(p.stat().st_size for p in paths)
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sums = {}
        for name in args.cases.split(","):
            for repeat in range(args.repeats):
                out = Path(tmp) / f"{len(sums)}-{repeat}.npy"
                result = run_case(name, paths, out)
                print(f"{name} run {repeat}: {result}", file=sys.stderr)
                results.setdefault(name, []).append(result)
            sums[name] = np.load(out)
        equal = _equal(sums)
    report(args, size, results, equal)
    return 0


def _equal(sums: dict[str, np.ndarray]) -> dict[str, bool]:
    reference = sums.get("concat + aggregate")
    return {
        name: bool(np.array_equal(values.astype(np.float64), reference))
        for name, values in sums.items()
        if reference is not None and name not in {"concat + aggregate", "cytepool one file"}
    }


def report(args: argparse.Namespace, size: int, results: dict, equal: dict[str, bool]) -> None:
    medians = {
        name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for name, runs in results.items()
    }
    print(
        f"\n{args.files} files x {args.cells:,} cells x {args.genes:,} genes (.h5ad, CSR float32, "
        f"{DENSITY:.0%} nonzero, gzip; {size / 1e9:.2f} GB in all), {DONORS_PER_FILE} donors per "
        f"file x {N_GROUPS} cell types; {os.cpu_count()} CPUs; medians of {args.repeats} runs\n"
    )
    print(
        "| case | wall (s) | CPU (s) | memory held at once, all processes (GB) "
        "| sum of each process's peak (GB) | processes | sums |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, m in medians.items():
        same = {True: "equal", False: "DIFFER"}.get(equal.get(name), "")  # type: ignore[call-overload]
        print(
            f"| {name} | {m['time']:.2f} | {m['cpu']:.1f} | {m['together'] / 1e9:.2f} | "
            f"{m['peak'] / 1e9:.2f} | {m['processes']:.0f} | {same} |"
        )
    print("\n| ratio | value | target |")
    print("|---|---:|---|")
    ratios = [
        ("jobs=1 / jobs=2 (wall)", "cytepool jobs=1", "cytepool jobs=2", "time", ">= 1.8"),
        (
            "concat + aggregate / jobs=2 (wall)",
            "concat + aggregate",
            "cytepool jobs=2",
            "time",
            ">= 4",
        ),
        (
            "jobs=2 / one file, memory held at once",
            "cytepool jobs=2",
            "cytepool one file",
            "together",
            "<= 2",
        ),
        (
            "jobs=2 / one file, sums of peaks (upper bound)",
            "cytepool jobs=2",
            "cytepool one file",
            "peak",
            "",
        ),
        (
            "concat + aggregate / jobs=2, memory held at once",
            "concat + aggregate",
            "cytepool jobs=2",
            "together",
            "",
        ),
    ]
    for label, top, bottom, key, target in ratios:
        if top in medians and bottom in medians:
            print(f"| {label} | {medians[top][key] / medians[bottom][key]:.2f} | {target} |")
    if "cytepool jobs=1" in medians:  # jobs=1 already busy on more than one core: the bound
        one = medians["cytepool jobs=1"]
        cores = len(os.sched_getaffinity(0))
        bound = cores / max(1.0, one["cpu"] / one["time"])
        print(
            f"| bound on jobs=1 / jobs=2: {cores} cores / (CPU / wall of jobs=1) | {bound:.2f} | |"
        )
        if "cytepool jobs=2" in medians:  # the worker's own start (its imports) counted too
            two = medians["cytepool jobs=2"]
            busy = one["time"] / (two["cpu"] / cores)
            print(
                f"| bound with jobs=2's own CPU: wall of jobs=1 / (CPU of jobs=2 / {cores} "
                f"cores) | {busy:.2f} | |"
            )
    print(f"\ncommand: python benchmarks/pool_many_files.py {' '.join(args.argv)}")
    if not all(equal.values()):
        raise SystemExit("the sums differ")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
