"""Measure the levers of a faster Zarr read on the chunks of benchmarks/zarr_io.py (issue 16).

The chunks are those ``cytepool.io.zarr.write_array`` writes for the array of
benchmarks/zarr_io.py (float32 negative-binomial counts, chunks 1 x 128 x 4096 = 2 MiB), gzip
level 4 and zstd level 3, read once into memory. For each decoder installed, one thread then
decodes every chunk into its place in a preallocated result (the copy included where the
decoder returns a new object), and so do two threads taking the chunks in turn:

* gzip: the standard library's ``zlib`` streamed in pieces of 256 KiB (as cytepool decodes
  today) and in one step (``decompressobj(31).decompress(raw, n + 1)``: bounded, with ``eof`` and
  ``unused_data`` to check), ``zlib.decompress``; the same with ``zlib_ng`` (zlib-ng) and
  ``isal.isal_zlib`` (ISA-L); ``deflate.gzip_decompress(raw, n)`` (libdeflate, whole member into
  a buffer of the known size);
* zstd: ``backports.zstd`` (or ``compression.zstd``) streamed in 256 KiB pieces and in one
  step, ``numcodecs.zstd.Zstd().decode(raw, out=...)`` (straight into the result), and
  ``zstandard`` if installed (``stream_reader(raw).readinto``, straight into the result).

Beside the decoders: reading the chunk files (``os.open`` + ``os.read`` + ``os.close``), copying a
chunk into the result, and SHA-256 (``hashlib``) over one group of the array, on one thread and
on two. "2 threads: CPU / wall" near 2 says a decoder releases the GIL and the machine had two
free cores; near 1, that it holds the GIL (or that the machine is busy: compare with the
copy and SHA-256 rows, which release it). A second table does not need a free core as much:
for each library, one long call (a whole stream of up to 64 MiB of the array) in a second
thread, and the longest time a thread waking every millisecond waits meanwhile, over the
call's duration (1: the call holds the GIL; ``bytes.count``, which holds it, is the control).

Usage::

    .venv/bin/python benchmarks/codec_levers.py            # 64 MiB of the array, 5 repeats
    .venv/bin/python benchmarks/codec_levers.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
PIECE = 256 * 1024

Decoder = Callable[[bytes, np.ndarray], None]


def optional(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def zarr_io() -> Any:
    """benchmarks/zarr_io.py, for its data (the same counts)."""
    spec = importlib.util.spec_from_file_location("zarr_io_benchmark", HERE / "zarr_io.py")
    if spec is None or spec.loader is None:
        raise SystemExit("benchmarks/zarr_io.py is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def into(out: np.ndarray, data: Any) -> None:
    """Copy decoded bytes into their place, checking the size."""
    if len(data) != out.size:
        raise ValueError(f"decoded {len(data)} bytes, expected {out.size}")
    out[:] = np.frombuffer(data, dtype=np.uint8)


def streamed(start: Callable[[], Any], tail: bool) -> Decoder:
    """Decode in pieces of at most PIECE bytes (as cytepool does today)."""

    def run(raw: bytes, out: np.ndarray) -> None:
        decoder, data, pos = start(), raw, 0
        while True:
            piece = decoder.decompress(data, PIECE)
            out[pos : pos + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
            pos += len(piece)
            data = decoder.unconsumed_tail if tail else b""
            if decoder.eof or (not data and len(piece) < PIECE):
                break
        if pos != out.size or not decoder.eof or decoder.unused_data:
            raise ValueError("bad chunk")

    return run


def one_step(start: Callable[[], Any]) -> Decoder:
    """Decode in one bounded step, then check the end of the stream."""

    def run(raw: bytes, out: np.ndarray) -> None:
        decoder = start()
        into(out, decoder.decompress(raw, out.size + 1))
        if not decoder.eof or decoder.unused_data:
            raise ValueError("bad chunk")

    return run


def gzip_decoders() -> dict[str, Decoder]:
    decoders: dict[str, Decoder] = {}
    modules = {"zlib (stdlib)": zlib, "zlib-ng": optional("zlib_ng.zlib_ng")}
    modules["isal"] = optional("isal.isal_zlib")
    for name, module in modules.items():
        if module is None:
            continue
        start = lambda m=module: m.decompressobj(31)  # noqa: E731
        decoders[f"{name}, streamed 256 KiB"] = streamed(start, tail=True)
        decoders[f"{name}, one step (decompressobj)"] = one_step(start)
        decoders[f"{name}, decompress()"] = lambda raw, out, m=module: into(
            out, m.decompress(raw, 31, out.size)
        )
    deflate = optional("deflate")
    if deflate is not None:
        decoders["deflate (libdeflate), gzip_decompress(raw, n)"] = lambda raw, out: into(
            out, deflate.gzip_decompress(raw, out.size)
        )
    return decoders


def zstd_decoders() -> dict[str, Decoder]:
    zstd = zarr_io()._zstd()
    decoders: dict[str, Decoder] = {
        "zstd module, streamed 256 KiB": streamed(zstd.ZstdDecompressor, tail=False),
        "zstd module, one step": one_step(zstd.ZstdDecompressor),
        "zstd module, decompress()": lambda raw, out: into(out, zstd.decompress(raw)),
    }
    numcodecs_zstd = optional("numcodecs.zstd")
    if numcodecs_zstd is not None:
        codec = numcodecs_zstd.Zstd()
        decoders["numcodecs Zstd.decode(raw, out=result)"] = lambda raw, out: codec.decode(
            raw, out=out
        )
    zstandard = optional("zstandard")
    if zstandard is not None:
        context = threading.local()

        def readinto(raw: bytes, out: np.ndarray) -> None:
            decompressor = getattr(context, "d", None) or zstandard.ZstdDecompressor()
            context.d = decompressor
            with decompressor.stream_reader(raw) as reader:
                if reader.readinto(memoryview(out)) != out.size or reader.read(1):
                    raise ValueError("bad chunk")

        decoders["zstandard stream_reader.readinto(result)"] = readinto
    return decoders


def write_chunks(root: Path, data: np.ndarray, codec: str) -> list[bytes]:
    from cytepool.io.zarr import write_array

    path = root / codec
    write_array(path, data, chunks=(1, data.shape[1], 4096), compression=codec)
    files = sorted(p for p in (path / "c").rglob("*") if p.is_file())
    return [p.read_bytes() for p in files]


def timed(function: Callable[[], object]) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    function()
    return time.perf_counter() - start, time.process_time() - cpu


def on_threads(work: Callable[[int], None], count: int, threads: int) -> Callable[[], None]:
    """Call work(i) for i in range(count), on ``threads`` threads taking the items in turn."""

    def run() -> None:
        if threads == 1:
            for i in range(count):
                work(i)
            return
        workers = [
            threading.Thread(target=lambda k=k: [work(i) for i in range(k, count, threads)])
            for k in range(threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    return run


def measure(work: Callable[[int], None], count: int, nbytes: int, repeats: int) -> dict[str, float]:
    """MiB/s on one thread, and the speed-up and CPU / wall on two."""
    one = [timed(on_threads(work, count, 1)) for _ in range(repeats)]
    two = [timed(on_threads(work, count, 2)) for _ in range(repeats)]
    wall1 = statistics.median(t[0] for t in one)
    wall2 = statistics.median(t[0] for t in two)
    cpu2 = statistics.median(t[1] for t in two)
    return {
        "mib_s": nbytes / 2**20 / wall1,
        "ms_chunk": wall1 / count * 1000,
        "speedup": wall1 / wall2,
        "cpu_wall": cpu2 / wall2,
    }


def gil_stall(call: Callable[[], object], calls: int = 3) -> float:
    """The longest stall of a thread that wakes every millisecond, over a call's duration.

    The main thread sleeps 1 ms at a time (releasing the GIL) while a second thread makes
    ``calls`` calls; to wake, it must take the GIL back. A call that holds the GIL stalls it
    for the whole call (about 1.0); one that releases it lets it wake every millisecond or so
    (near 0, or a few ms more where a busy machine delays it).
    """
    spans: list[tuple[float, float]] = []
    wakes: list[float] = []
    done = threading.Event()

    def worker() -> None:
        for _ in range(calls):
            start = time.perf_counter()
            call()
            spans.append((start, time.perf_counter()))
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    while not done.is_set():
        time.sleep(0.001)
        wakes.append(time.perf_counter())
    thread.join()
    worst = 0.0
    for start, end in spans:
        inside = [start, *(w for w in wakes if start < w < end), end]
        worst = max(worst, max(np.diff(inside)) / (end - start))
    return worst


def gil_rows(data: np.ndarray) -> list[tuple[str, float, float]]:
    """Each library's GIL behaviour, on one call over a whole group (one stream, ~18 MiB)."""
    group = np.ascontiguousarray(data[: max(1, 64 * 2**20 // data[0].nbytes)]).tobytes()
    n = len(group)
    out = np.empty(n, dtype=np.uint8)
    calls: dict[str, Callable[[], object]] = {
        "bytes.count (holds the GIL: the control)": lambda: group.count(b"\xff\xfe\xfd"),
        "hashlib.sha256": lambda: hashlib.sha256(group).digest(),
        "numpy copy": lambda: out.__setitem__(slice(None), np.frombuffer(group, np.uint8)),
    }
    gz = zlib.compress(group, 4, wbits=31)
    calls["zlib.decompress (stdlib)"] = lambda: zlib.decompress(gz, 31, n)
    for label, name in (("zlib-ng", "zlib_ng.zlib_ng"), ("isal", "isal.isal_zlib")):
        module = optional(name)
        if module is not None:
            calls[f"{label} decompress"] = lambda m=module: m.decompress(gz, 31, n)
    deflate = optional("deflate")
    if deflate is not None:
        calls["deflate.gzip_decompress (libdeflate)"] = lambda: deflate.gzip_decompress(gz, n)
    zstd = zarr_io()._zstd()
    zs = zstd.compress(group, 3)
    calls["zstd module decompress"] = lambda: zstd.decompress(zs)
    calls["zstd module ZstdDecompressor().decompress"] = lambda: zstd.ZstdDecompressor().decompress(
        zs
    )
    numcodecs_zstd = optional("numcodecs.zstd")
    if numcodecs_zstd is not None:
        codec = numcodecs_zstd.Zstd()
        calls["numcodecs Zstd.decode(out=)"] = lambda: codec.decode(zs, out=out)
    rows = []
    for name, call in calls.items():
        start = time.perf_counter()
        call()
        rows.append((name, (time.perf_counter() - start) * 1000, gil_stall(call)))
    return rows


def gil_table(rows: Sequence[tuple[str, float, float]], nbytes: int) -> str:
    lines = [
        f"| one call over {nbytes / 2**20:.0f} MiB | ms | longest stall of a 1 ms sleeper / call "
        "(1 = holds the GIL) |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {ms:.0f} | {share:.2f} |" for name, ms, share in rows]
    return "\n".join(lines)


def decoder_rows(
    chunks: list[bytes], decoders: dict[str, Decoder], chunk_bytes: int, repeats: int
) -> list[tuple[str, dict[str, float]]]:
    result = np.empty((len(chunks), chunk_bytes), dtype=np.uint8)
    reference: np.ndarray | None = None
    rows = []
    for name, decode in decoders.items():
        result[:] = 0
        for i, raw in enumerate(chunks):
            decode(raw, result[i])
        if reference is None:
            reference = result.copy()
        elif not np.array_equal(result, reference):
            raise SystemExit(f"{name} decodes differently")
        rows.append(
            (
                name,
                measure(
                    lambda i, d=decode: d(chunks[i], result[i]),
                    len(chunks),
                    result.nbytes,
                    repeats,
                ),
            )
        )
    return rows


def other_rows(
    root: Path, data: np.ndarray, chunk_bytes: int, repeats: int
) -> list[tuple[str, dict[str, float]]]:
    files = sorted(p for p in (root / "gzip" / "c").rglob("*") if p.is_file())
    sizes = sum(p.stat().st_size for p in files)

    def read(i: int) -> None:
        fd = os.open(files[i], os.O_RDONLY)
        try:
            os.read(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    block = np.frombuffer(os.urandom(chunk_bytes), dtype=np.uint8)
    result = np.empty((len(files), chunk_bytes), dtype=np.uint8)
    group = np.ascontiguousarray(data[0]).view(np.uint8).reshape(-1)
    pieces = np.array_split(group, max(1, group.size // chunk_bytes))
    return [
        (
            "read chunk files (gzip store; MiB/s of files)",
            measure(read, len(files), sizes, repeats),
        ),
        (
            "copy a decoded chunk into the result",
            measure(lambda i: result.__setitem__(i, block), len(files), result.nbytes, repeats),
        ),
        (
            f"SHA-256 (hashlib), one group in {len(pieces)} updates of a chunk",
            measure(
                lambda i: hashlib.sha256(pieces[i]).digest(), len(pieces), group.nbytes, repeats
            ),
        ),
    ]


def table(rows: Sequence[tuple[str, str, dict[str, float]]]) -> str:
    lines = [
        "| codec | step | 1 thread MiB/s | ms per chunk | 2 threads: speed-up | 2 threads: CPU / wall |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for codec, name, m in rows:
        lines.append(
            f"| {codec} | {name} | {m['mib_s']:,.0f} | {m['ms_chunk']:.2f} | {m['speedup']:.2f} "
            f"| {m['cpu_wall']:.2f} |"
        )
    return "\n".join(lines)


def versions() -> str:
    found = []
    for name in ("zlib_ng", "isal", "deflate", "backports.zstd", "numcodecs", "zstandard"):
        try:
            found.append(f"{name} {importlib.metadata.version(name.replace('.', '-'))}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return f"zlib {zlib.ZLIB_RUNTIME_VERSION}, " + ", ".join(found)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=64, help="MiB of the array (default 64)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="a smoke run (2 MiB, 1 repeat)")
    args = parser.parse_args(argv)
    if args.quick:
        args.mib, args.repeats = 2, 1
    samples, features = 128, 36_601
    groups = max(1, round(args.mib * 2**20 / (samples * features * 4)))
    data = zarr_io().make_counts(groups, samples, features, seed=0)
    chunk_bytes = samples * 4096 * 4
    load = [os.getloadavg()[0]]
    rows: list[tuple[str, str, dict[str, float]]] = []
    if args.dir is not None:  # made if it is not there yet
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="codec-levers-", dir=args.dir) as name:
        root = Path(name)
        for codec, decoders in (("gzip 4", gzip_decoders()), ("zstd 3", zstd_decoders())):
            chunks = write_chunks(root, data, codec.split()[0])  # edge chunks are whole too
            found = decoder_rows(chunks, decoders, chunk_bytes, args.repeats)
            rows += [(codec, decoder, m) for decoder, m in found]
        rows += [("", step, m) for step, m in other_rows(root, data, chunk_bytes, args.repeats)]
    gil = gil_rows(data)
    load.append(os.getloadavg()[0])
    print(
        f"{groups} x {samples} x {features} float32, chunks of 1 x {samples} x 4096 "
        f"({chunk_bytes / 2**20:.0f} MiB); Python {platform.python_version()}, "
        f"{versions()}; {os.cpu_count()} CPUs, 1-minute load average {min(load):.1f}–"
        f"{max(load):.1f}; medians of {args.repeats}\n"
    )
    print(table(rows))
    print()
    print(gil_table(gil, min(data.nbytes, max(data[0].nbytes, 64 * 2**20))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
