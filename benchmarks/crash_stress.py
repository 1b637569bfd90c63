"""Kill cube-file writers with SIGKILL at random moments and count what is left at the path.

Each trial starts a writer process that replaces the cube file at ``path`` (overwrite=True)
with the other of two cubes, and kills it with SIGKILL at a random moment of that write
(uniform over 1.2 times the slowest of five timed writes). After each kill the path must
hold nothing (only before the first complete write), the old store or the complete new one,
read and verified group by group; at most one temporary directory may be left over, and the
next write must remove it.

``--mode exchange`` uses the normal write (Linux: renameat2 RENAME_EXCHANGE). ``--mode
two-renames`` disables the exchange, as on other systems: then a kill between the two renames
leaves the path empty with the old store aside ("window"), which the next write puts back;
``--widen-window`` sleeps between the two renames so that kills land in that window.

Usage::

    .venv/bin/python benchmarks/crash_stress.py --trials 200
    .venv/bin/python benchmarks/crash_stress.py --trials 200 --mode two-renames
    .venv/bin/python benchmarks/crash_stress.py --trials 100 --mode two-renames --widen-window 0.2
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import pandas as pd
    from cytepool import Cube
    from cytepool.io import _atomic, write_cube

    def cube(seed, n_groups=6, n_samples=16, n_features=4000):
        rng = np.random.default_rng(seed)
        counts = rng.poisson(3.0, size=(n_groups, n_samples, n_features)).astype(np.int32)
        return Cube(
            {"counts": counts, "detected": (counts > 0).astype(np.int32)},
            samples=pd.DataFrame({"sample_id": [f"s{i}" for i in range(n_samples)]}),
            groups=pd.DataFrame({"group_id": [f"g{i}" for i in range(n_groups)]}),
            features=pd.DataFrame({"feature_id": [f"f{i}" for i in range(n_features)]}),
            cells=np.ones((n_groups, n_samples), dtype=np.int64),
            metadata={"seed": seed},
        )

    path, mode, seed, widen = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    if mode == "two-renames":
        _atomic._renameat2 = lambda source, destination, flags: False
        rename = _atomic._rename_noreplace

        def slow_rename(source, destination):
            time.sleep(widen)  # widen the window between the two renames
            return rename(source, destination)

        _atomic._rename_noreplace = slow_rename
    if seed < 0:
        print(cube(0).fingerprint, cube(1).fingerprint)
        sys.exit()
    the_cube = cube(seed)
    print("ready", flush=True)
    start = time.perf_counter()
    write_cube(the_cube, path, overwrite=True, compression="gzip", level=1)
    print(time.perf_counter() - start, flush=True)
    """
)


def run_writer(
    path: Path, mode: str, seed: int, delay: float | None, widen: float = 0.0
) -> float | None:
    """Run one writer; kill it ``delay`` s after it is ready, or return its write time.

    Raises SystemExit if the writer failed by itself (anything but finishing or SIGKILL).
    """
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), mode, str(seed), str(widen)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    elapsed = None
    try:
        if process.stdout.readline().strip() == "ready":
            if delay is None:
                elapsed = float(process.stdout.readline() or "nan")
            else:
                time.sleep(delay)
                process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        errors = process.stderr.read()
        process.stderr.close()
    if process.returncode not in (0, -signal.SIGKILL) or elapsed != elapsed:
        raise SystemExit(f"the writer failed (exit {process.returncode}):\n{errors}")
    return elapsed


def leftovers(path: Path) -> list[Path]:
    return [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.cytepool-")]


def state_of(path: Path, expected: dict[str, str]) -> str:
    """What the path holds, verified; raises if it holds a torn or unexpected store."""
    if os.path.lexists(path):
        fingerprint = verified_fingerprint(path)
        if fingerprint not in expected:
            raise SystemExit(f"{path} holds neither the old nor the new store")
        return expected[fingerprint]
    aside = [p for p in leftovers(path) if ".cytepool-old-" in p.name]
    if not aside:
        return "nothing"
    if len(aside) != 1 or expected.get(verified_fingerprint(aside[0])) != "old":
        raise SystemExit(f"the store moved aside is not the old store: {aside}")
    return "window"


def verified_fingerprint(path: Path) -> str:
    """Read a cube file and every group of every layer (which verifies its digest)."""
    from cytepool.io import read_cube

    cube = read_cube(path)
    for group in range(cube.shape[0]):
        for layer in cube.layers:
            cube.profiles(group, layer=layer)
    return cube.fingerprint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--mode", choices=["exchange", "two-renames"], default="exchange")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument(
        "--widen-window",
        type=float,
        default=0.0,
        help="two-renames mode: sleep this long between the renames, so kills land there",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "stress.cube.zarr"
        fingerprints = subprocess.run(
            [sys.executable, "-c", WRITER, str(path), args.mode, "-1", "0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        widen = args.widen_window
        durations = [run_writer(path, args.mode, i % 2, None, widen) or 0.0 for i in range(5)]
        duration = max(durations)
        import shutil

        shutil.rmtree(path)
        counts: collections.Counter[str] = collections.Counter()
        max_leftovers = 0
        stored = None  # the index of the cube the path holds (or that waits aside), if any
        for trial in range(args.trials):
            new = 0 if stored is None else 1 - stored  # always the other cube
            expected = {fingerprints[new]: "new"}
            if stored is not None:
                expected[fingerprints[stored]] = "old"
            run_writer(path, args.mode, new, rng.uniform(0.0, 1.2 * duration), widen)
            state = state_of(path, expected)
            counts[state] += 1
            stored = new if state == "new" else stored
            left = len(leftovers(path))
            counts["with a leftover"] += left > 0
            max_leftovers = max(max_leftovers, left)
            if left > (2 if state == "window" else 1):  # the window holds old aside + new
                raise SystemExit(f"trial {trial}: {left} leftovers after state {state}")
        run_writer(path, args.mode, 0, None, widen)
        final_leftovers = len(leftovers(path))
    widened = f", window widened by {widen * 1000:.0f} ms" if widen else ""
    print(
        f"## Crash stress: {args.trials} writers killed with SIGKILL (mode {args.mode}{widened})\n"
    )
    print(f"slowest of 5 timed writes: {duration * 1000:.0f} ms; kills uniform over 0-1.2x that\n")
    print("| state at path after the kill | trials |")
    print("|---|---:|")
    for state in ("nothing", "old", "new", "window"):
        print(f"| {state} | {counts[state]} |")
    print("| torn (read failed or unexpected content) | 0 |")
    print(f"\nkills that left a temporary directory: {counts['with a leftover']}")
    print(f"most leftover temporary directories after a kill: {max_leftovers}")
    print(f"leftover temporary directories after the next complete write: {final_leftovers}")
    if final_leftovers:
        raise SystemExit("leftovers were not cleaned up")


if __name__ == "__main__":
    main()
