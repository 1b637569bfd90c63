"""Benchmark: pool a backed .h5ad with from_anndata vs scanpy's sc.get.aggregate in memory.

Generates once, into a temporary directory (or --dir), an .h5ad of N cells x 20,000 genes,
5% nonzero (whole-number counts stored as float32, CSR), 24 samples x 12 groups with the
cells in random order. Then each case runs in a fresh process, --repeats times:

- ``from_anndata``: ``from_anndata(read_h5ad(path, backed="r"), ...)``: X is read in row
  blocks, so memory is one block plus the cube;
- ``scanpy``: ``read_h5ad(path)`` (loading X, timed apart) then
  ``sc.get.aggregate(adata, by=["sample", "group"], func="sum")``.

Peak memory is the process's peak resident set size (VmHWM), which includes the
interpreter and imports (the "baseline" column: the RSS after imports, before the case). A
parent watchdog stops a case whose resident memory passes --memory-limit GiB, so a size
that does not fit is reported instead of exhausting the machine. The sums of both cases
are compared exactly. Prints a markdown table of medians and ratios.

    python benchmarks/anndata_pool.py                 # 1,000,000 cells
    python benchmarks/anndata_pool.py --cells 200000  # smaller
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

N_GENES = 20_000
DENSITY = 0.05
N_SAMPLES, N_GROUPS = 24, 12
CHUNK_ROWS = 50_000


def generate(path: Path, n_cells: int, seed: int = 0) -> None:
    """Write the .h5ad in row chunks: obs/var with anndata, X (CSR) with h5py."""
    import anndata as ad
    import h5py
    import pandas as pd

    rng = np.random.default_rng(seed)
    obs = pd.DataFrame(
        {
            "sample": pd.Categorical.from_codes(
                rng.integers(0, N_SAMPLES, n_cells), [f"s{i:02d}" for i in range(N_SAMPLES)]
            ),
            "group": pd.Categorical.from_codes(
                rng.integers(0, N_GROUPS, n_cells), [f"g{i:02d}" for i in range(N_GROUPS)]
            ),
        },
        index=[f"c{i}" for i in range(n_cells)],
    )
    var = pd.DataFrame(index=[f"gene{j}" for j in range(N_GENES)])
    ad.AnnData(obs=obs, var=var).write_h5ad(path)
    window = round(1 / DENSITY)  # one nonzero in each window of 20 genes: 5%
    per_row = N_GENES // window
    nnz = n_cells * per_row
    starts = np.arange(per_row, dtype=np.int32) * window
    with h5py.File(path, "a") as f:
        group = f.create_group("X")
        group.attrs.update(
            {
                "encoding-type": "csr_matrix",
                "encoding-version": "0.1.0",
                "shape": (n_cells, N_GENES),
            }
        )
        data = group.create_dataset("data", shape=(nnz,), dtype=np.float32)
        indices = group.create_dataset("indices", shape=(nnz,), dtype=np.int32)
        group.create_dataset("indptr", data=np.arange(n_cells + 1, dtype=np.int64) * per_row)
        for first in range(0, n_cells, CHUNK_ROWS):
            rows = min(CHUNK_ROWS, n_cells - first)
            columns = starts + rng.integers(0, window, (rows, per_row), dtype=np.int32)
            values = rng.integers(1, 12, rows * per_row).astype(np.float32)
            data[first * per_row : (first + rows) * per_row] = values
            indices[first * per_row : (first + rows) * per_row] = columns.ravel()


CASE = r"""
import json, sys, time
import numpy as np
import psutil
import anndata as ad
{imports}
path, out = sys.argv[1], sys.argv[2]
baseline = psutil.Process().memory_info().rss
start = time.perf_counter()
{body}
total = time.perf_counter() - start
np.save(out, sums)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent through fork and exec
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
print(json.dumps({{"time": total, "load": load, "peak": peak, "baseline": baseline}}))
"""

CASES = {
    "from_anndata (backed)": (
        "from cytepool.io.anndata import from_anndata",
        "adata = ad.read_h5ad(path, backed='r')\n"
        "load = 0.0\n"
        "cube = from_anndata(adata, sample_key='sample', group_key='group', progress=False)\n"
        "sums = cube.to_numpy('counts')",
    ),
    "sc.get.aggregate (in memory)": (
        "import scanpy as sc",
        "adata = ad.read_h5ad(path)\n"
        "load = time.perf_counter() - start\n"
        "pb = sc.get.aggregate(adata, by=['sample', 'group'], func='sum')\n"
        "obs = pb.obs\n"
        "sums = np.zeros((len(obs['group'].cat.categories), len(obs['sample'].cat.categories),"
        " pb.n_vars))\n"
        "sums[obs['group'].cat.codes.to_numpy(), obs['sample'].cat.codes.to_numpy()] = "
        "pb.layers['sum']",
    ),
}


def run_case(name: str, path: Path, out: Path, limit: float) -> dict[str, float] | str:
    """Run one case in a fresh process; stop it if its RSS passes ``limit`` bytes."""
    import psutil

    imports, body = CASES[name]
    code = CASE.format(imports=imports, body=body)
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(path), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watched = psutil.Process(process.pid)
    while process.poll() is None:
        try:
            if watched.memory_info().rss > limit:
                process.kill()
                process.wait()
                return f"stopped: resident memory passed {limit / 2**30:.0f} GiB"
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        return f"failed ({process.returncode}): {stderr.strip().splitlines()[-1:]}"
    return json.loads(stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="where to keep the .h5ad (default: a temp dir)")
    parser.add_argument("--memory-limit", type=float, default=16.0, help="GiB per case")
    parser.add_argument(
        "--skip-scanpy", action="store_true", help="only from_anndata (for sizes scanpy cannot do)"
    )
    args = parser.parse_args()
    if args.dir is not None:  # made if it is not there yet
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or Path(tmp)
        path = directory / f"cells-{args.cells}.h5ad"
        if not path.exists():
            start = time.perf_counter()
            generate(path, args.cells)
            print(
                f"generated {path} ({path.stat().st_size / 1e9:.1f} GB) in "
                f"{time.perf_counter() - start:.0f} s",
                file=sys.stderr,
            )
        results: dict[str, list[dict[str, float]] | str] = {}
        outputs = {}
        for name in list(CASES)[: 1 if args.skip_scanpy else None]:
            runs: list[dict[str, float]] = []
            for i in range(args.repeats):
                out = Path(tmp) / f"{len(outputs)}-{i}.npy"
                result = run_case(name, path, out, args.memory_limit * 2**30)
                print(f"{name} run {i}: {result}", file=sys.stderr)
                if isinstance(result, str):
                    results[name] = result
                    break
                runs.append(result)
                outputs[name] = out
            results.setdefault(name, runs)
        report(args.cells, results, outputs)


def report(n_cells: int, results: dict, outputs: dict) -> None:
    names = list(CASES)
    if len(outputs) == 2:
        a, b = (np.load(outputs[name]) for name in names)
        equal = bool(np.array_equal(a.astype(np.float64), b))
        print(f"\nsums equal: {equal}")
        if not equal:
            raise SystemExit("the sums differ")
    nnz = n_cells * (N_GENES // round(1 / DENSITY))
    print(
        f"\n{n_cells:,} cells x {N_GENES:,} genes, {nnz:,} nonzeros ({DENSITY:.0%}), "
        f"{N_SAMPLES} samples x {N_GROUPS} groups; medians of the runs\n"
    )
    print(
        "| case | time (s) | of which loading X (s) | peak memory (GB) | baseline (GB) "
        "| time vs scanpy | peak memory vs scanpy |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    medians = {}
    for name, runs in results.items():
        if isinstance(runs, str):
            print(f"| {name} | {runs} | | | | | |")
            continue
        medians[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    peer = medians.get(names[1])
    for name, m in medians.items():
        ratio_t = f"{m['time'] / peer['time']:.2f}" if peer else "n/a"
        ratio_m = f"{m['peak'] / peer['peak']:.3f}" if peer else "n/a"
        print(
            f"| {name} | {m['time']:.1f} | {m['load']:.1f} | {m['peak'] / 1e9:.2f} | "
            f"{m['baseline'] / 1e9:.2f} | {ratio_t} | {ratio_m} |"
        )
    print(f"\ncommand: python benchmarks/anndata_pool.py {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
