"""Benchmark start-up: what a fresh process pays before cytepool does any work (issue 16).

Each case runs as a fresh process, hyperfine-style: one untimed warm-up run, then ``--runs``
timed runs per case, the cases round-robin so that a busy machine slows all of them alike;
the table gives the median and the fastest wall-clock time of the whole process:

* ``python -c pass``: the interpreter alone, the floor of every other case;
* ``python -c "import cytepool"`` and ``python -c "import cytepool.io"``;
* ``cytepool --help`` and ``cytepool info SMALL.cube.zarr`` (the console script installed next
  to this Python; ``python -m cytepool`` where there is none) on a small cube file;
* the first ``from_cells`` of a process (a CSR matrix of whole numbers as float32, 10 %
  nonzero, numpy string labels): small, 2,000 cells x 300 genes (60,000 values); medium, 20,000
  cells x 1,200 genes (2.4 million values); large, 200,000 cells x 2,000 genes (40 million
  values), which from_cells pools with numpy too while numba is not loaded (up to
  ``cytepool._pool_sums.FIRST_VALUES``, 67 million values: numba's set-up costs more); and
  larger, 500,000 cells x 2,000 genes (100 million values, pooled by the numba kernels) with
  numba's cache warm (``NUMBA_CACHE_DIR`` a directory that an untimed run filled) and cold (a
  new empty ``NUMBA_CACHE_DIR`` for every run): the whole process, and inside it the time of
  ``import cytepool`` and of the first call (numpy and scipy, which the caller has anyway, are
  imported before either).

It also lists the heavy modules each case imports (numba, pandas, pyarrow, anndata, scipy,
polars, narwhals, zarr, h5py, dask), from one more run with ``PYTHONPROFILEIMPORTTIME=1``, with
the cumulative import time of each (the import time of a module imported inside another's is
part of that one's too), and checks the targets of issue 16: <= 0.3 s wall for ``--help`` and
``info``, and <= 0.3 s for the first ``from_cells``, small, medium, large and, with the cache warm,
larger (which pays numba's set-up, and whose pooling alone takes longer than that in a warm
process: reported as measured).

Usage::

    .venv/bin/python benchmarks/startup.py              # 10 runs per case
    .venv/bin/python benchmarks/startup.py --runs 3     # quicker
    .venv/bin/python benchmarks/startup.py --no-larger  # without the 100-million-value cases
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HEAVY = (
    "numba",
    "llvmlite",
    "pandas",
    "pyarrow",
    "anndata",
    "scipy",
    "polars",
    "narwhals",
    "zarr",
    "h5py",
    "dask",
)
TARGET_SECONDS = 0.3
TARGETS = {
    "cytepool --help",
    "cytepool info SMALL.cube.zarr",
    "first from_cells, small",
    "first from_cells, medium",
    "first from_cells, large",
    "first from_cells, larger, cache warm",
}
# The first from_cells (cells, genes): 60,000, 2.4 million and 40 million values, pooled with
# numpy (no numba); 100 million, above cytepool._pool_sums.FIRST_VALUES: the numba kernels.
SIZES = {
    "small": (2000, 300),
    "medium": (20000, 1200),
    "large": (200000, 2000),
    "larger": (500000, 2000),
}

FIRST_CALL = """
import json, sys, time
import numpy as np
import scipy.sparse as sp
rng = np.random.default_rng(0)
n_cells, n_genes = N_CELLS, N_GENES
per_row = n_genes // 10  # 10 % nonzero: one column in each run of ten, at random
indices = (np.arange(0, n_genes - 9, 10)[None, :] + rng.integers(0, 10, (n_cells, per_row)))
indptr = np.arange(0, n_cells * per_row + 1, per_row)
data = rng.integers(1, 20, n_cells * per_row).astype(np.float32)
x = sp.csr_matrix((data, indices.ravel().astype(np.int32), indptr), shape=(n_cells, n_genes))
samples = np.array([f"s{i % 4}" for i in range(n_cells)])
groups = np.array([f"g{i % 3}" for i in range(n_cells)])
import colorsys  # a marker in -X importtime output: what follows is cytepool's
before = set(sys.modules)
start = time.perf_counter()
import cytepool
imported = time.perf_counter()
cube = cytepool.from_cells(x, sample_labels=samples, group_labels=groups)
called = time.perf_counter()
cytepool.from_cells(x, sample_labels=samples, group_labels=groups)
again = time.perf_counter()
heavy = sorted({name.split(".")[0] for name in set(sys.modules) - before} & set(sys.argv[1:]))
print(json.dumps({"import": imported - start, "call": called - imported,
                  "second": again - called, "heavy": heavy, "shape": list(cube.shape)}))
