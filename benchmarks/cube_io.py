"""Benchmark cube files: write_cube / read_cube against zarr-python on the same arrays.

A cube of 12 groups x 48 samples x 30,000 features with int32 "counts" (negative-binomial)
and "detected" layers, for gzip level 4 and zstd level 3 (contenders alternating, wall-clock
and CPU time, the CPU summed over the process's threads). Its features table holds ids of one
width and gene symbols of 2 to 10 characters (their lengths change from row to row, as real
symbols' do: a reader cannot take them in runs of one length):

* write: ``write_cube`` (tables, cells, both layers, digests of every group, atomic rename)
  vs zarr-python writing the two layers with the same chunks and codec;
* verified read: ``read_cube(path)`` + ``to_numpy`` of both layers (every group's digest
  verified) vs an unverified read of the same two layer arrays of the cube file with cytepool's
  own reader (``cytepool.io.zarr.open_array``: read_cube has no switch to skip verification
  yet), target <= 1.15x (issue 16), and vs zarr-python's bare read of the same arrays
  (``zarr.open_array(path / "layers" / name)[...]``);
* selection ("opening is cheap"): ``read_cube(path).select(groups=[one], features=[50
  genes]).profiles(...)`` vs zarr-python's ``open_array`` + ``oindex`` on the same layer array,
  target <= 1.0x (issue 16), with and without opening the file, and the number of chunk files
  opened (counted by wrapping ``os.open``, whose paths relative to an open directory are
  resolved through ``/proc/self/fd``, and ``open``), which must equal the number of chunks
  holding the selection; and vs zarr-python given the names, as a user has them (it reads the
  group and feature ids and finds the positions with pandas before its ``oindex``), no target;
* peak memory of writing, each in a fresh process: extra peak RSS (the peak ``VmHWM``, reset
  through ``/proc/self/clear_refs`` just before the write, minus the RSS then; Linux) and
  tracemalloc's peak, for a cube held in memory and for a cube read lazily from a cube file,
  vs zarr-python writing the arrays from memory.

Usage::

    .venv/bin/python benchmarks/cube_io.py              # 5 repeats
    .venv/bin/python benchmarks/cube_io.py --quick      # a small smoke run (also tests/benchmarks)
"""

from __future__ import annotations

import argparse
import builtins
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _zarr_bench import alternate as alternate_times
from _zarr_bench import describe_fast, directory_bytes, load_average, medians

CODECS = (("gzip", 4), ("zstd", 3))
SHAPE = (12, 48, 30_000)
N_GENES = 50
VERIFIED_VS_UNVERIFIED = 1.15  # issue 16: verification that costs almost nothing
OPEN_SELECT_VS_ZARR = 1.0  # issue 16: opening is cheap


def gene_symbols(n: int, seed: int = 0) -> list[str]:
    """Gene symbols as they come: letters and digits, 2 to 10 characters, the length changing
    from one to the next (a string column whose items are not in runs of one length)."""
    rng = np.random.default_rng(seed + 1)
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))
    return ["".join(rng.choice(letters, int(k))) for k in rng.integers(2, 11, n)]


def make_cube(shape: tuple[int, int, int], seed: int = 0) -> Any:
    """A cube with negative-binomial int32 counts and a detected layer."""
    import pandas as pd

    from cytepool import Cube

    n_groups, n_samples, n_features = shape
    rng = np.random.default_rng(seed)
    gene_mean = np.exp(rng.normal(-0.5, 1.8, size=n_features)).clip(max=5_000)
    cells = rng.integers(20, 400, size=(n_groups, n_samples))
    counts = np.empty(shape, dtype=np.int32)
    detected = np.empty(shape, dtype=np.int32)
    for g in range(n_groups):
        mean = cells[g][:, None] / 100 * gene_mean[None, :]
        counts[g] = rng.negative_binomial(2.0, 2.0 / (2.0 + mean))
        detected[g] = np.minimum(counts[g], cells[g][:, None])
    return Cube(
        {"counts": counts, "detected": detected},
        samples=pd.DataFrame(
            {
                "sample_id": [f"sample{i:02d}" for i in range(n_samples)],
                "donor": [f"donor{i // 4}" for i in range(n_samples)],
            }
        ),
        groups=pd.DataFrame({"group_id": [f"celltype{i:02d}" for i in range(n_groups)]}),
        features=pd.DataFrame(
            {
                "feature_id": [f"ENSG{i:011d}" for i in range(n_features)],
                "symbol": gene_symbols(n_features, seed),
            }
        ),
        cells=cells,
    )


