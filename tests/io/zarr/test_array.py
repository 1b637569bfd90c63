"""ZarrArray, open_array, write_array, groups: round trips, reads, bounds, stamps, pickling."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cytepool._utf8 import Utf8Buffer
from cytepool.errors import FormatError, InputError, StoreChangedError
from cytepool.io import zarr as cz
from cytepool.io.zarr import (
    DATA_TYPES,
    DEFAULT_LEVELS,
    MAX_CHUNK_BYTES,
    METADATA_FILE,
    ZarrArray,
    check_compression,
    node_type,
    open_array,
    read_group_attributes,
    write_array,
    write_group,
)
from cytepool.io.zarr import _reading as reading_module
from cytepool.io.zarr import _writing as writing_module
from cytepool.io.zarr._threads import ENV_THREADS, threads
from cytepool.io.zarr.codecs import PIECE_BYTES, import_zstd
from cytepool.io.zarr.store import LocalHandle, Stamp
from cytepool.io.zarr.strings import write_strings

STRING = np.dtypes.StringDType()


def stored_files(path: Path) -> list[str]:
    return sorted(
        p.relative_to(path).as_posix()
        for p in path.rglob("*")
        if p.is_file() and p.name != METADATA_FILE
    )


def document(path: Path) -> dict[str, Any]:
    return json.loads((path / METADATA_FILE).read_text())


def edit_document(path: Path, **changes: Any) -> None:
    doc = document(path)
    doc.update(changes)
    (path / METADATA_FILE).write_text(json.dumps(doc))


# ---------------------------------------------------------------------------------------------
# Public names


def test_documented_constants() -> None:
    assert cz.METADATA_FILE == "zarr.json"
    assert dict(DATA_TYPES) == {name: np.dtype(name) for name in DATA_TYPES}
    assert list(DATA_TYPES) == [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    ]
    assert dict(DEFAULT_LEVELS) == {"gzip": 4, "zstd": 3}
    assert MAX_CHUNK_BYTES == 2147483648
    assert cz.MAX_METADATA_BYTES == 64 * 2**20
    with pytest.raises(TypeError):
        DATA_TYPES["x"] = np.dtype("f4")  # type: ignore[index]
    assert set(cz.__all__) == {
        "DATA_TYPES",
        "DEFAULT_LEVELS",
        "MAX_CHUNK_BYTES",
        "MAX_METADATA_BYTES",
        "METADATA_FILE",
        "ZarrArray",
        "check_compression",
        "node_type",
        "open_array",
        "read_group_attributes",
        "write_array",
        "write_group",
    }


# ---------------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("name", list(DATA_TYPES))
@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_round_trip_every_core_dtype(tmp_path: Path, name: str, compression: str | None) -> None:
    rng = np.random.default_rng(0)
    data = (rng.random((7, 5)) * 100).astype(name)
    if data.dtype.kind == "c":
        data = data + 1j * data[::-1]
    data[:3, :3] = 0
    write_array(tmp_path / "a", data, chunks=(3, 3), compression=compression)
    array = open_array(tmp_path / "a")
    result = array[...]
    assert result.dtype == data.dtype
    assert result.tobytes() == data.tobytes()
    assert "c/0/0" not in stored_files(tmp_path / "a")


@pytest.mark.parametrize("byte_order", [">", "<"])
def test_any_byte_order_is_written_little_endian(tmp_path: Path, byte_order: str) -> None:
    data = np.arange(10, dtype=f"{byte_order}u4")
    write_array(tmp_path / "a", data, chunks=(4,), compression=None)
    assert document(tmp_path / "a")["codecs"] == [
        {"name": "bytes", "configuration": {"endian": "little"}}
    ]
    assert (tmp_path / "a/c/1").read_bytes() == np.arange(4, 8, dtype="<u4").tobytes()
    result = open_array(tmp_path / "a")[:]
    assert result.dtype.isnative
    assert result.tolist() == list(range(10))


def test_written_metadata(tmp_path: Path) -> None:
    write_array(
        tmp_path / "a",
        np.ones((3, 2), dtype=np.float32),
        chunks=(2, 2),
        compression="zstd",
        attributes={"encoding-type": "array", "n": [1, 2]},
        dimension_names=["x", None],
    )
    assert document(tmp_path / "a") == {
        "shape": [3, 2],
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 3, "checksum": True}},
        ],
        "attributes": {"encoding-type": "array", "n": [1, 2]},
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
        "dimension_names": ["x", None],
    }
    text = (tmp_path / "a" / METADATA_FILE).read_text()
    assert text.startswith('{\n  "shape"')


@pytest.mark.parametrize(
    ("dtype", "fill"),
    [("bool", False), ("int8", 0), ("float64", 0.0), ("complex64", [0.0, 0.0])],
)
def test_written_fill_values(tmp_path: Path, dtype: str, fill: Any) -> None:
    write_array(tmp_path / "a", np.zeros(2, dtype=dtype), chunks=(1,))
    assert document(tmp_path / "a")["fill_value"] == fill
    assert stored_files(tmp_path / "a") == []


@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_zero_d_and_zero_length_arrays(tmp_path: Path, compression: str | None) -> None:
    write_array(tmp_path / "s", np.array(2.5), chunks=(), compression=compression)
    scalar = open_array(tmp_path / "s")
    assert scalar.shape == ()
    assert scalar.chunks == ()
    assert scalar.ndim == 0
    assert stored_files(tmp_path / "s") == ["c"]
    assert scalar[()] == 2.5
    assert isinstance(scalar[()], np.float64)
    assert scalar[...].shape == ()
    assert isinstance(scalar[...], np.ndarray)
    assert np.asarray(scalar).tolist() == 2.5
    write_array(tmp_path / "z", np.zeros((0, 3), dtype=np.int16), chunks=(1, 2))
    empty = open_array(tmp_path / "z")
    assert empty[...].shape == (0, 3)
    assert empty.oindex[[], [2, 0]].shape == (0, 2)
    assert stored_files(tmp_path / "z") == []


def test_strings_round_trip(tmp_path: Path) -> None:
    data = np.array([["a", "", "é€😀"], ["", "", ""], ["longer text", "x", ""]], dtype=object)
    write_array(tmp_path / "s", data, chunks=(2, 2), compression="gzip")
    array = open_array(tmp_path / "s")
    assert array.dtype == STRING
    assert array.fill_value == ""
    assert isinstance(array.fill_value, np.str_)
    assert document(tmp_path / "s")["data_type"] == "string"
    assert document(tmp_path / "s")["codecs"][0] == {"name": "vlen-utf8", "configuration": {}}
    result = array[...]
    assert result.dtype == STRING
    assert result.tolist() == data.tolist()
    assert array[0, 2] == "é€😀"
    assert array.oindex[[2, 0], 0].tolist() == ["longer text", "a"]
    assert stored_files(tmp_path / "s") == ["c/0/0", "c/0/1", "c/1/0"]  # c/1/1 is all ""


def test_strings_read_as_objects(tmp_path: Path) -> None:
    values = np.array(["", "b", "", "", "ü\x00", "x"], dtype=object)
    write_array(tmp_path / "s", values, chunks=(2,), compression="zstd")
    assert stored_files(tmp_path / "s") == ["c/0", "c/2"]
    result = np.asarray(open_array(tmp_path / "s"), dtype=object)
    assert result.dtype == object
    assert result.tolist() == values.tolist()
    assert all(type(v) is str for v in result.tolist())
    numbers = tmp_path / "n"
    write_array(numbers, np.arange(3), chunks=(2,))
    assert np.asarray(open_array(numbers), dtype=object).tolist() == [0, 1, 2]


def test_long_strings_picked_twice_from_a_chunk(tmp_path: Path) -> None:
    """``oindex`` repeating a row of a chunk (``[0, -1]`` on an axis of one row): numpy 2.1
    corrupts StringDType strings of over 15 bytes gathered so, which crashed the read. Run in
    a process of its own, so that a crash fails this test alone."""
    values = np.array([["", "a", "é€😀", "long" * 5]], dtype=object)
    write_array(tmp_path / "s", values, chunks=(2, 3), compression="zstd")
    code = (
        "from cytepool.io.zarr import open_array\n"
        f"array = open_array({str(tmp_path / 's')!r})\n"
        "for _ in range(300):\n"
        "    picked = array.oindex[[0, -1], [0, -1]]\n"
        "print(picked.tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str([["", "long" * 5], ["", "long" * 5]])


@pytest.mark.parametrize("chunks", [(3, 3), (1, 2), (2, 7), (7, 1)])
@pytest.mark.parametrize(
    "key",
    [
        ([0, 5, 1], slice(None)),
        (slice(None), [0, 5, 1]),
        ([0, 5, 1], [0, 5, 1]),
        ([4, 0], [2, 1, 3]),
        ([0, 1, 2, 5], [4, -1, -2]),
        ([1, 1, 0], [0, 0, 1]),
        (np.array([1, 0, 1, 0, 0, 1, 1], dtype=bool), [6, 0, 3]),
        (np.array([1, 0, 1, 0, 0, 1, 1], dtype=bool), np.array([0, 1, 1, 0, 1, 0, 1], dtype=bool)),
        (slice(1, 6, 2), [5, 2, 0]),
    ],
)
def test_oindex_long_strings_into_scattered_positions(
    tmp_path: Path, chunks: tuple[int, int], key: Any
) -> None:
    """``oindex`` on strings of over 15 bytes with integer arrays or masks on two axes, a
    chunk feeding output positions that are not adjacent: numpy 2.1 assigned them through
    ``numpy.ix_`` as empty strings or garbage."""
    values = np.array(["x" * (i % 19) + f"-long-{i:02d}" for i in range(49)], dtype=object)
    values = values.reshape(7, 7)
    write_array(tmp_path / "s", values, chunks=chunks, compression=None)
    picked = open_array(tmp_path / "s").oindex[key]
    ranges = [np.arange(7)[part] if isinstance(part, slice) else np.asarray(part) for part in key]
    ranges = [np.flatnonzero(r) if r.dtype == bool else r for r in ranges]
    assert picked.dtype == STRING
    assert picked.tolist() == values[np.ix_(*ranges)].tolist()


@pytest.mark.parametrize("kind", ["U", "T", "O"])
def test_string_inputs(tmp_path: Path, kind: str) -> None:
    values = ["x", "", "yz", "ü"]
    data = np.array(values, dtype={"U": str, "T": STRING, "O": object}[kind])
    write_array(tmp_path / "s", data, chunks=(3,), compression=None)
    assert open_array(tmp_path / "s")[...].tolist() == values
    edge = (tmp_path / "s/c/1").read_bytes()
    # the edge chunk is padded to the full chunk of 3 items with ""
    assert edge == b"\3\0\0\0" + b"\2\0\0\0\xc3\xbc" + b"\0\0\0\0" * 2


def test_string_scalar(tmp_path: Path) -> None:
    write_array(tmp_path / "s", np.array("hé"), chunks=())
    assert open_array(tmp_path / "s")[()] == "hé"
    write_array(tmp_path / "e", np.array(""), chunks=())
    assert stored_files(tmp_path / "e") == []
    assert open_array(tmp_path / "e")[()] == ""


@pytest.mark.parametrize("code", ["M8", "m8"])
@pytest.mark.parametrize("unit", ["D", "s", "ms", "ns", "10us"])
def test_datetime_and_timedelta(tmp_path: Path, code: str, unit: str) -> None:
    data = np.array([0, 1, -5, np.iinfo(np.int64).min, 7], dtype=np.int64).view(f"{code}[{unit}]")
    write_array(tmp_path / "t", data, chunks=(2,), compression="gzip")
    doc = document(tmp_path / "t")
    number, letters = ("10", "us") if unit == "10us" else ("1", unit)
    assert doc["data_type"] == {
        "name": "numpy.datetime64" if code == "M8" else "numpy.timedelta64",
        "configuration": {"unit": letters, "scale_factor": int(number)},
    }
    assert doc["fill_value"] == np.iinfo(np.int64).min
    array = open_array(tmp_path / "t")
    assert np.isnat(array.fill_value)
    assert array.fill_value.dtype == data.dtype
    assert array[...].tobytes() == data.tobytes()
    assert array[...].dtype == data.dtype


@pytest.mark.parametrize("code", ["M8", "m8"])
def test_generic_time_unit_is_refused_on_write_and_read(tmp_path: Path, code: str) -> None:
    """numpy's generic unit (``np.dtype("M8")``) is refused on write, as zarr-python 3.1
    cannot open the array (Invalid fill_value); an array that has it still reads."""
    kind = "datetime64" if code == "M8" else "timedelta64"
    match = rf"the data type {kind} has no unit .* data.astype\('{kind}\[s\]'\)"
    with pytest.raises(TypeError, match=match):
        write_array(tmp_path / "g", np.array([0, 5], dtype=np.int64).view(code), chunks=(1,))
    assert not (tmp_path / "g").exists()
    data = np.array([0, 5, np.iinfo(np.int64).min], dtype=np.int64)
    write_array(tmp_path / "t", data.view(f"{code}[s]"), chunks=(2,))
    edit_document(
        tmp_path / "t",
        data_type={
            "name": f"numpy.{kind}",
            "configuration": {"unit": "generic", "scale_factor": 1},
        },
    )
    array = open_array(tmp_path / "t")
    assert array.dtype == np.dtype(code)
    assert array[...].tobytes() == data.tobytes()


def test_nat_chunks_are_not_stored_but_zero_chunks_are(tmp_path: Path) -> None:
    data = np.array(["NaT", "NaT", "1970-01-01", "1970-01-01"], dtype="M8[s]")
    write_array(tmp_path / "t", data, chunks=(2,))
    assert stored_files(tmp_path / "t") == ["c/1"]
    assert open_array(tmp_path / "t")[...].tobytes() == data.tobytes()


def test_zero_chunks_are_not_stored(tmp_path: Path) -> None:
    data = np.zeros((4, 4), dtype=np.float32)
    data[0, 0] = -0.0
    data[3, 3] = np.nan
    write_array(tmp_path / "a", data, chunks=(2, 2))
    assert stored_files(tmp_path / "a") == ["c/0/0", "c/1/1"]
    assert open_array(tmp_path / "a")[...].tobytes() == data.tobytes()


def test_edge_chunks_are_padded(tmp_path: Path) -> None:
    data = np.arange(1, 16, dtype=np.int16).reshape(3, 5)
    write_array(tmp_path / "a", data, chunks=(2, 2), compression=None)
    for key in stored_files(tmp_path / "a"):
        assert (tmp_path / "a" / key).stat().st_size == 2 * 2 * 2
    assert np.frombuffer((tmp_path / "a/c/1/2").read_bytes(), "<i2").tolist() == [15, 0, 0, 0]
    gz = tmp_path / "g"
    write_array(gz, data, chunks=(2, 2), compression="gzip", level=1)
    assert len(zlib.decompress((gz / "c/1/2").read_bytes(), 31)) == 8


def test_write_reads_rows_from_any_source(tmp_path: Path) -> None:
    data = np.arange(60, dtype=np.float64).reshape(6, 10)
    write_array(tmp_path / "a", data, chunks=(4, 3))
    requests: list[tuple[int, int]] = []

    class Rows:
        shape = data.shape
        dtype = data.dtype

        def __getitem__(self, key: slice) -> np.ndarray[Any, Any]:
            requests.append((key.start, key.stop))
            return data[key]

    write_array(tmp_path / "b", Rows(), chunks=(2, 5))
    assert requests == [(0, 2), (2, 4), (4, 6)]
    write_array(tmp_path / "c", open_array(tmp_path / "a"), chunks=(5, 5), compression="zstd")
    assert open_array(tmp_path / "c")[...].tolist() == data.tolist()
    assert open_array(tmp_path / "b")[...].tolist() == data.tolist()


def test_fortran_and_strided_input(tmp_path: Path) -> None:
    data = np.asfortranarray(np.arange(24, dtype=np.int32).reshape(4, 6))[:, ::2]
    write_array(tmp_path / "a", data, chunks=(3, 2))
    assert open_array(tmp_path / "a")[...].tolist() == data.tolist()


@pytest.mark.parametrize("url", ["s3://bucket/a", "https://example.org/a", "file:///tmp/a"])
@pytest.mark.parametrize("what", ["array", "strings", "group"])
def test_a_url_is_refused_by_the_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, what: str
) -> None:
    """A URL is not taken for a local path (``s3:`` then ``bucket``, made under the working
    directory, while open_array of the URL reads the remote object): cytepool writes local
    directories only, and says how to publish instead."""
    monkeypatch.chdir(tmp_path)
    writers = {
        "array": lambda: write_array(url, np.arange(3), chunks=(3,)),
        "strings": lambda: write_strings(url, np.array(["a", "b"], dtype=object), chunks=2),
        "group": lambda: write_group(url),
    }
    kind = "group" if what == "group" else "array"
    with pytest.raises(ValueError, match=f"cannot write a Zarr {kind} to the URL .*sync"):
        writers[what]()
    assert list(tmp_path.iterdir()) == []


def test_writes_chunks_first_and_metadata_last(tmp_path: Path) -> None:
    data = np.arange(10, dtype=np.int64)

    class Failing:
        shape, dtype = data.shape, data.dtype

        def __getitem__(self, key: slice) -> np.ndarray[Any, Any]:
            if key.start >= 6:
                raise RuntimeError("source failed")
            return data[key]

    with pytest.raises(RuntimeError, match="source failed"):
        write_array(tmp_path / "a", Failing(), chunks=(3,))
    # chunks are encoded on a thread pool while the next rows are read: some may be stored
    assert set(stored_files(tmp_path / "a")) <= {"c/0", "c/1"}
    assert not (tmp_path / "a" / METADATA_FILE).exists()
    with pytest.raises(FileNotFoundError):
        open_array(tmp_path / "a")


def test_zstd_chunks_carry_a_checksum(tmp_path: Path) -> None:
    write_array(tmp_path / "a", np.arange(100.0), chunks=(100,), compression="zstd", level=1)
    frame = (tmp_path / "a/c/0").read_bytes()
    assert frame[:4] == b"\x28\xb5\x2f\xfd"
    assert frame[4] & 0x04
    assert import_zstd().get_frame_info(frame).decompressed_size == 800


@pytest.mark.parametrize(("compression", "level"), [("gzip", 0), ("gzip", 9), ("zstd", -7)])
def test_levels_are_recorded(tmp_path: Path, compression: str, level: int) -> None:
    write_array(tmp_path / "a", np.ones(5), chunks=(5,), compression=compression, level=level)
    assert document(tmp_path / "a")["codecs"][1]["configuration"]["level"] == level


# ---------------------------------------------------------------------------------------------
# ZarrArray


@pytest.fixture
def grid(tmp_path: Path) -> tuple[ZarrArray, np.ndarray[Any, Any]]:
    data = np.arange(7 * 6 * 5, dtype=">f4").reshape(7, 6, 5)
    data[:4, :3] = 0
    write_array(tmp_path / "a", data, chunks=(4, 3, 2), attributes={"k": [1]})
    return open_array(tmp_path / "a"), data.astype("=f4")


def test_properties(grid: tuple[ZarrArray, np.ndarray[Any, Any]], tmp_path: Path) -> None:
    array, _ = grid
    assert array.path == tmp_path / "a"
    assert (array.shape, array.chunks, array.ndim, len(array)) == ((7, 6, 5), (4, 3, 2), 3, 7)
    assert array.dtype == np.dtype("float32")
    assert array.fill_value == 0
    assert isinstance(array.fill_value, np.float32)
    assert array.dimension_names is None
    attributes = array.attributes
    attributes["k"].append(2)
    assert array.attributes == {"k": [1]}
    assert "shape=(7, 6, 5)" in repr(array)
    with pytest.raises(TypeError, match="len"):
        len(open_array(_scalar(tmp_path)))


def _scalar(tmp_path: Path) -> Path:
    write_array(tmp_path / "s", np.array(1), chunks=())
    return tmp_path / "s"


@pytest.mark.parametrize(
    "key",
    [
        (),
        ...,
        0,
        -1,
        (6, 5, 4),
        (slice(1, 6, 2), 2),
        (..., 3),
        (1, ..., slice(None, None, -2)),
        (slice(None, None, -1), slice(2, 5), slice(0, 1)),
        (slice(10, 20),),
        (slice(3, 3),),
    ],
)
def test_getitem_matches_numpy(grid: tuple[ZarrArray, np.ndarray[Any, Any]], key: Any) -> None:
    array, data = grid
    result, expected = array[key], data[key]
    assert type(result) is type(expected)
    assert np.shape(result) == np.shape(expected)
    assert np.asarray(result).tobytes() == np.asarray(expected).tobytes()
    if isinstance(result, np.ndarray):
        assert result.flags.owndata
        assert result.dtype.isnative


@pytest.mark.parametrize(
    "key",
    [
        ([6, 0, 6, -1],),
        (slice(None), [True, False, True, True, False, True], 4),
        (np.array([3], dtype=np.uint8), ..., np.array([0, 4, 2])),
        ([1, 2], [5, 0], [4, 4]),
        (2, 3, 4),
        (np.array([], dtype=int), slice(None)),
    ],
)
def test_oindex_matches_numpy(grid: tuple[ZarrArray, np.ndarray[Any, Any]], key: Any) -> None:
    array, data = grid
    expected = data
    parts = list(key) + [slice(None)] * (3 - len(key))
    if any(part is Ellipsis for part in parts):
        i = next(k for k, part in enumerate(parts) if part is Ellipsis)
        parts[i : i + 1] = [slice(None)] * (4 - len(parts))
    for axis, part in reversed(list(enumerate(parts))):
        positions = np.arange(data.shape[axis])[part]
        expected = np.take(expected, positions, axis=axis)
    result = np.asarray(array.oindex[key])
    assert result.shape == expected.shape
    assert result.tobytes() == expected.tobytes()


def test_numpy_asarray(grid: tuple[ZarrArray, np.ndarray[Any, Any]]) -> None:
    array, data = grid
    assert np.asarray(array).tobytes() == data.tobytes()
    assert np.asarray(array, dtype=np.float64).dtype == np.float64
    assert np.array(array).shape == data.shape


def test_reads_open_only_the_touched_chunks(
    grid: tuple[ZarrArray, np.ndarray[Any, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    array, data = grid
    log = ReadLog(monkeypatch)
    assert array.oindex[5, [4, 5], [0, 4]].tolist() == data[5][np.ix_([4, 5], [0, 4])].tolist()
    assert sorted(log.keys) == ["c/1/1/0", "c/1/1/2"]


def test_missing_chunks_read_as_fill(tmp_path: Path) -> None:
    write_array(tmp_path / "a", np.arange(1, 9, dtype=np.int32), chunks=(2,), compression=None)
    os.remove(tmp_path / "a/c/1")
    edit_document(tmp_path / "a", fill_value=-7)
    assert open_array(tmp_path / "a")[...].tolist() == [1, 2, -7, -7, 5, 6, 7, 8]


def test_pickle_and_another_process(grid: tuple[ZarrArray, np.ndarray[Any, Any]]) -> None:
    array, data = grid
    copy = pickle.loads(pickle.dumps(array))
    assert copy.shape == array.shape
    assert copy[...].tobytes() == data.tobytes()
    script = (
        "import pickle, sys; a = pickle.loads(bytes.fromhex(sys.argv[1])); print(float(a[6, 5, 4]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, pickle.dumps(array).hex()],
        capture_output=True,
        text=True,
        check=True,
    )
    assert float(out.stdout) == data[6, 5, 4]


def test_holds_no_open_files(grid: tuple[ZarrArray, np.ndarray[Any, Any]]) -> None:
    if not Path("/proc/self/fd").exists():
        pytest.skip("needs /proc")
    array, _ = grid
    before = len(os.listdir("/proc/self/fd"))
    array[...]
    array.oindex[[1], [2]]
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
@pytest.mark.parametrize("dtype", ["<f8", ">f8", "bool", ">c8"])
def test_chunks_decode_straight_into_strided_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str | None, dtype: str
) -> None:
    rng = np.random.default_rng(0)
    data = (rng.random((2, 20000, 5)) * 10).astype(dtype)
    write_array(tmp_path / "a", data, chunks=(1, 20000, 3), compression=compression)
    rows: list[int] = []
    original = reading_module._RowSink.write

    def spy(self: Any, piece: bytes) -> None:
        rows.append(len(piece))
        original(self, piece)

    monkeypatch.setattr(reading_module._RowSink, "write", spy)
    result = open_array(tmp_path / "a")[...]
    assert result.tobytes() == data.astype(data.dtype.newbyteorder("=")).tobytes()
    # the interior chunks, as they are decompressed (uncompressed ones are copied in one step)
    assert sum(rows) == (2 * 20000 * 3 * data.dtype.itemsize if compression else 0)
    small = np.arange(4 * 6 * 8, dtype=np.int32).reshape(4, 6, 8)
    write_array(tmp_path / "b", small, chunks=(2, 3, 4), compression=compression)
    assert open_array(tmp_path / "b")[...].tolist() == small.tolist()  # through a scratch chunk


# ---------------------------------------------------------------------------------------------
# The zarr.json stamp


def test_replaced_store_is_detected(tmp_path: Path) -> None:
    write_array(tmp_path / "a", np.arange(4), chunks=(2,))
    array = open_array(tmp_path / "a")
    assert array[1] == 1
    meta = tmp_path / "a" / METADATA_FILE
    copy = tmp_path / "copy.json"
    copy.write_bytes(meta.read_bytes())
    stat = meta.stat()
    os.replace(copy, meta)  # identical content, new inode
    os.utime(meta, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(StoreChangedError, match="changed since it was opened") as info:
        array[0]
    assert str(tmp_path / "a") in str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert open_array(tmp_path / "a")[0] == 0


def test_touched_or_removed_metadata_is_detected(tmp_path: Path) -> None:
    write_array(tmp_path / "a", np.arange(4), chunks=(2,))
    array = open_array(tmp_path / "a")
    meta = tmp_path / "a" / METADATA_FILE
    os.utime(meta, ns=(0, meta.stat().st_mtime_ns + 10**9))
    with pytest.raises(StoreChangedError, match=str(meta)):
        array.oindex[[0]]
    array = open_array(tmp_path / "a")
    meta.unlink()
    with pytest.raises(StoreChangedError, match="is gone"):
        np.asarray(array)


def test_stamp_through_another_mount() -> None:
    here = Stamp(device=1, inode=10, size=100, mtime_ns=5)
    assert here.matches(Stamp(device=2, inode=99, size=100, mtime_ns=5))
    assert not here.matches(Stamp(device=2, inode=10, size=101, mtime_ns=5))
    assert not here.matches(Stamp(device=2, inode=10, size=100, mtime_ns=6))
    assert not here.matches(Stamp(device=1, inode=11, size=100, mtime_ns=5))


# ---------------------------------------------------------------------------------------------
# Bounded reading


class ReadLog:
    """Records every object read through a local store handle (whole, in a range or straight
    into place): its key and the bytes read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.keys: list[str] = []
        self.reads: list[int] = []
        get, get_range = LocalHandle.get, LocalHandle.get_range
        log = self

        def logged_get(handle: LocalHandle, key: str, *, limit: int) -> Any:
            blob = get(handle, key, limit=limit)
            if blob is not None and not key.endswith(METADATA_FILE):
                log.keys.append(key)
                log.reads.append(len(blob.data))
            return blob

        def logged_range(handle: LocalHandle, key: str, start: int, length: int) -> Any:
            part = get_range(handle, key, start, length)
            if part is not None:
                log.keys.append(key)
                log.reads.append(len(part.data))
            return part

        read_into = LocalHandle.read_into

        def logged_read_into(handle: LocalHandle, key: str, buffers: Any) -> Any:
            size = read_into(handle, key, buffers)
            if size is not None and size == sum(buffer.nbytes for buffer in buffers):
                log.keys.append(key)
                log.reads.append(size)
            return size

        monkeypatch.setattr(LocalHandle, "get", logged_get)
        monkeypatch.setattr(LocalHandle, "get_range", logged_range)
        monkeypatch.setattr(LocalHandle, "read_into", logged_read_into)


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_compressed_chunks_are_read_once_and_decoded_in_bounded_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    monkeypatch.setenv("CYTEPOOL_ZARR_FAST", "0")  # libdeflate decodes a whole chunk at once
    data = np.random.default_rng(0).random(400_000)
    write_array(tmp_path / "a", data, chunks=(400_000,), compression=compression, level=1)
    size = (tmp_path / "a/c/0").stat().st_size
    assert size > 2 * PIECE_BYTES
    log = ReadLog(monkeypatch)
    pieces: list[int] = []
    original = reading_module._FlatSink.write

    def spy(self: Any, piece: bytes) -> None:
        pieces.append(len(piece))
        original(self, piece)

    monkeypatch.setattr(reading_module._FlatSink, "write", spy)
    assert open_array(tmp_path / "a")[...].tobytes() == data.tobytes()
    assert log.reads == [size]
    assert max(pieces) <= PIECE_BYTES
    assert sum(pieces) == data.nbytes


