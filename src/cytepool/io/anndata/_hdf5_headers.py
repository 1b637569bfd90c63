"""Find the stored strings of an HDF5 object's attributes in its object header.

libhdf5 reads a variable-length string attribute (every attribute h5py writes from a ``str``,
such as anndata's ``encoding-type``) through its descriptors (length, address of a global heap
collection, index of the object there), which the attribute message of the object's header
holds; it allocates each length before it compares it with the heap object. One damaged byte
of a length (the fuzz run) made it allocate and fill 3.9 GiB, for 9 s, before it failed.
:func:`string_attributes` reads those descriptors as the file stores them, so that
:mod:`cytepool.io.anndata._hdf5_heap` checks them against the heap before h5py reads the
attribute.

Object headers of version 1 (what h5py writes by default) are read, with their continuation
blocks. Headers of version 2 (files written with ``libver="latest"``, or tracking creation
order) carry a checksum, which libhdf5 checks before it reads an attribute: a damaged one is
refused there (an error, not an allocation), so they are not read here. Nor are attributes whose
datatype or dataspace is a shared message, nor a header this reader cannot follow to its end
(the header is then left to libhdf5, as before).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

__all__ = ["header_messages", "string_attributes"]

_ATTRIBUTE = 0x000C
_CONTINUATION = 0x0010
_VARIABLE_LENGTH = 9  # datatype class
_V2_SIGNATURE = b"OHDR"  # an object header of version 2
_V2_CONTINUED = b"OCHK"  # a continuation block of one
_MOST_BLOCKS = 64  # header blocks followed per object (continuations of continuations)
_MOST_MESSAGES = 4096  # messages read per object
_MOST_BLOCK_BYTES = 1 << 20  # bytes read per header block (a message holds at most 64 KiB)


def string_attributes(
    view: Any, address: int, sizes: tuple[int, int], base: int = 0
) -> list[tuple[str, bytes]]:
    """The variable-length string attributes stored in the object header at address
    ``address`` of the file ``view`` (``len`` and byte slices), each as its name and its
    descriptors as stored (``4 + offsets + 4`` bytes per string); ``sizes``: the file's sizes
    of offsets and lengths; ``base``: the size of its user block, from whose end addresses
    count. Empty for a header this reader does not follow (see the module's text)."""
    found = []
    try:
        for kind, message in _messages(view, (address, base), sizes):
            attribute = _string_attribute(message, sizes) if kind == _ATTRIBUTE else None
            if attribute is not None:
                found.append(attribute)
    except _Unread:
        return []
    return found


def header_messages(
    view: Any, address: int, sizes: tuple[int, int], base: int = 0
) -> list[tuple[int, bytes]] | None:
    """The type and data of every message of the object header at ``address`` (of version 1,
    or 2: ``OHDR``), continuation blocks included; None for a header this reader does not
    follow. ``view``, ``sizes`` and ``base`` as for :func:`string_attributes`."""
    try:
        if _bytes(view, base + address, 4) == _V2_SIGNATURE:
            return list(_messages_v2(view, (address, base), sizes))
        return list(_messages(view, (address, base), sizes))
    except _Unread:
        return None


class _Unread(Exception):
    """The header cannot be followed here: libhdf5 is left to read it."""


def _messages(
    view: Any, where: tuple[int, int], sizes: tuple[int, int]
) -> Iterator[tuple[int, bytes]]:
    """The type and data of every message of the version 1 header at ``where`` (its address
    and the user block's size), continuation blocks included, each block read once (raises
    _Unread where the header cannot be followed)."""
    address, base = where
    prefix = _bytes(view, base + address, 12)  # version, reserved, messages, references, size
    if prefix[0] != 1:
        raise _Unread  # a version 2 header ("OHDR"): checked by libhdf5 (see the module's text)
    blocks = [(base + address + 16, int.from_bytes(prefix[8:12], "little"))]  # prefix: 16
    for start, size in blocks:
        if len(blocks) > _MOST_BLOCKS or size > _MOST_BLOCK_BYTES:
            raise _Unread
        for kind, message in _block_messages(_bytes(view, start, size)):
            if kind == _CONTINUATION:
                at, length = _continuation(message, sizes)
                blocks.append((base + at, length))
            else:
                yield kind, message


def _messages_v2(
    view: Any, where: tuple[int, int], sizes: tuple[int, int]
) -> Iterator[tuple[int, bytes]]:
    """As :func:`_messages`, for a header of version 2: its first block follows a prefix of
    variable size, continuation blocks (``OCHK``) start with a signature; each block ends with
    a checksum (checked by libhdf5, which opened the object)."""
    address, base = where
    prefix = _bytes(view, base + address, 6)  # signature, version, flags
    flags = prefix[5]
    if prefix[4] != 2:
        raise _Unread
    at = base + address + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
    width = 1 << (flags & 0x03)
    size = int.from_bytes(_bytes(view, at, width), "little")
    blocks = [(at + width, size)]
    ordered = bool(flags & 0x04)  # messages carry their creation order
    for start, length in blocks:
        if len(blocks) > _MOST_BLOCKS or length > _MOST_BLOCK_BYTES:
            raise _Unread
        for kind, message in _block_messages_v2(_bytes(view, start, length), ordered):
            if kind == _CONTINUATION:
                at, length = _continuation(message, sizes)
                if _bytes(view, base + at, 4) != _V2_CONTINUED or length < 8:
                    raise _Unread
                blocks.append((base + at + 4, length - 8))  # signature, checksum
            else:
                yield kind, message


def _block_messages_v2(data: bytes, ordered: bool) -> Iterator[tuple[int, bytes]]:
    """The type and data of each message of a block of a version 2 header: each a type (1
    byte), a size (2), flags (1) and, if ``ordered``, a creation order (2), then its data; a
    gap too small for a message ends the block."""
    head = 6 if ordered else 4
    position = 0
    for _ in range(_MOST_MESSAGES):
        if position + head > len(data):
            return
        kind = data[position]
        size = int.from_bytes(data[position + 1 : position + 3], "little")
        if position + head + size > len(data):
            raise _Unread
        yield kind, data[position + head : position + head + size]
        position += head + size
    raise _Unread


def _block_messages(data: bytes) -> Iterator[tuple[int, bytes]]:
    """The type and data of each message of the block ``data``: each a type (2 bytes), a
    size (2), flags (1) and 3 reserved bytes, then its data."""
    position = 0
    for _ in range(_MOST_MESSAGES):
        if position + 8 > len(data):
            return
        kind = int.from_bytes(data[position : position + 2], "little")
        size = int.from_bytes(data[position + 2 : position + 4], "little")
        if position + 8 + size > len(data):
            raise _Unread
        yield kind, data[position + 8 : position + 8 + size]
        position += 8 + size
    raise _Unread


def _continuation(message: bytes, sizes: tuple[int, int]) -> tuple[int, int]:
    """``(start, size)`` of the block of messages a continuation message names."""
    offsets, lengths = sizes
    if len(message) < offsets + lengths:
        raise _Unread
    start = int.from_bytes(message[:offsets], "little")
    return start, int.from_bytes(message[offsets : offsets + lengths], "little")


def _string_attribute(message: bytes, sizes: tuple[int, int]) -> tuple[str, bytes] | None:
    """The name and stored descriptors of an attribute message of variable-length strings,
    None for any other attribute (or one stored in a way not read here)."""
    if len(message) < 8 or message[0] not in (1, 2, 3) or (message[0] > 1 and message[1] & 0x03):
        return None
    version = message[0]
    name_size, type_size, space_size = (
        int.from_bytes(message[k : k + 2], "little") for k in (2, 4, 6)
    )
    pad = (lambda n: -(-n // 8) * 8) if version == 1 else (lambda n: n)
    at = 9 if version == 3 else 8
    name = message[at : at + name_size].split(b"\0", 1)[0].decode("utf-8", "replace")
    at += pad(name_size)
    datatype, at = message[at : at + type_size], at + pad(type_size)
    dataspace, at = message[at : at + space_size], at + pad(space_size)
    if len(datatype) < 8 or datatype[0] & 0x0F != _VARIABLE_LENGTH or datatype[1] & 0x0F != 1:
        return None  # not a variable-length string
    count = _elements(dataspace, sizes[1])
    need = count * (4 + sizes[0] + 4) if count is not None else -1
    if need < 0 or at + need > len(message):
        raise _Unread
    return name, message[at : at + need]


def _elements(dataspace: bytes, lengths: int) -> int | None:
    """The number of elements of a dataspace message whose sizes take ``lengths`` bytes each
    (None if it cannot be read)."""
    if len(dataspace) < 4 or dataspace[0] not in (1, 2):
        return None
    rank = dataspace[1]
    if dataspace[0] == 2 and dataspace[3] == 2:  # a null dataspace
        return 0
    at = 8 if dataspace[0] == 1 else 4
    if len(dataspace) < at + lengths * rank:
        return None
    dims = [
        int.from_bytes(dataspace[at + lengths * k : at + lengths * (k + 1)], "little")
        for k in range(rank)
    ]
    return math.prod(dims)


def _bytes(view: Any, start: int, size: int) -> bytes:
    """``size`` bytes of the file at ``start`` (raises _Unread if they are not all there)."""
    if start < 0 or size < 0 or start + size > len(view):
        raise _Unread
    data: bytes = view[start : start + size]
    return data
