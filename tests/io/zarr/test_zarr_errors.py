"""Every refusal and corruption the spec names: exception type, the problem and the path.

Stores are built by hand (zarr.json and chunk files), so each test shows exactly what is wrong.
"""

from __future__ import annotations

import json
import os
import re
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from special_files import SPECIAL_FILES, make_special, without_blocking

from cytepool.errors import (
    FormatError,
    InputError,
    StoreChangedError,
    UnsupportedFeatureError,
)
from cytepool.io.zarr import (
    MAX_CHUNK_BYTES,
    METADATA_FILE,
    node_type,
    open_array,
    read_group_attributes,
    write_array,
    write_group,
)
from cytepool.io.zarr.codecs import import_zstd
from cytepool.io.zarr.consolidated import write_consolidated_group
from cytepool.io.zarr.sharding import crc32c
from cytepool.io.zarr.strings import write_strings

zstd = import_zstd()
LE = {"name": "bytes", "configuration": {"endian": "little"}}
GZIP = {"name": "gzip", "configuration": {"level": 1}}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
EMPTY = 2**64 - 1
GRID_2D = {"name": "regular", "configuration": {"chunk_shape": [4, 2]}}


def array_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "shape": [8],
        "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [LE],
        "attributes": {},
        "zarr_format": 3,
        "node_type": "array",
    }
    doc.update(changes)
    return doc


def make(path: Path, text: str | dict[str, Any], chunks: dict[str, bytes] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    body = text if isinstance(text, str) else json.dumps(text)
    (path / METADATA_FILE).write_text(body)
    for key, data in (chunks or {}).items():
        (path / key).parent.mkdir(parents=True, exist_ok=True)
        (path / key).write_bytes(data)
    return path


def raises_naming(error: type[Exception], problem: str, path: Path) -> Any:
    """pytest.raises that also checks that the message names the path."""

    class Context:
        def __enter__(self) -> None:
            self.inner = pytest.raises(error, match=problem)
            self.info = self.inner.__enter__()

        def __exit__(self, *exc: Any) -> bool:
            handled = self.inner.__exit__(*exc)
            assert str(path) in str(self.info.value), str(self.info.value)
            return bool(handled)

    return Context()


# ---------------------------------------------------------------------------------------------
# Missing, wrong kind, v2


def test_no_metadata(tmp_path: Path) -> None:
    for call in (open_array, read_group_attributes, node_type):
        with raises_naming(FileNotFoundError, "no Zarr v3 metadata", tmp_path / "none"):
            call(tmp_path / "none")
    (tmp_path / "file").write_text("x")
    with raises_naming(FileNotFoundError, "no Zarr v3 metadata", tmp_path / "file"):
        open_array(tmp_path / "file")


@pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="POSIX symlinks")
def test_symbolic_link_loops(tmp_path: Path) -> None:
    """A loop at the store's directory was a plain OSError (ELOOP); it is a FormatError that
    says so, as a loop at zarr.json or a chunk is."""
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    problem = "cannot be opened as a store: a symbolic link loop"
    for call in (open_array, read_group_attributes, node_type):
        with raises_naming(FormatError, problem, loop):
            call(loop)
        with raises_naming(FormatError, problem, loop / "inner"):
            call(loop / "inner")
    write_array(tmp_path / "a", np.arange(4), chunks=(2,))
    (tmp_path / "a" / "c" / "1").unlink()
    os.symlink(tmp_path / "a" / "c" / "1", tmp_path / "a" / "c" / "1")
    with raises_naming(FormatError, "cannot be read: a symbolic link loop", tmp_path / "a/c/1"):
        open_array(tmp_path / "a")[...]
    (tmp_path / "a" / METADATA_FILE).unlink()
    os.symlink(tmp_path / "a" / METADATA_FILE, tmp_path / "a" / METADATA_FILE)
    with raises_naming(FormatError, "cannot be read: a symbolic link loop", tmp_path / "a"):
        open_array(tmp_path / "a")


@pytest.mark.parametrize("name", [".zarray", ".zgroup"])
def test_zarr_v2_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("{}")
    for call in (open_array, read_group_attributes, node_type):
        with raises_naming(FormatError, f"Zarr v2 node \\({name}\\)", tmp_path):
            call(tmp_path)


