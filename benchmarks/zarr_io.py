"""Benchmark cytepool.io.zarr against tensorstore, zarr-python and the decoding floor.

On a float32 array shaped like a cube layer (groups x samples x features, chunks
1 x n_samples x 4096) of negative-binomial counts, for gzip level 4 and zstd level 3, in one
process, the contenders alternating (their order rotates every repeat):

* full read: ``numpy.asarray(cytepool.io.zarr.open_array(path))`` vs tensorstore's
  ``ts.open(...).read()`` vs zarr-python's ``z[...]`` vs the floor — the standard library
  (zlib, or the zstd module) decoding the same chunk files, one at a time, into a preallocated
  result;
* one group x 10 genes: one group and 10 scattered features through ``oindex`` (cytepool,
  tensorstore and zarr-python alike);
* write: ``write_array`` vs tensorstore's ``ts.open(..., create=True).write(data)`` vs
  zarr-python's ``create_array`` + ``z[...] = data`` (zstd with a checksum on every side, as
  cytepool writes it).

Every read opens the array anew (its metadata document is read each time) and reads the store
written by cytepool, warm in the page cache. tensorstore runs with its default context
(``data_copy_concurrency`` and ``file_io_concurrency`` "shared", i.e. one thread per CPU, and
``cache_pool`` with ``total_bytes_limit`` 0, i.e. no chunk cache), and a fresh
``tensorstore.Context()`` for every read and write, so that nothing one read cached serves the
next. Its writes set ``file_io_sync`` to false: by default tensorstore fsyncs every chunk file,
which neither cytepool's ``write_array`` nor zarr-python does.

The script prints the medians of the wall-clock time and of the CPU time (summed over all the
threads of the process: every contender decodes or encodes several chunks at once on threads;
``CYTEPOOL_ZARR_THREADS=1`` runs cytepool on one, and ``--one-thread`` adds that as a
contender), then the ratios cytepool / tensorstore against the targets of issue 16 (wall
<= 1.0x, CPU <= 1.1x) and cytepool / zarr-python and / floor against the earlier ones.

Usage::

    python benchmarks/zarr_io.py                 # >= 256 MiB, 7 repeats
    python benchmarks/zarr_io.py --quick         # a small smoke run
    python benchmarks/zarr_io.py --mib 512 --repeats 5 --dir /some/fast/disk --one-thread
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import zlib
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _zarr_bench
from _zarr_bench import alternate, describe_fast, directory_bytes, load_average, ts_open, ts_spec

FEATURE_CHUNK = 4096
CODECS = (("gzip", 4), ("zstd", 3))
FULL_VS_FLOOR = 1.15
VS_TENSORSTORE_WALL = 1.0
VS_TENSORSTORE_CPU = 1.1
SELECTED_FEATURES = 10
SELECTION = f"one group x {SELECTED_FEATURES} genes"
CONTENDERS = ("cytepool", "tensorstore", "zarr-python", "floor")
ONE_THREAD = "cytepool 1 thread"

Times = _zarr_bench.Times


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


# --------------------------------------------------------------------------- tensorstore


def ts_write(path: Path, data: np.ndarray, chunks: tuple[int, ...], codec: str, level: int) -> None:
    """Create the array with tensorstore (default concurrency, no fsync) and write ``data``."""
    import tensorstore as ts

    compressor: dict[str, Any] = (
        {"name": "gzip", "configuration": {"level": level}}
        if codec == "gzip"
        else {"name": "zstd", "configuration": {"level": level, "checksum": True}}
    )
    metadata = {
        "shape": list(data.shape),
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, compressor],
    }
    context = ts.Context({"file_io_sync": False})
    store = ts.open(
        {**ts_spec(path), "metadata": metadata}, create=True, delete_existing=True, context=context
    ).result()
    store.write(data).result()


# --------------------------------------------------------------------------- runs


def with_one_thread(function: Callable[[], object]) -> Callable[[], object]:
    """``function`` run with CYTEPOOL_ZARR_THREADS=1 (read at every read and write)."""

    def run() -> object:
        before = os.environ.get("CYTEPOOL_ZARR_THREADS")
        os.environ["CYTEPOOL_ZARR_THREADS"] = "1"
        try:
            return function()
        finally:
            if before is None:
                del os.environ["CYTEPOOL_ZARR_THREADS"]
            else:
                os.environ["CYTEPOOL_ZARR_THREADS"] = before

    return run


def bench_codec(
    args: argparse.Namespace,
    root: Path,
    data: np.ndarray,
    codec: str,
    level: int,
    picked: np.ndarray,
) -> list[dict[str, Any]]:
    import zarr
    import zarr.codecs

    from cytepool.io.zarr import open_array, write_array

    shape, chunks = data.shape, (1, args.samples, FEATURE_CHUNK)
    group = shape[0] // 2
    peer = (
        zarr.codecs.GzipCodec(level=level)
        if codec == "gzip"
        else zarr.codecs.ZstdCodec(level=level, checksum=True)
    )
    paths = {name: root / f"{name}-{codec}" for name in ("cytepool", "tensorstore", "zarr-python")}

    def write_ours(path: Path = paths["cytepool"]) -> None:
        write_array(path, data, chunks=chunks, compression=codec, level=level)

    def write_theirs(path: Path = paths["zarr-python"]) -> None:
        z = zarr.create_array(
            path,
            shape=shape,
            dtype="float32",
            chunks=chunks,
            compressors=peer,
            fill_value=0,
        )
        z[...] = data

    writers: dict[str, Callable[[], object]] = {
        "cytepool": write_ours,
        "tensorstore": lambda: ts_write(paths["tensorstore"], data, chunks, codec, level),
        "zarr-python": write_theirs,
    }
    if args.one_thread:
        writers[ONE_THREAD] = with_one_thread(write_ours)

    def remove(name: str) -> None:
        shutil.rmtree(paths[name.replace(ONE_THREAD, "cytepool")], ignore_errors=True)

    writes = alternate(writers, args.repeats, remove)
    remove("cytepool")
    write_ours()  # the store every reader reads
    sizes = ", ".join(f"{name} {directory_bytes(p) / 2**20:.1f} MiB" for name, p in paths.items())
    print(f"{codec} {level} stores: {sizes}", file=sys.stderr)
    check(paths, data, picked, group, codec)

    ours = paths["cytepool"]
    full: dict[str, Callable[[], object]] = {
        "cytepool": lambda: np.asarray(open_array(ours)),
        "tensorstore": lambda: ts_open(ours).read().result(),
        "zarr-python": lambda: zarr.open_array(ours, mode="r")[...],
        "floor": lambda: floor_read(ours, shape, chunks, codec),
    }
    selective: dict[str, Callable[[], object]] = {
        "cytepool": lambda: open_array(ours).oindex[group, :, picked],
        "tensorstore": lambda: ts_open(ours).oindex[group, :, picked].read().result(),
        "zarr-python": lambda: zarr.open_array(ours, mode="r").oindex[group, :, picked],
    }
    if args.one_thread:
        full[ONE_THREAD] = with_one_thread(full["cytepool"])
        selective[ONE_THREAD] = with_one_thread(selective["cytepool"])
    full_reads = alternate(full, args.repeats)
    selective_reads = alternate(selective, 4 * args.repeats)
    for path in paths.values():
        shutil.rmtree(path, ignore_errors=True)
    label = f"{codec} {level}"
    return [
        row("full read", label, full_reads),
        row(SELECTION, label, selective_reads),
        row("write", label, writes),
    ]


def check(
    paths: dict[str, Path], data: np.ndarray, picked: np.ndarray, group: int, codec: str
) -> None:
    """Every reader gives the data from cytepool's store, and every store reads back as it."""
    import zarr

    from cytepool.io.zarr import open_array

    ours = paths["cytepool"]
    chunks = (1, data.shape[1], FEATURE_CHUNK)
    full = {
        "cytepool": np.asarray(open_array(ours)),
        "tensorstore": ts_open(ours).read().result(),
        "zarr-python": zarr.open_array(ours, mode="r")[...],
        "floor": floor_read(ours, data.shape, chunks, codec),
        "cytepool on tensorstore's store": np.asarray(open_array(paths["tensorstore"])),
        "cytepool on zarr-python's store": np.asarray(open_array(paths["zarr-python"])),
    }
    expected = data[group][:, picked]
    selected = {
        "cytepool": open_array(ours).oindex[group, :, picked],
        "tensorstore": ts_open(ours).oindex[group, :, picked].read().result(),
        "zarr-python": zarr.open_array(ours, mode="r").oindex[group, :, picked],
    }
    wrong = [name for name, got in full.items() if not np.array_equal(got, data)]
    wrong += [
        f"{name} (selection)" for name, got in selected.items() if not np.array_equal(got, expected)
    ]
    if wrong:
        raise SystemExit(f"{codec}: these readers disagree with the data: {', '.join(wrong)}")


