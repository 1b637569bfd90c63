"""Helpers shared by the benchmarks of pooling from files (pool_files.py, pool_many_files.py).

- :func:`rss_kib`, :func:`reset_peak`, :func:`peak_kib`: a process's own resident memory, and
  its peak since :func:`reset_peak` (Linux: ``/proc/self/status`` and ``clear_refs``);
- :func:`load_kernels`: numba's pooling kernels loaded from their cache, a fixed cost of a
  process's first large pooling, taken before what is measured;
- :func:`watch`: run a command and sum the CPU time and peak memory of it and every process
  it starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path("/tmp/cytepool-bench-data")
"""Where the benchmarks write their (large) data, once."""
MiB = 1 << 20


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def rss_kib() -> int:
    """This process's resident memory (VmRSS), KiB."""
    return _status_kib("VmRSS")


def reset_peak() -> None:
    """Start the peak (VmHWM) afresh at the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_kib() -> int:
    """This process's peak resident memory since it started or :func:`reset_peak`, KiB."""
    return _status_kib("VmHWM")


def load_kernels() -> None:
    """Load numba's pooling kernels (from their cache) for float32 CSR blocks in row blocks,
    as pooling a file uses them, so that their loading is not measured."""
    import scipy.sparse

    import cytepool

    rng = np.random.default_rng(0)
    matrix = scipy.sparse.csr_matrix((rng.random((8000, 1000)) < 0.4).astype(np.float32))
    labels = np.arange(8000) % 2
    blocks = (matrix[i : i + 4000] for i in range(0, 8000, 4000))
    cytepool.from_cells(blocks, sample_labels=labels, group_labels=labels)


def _status(pid: int) -> tuple[float, int, int] | None:
    """CPU seconds (user + system), VmHWM bytes and proportional set size (Pss, bytes: shared
    pages divided among the processes that share them) of a process, if it still runs."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as status:
            peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            pss = next(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks, peak, pss


def watch(command: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``command``, watching it and every process it starts (psutil).

    Returns the last JSON line it printed, with ``wall`` (s, timed here), ``cpu`` (s, user +
    system) and ``peak`` (bytes, the peak resident memory, VmHWM) summed over the processes
    (an upper bound: each process's own peak, whenever it was, and the pages processes share
    counted once per process), ``together`` (bytes, the largest sum of the processes'
    proportional set sizes seen at one reading: the memory the run held at once, shared
    pages counted once), and ``processes`` (how many were seen). The processes are read every
    0.05 s: the CPU time of a process's last 0.05 s may be missed, but the command's own CPU
    time is exact (its rusage, from wait4).
    """
    import psutil

    start = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    root = psutil.Process(process.pid)
    seen: dict[int, tuple[float, int, int]] = {}
    together = 0
    while process.poll() is None:
        try:
            family = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        now = 0
        for member in family:
            found = _status(member.pid)
            if found is not None:
                seen[member.pid] = found
                now += found[2]
        together = max(together, now)
        time.sleep(0.05)
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - start
    if process.returncode != 0:
        msg = f"{command[:4]} failed ({process.returncode}): {stderr.strip().splitlines()[-3:]}"
        raise SystemExit(msg)
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    result["wall"] = wall
    result["cpu"] = sum(cpu for cpu, _, _ in seen.values())
    result["peak"] = sum(peak for _, peak, _ in seen.values())
    result["together"] = together
    result["processes"] = len(seen)
    return result


def run_alone(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``command`` (one process); the last JSON line it printed, with ``outside``: its
    wall time, s, timed here from its start to its exit (interpreter and imports included)."""
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    outside = time.perf_counter() - start
    if done.returncode != 0:
        msg = f"{command[:4]} failed ({done.returncode}): {done.stderr.strip().splitlines()[-3:]}"
        raise SystemExit(msg)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["outside"] = outside
    return result
