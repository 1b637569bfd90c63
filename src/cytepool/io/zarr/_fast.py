"""The fast decoders, installed with cytepool: libdeflate (the ``deflate`` package) and zstandard.

libdeflate also compresses gzip chunks when arrays are written (:func:`gzip`).

libdeflate decodes a whole gzip member into a buffer of a size given in advance, about three times
as fast as the standard library's zlib. It is used only where the decoded size is known exactly
(a chunk of a fixed-size data type under a single gzip codec), so that buffer is also the bound
against decompression bombs, and only as a shortcut: :func:`gunzip` returns the decoded bytes only
when they are certainly what the strict streaming decoder of :mod:`cytepool.io.zarr.codecs` would
return, and None otherwise (libdeflate missing or switched off, any error, a short or long
result, a doubt about trailing bytes or further members); the caller then decodes with the
standard library, which accepts exactly the same valid chunks and raises the same errors with the
same messages for every invalid one.

libdeflate checks the member's CRC-32 and size, but not the header's CRC-16 (flag FHCRC), which
zlib checks: a member whose header has one is left to the standard library. It also ignores
whatever follows the member. A chunk
is taken as one member with nothing after it when the 4 bytes of the decoded size (the end of the
trailer libdeflate checked) occur only at its end: the member ends with them, so nothing follows
it. Where they occur earlier too (rarely, by chance, in compressed data), the chunk is taken as
one member when its last 8 bytes are the trailer of the decoded bytes (their CRC-32 and size) and
those 8 bytes occur nowhere earlier in the chunk: bytes after the member would have to end with
the member's own trailer, which the member already holds.

``zstandard``'s decoder (one per thread, kept across chunks) decodes a
zstd frame straight into the result, in one step. :func:`unzstd_into` takes that shortcut only for
one frame that declares exactly the chunk's size and a window the streaming decoder accepts, whose
blocks (walked from their headers) end exactly at the end of the chunk, and that ends where the
buffer is full (its checksum, if it has one, verified); anything else is left to the streaming
decoder, as for gzip.

A string chunk (vlen-utf8), whose decoded size is not known in advance, takes the same
shortcuts with the size its gzip trailer or zstd frame header states (:func:`gunzip_stated`,
:func:`unzstd_stated`), when that size is plausible (the caller bounds it); the decoded bytes are
then checked in the pieces the streaming decoder would give, so that every outcome, error
messages included, is the streaming decoder's.

Both are dependencies of cytepool (the ``fast`` extra is kept, empty, so that old install
commands still work); if either is missing all the same, its chunks are decoded by the strict
decoders. Set the environment variable ``CYTEPOOL_ZARR_FAST`` to ``0`` to decode with the standard
library (and ``backports.zstd`` / ``compression.zstd``) only, and to compress gzip chunks with zlib:
the tests read every chunk both ways, and write gzip chunks both ways, on both stacks.
"""

from __future__ import annotations

import functools
import os
import threading
import types
from collections.abc import Callable
from typing import Any

from cytepool.errors import InputError

__all__ = [
    "ENV_FAST",
    "describe",
    "fast_inflate",
    "fast_zstd",
    "gunzip",
    "gunzip_stated",
    "gzip",
    "unzstd_into",
    "unzstd_stated",
]

ENV_FAST = "CYTEPOOL_ZARR_FAST"
_TRAILER = 8
_SMALLEST_MEMBER = 18  # a 10-byte header, an empty deflate stream (2 bytes) and the trailer
_FHCRC = 0x02  # the gzip header flag of a CRC-16 of the header, which libdeflate does not check
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_RLE, _RESERVED = 1, 3  # zstd block types (0 raw and 2 compressed: their length is stored)
_decoders = threading.local()  # each thread's zstandard decoder


@functools.cache
def _libdeflate() -> types.ModuleType | None:
    try:
        import deflate
    except ImportError:
        return None
    return deflate


@functools.cache
def _zstandard() -> types.ModuleType | None:
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard


def _enabled() -> bool:
    value = os.environ.get(ENV_FAST)
    if value is not None and value not in ("0", "1"):
        msg = f"{ENV_FAST} must be 0 or 1, found {value!r}; unset it or set it to 1"
        raise InputError(msg)
    return value != "0"


