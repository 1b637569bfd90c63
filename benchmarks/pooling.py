"""Benchmark: pool cells into pseudobulk profiles (issue 4, item 7).

200,000 cells x 20,000 genes, ~5% nonzero, whole-number counts stored as float32 CSR, 24 samples x
12 groups, cells in random order. Compared, each in a fresh process:

- ``from_cells``: cytepool, with numba's default thread count and with one thread;
- ``scanpy 1.11``: ``sc.get.aggregate(adata, by=["group", "sample"], func="sum")`` from this venv;
- ``scanpy 1.12``: the same from a Python 3.12 venv (scanpy >= 1.12 needs it), made on first use in
  ``benchmarks/.venv-scanpy112`` from pyenv's 3.12;
- ``decoupler``: ``dc.pp.pseudobulk(adata, sample_col="sample", groups_col="group", mode="sum")``;
- two floors, one thread each (numba): one pass reading ``X.data`` and ``X.indices``, and one pass
  that also adds each value into its output row (rows visited in profile order, sorted beforehand).

Each process loads X, warms up on a tiny matrix of the same types (imports, numba compilation),
builds the case's inputs (the CSR matrix and the obs frame, or an AnnData; for the scatter floor
the rows sorted by profile) and times one call: the pooling alone, as a user who has an AnnData
pays it. Memory is the peak resident memory during the call minus that before it (inputs built,
warm-up done). The sums of every case are asserted equal to ``from_cells``'s. The data are
generated once into a cache directory (uncompressed ``.npy``, so loading makes no copy).
The cases run round-robin, their order rotating from one repeat to the next.

Below the table, the targets of issue 16 with what this run measured: scanpy 1.12 on its default
threads / from_cells >= 1.5x, from_cells on one thread / the scatter floor <= 1.1x, and
from_cells's extra memory <= 10 % of X; and of issue 17: the layers counts + detected + squares
in <= 1.3x the time of counts + detected. ``--scaling 50000,200000,800000`` also times from_cells
(default threads and one thread) and the scatter floor at those cell counts (the other options
kept) and reports seconds per 10^8 nonzeros, which should stay flat (800,000 cells at the
default size take 6.4 GB of cached data and as much memory).

Run: ``.venv/bin/python benchmarks/pooling.py`` (``--help`` for the size and the cases).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

HERE = Path(__file__).resolve().parent
VENV_112 = HERE / ".venv-scanpy112"
CASES = (
    "from_cells",
    "from_cells-1-thread",
    "from_cells-detected",
    "from_cells-squares",
    "scanpy-1.12",
    "scanpy-1.11",
    "decoupler",
    "read-floor",
    "scatter-floor",
)
LABELS = {
    "from_cells": "cytepool from_cells",
    "from_cells-1-thread": "cytepool from_cells, 1 thread",
    "from_cells-detected": "cytepool from_cells, layers counts + detected",
    "from_cells-squares": "cytepool from_cells, layers counts + detected + squares",
    "scanpy-1.12": "scanpy {version} (Python 3.12)",
    "scanpy-1.11": "scanpy {version}",
    "decoupler": "decoupler {version} pseudobulk",
    "read-floor": "floor: read X.data, X.indices (1 thread)",
    "scatter-floor": "floor: scatter into output rows (1 thread)",
}


# --------------------------------------------------------------------------- data


def csr_rows(args: argparse.Namespace) -> Iterator[tuple[Any, Any, Any]]:
    """The counts in blocks of rows: (data, indices, nonzeros per row), float32 whole numbers."""
    rng = np.random.default_rng(args.seed)
    n_cells, n_genes = args.cells, args.genes
    step = max(1, 10_000_000 // n_genes)
    for start in range(0, n_cells, step):
        stop = min(start + step, n_cells)
        size = (stop - start) * n_genes
        # Gaps between nonzeros are geometric: each position is nonzero with p = density.
        gaps = rng.geometric(args.density, int(size * args.density * 1.1) + 100)
        where = np.cumsum(gaps) - 1
        where = where[where < size]
        rows = where // n_genes
        indices = (where - rows * n_genes).astype(np.int32)
        data = rng.geometric(0.3, where.size).astype(np.float32)  # whole numbers >= 1
        yield data, indices, np.bincount(rows, minlength=stop - start)


def cell_labels(args: argparse.Namespace) -> tuple[Any, Any]:
    """Sample and group codes of the cells, in random order."""
    rng = np.random.default_rng([args.seed, 1])
    s = rng.integers(0, args.samples, args.cells).astype(np.int16)
    return s, rng.integers(0, args.groups, args.cells).astype(np.int16)


def generate(directory: Path, args: argparse.Namespace) -> Path:
    """Write the CSR parts and the labels as .npy files once; return the directory."""
    name = (
        f"pooling-{args.cells}x{args.genes}-d{args.density}-{args.samples}x{args.groups}"
        f"-seed{args.seed}"
    )
    path = directory / name
    if (path / "done").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    data, indices, counts = zip(*csr_rows(args), strict=True)
    indptr = np.concatenate([[0], np.cumsum(np.concatenate(counts))])
    np.save(path / "data.npy", np.concatenate(data))
    np.save(path / "indices.npy", np.concatenate(indices))
    np.save(path / "indptr.npy", indptr.astype(np.int32 if indptr[-1] < 2**31 else np.int64))
    s, g = cell_labels(args)
    np.save(path / "sample.npy", s)
    np.save(path / "group.npy", g)
    (path / "meta.json").write_text(json.dumps(vars(args), default=str))
    (path / "done").touch()
    return path


def load(path: Path, mmap: bool = False) -> tuple[Any, Any, Any, int]:
    """The CSR parts of X, the sample and group codes, and n_genes (memory-mapped: no reading)."""
    n_genes = int(json.loads((path / "meta.json").read_text())["genes"])
    mode = "r" if mmap else None
    parts = [
        np.load(path / f"{name}.npy", mmap_mode=mode) for name in ("data", "indices", "indptr")
    ]
    s, g = np.load(path / "sample.npy"), np.load(path / "group.npy")
    return parts, s, g, n_genes


def csr(parts: list[Any], n_genes: int) -> Any:
    import scipy.sparse as sp

    data, indices, indptr = parts
    return sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, n_genes))


def tiny(parts: list[Any], s: Any, g: Any, n_genes: int) -> tuple[list[Any], Any, Any]:
    """The first rows of the data, same types: for the warm-up."""
    data, indices, indptr = parts
    n = min(50, len(indptr) - 1)
    end = indptr[n]
    return [np.array(data[:end]), np.array(indices[:end]), np.array(indptr[: n + 1])], s[:n], g[:n]


def obs(s: Any, g: Any) -> Any:
    import pandas as pd

    samples = [f"s{i:02d}" for i in range(int(s.max()) + 1)]
    groups = [f"g{i:02d}" for i in range(int(g.max()) + 1)]
    frame = pd.DataFrame(
        {
            "sample": pd.Categorical.from_codes(s, categories=samples),
            "group": pd.Categorical.from_codes(g, categories=groups),
        }
    )
    frame.index = frame.index.astype(str)
    return frame


def canonical(obs_frame: Any, sums: Any, s: Any, g: Any, n_genes: int) -> np.ndarray:
    """Sums as (group, sample, gene) in code order from a result's obs and matrix."""
    out = np.zeros((int(g.max()) + 1, int(s.max()) + 1, n_genes))
    dense = sums.toarray() if hasattr(sums, "toarray") else np.asarray(sums)
    for i, (sample, group) in enumerate(zip(obs_frame["sample"], obs_frame["group"], strict=True)):
        out[int(group[1:]), int(sample[1:])] = dense[i]
    return out