def test_the_chunk_plan_takes_no_memory_per_chunk(tmp_path: Path) -> None:
    # 10,000 chunks of one byte, none of them stored: the plan of a read is walked, not kept
    # (it held a Python record of some 450 bytes per chunk: 4.5 MB here)
    import tracemalloc

    write_array(tmp_path / "a", np.zeros(10_000, np.int8), chunks=(1,))
    array = open_array(tmp_path / "a")
    positions = np.arange(0, 10_000, 3)
    for read in (lambda: array[...], lambda: array[::2], lambda: array.oindex[positions]):
        tracemalloc.start()
        try:
            result = read()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert not result.any()
        # the result, a few numbers per selected position of an oindex read, and 256 KiB
        assert peak < result.nbytes + 64 * len(positions) + 256 * 1024


def test_uncompressed_chunks_read_exactly_their_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_THREADS, "1")  # one chunk at a time, in order
    write_array(tmp_path / "a", np.arange(1000.0), chunks=(300,), compression=None)
    log = ReadLog(monkeypatch)
    open_array(tmp_path / "a")[...]
    assert sum(log.reads) == 8 * 300 * 4
    with open(tmp_path / "a/c/1", "ab") as file:
        file.write(b"\0")
    log.reads.clear()
    with pytest.raises(FormatError, match="it has 2401 bytes, expected exactly 2400"):
        open_array(tmp_path / "a")[...]
    assert log.reads == [2400]  # c/0 only: c/1 was refused before reading


