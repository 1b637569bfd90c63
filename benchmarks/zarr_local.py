"""Benchmark local Zarr reads of cytepool.io.zarr where issue 22 found them slow or large.

In one process, the contenders alternating (their order rotates every repeat):

* **absent chunks**: ``numpy.asarray(open_array(path))`` of an int8 array of 2**20 one-byte
  chunks (``--log2-chunks``), none stored, and the same array with one chunk in 1,000 stored,
  against tensorstore's ``ts.open(...).read()`` (driven as in ``benchmarks/zarr_io.py``: its
  default context, a fresh one per read, so no chunk cache);
* **uncompressed full read**: a float32 array of ``--mib`` MiB in 8 MiB chunks, whole chunks
  (C-contiguous blocks of the result) and chunks of 4 KiB rows, against tensorstore;
* **one large string**: the peak of Python's allocations (``tracemalloc``) while a 1-element
  string array of ``--string-mib`` MiB is read, as a multiple of the string, uncompressed and
  gzip, as StringDType and as ``object`` (no contender: the floor is the stored chunk, the
  decoded one when compressed, and the result).

The script prints the medians of the wall-clock time and of the CPU time (all threads of the
process), the ratio cytepool / tensorstore (the issue's target for absent chunks: <= 1.0), and
the string peaks. Stores are written once under ``--dir`` (default: a temporary directory) and
read warm from the page cache.

Usage::

    python benchmarks/zarr_local.py --repeats 1        # 2**20 chunks, 256 MiB (tensorstore: ~15 s per read of 2**20 chunks)
    python benchmarks/zarr_local.py --quick            # a small smoke run
    python benchmarks/zarr_local.py --cases uncompressed --repeats 5
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import tracemalloc
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _zarr_bench
from _zarr_bench import alternate, medians, ts_open

Times = _zarr_bench.Times


def ts_read(path: Path) -> Any:
    """The whole array read by tensorstore with a fresh default context (no chunk cache)."""
    return ts_open(path).read().result()


def sparse_store(path: Path, n: int, every: int) -> np.ndarray:
    """An int8 array of ``n`` one-byte chunks, one in ``every`` stored (none if 0); returns it.

    The stored chunks are written as files; zarr.json is written last, as by write_array.
    """
    from cytepool.io.zarr import write_array

    data = np.zeros(n, dtype=np.int8)
    write_array(path, data[:1], chunks=(1,), compression=None)  # no chunk stored
    document = json.loads((path / "zarr.json").read_text())
    (path / "zarr.json").unlink()  # written again last, for the whole shape
    if every:
        data[::every] = 1
        (path / "c").mkdir()
        for i in range(0, n, every):
            (path / "c" / str(i)).write_bytes(b"\1")
    document["shape"] = [n]
    (path / "zarr.json").write_text(json.dumps(document))
    return data


def bench_absent(args: argparse.Namespace, root: Path) -> list[tuple[str, Times]]:
    from cytepool.io.zarr import open_array

    n = 2**args.log2_chunks
    rows = []
    for every, label in ((0, "none stored"), (1000, "1 in 1,000 stored")):
        path = root / f"i22-absent-int8-2p{args.log2_chunks}-{every}"
        data = sparse_store(path, n, every)
        assert np.array_equal(np.asarray(open_array(path)), data)
        assert np.array_equal(ts_read(path), data)
        functions = {
            "cytepool": lambda p=path: np.asarray(open_array(p)),
            "tensorstore": lambda p=path: ts_read(p),
        }
        rows.append(
            (f"2^{args.log2_chunks} one-byte chunks, {label}", alternate(functions, args.repeats))
        )
    return rows


def bench_uncompressed(args: argparse.Namespace, root: Path) -> list[tuple[str, Times]]:
    from cytepool.io.zarr import open_array, write_array

    columns = 8192  # rows of 32 KiB
    rows_total = max(2048, int(args.mib * 2**20 // (4 * columns)) // 2048 * 2048)
    data = np.random.default_rng(0).random((rows_total, columns), dtype=np.float32)
    out = []
    for chunks, label in (((256, columns), "whole chunks"), ((2048, 1024), "chunks of 4 KiB rows")):
        path = root / f"uncompressed-{chunks[1]}"
        write_array(path, data, chunks=chunks, compression=None)
        assert np.array_equal(np.asarray(open_array(path)), data)
        assert np.array_equal(ts_read(path), data)
        functions = {
            "cytepool": lambda p=path: np.asarray(open_array(p)),
            "tensorstore": lambda p=path: ts_read(p),
        }
        name = f"uncompressed {data.nbytes / 2**20:.0f} MiB, 8 MiB {label}"
        out.append((name, alternate(functions, args.repeats)))
    return out


def string_peaks(args: argparse.Namespace, root: Path) -> list[tuple[str, float]]:
    from cytepool.io.zarr import open_array, write_array

    size = int(args.string_mib * 2**20)
    text = "x" * size
    out = []
    for compression in (None, "gzip"):
        path = root / f"string-{compression}"
        values = np.array([text], dtype=np.dtypes.StringDType())
        write_array(path, values, chunks=(1,), compression=compression)
        array = open_array(path)
        for objects in (False, True):
            gc.collect()
            tracemalloc.start()
            result = np.asarray(array, dtype=object) if objects else array[...]
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert result[0] == text
            del result
            kind = "object" if objects else "StringDType"
            out.append((f"{compression or 'uncompressed'}, {kind}", peak / size))
    return out


def times_table(rows: Sequence[tuple[str, Times]]) -> str:
    lines = [
        "| case | cytepool wall / CPU (s) | tensorstore wall / CPU (s) | cytepool / tensorstore"
        " wall |",
        "|---|---|---|---|",
    ]
    for name, times in rows:
        found = medians(times)
        (ours, ours_cpu), (theirs, theirs_cpu) = found["cytepool"], found["tensorstore"]
        lines.append(
            f"| {name} | {ours:.3f} / {ours_cpu:.3f} | "
            f"{theirs:.3f} / {theirs_cpu:.3f} | {ours / theirs:.4f} |"
        )
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log2-chunks", type=int, default=20, help="absent case (default 20)")
    parser.add_argument("--mib", type=float, default=256, help="uncompressed case (default 256)")
    parser.add_argument("--string-mib", type=float, default=128, help="string (default 128)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (default 3)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the stores")
    parser.add_argument(
        "--cases",
        default="absent,uncompressed,string",
        help="comma-separated cases to run (default: absent,uncompressed,string)",
    )
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.log2_chunks, args.mib, args.string_mib, args.repeats = 12, 64, 1, 1
    if args.repeats < 1 or args.mib <= 0 or args.string_mib <= 0 or args.log2_chunks < 1:
        parser.error("--log2-chunks, --mib, --string-mib and --repeats must be positive")
    args.cases = set(args.cases.split(","))
    if not args.cases or not args.cases <= {"absent", "uncompressed", "string"}:
        parser.error("--cases takes absent, uncompressed and string, separated by commas")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    try:
        import tensorstore  # noqa: F401
    except ImportError:
        raise SystemExit("this benchmark needs tensorstore: pip install tensorstore") from None
    with tempfile.TemporaryDirectory(prefix="zarr-local-bench-", dir=args.dir) as name:
        root = Path(name)
        rows = bench_absent(args, root) if "absent" in args.cases else []
        rows += bench_uncompressed(args, root) if "uncompressed" in args.cases else []
        peaks = string_peaks(args, root) if "string" in args.cases else []
    print(
        f"Python {platform.python_version()}, numpy {np.__version__}, tensorstore "
        f"{version('tensorstore')}, {os.cpu_count()} CPUs, {platform.machine()}; medians of "
        f"{args.repeats} repeats, contenders alternating; tensorstore: default context, a fresh "
        "one per read\n"
    )
    if rows:
        print(times_table(rows))
        print()
    if peaks:
        print(f"| one {args.string_mib:g} MiB string read | peak / string |")
        print("|---|---|")
        for label, ratio in peaks:
            print(f"| {label} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
