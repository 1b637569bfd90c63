"""Fuzz: pool mutated .h5ad files and AnnData Zarr stores; only documented errors may come out.

Writes small cells files (CSR, CSC and dense X; .h5ad chunked and gzip, Zarr v2 blosc, Zarr v3
sharded where anndata writes it; an .h5mu of the CSR cells as one modality, behind MuData's user
block), then makes ``--cases`` mutated copies: bytes flipped, zeroed or cut off, half of the
time anywhere in an HDF5 file and half of the time in the object headers or stored values of its
X, obs or var (a modality's); in a store, in one file of X, obs, var or the rest (a chunk, a
``.zarray``, ``zarr.json``, ``.zattrs``), numbers in metadata changed. Each copy is pooled with
``from_anndata(path)`` (``from_mudata_cells(path)``) in a worker process; the outcome must be a
cube, a
:class:`~cytepool.errors.CytepoolError` or an ``OSError``. A case that takes longer than
``--timeout`` seconds (a hang) or whose worker passes ``--memory`` GiB of resident memory is a
failure too; the worker is then restarted (a worker pools an intact file before its first case,
so that imports and compilation are not timed). Prints a count per outcome, what was mutated,
the slowest case and the largest peak memory of a worker; exits 1 on any failure
(``--keep DIR`` keeps the failing files).

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
MODALITY = "rna"
"""The one modality of the .h5mu file."""


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
            if layout == "csr":
                bases.append(_write_h5mu(adata, folder / "csr.h5mu"))
    return bases


def _write_h5mu(adata: Any, path: Path) -> Path:
    """``adata`` as the one modality of a MuData file (which has a user block of 512 bytes)."""
    import mudata

    mudata.MuData({MODALITY: adata}).write_h5mu(path)
    return path


def _flip(data: bytearray, rng: random.Random, low: int, high: int) -> str:
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(low, high)] = rng.randrange(256)
    return "bytes changed"


def _zero(data: bytearray, rng: random.Random, low: int, high: int) -> str:
    start = rng.randrange(low, high)
    data[start : start + rng.randint(1, 64)] = bytes(min(64, len(data) - start))
    return "bytes zeroed"


def _cut(data: bytearray, rng: random.Random, low: int, high: int) -> str:
    del data[rng.randrange(low, high) :]
    return "cut short"


def _numbers(data: bytearray, rng: random.Random) -> str:
    text = data.decode("utf-8", "replace")
    numbers = list(re.finditer(r"\d+", text))
    if not numbers:
        return _flip(data, rng, 0, len(data))
    found = rng.choice(numbers)
    value = rng.choice(["0", "-1", str(10**15), str(int(found.group()) * 2 + 1), "1e300"])
    data[:] = (text[: found.start()] + value + text[found.end() :]).encode()
    return "a number changed"


MUTATIONS = (_flip, _zero, _cut)
ELEMENTS = ("X", "obs", "var")
"""The parts of a file a mutation is aimed at (or, as often, anywhere in the file)."""


def mutate(base: Path, target: Path, rng: random.Random) -> tuple[str, str]:
    """A mutated copy of ``base`` at ``target``; what was done, and the element it hit
    (``X``, ``obs``, ``var`` or ``other``)."""
    if base.is_dir():
        shutil.copytree(base, target)
        files = sorted(p for p in target.rglob("*") if p.is_file() and p.stat().st_size)
        element = rng.choice((*ELEMENTS, "X", "other"))
        chosen = [p for p in files if _element(p.relative_to(target).parts) == element]
        victim = rng.choice(chosen or files)
        data = bytearray(victim.read_bytes())
        metadata = victim.name in (".zarray", "zarr.json", ".zattrs", ".zmetadata")
        if metadata and rng.random() < 0.7:
            how = _numbers(data, rng)
        else:
            how = rng.choice(MUTATIONS)(data, rng, 0, len(data))
        victim.write_bytes(bytes(data))
        parts = victim.relative_to(target).parts
        return f"{'/'.join(parts)}: {how}", _element(parts)
    data = bytearray(base.read_bytes())
    regions = _h5_regions(base)
    element = rng.choice(ELEMENTS)
    if rng.random() < 0.5 and regions[element]:
        low, high = rng.choice(regions[element])
    else:
        low, high = 0, len(data)
        element = "anywhere"
    how = rng.choice(MUTATIONS)(data, rng, low, high)
    target.write_bytes(bytes(data))
    return f"{how} in bytes {low}-{high}", element


def _element(parts: tuple[str, ...]) -> str:
    """Which element a file of a store belongs to: X, obs, var or other."""
    return parts[0] if len(parts) > 1 and parts[0] in ELEMENTS else "other"


_REGIONS: dict[Path, dict[str, list[tuple[int, int]]]] = {}


def _h5_regions(path: Path) -> dict[str, list[tuple[int, int]]]:
    """Byte ranges of an .h5ad file's X, obs and var: object headers (their first 256 bytes)
    and stored values (contiguous data, chunks); the global heap is not in any."""
    if path in _REGIONS:
        return _REGIONS[path]
    import h5py

    regions: dict[str, list[tuple[int, int]]] = {element: [] for element in ELEMENTS}
    size = path.stat().st_size
    prefix = f"mod/{MODALITY}/" if path.suffix == ".h5mu" else ""
    with h5py.File(path, "r") as file:
        base = file.id.get_create_plist().get_userblock()  # addresses count from its end
        for element in ELEMENTS:
            found = regions[element]

            def visit(name: str, node: Any, found: list[tuple[int, int]] = found) -> None:
                del name
                start = base + h5py.h5o.get_info(node.id).addr
                found.append((start, min(size, start + 256)))
                if isinstance(node, h5py.Dataset):
                    offset = node.id.get_offset()
                    if offset is not None:
                        found.append((offset, offset + node.id.get_storage_size()))
                    elif node.chunks is not None:
                        for k in range(node.id.get_num_chunks()):
                            info = node.id.get_chunk_info(k)
                            found.append((info.byte_offset, info.byte_offset + info.size))

            visit(element, file[prefix + element])
            if isinstance(file[prefix + element], h5py.Group):
                file[prefix + element].visititems(visit)
    _REGIONS[path] = {e: [(a, b) for a, b in r if a < b] for e, r in regions.items()}
    return _REGIONS[path]


# --------------------------------------------------------------------------- worker


def worker() -> None:
    """Pool each path read from stdin; write one JSON line per case: outcome, error type and
    the worker's peak resident memory so far.

    The first line names an intact file, pooled before the cases so that the imports and the
    compilation of the kernels are not timed as part of the first case; its line says
    ``ready``.
    """
    warnings.simplefilter("ignore")
    import faulthandler
    import resource

    from cytepool.errors import CytepoolError
    from cytepool.io.anndata import from_anndata, from_mudata_cells

    layers = ("counts", "detected", "squares")
    for line in sys.stdin:
        path = Path(line.strip())
        faulthandler.dump_traceback_later(float(os.environ.get("FUZZ_DUMP_AFTER", "50")))
        try:
            if path.suffix == ".h5mu":
                from_mudata_cells(path, **KEYS, layers=layers, progress=False)
            else:
                from_anndata(path, **KEYS, layers=layers, progress=False)
            outcome, kind = "cube", ""
        except (CytepoolError, OSError) as error:
            outcome, kind = "documented error", type(error).__name__
        except BaseException as error:  # what the fuzz looks for
            import traceback

            outcome, kind = "UNDOCUMENTED", f"{type(error).__name__}: {error}"
            kind += "\n" + traceback.format_exc()
        faulthandler.cancel_dump_traceback_later()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print(json.dumps({"outcome": outcome, "kind": kind, "peak_mib": peak}), flush=True)


class Worker:
    """A worker process, ready once it has pooled ``warm`` (an intact file)."""

    def __init__(self, env: dict[str, str], warm: Path):
        command = [sys.executable, __file__, "--worker"]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1
        )
        ready = self.run(warm, timeout=600.0, memory=float("inf"))
        if ready["outcome"] != "cube":
            msg = f"the worker could not pool the intact file {warm}: {ready}"
            raise RuntimeError(msg)

    def run(self, path: Path, timeout: float, memory: float) -> dict[str, Any]:
        """Pool ``path``; the outcome, with ``seconds`` taken."""
        import selectors

        assert self.process.stdin is not None
        assert self.process.stdout is not None
        started = time.monotonic()
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        deadline = started + timeout
        result = {"outcome": "HANG", "kind": f"over {timeout} s"}
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if selector.select(0.05):
                    line = self.process.stdout.readline()
                    if not line:
                        result = {"outcome": "CRASHED", "kind": f"exit {self.process.wait()}"}
                    else:
                        result = dict(json.loads(line))
                    break
                if _rss_gib(self.process.pid) > memory:
                    result = {"outcome": "MEMORY", "kind": f"over {memory} GiB"}
                    break
        return result | {"seconds": time.monotonic() - started}

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
    parser.add_argument("--keep", default="", help="copy failing cases into this folder")
    args = parser.parse_args(argv)
    if args.worker:
        worker()
        return 0
    env = dict(os.environ)
    source = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    rng = random.Random(args.seed)
    counts: collections.Counter[str] = collections.Counter()
    elements: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    failures = []
    slowest, peak = (0.0, ""), 0.0
    with tempfile.TemporaryDirectory(prefix="cytepool-fuzz-") as tmp:
        folder = Path(tmp)
        bases = write_bases(folder)
        runner = Worker(env, bases[0])
        try:
            for case in range(args.cases):
                base = rng.choice(bases)
                target = folder / f"case{case}{base.suffix}"
                how, element = mutate(base, target, rng)
                if args.only and str(case) not in args.only.split(","):
                    shutil.rmtree(target) if target.is_dir() else target.unlink()
                    continue
                kinds["Zarr" if base.is_dir() else base.suffix] += 1
                elements[element] += 1
                result = runner.run(target, args.timeout, args.memory)
                first = result["kind"].splitlines()[0] if result["kind"] else ""
                counts[f"{result['outcome']} {first}".strip()] += 1
                if result["seconds"] > slowest[0]:
                    slowest = (result["seconds"], f"case {case}: {base.name} ({how})")
                peak = max(peak, result.get("peak_mib", 0.0))
                if result["outcome"] not in ("cube", "documented error"):
                    failures.append((f"case {case}: {base.name}", how, result))
                    if args.keep:
                        keep = Path(args.keep) / target.name
                        keep.parent.mkdir(parents=True, exist_ok=True)
                        shutil.rmtree(keep, ignore_errors=True)
                        (shutil.copytree if target.is_dir() else shutil.copy)(target, keep)
                    runner.stop()
                    runner = Worker(env, bases[0])
                shutil.rmtree(target) if target.is_dir() else target.unlink()
        finally:
            runner.stop()
    _report(args, bases, counts, (kinds, elements), slowest, peak)
    for base, how, result in failures[:20]:
        print(f"\nFAILURE on {base} ({how}): {result['outcome']} {result['kind']}")
    return 1 if failures else 0


def _report(
    args: argparse.Namespace,
    bases: list[Path],
    counts: collections.Counter[str],
    mutated: tuple[collections.Counter[str], collections.Counter[str]],
    slowest: tuple[float, str],
    peak: float,
) -> None:
    kinds, elements = mutated
    print(f"{args.cases} mutated files of {len(bases)} kinds (seed {args.seed}):")
    for outcome, n in counts.most_common():
        print(f"  {n:5d}  {outcome}")
    print("mutated: " + ", ".join(f"{n} {kind}" for kind, n in kinds.most_common()))
    print("aimed at: " + ", ".join(f"{n} {element}" for element, n in elements.most_common()))
    print(f"slowest case: {slowest[0]:.2f} s ({slowest[1]})")
    print(f"largest peak resident memory of a worker: {peak:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
