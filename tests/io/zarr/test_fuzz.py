"""Fuzzing the store layer with corrupted stores: Zarr arrays, tables and cube files.

Hypothesis mutates copies of valid stores (flipped bytes, truncations, appended bytes and deleted
files in chunk and shard files and in zarr.json, edited JSON fields and values, repeated keys and
NaN tokens) and reads them: arrays with open_array and reads of parts and of the whole, tables
with read_table (pandas and polars), cube files with read_cube, a read of every layer and its
tables' frames (a string column verified at open is parsed and joined only then). A read
may only return a result or raise one of the documented exceptions for a file's content:
``cytepool.errors.FormatError`` (UnsupportedFeatureError and StoredTypeError are FormatErrors),
``FileNotFoundError``, and ``StoreChangedError`` when the store changed after it was opened.
Exactly these classes: any other exception fails the test, and so does a peak above 256 MiB of
Python's allocations (tracemalloc). Each case has a deadline of five seconds, which catches a
hang; the target of one second per read is checked by ``benchmarks/fuzz_stores.py``.

The stores cover gzip, zstd and uncompressed chunks, strings (vlen-utf8; of lengths that change
from one item to the next, uncompressed, in "symbols"), datetimes, sharded
stores written by zarr-python (index at the end and at the start), tables of every column
encoding (written by cytepool and by anndata) and cube files with and without a normalization.

The suite runs CYTEPOOL_FUZZ_EXAMPLES (40 by default) mutated stores for each of its 17 stores;
``benchmarks/fuzz_stores.py`` runs 320 of each (5,440 in all) and tabulates the outcomes from the
report file that CYTEPOOL_FUZZ_REPORT names.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cytepool.errors import FormatError, StoreChangedError
from cytepool.io import read_cube, read_table, write_cube, write_table
from cytepool.io.zarr import open_array, write_array

# CYTEPOOL_FUZZ_EXAMPLES=5000 runs a longer campaign locally.
# The deadline catches a hang or a runaway read even on a loaded machine; the report of
# benchmarks/fuzz_stores.py holds each read's own time, where the 1 s target is checked.
FUZZ = settings(
    max_examples=int(os.environ.get("CYTEPOOL_FUZZ_EXAMPLES", "40")),
    deadline=5000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _numeric(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.negative_binomial(1, 0.3, size=shape).astype(dtype)
    values[(slice(0, 2),) * len(shape)] = 0  # an all-zero chunk that is not stored
    return values


def _write_cytepool_stores(root: Path) -> None:
    write_array(root / "gzip", _numeric((5, 6), "float32", 1), chunks=(2, 4), compression="gzip")
    write_array(
        root / "zstd", _numeric((3, 4, 5), "int16", 2), chunks=(2, 3, 2), compression="zstd"
    )
    write_array(
        root / "none",
        _numeric((7,), "complex64", 3),
        chunks=(3,),
        compression=None,
        attributes={"a": [1, "é"]},
        dimension_names=["x"],
    )
    write_array(root / "bool", _numeric((9,), "bool", 4), chunks=(4,), compression=None)
    strings = np.array(["", "a", "é€😀", "long" * 5, "x", "", "ß", "z"], dtype=object)
    write_array(root / "strings", strings.reshape(2, 4), chunks=(2, 3), compression="zstd")
    rng = np.random.default_rng(8)
    symbols = ["".join(rng.choice(list("ABCDEFGHé0123"), k)) for k in rng.integers(0, 12, 300)]
    symbols[100], symbols[250] = "x" * 256, "a\x00b"  # a length's low byte 0; a NUL
    write_array(  # uncompressed: a mutation lands in the length fields the decoder leaps over
        root / "symbols", np.array(symbols, dtype=object), chunks=(180,), compression=None
    )
    write_array(root / "scalar", np.float64(2.5), chunks=(), compression="gzip")
    dates = np.array(["2020-01-01", "NaT", "1970-01-01", "2262-04-11"], dtype="M8[s]")
    write_array(root / "datetime", dates, chunks=(3,), compression="gzip")


def _write_zarr_python_stores(root: Path) -> None:
    try:
        import zarr
        import zarr.codecs as codecs
    except ImportError:  # the zarr-python cases skip themselves
        return
    zarr.create_array(
        root / "sharded",
        data=_numeric((7, 5), "float64", 5),
        chunks=(2, 2),
        shards=(4, 4),
        compressors=codecs.ZstdCodec(level=1),
    )
    sharding = codecs.ShardingCodec(
        chunk_shape=(2,),
        codecs=[codecs.BytesCodec(endian="big"), codecs.GzipCodec(level=1)],
        index_location="start",
    )
    zarr.create_array(
        root / "sharded_start",
        shape=(11,),
        chunks=(6,),
        dtype="int32",
        serializer=sharding,
        compressors=None,
        filters=None,
    )[...] = _numeric((11,), "int32", 6)
    zarr.create_array(
        root / "sharded_strings",
        data=np.array(["a", "bé", "", "x" * 9, "€"] * 3, dtype=np.dtypes.StringDType()),
        chunks=(2,),
        shards=(6,),
    )
    zarr.create_array(
        root / "zarr_python_v2_keys",
        data=_numeric((4, 5), "uint16", 7),
        chunks=(3, 2),
        compressors=codecs.GzipCodec(level=6),
        chunk_key_encoding={"name": "v2", "separator": "."},
        fill_value=3,
    )


def _write_tables(root: Path) -> None:
    import pandas as pd

    n = 5
    frame = pd.DataFrame(
        {
            "n": np.arange(n, dtype=np.int64),
            "x": [0.5, np.nan, 2.0, 3.5, -1.0],
            "s": ["a", "bé", "", "x" * 20, "z"],
            "c": pd.Categorical(["u", "v", None, "u", "w"]),
            "i": pd.array([1, None, 3, 4, 5], dtype="Int64"),
            "b": pd.array([True, None, False, True, False], dtype="boolean"),
            "ns": pd.array(["p", None, "q", "r", "s"], dtype="string"),
            "t": pd.to_datetime(["2020-01-01", None, "1970-01-01", "2000-02-29", "2262-04-11"]),
            "tz": pd.to_datetime(["2020-01-01"] * n).tz_localize("Europe/Paris"),
            "f": pd.array([0.25, None, 1.0, 2.0, 3.0], dtype="Float64"),
        },
        index=pd.Index([f"r{i}" for i in range(n)], name="id"),
    )
    write_table(frame, root / "table", chunks=2, compression="gzip")
    write_table(frame.reset_index(drop=True), root / "table_zstd", compression="zstd")
    try:
        import anndata
        import zarr
    except ImportError:  # the anndata case skips itself
        return
    group = zarr.open_group(root / "anndata_root", mode="w")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # anndata's note on sharding defaults
        anndata.io.write_elem(group, "table", frame.drop(columns=["tz", "f", "t", "ns"]))
    (root / "anndata_root" / "table").rename(root / "table_anndata")
    shutil.rmtree(root / "anndata_root")


def _write_cubes(root: Path) -> None:
    import pandas as pd

    from cytepool import Cube, Normalization

    rng = np.random.default_rng(8)
    counts = rng.integers(1, 40, size=(3, 4, 5)).astype(np.int32)
    cube = Cube(
        {"counts": counts, "scaled": counts.astype(np.float32) / 2},
        samples=pd.DataFrame(
            {
                "sample_id": [f"s{i}" for i in range(4)],
                "age": [30, 31, 32, 33],
                "donor": ["d1", None, "dé", "d1"],  # strings verified as stored, used later
                "visit": pd.Categorical([2, 1, None, 2]),  # numbers by their codes
                "seen": pd.to_datetime(["2020-01-01", None, "1960-05-01", "2020-01-02"]).as_unit(
                    "s"
                ),
                "day": pd.array(  # dates by their days, as pyarrow dates in the frame
                    [date(2020, 1, 1), None, date(1960, 5, 1), date(1, 1, 1)],
                    dtype="date32[pyarrow]",
                ),
            }
        ),
        groups=pd.DataFrame({"group_id": ["B", "T", "NK"]}),
        features=pd.DataFrame({"feature_id": [f"g{i}" for i in range(5)]}),
        cells=rng.integers(1, 9, size=(3, 4)),
        normalization=Normalization("size_factors", rng.uniform(0.5, 2, size=(3, 4))),
        metadata={"study": "fuzz"},
    )
    write_cube(cube, root / "cube", compression="gzip")
    plain = Cube(
        {"counts": counts},
        samples=cube.samples,
        groups=cube.groups,
        features=cube.features,
        cells=cube.cells,
    )
    write_cube(plain, root / "cube_zstd", compression="zstd")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz-stores")
    _write_cytepool_stores(root)
    _write_zarr_python_stores(root)
    _write_tables(root)
    _write_cubes(root)
    for store in root.iterdir():  # every store reads before it is mutated
        READS[_kind(store.name)](store)
    return root


CYTEPOOL_STORES = ["gzip", "zstd", "none", "bool", "strings", "symbols", "scalar", "datetime"]
ZARR_PYTHON_STORES = [
    pytest.param(name, marks=pytest.mark.interop)
    for name in ["sharded", "sharded_start", "sharded_strings", "zarr_python_v2_keys"]
]
TABLE_STORES = ["table", "table_zstd", pytest.param("table_anndata", marks=pytest.mark.interop)]
CUBE_STORES = ["cube", "cube_zstd"]


def _kind(name: str) -> str:
    return name.split("_")[0] if name.startswith(("table", "cube")) else "array"


def _store(stores: Path, name: str) -> Path:
    if not (stores / name).exists():
        pytest.skip(f"{name} is written by zarr-python, which is not installed")
    return stores / name


# ---------------------------------------------------------------------------------------------
# Mutations

JSON_VALUES = (
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            1,
            -1,
            2,
            3,
            7,
            1000,
            2**31,
            2**53 + 1,
            2**63,
            2**64,
            -(2**63) - 1,
            10**30,
            0.5,
            -0.0,
            1e308,
            "",
            "little",
            "big",
            "gzip",
            "zstd",
            "bytes",
            "crc32c",
            "vlen-utf8",
            "sharding_indexed",
            "float32",
            "int8",
            "bool",
            "string",
            "numpy.datetime64",
            "NaN",
            "Infinity",
            "-Infinity",
            "0x7fc00001",
            "0x",
            "c",
            "/",
            ".",
            "v2",
            "default",
            "regular",
            "start",
            "end",
            "array",
            "group",
            [],
            [0],
            [1, 1],
            [2**31, 2**31],
            [1.0, 0.0],
            {},
            {"must_understand": False},
            {"must_understand": True},
            {"name": "gzip", "configuration": {"level": 1}},
            {"name": "zstd", "configuration": {"level": 1, "checksum": False}},
            {"name": "bytes", "configuration": {"endian": "big"}},
        ]
    )
    | st.integers(-3, 40)
    | st.text(max_size=3)
)


def _json_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    paths = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            paths += _json_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            paths += _json_paths(value, (*prefix, i))
    return paths


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        node = node[part]
    return node


@st.composite
def json_edit(draw: st.DrawFn, text: str) -> bytes:
    document = json.loads(text)
    paths = _json_paths(document)
    path = draw(st.sampled_from(paths[1:]), label="json path")
    parent, last = _get(document, path[:-1]), path[-1]
    action = draw(st.sampled_from(["replace", "replace", "delete", "add", "swap"]))
    if action == "replace":
        parent[last] = draw(JSON_VALUES, label="value")
    elif action == "delete":
        del parent[last]
    elif action == "add":
        target = parent if isinstance(parent, dict) else _get(document, path[:-2] or ())
        if isinstance(target, dict):
            target[draw(st.sampled_from(["extra", "name", "must_understand"]))] = draw(JSON_VALUES)
        else:
            parent.insert(last, draw(JSON_VALUES))
    elif isinstance(parent, list) and len(parent) > 1:
        parent[0], parent[-1] = parent[-1], parent[0]
    else:
        parent[last] = [parent[last]]
    return json.dumps(document, indent=draw(st.sampled_from([None, 2]))).encode()


@st.composite
def raw_json_edit(draw: st.DrawFn, text: str) -> bytes:
    kind = draw(st.sampled_from(["duplicate", "nan", "infinity", "bom", "utf16", "trailing"]))
    if kind == "duplicate":
        key = draw(st.sampled_from(["zarr_format", "node_type", "shape", "fill_value"]))
        value = json.dumps(json.loads(text).get(key))
        return text.replace("{", "{" + f'"{key}": {value}, ', 1).encode()
    if kind in ("nan", "infinity"):
        token = "NaN" if kind == "nan" else "-Infinity"
        document = json.loads(text)
        document["fill_value"] = "@TOKEN@"
        return json.dumps(document).replace('"@TOKEN@"', token).encode()
    if kind == "bom":
        return b"\xef\xbb\xbf" + text.encode()
    if kind == "utf16":
        return text.encode("utf-16")
    return (text + draw(st.sampled_from(["{}", "x", "\x00", " ]"]))).encode()


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), bit by bit: shard indexes are small."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _zstd() -> Any:
    try:
        from compression import zstd
    except ImportError:
        from backports import zstd
    return zstd


def _array_of(store: Path, name: str) -> Path:
    """The array directory that holds the chunk file ``name``."""
    path = (store / name).parent
    while path != store and not (path / "zarr.json").is_file():
        path = path.parent
    return path


def _codec_names(array: Path) -> list[str]:
    document = json.loads((array / "zarr.json").read_text())
    return [codec["name"] for codec in document.get("codecs", [{"name": "bytes"}])]


@st.composite
def shard_index_edit(draw: st.DrawFn, store: Path, content: bytes) -> bytes:
    """Change one entry of a shard's index and give the index a valid CRC-32C again."""
    metadata = json.loads((store / "zarr.json").read_text())
    codec = metadata["codecs"][0]["configuration"]
    outer = metadata["chunk_grid"]["configuration"]["chunk_shape"]
    n = int(np.prod([s // c for s, c in zip(outer, codec["chunk_shape"], strict=True)]))
    size = 16 * n + 4
    at_end = codec.get("index_location", "end") == "end"
    index = content[-size:] if at_end else content[:size]
    if len(content) < size:
        return content
    entries = np.frombuffer(index[:-4], dtype="<u8").copy()
    i = draw(st.integers(0, 2 * n - 1), label="index entry")
    entries[i] = draw(
        st.sampled_from([0, 1, 2**63, 2**64 - 1, len(content), len(content) - 1])
        | st.integers(0, len(content) + 8)
        | st.sampled_from([int(e) for e in entries]),
        label="index value",
    )
    body = entries.tobytes()
    index = body + _crc32c(body).to_bytes(4, "little")
    return content[:-size] + index if at_end else index + content[size:]


@st.composite
def payload_edit(draw: st.DrawFn, names: list[str], content: bytes) -> bytes:
    """Decode a chunk, change the decoded bytes (counts, lengths, UTF-8, bools), encode again."""
    zstd = _zstd()
    decoded = content
    for name in reversed(names[1:]):
        decoded = gzip.decompress(decoded) if name == "gzip" else zstd.decompress(decoded)
    data = bytearray(decoded)
    kind = draw(st.sampled_from(["flip", "u32", "truncate", "append", "byte"]))
    if kind == "flip" and data:
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    elif kind == "u32" and len(data) >= 4:
        at = draw(st.integers(0, len(data) - 4))
        value = draw(st.sampled_from([0, 1, 2, 2**31, 2**32 - 1]) | st.integers(0, 64))
        data[at : at + 4] = value.to_bytes(4, "little")
    elif kind == "truncate":
        del data[draw(st.integers(0, max(len(data) - 1, 0))) :]
    elif kind == "byte" and data:
        data[draw(st.integers(0, len(data) - 1))] = draw(st.sampled_from([2, 0x80, 0xC0, 0xFF]))
    else:
        data += draw(st.binary(min_size=1, max_size=8))
    encoded = bytes(data)
    for name in names[1:]:
        encoded = gzip.compress(encoded) if name == "gzip" else zstd.compress(encoded)
    return encoded


@st.composite
def mutations(draw: st.DrawFn, store: Path) -> tuple[str, bytes | None]:
    files = sorted(p.relative_to(store).as_posix() for p in store.rglob("*") if p.is_file())
    name = draw(st.just("zarr.json") | st.sampled_from(files), label="file")
    content = (store / name).read_bytes()
    kinds = ["flip", "truncate", "append", "delete"]
    array = _array_of(store, name)
    codecs = _codec_names(array)
    if name.endswith("zarr.json"):
        kinds += ["json", "json", "json", "raw json"]
    elif codecs[0] == "sharding_indexed":
        kinds += ["shard index", "shard index"]
    else:
        kinds += ["payload", "payload"]
    kind = draw(st.sampled_from(kinds), label="mutation")
    if kind == "delete":
        return name, None
    if kind == "shard index":
        return name, draw(shard_index_edit(array, content))
    if kind == "payload":
        return name, draw(payload_edit(codecs, content))
    if kind == "flip" and content:
        data = bytearray(content)
        for _ in range(draw(st.integers(1, 3))):
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        return name, bytes(data)
    if kind == "truncate":
        return name, content[: draw(st.integers(0, max(len(content) - 1, 0)))]
    if kind == "json":
        return name, draw(json_edit(content.decode()))
    if kind == "raw json":
        return name, draw(raw_json_edit(content.decode()))
    return name, content + draw(st.binary(min_size=1, max_size=64) | st.just(content))


# ---------------------------------------------------------------------------------------------
# Reading with only documented outcomes


@contextmanager
def copy_of(store: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="cytepool-fuzz-") as name:
        target = Path(name) / store.name
        shutil.copytree(store, target)
        yield target


def _apply(store: Path, name: str, content: bytes | None, *, replace: bool = False) -> None:
    path = store / name
    if content is None:
        path.unlink()
    elif replace:  # a new file (new inode) renamed over the old one
        tmp = path.with_name(path.name + ".new")
        tmp.write_bytes(content)
        os.replace(tmp, path)
    else:
        path.write_bytes(content)


def _reads(array: Any) -> None:
    """Read the whole array when that is cheap, and always a corner and an oindex selection."""
    shape = array.shape
    assert isinstance(shape, tuple)
    assert all(isinstance(n, int) and n >= 0 for n in shape)
    size = 1
    n_chunks = 1
    for n, c in zip(shape, array.chunks, strict=True):
        size *= n
        n_chunks *= -(-n // c)
    if size <= 100_000 and n_chunks <= 1_000:
        whole = np.asarray(array)
        assert whole.shape == shape
        assert whole.dtype == array.dtype
    corner = array[tuple(slice(0, 2) for _ in shape)]
    assert corner.shape == tuple(min(n, 2) for n in shape)
    assert corner.dtype == array.dtype
    key = tuple([0, -1] if n else slice(None) for n in shape)
    picked = array.oindex[key]
    assert picked.shape == tuple(2 if n else 0 for n in shape)
    assert picked.dtype == array.dtype


def _read_array(path: Path) -> None:
    _reads(open_array(path))


def _read_table(path: Path) -> None:
    frame = read_table(path)
    with suppress(ImportError):
        assert read_table(path, backend="polars").height == len(frame)


def _read_cube(path: Path) -> None:
    cube = read_cube(path)
    for name in cube.layers:  # every group read whole: each is checked against its digest
        assert cube.to_numpy(name).shape == cube.shape
    axes = dict(zip(("groups", "samples", "features"), cube.shape, strict=True))
    for axis, n in axes.items():  # the frames, made from what was read (strings joined now)
        assert len(getattr(cube, axis)) == n


READS: dict[str, Callable[[Path], None]] = {
    "array": _read_array,
    "table": _read_table,
    "cube": _read_cube,
}
DOCUMENTED = (FormatError, FileNotFoundError, StoreChangedError)
MAX_PEAK = 256 * 2**20


def _report(record: dict[str, Any]) -> None:
    """Append a case's outcome to the file CYTEPOOL_FUZZ_REPORT names, if any."""
    target = os.environ.get("CYTEPOOL_FUZZ_REPORT")
    if target:
        with open(target, "a", encoding="utf-8") as file:  # one short line: an atomic append
            file.write(json.dumps(record) + "\n")


def _read_documented(path: Path, kind: str) -> None:
    """Read a mutated store: a result, or exactly one of the DOCUMENTED exceptions."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        READS[kind](path)
        outcome = "read"
    except DOCUMENTED as error:  # anything else fails the test
        outcome = type(error).__name__
    finally:
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    event(outcome)
    _report({"kind": kind, "store": path.name, "outcome": outcome, "s": elapsed, "peak": peak})
    assert peak < MAX_PEAK, f"{peak} bytes"


@pytest.mark.parametrize("name", CYTEPOOL_STORES + ZARR_PYTHON_STORES + TABLE_STORES + CUBE_STORES)
@FUZZ
@given(data=st.data())
def test_mutated_store_raises_only_documented_errors(
    stores: Path, name: str, data: st.DataObject
) -> None:
    with copy_of(_store(stores, name)) as store:
        file, content = data.draw(mutations(store), label="mutation")
        _apply(store, file, content)
        _read_documented(store, _kind(name))


@pytest.mark.parametrize("name", ["gzip", "strings", ZARR_PYTHON_STORES[0]])
@settings(FUZZ, max_examples=30)
@given(data=st.data())
def test_mutation_after_open(stores: Path, name: str, data: st.DataObject) -> None:
    with copy_of(_store(stores, name)) as store:
        array = open_array(store)
        file, content = data.draw(mutations(store), label="mutation")
        _apply(store, file, content, replace=True)
        if file == "zarr.json":
            # zarr.json is a new file (or gone): every read refuses the out-of-date metadata.
            with pytest.raises((RuntimeError, FileNotFoundError)):
                array[...]
            with pytest.raises((RuntimeError, FileNotFoundError)):
                np.asarray(array)
            if content is not None:
                with pytest.raises(StoreChangedError, match=str(store.name)):
                    array.oindex[...]
        else:
            with suppress(ValueError):
                _reads(array)