def fast_zstd() -> types.ModuleType | None:
    """The zstandard module, or None if it is not installed or ``CYTEPOOL_ZARR_FAST=0``.

    Examples
    --------
    >>> fast_zstd() is None or hasattr(fast_zstd(), "ZstdDecompressor")
    True
    """
    return _zstandard() if _enabled() else None


def describe() -> str:
    """Which fast decoders reads use, for benchmark reports.

    Examples
    --------
    >>> describe().startswith("fast decoders")
    True
    """
    if not _enabled():
        return f"fast decoders off ({ENV_FAST}=0)"
    parts = []
    for module, name, codec in (
        (_libdeflate(), "deflate", "gzip"),
        (_zstandard(), "zstandard", "zstd"),
    ):
        version = getattr(module, "__version__", "") if module is not None else None
        parts.append(
            f"{codec}: {name} {version}".rstrip()
            if version is not None
            else f"{codec}: standard library"
        )
    return "fast decoders (" + ", ".join(parts) + ")"


def fast_inflate() -> types.ModuleType | None:
    """The libdeflate binding, or None if it is not installed or ``CYTEPOOL_ZARR_FAST=0``.

    Examples
    --------
    >>> fast_inflate() is None or hasattr(fast_inflate(), "gzip_decompress")
    True
    """
    return _libdeflate() if _enabled() else None


def gunzip(data: Any, size: int) -> bytearray | None:
    """The ``size`` bytes one gzip member ``data`` decodes to, or None if unsure (see above).

    Parameters
    ----------
    data
        The encoded chunk (bytes or a bytearray; anything else gives None).
    size
        The exact number of bytes a valid chunk decodes to.

    Returns
    -------
    The decoded bytes, or None: decode with the standard library instead.

    Examples
    --------
    >>> import zlib
    >>> member = zlib.compress(b"abc" * 100, 4, wbits=31)
    >>> fast_inflate() is None or gunzip(member, 300) == b"abc" * 100
    True
    >>> gunzip(member + member, 300) is None  # two members: left to the standard library
    True
    """
    module = fast_inflate()
    if module is None or size <= 0 or not isinstance(data, bytes | bytearray):
        return None
    if len(data) < _SMALLEST_MEMBER or data[3] & _FHCRC:
        return None
    try:
        out: bytearray = module.gzip_decompress(data, size)
    except module.DeflateError:
        return None
    if len(out) != size:
        return None
    isize = (size & 0xFFFFFFFF).to_bytes(4, "little")
    if data.rfind(isize, 0, len(data) - 1) < 0:  # only in the last 4 bytes: the checked trailer's
        return out
    trailer = bytes(data[-_TRAILER:])
    crc = int(module.crc32(out)).to_bytes(4, "little")
    if trailer != crc + isize:
        return None
    if data.rfind(trailer, 0, len(data) - 1) >= 0:
        return None
    return out


def gunzip_stated(data: Any, most: int) -> bytearray | None:
    """What one gzip member ``data`` decodes to, of the size its trailer states, if that size
    is at most ``most`` (a chunk whose decoded size is not known in advance: vlen-utf8
    strings), or None: decode with the standard library instead (see :func:`gunzip`).

    Examples
    --------
    >>> import zlib
    >>> member = zlib.compress(b"abc" * 100, 4, wbits=31)
    >>> fast_inflate() is None or gunzip_stated(member, 1000) == b"abc" * 100
    True
    >>> gunzip_stated(member, 100) is None  # more than the most allowed: left to the stream
    True
    """
    if not isinstance(data, bytes | bytearray) or len(data) < _SMALLEST_MEMBER:
        return None
    size = int.from_bytes(data[-4:], "little")  # modulo 2**32: a wrong guess gives None
    return gunzip(data, size) if 0 < size <= most else None


def gzip(data: Any, level: int) -> bytearray | None:
    """``data`` compressed into one gzip member by libdeflate at ``level`` (0 to 9), or None if
    libdeflate is not installed or ``CYTEPOOL_ZARR_FAST=0``: compress with the standard library.

    libdeflate compresses a layer chunk at level 4 in about three quarters of zlib's time, into
    a few percent fewer bytes; its member is an ordinary gzip stream (RFC 1952) that every gzip
    decoder reads, zlib included. It writes the header without a file name or time and never
    more than one member.

    Examples
    --------
    >>> import zlib
    >>> member = gzip(b"abc" * 100, 4)
    >>> member is None or zlib.decompress(member, wbits=31) == b"abc" * 100
    True
    """
    module = fast_inflate()
    if module is None:
        return None
    out: bytearray = module.gzip_compress(data, level)
    return out


