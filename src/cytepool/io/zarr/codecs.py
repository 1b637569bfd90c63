"""Zarr v3 codecs: one frozen record per codec, a name -> class table, and stream decoders.

Supported: ``bytes`` (either byte order), ``vlen-utf8`` (the ``string`` data type), ``gzip``,
``zstd``, ``sharding_indexed`` (reading) and ``crc32c`` (only as the shard index codec). A chain
is one array -> bytes codec followed by any number of gzip and zstd codecs.

Decoding is streamed and bounded: compressed bytes arrive in pieces of at most
:data:`PIECE_BYTES`, each decompression step yields pieces of at most that size and stops
just past the most bytes a valid chunk can produce, and a chunk may hold at most
:data:`MAX_FRAMES` gzip members or zstd frames.
"""

from __future__ import annotations

import functools
import importlib
import math
import sys
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeAlias, cast

import numpy as np

from cytepool.errors import FormatError, InputError, UnsupportedFeatureError
from cytepool.io.zarr import _fast, _vlen
from cytepool.io.zarr.fields import (
    check_config_keys,
    fail,
    is_int,
    named_configuration,
    unsupported,
)

if TYPE_CHECKING:
    import types

    from cytepool.io.zarr.data_types import DataType

__all__ = [
    "CODECS",
    "MAX_CHUNK_BYTES",
    "MAX_FRAMES",
    "PIECE_BYTES",
    "BytesCodec",
    "Codec",
    "CodecChain",
    "Crc32cCodec",
    "GzipCodec",
    "ShardingCodec",
    "VlenUtf8Codec",
    "ZstdCodec",
    "import_zstd",
    "parse_codecs",
]

Bytes: TypeAlias = "bytes | bytearray | memoryview"
"""What the decoders take: any contiguous bytes."""

MAX_CHUNK_BYTES = 2**31
PIECE_BYTES = 256 * 1024
MAX_FRAMES = 1024
# Allowance per gzip member / zstd frame for headers, trailers and block framing.
_FRAME_OVERHEAD = 64
_ZSTD_LEVELS = (-131072, 22)
_MIN_WINDOW_LOG, _MAX_WINDOW_LOG = 23, 31
_ZSTD_MODULES = ("compression.zstd", "backports.zstd")
_ZSTD_HINT = (
    "zstd needs the compression.zstd module of Python 3.14 or newer, or on older Pythons the"
    " backports.zstd package: pip install backports.zstd"
)


_zstd_lock = threading.Lock()
_zstd: types.ModuleType | None = None  # set once the module is completely imported


def import_zstd() -> types.ModuleType:
    """Import ``compression.zstd`` (Python 3.14+) or else ``backports.zstd``.

    The first import runs under a lock and through the import system, which hands out a
    module only once it is completely initialised: decoding threads that reach zstd at the
    same time wait for one import, and none gets a module another thread is still
    initialising. Later calls return that module (while ``sys.modules`` still holds it).

    Returns
    -------
    The zstd module.

    Raises
    ------
    ValueError
        If neither can be imported; the message says how to get one.

    Examples
    --------
    >>> import_zstd().decompress(import_zstd().compress(b"abc"))
    b'abc'
    """
    global _zstd
    module = _zstd
    if module is not None and sys.modules.get(module.__name__) is module:
        return module
    with _zstd_lock:
        for name in _ZSTD_MODULES:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            _zstd = module
            return module
    raise InputError(_ZSTD_HINT)


# ---------------------------------------------------------------------------------------------
# The codec protocol


class Codec(Protocol):
    """What every codec record is: its name and kind as the specification spells them, and
    its JSON object.

    Each codec below is a frozen dataclass that ``from_json`` builds from its configuration,
    found by name in :data:`CODECS`; chains are one ``"array->bytes"`` codec followed by
    ``"bytes->bytes"`` codecs.
    """

    name: ClassVar[str]
    kind: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        """The codec object of a ``codecs`` list."""
        ...


# ---------------------------------------------------------------------------------------------
# Array -> bytes codecs