# --------------------------------------------------------------------------- cases
# Each case has three steps: ``prepare`` builds its inputs from X and the labels (untimed, as a
# user's AnnData or frame exists before pooling), ``run`` is the timed call, and ``sums`` turns
# its result into (group, sample, gene) sums to compare (untimed; None: nothing to compare).


def prepare_from_cells(parts: list[Any], s: Any, g: Any, n_genes: int) -> Any:
    return csr(parts, n_genes), obs(s, g)


def run_from_cells(inputs: Any, layers: tuple[str, ...] = ("counts",)) -> Any:
    import cytepool

    x, frame = inputs
    return cytepool.from_cells(
        x, sample_labels=frame["sample"], group_labels=frame["group"], layers=layers
    )


def run_from_cells_detected(inputs: Any) -> Any:
    return run_from_cells(inputs, ("counts", "detected"))


def run_from_cells_squares(inputs: Any) -> Any:
    return run_from_cells(inputs, ("counts", "detected", "squares"))


def run_from_cells_1_thread(inputs: Any) -> Any:
    import numba

    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return run_from_cells(inputs)
    finally:
        numba.set_num_threads(threads)


def sums_from_cells(cube: Any, s: Any, g: Any, n_genes: int) -> Any:
    return cube.to_numpy("counts")


