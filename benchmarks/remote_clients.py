"""Remote-read clients compared on the test servers: obstore, fsspec (HTTP) and s3fs.

Groundwork for issue 15 (which client cytepool's remote stores use). Serves one file of
``--ranges`` × 2 MiB over loopback HTTP and S3 (moto) with the test servers of
tests/io/remote/remote_servers.py, injects ``--latency`` seconds per request, and reads
``--ranges`` ranges of 1 MiB (2 MiB apart, so that nothing coalesces them) in several ways.
Each row: requests the server saw, round trips one after another, the most in flight at once,
bytes sent, and the median wall time of ``--repeat`` runs (ratio against obstore with asyncio
in the same run). A heavy case for the lead's machine, not a test.

    python benchmarks/remote_clients.py                    # 50 ranges, 20 ms, 3 repeats
    python benchmarks/remote_clients.py --quick            # 8 ranges, 1 repeat
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import datetime
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "io" / "remote"))

from remote_servers import (
    ServedHTTP,
    ServedS3,
    ServerProcess,
    peak_in_flight,
    round_trips,
)

MIB = 1 << 20
FAST_RETRY: Any = {
    "max_retries": 3,
    "backoff": {"init_backoff": datetime.timedelta(milliseconds=20)},
    "retry_timeout": datetime.timedelta(seconds=30),
}


class Loop:
    """A private event loop on a daemon thread: coroutines run from synchronous code.

    Works whether or not the caller's thread already runs a loop (Jupyter does), where
    ``asyncio.run`` would raise.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def obstore_ways(
    store: Any, reads: list[tuple[str, int]], loop: Loop
) -> dict[str, Callable[[], list[bytes]]]:
    """Ways to read ``(key, start)`` ranges of 1 MiB with obstore from synchronous code."""
    import obstore as obs

    def sequential() -> list[bytes]:
        return [bytes(obs.get_range(store, k, start=s, length=MIB)) for k, s in reads]

    def threads() -> list[bytes]:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            parts = pool.map(lambda r: obs.get_range(store, r[0], start=r[1], length=MIB), reads)
            return [bytes(p) for p in parts]

    async def gather(limit: int) -> list[bytes]:
        gate = asyncio.Semaphore(limit)

        async def one(key: str, start: int) -> bytes:
            async with gate:
                return bytes(await obs.get_range_async(store, key, start=start, length=MIB))

        return list(await asyncio.gather(*(one(k, s) for k, s in reads)))

    return {
        "obstore asyncio, 16 in flight": lambda: loop.run(gather(16)),
        "obstore asyncio, all in flight": lambda: loop.run(gather(len(reads))),
        "obstore 16 threads, sync get_range": threads,
        "obstore sequential get_range": sequential,
    }


def get_ranges_ways(
    store: Any, key: str, starts: list[int]
) -> dict[str, Callable[[], list[bytes]]]:
    """obstore's get_ranges: many ranges of one object in one call."""
    import obstore as obs

    def get_ranges(coalesce: int) -> list[bytes]:
        lengths = [MIB] * len(starts)
        parts = obs.get_ranges(store, key, starts=starts, lengths=lengths, coalesce=coalesce)
        return [bytes(p) for p in parts]

    return {
        "obstore get_ranges (coalesce 1 MiB, default)": lambda: get_ranges(MIB),
        "obstore get_ranges, coalesce=0": lambda: get_ranges(0),
    }


def measure(
    server: ServerProcess, way: Callable[[], list[bytes]], expected: list[bytes], repeat: int
) -> tuple[int, int, int, int, float]:
    times = []
    for _ in range(repeat):
        server.clear()
        began = time.perf_counter()
        got = way()
        times.append(time.perf_counter() - began)
        if got != expected:
            raise SystemExit("wrong bytes")
    log = server.requests()  # of the last run
    server.clear()
    sent = sum(r.sent for r in log)
    return len(log), round_trips(log), peak_in_flight(log), sent, statistics.median(times)


Row = tuple[str, str, tuple[int, int, int, int, float]]


