"""Interop with zarr-python, both directions: what one writes, the other reads identically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.io.zarr import DATA_TYPES, METADATA_FILE, open_array, write_array

zarr = pytest.importorskip("zarr")
zcodecs = pytest.importorskip("zarr.codecs")

pytestmark = pytest.mark.interop
STRING = np.dtypes.StringDType()


def sample(name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """Values of every flavour for a dtype, with a block of zeros (unstored chunks)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(name)
    if dtype.kind == "b":
        data = rng.random(shape) < 0.5
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        data = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    elif dtype.kind == "f":
        data = (rng.standard_normal(shape) * 1000).astype(dtype)
        if data.size >= 3:
            data.reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    else:
        data = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    data = np.asarray(data, dtype=dtype)
    if data.ndim and data.shape[0] > 2:
        data[-2:] = 0
    return data


def same(actual: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    if expected.dtype.kind in "TUO":
        assert actual.tolist() == expected.tolist()
    else:
        assert actual.dtype == expected.dtype.newbyteorder("=")
        assert actual.tobytes() == np.ascontiguousarray(expected, actual.dtype).tobytes()


COMPRESSORS = {
    "none": None,
    "gzip1": zcodecs.GzipCodec(level=1),
    "gzip9": zcodecs.GzipCodec(level=9),
    "zstd0": zcodecs.ZstdCodec(level=0),
    "zstd-3-checksum": zcodecs.ZstdCodec(level=-3, checksum=True),
    "zstd19": zcodecs.ZstdCodec(level=19),
    "gzip+zstd": (zcodecs.GzipCodec(level=2), zcodecs.ZstdCodec(level=2)),
}


# ---------------------------------------------------------------------------------------------
# zarr-python writes, cytepool reads


@pytest.mark.parametrize("name", list(DATA_TYPES))
@pytest.mark.parametrize("endian", ["little", "big"])
def test_reads_every_dtype_in_both_byte_orders(tmp_path: Path, name: str, endian: str) -> None:
    data = sample(name, (11, 3))
    zarr.create_array(
        tmp_path / "a",
        data=data,
        chunks=(4, 2),
        serializer=zcodecs.BytesCodec(endian=endian if data.dtype.itemsize > 1 else None),
        compressors=None,
    )
    array = open_array(tmp_path / "a")
    same(array[...], data)
    same(array.oindex[[10, 0, 5], [2, 0]], data[np.ix_([10, 0, 5], [2, 0])])


@pytest.mark.parametrize("compressor", list(COMPRESSORS))
@pytest.mark.parametrize("name", ["uint8", "int64", "float32", "complex128"])
def test_reads_every_compression(tmp_path: Path, compressor: str, name: str) -> None:
    data = sample(name, (300, 7), seed=1)
    zarr.create_array(
        tmp_path / "a", data=data, chunks=(64, 5), compressors=COMPRESSORS[compressor]
    )
    same(open_array(tmp_path / "a")[...], data)


@pytest.mark.parametrize(
    "encoding",
    [
        {"name": "default", "separator": "/"},
        {"name": "default", "separator": "."},
        {"name": "v2", "separator": "."},
        {"name": "v2", "separator": "/"},
    ],
    ids=lambda e: f"{e['name']}{e['separator']}",
)
@pytest.mark.parametrize("shape", [(), (5,), (5, 3, 2)], ids=str)
def test_reads_every_chunk_key_encoding(
    tmp_path: Path, encoding: dict[str, str], shape: tuple[int, ...]
) -> None:
    data = np.arange(1, int(np.prod(shape)) + 1, dtype=np.int16).reshape(shape)
    chunks = tuple(2 for _ in shape)
    zarr.create_array(tmp_path / "a", data=data, chunks=chunks, chunk_key_encoding=encoding)
    same(open_array(tmp_path / "a")[...], data)


@pytest.mark.parametrize("shape", [(), (0,), (0, 4), (1,), (7, 0)], ids=str)
@pytest.mark.parametrize("name", ["bool", "float64"])
def test_reads_zero_d_and_zero_length(tmp_path: Path, shape: tuple[int, ...], name: str) -> None:
    data = np.ones(shape, dtype=name)
    zarr.create_array(tmp_path / "a", data=data, chunks="auto")
    array = open_array(tmp_path / "a")
    same(array[...], data)
    if shape == ():
        assert array[()] == data[()]


FILL_VALUES = [
    ("bool", True),
    ("int8", -128),
    ("uint64", 2**64 - 1),
    ("float16", "Infinity"),
    ("float32", "NaN"),
    ("float32", "-Infinity"),
    ("float32", "0x7fc00001"),
    ("float64", "0x8000000000000000"),
    ("float64", 1.5e300),
    ("float64", -0.0),
    ("complex64", [1.5, "NaN"]),
    ("complex128", ["-Infinity", "0x3ff0000000000000"]),
]


@pytest.mark.parametrize(("name", "fill"), FILL_VALUES, ids=str)
def test_every_fill_value_form_reads_as_zarr_python_reads_it(
    tmp_path: Path, name: str, fill: Any
) -> None:
    data = sample(name, (6,))
    data[:3] = 0
    zarr.create_array(tmp_path / "a", data=data, chunks=(3,), fill_value=0)
    (tmp_path / "a/c/0").unlink(missing_ok=True)  # a missing chunk reads as the fill value
    doc = json.loads((tmp_path / "a" / METADATA_FILE).read_text())
    doc["fill_value"] = fill
    (tmp_path / "a" / METADATA_FILE).write_text(json.dumps(doc))
    expected = zarr.open_array(tmp_path / "a", mode="r")[...]
    array = open_array(tmp_path / "a")
    same(array[...], expected)
    assert np.asarray(array.fill_value).tobytes() == np.asarray(expected[0]).tobytes()


@pytest.mark.parametrize("fill", [7, "nan", -1.25], ids=str)
def test_fill_values_zarr_python_writes(tmp_path: Path, fill: Any) -> None:
    value = float(fill) if isinstance(fill, str) else fill
    data = np.full((9,), value, dtype=np.float32)
    data[4] = 3
    zarr.create_array(tmp_path / "a", data=data, chunks=(2,), fill_value=value)
    same(open_array(tmp_path / "a")[...], zarr.open_array(tmp_path / "a", mode="r")[...])


def test_missing_chunks(tmp_path: Path) -> None:
    data = np.zeros((6, 6), dtype=np.int32)
    data[4:, 4:] = 5
    zarr.create_array(tmp_path / "a", data=data, chunks=(2, 2), fill_value=0)
    stored = sorted(p.name for p in (tmp_path / "a/c").rglob("*") if p.is_file())
    assert stored == ["2"]
    same(open_array(tmp_path / "a")[...], data)


@pytest.mark.parametrize("location", ["end", "start"])
@pytest.mark.parametrize("compressor", ["none", "zstd0", "gzip1"])
def test_reads_sharded_arrays(tmp_path: Path, location: str, compressor: str) -> None:
    data = sample("float32", (30, 17), seed=2)
    data[:12] = 0  # empty inner chunks and a missing shard
    inner: list[Any] = [zcodecs.BytesCodec(endian="big")]
    if COMPRESSORS[compressor] is not None:
        inner.append(COMPRESSORS[compressor])
    codec = zcodecs.ShardingCodec(chunk_shape=(3, 4), codecs=inner, index_location=location)
    zarr.create_array(tmp_path / "a", data=data, chunks=(12, 8), serializer=codec, compressors=None)
    array = open_array(tmp_path / "a")
    same(array[...], data)
    same(array.oindex[[29, 13, 0], 16], data[[29, 13, 0], 16])
    same(array[14:20, 5:9], data[14:20, 5:9])


def test_reads_zarr_python_default_sharding(tmp_path: Path) -> None:
    data = sample("int32", (100, 10), seed=3)
    zarr.create_array(tmp_path / "a", data=data, chunks=(10, 5), shards=(50, 10))
    same(open_array(tmp_path / "a")[...], data)


@pytest.mark.parametrize("sharded", [False, True])
def test_reads_strings(tmp_path: Path, sharded: bool) -> None:
    values = ["", "a", "é€😀", "", "", "", "", "x" * 1000, "日本語", ""]
    data = np.array(values, dtype=STRING)
    kwargs: dict[str, Any] = {"chunks": (3,)}
    if sharded:
        kwargs["shards"] = (6,)
    zarr.create_array(tmp_path / "s", data=data, **kwargs)
    array = open_array(tmp_path / "s")
    result = array[...]
    assert result.dtype == STRING
    assert result.tolist() == values
    assert array.oindex[[7, 2]].tolist() == ["x" * 1000, "é€😀"]


@pytest.mark.parametrize(
    ("shape", "kwargs", "written"),
    [
        ((7,), {"chunks": (2,)}, 2),  # chunks 1 to 3 not stored
        ((8,), {"chunks": (2,), "shards": (4,)}, 2),  # an empty inner chunk, a shard not stored
        ((3,), {"chunks": (3,)}, 0),  # the one chunk not stored
        ((4,), {"chunks": (4,), "shards": (4,)}, 0),
    ],
)
def test_read_strings_fills_chunks_not_stored(
    tmp_path: Path, shape: tuple[int], kwargs: dict[str, Any], written: int
) -> None:
    """Chunks (or inner chunks) that are not stored read as the fill value in ``read_strings``
    (the buffers of string columns), as in every other read: they used to read as ``""``."""
    from cytepool.io.zarr.strings import read_strings

    z = zarr.create_array(tmp_path / "s", shape=shape, dtype=str, fill_value="NA é", **kwargs)
    if written:
        z[:written] = ["a", "bc"][:written]
    expected = [str(v) for v in zarr.open_array(tmp_path / "s", mode="r")[...]]
    assert expected[-1] == "NA é"
    array = open_array(tmp_path / "s")
    assert array[...].tolist() == expected
    assert read_strings(array).to_str() == expected


@pytest.mark.parametrize("code", ["M8", "m8"])
@pytest.mark.parametrize("unit", ["Y", "D", "h", "s", "ms", "us", "ns", "5m"])
def test_reads_datetime_and_timedelta(tmp_path: Path, code: str, unit: str) -> None:
    ticks = np.array([0, 1, -1, np.iinfo(np.int64).min, 12345, 0, 0], dtype=np.int64)
    data = ticks.view(f"{code}[{unit}]")
    zarr.create_array(tmp_path / "t", data=data, chunks=(3,))
    result = open_array(tmp_path / "t")[...]
    assert result.dtype == data.dtype
    assert result.tobytes() == data.tobytes()


def test_reads_2d_strings_with_edges(tmp_path: Path) -> None:
    data = np.array([[f"{i}-{j}" for j in range(5)] for i in range(7)], dtype=STRING)
    zarr.create_array(tmp_path / "s", data=data, chunks=(3, 2), compressors=COMPRESSORS["gzip1"])
    same(open_array(tmp_path / "s")[...], data)


# ---------------------------------------------------------------------------------------------
# cytepool writes, zarr-python reads


@pytest.mark.parametrize("name", list(DATA_TYPES))
@pytest.mark.parametrize("byte_order", ["<", ">"])
@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_zarr_python_reads_every_dtype(
    tmp_path: Path, name: str, byte_order: str, compression: str | None
) -> None:
    data = sample(name, (13, 4), seed=4)
    data = data.astype(data.dtype.newbyteorder(byte_order))
    write_array(tmp_path / "a", data, chunks=(5, 3), compression=compression)
    same(zarr.open_array(tmp_path / "a", mode="r")[...], data)


@pytest.mark.parametrize(
    ("compression", "level"),
    [("gzip", 0), ("gzip", 1), ("gzip", 9), ("zstd", 0), ("zstd", -50), ("zstd", 22)],
)
def test_zarr_python_reads_every_level(tmp_path: Path, compression: str, level: int) -> None:
    data = sample("float64", (1000,), seed=5)
    write_array(tmp_path / "a", data, chunks=(300,), compression=compression, level=level)
    same(zarr.open_array(tmp_path / "a", mode="r")[...], data)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (1,), (10, 10)], ids=str)