def test_v2_document_in_zarr_json(tmp_path: Path) -> None:
    path = make(tmp_path / "a", {"zarr_format": 2, "node_type": "group"})
    with raises_naming(FormatError, "zarr_format must be 3", path):
        read_group_attributes(path)


def test_array_and_group_mixups(tmp_path: Path) -> None:
    write_group(tmp_path / "g")
    write_array(tmp_path / "a", np.arange(3), chunks=(3,))
    with raises_naming(FormatError, "is a Zarr group, not an array", tmp_path / "g"):
        open_array(tmp_path / "g")
    with raises_naming(FormatError, "is a Zarr array, not a group", tmp_path / "a"):
        read_group_attributes(tmp_path / "a")


def test_metadata_that_is_not_a_regular_file(tmp_path: Path, special: str) -> None:
    target = tmp_path / "a" / METADATA_FILE
    make_special(target, special)
    problem = f"is not a regular file: it is {SPECIAL_FILES[special]}"
    for call in (open_array, read_group_attributes, node_type):
        with raises_naming(FormatError, problem, target):
            without_blocking(lambda call=call: call(tmp_path / "a"), target)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_chunk_that_is_not_a_regular_file(tmp_path: Path, special: str, compression: Any) -> None:
    write_array(tmp_path / "a", np.arange(1, 9), chunks=(4,), compression=compression)
    target = tmp_path / "a" / "c" / "1"
    make_special(target, special)
    array = open_array(tmp_path / "a")
    assert array[:4].tolist() == [1, 2, 3, 4]
    problem = f"is not a regular file: it is {SPECIAL_FILES[special]}"
    for read in (lambda: array[...], lambda: array.oindex[[5]], lambda: np.asarray(array)):
        with raises_naming(FormatError, problem, target):
            without_blocking(read, target)


# ---------------------------------------------------------------------------------------------
# Invalid documents


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"zarr_format": 3, "zarr_format": 3, "node_type": "group"}', "repeated key"),
        ('{"zarr_format": 3, "node_type": "group", "attributes": {"x": NaN}}', "NaN"),
        ('{"zarr_format": 3, "node_type": "group", "attributes": {"x": Infinity}}', "Infinity"),
        ('{"zarr_format": 3, "node_type": "group"', "not valid JSON"),
        ("[]", "the document must be a JSON object"),
        ("", "not valid JSON"),
        ('{"zarr_format": 3, "node_type": "group", "extra": 1}', "field 'extra'"),
        ('{"zarr_format": 3, "node_type": "group", "attributes": 1}', "attributes must be"),
    ],
)
def test_invalid_group_documents(tmp_path: Path, text: str, problem: str) -> None:
    path = make(tmp_path / "g", text)
    with raises_naming(FormatError, problem, path):
        read_group_attributes(path)
    with raises_naming(FormatError, problem, path):
        node_type(path)


@pytest.mark.parametrize(
    ("change", "error", "problem"),
    [
        ({"data_type": "float128"}, UnsupportedFeatureError, "data type 'float128'"),
        (
            {"data_type": {"name": "fixed_length_utf32", "configuration": {"length_bytes": 4}}},
            UnsupportedFeatureError,
            "data type 'fixed_length_utf32'",
        ),
        (
            {"codecs": [LE, {"name": "blosc", "configuration": {"cname": "lz4"}}]},
            UnsupportedFeatureError,
            "codec 'blosc'",
        ),
        (
            {"codecs": [{"name": "transpose", "configuration": {"order": [0]}}, LE]},
            UnsupportedFeatureError,
            "codec 'transpose'",
        ),
        ({"codecs": [LE, {"name": "crc32c"}]}, UnsupportedFeatureError, "crc32c"),
        (
            {"chunk_grid": {"name": "rectilinear", "configuration": {"chunk_shapes": [[4]]}}},
            UnsupportedFeatureError,
            "chunk grid 'rectilinear'",
        ),
        (
            {"storage_transformers": [{"name": "manifest", "configuration": {}}]},
            UnsupportedFeatureError,
            "storage transformers \\['manifest'\\]",
        ),
        (
            {"chunk_key_encoding": {"name": "flat"}},
            UnsupportedFeatureError,
            "chunk key encoding 'flat'",
        ),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2**29 + 1]}}},
            UnsupportedFeatureError,
            "MAX_CHUNK_BYTES",
        ),
        ({"fill_value": "0x00"}, FormatError, "fill_value '0x00' is not valid for int32"),
        ({"fill_value": 2**31}, FormatError, "fill_value 2147483648"),
        ({"codecs": [GZIP, LE]}, FormatError, "first codec must turn an array into bytes"),
        ({"codecs": [{"name": "bytes"}]}, FormatError, "needs an endian for int32"),
        ({"shape": [8, 1]}, FormatError, "chunk_shape must be a list of 2"),
        ({"unknown": {"must_understand": True}}, FormatError, "field 'unknown'"),
        ({"dimension_names": "x"}, FormatError, "dimension_names"),
    ],
)
def test_invalid_or_unsupported_arrays(
    tmp_path: Path, change: dict[str, Any], error: type[Exception], problem: str
) -> None:
    path = make(tmp_path / "a", array_doc(**change))
    with raises_naming(error, problem, path):
        open_array(path)
    with raises_naming(error, problem, path):
        node_type(path)