def alternate(
    functions: dict[str, Callable[[], object]], repeats: int
) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds of each function, the order rotating every repeat."""
    return medians(alternate_times(functions, repeats))


def zarr_codec(compression: str, level: int) -> Any:
    import zarr.codecs

    if compression == "gzip":
        return zarr.codecs.GzipCodec(level=level)
    return zarr.codecs.ZstdCodec(level=level, checksum=True)


def zarr_write(cube: Any, path: Path, compression: str, level: int, chunks: tuple) -> None:
    import zarr

    if path.exists():
        shutil.rmtree(path)
    root = zarr.open_group(path, mode="w", zarr_format=3)
    for name in cube.layers:
        data = cube.to_numpy(name)
        array = root.create_array(
            name,
            shape=data.shape,
            chunks=chunks,
            dtype=data.dtype,
            compressors=[zarr_codec(compression, level)],
            fill_value=0,
        )
        array[...] = data


def zarr_read(path: Path, names: list[str]) -> list[np.ndarray]:
    """zarr-python's bare read of the layer arrays of a cube file."""
    import zarr

    return [zarr.open_array(path / "layers" / name, mode="r")[...] for name in names]


def layer_chunks(path: Path) -> tuple[int, ...]:
    """The chunk shape of the cube file's layers, as written."""
    from cytepool.io.zarr import open_array

    return tuple(open_array(path / "layers" / "counts").chunks)


def cube_write(cube: Any, path: Path, compression: str, level: int) -> None:
    from cytepool.io import write_cube

    write_cube(cube, path, compression=compression, level=level, overwrite=True)


def raw_read(path: Path, names: list[str]) -> list[np.ndarray]:
    from cytepool.io.zarr import open_array

    return [np.asarray(open_array(path / "layers" / name)) for name in names]


def cube_read(path: Path) -> list[np.ndarray]:
    from cytepool.io import read_cube

    cube = read_cube(path)
    return [cube.to_numpy(name) for name in cube.layers]