def prepare_anndata(parts: list[Any], s: Any, g: Any, n_genes: int) -> Any:
    import anndata as ad

    return ad.AnnData(csr(parts, n_genes), obs=obs(s, g))


def run_scanpy(adata: Any) -> Any:
    import scanpy as sc

    return sc.get.aggregate(adata, by=["group", "sample"], func="sum")


def sums_scanpy(result: Any, s: Any, g: Any, n_genes: int) -> Any:
    return canonical(result.obs, result.layers["sum"], s, g, n_genes)


def run_decoupler(adata: Any) -> Any:
    import decoupler as dc

    return dc.pp.pseudobulk(adata, sample_col="sample", groups_col="group", mode="sum")


def sums_decoupler(result: Any, s: Any, g: Any, n_genes: int) -> Any:
    return canonical(result.obs, result.X, s, g, n_genes)


def _read(data: Any, indices: Any) -> Any:
    total, columns = 0.0, 0
    for k in range(data.shape[0]):
        total += data[k]
        columns += indices[k]
    return total, columns


def _scatter(data: Any, indices: Any, indptr: Any, rows: Any, starts: Any, out: Any) -> None:
    for p in range(starts.shape[0] - 1):
        row = out[p]
        for i in range(starts[p], starts[p + 1]):
            r = rows[i]
            values = data[indptr[r] : indptr[r + 1]]
            columns = indices[indptr[r] : indptr[r + 1]]
            for k in range(values.shape[0]):
                row[np.uint64(columns[k])] += values[k]


@functools.cache
def _floor_kernels() -> tuple[Any, Any]:
    """The floors, compiled by numba (imported here: the 3.12 venv need not have it).

    Made once per process: a new dispatcher would compile again in the timed call.
    """
    import numba

    return numba.njit(_read), numba.njit(_scatter)  # compiled in the warm-up, untimed


def prepare_read_floor(parts: list[Any], s: Any, g: Any, n_genes: int) -> Any:
    return parts


def run_read_floor(parts: list[Any]) -> Any:
    read, _ = _floor_kernels()
    read(parts[0], parts[1])


def prepare_scatter_floor(parts: list[Any], s: Any, g: Any, n_genes: int) -> Any:
    """The rows sorted by profile (untimed: part of what the floor leaves out)."""
    profiles = g.astype(np.int64) * (int(s.max()) + 1) + s
    rows = np.argsort(profiles, kind="stable")
    starts = np.searchsorted(profiles[rows], np.arange((int(g.max()) + 1) * (int(s.max()) + 1) + 1))
    return parts, rows, starts, n_genes


def run_scatter_floor(prepared: Any) -> Any:
    _, scatter = _floor_kernels()
    parts, rows, starts, n_genes = prepared
    out = np.zeros((len(starts) - 1, n_genes))
    scatter(parts[0], parts[1], parts[2], rows, starts, out)
    return out


def sums_scatter_floor(out: Any, s: Any, g: Any, n_genes: int) -> Any:
    return out.reshape(int(g.max()) + 1, int(s.max()) + 1, n_genes)


def no_sums(result: Any, s: Any, g: Any, n_genes: int) -> None:
    return None


