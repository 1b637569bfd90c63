"""What the Zarr and cube-file benchmarks share: timing, the contenders alternating, tensorstore,
and the description of the machine (benchmarks/zarr_io.py, zarr_local.py and cube_io.py).

A benchmark imports it after putting its own directory first on ``sys.path`` (a benchmark is
also loaded from its file by the smoke tests, where that directory is not on the path)::

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _zarr_bench
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Times = dict[str, list[tuple[float, float]]]
"""Wall-clock and CPU seconds of every call, by contender."""


def timed(function: Callable[[], object]) -> tuple[float, float]:
    """Wall-clock and CPU seconds (all threads of the process) of one call."""
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    result = function()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    del result
    return seconds, cpu_seconds


def alternate(
    functions: dict[str, Callable[[], object]],
    repeats: int,
    setup: Callable[[str], object] | None = None,
) -> Times:
    """Time every function ``repeats`` times, the order rotating from one repeat to the next.

    ``setup(name)``, if given, runs untimed before each call.
    """
    names = list(functions)
    times: Times = {name: [] for name in names}
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            if setup is not None:
                setup(name)
            times[name].append(timed(functions[name]))
    return times


def medians(times: Times) -> dict[str, tuple[float, float]]:
    """The median wall-clock and CPU seconds of each contender."""
    return {
        name: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts))
        for name, ts in times.items()
    }


def ts_spec(path: Path) -> dict[str, Any]:
    """tensorstore's spec of the Zarr v3 array in the directory ``path``."""
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}


def ts_open(path: Path) -> Any:
    """The Zarr v3 array at ``path`` opened by tensorstore with a fresh default context (so no
    chunk cache is shared between reads)."""
    import tensorstore as ts

    return ts.open(ts_spec(path), read=True, context=ts.Context()).result()


def directory_bytes(path: Path) -> int:
    """The bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def describe_fast() -> str:
    """Which fast decoders cytepool uses (see ``cytepool.io.zarr._fast``)."""
    from cytepool.io.zarr._fast import describe

    return describe()


def load_average() -> float:
    """The 1-minute load average (NaN where the system has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
