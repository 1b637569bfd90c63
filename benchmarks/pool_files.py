"""Benchmark: pool cells straight from a file, against reading X and against anndata + scanpy.

Builds once, under ``/tmp/cytepool-bench-data/pool-files-<cells>x<genes>/`` (``--dir``), the
cells as anndata 0.12 writes them: N cells x 20,000 genes, 5 % nonzero (whole-number counts as
float32, int32 indices, CSR), 24 samples x 12 cell types in random order, as

- ``chunked.h5ad``: ``write_h5ad`` with no compression (chunked datasets);
- ``gzip.h5ad``: ``write_h5ad(compression="gzip", compression_opts=4)``;
- ``v2.zarr``: ``write_zarr`` in Zarr v2 (anndata 0.12's default: blosc lz4);
- at a tenth of the cells: ``csc.h5ad`` (X as CSC) and ``dense.h5ad`` (X dense, a fiftieth).

Build the data with anndata 0.12 (``--build`` runs in the interpreter it is given). Every case
then runs in a fresh process, warm page cache (the file is read once first), ``--repeats``
times, the cases taking turns (a round runs each once, so a slow spell of the machine falls
on every case alike and the ratios hold), and reports the median wall time, CPU time (user +
system: CPU / wall is the cores used) and the peak resident memory above the process's
memory after its imports:

- ``read X``: the one-call read of X's data and indices (h5py ``ds[...]`` / zarr-python
  ``array[...]``), what any reader must at least do;
- ``from_anndata``: ``cytepool.io.anndata.from_anndata(path, ...)``;
- ``cytepool pool``: the command line, timed by the parent from the child's start to its exit
  (the interpreter, the imports and numba's kernels loaded from their cache included, as a
  user waits for them; see _child);
- ``anndata + scanpy``: ``anndata.read_h5ad``/``read_zarr`` then ``sc.get.aggregate(..., func="sum")``
  (timed from the file, the load included).

The sums of from_anndata and scanpy are compared exactly. Prints the decoders installed and a
markdown table with the ratios the issue asks for. Run it under
``flock /tmp/cytepool-bench.lock``::

    python benchmarks/pool_files.py --build     # once (anndata 0.12 writes the files)
    python benchmarks/pool_files.py             # the table
    python benchmarks/pool_files.py --small     # 20,000 cells x 2,000 genes: a smoke run
"""

from __future__ import annotations

import argparse
import importlib.metadata
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common
import pool_many_files

N_SAMPLES, N_GROUPS = 24, 12
DENSITY = 0.05
ROOT = _common.DATA
LAYOUTS = ("chunked.h5ad", "gzip.h5ad", "v2.zarr", "csc.h5ad", "dense.h5ad")
CASES = ("read", "from_anndata", "cli", "scanpy")
CASE_NAMES = {
    "read": "read X (one call)",
    "from_anndata": "from_anndata(path)",
    "cli": "cytepool pool",
    "scanpy": "anndata + scanpy",
}
MiB = _common.MiB
WARM = (20_000, 2_000)  # cells x genes of the files a child pools first (see _child): --small


# --------------------------------------------------------------------------- data


def _obs(n_cells: int, rng: np.random.Generator) -> object:
    import pandas as pd

    samples = [f"s{i:02d}" for i in range(N_SAMPLES)]
    groups = [f"g{i:02d}" for i in range(N_GROUPS)]
    return pd.DataFrame(
        {
            "sample": pd.Categorical.from_codes(rng.integers(0, N_SAMPLES, n_cells), samples),
            "cell_type": pd.Categorical.from_codes(rng.integers(0, N_GROUPS, n_cells), groups),
        },
        index=pd.Index([f"c{i}" for i in range(n_cells)]),
    )


def counts_matrix(n_cells: int, n_genes: int, seed: int = 0) -> object:
    """A CSR matrix: one nonzero in each window of 20 genes (5 %), counts 1 + Poisson(1)."""
    import scipy.sparse

    rng = np.random.default_rng(seed)
    window = round(1 / DENSITY)
    per_row = n_genes // window
    starts = np.arange(per_row, dtype=np.int32) * window
    indices = np.empty(n_cells * per_row, dtype=np.int32)
    step = 10_000
    for first in range(0, n_cells, step):
        rows = min(step, n_cells - first)
        block = starts + rng.integers(0, window, (rows, per_row), dtype=np.int32)
        indices[first * per_row : (first + rows) * per_row] = block.ravel()
    data = (1 + rng.poisson(1.0, indices.size)).astype(np.float32)
    indptr = np.arange(n_cells + 1, dtype=np.int64) * per_row
    return scipy.sparse.csr_matrix((data, indices, indptr), shape=(n_cells, n_genes))