# case: (prepare, run, sums)
STEPS = {
    "from_cells": (prepare_from_cells, run_from_cells, sums_from_cells),
    "from_cells-1-thread": (prepare_from_cells, run_from_cells_1_thread, sums_from_cells),
    "from_cells-detected": (prepare_from_cells, run_from_cells_detected, sums_from_cells),
    "from_cells-squares": (prepare_from_cells, run_from_cells_squares, sums_from_cells),
    "scanpy-1.12": (prepare_anndata, run_scanpy, sums_scanpy),
    "scanpy-1.11": (prepare_anndata, run_scanpy, sums_scanpy),
    "decoupler": (prepare_anndata, run_decoupler, sums_decoupler),
    "read-floor": (prepare_read_floor, run_read_floor, no_sums),
    "scatter-floor": (prepare_scatter_floor, run_scatter_floor, sums_scatter_floor),
}
VERSIONS = {"scanpy-1.12": "scanpy", "scanpy-1.11": "scanpy", "decoupler": "decoupler"}


@contextlib.contextmanager
def numba_warm_up(case: str) -> Iterator[None]:
    """For cytepool's cases: pool the tiny warm-up with the numba kernels that the timed call
    uses (from_cells pools such small blocks with numpy, which would leave them cold)."""
    if not case.startswith("from_cells"):
        yield
        return
    from cytepool import _pool_sums

    with mock.patch.multiple(_pool_sums, SMALL_VALUES=-1, FIRST_VALUES=-1):
        yield