def run(args: argparse.Namespace, work: Path) -> list[Row]:
    """Case "objects": N objects of 1 MiB read whole, on HTTP and S3; case "ranges": N
    ranges of 1 MiB, 2 MiB apart, of one object, on HTTP (moto copies a whole object for
    each range request, so S3 here would measure moto)."""
    source = work / "source"
    (source / "c").mkdir(parents=True)
    blobs = [os.urandom(MIB) for _ in range(args.ranges)]
    for i, blob in enumerate(blobs):
        (source / "c" / str(i)).write_bytes(blob)
    ranged = work / "ranged"  # HTTP only
    ranged.mkdir()
    (ranged / "big.bin").write_bytes(b"".join(blob + bytes(MIB) for blob in blobs))
    starts = [i * 2 * MIB for i in range(args.ranges)]
    objects = [(f"c/{i}", 0) for i in range(args.ranges)]
    (work / "served").mkdir()
    loop = Loop()
    try:
        with (
            ServerProcess("http", work / "served", work / "http.log") as http_server,
            ServerProcess("s3", None, work / "s3.log") as s3_server,
        ):
            http = ServedHTTP(http_server, source)
            big = ServedHTTP(http_server, ranged)
            s3 = ServedS3(s3_server, source)
            return cases(args, (http, big, s3), objects, starts, blobs, loop)
    finally:
        loop.close()


def cases(
    args: argparse.Namespace,
    served_copies: tuple[ServedHTTP, ServedHTTP, ServedS3],
    objects: list[tuple[str, int]],
    starts: list[int],
    blobs: list[bytes],
    loop: Loop,
) -> list[Row]:
    import obstore.store

    http, big, s3 = served_copies
    for served in served_copies:
        served.fault("*", latency=args.latency)
    stores = {
        "HTTP": obstore.store.HTTPStore.from_url(
            http.url, client_options={"allow_http": True}, retry_config=FAST_RETRY
        ),
        "S3": obstore.store.from_url(s3.url, **s3.obstore_options, retry_config=FAST_RETRY),
    }
    rows: list[Row] = []
    for label, served in (("HTTP", http), ("S3", s3)):
        for name, way in obstore_ways(stores[label], objects, loop).items():
            rows.append((f"{label} objects", name, measure(served.server, way, blobs, args.repeat)))
        for name, way in fsspec_ways(label, served, len(objects)).items():
            rows.append((f"{label} objects", name, measure(served.server, way, blobs, args.repeat)))
    store = obstore.store.HTTPStore.from_url(
        big.url, client_options={"allow_http": True}, retry_config=FAST_RETRY
    )
    ways = obstore_ways(store, [("big.bin", s) for s in starts], loop)
    del ways["obstore 16 threads, sync get_range"], ways["obstore asyncio, all in flight"]
    ways |= get_ranges_ways(store, "big.bin", starts)
    ways |= fsspec_ways("HTTP ranges", big, len(starts))
    for name, way in ways.items():
        rows.append(("HTTP ranges", name, measure(big.server, way, blobs, args.repeat)))
    return rows


def fsspec_ways(label: str, served: Any, count: int) -> dict[str, Callable[[], list[bytes]]]:
    """fsspec's HTTPFileSystem or s3fs: ``cat`` of many objects, or ``cat_ranges``."""
    try:
        if label.startswith("S3"):
            import s3fs

            fs = s3fs.S3FileSystem(skip_instance_cache=True, **served.s3fs_options)
            base = served.url.removeprefix("s3://")
        else:
            import fsspec

            fs = fsspec.filesystem("http", skip_instance_cache=True)
            base = served.url
    except ImportError:
        return {}
    name = "s3fs" if label.startswith("S3") else "fsspec HTTP"
    if label == "HTTP ranges":
        starts = [i * 2 * MIB for i in range(count)]
        paths = [f"{base}/big.bin"] * count
        ends = [s + MIB for s in starts]
        return {f"{name} cat_ranges": lambda: list(fs.cat_ranges(paths, starts, ends))}
    paths = [f"{base}/c/{i}" for i in range(count)]

    def cat() -> list[bytes]:
        found = fs.cat(paths)
        return [found[p] for p in paths]

    return {f"{name} cat (many paths)": cat}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=50)
    parser.add_argument("--latency", type=float, default=0.020, help="seconds per request")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="8 ranges, 1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.ranges, args.repeat = 8, 1
    with tempfile.TemporaryDirectory() as work:
        rows = run(args, Path(work))
    print(
        f"{args.ranges} ranges of 1 MiB, {args.latency * 1000:.0f} ms per request, median of {args.repeat}\n"
    )
    print(
        "| case | client | requests | round trips | peak in flight | MiB sent | wall s | vs obstore asyncio 16 |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = {label: m[4] for label, name, m in rows if name == "obstore asyncio, 16 in flight"}
    for label, name, (n, trips, peak, sent, wall) in rows:
        print(
            f"| {label} | {name} | {n} | {trips} | {peak} | {sent / MIB:.0f} | {wall:.3f} | {wall / base[label]:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