def test_max_chunk_bytes_counts_the_decoded_chunk(tmp_path: Path) -> None:
    chunk = MAX_CHUNK_BYTES // 4
    ok = array_doc(chunk_grid={"name": "regular", "configuration": {"chunk_shape": [chunk]}})
    assert open_array(make(tmp_path / "ok", ok)).chunks == (chunk,)
    strings = array_doc(
        data_type="string",
        fill_value="",
        codecs=[{"name": "vlen-utf8"}],
        chunk_grid={"name": "regular", "configuration": {"chunk_shape": [chunk + 1]}},
    )
    with pytest.raises(UnsupportedFeatureError, match="MAX_CHUNK_BYTES"):
        open_array(make(tmp_path / "s", strings))


# ---------------------------------------------------------------------------------------------
# Corrupt chunks


def numbers(*values: int) -> bytes:
    return np.array(values, dtype="<i4").tobytes()


GOOD = numbers(1, 2, 3, 4)


@pytest.mark.parametrize(
    ("codecs", "data", "problem"),
    [
        ([LE], GOOD[:-1], "it has 15 bytes, expected exactly 16"),
        ([LE], GOOD + b"\0", "it has 17 bytes, expected exactly 16"),
        ([LE, GZIP], b"", "the gzip stream is truncated"),
        ([LE, GZIP], zlib.compress(GOOD, 1, wbits=31)[:-3], "truncated"),
        ([LE, GZIP], zlib.compress(GOOD, 1, wbits=31) + b"xx", "trailing bytes|invalid gzip"),
        ([LE, GZIP], zlib.compress(GOOD[:12], 1, wbits=31), "it decodes to 12 bytes, expected 16"),
        ([LE, GZIP], zlib.compress(GOOD * 2, 1, wbits=31), "more bytes than a valid chunk holds"),
        ([LE, GZIP], zlib.compress(GOOD, 1), "invalid gzip data"),  # zlib, not gzip
        ([LE, GZIP], zstd.compress(GOOD), "invalid gzip data"),
        ([LE, ZSTD], zlib.compress(GOOD, 1, wbits=31), "invalid zstd data"),
        ([LE, ZSTD], zstd.compress(GOOD)[:-1], "truncated"),
        ([LE, ZSTD], zstd.compress(GOOD[:8]), "it decodes to 8 bytes, expected 16"),
        ([LE, ZSTD], zstd.compress(GOOD * 3), "more bytes than a valid chunk holds"),
        ([LE, ZSTD, GZIP], zlib.compress(zstd.compress(GOOD)[:-2], 1, wbits=31), "zstd"),
        (
            [LE, GZIP],
            zlib.compress(b"", 1, wbits=31) * 1024 + zlib.compress(GOOD, 1, wbits=31),
            "more than 1024 gzip members",
        ),
        ([LE, ZSTD], zstd.compress(b"") * 1024 + zstd.compress(GOOD), "more than 1024 zstd"),
    ],
)
def test_corrupt_numeric_chunks(
    tmp_path: Path, codecs: list[Any], data: bytes, problem: str, inflate: str
) -> None:
    path = make(tmp_path / "a", array_doc(codecs=codecs), {"c/0": data})
    with raises_naming(FormatError, problem, path / "c/0"):
        open_array(path)[...]