@dataclass(frozen=True)
class BytesCodec:
    """The ``bytes`` codec: elements in C order, little or big endian.

    Examples
    --------
    >>> bytes(BytesCodec("big").encode(np.array([1, 2], dtype=np.int16)))
    b'\\x00\\x01\\x00\\x02'
    """

    endian: Literal["little", "big"] | None = "little"
    name: ClassVar[str] = "bytes"
    kind: ClassVar[str] = "array->bytes"

    @classmethod
    def from_json(
        cls, config: dict[str, Any] | None, data_type: DataType, where: str
    ) -> BytesCodec:
        """Parse the codec's configuration for an array of ``data_type``."""
        if data_type.is_string:
            raise fail(where, "the string data type needs the vlen-utf8 codec, not bytes")
        config = check_config_keys(config, [], ["endian"], where, "the bytes codec")
        endian = config.get("endian")
        if endian is None and data_type.itemsize > 1:
            raise fail(where, f"the bytes codec needs an endian for {data_type.name}")
        if endian not in (None, "little", "big"):
            raise fail(where, f"the bytes codec's endian must be little or big, not {endian!r}")
        return cls(endian)

    def to_json(self) -> dict[str, Any]:
        """The codec object."""
        if self.endian is None:
            return {"name": self.name}
        return {"name": self.name, "configuration": {"endian": self.endian}}

    def stored_dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        """The dtype of the stored elements (``dtype`` in the codec's byte order)."""
        return dtype.newbyteorder("<" if self.endian != "big" else ">")

    def encode(self, chunk: np.ndarray[Any, Any]) -> memoryview:
        """The chunk's bytes in C order and the codec's byte order (a view, no copy if it can).

        A bool is stored as the byte 0 or 1, the only bytes readers accept: a numpy bool array
        may hold other bytes (one made by ``view(bool)``), which are stored as 1.
        """
        stored = np.ascontiguousarray(chunk, dtype=self.stored_dtype(chunk.dtype))
        raw = stored.reshape(-1).view(np.uint8)
        if chunk.dtype.kind == "b" and np.max(raw, initial=0) > 1:
            raw = (raw != 0).view(np.uint8)
        return raw.data


@dataclass(frozen=True)
class VlenUtf8Codec:
    """The ``vlen-utf8`` codec of the ``string`` data type.

    A chunk is a u32 item count, then for each item (C order) a u32 byte length and the UTF-8
    bytes, all integers little endian.

    Examples
    --------
    >>> codec = VlenUtf8Codec()
    >>> data = codec.encode(np.array(["a", "", "é"], dtype=np.dtypes.StringDType()))
    >>> data.hex()
    '0300000001000000610000000002000000c3a9'
    >>> codec.decode(data, 3, "c/0").tolist()
    ['a', '', 'é']
    """

    name: ClassVar[str] = "vlen-utf8"
    kind: ClassVar[str] = "array->bytes"

    @classmethod
    def from_json(
        cls, config: dict[str, Any] | None, data_type: DataType, where: str
    ) -> VlenUtf8Codec:
        """Parse the codec's configuration for an array of ``data_type``."""
        if not data_type.is_string:
            raise fail(where, f"the vlen-utf8 codec needs the string data type, not {data_type}")
        check_config_keys(config, [], [], where, "the vlen-utf8 codec")
        return cls()

    def to_json(self) -> dict[str, Any]:
        """The codec object."""
        return {"name": self.name, "configuration": {}}

    def encode(self, chunk: np.ndarray[Any, Any]) -> bytes:
        """Encode the strings of a chunk (C order)."""
        return _vlen.encode(chunk.ravel(order="C"))

    def decode(
        self, data: bytes | bytearray, count: int, where: str, *, objects: bool = False
    ) -> np.ndarray[Any, Any]:
        """Decode a chunk of ``count`` strings into a 1-D StringDType array, or an object
        array of str with ``objects=True`` (ValueError if malformed)."""
        result: np.ndarray[Any, Any] = _vlen.decode(data, count, where, objects=objects)
        return result


def _corrupt(where: str, problem: str) -> FormatError:
    return FormatError(f"corrupt chunk {where}: {problem}")


# ---------------------------------------------------------------------------------------------
# Bytes -> bytes codecs