def test_zarr_python_reads_shapes_and_edges(tmp_path: Path, shape: tuple[int, ...]) -> None:
    data = np.arange(int(np.prod(shape)), dtype=np.uint16).reshape(shape) + 1
    chunks = tuple(3 for _ in shape)
    write_array(tmp_path / "a", data, chunks=chunks, attributes={"x": 1}, dimension_names=None)
    theirs = zarr.open_array(tmp_path / "a", mode="r")
    assert theirs.shape == shape
    assert theirs.attrs["x"] == 1
    same(theirs[...], data)


def test_zarr_python_reads_missing_chunks_and_names(tmp_path: Path) -> None:
    data = np.zeros((4, 4), dtype=np.float32)
    data[3, 3] = 1
    write_array(tmp_path / "a", data, chunks=(2, 2), dimension_names=["x", None])
    theirs = zarr.open_array(tmp_path / "a", mode="r")
    assert theirs.metadata.dimension_names == ("x", None)
    same(theirs[...], data)


@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_zarr_python_reads_strings(tmp_path: Path, compression: str | None) -> None:
    values = np.array([["", "é", "😀x"], ["", "", ""], ["abc", "", "z" * 300]], dtype=object)
    write_array(tmp_path / "s", values, chunks=(2, 2), compression=compression)
    result = zarr.open_array(tmp_path / "s", mode="r")[...]
    assert np.asarray(result).tolist() == values.tolist()


