"""Fuzz: pool mutated .h5ad files and AnnData Zarr stores; only documented errors may come out.

Writes small cells files (CSR, CSC and dense X; .h5ad chunked and gzip, Zarr v2 blosc, Zarr v3
sharded where anndata writes it), then makes ``--cases`` mutated copies: bytes flipped, zeroed
or cut off at random places of the .h5ad, of one file of the store (a chunk, a ``.zarray`` or
``zarr.json``), numbers in a store's metadata multiplied. Each copy is pooled with
``from_anndata(path)`` in a worker process; the outcome must be a cube, a
:class:`~cytepool.errors.CytepoolError` or an ``OSError``. A case that takes longer than
``--timeout`` seconds (a hang) or whose worker passes ``--memory`` GiB of resident memory is a
failure too; the worker is then restarted. Prints a count per outcome; exits 1 on any failure.

    python benchmarks/fuzz_cell_files.py --cases 1000
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

KEYS = {"sample_key": "sample", "group_key": "cell_type"}


def write_bases(folder: Path) -> list[Path]:
    """The files mutated: every layout and storage anndata writes here."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse

    rng = np.random.default_rng(0)
    n_cells, n_genes = 200, 30
    values = np.floor(rng.random((n_cells, n_genes)) * 10) + 1
    dense = np.where(rng.random(values.shape) < 0.2, values, 0).astype(np.float32)
    matrix = scipy.sparse.csr_matrix(dense)
    obs = pd.DataFrame(
        {"sample": rng.choice(["a", "b"], n_cells), "cell_type": rng.choice(["x", "y"], n_cells)},
        index=[f"c{i}" for i in range(n_cells)],
    )
    bases = []
    for layout, values in (("csr", matrix), ("csc", matrix.tocsc()), ("dense", matrix.toarray())):
        adata = ad.AnnData(values, obs=obs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            writers = {
                f"{layout}.h5ad": lambda p, a=adata: a.write_h5ad(p),
                f"{layout}-gzip.h5ad": lambda p, a=adata: a.write_h5ad(p, compression="gzip"),
            }
            for name, write in writers.items():
                write(folder / name)
                bases.append(folder / name)
            with ad.settings.override(zarr_write_format=2):
                adata.write_zarr(folder / f"{layout}-v2.zarr")
            bases.append(folder / f"{layout}-v2.zarr")
            if hasattr(ad.settings, "auto_shard_zarr_v3"):
                with ad.settings.override(zarr_write_format=3, auto_shard_zarr_v3=True):
                    adata.write_zarr(folder / f"{layout}-v3.zarr")
                bases.append(folder / f"{layout}-v3.zarr")
    return bases


def _flip(data: bytearray, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return "bytes changed"


def _zero(data: bytearray, rng: random.Random) -> str:
    start = rng.randrange(len(data))
    data[start : start + rng.randint(1, 64)] = bytes(min(64, len(data) - start))
    return "bytes zeroed"


def _cut(data: bytearray, rng: random.Random) -> str:
    del data[rng.randrange(len(data)) :]
    return "cut short"


def _numbers(data: bytearray, rng: random.Random) -> str:
    text = data.decode("utf-8", "replace")
    numbers = list(re.finditer(r"\d+", text))
    if not numbers:
        return _flip(data, rng)
    found = rng.choice(numbers)
    value = rng.choice(["0", "-1", str(10**15), str(int(found.group()) * 2 + 1), "1e300"])
    data[:] = (text[: found.start()] + value + text[found.end() :]).encode()
    return "a number changed"


MUTATIONS = (_flip, _zero, _cut)


def mutate(base: Path, target: Path, rng: random.Random) -> str:
    """A mutated copy of ``base`` at ``target``; what was done."""
    if base.is_dir():
        shutil.copytree(base, target)
        files = sorted(p for p in target.rglob("*") if p.is_file() and p.stat().st_size)
        victim = rng.choice([p for p in files if "X" in p.relative_to(target).parts] or files)
        data = bytearray(victim.read_bytes())
        metadata = victim.name in (".zarray", "zarr.json", ".zattrs", ".zmetadata")
        how = (_numbers if metadata and rng.random() < 0.7 else rng.choice(MUTATIONS))(data, rng)
        victim.write_bytes(bytes(data))
        return f"{victim.relative_to(target)}: {how}"
    data = bytearray(base.read_bytes())
    how = rng.choice(MUTATIONS)(data, rng)
    target.write_bytes(bytes(data))
    return how


# --------------------------------------------------------------------------- worker


def worker() -> None:
    """Pool each path read from stdin; write one JSON line per case: outcome and error type."""
    warnings.simplefilter("ignore")
    import faulthandler

    from cytepool.errors import CytepoolError
    from cytepool.io.anndata import from_anndata

    for line in sys.stdin:
        path = Path(line.strip())
        faulthandler.dump_traceback_later(float(os.environ.get("FUZZ_DUMP_AFTER", "50")))
        try:
            from_anndata(path, **KEYS, layers=("counts", "detected", "squares"), progress=False)
            outcome, kind = "cube", ""
        except (CytepoolError, OSError) as error:
            outcome, kind = "documented error", type(error).__name__
        except BaseException as error:  # what the fuzz looks for
            import traceback

            outcome, kind = "UNDOCUMENTED", f"{type(error).__name__}: {error}"
            kind += "\n" + traceback.format_exc()
        faulthandler.cancel_dump_traceback_later()
        print(json.dumps({"outcome": outcome, "kind": kind}), flush=True)


class Worker:
    def __init__(self, env: dict[str, str]):
        command = [sys.executable, __file__, "--worker"]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1
        )

    def run(self, path: Path, timeout: float, memory: float) -> dict[str, Any]:
        import selectors

        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if selector.select(0.2):
                    line = self.process.stdout.readline()
                    if not line:
                        return {"outcome": "CRASHED", "kind": f"exit {self.process.wait()}"}
                    return dict(json.loads(line))
                if _rss_gib(self.process.pid) > memory:
                    return {"outcome": "MEMORY", "kind": f"over {memory} GiB"}
        return {"outcome": "HANG", "kind": f"over {timeout} s"}

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


def _rss_gib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--memory", type=float, default=2.0, help="GiB of RSS per worker")
    parser.add_argument("--only", default="", help="run only these case numbers (1,5,...)")
    args = parser.parse_args(argv)
    if args.worker:
        worker()
        return 0
    env = dict(os.environ)
    source = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    rng = random.Random(args.seed)
    counts: collections.Counter[str] = collections.Counter()
    failures = []
    with tempfile.TemporaryDirectory(prefix="cytepool-fuzz-") as tmp:
        folder = Path(tmp)
        bases = write_bases(folder)
        runner = Worker(env)
        try:
            for case in range(args.cases):
                base = rng.choice(bases)
                target = folder / f"case{case}{base.suffix}"
                how = mutate(base, target, rng)
                if args.only and str(case) not in args.only.split(","):
                    shutil.rmtree(target) if target.is_dir() else target.unlink()
                    continue
                result = runner.run(target, args.timeout, args.memory)
                counts[
                    f"{result['outcome']} {result['kind'].splitlines()[0] if result['kind'] else ''}".strip()
                ] += 1
                if result["outcome"] not in ("cube", "documented error"):
                    failures.append((f"case {case}: {base.name}", how, result))
                    runner.stop()
                    runner = Worker(env)
                shutil.rmtree(target) if target.is_dir() else target.unlink()
        finally:
            runner.stop()
    print(f"{args.cases} mutated files of {len(bases)} kinds (seed {args.seed}):")
    for outcome, n in counts.most_common():
        print(f"  {n:5d}  {outcome}")
    for base, how, result in failures[:20]:
        print(f"\nFAILURE on {base} ({how}): {result['outcome']} {result['kind']}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