def test_checksums_are_verified(tmp_path: Path, inflate: str) -> None:
    member = bytearray(zlib.compress(GOOD, 1, wbits=31))
    member[-8] ^= 1  # CRC32
    path = make(tmp_path / "g", array_doc(codecs=[LE, GZIP]), {"c/0": bytes(member)})
    with raises_naming(FormatError, "incorrect data check", path / "c/0"):
        open_array(path)[0]
    member[-8] ^= 1
    member[-4] ^= 1  # ISIZE
    path = make(tmp_path / "i", array_doc(codecs=[LE, GZIP]), {"c/0": bytes(member)})
    with raises_naming(FormatError, "incorrect length check", path / "c/0"):
        open_array(path)[0]
    options = {zstd.CompressionParameter.checksum_flag: 1}
    frame = bytearray(zstd.compress(GOOD, options=options))
    frame[-1] ^= 1
    path = make(tmp_path / "z", array_doc(codecs=[LE, ZSTD]), {"c/0": bytes(frame)})
    with raises_naming(FormatError, "invalid zstd data", path / "c/0"):
        open_array(path)[0]


def test_bool_bytes(tmp_path: Path) -> None:
    doc = array_doc(data_type="bool", fill_value=False, codecs=[{"name": "bytes"}])
    path = make(tmp_path / "b", doc, {"c/1": b"\x00\x01\xff\x00"})
    with raises_naming(FormatError, "a bool chunk holds a byte other than 0 and 1", path / "c/1"):
        open_array(path)[...]


def vlen(*items: bytes, count: int | None = None) -> bytes:
    parts = [(len(items) if count is None else count).to_bytes(4, "little")]
    for item in items:
        parts += [len(item).to_bytes(4, "little"), item]
    return b"".join(parts)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (vlen(b"a", b"b", b"c"), "holds 3 items, expected 2"),
        (vlen(b"a", b"b")[:-1], "item 1 claims 1 bytes, only 0 remain"),
        (vlen(b"a", count=2), "truncated in the length of item 1"),
        (vlen(b"a", b"b") + b"!", "1 trailing bytes"),
        (vlen(b"a", b"\xc3"), "not valid UTF-8"),
        (b"\x02", "truncated: 1 bytes"),
        (vlen(b"a", count=2) + b"\xff\xff\xff\x7f", "claims 2147483647 bytes"),
    ],
)
def test_corrupt_string_chunks(tmp_path: Path, data: bytes, problem: str) -> None:
    doc = array_doc(
        shape=[3],
        data_type="string",
        fill_value="",
        chunk_grid={"name": "regular", "configuration": {"chunk_shape": [2]}},
        codecs=[{"name": "vlen-utf8", "configuration": {}}, GZIP],
    )
    path = make(tmp_path / "s", doc, {"c/1": zlib.compress(data, 1, wbits=31)})
    with raises_naming(FormatError, problem, path / "c/1"):
        open_array(path)[...]
    uncompressed = make(tmp_path / "u", dict(doc, codecs=doc["codecs"][:1]), {"c/1": data})
    with raises_naming(FormatError, problem, uncompressed / "c/1"):
        open_array(uncompressed)[2]


def test_chunk_key_through_a_file(tmp_path: Path) -> None:
    path = make(tmp_path / "a", array_doc(shape=[8, 2], chunk_grid=GRID_2D), {"c/0": b"x"})
    with raises_naming(FormatError, "a part of its path is not a directory", path / "c/0/0"):
        open_array(path)[0]


def test_store_changed_is_a_runtime_error(tmp_path: Path) -> None:
    path = make(tmp_path / "a", array_doc())
    array = open_array(path)
    make(path, array_doc(fill_value=5))
    with raises_naming(StoreChangedError, "changed since it was opened", path):
        array[...]
    assert issubclass(StoreChangedError, RuntimeError)


# ---------------------------------------------------------------------------------------------
# Shards