class OpenCounter:
    """Record the paths opened through os.open and builtins.open while active."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __enter__(self) -> OpenCounter:
        self._os_open, self._open = os.open, builtins.open

        def os_open(path: Any, *args: Any, **kwargs: Any) -> int:
            name = os.fsdecode(path)
            if kwargs.get("dir_fd") is not None:  # relative to an open directory (Linux)
                name = os.path.join(os.readlink(f"/proc/self/fd/{kwargs['dir_fd']}"), name)
            self.paths.append(name)
            return self._os_open(path, *args, **kwargs)

        def builtin_open(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, str | bytes | os.PathLike):
                self.paths.append(os.fsdecode(file))
            return self._open(file, *args, **kwargs)

        os.open, builtins.open = os_open, builtin_open  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        os.open, builtins.open = self._os_open, self._open  # type: ignore[assignment]

    def chunks_under(self, directory: Path) -> set[str]:
        prefix = os.fspath(directory / "c") + os.sep
        return {path for path in self.paths if path.startswith(prefix)}


def selection_read(path: Path, group: str, genes: list[str]) -> np.ndarray:
    from cytepool.io import read_cube

    return read_cube(path).select(groups=[group], features=genes).profiles(group)


def zarr_read_by_name(path: Path, group: str, genes: list[str]) -> np.ndarray:
    """What a zarr-python user does to read one group and some genes by name: read the
    group and feature ids (the arrays named by each table's ``_index``), find the positions
    with pandas, then ``oindex`` the layer."""
    import pandas as pd
    import zarr

    root = zarr.open_group(path, mode="r")

    def ids(table: str) -> pd.Index:
        column = root[f"{table}/{root[table].attrs['_index']}"]
        values = column if isinstance(column, zarr.Array) else column["values"]  # nullable
        return pd.Index(values[:])

    position = ids("groups").get_loc(group)
    positions = ids("features").get_indexer(genes)
    if (positions < 0).any():
        raise KeyError("a gene is not in the file")
    return root["layers/counts"].oindex[position, :, positions]


def bench_write_read(
    cube: Any, base: Path, compression: str, level: int, repeats: int
) -> tuple[list[dict[str, Any]], tuple[int, ...]]:
    """Write and read rows, and the layers' chunk shape (as write_cube chose it)."""
    import zarr

    from cytepool.io import read_cube

    ours, theirs = base / f"{compression}.cube.zarr", base / f"{compression}.zarr"
    names = list(cube.layers)
    cube_write(cube, ours, compression, level)
    chunks = layer_chunks(ours)
    writes = alternate(
        {
            "cytepool": lambda: cube_write(cube, ours, compression, level),
            "zarr-python": lambda: zarr_write(cube, theirs, compression, level, chunks),
        },
        repeats,
    )
    reads = alternate(
        {
            "verified": lambda: cube_read(ours),
            "unverified": lambda: raw_read(ours, names),
            "zarr-python": lambda: zarr_read(ours, names),
            "opening": lambda: read_cube(ours),
        },
        repeats,
    )
    parts = verification_parts(raw_read(ours, names), reads)
    theirs_root = zarr.open_group(theirs, mode="r")
    for got, raw, bare, own in zip(
        cube_read(ours),
        raw_read(ours, names),
        zarr_read(ours, names),
        (theirs_root[name][...] for name in names),
        strict=True,
    ):
        for other in (raw, bare, own):
            np.testing.assert_array_equal(got, other)
    if read_cube(ours).fingerprint != cube.fingerprint:
        raise SystemExit("the fingerprint changed")
    size = directory_bytes(ours)
    zsize = sum(directory_bytes(theirs / name) for name in names)
    codec = f"{compression} {level}"
    return [
        {
            "codec": codec,
            "operation": "write: write_cube vs zarr-python writing the layers",
            "ours": writes["cytepool"],
            "theirs": writes["zarr-python"],
            "sizes": (size, zsize),
        },
        {
            "codec": codec,
            "operation": "verified read (read_cube + to_numpy) vs unverified (io.zarr open_array)",
            "parts": parts,
            "ours": reads["verified"],
            "theirs": reads["unverified"],
            "limit": VERIFIED_VS_UNVERIFIED,
        },
        {
            "codec": codec,
            "operation": "verified read (read_cube + to_numpy) vs zarr-python's bare read",
            "ours": reads["verified"],
            "theirs": reads["zarr-python"],
        },
        {
            "codec": codec,
            "operation": "unverified read (io.zarr open_array) vs zarr-python's bare read",
            "ours": reads["unverified"],
            "theirs": reads["zarr-python"],
        },
    ], chunks


def verification_parts(
    layers: list[np.ndarray], reads: dict[str, tuple[float, float]]
) -> dict[str, float]:
    """What the verified read adds to the unverified one, in seconds, and the ratios it allows.

    ``opening``: the wall time of ``read_cube`` alone (attributes, tables and cells read and
    verified, before any layer is read). ``hashing`` and ``checks``: the CPU time of the digest
    of every group (BLAKE3, the digests format 1.2 fixes) and of the value checks of every group
    (``values_fine``), each timed on one thread over the layers in memory. ``bound``: the least
    verified / unverified wall ratio the machine allows, the unverified read's CPU time plus the
    digests spread over every core, against its wall time (no opening, no checks).
    ``checked``: the same with the value checks (the spec asks for them) spread over the cores
    too: the least ratio a verified read allows even if opening took no time.
    ``floor``: ``checked`` plus the opening as measured, which comes before any layer is read:
    the least ratio this opening allows.
    ``expected``: the ratio the verified read reaches if the digests and checks spread over the
    threads as well as the decoding does (the unverified read's CPU / wall) and the opening,
    done before, does not.
    """
    from cytepool.fingerprint import group_digest
    from cytepool.layers import values_fine

    def cpu_of(function: Callable[[np.ndarray], object]) -> float:
        gc.collect()
        start = time.process_time()
        for layer in layers:
            for block in layer:
                function(block)
        return time.process_time() - start

    hashing = cpu_of(lambda block: group_digest(block.dtype, block))
    checks = cpu_of(values_fine)
    wall, cpu = reads["unverified"]
    opening = reads["opening"][0]
    cores = os.cpu_count() or 1
    checked = max(wall, (cpu + hashing + checks) / cores) / wall
    return {
        "opening": opening,
        "hashing": hashing,
        "checks": checks,
        "bound": max(wall, (cpu + hashing) / cores) / wall,
        "checked": checked,
        "floor": checked + opening / wall,
        "expected": 1 + (hashing + checks) / cpu + opening / wall,
    }


def bench_selection(
    cube: Any, base: Path, compression: str, level: int, chunks: tuple[int, ...], repeats: int
) -> list[dict[str, Any]]:
    """Read one group and 50 genes; count the chunk files opened."""
    import zarr

    from cytepool.io import read_cube

    ours = base / f"{compression}.cube.zarr"
    layer = ours / "layers" / "counts"
    n_groups, n_samples, n_features = cube.shape
    position = n_groups // 2
    group = f"celltype{position:02d}"
    genes_at = np.sort(np.random.default_rng(7).choice(n_features, N_GENES, replace=False))
    genes = [f"ENSG{i:011d}" for i in genes_at]
    expected = cube.to_numpy("counts")[position][:, genes_at]
    with OpenCounter() as counter:
        got = selection_read(ours, group, genes)
    np.testing.assert_array_equal(got, expected)
    opened = counter.chunks_under(layer)
    other = {path for path in counter.paths if f"{os.sep}detected{os.sep}c{os.sep}" in path}
    holding = {(s // chunks[1], f // chunks[2]) for s in range(n_samples) for f in genes_at}
    if len(opened) != len(holding) or other:
        raise SystemExit(f"opened {len(opened)} chunk files, expected {len(holding)}")

    def zarr_open_and_read() -> np.ndarray:
        return zarr.open_array(layer, mode="r").oindex[position, :, genes_at]

    def zarr_by_name() -> np.ndarray:
        return zarr_read_by_name(ours, group, genes)

    np.testing.assert_array_equal(zarr_open_and_read(), expected)
    np.testing.assert_array_equal(zarr_by_name(), expected)
    cold = alternate(
        {
            "cytepool": lambda: selection_read(ours, group, genes),
            "zarr-python": zarr_open_and_read,
            "zarr-python, by name": zarr_by_name,
        },
        repeats,
    )
    opened_cube = read_cube(ours)
    zarray = zarr.open_array(layer, mode="r")
    warm = alternate(
        {
            "cytepool": lambda: opened_cube.select(groups=[group], features=genes).profiles(group),
            "zarr-python": lambda: zarray.oindex[position, :, genes_at],
        },
        repeats,
    )
    codec = f"{compression} {level}"
    return [
        {
            "codec": codec,
            "operation": "open + select + read",
            "ours": cold["cytepool"],
            "theirs": cold["zarr-python"],
            "limit": OPEN_SELECT_VS_ZARR,
            "files": (len(opened), len(holding)),
        },
        {
            "codec": codec,
            "operation": "open + select + read; the peer finds the names too",
            "ours": cold["cytepool"],
            "theirs": cold["zarr-python, by name"],
            "files": (len(opened), len(holding)),
        },
        {
            "codec": codec,
            "operation": "select + read, opened",
            "ours": warm["cytepool"],
            "theirs": warm["zarr-python"],
        },
    ]


MEMORY_SCRIPT = """
import json, sys, tracemalloc
from pathlib import Path
sys.path.insert(0, {bench_dir!r})
import numpy as np
import cube_io

def status_kib(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0

kind, source, target = sys.argv[1], sys.argv[2], sys.argv[3]
shape = tuple(json.loads(sys.argv[4]))
if kind == "lazy":
    from cytepool.io import read_cube
    cube = read_cube(source)
else:
    cube = cube_io.make_cube(shape)
    if kind == "zarr-python":
        layers = {{name: cube.to_numpy(name) for name in cube.layers}}
import zarr, pandas, cytepool.io  # imports done before measuring (pandas: the tables)
before = status_kib("VmRSS")
Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
tracemalloc.start()
if kind == "zarr-python":
    root = zarr.open_group(target, mode="w", zarr_format=3)
    for name, data in layers.items():
        array = root.create_array(name, shape=data.shape, chunks=tuple(json.loads(sys.argv[5])),
                                  dtype=data.dtype, compressors=[cube_io.zarr_codec("gzip", 4)],
                                  fill_value=0)
        array[...] = data
else:
    cytepool.io.write_cube(cube, target, compression="gzip", level=4)
_, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
extra = (status_kib("VmHWM") - before) * 1024
print(json.dumps({{"rss_extra": extra, "traced_peak": peak}}))
"""


def memory_of(kind: str, source: Path, target: Path, shape: tuple, chunks: tuple) -> dict:
    if target.exists():
        shutil.rmtree(target)
    script = MEMORY_SCRIPT.format(bench_dir=str(Path(__file__).parent))
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            kind,
            str(source),
            str(target),
            json.dumps(shape),
            json.dumps(chunks),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def rows_table(rows: list[dict[str, Any]], extra: str = "") -> str:
    """A markdown table: wall and CPU times, their ratios and the target where there is one."""
    lines = [
        "| codec | operation | cytepool wall / CPU | peer wall / CPU | ratio | CPU ratio "
        f"| target | met |{extra}",
        "|---|---|---:|---:|---:|---:|---|---|" + "---:|" * extra.count("|"),
    ]
    for r in rows:
        (ours, ours_cpu), (theirs, theirs_cpu) = r["ours"], r["theirs"]
        limit = r.get("limit")
        target, met = (
            ("", "")
            if limit is None
            else (f"<= {limit}x", "yes" if ours <= limit * theirs else "no")
        )
        cells = ""
        if "sizes" in r:
            cells = " " + " | ".join(mib(n) for n in r["sizes"]) + " |"
        elif "files" in r:
            cells = " " + " | ".join(str(n) for n in r["files"]) + " |"
        elif extra:
            cells = " |" * extra.count("|")
        lines.append(
            f"| {r['codec']} | {r['operation']} | {ms(ours)} / {ms(ours_cpu)} "
            f"| {ms(theirs)} / {ms(theirs_cpu)} | {ours / theirs:.2f} | {ours_cpu / theirs_cpu:.2f} "
            f"| {target} | {met} |{cells}"
        )
    return "\n".join(lines)


def parts_table(rows: list[dict[str, Any]]) -> str:
    """What the verified read adds to the unverified one, and the ratios that allows."""
    lines = [
        "| codec | verified − unverified wall / CPU | opening (wall) | digests (CPU) "
        "| value checks (CPU) | lower bound | floor, no opening | floor with opening | expected "
        "| measured |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "parts" not in r:
            continue
        parts, ours, theirs = r["parts"], r["ours"], r["theirs"]
        lines.append(
            f"| {r['codec']} | {ms(ours[0] - theirs[0])} / {ms(ours[1] - theirs[1])} "
            f"| {ms(parts['opening'])} | {ms(parts['hashing'])} | {ms(parts['checks'])} "
            f"| {parts['bound']:.2f} | {parts['checked']:.2f} | {parts['floor']:.2f} "
            f"| {parts['expected']:.2f} "
            f"| {ours[0] / theirs[0]:.2f} |"
        )
    return "\n".join(lines)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the stores")
    args = parser.parse_args(argv)
    shape = (3, 8, 2000) if args.quick else SHAPE
    repeats = 2 if args.quick else args.repeats

    cube = make_cube(shape)
    n_groups, n_samples, n_features = shape
    group_bytes = n_samples * n_features * 4

    rows: list[dict[str, Any]] = []
    selection_rows: list[dict[str, Any]] = []
    loads = [load_average()]
    if args.dir is not None:  # made if it is not there yet
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        base = Path(directory)
        for compression, level in CODECS:
            found, chunks = bench_write_read(cube, base, compression, level, repeats)
            rows += found
            selection_rows += bench_selection(cube, base, compression, level, chunks, repeats * 4)
            loads.append(load_average())

        lazy_source = base / "gzip.cube.zarr"
        memory = {
            "write_cube, cube in memory": memory_of(
                "memory", lazy_source, base / "m1.cube.zarr", shape, chunks
            ),
            "write_cube, cube read lazily from a cube file": memory_of(
                "lazy", lazy_source, base / "m2.cube.zarr", shape, chunks
            ),
            "zarr-python, arrays in memory": memory_of(
                "zarr-python", lazy_source, base / "m3.zarr", shape, chunks
            ),
        }

    print(f"## Cube files: {n_groups} groups x {n_samples} samples x {n_features:,} features\n")
    print(
        f"int32 layers counts + detected ({mib(2 * np.prod(shape) * 4)} in memory), chunks "
        f"{chunks}; medians of {repeats} runs ({4 * repeats} for selections), contenders "
        f"alternating; {platform.python_version()}, {platform.machine()}, {os.cpu_count()} "
        f"CPUs, {describe_fast()}, "
        f"1-minute load average {min(loads):.1f}–{max(loads):.1f}, warm page cache; CPU "
        "time summed over the process's threads.\n"
    )
    print(rows_table(rows, " cube file | zarr arrays |"))
    print()
    print(parts_table(rows))
    print(
        "\nwrite_cube also writes the tables and cells, hashes every group and renames the store "
        "into place (zarr-python writes the two layers into its own store); read_cube + "
        "to_numpy also reads and verifies the tables and cells, and checks the values and the "
        "digest of every group. The unverified read reads the same two layer arrays of the "
        "cube file with cytepool.io.zarr.open_array (cytepool has no switch to skip "
        "verification in read_cube yet), zarr-python's bare read with zarr.open_array(...)[...]. "
        "What verification adds: opening (read_cube alone: attributes, tables and cells read "
        "and verified, before a layer is read), the BLAKE3 digest of every group and the checks "
        "of its values (CPU time, each timed on one thread over the layers in memory). The lower "
        "bound: the unverified read's CPU time plus the digests, spread over every core, "
        "against the unverified read's wall time; a ratio below it would need a digest other "
        "than the one the format fixes. Floor, no opening: the same with the value checks (the "
        "spec asks for them) spread over the cores too, the least ratio even an opening that "
        "took no time would allow. Floor with opening: that plus the opening's wall time (it "
        "comes before any layer is read) over the unverified read's: the least ratio this "
        "opening allows. "
        "Expected: 1 + (digests + checks) / the unverified "
        "read's CPU time + opening / its wall time, the ratio the verified read reaches when "
        "its digests and checks spread over the threads as well as the decoding does.\n"
    )
    print(f"### Selection: one group, {N_GENES} random genes, layer counts\n")
    print(
        "cytepool: `read_cube(path)` (attributes, tables and cells read and verified), "
        "`.select(groups=[g], features=genes).profiles(g)`; zarr-python: "
        "`zarr.open_array(path / 'layers' / 'counts')` and `oindex[g, :, positions]` on the same "
        "array, given the group's and the genes' positions. \"The peer finds the names too\": "
        "zarr-python also reads the group and feature ids (the arrays the tables' `_index` "
        "names) and finds the positions with pandas, as a user who has names must. Chunk files "
        "opened by the first cytepool read, counted by wrapping `os.open` and `open`.\n"
    )
    print(rows_table(selection_rows, " chunk files opened | chunks holding the selection |"))
    print(f"\n### Peak memory of writing (gzip 4), one group of one layer = {mib(group_bytes)}\n")
    print("| writer | extra peak RSS | tracemalloc peak | in groups |")
    print("|---|---:|---:|---:|")
    for name, numbers in memory.items():
        print(
            f"| {name} | {mib(numbers['rss_extra'])} | {mib(numbers['traced_peak'])} "
            f"| {numbers['traced_peak'] / group_bytes:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