@pytest.mark.parametrize("code", ["M8", "m8"])
@pytest.mark.parametrize("unit", ["D", "s", "ns", "10ms"])
def test_zarr_python_reads_datetime_and_timedelta(tmp_path: Path, code: str, unit: str) -> None:
    data = np.array([0, 5, np.iinfo(np.int64).min, -3], dtype=np.int64).view(f"{code}[{unit}]")
    write_array(tmp_path / "t", data, chunks=(3,), compression="zstd")
    result = zarr.open_array(tmp_path / "t", mode="r")[...]
    assert result.dtype == data.dtype
    assert result.tobytes() == data.tobytes()


def test_zarr_python_reads_cytepool_groups(tmp_path: Path) -> None:
    from cytepool.io.zarr import write_group

    write_group(tmp_path / "g", {"a": [1, "b"]})
    write_array(tmp_path / "g" / "x", np.arange(3), chunks=(2,))
    group = zarr.open_group(tmp_path / "g", mode="r")
    assert dict(group.attrs) == {"a": [1, "b"]}
    same(group["x"][...], np.arange(3))


def test_sharded_reads_touch_only_the_index_and_needed_inner_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cytepool.io.zarr.store import LocalHandle

    data = np.arange(40 * 40, dtype=np.float64).reshape(40, 40)
    codec = zcodecs.ShardingCodec(chunk_shape=(5, 5), codecs=[zcodecs.BytesCodec()])
    zarr.create_array(
        tmp_path / "a", data=data, chunks=(20, 20), serializer=codec, compressors=None
    )
    reads: list[int] = []
    original = LocalHandle.get_range

    def logged(handle: LocalHandle, key: str, start: int, length: int) -> Any:
        part = original(handle, key, start, length)
        reads.append(0 if part is None else len(part.data))
        return part

    monkeypatch.setattr(LocalHandle, "get_range", logged)
    array = open_array(tmp_path / "a")
    assert array[27, 3] == data[27, 3]
    assert sum(reads) == (16 * 16 + 4) + 5 * 5 * 8  # the index, then one inner chunk
    reads.clear()
    assert array.oindex[[0, 39], [0, 39]].tolist() == data[np.ix_([0, 39], [0, 39])].tolist()
    assert sum(reads) == 4 * ((16 * 16 + 4) + 5 * 5 * 8)  # four shards, one inner chunk each


