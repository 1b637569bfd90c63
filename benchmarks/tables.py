"""Benchmark: writing and reading a table with cytepool, anndata and zarrwhals.

A frame of ``--rows`` rows (default 1,000,000) with int64, float64, bool, unique strings,
strings of changing lengths, a 20-level categorical and a nullable integer with 10 % missing
values is written and read back by each contender, with the same compression (zstd level 3 by
default, or gzip level 4). The pandas frame is indexed by unique cell names (strings); the
polars frame has no index, so cytepool stores row numbers as strings for it (and reads them
only for pandas).

The contenders run round-robin for ``--repeats`` rounds; in each round each contender runs in
a fresh process, once to measure memory and once to time, so that a busy moment of a shared
machine hits every contender alike. Times are medians over the rounds, wall clock and CPU time
of the process. Memory is the peak resident memory the first write adds to the process, and
the peak the first read adds (the returned frame included), next to the frame's size.
zarrwhals changes zarr-python's codec pipeline when imported, so it only ever runs in its own
subprocess, with the interpreter given by ``--zarrwhals-python`` (a throwaway venv with
zarrwhals, polars and pandas installed).

Run::

    .venv/bin/python benchmarks/tables.py --zarrwhals-python /tmp/zw-venv/bin/python

and it prints a markdown table of medians and ratios against the anndata path.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

CASES = ("cytepool-pandas", "cytepool-polars", "anndata", "zarrwhals-polars")
PEER = "anndata"
LABELS = {
    "cytepool-pandas": "cytepool write_table/read_table (pandas)",
    "cytepool-polars": "cytepool write_table/read_table (polars)",
    "anndata": "anndata write_elem/read_elem via zarr-python (pandas)",
    "zarrwhals-polars": "zarrwhals to_zarr/from_zarr (polars)",
}


def labels(rows: int, rng: Any) -> Any:
    """Strings of 2 to 10 letters and digits, their length changing from row to row (as gene
    symbols' and free text's do), drawn from 5,000 of them."""
    import numpy as np

    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))
    pool = np.array(["".join(rng.choice(letters, k)) for k in rng.integers(2, 11, 5000)])
    return pool.astype(object)[rng.integers(0, len(pool), rows)]


def make_pandas(rows: int) -> Any:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    mask = rng.random(rows) < 0.1
    return pd.DataFrame(
        {
            "int64": rng.integers(0, 10**9, rows),
            "float64": rng.random(rows),
            "bool": rng.random(rows) < 0.5,
            "string": np.array([f"cell-{i:08d}" for i in range(rows)], dtype=object),
            "label": labels(rows, rng),
            "category": pd.Categorical.from_codes(
                rng.integers(0, 20, rows), [f"type_{k:02d}" for k in range(20)]
            ),
            "nullable": pd.arrays.IntegerArray(rng.integers(0, 1000, rows), mask),
        },
        index=pd.Index(np.array([f"c{i}" for i in range(rows)], dtype=object)),
    )


def make_polars(rows: int) -> Any:
    import polars as pl

    frame = make_pandas(rows).reset_index(drop=True)
    return pl.from_pandas(frame).with_columns(pl.col("category").cast(pl.Categorical))


def frame_bytes(frame: Any) -> int:
    if hasattr(frame, "estimated_size"):
        return int(frame.estimated_size())
    return int(frame.memory_usage(deep=True).sum())


# one write + read for each contender -------------------------------------------------------


def run_cytepool(frame: Any, path: Path, compression: str, backend: str) -> None:
    from cytepool.io import read_table, write_table

    write_table(frame, path, compression=compression)
    read_table(path, backend=backend)


def anndata_write(frame: Any, path: Path, compression: str) -> None:
    import anndata as ad
    import zarr
    from zarr.codecs import GzipCodec, ZstdCodec

    codec = ZstdCodec(level=3) if compression == "zstd" else GzipCodec(level=4)
    group = zarr.open_group(path, mode="w", zarr_format=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ad.io.write_elem(group, "df", frame, dataset_kwargs={"compressors": codec})


def anndata_read(path: Path) -> Any:
    import anndata as ad
    import zarr

    return ad.io.read_elem(zarr.open_group(path / "df", mode="r"))


def zarrwhals_write(frame: Any, path: Path, compression: str) -> None:
    import zarrwhals
    from zarr.codecs import GzipCodec, ZstdCodec

    codec = ZstdCodec(level=3) if compression == "zstd" else GzipCodec(level=4)
    zarrwhals.to_zarr(frame, str(path), compressors=codec)


def zarrwhals_read(path: Path) -> Any:
    import zarrwhals

    result = zarrwhals.from_zarr(str(path), backend="polars")
    return result.collect() if hasattr(result, "collect") else result


def steps(case: str, compression: str) -> tuple[Callable[..., Any], Callable[[Path], Any]]:
    if case == "cytepool-pandas" or case == "cytepool-polars":
        from cytepool.io import read_table, write_table

        backend = case.split("-")[1]
        return (
            lambda frame, path: write_table(frame, path, compression=compression),
            lambda path: read_table(path, backend=backend),
        )
    if case == "anndata":
        return (lambda frame, path: anndata_write(frame, path, compression), anndata_read)
    return (lambda frame, path: zarrwhals_write(frame, path, compression), zarrwhals_read)


# measuring (inside the subprocess of one case) ---------------------------------------------


def _status(key: str) -> int:
    text = Path("/proc/self/status").read_text()
    match = re.search(rf"{key}:\s+(\d+) kB", text)
    return int(match.group(1)) * 1024 if match else 0


def _reset_peak() -> int | None:
    """Reset the peak resident memory of this process (Linux); return the current one."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    return _status("VmRSS")