def test_oversized_compressed_chunk_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_array(tmp_path / "a", np.arange(1000.0), chunks=(1000,), compression="gzip")
    (tmp_path / "a/c/0").write_bytes(os.urandom(8000 + 2000 + 70_000))
    log = ReadLog(monkeypatch)
    with pytest.raises(FormatError, match="more than any valid encoding of the chunk"):
        open_array(tmp_path / "a")[...]
    assert log.reads == []


def test_a_bomb_stops_just_past_the_chunk_size(tmp_path: Path) -> None:
    write_array(tmp_path / "a", np.arange(1000.0), chunks=(1000,), compression="gzip")
    (tmp_path / "a/c/0").write_bytes(zlib.compress(bytes(30_000_000), 9, wbits=31))
    with pytest.raises(FormatError, match="decodes to more bytes than a valid chunk holds"):
        open_array(tmp_path / "a")[...]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_short_and_long_chunks_are_refused(tmp_path: Path, compression: str | None) -> None:
    write_array(tmp_path / "a", np.arange(10, dtype=np.int32), chunks=(5,), compression=compression)
    codec = cz.codecs.ZstdCodec(1) if compression else None
    long = "more bytes than a valid chunk holds" if codec else "21 bytes, expected"
    for payload, problem in [(bytes(19), "19 bytes, expected"), (bytes(21), long)]:
        (tmp_path / "a/c/0").write_bytes(codec.encode(payload) if codec else payload)
        with pytest.raises(FormatError, match=problem):
            open_array(tmp_path / "a")[...]


