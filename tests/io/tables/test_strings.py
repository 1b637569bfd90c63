"""String columns as UTF-8 buffers (cytepool.io.tables.strings): the same bytes, fewer objects.

write_strings must store exactly what write_array stores for the same strings, from numpy
arrays, Arrow buffers, row numbers and lazy rows; read_strings must read what numpy reads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cytepool import _utf8
from cytepool.errors import FormatError, InputError
from cytepool.io import read_table, write_table
from cytepool.io.tables import backends
from cytepool.io.tables.columns import LazyRows
from cytepool.io.tables.strings import (
    RowNumbers,
    Utf8Strings,
    decimal,
    read_strings,
    write_strings,
)
from cytepool.io.zarr import _writing as writing_module
from cytepool.io.zarr import open_array, write_array

pa = pytest.importorskip("pyarrow")

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)


def files(root: Path) -> dict[str, bytes]:
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


def assert_written_like_write_array(
    tmp_path: Path, data: Any, values: list[str], chunks: int, compression: str | None
) -> None:
    attributes = {"encoding-type": "string-array", "encoding-version": "0.2.0"}
    options: dict[str, Any] = {"compression": compression, "attributes": attributes}
    write_strings(tmp_path / "ours", data, chunks=chunks, level=None, **options)
    write_array(tmp_path / "theirs", np.array(values, dtype=object), chunks=(chunks,), **options)
    assert files(tmp_path / "ours") == files(tmp_path / "theirs")


# row numbers ----------------------------------------------------------------------------------


def test_decimal_edges() -> None:
    values = [0, 1, -1, 9, 10, -10, 99, 100, 2**31, -(2**31), 2**63 - 1, -(2**63)]
    lengths, body = decimal(np.array(values, dtype=np.int64))
    texts = [str(v) for v in values]
    assert lengths.tolist() == [len(t) for t in texts]
    assert body.tobytes() == "".join(texts).encode()
    empty = decimal(np.zeros(0, dtype=np.int64))
    assert empty[0].tolist() == []
    assert empty[1].tobytes() == b""


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50))
def test_decimal_is_str(values: list[int]) -> None:
    lengths, body = decimal(np.array(values, dtype=np.int64))
    assert body.tobytes() == "".join(map(str, values)).encode()
    assert lengths.tolist() == [len(str(v)) for v in values]


@pytest.mark.parametrize(
    ("n", "start", "step", "chunks"),
    [(0, 0, 1, 4), (1, 0, 1, 4), (25, 0, 1, 4), (30, -20, 3, 7), (12, 100, -9, 5), (9, 7, 1, 100)],
)
def test_row_numbers(n: int, start: int, step: int, chunks: int, tmp_path: Path) -> None:
    rows = RowNumbers(n, start, step)
    values = [str(start + i * step) for i in range(n)]
    assert rows[0:n].tolist() == values
    assert rows[2:5].tolist() == values[2:5]
    assert_written_like_write_array(tmp_path, rows, values, chunks, None)
    with pytest.raises(IndexError, match="slices with step 1"):
        rows[::2]


# Arrow buffers --------------------------------------------------------------------------------


def _with_null_garbage() -> Any:
    """A string array whose null slot holds bytes (Arrow allows it)."""
    offsets = np.array([0, 2, 5, 6], dtype=np.int32)
    validity = np.packbits(np.array([True, False, True]), bitorder="little")
    data = np.frombuffer(b"abXYZc", dtype=np.uint8)
    buffers = [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), 3, buffers, null_count=1)


@pytest.mark.parametrize(
    ("array", "values"),
    [
        (pa.array(["a", "", "é€", "x\0y"]), ["a", "", "é€", "x\0y"]),
        (pa.array(["a", None, "bc"], type=pa.large_string()), ["a", "", "bc"]),
        (pa.array(["a", None, "long string view", "b"], type=pa.string_view()), None),
        (pa.array(["skip", "a", "bc", "d"]).slice(1, 2), ["a", "bc"]),
        (pa.chunked_array([["a", "b"], [], ["cde"]]), ["a", "b", "cde"]),
        (pa.chunked_array([["only"]]), ["only"]),
        (pa.chunked_array([], type=pa.string()), []),
        (pa.array([], type=pa.string()), []),
        (pa.array(["", ""]), ["", ""]),
        (_with_null_garbage(), ["ab", "", "c"]),
    ],
    ids=range(10),
)
def test_utf8_strings_from_arrow(array: Any, values: list[str] | None, tmp_path: Path) -> None:
    if values is None:
        values = ["" if v is None else v for v in array.to_pylist()]
    strings = Utf8Strings.from_arrow(array)
    assert len(strings) == len(values)
    assert strings[0 : len(values)].tolist() == values
    back = strings.to_arrow()
    assert back.type == pa.string()
    assert back.to_pylist() == values
    mask = np.array([i % 2 == 1 for i in range(len(values))], dtype=bool)
    assert strings.to_arrow(mask).to_pylist() == [
        None if m else v for v, m in zip(values, mask, strict=True)
    ]
    assert_written_like_write_array(tmp_path, strings, values, 2, "zstd")


def test_utf8_strings_beyond_int32_offsets_become_large_strings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    strings = Utf8Strings.from_arrow(pa.array(["ab", "cde"]))
    assert strings.to_arrow().type == pa.string()
    monkeypatch.setattr(_utf8, "INT32_MAX", 4)  # as if the data took over 2 GiB
    large = strings.to_arrow(np.array([False, True]))
    assert large.type == pa.large_string()
    assert large.to_pylist() == ["ab", None]


# write_strings == write_array -----------------------------------------------------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.lists(st.one_of(TEXT, st.just("")), max_size=40),
    chunks=st.integers(1, 9),
    kind=st.sampled_from(["object", "StringDType", "U", "arrow", "lazy"]),
    compression=st.sampled_from([None, "gzip", "zstd"]),
)
def test_write_strings_writes_what_write_array_writes(
    values: list[str], chunks: int, kind: str, compression: str | None, tmp_path_factory: Any
) -> None:
    if kind == "U":
        values = [v.rstrip("\0") for v in values]  # numpy U drops trailing NULs
    objects = np.array(values, dtype=object)
    data: Any = {
        "object": objects,
        "StringDType": np.array(values, dtype=np.dtypes.StringDType()),
        "U": np.array(values, dtype=str) if values else np.array([], dtype="U1"),
        "arrow": Utf8Strings.from_arrow(pa.array(values, type=pa.string())),
        "lazy": LazyRows(len(values), objects.dtype, lambda a, b: objects[a:b]),
    }[kind]
    assert_written_like_write_array(tmp_path_factory.mktemp("w"), data, values, chunks, compression)


VALUES = ["99999", "100000", "100001"]  # as RowNumbers(3, 99999, 1) gives them
"""Strings whose first chunk of two is 23 bytes as vlen-utf8: one byte over the lowered limit."""


@pytest.fixture
def low_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """MAX_CHUNK_BYTES lowered to 22 bytes for writing, as if the strings took over 2 GiB."""
    monkeypatch.setattr(writing_module, "MAX_CHUNK_BYTES", 22)
    return 22


@pytest.mark.parametrize("kind", ["object", "StringDType", "U", "arrow", "lazy", "numbers"])
def test_write_strings_refuses_a_chunk_beyond_max_chunk_bytes(
    kind: str, low_limit: int, tmp_path: Path
) -> None:
    objects = np.array(VALUES, dtype=object)
    data: Any = {
        "object": objects,
        "StringDType": np.array(VALUES, dtype=np.dtypes.StringDType()),
        "U": np.array(VALUES, dtype=str),
        "arrow": Utf8Strings.from_arrow(pa.array(VALUES, type=pa.string())),
        "lazy": LazyRows(len(VALUES), objects.dtype, lambda a, b: objects[a:b]),
        "numbers": RowNumbers(3, 99999, 1),
    }[kind]
    path = tmp_path / "s"
    problem = f"chunk c/0 of the Zarr array {path} would take 23 bytes.* \\({low_limit}\\)"
    with pytest.raises(InputError, match=problem):
        write_strings(path, data, chunks=2, compression="gzip", level=None, attributes={})
    assert not (path / "zarr.json").exists()


def test_a_table_with_a_chunk_beyond_max_chunk_bytes_is_not_written(
    low_limit: int, tmp_path: Path
) -> None:
    table = pa.table({"s": VALUES, "n": [1, 2, 3]})
    with pytest.raises(InputError, match=r"chunk c/0 of the Zarr array .* would take 23 bytes"):
        write_table(table, tmp_path / "t", chunks=2)
    assert list(tmp_path.iterdir()) == []
    write_table(table, tmp_path / "t", chunks=1)
    assert read_table(tmp_path / "t", backend="pyarrow")["s"].to_pylist() == VALUES


# read_strings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [1, 3, 64])
def test_read_strings_reads_what_numpy_reads(chunks: int, tmp_path: Path) -> None:
    values = ["", "a", "", "", "", "", "bé", "x\0", "", "", "", "😀" * 3, "end"]
    write_array(tmp_path / "s", np.array(values, dtype=object), chunks=(chunks,))
    array = open_array(tmp_path / "s")
    strings = read_strings(array)
    assert strings[0 : len(values)].tolist() == values
    assert np.asarray(array).tolist() == values
    assert strings.to_arrow().to_pylist() == values


def test_read_strings_of_an_empty_array(tmp_path: Path) -> None:
    write_array(tmp_path / "s", np.array([], dtype=object), chunks=(4,))
    assert read_strings(open_array(tmp_path / "s")).to_arrow().to_pylist() == []


def not_utf8(tmp_path: Path, chunks: int) -> Path:
    """A string array of ["ab", "cd"] whose last chunk's last byte is not UTF-8."""
    values = np.array(["ab", "cd"], dtype=object)
    write_array(tmp_path / "s", values, chunks=(chunks,), compression=None)
    chunk = tmp_path / "s" / "c" / str(2 // chunks - 1)
    data = bytearray(chunk.read_bytes())
    data[-1] = 0xFF
    chunk.write_bytes(bytes(data))
    return tmp_path / "s"


def test_read_strings_checks_the_chunks(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"c/1: a vlen-utf8 item is not valid UTF-8"):
        read_strings(open_array(not_utf8(tmp_path, chunks=1)))


@pytest.mark.parametrize("use", ["to_list", "to_str", "to_arrow", "take"])
def test_read_strings_of_one_chunk_checks_the_items_when_they_are_used(
    tmp_path: Path, use: str
) -> None:
    strings = read_strings(open_array(not_utf8(tmp_path, chunks=2)))
    buffer = strings.buffer  # kept where the chunk holds them, each after its length field
    assert isinstance(buffer, _utf8.SpacedUtf8Buffer)
    source, starts, gap = buffer.located()
    assert (gap, starts.tolist(), source[starts].tobytes()) == (4, [4, 10], b"ac")
    assert buffer.item(0) == b"ab"  # found (an id, say) without joining
    if use == "take":  # the bytes as stored, not checked
        assert buffer.take(np.array([1])).to_list() == [b"c\xff"]
        use = "check"  # which a reader calls where that matters (ids)
    with pytest.raises(FormatError, match=r"c/0: a vlen-utf8 item is not valid UTF-8"):
        getattr(buffer, use)()


def test_strings_of_one_chunk_that_are_ascii_are_checked_without_joining(tmp_path: Path) -> None:
    write_array(tmp_path / "s", np.array(["ab", "cd"], dtype=object), chunks=(2,))
    buffer = read_strings(open_array(tmp_path / "s")).buffer
    buffer.check()
    assert buffer.located()[2] == 4  # still where the chunk holds them
    assert buffer.to_list() == [b"ab", b"cd"]
    assert buffer.located()[2] == 0  # joined once used


@pytest.mark.interop
def test_read_strings_of_sharded_arrays(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    values = [f"s{i}" if i % 5 else "" for i in range(1003)]
    values[256:512] = [""] * 256  # an inner chunk and a whole shard of fill values
    array = zarr.create_array(
        tmp_path / "s", shape=(1003,), chunks=(64,), shards=(256,), dtype=str, fill_value=""
    )
    array[:] = np.array(values, dtype=object)
    assert read_strings(open_array(tmp_path / "s"))[0:1003].tolist() == values


# tables -------------------------------------------------------------------------------------


def test_polars_without_pyarrow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    frame = pl.DataFrame({"s": ["a", None, "é" * 3, ""], "n": [1, 2, 3, 4]})
    write_table(frame, tmp_path / "with", chunks=3)
    monkeypatch.setattr(backends, "_has_pyarrow", lambda: False)
    write_table(frame, tmp_path / "without", chunks=3)
    assert files(tmp_path / "with") == files(tmp_path / "without")
    result = read_table(tmp_path / "without", backend="polars")
    assert result.equals(frame)


def test_string_views_with_missing_values(tmp_path: Path) -> None:
    table = pa.table(
        {"v": pa.array(["a", None, "a string longer than twelve"], type=pa.string_view())}
    )
    write_table(table, tmp_path / "t")
    result = read_table(tmp_path / "t", backend="pyarrow")
    assert result.column("v").type == pa.string()
    assert result.column("v").to_pylist() == ["a", None, "a string longer than twelve"]
