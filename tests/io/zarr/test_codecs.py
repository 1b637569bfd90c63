"""Codecs: parsing of codec lists, bounded stream decoding, vlen-utf8, CRC-32C, zstd import."""

from __future__ import annotations

import gzip
import subprocess
import sys
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cytepool.errors import FormatError, UnsupportedFeatureError
from cytepool.io.zarr import codecs
from cytepool.io.zarr.codecs import (
    MAX_FRAMES,
    PIECE_BYTES,
    BytesCodec,
    CodecChain,
    GzipCodec,
    ShardingCodec,
    VlenUtf8Codec,
    ZstdCodec,
    import_zstd,
    parse_codecs,
)
from cytepool.io.zarr.metadata import DataType
from cytepool.io.zarr.sharding import crc32c

zstd = import_zstd()
WHERE = "/store/a/zarr.json"
F32 = DataType.from_json("float32", WHERE)
U8 = DataType.from_json("uint8", WHERE)
STRING = DataType.from_json("string", WHERE)
LE = {"name": "bytes", "configuration": {"endian": "little"}}


def parse(value: Any, data_type: DataType = F32, chunks: tuple[int, ...] = (8,)) -> CodecChain:
    return parse_codecs(value, data_type, chunks, WHERE)


def decode_all(codec: Any, data: bytes, limit: int, piece: int = PIECE_BYTES) -> bytes:
    pieces = [data[i : i + piece] for i in range(0, len(data), piece)]
    return b"".join(codec.decode_stream(pieces, limit, "c/0"))


def chain_decode(chain: CodecChain, data: bytes, size: int) -> bytes:
    return b"".join(chain.decode_stream([data], size, "c/0"))


# ---------------------------------------------------------------------------------------------
# Parsing codec lists


def test_chains_of_gzip_and_zstd() -> None:
    chain = parse(
        [
            {"name": "bytes", "configuration": {"endian": "big"}},
            {"name": "gzip", "configuration": {"level": 1}},
            {"name": "zstd", "configuration": {"level": -5, "checksum": True}},
            {"name": "gzip", "configuration": {"level": 9}},
        ]
    )
    assert chain.array_bytes == BytesCodec("big")
    assert chain.compressors == (GzipCodec(1), ZstdCodec(-5, True), GzipCodec(9))
    assert parse(chain.to_json()) == chain


def test_bytes_codec_endian_rules() -> None:
    assert parse([{"name": "bytes"}], U8).array_bytes == BytesCodec(None)
    assert parse([{"name": "bytes", "configuration": {"endian": "big"}}], U8).array_bytes.endian
    with pytest.raises(FormatError, match="needs an endian for float32"):
        parse([{"name": "bytes"}])
    with pytest.raises(FormatError, match="little or big, not 'middle'"):
        parse([{"name": "bytes", "configuration": {"endian": "middle"}}])


def test_zstd_configuration() -> None:
    assert parse([LE, {"name": "zstd", "configuration": {"level": 22}}]).compressors == (
        ZstdCodec(22, False),
    )
    for config, problem in [
        ({"level": 23}, "from -131072 to 22"),
        ({"level": -131073}, "from -131072 to 22"),
        ({"level": 1.0}, "from -131072 to 22"),
        ({"level": 1, "checksum": 1}, "checksum must be true or false"),
        ({}, "lacks 'level'"),
        ({"level": 1, "dict": 1}, "unknown field 'dict'"),
    ]:
        with pytest.raises(FormatError, match=problem):
            parse([LE, {"name": "zstd", "configuration": config}])


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"level": 10}, "from 0 to 9"),
        ({"level": -1}, "from 0 to 9"),
        ({"level": True}, "from 0 to 9"),
        ({}, "lacks 'level'"),
        (None, "lacks 'level'"),
    ],
)
def test_gzip_configuration(config: Any, problem: str) -> None:
    codec = {"name": "gzip"} if config is None else {"name": "gzip", "configuration": config}
    with pytest.raises(FormatError, match=problem):
        parse([LE, codec])


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([{"name": "gzip", "configuration": {"level": 1}}, LE], "first codec must turn an array"),
        ([LE, LE], "'bytes' must come first, and only once"),
        ([LE, {"name": "vlen-utf8"}], "the vlen-utf8 codec needs the string data type"),
        ([{"name": "vlen-utf8"}], "needs the string data type"),
        ([LE, {"name": "gzip", "configuration": {"level": 1}, "x": 1}], "unknown field 'x'"),
        ([LE, {"name": "gzip", "configuration": [1]}], "must be a JSON object"),
        ([LE, "gzip"], "must be a JSON object"),
        ({"name": "bytes"}, "codecs must be a non-empty list"),
    ],
)
def test_malformed_codec_lists(value: Any, problem: str) -> None:
    with pytest.raises(FormatError, match=problem) as info:
        parse(value)
    assert WHERE in str(info.value)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([LE, {"name": "blosc", "configuration": {}}], "the codec 'blosc'"),
        ([{"name": "transpose", "configuration": {"order": [0]}}, LE], "the codec 'transpose'"),
        ([LE, {"name": "crc32c"}], "crc32c codec outside a shard index"),
        ([LE, {"name": "lz4"}], "the codec 'lz4'"),
    ],
)
def test_unsupported_codecs_are_named(value: Any, problem: str) -> None:
    with pytest.raises(UnsupportedFeatureError, match=problem) as info:
        parse(value)
    assert WHERE in str(info.value)