@dataclass(frozen=True)
class GzipCodec:
    """The ``gzip`` codec: gzip streams (RFC 1952).

    Examples
    --------
    >>> codec = GzipCodec(4)
    >>> b"".join(codec.decode_stream([codec.encode(b"abc" * 10)], 30, "c/0"))
    b'abcabcabcabcabcabcabcabcabcabc'
    """

    level: int
    name: ClassVar[str] = "gzip"
    kind: ClassVar[str] = "bytes->bytes"

    @classmethod
    def from_json(cls, config: dict[str, Any] | None, data_type: DataType, where: str) -> GzipCodec:
        """Parse the codec's configuration."""
        config = check_config_keys(config, ["level"], [], where, "the gzip codec")
        level = config["level"]
        if not is_int(level) or not 0 <= level <= 9:
            raise fail(where, f"the gzip level must be an integer from 0 to 9, not {level!r}")
        return cls(level)

    def to_json(self) -> dict[str, Any]:
        """The codec object."""
        return {"name": self.name, "configuration": {"level": self.level}}

    @staticmethod
    def encoded_bound(size: int) -> int:
        """The most bytes a valid gzip encoding of ``size`` bytes takes."""
        deflate = size + ((size + 7) >> 3) + ((size + 63) >> 6) + 5
        return deflate + MAX_FRAMES * _FRAME_OVERHEAD

    def encode(self, data: bytes | bytearray | memoryview) -> bytes | bytearray:
        """Compress into one gzip member: with libdeflate (see :mod:`cytepool.io.zarr._fast`),
        or with the standard library's zlib where it is missing or switched off."""
        fast = _fast.gzip(data, self.level)
        return zlib.compress(data, self.level, wbits=31) if fast is None else fast

    def decode_stream(self, pieces: Iterable[Bytes], limit: int, where: str) -> Iterator[bytes]:
        """Decompress gzip members, yielding at most ``limit`` bytes in bounded pieces."""
        try:
            yield from _inflate(pieces, limit, where)
        except zlib.error as error:
            raise _corrupt(where, f"invalid gzip data: {error}") from error


def _inflate(pieces: Iterable[Bytes], limit: int, where: str) -> Iterator[bytes]:
    def more(decoder: Any, out: bytes, want: int) -> bytes | None:
        tail = decoder.unconsumed_tail
        return None if decoder.eof or (not tail and len(out) < want) else tail

    start = functools.partial(zlib.decompressobj, 31)
    return _frames(pieces, limit, where, _Stream(_GZIP, "gzip members", start, more))


@dataclass(frozen=True)
class _Stream:
    """How to decode one kind of frame: a new decoder, and the input after a step (or None)."""

    name: str
    frames: str
    start: Callable[[], Any]
    more: Callable[[Any, bytes, int], bytes | None]


def _frames(pieces: Iterable[Bytes], limit: int, where: str, kind: _Stream) -> Iterator[bytes]:
    """Decode consecutive frames (gzip members, zstd frames), at most ``limit`` bytes in all."""
    total = count = 0
    decoder = None
    for piece in pieces:
        data = piece
        while data:
            if decoder is None:
                count = _count_frame(count, kind.frames, where)
                decoder = kind.start()
            for out in _steps(decoder, data, limit - total, kind):
                total += len(out)
                yield out
            if decoder.eof:
                data, decoder = decoder.unused_data, None
            else:
                data = b""
    if decoder is not None or count == 0:
        raise _corrupt(where, f"the {kind.name} stream is truncated (or has trailing bytes)")


def _steps(decoder: Any, data: Bytes, room: int, kind: _Stream) -> Iterator[bytes]:
    """Decode ``data``, in pieces of at most PIECE_BYTES, stopping just past ``room`` bytes."""
    next_input: Bytes | None = data
    while next_input is not None:
        want = min(PIECE_BYTES, room + 1)
        out = decoder.decompress(next_input, want)
        room -= len(out)
        if room < 0:
            raise _TooLongError(kind.name)
        if out:
            yield out
        next_input = kind.more(decoder, out, want)


