"""The numba kernels of the direct HDF5 reader: LZF decoding and HDF5's Fletcher-32 checksum.

This module imports numba at the top, so :mod:`cytepool.io.anndata._hdf5_filters` imports it
only when a chunk needs one of these kernels. Both run without the GIL, so the decode threads
run them side by side.
"""

from __future__ import annotations

from typing import Any

import numba

# What lzf_decode returns besides the decoded length.
OVERRUN = -1  # the output would go past the end of the buffer (the chunk decodes to more bytes)
TRUNCATED = -2  # the input ends inside an instruction
BAD_REFERENCE = -3  # a back-reference points before the start of the output

_BLOCK = 360  # 16-bit words summed before the sums are folded (HDF5's H5_checksum_fletcher32)


@numba.njit(cache=True, nogil=True)
def lzf_decode(source: Any, out: Any) -> int:  # pragma: no cover - compiled
    """Decode the LZF stream ``source`` (uint8) into ``out`` (uint8), as liblzf's lzf_decompress.

    Returns the number of bytes written, or :data:`OVERRUN`, :data:`TRUNCATED` or
    :data:`BAD_REFERENCE`. Every instruction is checked against both buffers before it runs,
    so no input makes it read or write outside them.
    """
    ip, op = 0, 0
    end_in, end_out = source.shape[0], out.shape[0]
    while ip < end_in:
        control = int(source[ip])
        ip += 1
        if control < 32:  # a run of control + 1 literal bytes
            length = control + 1
            if op + length > end_out:
                return OVERRUN
            if ip + length > end_in:
                return TRUNCATED
            out[op : op + length] = source[ip : ip + length]
            ip += length
            op += length
            continue
        length = control >> 5  # a back-reference: copy length + 2 bytes from earlier output
        if ip >= end_in:
            return TRUNCATED
        if length == 7:
            length += int(source[ip])
            ip += 1
            if ip >= end_in:
                return TRUNCATED
        reference = op - ((control & 31) << 8) - 1 - int(source[ip])
        ip += 1
        if op + length + 2 > end_out:
            return OVERRUN
        if reference < 0:
            return BAD_REFERENCE
        for k in range(length + 2):  # byte by byte: the two ranges may overlap
            out[op + k] = out[reference + k]
        op += length + 2
    return op


@numba.njit(cache=True, nogil=True)
def fletcher32(data: Any) -> int:  # pragma: no cover - compiled
    """HDF5's Fletcher-32 of ``data`` (uint8): big-endian 16-bit words, sums folded every 360
    words, an odd last byte taken as the high byte of a word, two final folds."""
    words = data.shape[0] // 2
    sum1, sum2, position = 0, 0, 0  # 64-bit: sums never wrap (HDF5 folds before 32 bits do)
    while words > 0:
        block = min(words, _BLOCK)
        words -= block
        for _ in range(block):
            sum1 += (int(data[position]) << 8) | int(data[position + 1])
            sum2 += sum1
            position += 2
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    if data.shape[0] % 2:
        sum1 += int(data[position]) << 8
        sum2 += sum1
        sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
        sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    sum1 = (sum1 & 0xFFFF) + (sum1 >> 16)
    sum2 = (sum2 & 0xFFFF) + (sum2 >> 16)
    return (sum2 << 16) | sum1


@numba.njit(cache=True, nogil=True)
def heap_objects(
    data: Any, start: int, object_header: int, found: Any
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Walk the objects of a global heap collection (``data``, uint8, the whole collection)
    from byte ``start`` as libhdf5's ``H5HG__cache_heap_deserialize`` does: each object's header
    (``object_header`` bytes: 2 of index, 2 of reference count, 4 reserved, then its size) and
    its size padded to 8 bytes; index 0 is free space, whose size includes its header; a tail
    too small for a header is free space.

    Writes ``(index, size)`` of the objects of index > 0 into the rows of ``found`` (int64,
    ``len(data) // object_header`` rows at least). Returns the number written and -1, or the
    number written and the byte at which the walk would not end (an empty free space, an
    object past the end of the collection).
    """
    end = data.shape[0]
    position = start
    count = 0
    while position < end:
        if position + object_header > end:
            break
        index = int(data[position]) | (int(data[position + 1]) << 8)
        length = 0
        for k in range(object_header - 1, 7, -1):
            if length > (end >> 8):  # past the end already: stop before it overflows
                return count, position
            length = (length << 8) | int(data[position + k])
        need = object_header + (length + 7) // 8 * 8 if index else length
        if need <= 0 or length > end or position + need > end:
            return count, position
        if index:
            found[count, 0] = index
            found[count, 1] = length
            count += 1
        position += need
    return count, -1
