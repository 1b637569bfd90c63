"""The fast decoders (dependencies of cytepool: libdeflate for gzip, zstandard for zstd) against
the standard library's zlib and the zstd module.

Every chunk below is read twice, with the fast decoders allowed and with CYTEPOOL_ZARR_FAST=0:
the results, or the error types and messages, must be the same. :func:`gunzip` and
:func:`unzstd_into` themselves must take the shortcut only for one complete member or frame
with nothing after it.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cytepool.io.zarr._reading as reading_module
import cytepool.io.zarr.codecs as codecs_module
from cytepool.errors import FormatError, InputError
from cytepool.io.zarr import _vlen, open_array, write_array
from cytepool.io.zarr._fast import (
    ENV_FAST,
    fast_inflate,
    fast_zstd,
    gunzip,
    gunzip_stated,
    unzstd_into,
    unzstd_stated,
)
from cytepool.io.zarr.codecs import import_zstd
from cytepool.io.zarr.strings import read_strings

N = 4096  # int32 values a chunk holds
VALUES = np.random.default_rng(1).integers(0, 50, N, dtype="<i4")
RAW = VALUES.tobytes()
MEMBER = zlib.compress(RAW, 4, wbits=31)
TRAILER = MEMBER[-8:]


def _bomb() -> bytes:
    return zlib.compress(bytes(64 * len(RAW)), 9, wbits=31)


def _header_crc(flip: int = 0) -> bytes:
    """MEMBER with the FHCRC flag and the CRC-16 of its header (libdeflate does not check it)."""
    header = bytes([*MEMBER[:3], MEMBER[3] | 0x02, *MEMBER[4:10]])
    crc = (zlib.crc32(header) & 0xFFFF) ^ flip
    return header + crc.to_bytes(2, "little") + MEMBER[10:]


VALID = {
    "one member": MEMBER,
    "level 0 (stored blocks)": zlib.compress(RAW, 0, wbits=31),
    "python gzip with mtime": gzip.compress(RAW, mtime=1),
    "the decoded size also in its header (mtime)": gzip.compress(RAW, mtime=len(RAW)),
    "header with a file name": b"\x1f\x8b\x08\x08\0\0\0\0\0\xffname\0" + MEMBER[10:],
    "two members": zlib.compress(RAW[:100], 4, wbits=31) + zlib.compress(RAW[100:], 4, wbits=31),
    "an empty member after": MEMBER + zlib.compress(b"", 4, wbits=31),
    "a header CRC-16": _header_crc(),
}
INVALID = {
    "the same member twice": MEMBER + MEMBER,
    "its trailer again": MEMBER + TRAILER,
    "bytes, then its trailer again": MEMBER + b"xx" + TRAILER,
    "trailing garbage": MEMBER + b"junk",
    "the size in its header, trailing garbage": gzip.compress(RAW, mtime=len(RAW)) + b"junk",
    "the size in its header, its trailer again": gzip.compress(RAW, mtime=len(RAW)) + TRAILER,
    "truncated": MEMBER[:-3],
    "truncated trailer": MEMBER[:-8],
    "decodes short": zlib.compress(RAW[:-4], 4, wbits=31),
    "decodes long": zlib.compress(RAW + b"\0\0\0\0", 4, wbits=31),
    "bomb": _bomb(),
    "bad CRC": MEMBER[:-8] + bytes([MEMBER[-8] ^ 1]) + MEMBER[-7:],
    "bad size": MEMBER[:-4] + bytes([MEMBER[-4] ^ 1]) + MEMBER[-3:],
    "bad header CRC-16": _header_crc(flip=1),
    "zlib, not gzip": zlib.compress(RAW, 4),
    "empty": b"",
}


ZSTD = import_zstd()
CHECKSUM = {ZSTD.CompressionParameter.checksum_flag: 1}
FRAME = ZSTD.compress(RAW, options=CHECKSUM)


def _streamed(data: bytes) -> bytes:
    """A frame without a content size, as a streaming writer makes it."""
    compressor = ZSTD.ZstdCompressor()
    return compressor.compress(data) + compressor.flush()


def _skippable(data: bytes) -> bytes:
    return b"\x50\x2a\x4d\x18" + len(data).to_bytes(4, "little") + data


ZSTD_VALID = {
    "one frame with a checksum": FRAME,
    "one frame without": ZSTD.compress(RAW),
    "level 19": ZSTD.compress(RAW, 19),
    "two frames": ZSTD.compress(RAW[:100]) + ZSTD.compress(RAW[100:]),
    "an empty frame after": FRAME + ZSTD.compress(b""),
    "no content size": _streamed(RAW),
    "a skippable frame after": FRAME + _skippable(b"abcd"),  # the zstd module skips it
}
ZSTD_INVALID = {
    "the same frame twice": FRAME + FRAME,
    "trailing garbage": FRAME + b"junk",
    "truncated": FRAME[:-3],
    "truncated checksum": FRAME[:-4],
    "decodes short": ZSTD.compress(RAW[:-4]),
    "decodes long": ZSTD.compress(RAW + b"\0\0\0\0"),
    "bomb": ZSTD.compress(bytes(64 * len(RAW))),
    "bad checksum": FRAME[:-1] + bytes([FRAME[-1] ^ 1]),
    "gzip, not zstd": MEMBER,
    "empty": b"",
}


def _array(path: Path, chunk: bytes, codec: str = "gzip") -> Path:
    doc = {
        "shape": [2 * N],
        "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [N]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": codec, "configuration": {"level": 4}},
        ],
        "attributes": {},
        "zarr_format": 3,
        "node_type": "array",
    }
    (path / "c").mkdir(parents=True)
    (path / "zarr.json").write_text(json.dumps(doc))
    (path / "c" / "0").write_bytes(chunk)
    (path / "c" / "1").write_bytes(MEMBER if codec == "gzip" else FRAME)
    return path


def _outcome(path: Path, monkeypatch: pytest.MonkeyPatch, fast: str) -> Any:
    monkeypatch.setenv(ENV_FAST, fast)
    try:
        return open_array(path)[...].tobytes()
    except Exception as error:
        return type(error), str(error)


CASES = [
    *(("gzip", case, case in VALID) for case in [*VALID, *INVALID]),
    *(("zstd", case, case in ZSTD_VALID) for case in [*ZSTD_VALID, *ZSTD_INVALID]),
]


@pytest.mark.parametrize(("codec", "case", "valid"), CASES)
def test_same_results_and_errors_with_and_without_the_fast_decoders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str, case: str, valid: bool
) -> None:
    cases = {**VALID, **INVALID} if codec == "gzip" else {**ZSTD_VALID, **ZSTD_INVALID}
    path = _array(tmp_path / "a", cases[case], codec)
    fast, slow = (_outcome(path, monkeypatch, value) for value in ("1", "0"))
    assert fast == slow
    if valid:
        assert fast == RAW * 2
    else:
        assert isinstance(fast, tuple)
        assert issubclass(fast[0], ValueError)
        assert str(path / "c" / "0") in fast[1]


@pytest.mark.parametrize("case", list(VALID)[:5])
def test_the_shortcut_takes_one_complete_member(case: str) -> None:
    assert fast_inflate() is not None  # a dependency of cytepool
    assert gunzip(VALID[case], len(RAW)) == RAW
    assert gunzip(bytearray(VALID[case]), len(RAW)) == RAW


@pytest.mark.parametrize("case", [*list(VALID)[5:], *INVALID])
def test_the_shortcut_leaves_anything_else_to_zlib(case: str) -> None:
    assert gunzip({**VALID, **INVALID}[case], len(RAW)) is None


def test_the_shortcut_needs_bytes_and_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gunzip(memoryview(MEMBER), len(RAW)) is None
    assert gunzip(MEMBER, 0) is None
    monkeypatch.setenv(ENV_FAST, "0")
    assert fast_inflate() is None
    assert gunzip(MEMBER, len(RAW)) is None
    monkeypatch.setenv(ENV_FAST, "yes")
    with pytest.raises(InputError, match=f"{ENV_FAST} must be 0 or 1, found 'yes'"):
        gunzip(MEMBER, len(RAW))


@pytest.mark.parametrize("case", list(ZSTD_VALID)[:3])
def test_the_zstd_shortcut_takes_one_frame_of_the_chunk_size(case: str) -> None:
    assert fast_zstd() is not None  # a dependency of cytepool
    out = np.zeros(len(RAW), dtype=np.uint8)
    assert unzstd_into(ZSTD_VALID[case], out, 2**23)
    assert out.tobytes() == RAW
    out[:] = 0
    assert unzstd_into(bytearray(ZSTD_VALID[case]), memoryview(out), 2**23)
    assert out.tobytes() == RAW


@pytest.mark.parametrize("case", [*list(ZSTD_VALID)[3:], *ZSTD_INVALID])
def test_the_zstd_shortcut_leaves_anything_else_to_the_zstd_module(case: str) -> None:
    out = np.zeros(len(RAW), dtype=np.uint8)
    assert not unzstd_into({**ZSTD_VALID, **ZSTD_INVALID}[case], out, 2**23)


def test_the_zstd_shortcut_keeps_the_window_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    out = np.zeros(len(RAW), dtype=np.uint8)
    assert not unzstd_into(FRAME, out, len(RAW) // 2)  # the frame's window is the chunk size
    assert not unzstd_into(memoryview(FRAME), out, 2**23)
    monkeypatch.setenv(ENV_FAST, "0")
    assert fast_zstd() is None
    assert not unzstd_into(FRAME, out, 2**23)


@pytest.mark.parametrize(
    ("shape", "chunks", "sink", "in_one_step"),
    [
        ((400_000,), (400_000,), "_FlatSink", []),  # decoded in place: nothing to write
        ((4, 200_000), (4, 100_000), "_RowSink", [3_200_000] * 2),  # rows of the result
    ],
)
def test_zstandard_decodes_a_whole_chunk_in_one_step(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    sink: str,
    in_one_step: list[int],
) -> None:
    monkeypatch.setenv(ENV_FAST, "1")
    data = np.random.default_rng(0).random(shape)
    write_array(tmp_path / "a", data, chunks=chunks, compression="zstd", level=1)
    pieces: list[int] = []
    original = getattr(reading_module, sink).write

    def spy(self: Any, piece: bytes) -> None:
        pieces.append(len(piece))
        original(self, piece)

    monkeypatch.setattr(getattr(reading_module, sink), "write", spy)
    assert open_array(tmp_path / "a")[...].tobytes() == data.tobytes()
    assert pieces == in_one_step
    pieces.clear()
    monkeypatch.setenv(ENV_FAST, "0")
    assert open_array(tmp_path / "a")[...].tobytes() == data.tobytes()
    assert max(pieces) <= 256 * 1024
    assert sum(pieces) == data.nbytes


def test_libdeflate_decodes_a_whole_chunk_into_a_buffer_of_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_FAST, "1")
    data = np.random.default_rng(0).random(400_000)
    write_array(tmp_path / "a", data, chunks=(400_000,), compression="gzip", level=1)
    pieces: list[int] = []
    original = reading_module._FlatSink.write

    def spy(self: Any, piece: bytes) -> None:
        pieces.append(len(piece))
        original(self, piece)

    monkeypatch.setattr(reading_module._FlatSink, "write", spy)
    assert open_array(tmp_path / "a")[...].tobytes() == data.tobytes()
    assert pieces == [data.nbytes]  # one step, no more than the chunk holds


@pytest.mark.parametrize("level", [0, 1, 4, 9])
def test_gzip_chunks_are_written_by_libdeflate_or_zlib_and_read_by_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: int
) -> None:
    import zarr

    data = np.random.default_rng(2).negative_binomial(2, 0.2, (64, 300)).astype("<i4")
    members = {}
    for fast in ("1", "0"):
        monkeypatch.setenv(ENV_FAST, fast)
        write_array(tmp_path / fast, data, chunks=(32, 300), compression="gzip", level=level)
        members[fast] = (tmp_path / fast / "c" / "1" / "0").read_bytes()
        assert zlib.decompress(members[fast], wbits=31) == data[32:].tobytes()  # one member
        for reading in ("1", "0"):
            monkeypatch.setenv(ENV_FAST, reading)
            np.testing.assert_array_equal(open_array(tmp_path / fast)[...], data)
        np.testing.assert_array_equal(zarr.open_array(tmp_path / fast, mode="r")[...], data)
    assert members["0"] == zlib.compress(data[32:].tobytes(), level, wbits=31)
    libdeflate = fast_inflate()
    if libdeflate is not None:
        monkeypatch.setenv(ENV_FAST, "1")
        assert members["1"] == libdeflate.gzip_compress(data[32:].tobytes(), level)


def test_the_shortcut_hashes_again_only_when_the_size_occurs_earlier(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    libdeflate = fast_inflate()
    assert libdeflate is not None  # a dependency of cytepool
    member = VALID["level 0 (stored blocks)"]
    isize = len(RAW).to_bytes(4, "little")
    assert member.rfind(isize, 0, len(member) - 1) < 0
    hashed: list[int] = []
    crc32 = libdeflate.crc32

    def counting(data: Any) -> int:
        hashed.append(len(data))
        return int(crc32(data))

    monkeypatch.setattr(libdeflate, "crc32", counting)
    assert gunzip(member, len(RAW)) == RAW
    assert hashed == []  # the trailer libdeflate checked ends the chunk: no second CRC
    assert gunzip(VALID["the decoded size also in its header (mtime)"], len(RAW)) == RAW
    assert hashed == [len(RAW)]
    assert gunzip(INVALID["the size in its header, trailing garbage"], len(RAW)) is None


# --------------------------------------------------------------------------- string chunks
# A string chunk's decoded size is not known in advance: libdeflate or zstandard decodes it in
# one step when its gzip trailer or zstd frame header states a plausible size, and the vlen-utf8
# decoder then checks it in the pieces the stream gives, so that every outcome is the stream's.

STRINGS = np.array([f"gene-{i}" for i in range(3000)] + ["é" * 5, ""], dtype=object)
PAYLOAD = _vlen.encode(STRINGS)
STRING_MEMBER = zlib.compress(PAYLOAD, 4, wbits=31)
STRING_FRAME = ZSTD.compress(PAYLOAD, options=CHECKSUM)
PADDED = PAYLOAD + bytes(600_000)  # trailing bytes over more than one piece
BOMB = PAYLOAD + bytes(40 * 2**20)
NOT_UTF8 = PAYLOAD.replace("é".encode(), b"\xff\xfe")
STRING_CASES = {
    ("gzip", "one member"): STRING_MEMBER,
    ("gzip", "two members"): zlib.compress(PAYLOAD[:99], 4, wbits=31)
    + zlib.compress(PAYLOAD[99:], 4, wbits=31),
    ("gzip", "bad CRC"): STRING_MEMBER[:-8] + bytes([STRING_MEMBER[-8] ^ 1]) + STRING_MEMBER[-7:],
    ("gzip", "trailing garbage"): STRING_MEMBER + b"junk",
    ("gzip", "truncated"): STRING_MEMBER[:-3],
    ("gzip", "trailing vlen bytes, over pieces"): zlib.compress(PADDED, 4, wbits=31),
    ("gzip", "a bomb of padding"): zlib.compress(BOMB, 9, wbits=31),
    ("gzip", "an item cut short"): zlib.compress(PAYLOAD[:-2], 4, wbits=31),
    ("gzip", "not UTF-8"): zlib.compress(NOT_UTF8, 4, wbits=31),
    ("zstd", "one member"): STRING_FRAME,
    ("zstd", "two members"): ZSTD.compress(PAYLOAD[:99]) + ZSTD.compress(PAYLOAD[99:]),
    ("zstd", "no content size"): _streamed(PAYLOAD),
    ("zstd", "bad CRC"): STRING_FRAME[:-1] + bytes([STRING_FRAME[-1] ^ 1]),
    ("zstd", "trailing garbage"): STRING_FRAME + b"junk",
    ("zstd", "truncated"): STRING_FRAME[:-3],
    ("zstd", "trailing vlen bytes, over pieces"): ZSTD.compress(PADDED),
    ("zstd", "a bomb of padding"): ZSTD.compress(BOMB),
    ("zstd", "an item cut short"): ZSTD.compress(PAYLOAD[:-2]),
    ("zstd", "not UTF-8"): ZSTD.compress(NOT_UTF8),
}
VALID_STRINGS = ("one member", "two members", "no content size")


def _string_array(path: Path, chunk: bytes, codec: str) -> Path:
    doc = {
        "shape": [len(STRINGS)],
        "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [len(STRINGS)]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "",
        "codecs": [{"name": "vlen-utf8"}, {"name": codec, "configuration": {"level": 4}}],
        "attributes": {},
        "zarr_format": 3,
        "node_type": "array",
    }
    (path / "c").mkdir(parents=True)
    (path / "zarr.json").write_text(json.dumps(doc))
    (path / "c" / "0").write_bytes(chunk)
    return path


def _string_outcome(path: Path, monkeypatch: pytest.MonkeyPatch, fast: str) -> Any:
    monkeypatch.setenv(ENV_FAST, fast)
    try:
        return open_array(path)[...].tolist(), read_strings(open_array(path)).to_str()
    except Exception as error:
        return type(error), str(error)


@pytest.mark.parametrize(("codec", "case"), list(STRING_CASES))
def test_string_chunks_read_the_same_with_and_without_the_fast_decoders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str, case: str
) -> None:
    path = _string_array(tmp_path / "a", STRING_CASES[codec, case], codec)
    fast, slow = (_string_outcome(path, monkeypatch, value) for value in ("1", "0"))
    assert fast == slow
    if case in VALID_STRINGS:
        assert fast == (STRINGS.tolist(), STRINGS.tolist())
    else:
        assert issubclass(fast[0], FormatError)
        assert str(path / "c" / "0") in fast[1]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
@pytest.mark.parametrize(
    ("case", "one_step"),
    [
        ("one member", True),
        ("trailing vlen bytes, over pieces", True),
        ("not UTF-8", True),
        ("bad CRC", False),
        ("a bomb of padding", False),
        ("two members", False),
    ],
)
def test_a_string_chunk_is_decoded_in_one_step_when_its_stated_size_is_plausible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str, case: str, one_step: bool
) -> None:
    monkeypatch.setenv(ENV_FAST, "1")
    path = _string_array(tmp_path / "a", STRING_CASES[codec, case], codec)
    streamed: list[int] = []
    original = codecs_module.CodecChain.decode_stream

    def spy(self: Any, pieces: Any, size: int, where: str) -> Any:
        streamed.append(size)
        return original(self, pieces, size, where)

    monkeypatch.setattr(codecs_module.CodecChain, "decode_stream", spy)
    with contextlib.suppress(FormatError):
        open_array(path)[...]
    assert (streamed == []) is one_step


def test_gunzip_stated_takes_the_size_of_the_trailer_up_to_a_bound() -> None:
    assert gunzip_stated(STRING_MEMBER, len(PAYLOAD)) == PAYLOAD
    assert gunzip_stated(STRING_MEMBER, len(PAYLOAD) - 1) is None  # more than allowed
    assert gunzip_stated(memoryview(STRING_MEMBER), len(PAYLOAD)) is None  # bytes only
    assert gunzip_stated(STRING_MEMBER[:10], 10**6) is None  # shorter than any member
    assert gunzip_stated(zlib.compress(b"", 4, wbits=31), 10**6) is None  # states no bytes


def test_unzstd_stated_takes_the_content_size_up_to_a_bound() -> None:
    assert unzstd_stated(STRING_FRAME, len(PAYLOAD), 2**23) == PAYLOAD
    assert unzstd_stated(STRING_FRAME, len(PAYLOAD) - 1, 2**23) is None  # more than allowed
    assert unzstd_stated(_streamed(PAYLOAD), 10**7, 2**23) is None  # no content size
    assert unzstd_stated(STRING_MEMBER, 10**7, 2**23) is None  # not zstd
    assert unzstd_stated(STRING_FRAME[:5], 10**7, 2**23) is None  # a header cut short


def test_unzstd_stated_decodes_into_the_buffer_it_is_given() -> None:
    if fast_zstd() is None:
        pytest.skip("zstandard is not installed: the streaming decoder reads zstd")
    scratch = np.full(len(PAYLOAD) + 10, 7, dtype=np.uint8)
    asked: list[int] = []

    def buffer(size: int) -> np.ndarray:
        asked.append(size)
        return scratch[:size]

    out = unzstd_stated(STRING_FRAME, len(PAYLOAD), 2**23, buffer)
    assert asked == [len(PAYLOAD)]
    assert out.base is scratch
    assert out.tobytes() == PAYLOAD
    assert (scratch[len(PAYLOAD) :] == 7).all()  # nothing written past the stated size


@pytest.mark.parametrize("codec", ["zstd", "gzip"])
def test_strings_decoded_in_the_threads_buffer_are_not_changed_by_later_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    """A string chunk is decoded into the thread's chunk buffer, which the next chunk reuses:
    what the first read gave must not change."""
    monkeypatch.setenv(ENV_FAST, "1")
    monkeypatch.setenv("CYTEPOOL_ZARR_THREADS", "1")  # every chunk on one thread
    first = tmp_path / "first"
    write_array(first, STRINGS, chunks=(1000,), compression=codec, level=3)
    numbers = tmp_path / "numbers"
    write_array(numbers, np.arange(50_000, dtype=np.int64), chunks=(20_000,), compression=codec)
    other = np.array([f"other-{i:06d}" for i in range(len(STRINGS))], dtype=object)
    second = tmp_path / "second"
    write_array(second, other, chunks=(1500,), compression=codec, level=3)
    buffers = read_strings(open_array(first))
    strings = open_array(first)[...]
    np.testing.assert_array_equal(open_array(numbers)[...], np.arange(50_000))
    assert read_strings(open_array(second)).to_str() == other.tolist()
    assert open_array(second)[...].tolist() == other.tolist()
    assert buffers.to_str() == STRINGS.tolist()
    assert strings.tolist() == STRINGS.tolist()
