"""The optional fast inflate: libdeflate (the ``deflate`` package, ``pip install cytepool[fast]``).

libdeflate decodes a whole gzip member into a buffer of a size given in advance, about three times
as fast as the standard library's zlib. It is used only where the decoded size is known exactly
(a chunk of a fixed-size data type under a single gzip codec), so that buffer is also the bound
against decompression bombs, and only as a shortcut: :func:`gunzip` returns the decoded bytes only
when they are certainly what the strict streaming decoder of :mod:`cytepool.io.zarr.codecs` would
return, and None otherwise (libdeflate missing or switched off, any error, a short or long
result, a doubt about trailing bytes or further members); the caller then decodes with the
standard library, which accepts exactly the same valid chunks and raises the same errors with the
same messages for every invalid one.

libdeflate checks the member's CRC-32 and size, but ignores whatever follows the member. A chunk
is taken as one member with nothing after it when its last 8 bytes are the trailer of the decoded
bytes (their CRC-32 and size) and those 8 bytes occur nowhere earlier in the chunk: bytes after
the member would have to end with the member's own trailer, which the member already holds.

Set the environment variable ``CYTEPOOL_ZARR_FAST`` to ``0`` to decode with the standard library
only.
"""

from __future__ import annotations

import functools
import os
import types
from typing import Any

from cytepool.errors import InputError

__all__ = ["ENV_FAST", "fast_inflate", "gunzip"]

ENV_FAST = "CYTEPOOL_ZARR_FAST"
_TRAILER = 8
_SMALLEST_MEMBER = 18  # a 10-byte header, an empty deflate stream (2 bytes) and the trailer


@functools.cache
def _libdeflate() -> types.ModuleType | None:
    try:
        import deflate
    except ImportError:
        return None
    return deflate


def fast_inflate() -> types.ModuleType | None:
    """The libdeflate binding, or None if it is not installed or ``CYTEPOOL_ZARR_FAST=0``.

    Examples
    --------
    >>> fast_inflate() is None or hasattr(fast_inflate(), "gzip_decompress")
    True
    """
    value = os.environ.get(ENV_FAST)
    if value is not None and value not in ("0", "1"):
        msg = f"{ENV_FAST} must be 0 or 1, found {value!r}; unset it or set it to 1"
        raise InputError(msg)
    return None if value == "0" else _libdeflate()


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
    if len(data) < _SMALLEST_MEMBER:
        return None
    try:
        out: bytearray = module.gzip_decompress(data, size)
    except module.DeflateError:
        return None
    if len(out) != size:
        return None
    trailer = bytes(data[-_TRAILER:])
    crc = int(module.crc32(out)).to_bytes(4, "little")
    if trailer != crc + (size & 0xFFFFFFFF).to_bytes(4, "little"):
        return None
    if data.find(trailer) != len(data) - _TRAILER:
        return None
    return out
