"""HDF5's filter pipeline, decoded by cytepool: deflate, shuffle, Fletcher-32 and LZF.

A chunk's stored bytes went through the dataset's filters in order when it was written (one
filter skipped where its bit of the chunk's filter mask is set); :meth:`Pipeline.decode` undoes
them in reverse order and checks every step: a deflate stream must end exactly where the chunk
ends and decode to the size the chunk must have, an LZF stream likewise (HDF5's own LZF filter
returns a short chunk when the stream is cut short, and the rest of the chunk is then stale
memory), and a Fletcher-32 checksum must match (either byte order HDF5 ever stored). Any
failure is a :class:`~cytepool.errors.FormatError` saying what is wrong with the chunk (the
caller adds which chunk of which dataset of which file).

deflate decodes with libdeflate (the ``deflate`` package) where it is installed and the result
is certain (the same test as :mod:`cytepool.io.zarr._fast` makes of a gzip member), else with
the standard library's zlib; both
release the GIL. LZF and Fletcher-32 are numba kernels (:mod:`._hdf5_kernels`, imported when
first needed), also without the GIL.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from cytepool.errors import FormatError

__all__ = ["DEFLATE", "FLETCHER32", "LZF", "SHUFFLE", "Pipeline", "filter_name"]

DEFLATE, SHUFFLE, FLETCHER32, LZF = 1, 2, 3, 32000
_COMPRESSORS = (DEFLATE, LZF)
_CHECKSUM = 4  # bytes Fletcher-32 appends
_NAMES = {
    DEFLATE: "deflate",
    SHUFFLE: "shuffle",
    FLETCHER32: "fletcher32",
    LZF: "lzf",
    4: "szip",
    5: "nbit",
    6: "scaleoffset",
    307: "bzip2",
    32001: "blosc",
    32004: "lz4",
    32008: "bitshuffle",
    32013: "zfp",
    32015: "zstd",
    32026: "blosc2",
}


def filter_name(code: int) -> str:
    """The usual name of an HDF5 filter id, or ``"filter <id>"``.

    Examples
    --------
    >>> filter_name(1), filter_name(32001), filter_name(99999)
    ('deflate', 'blosc', 'filter 99999')
    """
    return _NAMES.get(code, f"filter {code}")


def _most_stored(code: int, size: int) -> int:
    """The most bytes ``code`` can turn ``size`` bytes into."""
    if code == FLETCHER32:
        return size + _CHECKSUM
    if code == DEFLATE:  # stored blocks, or a fast encoder's literals (zlib-ng: up to 1/8 more)
        return size + size // 8 + 1024
    if code == LZF:  # one control byte per 32 literals
        return size + size // 32 + 16
    return size


@dataclass(frozen=True)
class Pipeline:
    """A dataset's filters (ids, in the order they were applied on writing).

    Parameters
    ----------
    codes
        The filter ids, each one of :data:`DEFLATE`, :data:`SHUFFLE`, :data:`FLETCHER32`,
        :data:`LZF`; shuffle, if any, before the one compressor, if any.
    element_size
        The element size the shuffle filter was given.
    """

    codes: tuple[int, ...]
    element_size: int

    @classmethod
    def check(cls, filters: Sequence[tuple[int, Sequence[int]]], itemsize: int) -> Pipeline | str:
        """The pipeline of ``(id, parameters)`` filters, or why cytepool does not decode it."""
        codes = tuple(code for code, _ in filters)
        for code in codes:
            if code not in (DEFLATE, SHUFFLE, FLETCHER32, LZF):
                return f"{filter_name(code)} (HDF5 filter {code}) is not decoded by cytepool"
        compressors = [k for k, code in enumerate(codes) if code in _COMPRESSORS]
        shuffles = [k for k, code in enumerate(codes) if code == SHUFFLE]
        if len(compressors) > 1 or (compressors and any(k > compressors[0] for k in shuffles)):
            order = ", ".join(map(filter_name, codes))
            return f"filters in an order cytepool does not decode: {order}"
        for code, parameters in filters:
            if code == SHUFFLE and parameters and parameters[0] != itemsize:
                return f"shuffle of {parameters[0]}-byte elements of a {itemsize}-byte type"
        return cls(codes, itemsize)

    @property
    def names(self) -> tuple[str, ...]:
        """The filters' names, in order."""
        return tuple(filter_name(code) for code in self.codes)

    def active(self, mask: int) -> tuple[int, ...]:
        """The filters applied to a chunk with filter mask ``mask``."""
        return tuple(code for k, code in enumerate(self.codes) if not mask >> k & 1)

    def stored_range(self, mask: int, nbytes: int) -> tuple[int, int]:
        """The fewest and most bytes a chunk of ``nbytes`` with filter mask ``mask`` can store."""
        active = self.active(mask)
        most = nbytes
        for code in active:
            most = _most_stored(code, most)
        if any(code in _COMPRESSORS for code in active):
            return 1, most
        return most, most

    def decode(
        self, data: Any, mask: int, nbytes: int, fast: ModuleType | None
    ) -> np.ndarray[Any, Any]:
        """The ``nbytes`` decoded bytes (uint8) of the stored chunk ``data`` (bytes); deflate
        streams are tried first with ``fast`` (the libdeflate binding, or None).

        Raises
        ------
        FormatError
            A corrupt stream, a checksum mismatch or a chunk of the wrong decoded size.
        """
        active = self.active(mask)
        buffer = data
        for k in reversed(range(len(active))):
            code = active[k]
            if code == FLETCHER32:
                buffer = _verified(buffer)
            elif code == SHUFFLE:
                buffer = _unshuffled(buffer, self.element_size)
            elif code == DEFLATE:
                buffer = _inflated(buffer, _size_before(active, k, nbytes), fast)
            else:
                buffer = _unlzf(buffer, _size_before(active, k, nbytes))
        array = np.frombuffer(buffer, np.uint8)
        if array.size != nbytes:
            msg = f"decodes to {array.size} bytes, expected {nbytes}"
            raise FormatError(msg)
        return array