def shard_doc(location: str = "end", crc: bool = True, inner: list[Any] | None = None) -> Any:
    index_codecs: list[Any] = [LE, {"name": "crc32c"}] if crc else [LE]
    config = {
        "chunk_shape": [2],
        "codecs": inner or [LE],
        "index_codecs": index_codecs,
        "index_location": location,
    }
    return array_doc(codecs=[{"name": "sharding_indexed", "configuration": config}])


def shard(
    chunks: list[bytes | None],
    location: str = "end",
    crc: bool = True,
    entries: list[tuple[int, int]] | None = None,
) -> bytes:
    """A shard of inner chunks (None = empty); ``entries`` overrides the index."""
    index_size = 16 * len(chunks) + (4 if crc else 0)
    offset = index_size if location == "start" else 0
    data, index = b"", []
    for chunk in chunks:
        if chunk is None:
            index.append((EMPTY, EMPTY))
        else:
            index.append((offset + len(data), len(chunk)))
            data += chunk
    raw = b"".join(struct.pack("<QQ", *entry) for entry in (entries or index))
    if crc:
        raw += struct.pack("<I", crc32c(raw))
    return raw + data if location == "start" else data + raw


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("crc", [True, False])
def test_hand_made_shards_read(tmp_path: Path, location: str, crc: bool) -> None:
    chunks = {"c/0": shard([numbers(1, 2), None], location, crc)}
    path = make(tmp_path / "a", shard_doc(location, crc), chunks)
    assert open_array(path)[...].tolist() == [1, 2, 0, 0, 0, 0, 0, 0]
    assert open_array(path)[1] == 2


def test_shards_with_compressed_inner_chunks(tmp_path: Path) -> None:
    inner = [numbers(5, 6), zlib.compress(numbers(7, 8), 1, wbits=31)]
    doc = shard_doc(inner=[LE, GZIP])
    path = make(
        tmp_path / "a", doc, {"c/1": shard([zlib.compress(numbers(5, 6), 1, wbits=31), inner[1]])}
    )
    assert open_array(path)[...].tolist() == [0, 0, 0, 0, 5, 6, 7, 8]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\0" * 35, "the file has 35 bytes, fewer than its index of 36 bytes"),
        (b"", "fewer than its index"),
        (shard([numbers(1, 2), None], entries=[(0, 8), (EMPTY, 8)]), "entry 1 is half empty"),
        (shard([numbers(1, 2), None], entries=[(0, 8), (0, EMPTY)]), "entry 1 is half empty"),
        (shard([numbers(1, 2), None], entries=[(1, 8), (EMPTY, EMPTY)]), "lies outside the data"),
        (shard([numbers(1, 2), None], entries=[(2**63, 8), (EMPTY, EMPTY)]), "lies outside"),
        (shard([numbers(1, 2), None], entries=[(0, 2**64 - 2), (EMPTY, EMPTY)]), "lies outside"),
        (
            shard([numbers(1, 2), numbers(3, 4)], entries=[(0, 8), (4, 8)]),
            "inner chunks 0 and 1 overlap",
        ),
        (
            shard([numbers(1, 2) * 2, None], entries=[(0, 16), (EMPTY, EMPTY)]),
            "inner chunk 0 has 16 bytes, more than any valid encoding \\(8\\)",
        ),
    ],
)
def test_malformed_shards(tmp_path: Path, data: bytes, problem: str) -> None:
    path = make(tmp_path / "a", shard_doc(), {"c/0": data})
    with raises_naming(FormatError, problem, path / "c/0"):
        open_array(path)[0]


def test_shard_index_checksum(tmp_path: Path) -> None:
    data = bytearray(shard([numbers(1, 2), numbers(3, 4)]))
    data[-20] ^= 1  # inside the index
    path = make(tmp_path / "a", shard_doc(), {"c/0": bytes(data)})
    with raises_naming(FormatError, "index checksum \\(CRC-32C\\)", path / "c/0"):
        open_array(path)[0]
    start = bytearray(shard([numbers(1, 2), numbers(3, 4)], "start"))
    start[32] ^= 0xFF  # the CRC itself
    path = make(tmp_path / "b", shard_doc("start"), {"c/0": bytes(start)})
    with raises_naming(FormatError, "index checksum", path / "c/0"):
        open_array(path)[0]