def test_string_needs_vlen_utf8() -> None:
    assert isinstance(parse([{"name": "vlen-utf8"}], STRING).array_bytes, VlenUtf8Codec)
    with pytest.raises(FormatError, match="needs the vlen-utf8 codec, not bytes"):
        parse([LE], STRING)
    with pytest.raises(FormatError, match="unknown field 'x'"):
        parse([{"name": "vlen-utf8", "configuration": {"x": 1}}], STRING)


def test_chunk_size_limit() -> None:
    with pytest.raises(UnsupportedFeatureError, match="exceed MAX_CHUNK_BYTES"):
        parse([LE], F32, (2**29 + 1,))
    assert parse([LE], F32, (2**29,)).array_bytes == BytesCodec("little")


def sharding(**config: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "chunk_shape": [2, 2],
        "codecs": [LE, {"name": "zstd", "configuration": {"level": 0, "checksum": False}}],
        "index_codecs": [LE, {"name": "crc32c"}],
        "index_location": "end",
    }
    base.update(config)
    return {"name": "sharding_indexed", "configuration": base}


def test_sharding_configuration() -> None:
    chain = parse([sharding()], F32, (4, 6))
    codec = chain.array_bytes
    assert isinstance(codec, ShardingCodec)
    assert codec.chunk_shape == (2, 2)
    assert codec.index_location == "end"
    assert codec.index_codecs.crc32c
    assert codec.index_codecs.endian == "little"
    assert codec.index_nbytes((4, 6)) == 6 * 16 + 4
    assert parse(chain.to_json(), F32, (4, 6)) == chain
    big = [{"name": "bytes", "configuration": {"endian": "big"}}]
    start = parse([sharding(index_location="start", index_codecs=big)], F32, (4, 6))
    assert start.array_bytes.index_nbytes((4, 6)) == 96  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "error", "problem"),
    [
        ({"chunk_shape": [3, 2]}, FormatError, "not a multiple of the inner chunk"),
        ({"chunk_shape": [2]}, FormatError, "2 positive integers"),
        ({"chunk_shape": [0, 2]}, FormatError, "2 positive integers"),
        ({"index_location": "middle"}, FormatError, "'start' or 'end'"),
        ({"index_codecs": []}, FormatError, "index_codecs must be a non-empty list"),
        (
            {"index_codecs": [LE, {"name": "gzip", "configuration": {"level": 1}}]},
            UnsupportedFeatureError,
            "shard index codecs",
        ),
        ({"index_codecs": [{"name": "crc32c"}]}, UnsupportedFeatureError, "shard index codecs"),
        ({"codecs": [sharding()]}, UnsupportedFeatureError, "nested sharding"),
        ({"codecs": [{"name": "blosc"}]}, UnsupportedFeatureError, "the codec 'blosc'"),
        ({"chunk_shape": [2**15, 2**15]}, FormatError, "not a multiple"),
    ],
)
def test_invalid_sharding(change: dict[str, Any], error: type[Exception], problem: str) -> None:
    with pytest.raises(error, match=problem):
        parse([sharding(**change)], F32, (4, 6))