def test_reads_every_array_of_an_anndata_store(tmp_path: Path) -> None:
    """Every node anndata writes (consolidated, sharded with anndata >= 0.13) reads as in zarr."""
    import warnings

    anndata = pytest.importorskip("anndata")
    pd = pytest.importorskip("pandas")
    from cytepool.io.zarr import node_type, read_group_attributes

    obs = pd.DataFrame(
        {
            "kind": pd.Categorical(["a", "b", "a", "c"] * 25),
            "label": [f"cell-{i}-é" for i in range(100)],
            "n": np.arange(100, dtype=np.int64),
            "ok": np.arange(100) % 3 == 0,
        },
        index=[f"c{i}" for i in range(100)],
    )
    adata = anndata.AnnData(
        X=np.random.default_rng(0).poisson(1.0, (100, 30)).astype(np.float32), obs=obs
    )
    adata.uns["when"] = np.array(["2024-01-02", "NaT"], dtype="M8[ms]")
    settings = anndata.settings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = getattr(settings, "zarr_write_format", 3)
        try:
            settings.zarr_write_format = 3
            adata.write_zarr(tmp_path / "a.zarr")
        finally:
            settings.zarr_write_format = before
    checked = sharded = 0
    for meta in sorted((tmp_path / "a.zarr").rglob("zarr.json")):
        node = meta.parent
        if node_type(node) == "group":
            assert isinstance(read_group_attributes(node), dict)
            continue
        expected = zarr.open_array(node, mode="r", use_consolidated=False)[...]
        same(open_array(node)[...], np.asarray(expected))
        checked += 1
        sharded += "sharding_indexed" in meta.read_text()
    assert checked >= 8
    from importlib.metadata import version

    if tuple(int(part) for part in version("anndata").split(".")[:2]) >= (0, 13):
        assert sharded, "anndata 0.13 shards by default"


def test_sharded_reads_keep_no_record_per_inner_chunk(tmp_path: Path) -> None:
    # 8,000 inner chunks of one byte in 8 shards: the pieces of a shard are walked as it is
    # read, not gathered for all shards first (some 500 bytes each: 4 MB here)
    import tracemalloc

    data = (np.arange(8000) % 7 + 1).astype(np.int8)
    zarr.create_array(tmp_path / "a", data=data, chunks=(1,), shards=(1000,), compressors=None)
    array = open_array(tmp_path / "a")
    tracemalloc.start()
    try:
        result = array[...]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.tolist() == data.tolist()
    # the result, and a shard's index (16 kB) and its checks, for each decoding thread
    assert peak < result.nbytes + 512 * 1024