def test_corrupt_inner_chunk_names_it(tmp_path: Path) -> None:
    path = make(tmp_path / "a", shard_doc(), {"c/0": shard([numbers(1), numbers(1, 2)])})
    with raises_naming(FormatError, r"inner chunk 0\).*4 bytes, expected exactly 8", path / "c/0"):
        open_array(path)[0]
    assert open_array(path)[2] == 1  # the other inner chunk is fine and read alone


# ---------------------------------------------------------------------------------------------
# Writing


def test_write_refusals(tmp_path: Path) -> None:
    data = np.arange(4.0)
    write_array(tmp_path / "a", data, chunks=(2,))
    with pytest.raises(FileExistsError):
        write_array(tmp_path / "a", data, chunks=(2,))
    with pytest.raises(FileNotFoundError):
        write_array(tmp_path / "no" / "a", data, chunks=(2,))
    write_group(tmp_path / "g")
    with pytest.raises(FileExistsError, match=r"already has a zarr\.json"):
        write_group(tmp_path / "g")
    with pytest.raises(FileNotFoundError):
        write_group(tmp_path / "no" / "g")


class Rows:
    def __init__(self, data: Any, shape: Any = None, dtype: Any = None):
        self.data = data
        self.shape = data.shape if shape is None else shape
        self.dtype = data.dtype if dtype is None else dtype

    def __getitem__(self, key: Any) -> Any:
        return self.data[key]


@pytest.mark.parametrize(
    ("data", "kwargs", "error", "problem"),
    [
        ([1, 2], {}, TypeError, "must have a shape and a numpy dtype"),
        (np.ma.masked_array([1, 2]), {}, TypeError, "masked array"),
        (Rows(np.ma.masked_array([1, 2])), {}, TypeError, "masked array"),
        (np.array([b"x"]), {}, TypeError, "data type \\|S1 is not one of the Zarr data types"),
        (np.zeros(2, dtype="i4,i4"), {}, TypeError, "not one of the Zarr data types"),
        (np.array(["x", 1], dtype=object), {}, TypeError, "holds a int: 1"),
        (np.array(["x"], dtype=np.dtypes.StringDType(na_object=None)), {}, TypeError, "missing"),
        (Rows(np.zeros((2, 2)), shape=(2, 3)), {"chunks": (1, 1)}, ValueError, "of shape"),
        (Rows(np.zeros(2), dtype=np.dtype("i4")), {}, ValueError, "of dtype float64, expected"),
        (Rows(np.zeros(2, dtype="f4")), {"chunks": [1.0]}, TypeError, "chunks must hold int"),
        (np.zeros(2), {"chunks": 2}, TypeError, "chunks must be a sequence"),
        (np.zeros(2), {"chunks": (0,)}, ValueError, "positive lengths"),
        (np.zeros(2), {"chunks": (1, 1)}, ValueError, "1 positive lengths"),
        (np.zeros(2), {"chunks": (2**28 + 1,)}, ValueError, "more than MAX_CHUNK_BYTES"),
        (np.zeros(2), {"compression": "lz4"}, ValueError, "'gzip', 'zstd' or None"),
        (np.zeros(2), {"level": 12}, ValueError, "gzip level must be from 0 to 9"),
        (np.zeros(2), {"attributes": {"x": np.nan}}, ValueError, "not JSON compliant"),
        (np.zeros(2), {"attributes": {"x": object()}}, TypeError, "not JSON serializable"),
        (np.zeros(2), {"attributes": {1: 2}}, TypeError, "attribute names must be strings"),
        (np.zeros(2), {"attributes": [1]}, TypeError, "attributes must be a mapping"),
        (np.zeros(2), {"dimension_names": ["x", "y"]}, ValueError, "needs 1 entries"),
        (np.zeros(2), {"dimension_names": [1]}, TypeError, "strings or None"),
        (np.zeros(2), {"dimension_names": "x"}, TypeError, "must be a sequence"),
    ],
)
def test_write_array_argument_errors(
    tmp_path: Path, data: Any, kwargs: dict[str, Any], error: type[Exception], problem: str
) -> None:
    kwargs = {"chunks": (1,), **kwargs}
    with pytest.raises(error, match=problem):
        write_array(tmp_path / "a", data, **kwargs)
    if error is TypeError and "chunks" not in problem and "Rows" not in repr(data):
        return
    assert not (tmp_path / "a" / METADATA_FILE).exists()


