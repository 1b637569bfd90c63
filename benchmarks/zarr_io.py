"""Benchmark cytepool.io.zarr against zarr-python and the decoding floor.

On a float32 array shaped like a cube layer (groups x samples x features, chunks
1 x n_samples x 4096) of negative-binomial counts, for gzip level 4 and zstd level 3:

* full read: ``numpy.asarray(cytepool.io.zarr.open_array(path))`` vs zarr-python's ``z[...]``
  vs the floor — the standard library (zlib, or the zstd module) decoding the same chunk files
  into a preallocated result;
* selective read: one group and 10 scattered features through ``oindex``, vs zarr-python;
* write: ``write_array`` vs zarr-python's ``create_array`` + ``z[...] = data`` (zstd with a
  checksum on both sides, as cytepool writes it).

Reads use the store written by cytepool, warm in the page cache. The script prints medians of the
wall-clock time over the repeats and the ratios as a markdown table, plus the ratio of the CPU
time (summed over the process's threads: both decode and encode several chunks at once on
threads; ``CYTEPOOL_ZARR_THREADS=1`` runs cytepool on one), which tells efficiency apart from
parallelism and from a busy machine.

Usage::

    python benchmarks/zarr_io.py                 # >= 256 MiB, 5 repeats
    python benchmarks/zarr_io.py --quick         # a small smoke run
    python benchmarks/zarr_io.py --mib 512 --repeats 7 --dir /some/fast/disk
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

FEATURE_CHUNK = 4096
CODECS = (("gzip", 4), ("zstd", 3))
FULL_VS_FLOOR = 1.15


def _zstd() -> Any:
    try:
        from compression import zstd
    except ImportError:
        from backports import zstd
    return zstd


def make_counts(groups: int, samples: int, features: int, seed: int) -> np.ndarray:
    """Negative-binomial counts (as float32) with gene-, group- and sample-level variation."""
    rng = np.random.default_rng(seed)
    gene_mean = np.exp(rng.normal(-0.5, 1.8, size=features)).clip(max=5_000)
    group_factor = np.exp(rng.normal(0.0, 0.5, size=groups))
    size_factor = np.exp(rng.normal(0.0, 0.3, size=samples))
    dispersion = 2.0
    out = np.empty((groups, samples, features), dtype=np.float32)
    for g in range(groups):
        mean = group_factor[g] * size_factor[:, None] * gene_mean[None, :]
        out[g] = rng.negative_binomial(dispersion, dispersion / (dispersion + mean))
    return out


def timed(function: Callable[[], object]) -> tuple[float, float]:
    """Wall-clock and CPU seconds (all threads of the process) of one call."""
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    result = function()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    del result
    return seconds, cpu_seconds


def floor_read(path: Path, shape: tuple[int, ...], chunks: tuple[int, ...], codec: str) -> Any:
    """Decode every chunk file with the standard library into a preallocated array."""
    out = np.empty(shape, dtype=np.float32)
    chunk_bytes = math.prod(chunks) * 4
    if codec == "gzip":

        def decode(raw: bytes) -> bytes:
            return zlib.decompress(raw, wbits=31, bufsize=chunk_bytes)
    else:
        decode = _zstd().decompress
    grid = [range(-(-n // c)) for n, c in zip(shape, chunks, strict=True)]
    for index in np.ndindex(*(len(axis) for axis in grid)):
        where = tuple(
            slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, chunks, shape, strict=True)
        )
        file = path.joinpath("c", *map(str, index))
        try:
            with open(file, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            out[where] = 0
            continue
        block = np.frombuffer(decode(raw), dtype="<f4").reshape(chunks)
        out[where] = block[tuple(slice(0, s.stop - s.start) for s in where)]
    return out


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    import zarr
    import zarr.codecs

    from cytepool.io.zarr import open_array, write_array

    features, samples = args.features, args.samples
    group_bytes = samples * features * 4
    groups = max(1, math.ceil(args.mib * 2**20 / group_bytes))
    shape = (groups, samples, features)
    chunks = (1, samples, FEATURE_CHUNK)
    data = make_counts(groups, samples, features, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    group = groups // 2
    picked = np.sort(rng.choice(features, size=min(10, features), replace=False))
    print(
        f"array {groups} x {samples} x {features} float32 ({data.nbytes / 2**20:.0f} MiB), "
        f"chunks {chunks}, {args.repeats} repeats; zeros {np.mean(data == 0):.0%}, "
        f"mean {data.mean():.2f}",
        file=sys.stderr,
    )

    rows: list[dict[str, Any]] = []
    for codec, level in CODECS:
        peer = (
            zarr.codecs.GzipCodec(level=level)
            if codec == "gzip"
            else zarr.codecs.ZstdCodec(level=level, checksum=True)
        )
        ours_path = root / f"cytepool-{codec}"
        theirs_path = root / f"zarr-python-{codec}"

        def write_ours(codec: str = codec, level: int = level, path: Path = ours_path) -> None:
            shutil.rmtree(path, ignore_errors=True)
            write_array(path, data, chunks=chunks, compression=codec, level=level)

        def write_theirs(peer: Any = peer, path: Path = theirs_path) -> None:
            shutil.rmtree(path, ignore_errors=True)
            z = zarr.create_array(
                path, shape=shape, dtype="float32", chunks=chunks, compressors=peer, fill_value=0
            )
            z[...] = data

        writes: dict[str, list[tuple[float, float]]] = {"ours": [], "theirs": []}
        for _ in range(args.repeats):
            writes["ours"].append(timed(write_ours))
            writes["theirs"].append(timed(write_theirs))
        ours_size, theirs_size = directory_bytes(ours_path), directory_bytes(theirs_path)
        print(
            f"{codec} {level}: cytepool store {ours_size / 2**20:.1f} MiB, "
            f"zarr-python store {theirs_size / 2**20:.1f} MiB",
            file=sys.stderr,
        )

        # Same results from every reader, checked once before timing.
        array = open_array(ours_path)
        z = zarr.open_array(ours_path, mode="r")
        full = np.asarray(array)
        if not (
            np.array_equal(full, data)
            and np.array_equal(z[...], data)
            and np.array_equal(floor_read(ours_path, shape, chunks, codec), data)
            and np.array_equal(np.asarray(open_array(theirs_path)), data)
        ):
            raise SystemExit(f"{codec}: the readers disagree with the data")
        expected = data[group][:, picked]
        if not (
            np.array_equal(array.oindex[group, :, picked], expected)
            and np.array_equal(z.oindex[group, :, picked], expected)
        ):
            raise SystemExit(f"{codec}: the selective reads disagree with the data")
        del full

        full_reads: dict[str, list[tuple[float, float]]] = {"ours": [], "theirs": [], "floor": []}
        for _ in range(args.repeats):
            full_reads["ours"].append(timed(lambda p=ours_path: np.asarray(open_array(p))))
            full_reads["theirs"].append(
                timed(lambda p=ours_path: zarr.open_array(p, mode="r")[...])
            )
            full_reads["floor"].append(
                timed(lambda p=ours_path, c=codec: floor_read(p, shape, chunks, c))
            )
        selective: dict[str, list[tuple[float, float]]] = {"ours": [], "theirs": []}
        for _ in range(4 * args.repeats):
            selective["ours"].append(
                timed(lambda p=ours_path: open_array(p).oindex[group, :, picked])
            )
            selective["theirs"].append(
                timed(lambda p=ours_path: zarr.open_array(p, mode="r").oindex[group, :, picked])
            )
        label = f"{codec} {level}"
        rows.append(row("full read", label, full_reads, "<= 1.15x floor, <= zarr-python"))
        rows.append(row("selective read", label, selective, "< zarr-python"))
        rows.append(row("write", label, writes, "<= zarr-python"))
        shutil.rmtree(theirs_path, ignore_errors=True)
        shutil.rmtree(ours_path, ignore_errors=True)
    return rows


def row(
    operation: str, codec: str, times: dict[str, list[tuple[float, float]]], target: str
) -> dict[str, Any]:
    wall = {key: statistics.median(t[0] for t in values) for key, values in times.items()}
    cpu = {key: statistics.median(t[1] for t in values) for key, values in times.items()}
    ours, theirs = wall["ours"], wall["theirs"]
    floor = wall.get("floor")
    if operation == "full read":
        met = ours <= FULL_VS_FLOOR * floor and ours <= theirs  # type: ignore[operator]
    elif operation == "selective read":
        met = ours < theirs
    else:
        met = ours <= theirs
    return {
        "operation": operation,
        "codec": codec,
        "ours": ours,
        "theirs": theirs,
        "floor": floor,
        "cpu ratio": cpu["ours"] / cpu["theirs"],
        "target": target,
        "met": met,
    }


def table(rows: Sequence[dict[str, Any]]) -> str:
    def ms(value: float | None) -> str:
        return "" if value is None else f"{value * 1000:.1f}"

    def ratio(a: float, b: float | None) -> str:
        return "" if b is None else f"{a / b:.2f}"

    lines = [
        "| operation | codec, level | cytepool (ms) | zarr-python (ms) | floor (ms) "
        "| cytepool / floor | cytepool / zarr-python | CPU time: cytepool / zarr-python "
        "| target | met |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['operation']} | {r['codec']} | {ms(r['ours'])} | {ms(r['theirs'])} "
            f"| {ms(r['floor'])} | {ratio(r['ours'], r['floor'])} "
            f"| {ratio(r['ours'], r['theirs'])} | {r['cpu ratio']:.2f} "
            f"| {r['target']} | {'yes' if r['met'] else 'no'} |"
        )
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=256, help="array size in MiB (default 256)")
    parser.add_argument("--samples", type=int, default=128, help="samples (default 128)")
    parser.add_argument(
        "--features", type=int, default=36_601, help="features (default 36,601, as in GRCh38)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the stores")
    parser.add_argument(
        "--quick", action="store_true", help="a small smoke run (0.5 MiB, 1 repeat)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.mib, args.samples, args.features, args.repeats = 0.5, 8, 5_000, 1
    if args.repeats < 1 or args.samples < 1 or args.features < 1 or args.mib <= 0:
        parser.error("--mib, --samples, --features and --repeats must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    import zarr

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with tempfile.TemporaryDirectory(prefix="zarr-io-bench-", dir=args.dir) as name:
        rows = run(args, Path(name))
    load = max(load, os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan"))
    print(
        f"Python {platform.python_version()}, numpy {np.__version__}, zarr-python "
        f"{zarr.__version__}, {os.cpu_count()} CPUs, {platform.machine()}, 1-minute load "
        f"average up to {load:.1f}; medians of {args.repeats} repeats "
        f"({4 * args.repeats} for selective reads)\n"
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