def _count_frame(count: int, what: str, where: str) -> int:
    if count >= MAX_FRAMES:
        raise _corrupt(where, f"more than {MAX_FRAMES} {what} in one chunk")
    return count + 1


class _TooLongError(Exception):
    """A decoder produced more bytes than a valid chunk holds (converted by the caller)."""


_GZIP, _ZSTD = "gzip", "zstd"


@dataclass(frozen=True)
class ZstdCodec:
    """The ``zstd`` codec: Zstandard frames (RFC 8878).

    Examples
    --------
    >>> codec = ZstdCodec(3, checksum=True)
    >>> b"".join(codec.decode_stream([codec.encode(b"xyz" * 10)], 30, "c/0"))[:6]
    b'xyzxyz'
    """

    level: int
    checksum: bool = False
    name: ClassVar[str] = "zstd"
    kind: ClassVar[str] = "bytes->bytes"

    @classmethod
    def from_json(cls, config: dict[str, Any] | None, data_type: DataType, where: str) -> ZstdCodec:
        """Parse the codec's configuration."""
        config = check_config_keys(config, ["level"], ["checksum"], where, "the zstd codec")
        level, checksum = config["level"], config.get("checksum", False)
        low, high = _ZSTD_LEVELS
        if not is_int(level) or not low <= level <= high:
            problem = f"the zstd level must be an integer from {low} to {high}, not {level!r}"
            raise fail(where, problem)
        if not isinstance(checksum, bool):
            raise fail(where, f"the zstd checksum must be true or false, not {checksum!r}")
        return cls(level, checksum)

    def to_json(self) -> dict[str, Any]:
        """The codec object."""
        config = {"level": self.level, "checksum": self.checksum}
        return {"name": self.name, "configuration": config}

    @staticmethod
    def encoded_bound(size: int) -> int:
        """The most bytes a valid zstd encoding of ``size`` bytes takes (ZSTD_compressBound)."""
        small = (128 * 1024 - size) >> 11 if size < 128 * 1024 else 0
        return size + (size >> 8) + small + MAX_FRAMES * _FRAME_OVERHEAD

    def encode(self, data: bytes | bytearray | memoryview) -> bytes:
        """Compress into one frame, with its content size and (if set) a checksum."""
        zstd = import_zstd()
        options = {
            zstd.CompressionParameter.compression_level: self.level,
            zstd.CompressionParameter.checksum_flag: int(self.checksum),
        }
        return bytes(zstd.compress(data, options=options))

    def decode_stream(self, pieces: Iterable[Bytes], limit: int, where: str) -> Iterator[bytes]:
        """Decompress zstd frames, yielding at most ``limit`` bytes in bounded pieces."""
        zstd = import_zstd()
        try:
            yield from _unzstd(zstd, pieces, limit, where)
        except zstd.ZstdError as error:
            raise _corrupt(where, f"invalid zstd data: {error}") from error


def _window_log(limit: int) -> int:
    # The window a frame may ask for: the output size, but at least the 8 MiB that RFC 8878
    # asks every decoder to support (streaming writers use up to that without a content size).
    return min(max(_MIN_WINDOW_LOG, (limit - 1).bit_length()), _MAX_WINDOW_LOG)


def _unzstd(zstd: Any, pieces: Iterable[Bytes], limit: int, where: str) -> Iterator[bytes]:
    options = {zstd.DecompressionParameter.window_log_max: _window_log(limit)}

    def more(decoder: Any, out: bytes, want: int) -> bytes | None:
        return None if decoder.eof or decoder.needs_input or not out else b""

    start = functools.partial(zstd.ZstdDecompressor, options=options)
    return _frames(pieces, limit, where, _Stream(_ZSTD, "zstd frames", start, more))


@dataclass(frozen=True)
class Crc32cCodec:
    """The ``crc32c`` codec, supported only as the last shard index codec."""

    name: ClassVar[str] = "crc32c"
    kind: ClassVar[str] = "bytes->bytes"

    @classmethod
    def from_json(
        cls, config: dict[str, Any] | None, data_type: DataType, where: str
    ) -> Crc32cCodec:
        """Parse the (empty) configuration."""
        check_config_keys(config, [], [], where, "the crc32c codec")
        return cls()

    def to_json(self) -> dict[str, Any]:
        """The codec object."""
        return {"name": self.name}