def test_codecs_after_sharding_are_unsupported() -> None:
    with pytest.raises(UnsupportedFeatureError, match="codecs after sharding_indexed"):
        parse([sharding(), {"name": "gzip", "configuration": {"level": 1}}], F32, (4, 6))
    with pytest.raises(FormatError, match="lacks 'index_codecs'"):
        parse(
            [
                {
                    "name": "sharding_indexed",
                    "configuration": {"chunk_shape": [2, 2], "codecs": [LE]},
                }
            ],
            F32,
            (4, 6),
        )


def test_inner_chunk_size_limit() -> None:
    config = sharding(chunk_shape=[2**15, 2**15])
    with pytest.raises(UnsupportedFeatureError, match="exceed MAX_CHUNK_BYTES"):
        parse([config], F32, (2**16, 2**16))


# ---------------------------------------------------------------------------------------------
# gzip and zstd streams


@pytest.mark.parametrize(
    "codec",
    [GzipCodec(0), GzipCodec(4), GzipCodec(9), ZstdCodec(0), ZstdCodec(-1), ZstdCodec(12, True)],
)
def test_round_trip_and_bounded_pieces(codec: Any) -> None:
    data = np.random.default_rng(0).integers(0, 4, size=700_000, dtype=np.uint8).tobytes()
    encoded = codec.encode(data)
    pieces = list(
        codec.decode_stream(
            [encoded[i : i + 1000] for i in range(0, len(encoded), 1000)], len(data), "c/0"
        )
    )
    assert b"".join(pieces) == data
    assert max(len(p) for p in pieces) <= PIECE_BYTES
    assert len(encoded) <= codec.encoded_bound(len(data))


@pytest.mark.parametrize("size", [0, 1, 100, 128 * 1024, 1_000_003])
@pytest.mark.parametrize("codec", [GzipCodec(0), GzipCodec(1), ZstdCodec(1), ZstdCodec(22)])
def test_encoded_bound_covers_incompressible_data(codec: Any, size: int) -> None:
    data = np.random.default_rng(size).bytes(size)
    assert len(codec.encode(data)) <= codec.encoded_bound(size)


def test_zstd_writes_content_size_and_checksum() -> None:
    frame = ZstdCodec(3, checksum=True).encode(b"x" * 1000)
    info = zstd.get_frame_info(frame)
    assert info.decompressed_size == 1000
    assert frame[4] & 0x04, "the frame header's Content_Checksum_flag is set"
    assert not ZstdCodec(3).encode(b"x" * 1000)[4] & 0x04


