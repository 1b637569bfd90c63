"""Benchmark remote cube reads: cytepool vs zarr-python (obstore store) over loopback HTTP.

A cube of 12 groups x 48 samples x 30,000 features (int32 counts, gzip 4) is written locally
and served by the test HTTP server (tests/io/remote/remote_servers.py, a real process on
127.0.0.1) with an injected latency per request (20 ms). Rows, each measured on a fresh open:

* open: ``read_cube(url)`` (root document with the consolidated metadata, then every table,
  cell and normalization chunk at once, all verified) vs zarr-python reading the same arrays:
  ``zarr.open_consolidated`` on ``zarr.storage.ObjectStore(HTTPStore)``, every array of the
  three tables, the cell numbers and the normalization read whole, and the layer array opened;
  once with the synchronous API (one array after another, as anndata's ``read_elem`` reads a
  table), once with the asynchronous API and all arrays read at once (``asyncio.gather``);
* one group x 50 genes: ``select(groups=[g], features=genes).to_numpy("counts")`` on the
  opened cube vs ``oindex[g, :, positions]`` on the opened zarr array;
* one full layer: ``to_numpy("counts")`` vs ``array[...]``.

For each: requests, sequential round trips (server clock), bytes sent, wall time (median),
and the ratio cytepool / zarr-python of the same run.

Usage::

    .venv/bin/python benchmarks/remote_io.py             # 3 repeats
    .venv/bin/python benchmarks/remote_io.py --quick     # small cube, 1 repeat
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "io" / "remote"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from remote_servers import ServedHTTP, ServerProcess, round_trips

SHAPE = (12, 48, 30_000)
N_GENES = 50


def _cube(shape: tuple[int, int, int]) -> Any:
    from cube_io import make_cube

    return make_cube(shape)


def _measure(served: ServedHTTP, action: Callable[[], Any], repeat: int) -> dict[str, Any]:
    walls = []
    for _ in range(repeat):
        served.clear()
        start = time.perf_counter()
        action()
        walls.append(time.perf_counter() - start)
    log = served.requests()  # of the last run
    return {
        "requests": len(log),
        "round trips": round_trips(log),
        "bytes": sum(r.sent for r in log),
        "wall": statistics.median(walls),
    }


OPENED = ("samples", "groups", "features", "cells", "normalization")
"""What a cube open reads besides the root document: every array at or under these nodes."""


def _zarr_store(url: str) -> Any:
    from obstore.store import HTTPStore
    from zarr.storage import ObjectStore

    return ObjectStore(HTTPStore.from_url(url, client_options={"allow_http": True}), read_only=True)


def _zarr_group(url: str) -> Any:
    import zarr

    return zarr.open_consolidated(_zarr_store(url), zarr_format=3, mode="r")


def _zarr_open(url: str) -> Any:
    """What a cube open reads, with zarr-python: the consolidated root, then every array of
    the three tables, the cell numbers and the normalization, read whole one after another
    (as zarr-python's synchronous API and anndata's ``read_elem`` read them); then the layer
    array is opened (its metadata is in the root document)."""
    group = _zarr_group(url)
    for name, node in group.members(max_depth=None):
        if name.split("/")[0] in OPENED and hasattr(node, "shape"):
            node[...]
    return group["layers/counts"]


def _zarr_open_concurrently(url: str) -> Any:
    """The same arrays with zarr-python's asynchronous API, all read at once (asyncio.gather):
    the fewest round trips zarr-python can take for them."""
    import asyncio

    import zarr

    async def read_all() -> Any:
        group = await zarr.api.asynchronous.open_consolidated(
            store=_zarr_store(url), zarr_format=3, mode="r"
        )
        arrays = [
            node
            async for name, node in group.members(max_depth=None)
            if name.split("/")[0] in OPENED and hasattr(node, "shape")
        ]
        await asyncio.gather(*(node.getitem(...) for node in arrays))
        return await group.getitem("layers/counts")

    return asyncio.run(read_all())


def run(
    shape: tuple[int, int, int], latency: float, repeat: int
) -> list[tuple[str, dict[str, Any]]]:
    """The rows: (name, {reader: its numbers})."""
    import warnings

    from cytepool.io import read_cube, write_cube

    warnings.simplefilter("ignore")  # zarr-python warns that consolidated metadata is not spec
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_cube(_cube(shape), work / "x.cube.zarr")
        (work / "served").mkdir()
        with ServerProcess("http", work / "served", work / "http.log") as server:
            served = ServedHTTP(server, work / "x.cube.zarr")
            served.fault("*", latency=latency)
            cube, array = read_cube(served.url), _zarr_open(served.url)
            group = int(shape[0] // 2)
            rng = np.random.default_rng(0)
            genes = np.sort(rng.choice(shape[2], size=min(N_GENES, shape[2]), replace=False))
            ids = [str(cube.features.index[i]) for i in genes]
            name = str(cube.groups.index[group])
            expected = array.oindex[group, :, genes]
            got = cube.select(groups=[name], features=ids).to_numpy("counts")[0]
            assert np.array_equal(got, expected)  # the same values
            sync, concurrent = "zarr-python (ObjectStore)", "zarr-python async (gather)"
            contenders: dict[str, dict[str, Callable[[], Any]]] = {
                "open": {
                    "cytepool": lambda: read_cube(served.url),
                    sync: lambda: _zarr_open(served.url),
                    concurrent: lambda: _zarr_open_concurrently(served.url),
                },
                f"one group x {len(ids)} genes": {
                    "cytepool": lambda: cube.select(groups=[name], features=ids).to_numpy("counts"),
                    sync: lambda: array.oindex[group, :, genes],
                },
                "one full layer": {
                    "cytepool": lambda: cube.to_numpy("counts"),
                    sync: lambda: array[...],
                },
            }
            return [
                (row, {who: _measure(served, action, repeat) for who, action in readers.items()})
                for row, readers in contenders.items()
            ]


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    """The rows as a Markdown table; the last column is cytepool's wall time over the reader's."""
    lines = [
        "| row | reader | requests | round trips | bytes | wall ms | cytepool / reader |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, readers in rows:
        ours = readers["cytepool"]["wall"]
        for reader, numbers in readers.items():
            ratio = ours / numbers["wall"] if numbers["wall"] else float("nan")
            lines.append(
                f"| {name} | {reader} | {numbers['requests']} | {numbers['round trips']} | "
                f"{numbers['bytes']} | {numbers['wall'] * 1000:.1f} | {ratio:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.020, help="seconds per request")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a 4 x 6 x 3000 cube, 1 repeat")
    args = parser.parse_args(argv)
    shape = (4, 6, 3000) if args.quick else SHAPE
    repeat = 1 if args.quick else args.repeat
    rows = run(shape, args.latency, repeat)
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(f"cube {shape}, latency {args.latency * 1000:.0f} ms, load average {' '.join(load)}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