@pytest.mark.parametrize(
    ("attributes", "where"),
    [
        ({"a": {1: "one", "1": "ONE", None: "n"}}, r"attributes\['a'\]\[1\]"),
        ({"a": {"b": [0, {None: "n"}]}}, r"attributes\['a'\]\['b'\]\[1\]\[None\]"),
        ({"a": ({(1, 2): 3},)}, r"attributes\['a'\]\[0\]\[\(1, 2\)\]"),
        ({2.5: "x"}, r"attributes\[2.5\]"),
    ],
)
@pytest.mark.parametrize("write", ["array", "group", "consolidated"])
def test_attribute_keys_must_be_strings_at_any_depth(
    tmp_path: Path, attributes: dict[Any, Any], where: str, write: str
) -> None:
    """A key that is not a string, at any depth, is refused naming its path: JSON made nested
    ones strings silently ({1: "one", "1": "ONE"} was written as {"1": "ONE"})."""
    match = rf"attribute names must be strings, found .* at {where}; turn the key into a string"
    data = np.zeros(2)
    writers = {
        "array": lambda: write_array(tmp_path / "g", data, chunks=(1,), attributes=attributes),
        "group": lambda: write_group(tmp_path / "g", attributes),
        "consolidated": lambda: write_consolidated_group(tmp_path, attributes),
    }
    with pytest.raises(TypeError, match=match):
        writers[write]()
    assert not (tmp_path / "g" / METADATA_FILE).exists()
    assert not (tmp_path / METADATA_FILE).exists()


@pytest.mark.parametrize(
    ("data", "chunks", "index", "flat"),
    [
        (np.array(["ok", "x", "y", "a\ud800b"], dtype=object), (3,), "3", 3),
        (np.array(["ok"] * 5 + ["\udfff"]), (2,), "5", 5),  # numpy "U" strings
        (np.array([["x", "y", "z"], ["w", "v", "a\ud800"]], dtype=object), (1, 2), r"\(1, 2\)", 5),
        (np.array("q\ud800", dtype=object), (), r"\(\)", 0),
    ],
)
def test_strings_with_a_lone_surrogate_are_refused(
    tmp_path: Path, data: np.ndarray[Any, Any], chunks: tuple[int, ...], index: str, flat: int
) -> None:
    """A str holding a lone surrogate raised a bare UnicodeEncodeError naming no path; it is
    an InputError (a ValueError, as UnicodeEncodeError is) naming the array and the index."""
    problem = r"surrogate \('\\ud[8-f]..' at character \d\); strings must be valid Unicode"
    match = rf"cannot write the string array .*: the string at index {index} holds a lone {problem}"
    with raises_naming(InputError, match, tmp_path / "s"):
        write_array(tmp_path / "s", data, chunks=chunks)
    assert not (tmp_path / "s" / METADATA_FILE).exists()
    match = rf"cannot write the string array .*: the string at index {flat} holds a lone {problem}"
    with raises_naming(InputError, match, tmp_path / "w"):
        write_strings(tmp_path / "w", data.reshape(-1), chunks=2)


class _Rows:
    """Strings that say they hold 5 rows but give one per slice (``utf8``: through the path
    of a UTF-8 buffer's rows)."""

    def __init__(self, utf8: bool) -> None:
        if utf8:
            self.utf8 = lambda start, stop: (np.array([1]), np.frombuffer(b"b", np.uint8))

    def __len__(self) -> int:
        return 5

    def __getitem__(self, key: Any) -> np.ndarray[Any, Any]:
        return np.array(["a"])


@pytest.mark.parametrize(
    ("rows", "given"),
    [
        (_Rows(utf8=False), r"rows\[0:2\] gave shape \(1,\)"),
        (_Rows(utf8=True), r"rows\.utf8\(0, 2\) gave shape \(1,\)"),
        (np.array([1, 2, 3]), r"data gave rows \(0, 2\) of dtype int64, expected strings"),
        (np.array(["a", None], dtype=object), "an object array to write as strings holds a None"),
    ],
)
def test_write_strings_refuses_rows_that_are_not_what_they_say(
    tmp_path: Path, rows: Any, given: str
) -> None:
    """Rows giving fewer rows than their length were stored padded with "" (a silently wrong
    array), and non-str objects raised a bare TypeError naming nothing."""
    with pytest.raises(ValueError if "gave" in given else TypeError, match=given):
        write_strings(tmp_path / "s", rows, chunks=2)
    assert not (tmp_path / "s" / METADATA_FILE).exists()