@pytest.mark.parametrize("chunks", [(1, 256, 1024), (2, 128, 512)])
def test_a_read_holds_the_result_and_about_one_chunk(tmp_path: Path, chunks: Any) -> None:
    import tracemalloc

    data = np.random.default_rng(0).poisson(2.0, (8, 256, 1024)).astype(np.float32)
    write_array(tmp_path / "a", data, chunks=chunks, compression="gzip", level=1)
    array = open_array(tmp_path / "a")
    tracemalloc.start()
    try:
        result = array[...]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    chunk = 4 * int(np.prod(chunks))
    assert result.tobytes() == data.tobytes()
    # each decoding thread: a chunk and the pieces in flight
    assert peak < data.nbytes + threads() * (chunk + 6 * PIECE_BYTES)


@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize(("text", "bound"), [("abc", 3.5), ("ab\0", 3.5), ("é", 4.0)])
def test_a_huge_string_decodes_in_about_twice_its_size(
    tmp_path: Path, compression: str | None, text: str, bound: float
) -> None:
    # One 4 MiB string in a chunk of its own: a read holds the chunk's bytes, the result and
    # the str made from the bytes (and, for non-ASCII text, the UTF-8 of that str, which numpy
    # caches). It used to hold 4.3 times the string, 10 times with a NUL (np.bincount).
    import tracemalloc

    size = 4 * 2**20
    value = text * (size // len(text.encode()))
    write_array(
        tmp_path / "s", np.array([value], dtype=object), chunks=(1,), compression=compression
    )
    array = open_array(tmp_path / "s")
    for read in (lambda: array[...], lambda: np.asarray(array, dtype=object)):
        tracemalloc.start()
        try:
            result = read()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert result[0] == value
        assert peak < bound * size + 2**20


def test_metadata_documents_beyond_the_limit_are_refused_unread(tmp_path: Path) -> None:
    import tracemalloc

    write_array(tmp_path / "a", np.arange(3), chunks=(3,))
    write_group(tmp_path / "g")
    for node in ("a", "g"):
        with open(tmp_path / node / METADATA_FILE, "r+b") as file:
            file.truncate(cz.MAX_METADATA_BYTES + 1)  # sparse: no disk space taken
        problem = f"has {cz.MAX_METADATA_BYTES + 1} bytes, more than the {cz.MAX_METADATA_BYTES}"
        for call in (open_array, read_group_attributes, node_type):
            tracemalloc.start()
            try:
                with pytest.raises(FormatError, match=problem):
                    call(tmp_path / node)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak < 2**20


def test_string_chunks_are_bounded_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_array(tmp_path / "s", np.array(["x" * 5000, "y"]), chunks=(2,), compression="zstd")
    monkeypatch.setattr(reading_module, "MAX_CHUNK_BYTES", 1000)
    with pytest.raises(FormatError, match="decodes to more bytes than a valid chunk holds"):
        open_array(tmp_path / "s")[...]


LIMIT = 4 + 2 * 4 + 10  # a vlen-utf8 chunk of two items of 5 bytes
"""MAX_CHUNK_BYTES as the tests of string chunks at the limit lower it."""


@pytest.fixture
def low_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """Lower the limit of string chunks to LIMIT bytes, for writing and reading alike."""
    monkeypatch.setattr(writing_module, "MAX_CHUNK_BYTES", LIMIT)
    monkeypatch.setattr(reading_module, "MAX_CHUNK_BYTES", LIMIT)
    return LIMIT


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_string_chunk_beyond_max_chunk_bytes_is_refused_unwritten(
    tmp_path: Path, low_limit: int, compression: str | None
) -> None:
    values = np.array([["abcde", "fghij"], ["abcde", "fghijk"], ["x", ""]], dtype=object)
    path = tmp_path / "s"
    problem = (
        f"the strings of chunk c/0/1 of the Zarr array {path} would take {low_limit + 1} bytes"
        f" encoded as vlen-utf8, more than MAX_CHUNK_BYTES \\({low_limit}\\), .*; write them in"
        " smaller chunks \\(fewer rows along the first axis\\)"
    )
    with pytest.raises(InputError, match=problem):
        write_array(path, values.T, chunks=(2, 1), compression=compression)
    assert not (path / METADATA_FILE).exists()  # no array, as after any failed write
    assert not (path / "c" / "0" / "1").exists()
    with pytest.raises(FileNotFoundError):
        open_array(path)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_string_chunk_of_max_chunk_bytes_is_written_and_read(
    tmp_path: Path, low_limit: int, compression: str | None
) -> None:
    values = np.array(["abcde", "fghij", "é", "😀"], dtype=np.dtypes.StringDType())
    write_array(tmp_path / "s", values, chunks=(2,), compression=compression)
    if compression is None:
        assert (tmp_path / "s" / "c" / "0").stat().st_size == low_limit
    assert open_array(tmp_path / "s")[...].tolist() == values.tolist()


@pytest.mark.parametrize(
    "source",
    [
        lambda values: Utf8Buffer.from_str(values),  # rows.utf8(start, stop)
        lambda values: np.array(values, dtype=object),  # rows[start:stop]
    ],
    ids=["utf8", "numpy"],
)
def test_write_strings_refuses_a_chunk_beyond_max_chunk_bytes_too(
    tmp_path: Path, low_limit: int, source: Any
) -> None:
    write_strings(tmp_path / "ok", source(["x", "", "abcde", "fghij"]), chunks=2)
    assert open_array(tmp_path / "ok")[...].tolist() == ["x", "", "abcde", "fghij"]
    path = tmp_path / "s"
    with pytest.raises(InputError, match=f"chunk c/1 of the Zarr array {path} would take 23"):
        write_strings(path, source(["x", "", "abcde", "fghijk"]), chunks=2)
    assert not (path / METADATA_FILE).exists()
    assert not (path / "c" / "1").exists()


def test_bool_chunks_hold_only_zero_and_one(tmp_path: Path) -> None:
    write_array(tmp_path / "b", np.array([True, False, True]), chunks=(2,), compression=None)
    assert open_array(tmp_path / "b")[...].tolist() == [True, False, True]
    (tmp_path / "b/c/1").write_bytes(b"\x01\x02")  # the padding byte is checked too
    with pytest.raises(FormatError, match="byte other than 0 and 1"):
        open_array(tmp_path / "b")[...]
    with pytest.raises(FormatError, match="byte other than 0 and 1"):
        open_array(tmp_path / "b")[2]


@settings(max_examples=40, deadline=None)
@given(
    raw=st.lists(st.integers(0, 255), min_size=1, max_size=9),
    chunk=st.integers(1, 4),
    compression=st.sampled_from([None, "gzip", "zstd"]),
)
def test_bools_of_any_bytes_are_stored_as_zero_and_one(
    raw: list[int], chunk: int, compression: str | None
) -> None:
    data = np.array(raw, dtype=np.uint8).view(bool)  # bytes other than 0 and 1 (numpy: True)
    with tempfile.TemporaryDirectory() as name:
        path = Path(name) / "b"
        write_array(path, data, chunks=(chunk,), compression=compression)
        got = open_array(path)[...]
    assert got.tolist() == data.tolist()
    assert got.view(np.uint8).tolist() == [int(byte != 0) for byte in raw]


# ---------------------------------------------------------------------------------------------
# Groups


def test_groups(tmp_path: Path) -> None:
    write_group(tmp_path / "g", {"encoding-type": "anndata", "x": [1.5, None]})
    assert read_group_attributes(tmp_path / "g") == {"encoding-type": "anndata", "x": [1.5, None]}
    assert json.loads((tmp_path / "g" / METADATA_FILE).read_text()) == {
        "attributes": {"encoding-type": "anndata", "x": [1.5, None]},
        "zarr_format": 3,
        "node_type": "group",
    }
    write_group(tmp_path / "g" / "child")
    write_array(tmp_path / "g" / "arr", np.arange(3), chunks=(3,))
    assert node_type(tmp_path / "g") == "group"
    assert node_type(tmp_path / "g/child") == "group"
    assert node_type(tmp_path / "g/arr") == "array"
    existing = tmp_path / "existing"
    existing.mkdir()
    write_group(existing)
    assert read_group_attributes(existing) == {}


# ---------------------------------------------------------------------------------------------
# Argument checks


@pytest.mark.parametrize(
    ("compression", "level", "expected"),
    [
        ("gzip", None, 4),
        ("gzip", 0, 0),
        ("gzip", 9, 9),
        ("zstd", None, 3),
        ("zstd", 0, 0),
        ("zstd", 22, 22),
        ("zstd", -131072, -131072),
        ("zstd", np.int64(5), 5),
        (None, None, None),
    ],
)
def test_check_compression(compression: Any, level: Any, expected: Any) -> None:
    assert check_compression(compression, level) == expected


@pytest.mark.parametrize(
    ("compression", "level", "error", "problem"),
    [
        (1, None, TypeError, "compression must be a string or None"),
        (b"gzip", None, TypeError, "compression must be a string or None"),
        ("gzip", 1.0, TypeError, "level must be an integer"),
        ("gzip", True, TypeError, "level must be an integer"),
        ("gzip", "4", TypeError, "level must be an integer"),
        ("lz4", None, ValueError, "'gzip', 'zstd' or None, not 'lz4'"),
        ("GZIP", None, ValueError, "not 'GZIP'"),
        ("gzip", 10, ValueError, "gzip level must be from 0 to 9, not 10"),
        ("gzip", -1, ValueError, "from 0 to 9"),
        ("zstd", 23, ValueError, "zstd level must be from -131072 to 22"),
        (None, 1, ValueError, "level must be None without compression"),
    ],
)
def test_check_compression_errors(
    compression: Any, level: Any, error: type[Exception], problem: str
) -> None:
    with pytest.raises(error, match=problem):
        check_compression(compression, level)


def test_check_compression_without_zstd(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in cz.codecs._ZSTD_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    assert check_compression("gzip", None) == 4
    with pytest.raises(ValueError, match=r"pip install backports\.zstd"):
        check_compression("zstd", None)


def test_an_array_opened_by_a_relative_path_survives_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    write_array("x", np.arange(6, dtype=np.int32), chunks=(4,), compression="zstd")
    array = open_array("x")
    monkeypatch.chdir(tmp_path / "elsewhere")
    np.testing.assert_array_equal(array[:], np.arange(6, dtype=np.int32))
    assert str(array.path) == "x"  # the path as typed, for messages
