"""Fuzz the store layer with 5,000 and more mutated stores, and tabulate what each read did.

Runs ``test_mutated_store_raises_only_documented_errors`` of ``tests/io/zarr/test_fuzz.py``
with ``--examples`` mutated stores for each of its 17 stores (12 Zarr arrays, 4 of them sharded
or written by zarr-python; 3 tables, one written by anndata; 2 cube files), 320 by default:
5,440 in all. The test fails if a read raises anything but FormatError (UnsupportedFeatureError
and StoredTypeError included), FileNotFoundError or StoreChangedError, or peaks above 256 MiB of
Python allocations (tracemalloc). The report file the test appends to (``CYTEPOOL_FUZZ_REPORT``)
gives the table printed here, with the time of each read; this script fails if one took a
second or more (run it on an idle machine).

Usage::

    .venv/bin/python benchmarks/fuzz_stores.py                 # 320 per store: 5,440 cases
    .venv/bin/python benchmarks/fuzz_stores.py --examples 40   # what the test suite runs
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/io/zarr/test_fuzz.py::test_mutated_store_raises_only_documented_errors"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=320, help="mutated stores per store")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        report = Path(directory) / "report.jsonl"
        env = dict(
            os.environ,
            CYTEPOOL_FUZZ_EXAMPLES=str(args.examples),
            CYTEPOOL_FUZZ_REPORT=str(report),
        )
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST]
        if args.workers > 1:
            command += ["-n", str(args.workers)]
        start = time.perf_counter()
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        records = [json.loads(line) for line in report.read_text().splitlines()]
    print(result.stdout.strip().splitlines()[-1])
    if result.returncode:
        print(result.stdout[-5000:], result.stderr[-2000:])
        raise SystemExit(f"the fuzz test failed (exit {result.returncode})")
    print_table(records, args.examples, elapsed)
    slow = [record for record in records if record["s"] >= 1.0]
    if slow:
        raise SystemExit(f"{len(slow)} reads took a second or more: {slow[:3]}")


def print_table(records: list[dict], examples: int, elapsed: float) -> None:
    outcomes = sorted({record["outcome"] for record in records})
    print(f"\n## Fuzzing: {len(records)} mutated stores, {examples} per store ({elapsed:.0f} s)\n")
    print("| stores | kind | cases | " + " | ".join(outcomes) + " | slowest | largest peak |")
    print("|---:|---|---:|" + "---:|" * len(outcomes) + "---:|---:|")
    for kind in ("array", "table", "cube"):
        mine = [record for record in records if record["kind"] == kind]
        if not mine:
            continue
        counts = collections.Counter(record["outcome"] for record in mine)
        stores = len({record["store"] for record in mine})
        slowest = max(record["s"] for record in mine)
        peak = max(record["peak"] for record in mine)
        cells = " | ".join(f"{counts[outcome]:,}" for outcome in outcomes)
        row = f"| {stores} | {kind} | {len(mine):,} | {cells} | {slowest * 1000:.0f} ms"
        print(f"{row} | {peak / 2**20:.1f} MiB |")
    print("\nAny other exception, a read of 1 s or more or a peak over 256 MiB fails the run.")


if __name__ == "__main__":
    main()