def maxrss() -> int:
    """Peak resident memory of this process so far, in bytes: ``VmHWM`` (Linux, which
    ``reset_maxrss`` resets), else ``ru_maxrss`` (KiB on Linux)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_maxrss() -> None:
    """Make the peak the current resident memory, where Linux allows (else it stays)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def settle_memory(size: int = 256 * 2**20) -> None:
    """Take and touch ``size`` bytes, and give them back.

    After X is loaded, the first large allocation of a process can cost ~0.1 s of system time
    (Linux compacting memory for transparent huge pages), hitting one case's timed call or
    another's at random; each worker pays it here instead, before its timed call.
    """
    block = np.ones(size // 8)
    del block


def worker(case: str, data_dir: Path, result: Path | None) -> dict[str, Any]:
    """Warm up, load, time one call; save the sums to ``result`` (.npy) if given.

    The warm-up comes first, so that its passing peaks are below the resident memory once X is
    loaded, and the peak is reset (Linux) before the call: ``ru_maxrss`` then rises only with
    what the call itself takes.
    """
    from importlib.metadata import version

    prepare, run, sums_of = STEPS[case]
    mapped = load(data_dir, mmap=True)
    small, n_genes = tiny(*mapped), mapped[3]
    with numba_warm_up(case):
        run(prepare(*small, n_genes))
    parts, s, g, n_genes = load(data_dir)
    inputs = prepare(parts, s, g, n_genes)
    settle_memory()
    reset_maxrss()
    before = maxrss()
    start, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    out = run(inputs)
    seconds = time.perf_counter() - start
    system = resource.getrusage(resource.RUSAGE_SELF).ru_stime - usage.ru_stime
    peak = maxrss() - before
    sums = sums_of(out, s, g, n_genes)
    if result is not None and sums is not None:
        np.save(result, np.asarray(sums))
    package = VERSIONS.get(case)
    return {
        "seconds": seconds,
        "system": system,
        "extra": peak,
        "x_bytes": sum(p.nbytes for p in parts),
        "version": version(package) if package else "",
        "python": sys.version.split()[0],
    }


# --------------------------------------------------------------------------- driver


def python_for(case: str) -> str | None:
    """The interpreter of a case; None if it cannot be had (scanpy 1.12 without Python 3.12)."""
    if case != "scanpy-1.12":
        return sys.executable
    python = VENV_112 / "bin" / "python"
    if python.exists():
        return str(python)
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    base = sorted(Path(root.stdout.strip(), "versions").glob("3.12*/bin/python"))
    if not base:
        return None
    print(f"creating {VENV_112} with scanpy>=1.12 (once)", file=sys.stderr)
    subprocess.run([str(base[-1]), "-m", "venv", str(VENV_112)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "scanpy>=1.12"], check=True)
    return str(python)


def measure(case: str, data_dir: Path, work: Path, repeat: int, in_process: bool) -> dict[str, Any]:
    result = work / f"{case}.npy" if repeat == 0 else None
    if in_process and case == "scanpy-1.12":
        return {"skipped": "needs its own Python 3.12 process"}
    if in_process:
        record = worker(case, data_dir, result)
        record["extra"] = None  # one process for all cases: its peak says nothing per case
        return record
    python = python_for(case)
    if python is None:
        return {"skipped": "no Python 3.12 (pyenv) for scanpy 1.12"}
    command = [python, __file__, "--worker", case, "--data", str(data_dir)]
    command += ["--result", str(result)] if result else []
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{case} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict[str, list[dict[str, Any]]], equal: dict[str, str]) -> str:
    base = statistics.median(r["seconds"] for r in results["from_cells"])
    x_bytes = results["from_cells"][0]["x_bytes"]
    lines = [
        f"X: {x_bytes / 2**30:.2f} GiB (CSR: float32 data, int32 indices)",
        "",
        "| case | median s | × from_cells | of it system s | extra memory | % of X | sums |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for case, runs in results.items():
        if "skipped" in runs[0]:
            lines.append(f"| {case} | skipped: {runs[0]['skipped']} | | | | | |")
            continue
        label = LABELS[case].format(version=runs[0]["version"])
        seconds = statistics.median(r["seconds"] for r in runs)
        extras = [r["extra"] for r in runs if r["extra"] is not None]
        memory = statistics.median(extras) if extras else None
        mem = "–" if memory is None else f"{memory / 2**20:,.0f} MiB"
        share = "–" if memory is None else f"{100 * memory / x_bytes:.1f}%"
        system = statistics.median(r["system"] for r in runs)
        lines.append(
            f"| {label} | {seconds:.3f} | {seconds / base:.2f} | {system:.3f} | {mem} | {share} "
            f"| {equal[case]} |"
        )
    return "\n".join(lines)


def median_seconds(results: dict[str, list[dict[str, Any]]], case: str) -> float | None:
    runs = results.get(case)
    if not runs or "skipped" in runs[0]:
        return None
    return statistics.median(r["seconds"] for r in runs)


def ratio(results: dict[str, list[dict[str, Any]]], case: str, base: str) -> float | None:
    """The median time of one case over another's, if both were measured."""
    a, b = median_seconds(results, case), median_seconds(results, base)
    return None if a is None or b is None else a / b


def targets(results: dict[str, list[dict[str, Any]]]) -> str:
    """The targets of issue 16 against what this run measured."""
    ours = median_seconds(results, "from_cells")
    scanpy = median_seconds(results, "scanpy-1.12")
    one, floor = (
        median_seconds(results, "from_cells-1-thread"),
        median_seconds(results, "scatter-floor"),
    )
    extras = [r["extra"] for r in results["from_cells"] if r["extra"] is not None]
    x_bytes = results["from_cells"][0]["x_bytes"]
    checks = [
        (
            "scanpy 1.12 (default threads) / from_cells (default threads)",
            None if scanpy is None or ours is None else scanpy / ours,
            ">= 1.5",
            lambda v: v >= 1.5,
            "×",
        ),
        (
            "from_cells 1 thread / scatter floor (1 thread)",
            None if one is None or floor is None else one / floor,
            "<= 1.1",
            lambda v: v <= 1.1,
            "×",
        ),
        (
            "from_cells counts + detected + squares / counts + detected (issue 17)",
            ratio(results, "from_cells-squares", "from_cells-detected"),
            "<= 1.3",
            lambda v: v <= 1.3,
            "×",
        ),
        (
            "from_cells extra memory / X",
            statistics.median(extras) / x_bytes * 100 if extras else None,
            "<= 10",
            lambda v: v <= 10,
            " %",
        ),
    ]
    lines = ["| issue 16 | measured | target | met |", "|---|---:|---|---|"]
    for name, value, target, passes, unit in checks:
        if value is None:
            lines.append(f"| {name} | not measured | {target}{unit} | – |")
        else:
            met = "yes" if passes(value) else "no"
            lines.append(f"| {name} | {value:.2f}{unit} | {target}{unit} | {met} |")
    return "\n".join(lines)


SCALING_CASES = ("from_cells", "from_cells-1-thread", "scatter-floor")


def scaling(args: argparse.Namespace, options: dict[str, Any], work_root: Path) -> str:
    """from_cells and the scatter floor at several cell counts: seconds per 10^8 nonzeros."""
    lines = [
        f"Scaling: {args.genes:,} genes, density {args.density}, {args.samples} samples × "
        f"{args.groups} groups, median of {args.repeats} runs each",
        "",
        "| cells | nonzeros | "
        + " | ".join(f"{LABELS[case]}: s | s per 10^8 nonzeros" for case in SCALING_CASES)
        + " |",
        "|---:|---:|" + "---:|---:|" * len(SCALING_CASES),
    ]
    per_nnz: dict[str, list[float]] = {case: [] for case in SCALING_CASES}
    for cells in args.scaling:
        data_dir = generate(args.cache, argparse.Namespace(**{**options, "cells": cells}))
        nnz = int(np.load(data_dir / "data.npy", mmap_mode="r").shape[0])
        work = Path(tempfile.mkdtemp(prefix="pooling-scaling-", dir=work_root))
        try:
            runs: dict[str, list[dict[str, Any]]] = {case: [] for case in SCALING_CASES}
            for repeat in range(args.repeats):
                for case in SCALING_CASES:
                    runs[case].append(measure(case, data_dir, work, repeat + 1, args.in_process))
        finally:
            shutil.rmtree(work)
        cells_row = [f"{cells:,}", f"{nnz:,}"]
        for case in SCALING_CASES:
            seconds = statistics.median(r["seconds"] for r in runs[case])
            per_nnz[case].append(seconds / nnz * 1e8)
            cells_row += [f"{seconds:.3f}", f"{per_nnz[case][-1]:.3f}"]
        lines.append("| " + " | ".join(cells_row) + " |")
    spread = ", ".join(
        f"{LABELS[case]} {max(values) / min(values):.2f}" for case, values in per_nnz.items()
    )
    lines += ["", f"Largest / smallest time per nonzero (1.00 is flat): {spread}"]
    return "\n".join(lines)


def compare(case: str, work: Path, reference: np.ndarray) -> str:
    path = work / f"{case}.npy"
    if not path.exists():
        return "–"
    sums = np.load(path)
    if not np.array_equal(sums, reference):
        raise AssertionError(f"{case}: the sums differ from from_cells's")
    return "equal"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=200_000)
    parser.add_argument("--genes", type=int, default=20_000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--samples", type=int, default=24)
    parser.add_argument("--groups", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated, from: " + ", ".join(CASES)
    )
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "cytepool-bench"
    )
    parser.add_argument("--in-process", action="store_true", help="no fresh processes (smoke test)")
    parser.add_argument(
        "--scaling",
        type=lambda text: [int(n) for n in text.split(",")],
        default=None,
        help="also time from_cells (default threads and one thread) and the scatter floor at "
        "these cell counts, e.g. 50000,200000,800000, and report seconds per 10^8 nonzeros",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.data, args.result)))
        return 0
    cases = ["from_cells", *(c for c in args.cases.split(",") if c != "from_cells")]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}")
    options = {
        k: v
        for k, v in vars(args).items()
        if k in ("cells", "genes", "density", "samples", "groups", "seed")
    }
    data_dir = generate(args.cache, argparse.Namespace(**options))
    work = Path(tempfile.mkdtemp(prefix="pooling-", dir=args.cache))
    try:
        results: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
        for repeat in range(args.repeats):
            shift = repeat % len(cases)  # the order rotates: no case always runs first
            for case in cases[shift:] + cases[:shift]:
                results[case].append(measure(case, data_dir, work, repeat, args.in_process))
        reference = np.load(work / "from_cells.npy")
        if reference.dtype != np.int64:
            raise AssertionError(f"from_cells gave {reference.dtype} sums, expected int64")
        equal = {case: compare(case, work, reference) for case in cases}
        equal["from_cells"] = "int64"
    finally:
        shutil.rmtree(work)
    command = "python benchmarks/pooling.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(
        f"`{command.strip()}` — {args.cells:,} cells × {args.genes:,} genes, density {args.density}, "
        f"{args.samples} samples × {args.groups} groups, {args.repeats} runs each, "
        f"{os.cpu_count()} CPUs\n"
    )
    print(table(results, equal))
    print()
    print(targets(results))
    if args.scaling:
        print()
        print(scaling(args, options, work_root=args.cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