def _size_before(active: tuple[int, ...], k: int, nbytes: int) -> int:
    """The size of a chunk of ``nbytes`` before filter ``active[k]`` was applied to it."""
    return nbytes + _CHECKSUM * active[:k].count(FLETCHER32)


def _verified(buffer: Any) -> memoryview:
    """The bytes before a Fletcher-32 checksum that matches them."""
    from cytepool.io.anndata._hdf5_kernels import fletcher32

    view = memoryview(buffer).cast("B")
    if len(view) < _CHECKSUM:
        msg = f"{len(view)} bytes, too few for a Fletcher-32 checksum"
        raise FormatError(msg)
    body = view[:-_CHECKSUM]
    stored = int.from_bytes(view[-_CHECKSUM:], "little")
    computed = int(fletcher32(np.frombuffer(body, np.uint8)))
    swapped = ((computed & 0x00FF00FF) << 8) | ((computed >> 8) & 0x00FF00FF)  # before HDF5 1.6.3
    if stored not in (computed, swapped):
        found = f"stored {stored:#010x}, computed {computed:#010x}"
        msg = f"Fletcher-32 checksum mismatch ({found})"
        raise FormatError(msg)
    return body


def _unshuffled(buffer: Any, size: int) -> np.ndarray[Any, Any]:
    """HDF5's byte shuffle undone: byte ``b`` of element ``e`` is at ``b * count + e``; bytes
    after the last whole element stay where they are."""
    array = np.frombuffer(buffer, np.uint8)
    count = array.size // size
    if size <= 1 or count <= 1:
        return array
    out = np.empty_like(array)
    whole = count * size
    elements = out[:whole].reshape(count, size)
    for byte in range(size):
        elements[:, byte] = array[byte * count : (byte + 1) * count]
    out[whole:] = array[whole:]
    return out


def _inflated(buffer: Any, size: int, fast: ModuleType | None) -> Any:
    """The ``size`` bytes the zlib stream ``buffer`` decodes to, nothing after the stream."""
    done = _fast_inflated(buffer, size, fast) if fast is not None else None
    if done is not None:
        return done
    decoder = zlib.decompressobj()
    try:
        out = decoder.decompress(buffer, size + 1)
    except zlib.error as error:
        msg = f"corrupt deflate stream ({error})"
        raise FormatError(msg) from error
    if len(out) > size:
        msg = f"decodes to more than the {size} bytes of a chunk"
        raise FormatError(msg)
    if not decoder.eof:
        msg = f"the deflate stream is cut short ({len(out)} of {size} bytes decoded)"
        raise FormatError(msg)
    if len(out) != size:
        msg = f"decodes to {len(out)} bytes, expected {size}"
        raise FormatError(msg)
    if decoder.unused_data:
        msg = f"{len(decoder.unused_data)} bytes after the end of the deflate stream"
        raise FormatError(msg)
    return out


def _fast_inflated(buffer: Any, size: int, module: ModuleType) -> bytearray | None:
    """libdeflate's decoding of ``buffer`` if certainly right (exactly ``size`` bytes, its
    Adler-32 trailer last and nowhere earlier, so nothing follows the stream), else None."""
    if size <= 0:
        return None
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    try:
        out: bytearray = module.zlib_decompress(data, size)
    except module.DeflateError:
        return None
    trailer = int(module.adler32(out)).to_bytes(4, "big")
    if len(out) != size or data[-4:] != trailer or data.find(trailer) != len(data) - 4:
        return None
    return out


def _unlzf(buffer: Any, size: int) -> np.ndarray[Any, Any]:
    """The ``size`` bytes the LZF stream ``buffer`` decodes to, exactly."""
    from cytepool.io.anndata import _hdf5_kernels as kernels

    out = np.empty(size, np.uint8)
    written = int(kernels.lzf_decode(np.frombuffer(buffer, np.uint8), out))
    problems = {
        kernels.OVERRUN: f"decodes to more than the {size} bytes of a chunk",
        kernels.TRUNCATED: "the LZF stream is cut short inside an instruction",
        kernels.BAD_REFERENCE: "an LZF back-reference points before the start of the chunk",
    }
    if written in problems:
        msg = problems[written]
        raise FormatError(msg)
    if written != size:
        msg = f"the LZF stream decodes to {written} bytes, expected {size}"
        raise FormatError(msg)
    return out