def measure(case: str, rows: int, repeats: int, compression: str) -> dict[str, Any]:
    import gc

    frame = make_polars(rows) if case.endswith("polars") else make_pandas(rows)
    write, read = steps(case, compression)
    directory = Path(tempfile.mkdtemp(prefix="cytepool-bench-"))
    writes, reads, cpus = [], [], []
    peaks: list[int | None] = [None, None]
    try:
        for repeat in range(repeats):
            path = directory / f"t{repeat}"
            gc.collect()
            baseline = _reset_peak() if repeat == 0 else None
            cpu = time.process_time()
            start = time.perf_counter()
            write(frame, path)
            middle = time.perf_counter()
            if baseline is not None:
                peaks[0] = _status("VmHWM") - baseline
                baseline = _reset_peak()
            cpu_middle = time.process_time()
            read_start = time.perf_counter()
            result = read(path)
            end = time.perf_counter()
            cpus.append(time.process_time() - cpu_middle + (cpu_middle - cpu))
            if baseline is not None:
                peaks[1] = _status("VmHWM") - baseline
            del result
            writes.append(middle - start)
            reads.append(end - read_start)
            shutil.rmtree(path)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "writes": writes,
        "reads": reads,
        "cpus": cpus,
        "write": statistics.median(writes),
        "read": statistics.median(reads),
        "both": statistics.median(w + r for w, r in zip(writes, reads, strict=True)),
        "cpu": statistics.median(cpus),
        "peak_write": peaks[0],
        "peak_read": peaks[1],
        "frame": frame_bytes(frame),
    }


# the parent: run every case and print the table -------------------------------------------


def run_round(python: str, case: str, args: argparse.Namespace) -> dict[str, Any] | str:
    """One fresh process: a first write+read (memory is measured there), then a timed one."""
    command = [
        *(python, str(Path(__file__).resolve()), "--case", case, "--rows", str(args.rows)),
        *("--repeats", "2", "--compression", args.compression),
    ]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"failed: {last[:120]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def aggregate(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds of the timed (last) run of each, and of the memory peaks."""

    def median(key: str) -> Any:
        values = [r[key] for r in rounds]
        return None if None in values else statistics.median(values)

    writes = [r["writes"][-1] for r in rounds]
    reads = [r["reads"][-1] for r in rounds]
    return {
        "write": statistics.median(writes),
        "read": statistics.median(reads),
        "both": statistics.median(w + r for w, r in zip(writes, reads, strict=True)),
        "cpu": statistics.median(r["cpus"][-1] for r in rounds),
        "peak_write": median("peak_write"),
        "peak_read": median("peak_read"),
        "frame": rounds[0]["frame"],
    }


def run_all(args: argparse.Namespace) -> dict[str, dict[str, Any] | str]:
    """Run the contenders round-robin, so that a busy moment of the machine hits them all."""
    results: dict[str, dict[str, Any] | str] = {}
    rounds: dict[str, list[dict[str, Any]]] = {case: [] for case in args.cases}
    for _ in range(args.repeats):
        for case in args.cases:
            if case in results:
                continue
            python = sys.executable
            if case.startswith("zarrwhals"):
                if not args.zarrwhals_python:
                    results[case] = "not run (no --zarrwhals-python)"
                    continue
                python = args.zarrwhals_python
            result = run_round(python, case, args)
            if isinstance(result, str):
                results[case] = result
            else:
                rounds[case].append(result)
    for case in CASES:
        if case not in args.cases:
            results[case] = "not run"
        elif case not in results:
            results[case] = aggregate(rounds[case])
    return results


def table(results: dict[str, dict[str, Any] | str], args: argparse.Namespace) -> str:
    peer = results.get(PEER)
    lines = [
        f"{args.rows:,} rows, compression {args.compression}, median of {args.repeats} rounds",
        "",
        "| contender | write (s) | read (s) | write+read (s) | anndata / this | "
        "CPU write+read (s) | anndata / this (CPU) | peak added memory write / read (MiB) | "
        "peak / frame |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for case in CASES:
        result = results[case]
        if isinstance(result, str):
            lines.append(f"| {LABELS[case]} | {result} | | | | | | | |")
            continue
        ratio = cpu_ratio = "–"
        if isinstance(peer, dict):
            ratio = f"{peer['both'] / result['both']:.2f}×"
            cpu_ratio = f"{peer['cpu'] / result['cpu']:.2f}×"
        memory = memory_ratio = "–"
        if result["peak_write"] is not None and result["peak_read"] is not None:
            memory = f"{result['peak_write'] / 2**20:.0f} / {result['peak_read'] / 2**20:.0f}"
            peak = max(result["peak_write"], result["peak_read"])
            memory_ratio = f"{peak / result['frame']:.2f}"
        lines.append(
            f"| {LABELS[case]} | {result['write']:.3f} | {result['read']:.3f} | "
            f"{result['both']:.3f} | {ratio} | {result['cpu']:.3f} | {cpu_ratio} | "
            f"{memory} | {memory_ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compression", choices=("zstd", "gzip"), default="zstd")
    parser.add_argument("--zarrwhals-python", default=os.environ.get("ZARRWHALS_PYTHON"))
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(measure(args.case, args.rows, args.repeats, args.compression)))
        return
    print(table(run_all(args), args))


if __name__ == "__main__":
    main()