Compressor: TypeAlias = "GzipCodec | ZstdCodec"
ArrayBytes: TypeAlias = "BytesCodec | VlenUtf8Codec | ShardingCodec"


# ---------------------------------------------------------------------------------------------
# Chains


@dataclass(frozen=True)
class CodecChain:
    """One array -> bytes codec followed by gzip/zstd codecs (applied in order when writing).

    Examples
    --------
    >>> chain = CodecChain(BytesCodec("little"), (GzipCodec(1), ZstdCodec(3)))
    >>> [c["name"] for c in chain.to_json()]
    ['bytes', 'gzip', 'zstd']
    """

    array_bytes: ArrayBytes
    compressors: tuple[Compressor, ...] = ()

    def to_json(self) -> list[dict[str, Any]]:
        """The ``codecs`` list."""
        return [self.array_bytes.to_json(), *(c.to_json() for c in self.compressors)]

    def limits(self, size: int) -> list[int]:
        """For each compressor (innermost first) the most bytes its output may hold, then the
        most bytes the encoded chunk may hold."""
        limits = [size]
        for codec in self.compressors:
            limits.append(codec.encoded_bound(limits[-1]))
        return limits

    def decode_stream(self, pieces: Iterable[Bytes], size: int, where: str) -> Iterator[Bytes]:
        """Undo the compressors: the pieces of the array -> bytes codec's input (<= size)."""
        limits = self.limits(size)
        stream: Iterable[Bytes] = pieces
        for codec, limit in zip(reversed(self.compressors), reversed(limits[:-1]), strict=True):
            stream = codec.decode_stream(stream, limit, where)
        try:
            yield from stream
        except _TooLongError as error:
            problem = f"the {error} data decodes to more bytes than a valid chunk holds"
            raise _corrupt(where, problem) from None

    def decode_exact(self, data: Bytes, size: int) -> bytearray | None:
        """The ``size`` bytes ``data`` decodes to, through the optional fast inflate, or None:
        decode with :meth:`decode_stream` (see :mod:`cytepool.io.zarr._fast`)."""
        if len(self.compressors) == 1 and isinstance(self.compressors[0], GzipCodec):
            return _fast.gunzip(data, size)
        return None

    def decode_stated(
        self, data: Bytes, most: int, limit: int, buffer: Callable[[int], Any] = bytearray
    ) -> Any:
        """What ``data`` decodes to (bytes), of the size its single compressor states (a gzip
        trailer, a zstd frame header), if at most ``most`` bytes, through the fast decoders, or
        None: decode with :meth:`decode_stream` and ``limit`` (chunks whose decoded size is not
        known in advance: strings). zstd decodes into ``buffer(size)`` (see
        :func:`~cytepool.io.zarr._fast.unzstd_stated`)."""
        if len(self.compressors) != 1:
            return None
        if isinstance(self.compressors[0], GzipCodec):
            return _fast.gunzip_stated(data, most)
        if isinstance(self.compressors[0], ZstdCodec):
            import_zstd()  # zstd is read where the standard library's decoder is (else ValueError)
            return _fast.unzstd_stated(data, most, 2 ** _window_log(limit), buffer)
        return None

    def decode_into(self, data: Bytes, out: np.ndarray[Any, Any]) -> bool:
        """Whether ``data`` was decoded into all of ``out`` (bytes) in one step by the optional
        fast zstd decoder; if not, decode with :meth:`decode_stream`."""
        if len(self.compressors) == 1 and isinstance(self.compressors[0], ZstdCodec):
            import_zstd()  # as decode_stated: the fast decoder never reads what the other cannot
            return _fast.unzstd_into(data, out, 2 ** _window_log(len(out)))
        return False

    def encode(self, chunk: np.ndarray[Any, Any]) -> bytes:
        """Encode a chunk (bytes or vlen-utf8, then each compressor)."""
        if isinstance(self.array_bytes, ShardingCodec):
            msg = "writing sharded arrays is not supported"
            raise UnsupportedFeatureError(msg)
        encoded = self.compress(self.array_bytes.encode(chunk))
        return encoded if isinstance(encoded, bytes) else bytes(encoded)

    def compress(self, data: bytes | memoryview) -> bytes | bytearray | memoryview:
        """Apply each compressor in order (``data`` itself without compressors)."""
        out: bytes | bytearray | memoryview = data
        for codec in self.compressors:
            out = codec.encode(out)
        return out