"""


def make_small_cube(path: Path) -> None:
    """A 3 groups x 4 samples x 50 features cube file (pandas tables)."""
    import numpy as np
    import pandas as pd

    from cytepool import Cube
    from cytepool.io import write_cube

    rng = np.random.default_rng(0)
    counts = rng.integers(0, 50, size=(3, 4, 50)).astype(np.int64)
    cube = Cube(
        {"counts": counts},
        samples=pd.DataFrame({"sample_id": [f"s{i}" for i in range(4)]}),
        groups=pd.DataFrame({"group_id": [f"g{i}" for i in range(3)]}),
        features=pd.DataFrame({"feature_id": [f"gene{i}" for i in range(50)]}),
        cells=rng.integers(1, 100, size=(3, 4)),
    )
    write_cube(cube, path)


def cli() -> list[str]:
    script = Path(sys.executable).parent / "cytepool"
    return [str(script)] if script.exists() else [sys.executable, "-m", "cytepool"]


class Case:
    """One command, run in a fresh process; ``env`` is called before every run."""

    def __init__(self, name: str, command: list[str], env: Any = None, reports: bool = False):
        self.name, self.command, self.env, self.reports = name, command, env, reports
        self.walls: list[float] = []
        self.inside: list[dict[str, Any]] = []

    def environment(self) -> dict[str, str]:
        extra = self.env() if self.env is not None else {}
        return {**os.environ, "PYTHONWARNINGS": "ignore", **extra}

    def run(self, timed: bool = True) -> None:
        env = self.environment()
        start = time.perf_counter()
        done = subprocess.run(self.command, capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{self.name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        if timed:
            self.walls.append(wall)
            if self.reports:
                self.inside.append(json.loads(done.stdout.strip().splitlines()[-1]))

    def imports(self) -> dict[str, float]:
        """The heavy modules imported, with their cumulative import time in seconds."""
        env = {**self.environment(), "PYTHONPROFILEIMPORTTIME": "1"}
        done = subprocess.run(self.command, capture_output=True, text=True, env=env, check=True)
        return heavy_imports(done.stderr)


MARKER = "colorsys"


def heavy_imports(stderr: str) -> dict[str, float]:
    """Seconds spent importing each heavy package, from ``-X importtime`` output.

    The output lists every module after the modules its import imported, indented one step
    deeper; a package's time is the cumulative time of its outermost modules (those not
    imported while another module of the same package was being imported), so what it
    imports of other packages counts too. Where the marker module was imported (the
    first-from_cells script imports it once its own data are made), only what follows counts.
    """
    pattern = re.compile(r"import time:\s+\d+ \|\s+(\d+) \|( +)(\S+)")
    pending: dict[int, list[tuple[str, float, list[Any]]]] = {}
    roots: list[tuple[str, float, list[Any]]] = []
    lines = stderr.splitlines()
    marked = [i for i, line in enumerate(lines) if line.endswith(f"| {MARKER}")]
    for line in lines[marked[0] + 1 :] if marked else lines:
        match = pattern.match(line)
        if match is None:
            continue
        depth = (len(match.group(2)) - 1) // 2
        node = (match.group(3), int(match.group(1)) / 1e6, pending.pop(depth + 1, []))
        (roots if depth == 0 else pending.setdefault(depth, [])).append(node)
    found: dict[str, float] = {}

    def walk(node: tuple[str, float, list[Any]], inside: frozenset[str]) -> None:
        name, seconds, children = node
        package = name.split(".")[0]
        if package in HEAVY and package not in inside:
            found[package] = found.get(package, 0.0) + seconds
            inside = inside | {package}
        for child in children:
            walk(child, inside)

    for root in roots:
        walk(root, frozenset())
    return found


def cases(python: str, cube: Path, caches: Path, larger: bool = True) -> list[Case]:
    warm = caches / "warm"
    counter = iter(range(10**6))

    def cold() -> dict[str, str]:
        fresh = caches / f"cold-{next(counter)}"
        return {"NUMBA_CACHE_DIR": str(fresh)}

    def first_call(size: str) -> list[str]:
        n_cells, n_genes = SIZES[size]
        code = FIRST_CALL.replace("N_CELLS", str(n_cells)).replace("N_GENES", str(n_genes))
        return [python, "-c", code, *HEAVY]

    every = [
        Case("python -c pass", [python, "-c", "pass"]),
        Case("import cytepool", [python, "-c", "import cytepool"]),
        Case("import cytepool.io", [python, "-c", "import cytepool.io"]),
        Case("cytepool --help", [*cli(), "--help"]),
        Case("cytepool info SMALL.cube.zarr", [*cli(), "info", str(cube)]),
        Case("first from_cells, small", first_call("small"), reports=True),
        Case("first from_cells, medium", first_call("medium"), reports=True),
        Case("first from_cells, large", first_call("large"), reports=True),
    ]
    if larger:
        big, warm_env = first_call("larger"), {"NUMBA_CACHE_DIR": str(warm)}
        every.append(
            Case("first from_cells, larger, cache warm", big, lambda: warm_env, reports=True)
        )
        every.append(Case("first from_cells, larger, cache cold", big, cold, reports=True))
    return every


def row(case: Case, heavy: dict[str, float], floor: float) -> str:
    median = statistics.median(case.walls)
    inside = ""
    if case.inside:
        parts = {
            key: statistics.median(r[key] for r in case.inside)
            for key in ("import", "call", "second")
        }
        inside = (
            f"import cytepool {parts['import']:.3f} s, first call {parts['call']:.3f} s, "
            f"second call {parts['second']:.4f} s"
        )
        heavy = {name: heavy.get(name, float("nan")) for name in case.inside[0]["heavy"]}
        measured = parts["call"]
    else:
        measured = median
    modules = ", ".join(
        f"{name} {seconds:.2f} s" if seconds == seconds else name for name, seconds in heavy.items()
    )
    target, met = "", ""
    if case.name in TARGETS:
        what = "first call" if case.inside else "wall"
        target = f"<= {TARGET_SECONDS} s ({what})"
        met = "yes" if measured <= TARGET_SECONDS else "no"
    return (
        f"| {case.name} | {median:.3f} | {min(case.walls):.3f} | {median - floor:.3f} "
        f"| {inside} | {modules or 'none'} | {target} | {met} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per case (default 10)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the cube file")
    parser.add_argument(
        "--no-larger",
        action="store_true",
        help="leave out the 100-million-value cases (2.5 GB each; for a smoke run)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be positive")
    loads = [os.getloadavg()[0]]
    if args.dir is not None:  # made if it is not there yet
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="startup-bench-", dir=args.dir) as name:
        root = Path(name)
        cube = root / "SMALL.cube.zarr"
        make_small_cube(cube)
        all_cases = cases(sys.executable, cube, root / "numba-cache", not args.no_larger)
        for case in all_cases:
            case.run(timed=False)  # warm-up: page cache, and the warm numba cache
        for _ in range(args.runs):
            for case in all_cases:
                case.run()
                if case.name.endswith("cold"):
                    for stale in (root / "numba-cache").glob("cold-*"):
                        shutil.rmtree(stale)
        heavy = {case.name: case.imports() for case in all_cases}
    loads.append(os.getloadavg()[0])
    floor = statistics.median(all_cases[0].walls)
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}; "
        f"1-minute load average {min(loads):.1f}–{max(loads):.1f}; {args.runs} runs per case "
        "in fresh processes, round-robin, after one warm-up run each\n"
    )
    print(
        "| case | median wall (s) | fastest (s) | median minus python -c pass (s) "
        "| inside the process (medians) | heavy modules imported (cumulative import time) "
        "| target | met |"
    )
    print("|---|---:|---:|---:|---|---|---|---|")
    for case in all_cases:
        print(row(case, heavy[case.name], floor))
    print(
        "\nThe first-from_cells process imports numpy and scipy (the caller's) before timing; "
        "its heavy modules are those that `import cytepool` and the two calls added."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