def unzstd_into(data: Any, out: Any, max_window: int) -> bool:
    """Decode the one zstd frame ``data`` into all of ``out``; False if unsure (see above).

    Parameters
    ----------
    data
        The encoded chunk (bytes or a bytearray; anything else gives False).
    out
        A writable byte buffer (a memoryview or a uint8 array) of exactly the decoded size.
    max_window
        The largest window the streaming decoder accepts for this chunk.

    Returns
    -------
    Whether ``out`` now holds the decoded chunk; if not, its content is undefined and the
    chunk must be decoded by the streaming decoder.

    Examples
    --------
    >>> import numpy as np
    >>> from cytepool.io.zarr.codecs import import_zstd
    >>> frame = import_zstd().compress(b"xyz" * 100)
    >>> out = np.zeros(300, dtype=np.uint8)
    >>> fast_zstd() is None or (unzstd_into(frame, out, 2**23) and out.tobytes() == b"xyz" * 100)
    True
    >>> unzstd_into(frame + frame, out, 2**23)  # two frames: left to the streaming decoder
    False
    """
    module = fast_zstd()
    size = len(memoryview(out).cast("B"))
    if module is None or size <= 0 or not isinstance(data, bytes | bytearray):
        return False
    try:
        if not _one_frame_of(module, data, size, max_window):
            return False
        decoder = getattr(_decoders, "zstd", None)
        if decoder is None:
            decoder = _decoders.zstd = module.ZstdDecompressor()
        with decoder.stream_reader(data, read_across_frames=False) as reader:
            done = reader.readinto(out) == size and reader.read(1) == b""
    except module.ZstdError:
        return False
    return bool(done)


def unzstd_stated(
    data: Any, most: int, max_window: int, buffer: Callable[[int], Any] = bytearray
) -> Any:
    """What the one zstd frame ``data`` decodes to, of the content size its header states, if
    that is at most ``most`` (a chunk whose decoded size is not known in advance: vlen-utf8
    strings), or None: decode with the streaming decoder (see :func:`unzstd_into`).

    The bytes are decoded into ``buffer(size)``, a new bytearray unless the caller gives a
    buffer it reuses (a thread's scratch bytes, which saves faulting in fresh pages).

    Examples
    --------
    >>> from cytepool.io.zarr.codecs import import_zstd
    >>> frame = import_zstd().compress(b"xyz" * 100)
    >>> fast_zstd() is None or unzstd_stated(frame, 1000, 2**23) == b"xyz" * 100
    True
    >>> unzstd_stated(frame, 299, 2**23) is None  # more than the most allowed
    True
    """
    module = fast_zstd()
    if module is None or not isinstance(data, bytes | bytearray) or data[:4] != _ZSTD_MAGIC:
        return None
    try:
        size = module.get_frame_parameters(data).content_size  # 2**64 - 1 if not stated
    except module.ZstdError:
        return None
    if not 0 < size <= most:
        return None
    out = buffer(size)
    return out if unzstd_into(data, out, max_window) else None


def _one_frame_of(module: Any, data: bytes | bytearray, size: int, max_window: int) -> bool:
    """Whether ``data`` is one zstd frame of ``size`` bytes, window at most ``max_window``,
    whose blocks end exactly at the end of ``data``."""
    if data[:4] != _ZSTD_MAGIC:
        return False
    params = module.get_frame_parameters(data)
    if params.content_size != size or params.window_size > max_window:
        return False
    end = _blocks_end(data, module.frame_header_size(data))
    return end is not None and end + (4 if params.has_checksum else 0) == len(data)


def _blocks_end(data: bytes | bytearray, position: int) -> int | None:
    """Where the blocks starting at ``position`` end (after the last block), None if unsure."""
    while position + 3 <= len(data):
        header = int.from_bytes(data[position : position + 3], "little")
        kind, length = (header >> 1) & 3, header >> 3
        if kind == _RESERVED:
            return None
        position += 3 + (1 if kind == _RLE else length)
        if header & 1:
            return position
    return None