@dataclass(frozen=True)
class ShardIndexCodecs:
    """The shard index codecs: ``bytes`` (either order), optionally followed by ``crc32c``."""

    endian: Literal["little", "big"]
    crc32c: bool

    def to_json(self) -> list[dict[str, Any]]:
        """The ``index_codecs`` list."""
        codecs = [BytesCodec(self.endian).to_json()]
        return [*codecs, Crc32cCodec().to_json()] if self.crc32c else codecs


@dataclass(frozen=True)
class ShardingCodec:
    """The ``sharding_indexed`` codec (reading only).

    A shard holds inner chunks of ``chunk_shape``, each encoded by ``codecs``, and an index of
    (offset, nbytes) pairs, one per inner chunk in C order, at its end or start.
    """

    chunk_shape: tuple[int, ...]
    codecs: CodecChain
    index_codecs: ShardIndexCodecs
    index_location: Literal["start", "end"] = "end"
    name: ClassVar[str] = "sharding_indexed"
    kind: ClassVar[str] = "array->bytes"

    @classmethod
    def from_json(
        cls,
        config: dict[str, Any] | None,
        data_type: DataType,
        where: str,
        shard_shape: Sequence[int] = (),
    ) -> ShardingCodec:
        """Parse the configuration for shards of ``shard_shape``."""
        keys = ["chunk_shape", "codecs", "index_codecs"]
        config = check_config_keys(config, keys, ["index_location"], where, "sharding_indexed")
        inner = _parse_inner_shape(config["chunk_shape"], shard_shape, where)
        codecs = parse_codecs(config["codecs"], data_type, inner, where, inner_chain=True)
        index_codecs = _parse_index_codecs(config["index_codecs"], where)
        location = config.get("index_location", "end")
        if location not in ("start", "end"):
            raise fail(where, f"index_location must be 'start' or 'end', not {location!r}")
        return cls(inner, codecs, index_codecs, location)

    def to_json(self) -> dict[str, Any]:
        """The codec object."""
        config = {
            "chunk_shape": list(self.chunk_shape),
            "codecs": self.codecs.to_json(),
            "index_codecs": self.index_codecs.to_json(),
            "index_location": self.index_location,
        }
        return {"name": self.name, "configuration": config}

    def index_nbytes(self, shard_shape: Sequence[int]) -> int:
        """The size of the encoded index of a shard."""
        n = math.prod(s // c for s, c in zip(shard_shape, self.chunk_shape, strict=True))
        return 16 * n + (4 if self.index_codecs.crc32c else 0)


def _parse_inner_shape(value: Any, shard_shape: Sequence[int], where: str) -> tuple[int, ...]:
    ok = isinstance(value, list) and len(value) == len(shard_shape)
    if not ok or not all(is_int(c) and c >= 1 for c in value):
        problem = f"the sharding chunk_shape must be {len(shard_shape)} positive integers"
        raise fail(where, f"{problem}, not {value!r}")
    if any(s % c for s, c in zip(shard_shape, value, strict=True)):
        problem = f"the shard shape {list(shard_shape)} is not a multiple of the inner chunk"
        raise fail(where, f"{problem} shape {value}")
    return tuple(value)


def _parse_index_codecs(value: Any, where: str) -> ShardIndexCodecs:
    names = [item.get("name") if isinstance(item, dict) else item for item in _list(value, where)]
    if names not in (["bytes"], ["bytes", "crc32c"]):
        problem = f"shard index codecs {names!r} (supported: bytes, optionally then crc32c)"
        raise unsupported(where, problem)
    from cytepool.io.zarr.data_types import DataType

    index_type = DataType("uint64", np.dtype("uint64"))
    configs = [named_configuration(item, where, "index codec")[1] for item in value]
    codec = BytesCodec.from_json(configs[0], index_type, where)
    if len(value) == 2:
        Crc32cCodec.from_json(configs[1], index_type, where)
    return ShardIndexCodecs(codec.endian or "little", len(value) == 2)


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise fail(where, f"index_codecs must be a non-empty list, not {value!r}")
    return value


CODECS: dict[str, Any] = {
    "bytes": BytesCodec,
    "vlen-utf8": VlenUtf8Codec,
    "gzip": GzipCodec,
    "zstd": ZstdCodec,
    "crc32c": Crc32cCodec,
    "sharding_indexed": ShardingCodec,
}


def parse_codecs(
    value: Any,
    data_type: DataType,
    chunk_shape: Sequence[int],
    where: str,
    *,
    inner_chain: bool = False,
) -> CodecChain:
    """Parse and check a ``codecs`` list.

    Parameters
    ----------
    value
        The JSON list.
    data_type
        The array's data type.
    chunk_shape
        The shape of the chunks the chain encodes.
    where
        The file, for error messages.
    inner_chain
        Whether this is the inner chain of a sharding codec.

    Returns
    -------
    The chain.

    Raises
    ------
    FormatError
        If the list is malformed or out of order.
    UnsupportedFeatureError
        If it names a codec or combination this module does not support.

    Examples
    --------
    >>> from cytepool.io.zarr.data_types import DataType
    >>> chain = parse_codecs(
    ...     [{"name": "bytes", "configuration": {"endian": "little"}},
    ...      {"name": "zstd", "configuration": {"level": 0, "checksum": False}}],
    ...     DataType.from_json("float32", "z"), (4,), "zarr.json")
    >>> chain.compressors
    (ZstdCodec(level=0, checksum=False),)
    """
    if not isinstance(value, list) or not value:
        raise fail(where, f"codecs must be a non-empty list, not {value!r}")
    codecs = [_parse_codec(item, data_type, chunk_shape, where) for item in value]
    # the kinds are checked next: the first turns arrays into bytes, the others compress
    head, tail = cast("ArrayBytes", codecs[0]), cast("list[Compressor]", codecs[1:])
    if head.kind != "array->bytes":
        problem = f"the first codec must turn an array into bytes, not {head.name!r}"
        raise fail(where, problem)
    for codec in tail:
        _check_tail_codec(codec, where)
    if isinstance(head, ShardingCodec) and (tail or inner_chain):
        what = "nested sharding" if inner_chain else "codecs after sharding_indexed"
        raise unsupported(where, what)
    _check_chunk_size(head, data_type, chunk_shape, where)
    return CodecChain(head, tuple(tail))


def _parse_codec(item: Any, data_type: DataType, chunk_shape: Sequence[int], where: str) -> Codec:
    name, config = named_configuration(item, where, "codec")
    cls = CODECS.get(name)
    if cls is None:
        problem = f"the codec {name!r} (supported: {', '.join(CODECS)})"
        raise unsupported(where, problem)
    if cls is ShardingCodec:
        return ShardingCodec.from_json(config, data_type, where, chunk_shape)
    return cls.from_json(config, data_type, where)


def _check_tail_codec(codec: Codec, where: str) -> None:
    if codec.kind == "array->bytes":
        raise fail(where, f"the codec {codec.name!r} must come first, and only once")
    if isinstance(codec, Crc32cCodec):
        problem = "the crc32c codec outside a shard index"
        raise unsupported(where, problem)


def _check_chunk_size(
    head: ArrayBytes, data_type: DataType, chunk_shape: Sequence[int], where: str
) -> None:
    if isinstance(head, ShardingCodec):
        index = head.index_nbytes(chunk_shape)
        if index > MAX_CHUNK_BYTES:
            problem = f"a shard index of {index} bytes exceeds MAX_CHUNK_BYTES"
            raise unsupported(where, problem)
        return
    nbytes = math.prod(chunk_shape) * data_type.itemsize
    if nbytes > MAX_CHUNK_BYTES:
        problem = f"chunks of {nbytes} bytes exceed MAX_CHUNK_BYTES ({MAX_CHUNK_BYTES})"
        raise unsupported(where, problem)