def gzip_members(data: bytes, n: int) -> bytes:
    step = -(-len(data) // n) if data else 0
    parts = [data[i * step : (i + 1) * step] for i in range(n)]
    return b"".join(zlib.compress(part, 1, wbits=31) for part in parts)


def zstd_frames(data: bytes, n: int) -> bytes:
    step = -(-len(data) // n)
    return b"".join(zstd.compress(data[i * step : (i + 1) * step]) for i in range(n))


def test_many_members_and_frames_up_to_the_limit() -> None:
    data = bytes(range(256)) * 8
    assert decode_all(GzipCodec(1), gzip_members(data, MAX_FRAMES), len(data)) == data
    assert decode_all(ZstdCodec(1), zstd_frames(data, MAX_FRAMES), len(data)) == data
    with pytest.raises(FormatError, match="more than 1024 gzip members"):
        decode_all(GzipCodec(1), gzip_members(data, MAX_FRAMES + 1), len(data))
    with pytest.raises(FormatError, match="more than 1024 zstd frames"):
        decode_all(ZstdCodec(1), zstd_frames(data, MAX_FRAMES + 1), len(data))


def test_gzip_with_header_fields_and_python_gzip() -> None:
    data = b"hello " * 100
    assert decode_all(GzipCodec(1), gzip.compress(data, mtime=0), len(data)) == data
    member = gzip.compress(data)  # FNAME-less but mtime set: still a valid member
    assert decode_all(GzipCodec(1), member + member, 2 * len(data)) == data * 2


@pytest.mark.parametrize("codec", [GzipCodec(6), ZstdCodec(3)])
def test_output_beyond_the_limit_stops_early(codec: Any) -> None:
    data = bytes(50_000_000)
    encoded = codec.encode(data)
    seen = []

    def watch(stream: Iterator[bytes]) -> Iterator[bytes]:
        for piece in stream:
            seen.append(len(piece))
            yield piece

    chain = CodecChain(BytesCodec("little"), (codec,))
    with pytest.raises(FormatError, match=f"the {codec.name} data decodes to more bytes"):
        for _ in watch(chain.decode_stream([encoded], 1000, "c/0")):
            pass
    assert sum(seen) <= 1000


def test_intermediate_steps_are_bounded_too() -> None:
    data = bytes(10_000_000)
    encoded = ZstdCodec(3).encode(GzipCodec(9).encode(data))
    chain = CodecChain(BytesCodec("little"), (GzipCodec(9), ZstdCodec(3)))
    assert chain_decode(chain, encoded, len(data)) == data
    with pytest.raises(FormatError, match="decodes to more bytes than a valid chunk holds"):
        chain_decode(chain, encoded, 100)


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b[:10], "truncated"),
        (lambda b: b"", "truncated"),
        (lambda b: b + b"\0", "truncated \\(or has trailing bytes\\)"),
        (lambda b: b + b"junk", "invalid gzip data"),
        (lambda b: b[:-8] + bytes([b[-8] ^ 1]) + b[-7:], "incorrect data check"),
        (lambda b: b[:-4] + bytes([b[-4] ^ 1]) + b[-3:], "incorrect length check"),
        (lambda b: b"\x1f\x8c" + b[2:], "incorrect header check"),
    ],
)
def test_corrupt_gzip(mutate: Any, problem: str) -> None:
    data = b"abcdefgh" * 1000
    with pytest.raises(FormatError, match=problem) as info:
        decode_all(GzipCodec(1), mutate(GzipCodec(1).encode(data)), len(data), piece=100)
    assert "c/0" in str(info.value)


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b"", "truncated"),
        (lambda b: b + b"\0\0\0\0\0", "invalid zstd data"),
        (lambda b: b[:-4] + bytes([b[-4] ^ 1]) + b[-3:], "invalid zstd data"),
        (lambda b: b"\x29" + b[1:], "invalid zstd data"),
    ],
)
def test_corrupt_zstd(mutate: Any, problem: str) -> None:
    data = b"abcdefgh" * 1000
    with pytest.raises(FormatError, match=problem) as info:
        decode_all(ZstdCodec(1), mutate(ZstdCodec(1, checksum=True).encode(data)), len(data), 100)
    assert "c/0" in str(info.value)


def test_zstd_checksum_is_verified() -> None:
    data = np.random.default_rng(1).bytes(5000)
    frame = bytearray(ZstdCodec(1, checksum=True).encode(data))
    frame[-1] ^= 0xFF  # the checksum itself
    with pytest.raises(FormatError, match="invalid zstd data"):
        decode_all(ZstdCodec(1), bytes(frame), len(data))


def test_zstd_frames_without_content_size_and_skippable_frames() -> None:
    data = b"streamed" * 500
    compressor = zstd.ZstdCompressor()
    streamed = compressor.compress(data) + compressor.flush()
    assert decode_all(ZstdCodec(0), streamed, len(data)) == data
    skippable = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"skip"
    assert decode_all(ZstdCodec(0), skippable + streamed, len(data)) == data


def test_zstd_window_is_bounded() -> None:
    data = bytes(40 << 20)
    options = {zstd.CompressionParameter.window_log: 26}
    compressor = zstd.ZstdCompressor(options=options)
    frame = compressor.compress(data) + compressor.flush()
    with pytest.raises(FormatError, match="invalid zstd data"):
        decode_all(ZstdCodec(0), frame, 1 << 20)


# ---------------------------------------------------------------------------------------------
# vlen-utf8


def vlen(*items: bytes, count: int | None = None) -> bytes:
    parts = [(len(items) if count is None else count).to_bytes(4, "little")]
    for item in items:
        parts += [len(item).to_bytes(4, "little"), item]
    return b"".join(parts)