def build(folder: Path, n_cells: int, n_genes: int) -> None:
    """Write every layout with anndata (as its version writes them), into ``folder``."""
    import anndata as ad
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    var = pd.DataFrame(index=pd.Index([f"gene{j}" for j in range(n_genes)]))
    matrix = counts_matrix(n_cells, n_genes)
    adata = ad.AnnData(matrix, obs=_obs(n_cells, rng), var=var)
    writers = {
        "chunked.h5ad": lambda p: adata.write_h5ad(p),
        "gzip.h5ad": lambda p: adata.write_h5ad(p, compression="gzip", compression_opts=4),
        "v2.zarr": lambda p: _write_zarr_v2(adata, p),
    }
    small = adata[: n_cells // 10].copy()
    writers["csc.h5ad"] = lambda p: ad.AnnData(
        small.X.tocsc(), obs=small.obs, var=small.var
    ).write_h5ad(p)
    tiny = adata[: n_cells // 50].copy()
    writers["dense.h5ad"] = lambda p: ad.AnnData(
        tiny.X.toarray(), obs=tiny.obs, var=tiny.var
    ).write_h5ad(p)
    for name, write in writers.items():
        target = folder / name
        if target.exists():
            continue
        partial = folder / f".{name}.partial"
        _remove(partial)
        start = time.perf_counter()
        with warnings.catch_warnings():  # anndata's notes on Zarr v2
            warnings.simplefilter("ignore")
            write(partial)
        partial.rename(target)
        print(f"wrote {target} in {time.perf_counter() - start:.1f} s", flush=True)
    version = importlib.metadata.version("anndata")
    (folder / "built-with.txt").write_text(f"anndata {version}\n")


def _write_zarr_v2(adata: object, path: Path) -> None:
    import anndata as ad

    with ad.settings.override(zarr_write_format=2):
        adata.write_zarr(path)  # type: ignore[attr-defined]


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


# --------------------------------------------------------------------------- cases (child)


def _read_x(path: Path) -> None:
    if path.suffix == ".h5ad":
        import h5py

        with h5py.File(path, "r") as f:
            x = f["X"]
            if isinstance(x, h5py.Dataset):
                x[...]
                return
            x["data"][...]
            x["indices"][...]
        return
    import zarr

    group = zarr.open_group(path, mode="r")
    group["X"]["data"][...]
    group["X"]["indices"][...]


def _from_anndata(path: Path) -> dict[str, np.ndarray]:
    from cytepool.io.anndata import from_anndata

    cube = from_anndata(path, sample_key="sample", group_key="cell_type", progress=False)
    counts = cube.to_numpy("counts")
    return {"counts": counts.reshape(-1, counts.shape[2])}


def _scanpy(path: Path) -> dict[str, np.ndarray]:
    import anndata as ad
    import scanpy as sc

    adata = ad.read_h5ad(path) if path.suffix == ".h5ad" else ad.read_zarr(path)
    pooled = sc.get.aggregate(adata, by=["cell_type", "sample"], func="sum")
    sums = pooled.layers["sum"]
    sums = sums.toarray() if hasattr(sums, "toarray") else np.asarray(sums)
    # in the cube's order: groups x samples, ids sorted, absent profiles zero
    groups = sorted(map(str, adata.obs["cell_type"].unique()))
    samples = sorted(map(str, adata.obs["sample"].unique()))
    counts = np.zeros((len(groups) * len(samples), sums.shape[1]))
    labels = zip(pooled.obs["cell_type"].astype(str), pooled.obs["sample"].astype(str), strict=True)
    for i, (group, sample) in enumerate(labels):
        counts[groups.index(group) * len(samples) + samples.index(sample)] = sums[i]
    return {"counts": counts}


def _child(case: str, path: Path, out: Path | None, warm: Path | None) -> None:
    """Run one case in this (fresh) process and print its measures as JSON.

    What every run of a process pays once, whatever the file's size, is taken before the
    measure: the imports, and for ``from_anndata`` numba's kernels loaded from their cache
    and a first pooling of ``warm`` (the ``--small`` file of the same layout, one block:
    shared libraries paged in, pyarrow's and the allocator's pools, the reader's threads
    started). ``cytepool pool`` gets no warm-up: it is measured as a user runs it, from the
    process's start (``cpu_total``: the process's CPU time; the parent times its wall), the
    kernels' loading and every import it makes included; only its memory is counted above
    the imports made here (h5py, scipy, pandas, narwhals, numba, zarr-python for a store,
    cytepool's modules), which the command makes anyway.
    """
    import h5py  # noqa: F401  (imports are not what is measured)
    import scipy.sparse  # noqa: F401

    import cytepool.io.anndata

    if case == "scanpy":
        import anndata  # noqa: F401  (cytepool reads obs and var without it)
        import scanpy  # noqa: F401
    if case in ("read", "cli") and path.suffix != ".h5ad":
        import zarr  # noqa: F401
    if case == "cli":  # what the command imports anyway: its memory is not the pooling's
        import narwhals  # noqa: F401
        import numba  # noqa: F401
        import pandas  # noqa: F401

        import cytepool.cli
    if case == "from_anndata":
        _common.load_kernels()
        if warm is not None:
            _from_anndata(warm)
    base = _common.rss_kib()
    _common.reset_peak()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    result = None
    if case == "read":
        _read_x(path)
    elif case == "from_anndata":
        result = _from_anndata(path)
    elif case == "scanpy":
        result = _scanpy(path)
    elif case == "cli":
        with tempfile.TemporaryDirectory() as tmp:
            command = ["pool", str(path), str(Path(tmp) / "c.cube.zarr")]
            command += ["--sample-key", "sample", "--group-key", "cell_type"]
            cytepool.cli.main(command)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    if result is not None and out is not None:
        np.save(out, result["counts"].astype(np.float64))
    extra = (_common.peak_kib() - base) * 1024
    measures = {"wall": wall, "cpu": cpu, "extra": extra, "cpu_total": _cpu(after)}
    print(json.dumps(measures))


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


# --------------------------------------------------------------------------- parent


def _warm(path: Path) -> int:
    """Read every file of ``path`` once (warm page cache); its size in bytes."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    total = 0
    for file in files:
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 24):
                total += len(chunk)
    return total


def _x_bytes(path: Path) -> int:
    """The bytes of X in memory (data + indices, or the dense array)."""
    import h5py

    if path.suffix == ".h5ad":
        with h5py.File(path, "r") as f:
            x = f["X"]
            if isinstance(x, h5py.Dataset):
                return int(x.size * x.dtype.itemsize)
            return int(x["data"].size * 4 + x["indices"].size * 4)
    meta = json.loads((path / "X" / "data" / ".zarray").read_text())
    return int(meta["shape"][0] * 8)


def _run_case(
    case: str, path: Path, env: dict[str, str], out: Path | None, warm: Path
) -> dict[str, float]:
    """One case in a fresh process. ``cytepool pool`` is timed from outside (the interpreter's
    start and the imports included, as a user waits for them) and its CPU time is the whole
    process's; its memory, like every case's, is what it takes above its imports."""
    command = [sys.executable, __file__, "--child", case, str(path), str(out or "-")]
    command.append(str(warm / path.name))
    if case == "cli":
        result = _common.run_alone(command, env)
        return {**result, "wall": result["outside"], "cpu": result["cpu_total"]}
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _decoders(python: str, env: dict[str, str]) -> str:
    code = (
        "import importlib.metadata as m\n"
        "for name in ('numcodecs', 'deflate', 'zstandard', 'backports.zstd', 'h5py', 'zarr', "
        "'anndata', 'scanpy', 'numba'):\n"
        "    try: print(name, m.version(name))\n"
        "    except m.PackageNotFoundError: print(name, 'not installed')\n"
    )
    done = subprocess.run([python, "-c", code], env=env, check=True, capture_output=True, text=True)
    return ", ".join(done.stdout.split("\n")[:-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--build", action="store_true", help="write the files and stop")
    parser.add_argument("--small", action="store_true", help="20,000 cells x 2,000 genes")
    parser.add_argument("--cells", type=int, default=200_000)
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument(
        "--sections",
        default="files,many",
        help="files: the layouts of one file; many: many files into one cube "
        "(pool_many_files.py; with --small, 3 files x 2,000 cells x 500 genes)",
    )
    args = parser.parse_args(argv)
    if args.child:
        case, path, out, warm = args.child
        if case == "cli":  # as the program does (cytepool.cli.run): dask marked absent first
            from cytepool._unused import hide_unused

            hide_unused()
        _child(case, Path(path), None if out == "-" else Path(out), Path(warm))
        return 0
    sections = args.sections.split(",")
    if "files" in sections or args.build:
        _files(args)
    if args.build:
        return 0
    if "many" in sections:
        many = ["--repeats", str(args.repeats), "--dir", str(args.dir or ROOT)]
        print(f"\n## Many files (benchmarks/pool_many_files.py {' '.join(many)})", flush=True)
        return pool_many_files.main(many + (["--small"] if args.small else []))
    return 0


def _files(args: argparse.Namespace) -> None:
    """The layouts of one file: the table of every case."""
    if args.small:
        args.cells, args.genes = 20_000, 2_000
    folder = args.dir or ROOT / f"pool-files-{args.cells}x{args.genes}"
    if args.build or not all((folder / name).exists() for name in LAYOUTS):
        build(folder, args.cells, args.genes)
        if args.build:
            return
    warm = folder if args.cells <= WARM[0] else ROOT / f"pool-files-{WARM[0]}x{WARM[1]}"
    if not all((warm / name).exists() for name in LAYOUTS):
        build(warm, *WARM)
    python = sys.executable
    env = dict(os.environ)
    source = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    print(f"decoders and readers: {_decoders(python, env)}")
    print(f"files: {folder} ({(folder / 'built-with.txt').read_text().strip()})")
    print(f"cores: {len(os.sched_getaffinity(0))}; repeats: {args.repeats} (medians)\n")
    rows = []
    for layout in args.layouts.split(","):
        path = folder / layout
        size = _warm(path)
        x_bytes = _x_bytes(path)
        cases = args.cases.split(",")
        runs: dict[str, list[dict[str, float]]] = {case: [] for case in cases}
        sums: dict[str, np.ndarray] = {}
        for i in range(args.repeats):  # the cases take turns: each round sees one machine
            for case in cases:
                keep = i == 0 and case in ("from_anndata", "scanpy")
                out = folder / f".sums-{case}.npy" if keep else None
                runs[case].append(_run_case(case, path, env, out, warm))
                if out is not None:
                    sums[case] = np.load(out)
                    out.unlink()
        results = {
            case: {
                key: statistics.median(run[key] for run in found)
                for key in ("wall", "cpu", "extra")
            }
            for case, found in runs.items()
        }
        equal = "-"
        if len(sums) == 2:
            equal = "equal" if np.array_equal(*sums.values()) else "differ"
        rows.append((layout, size, x_bytes, results, equal))
    _print_table(rows, args.genes)


def _print_table(rows: list, n_genes: int) -> None:
    print("| file | size | X in memory | case | wall s | CPU s | extra memory MiB (% of X) |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for layout, size, x_bytes, results, _ in rows:
        for case, r in results.items():
            extra = r["extra"]
            print(
                f"| {layout} | {size / MiB:.0f} MiB | {x_bytes / MiB:.0f} MiB | {CASE_NAMES[case]} "
                f"| {r['wall']:.2f} | {r['cpu']:.2f} | {extra / MiB:.0f} ({100 * extra / x_bytes:.1f} %) |"
            )
    print("\n| file | from_anndata / anndata + scanpy | from_anndata / read X | sums |")
    print("|---|---:|---:|---|")
    for layout, _, _, results, equal in rows:
        ratios = [_ratio(results, "from_anndata", case) for case in ("scanpy", "read")]
        print(f"| {layout} | {ratios[0]} | {ratios[1]} | {equal} |")
    cube = N_SAMPLES * N_GROUPS * n_genes * 8
    print(f"\nThe cube itself (counts, int64) takes {cube / MiB:.0f} MiB of the extra memory.")


def _ratio(results: dict, case: str, other: str) -> str:
    if case not in results or other not in results:
        return "-"
    return f"{results[case]['wall'] / results[other]['wall']:.2f}"


if __name__ == "__main__":
    sys.exit(main())