@pytest.mark.parametrize(
    ("attributes", "where"),
    [
        ({"note": "x\ud800"}, "attributes['note'] ('x\\ud800')"),
        ({"a\udfff": 1}, "the key 'a\\udfff' of attributes"),
        ({"n": [1, {"deep": "\ud800"}]}, "attributes['n'][1]['deep'] ('\\ud800')"),
    ],
)
def test_attributes_with_a_lone_surrogate_are_refused(
    tmp_path: Path, attributes: dict[str, Any], where: str
) -> None:
    """cytepool wrote them as JSON escapes of unpaired surrogates, which tensorstore refuses
    to open ("Invalid JSON"); emoji (surrogate pairs) are written as before."""
    match = re.escape(f"attributes: {where} holds a lone surrogate")
    with pytest.raises(InputError, match=match):
        write_array(tmp_path / "a", np.arange(3), chunks=(3,), attributes=attributes)
    with pytest.raises(InputError, match=match):
        write_group(tmp_path / "g", attributes)
    with pytest.raises(InputError, match=re.escape("dimension_names: 'x\\ud800' holds a lone")):
        write_array(tmp_path / "d", np.arange(3), chunks=(3,), dimension_names=["x\ud800"])
    assert not any(tmp_path.iterdir())
    write_array(tmp_path / "ok", np.arange(3), chunks=(3,), attributes={"🧬": "🧬"})
    assert open_array(tmp_path / "ok").attributes == {"🧬": "🧬"}


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def test_attributes_nested_past_the_recursion_limit_read_back(tmp_path: Path) -> None:
    """A zarr.json whose attributes nest deeper than a recursive copy can go (JSON the parser
    takes: past the recursion limit, or 3/4 of it under Python 3.11, whose parser counts its
    levels against it and whose copy spends two frames a level) gave a bare RecursionError from
    ``attributes``; they read back whole."""
    limit = sys.getrecursionlimit()
    depth = 3 * limit // 4 if sys.version_info < (3, 12) else limit + 200
    write_array(tmp_path / "a", np.arange(3), chunks=(2,))
    path = tmp_path / "a" / METADATA_FILE
    document = json.loads(path.read_text())
    text = json.dumps({**document, "attributes": {"x": "@"}})
    path.write_text(text.replace('"@"', "[" * depth + "]" * depth))
    assert open_array(tmp_path / "a").attributes == {"x": _nested(depth - 1)}


def test_attributes_too_deep_to_write_are_refused_or_read_back(tmp_path: Path) -> None:
    """Attributes nested 3,000 deep: Python 3.11's JSON encoder cannot write them (a bare
    RecursionError, now InputError); later Pythons write them, and they read back whole."""
    attributes = {"x": _nested(3000)}
    if sys.version_info < (3, 12):
        for write in (
            lambda: write_group(tmp_path / "g", attributes),
            lambda: write_array(tmp_path / "a", np.arange(3), chunks=(2,), attributes=attributes),
        ):
            with pytest.raises(InputError, match="attributes nest too deeply to be written as"):
                write()
        assert not any(tmp_path.iterdir())
        return
    write_group(tmp_path / "g", attributes)
    write_array(tmp_path / "a", np.arange(3), chunks=(2,), attributes=attributes)
    assert read_group_attributes(tmp_path / "g") == attributes
    assert open_array(tmp_path / "a").attributes == attributes


def test_write_group_attribute_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_group(tmp_path / "g", {"x": float("inf")})
    with pytest.raises(TypeError, match="not JSON serializable"):
        write_group(tmp_path / "g", {"x": {1, 2}})
    assert not (tmp_path / "g" / METADATA_FILE).exists()


def test_path_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike"):
        open_array(1)  # type: ignore[arg-type]
    monkeypatch.chdir(tmp_path)
    write_array("rel", np.arange(2), chunks=(1,))
    assert open_array("rel")[1] == 1