def test_vlen_utf8_layout() -> None:
    strings = np.array(["a", "", "é€😀"], dtype=np.dtypes.StringDType())
    encoded = VlenUtf8Codec().encode(strings)
    assert encoded.hex() == "0300000001000000610000000009000000c3a9e282acf09f9880"
    assert VlenUtf8Codec().decode(encoded, 3, "c/0").tolist() == ["a", "", "é€😀"]
    assert VlenUtf8Codec().encode(np.array([["x", "yy"], ["", "z"]], dtype=object)) == vlen(
        b"x", b"yy", b"", b"z"
    )


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "truncated: 0 bytes"),
        (b"\x02\0\0", "truncated: 3 bytes"),
        (vlen(b"a", count=2), "holds 2 items, expected 1"),
        (vlen(b"a", b"b"), "holds 2 items, expected 1"),
        (vlen(count=1), "truncated in the length of item 0"),
        (vlen(b"a")[:-1], "item 0 claims 1 bytes, only 0 remain"),
        (vlen(count=1) + b"\xff\xff\xff\xff", "item 0 claims 4294967295 bytes"),
        (vlen(b"a") + b"\0", "1 trailing bytes"),
        (vlen(b"\xff"), "not valid UTF-8"),
        (vlen(b"\xed\xa0\x80"), "not valid UTF-8"),
    ],
)
def test_malformed_vlen_utf8(data: bytes, problem: str) -> None:
    with pytest.raises(FormatError, match=problem) as info:
        VlenUtf8Codec().decode(data, 1, "/s/c/0")
    assert "/s/c/0" in str(info.value)


# ---------------------------------------------------------------------------------------------
# CRC-32C


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0),
        (b"a", 0xC1D04330),
        (b"123456789", 0xE3069283),
        (bytes(32), 0x8A9136AA),
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
        (bytes(range(31, -1, -1)), 0x113FDB5C),
    ],
)
def test_crc32c_known_values(data: bytes, expected: int) -> None:
    assert crc32c(data) == expected


def test_crc32c_running_and_against_a_reference() -> None:
    data = np.random.default_rng(2).bytes(10_001)
    assert crc32c(data[5000:], crc32c(data[:5000])) == crc32c(data)
    reference = pytest.importorskip("google_crc32c")
    assert crc32c(data) == reference.value(data)


# ---------------------------------------------------------------------------------------------
# zstd import


@pytest.fixture
def no_zstd(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in codecs._ZSTD_MODULES:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.usefixtures("no_zstd")
def test_missing_zstd_says_how_to_get_it() -> None:
    with pytest.raises(ValueError, match=r"pip install backports\.zstd"):
        import_zstd()
    with pytest.raises(ValueError, match=r"compression\.zstd module of Python 3\.14"):
        ZstdCodec(3).encode(b"x")
    with pytest.raises(ValueError, match=r"backports\.zstd"):
        list(ZstdCodec(3).decode_stream([b"x"], 1, "c/0"))


@pytest.mark.parametrize("fast", ["1", "0"])
def test_reading_zstd_without_its_module_is_refused_with_or_without_fast_decoders(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, fast: str
) -> None:
    """Without compression.zstd or backports.zstd, a zstd array read through zstandard (the
    fast decoder, installed) gave its values where the standard library's path refused: the
    result now does not depend on the fast decoders, as reading and writing document."""
    from cytepool.io.zarr import open_array, write_array

    write_array(tmp_path / "a", np.arange(1000, dtype=np.int32), chunks=(600,), compression="zstd")
    for name in codecs._ZSTD_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setenv("CYTEPOOL_ZARR_FAST", fast)
    with pytest.raises(ValueError, match=r"pip install backports\.zstd"):
        open_array(tmp_path / "a")[...]


def test_zstd_module_choice() -> None:
    expected = "compression.zstd" if sys.version_info >= (3, 14) else "backports.zstd"
    assert import_zstd().__name__ == expected


# A fresh process whose zstd module takes a while to initialise (its loader waits for an event),
# imported by one thread while another asks import_zstd() for it: the second must get the
# complete module, never the one still being initialised (a decoding thread used to get it, and
# fail with AttributeError on DecompressionParameter, about one first read in eight).
_SLOW_ZSTD_IMPORT = """
import importlib, importlib.abc, importlib.machinery, sys, threading
from cytepool.io.zarr.codecs import import_zstd

NAME = "compression.zstd" if sys.version_info >= (3, 14) else "backports.zstd"
started, release = threading.Event(), threading.Event()


class SlowLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        started.set()
        release.wait()
        self.loader.exec_module(module)


class SlowFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.loader = SlowLoader(spec.loader)
        return spec


assert NAME not in sys.modules
sys.meta_path.insert(0, SlowFinder())
threading.Thread(target=importlib.import_module, args=(NAME,)).start()
started.wait()  # the module is in sys.modules now, still being initialised
threading.Timer(0.5, release.set).start()
module = import_zstd()
print(hasattr(module, "DecompressionParameter"), module.__name__)
"""


def test_zstd_is_never_handed_out_half_initialised() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SLOW_ZSTD_IMPORT],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    expected = "compression.zstd" if sys.version_info >= (3, 14) else "backports.zstd"
    assert out.stdout.split() == ["True", expected]