def row(operation: str, codec: str, times: Times) -> dict[str, Any]:
    wall = {key: statistics.median(t[0] for t in values) for key, values in times.items()}
    cpu = {key: statistics.median(t[1] for t in values) for key, values in times.items()}
    return {
        "operation": operation,
        "codec": codec,
        "wall": wall,
        "cpu": cpu,
        "n": len(times["cytepool"]),
    }


def earlier_target(r: dict[str, Any]) -> tuple[str, bool]:
    """The target of the earlier issues (floor, zarr-python), and whether it is met."""
    ours, theirs = r["wall"]["cytepool"], r["wall"]["zarr-python"]
    if r["operation"] == "full read":
        met = ours <= FULL_VS_FLOOR * r["wall"]["floor"] and ours <= theirs
        return f"<= {FULL_VS_FLOOR}x floor, <= zarr-python", met
    if r["operation"] == SELECTION:
        return "< zarr-python", ours < theirs
    return "<= zarr-python", ours <= theirs


def times_table(rows: Sequence[dict[str, Any]]) -> str:
    names = [name for name in (*CONTENDERS, ONE_THREAD) if any(name in r["wall"] for r in rows)]
    head = " | ".join(f"{name} wall / CPU (ms)" for name in names)
    lines = [
        f"| operation | codec, level | {head} |",
        "| --- | --- |" + " ---: |" * len(names),
    ]
    for r in rows:
        cells = [
            f"{r['wall'][name] * 1000:.1f} / {r['cpu'][name] * 1000:.1f}"
            if name in r["wall"]
            else ""
            for name in names
        ]
        lines.append(f"| {r['operation']} | {r['codec']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| operation | codec, level | cytepool / tensorstore wall | CPU "
        f"| met (<= {VS_TENSORSTORE_WALL}x wall, <= {VS_TENSORSTORE_CPU}x CPU) "
        "| cytepool / zarr-python wall | CPU | cytepool / floor | earlier target | met |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        wall, cpu = r["wall"], r["cpu"]
        vs_ts = wall["cytepool"] / wall["tensorstore"]
        vs_ts_cpu = cpu["cytepool"] / cpu["tensorstore"]
        met = vs_ts <= VS_TENSORSTORE_WALL and vs_ts_cpu <= VS_TENSORSTORE_CPU
        floor = f"{wall['cytepool'] / wall['floor']:.2f}" if "floor" in wall else ""
        target, earlier_met = earlier_target(r)
        lines.append(
            f"| {r['operation']} | {r['codec']} | {vs_ts:.2f} | {vs_ts_cpu:.2f} "
            f"| {'yes' if met else 'no'} "
            f"| {wall['cytepool'] / wall['zarr-python']:.2f} "
            f"| {cpu['cytepool'] / cpu['zarr-python']:.2f} | {floor} "
            f"| {target} | {'yes' if earlier_met else 'no'} |"
        )
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=256, help="array size in MiB (default 256)")
    parser.add_argument("--samples", type=int, default=128, help="samples (default 128)")
    parser.add_argument(
        "--features", type=int, default=36_601, help="features (default 36,601, as in GRCh38)"
    )
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats (default 7)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the stores")
    parser.add_argument(
        "--one-thread",
        action="store_true",
        help="also time cytepool with CYTEPOOL_ZARR_THREADS=1",
    )
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
    try:
        import tensorstore  # noqa: F401
    except ImportError:
        raise SystemExit("this benchmark needs tensorstore: pip install tensorstore") from None
    import zarr

    group_bytes = args.samples * args.features * 4
    groups = max(1, math.ceil(args.mib * 2**20 / group_bytes))
    data = make_counts(groups, args.samples, args.features, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    picked = np.sort(
        rng.choice(args.features, size=min(SELECTED_FEATURES, args.features), replace=False)
    )
    print(
        f"array {groups} x {args.samples} x {args.features} float32 ({data.nbytes / 2**20:.0f} "
        f"MiB), chunks (1, {args.samples}, {FEATURE_CHUNK}); zeros {np.mean(data == 0):.0%}, "
        f"mean {data.mean():.2f}",
        file=sys.stderr,
    )
    loads = [load_average()]
    rows: list[dict[str, Any]] = []
    if args.dir is not None:  # made if it is not there yet
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="zarr-io-bench-", dir=args.dir) as name:
        for codec, level in CODECS:
            rows += bench_codec(args, Path(name), data, codec, level, picked)
            loads.append(load_average())
    print(
        f"Python {platform.python_version()}, numpy {np.__version__}, tensorstore "
        f"{version('tensorstore')}, zarr-python {zarr.__version__}, {os.cpu_count()} CPUs, "
        f"{platform.machine()}; {describe_fast()}; "
        f"1-minute load average {min(loads):.1f}–{max(loads):.1f}; "
        f"medians of {args.repeats} repeats ({4 * args.repeats} for {SELECTION}), contenders "
        "alternating; tensorstore: default context (shared concurrency, no chunk cache), a fresh "
        "one per read and write, writes without fsync\n"
    )
    print(times_table(rows))
    print()
    print(ratios_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