@pytest.mark.parametrize(
    "values",
    [
        ["a"],
        [""],
        ["", "", ""],
        ["abc", "def", "ghi"],
        ["é€😀", "x", "", "日本語"],
        ["trailing\x00", "\x00", "x\x00y", ""],
        ["x" * 100_000, *["y"] * 50],
        ["ü" * 3, "ab", "üü"],
        [f"cell-{i:08d}" for i in range(1000)],
        [str(i) for i in range(1000)],
        ["".join(map(chr, range(128))), "é", "", "\x7f"],  # no unused ASCII separator
    ],
    ids=range(11),
)
def test_vlen_utf8_round_trips(values: list[str]) -> None:
    codec = VlenUtf8Codec()
    encoded = codec.encode(np.array(values, dtype=object))
    parts = [len(values).to_bytes(4, "little")]
    for value in values:
        item = value.encode()
        parts += [len(item).to_bytes(4, "little"), item]
    assert encoded == b"".join(parts)
    decoded = codec.decode(encoded, len(values), "c/0")
    assert decoded.dtype == np.dtypes.StringDType()
    assert decoded.tolist() == values


def test_vlen_utf8_items_must_be_valid_on_their_own() -> None:
    split = vlen(b"\xc3", b"\xa9")  # together "é", apart invalid
    with pytest.raises(FormatError, match="item is not valid UTF-8"):
        VlenUtf8Codec().decode(split, 2, "c/0")
    equal = vlen(b"ab", b"cd")
    bad = equal[:10] + b"\x03" + equal[11:]  # second length 3: equal-length shortcut fails
    with pytest.raises(FormatError, match="item 1 claims 3 bytes"):
        VlenUtf8Codec().decode(bad, 2, "c/0")


def test_vlen_utf8_refuses_lone_surrogates() -> None:
    with pytest.raises(UnicodeEncodeError):
        VlenUtf8Codec().encode(np.array(["\ud800"], dtype=object))


@pytest.mark.parametrize("piece", [1, 3, 7, 64, 10_000])
def test_vlen_decoder_streams_in_any_pieces(piece: int) -> None:
    from cytepool.io.zarr._vlen import Decoder

    values = [*(["abcd"] * 40), "x", *(["ef"] * 30), "", "é" * 5, *(["gh"] * 20)]
    data = VlenUtf8Codec().encode(np.array(values, dtype=object))
    for objects in (False, True):
        decoder = Decoder(len(values), "c/0")
        for i in range(0, len(data), piece):
            decoder.feed(data[i : i + piece])
        assert decoder.finish(objects=objects).tolist() == values


def test_vlen_decoder_fails_as_soon_as_the_stream_is_wrong() -> None:
    from cytepool.io.zarr._vlen import Decoder

    decoder = Decoder(5, "c/0")
    with pytest.raises(FormatError, match="holds 4 items, expected 5"):
        decoder.feed(vlen(b"a", b"b", b"c", b"d")[:4])
    decoder = Decoder(40, "c/0")
    decoder.feed(vlen(*[b"xy"] * 40))
    with pytest.raises(FormatError, match="1 trailing bytes"):
        decoder.feed(b"\0")  # fails at once, not when the stream ends
    equal = vlen(*[b"xy"] * 40)
    decoder = Decoder(40, "c/0")
    decoder.feed(equal[:100] + b"\x05" + equal[101:])  # a different length inside a run
    with pytest.raises(FormatError, match=r"claims|trailing|truncated"):
        decoder.finish()
