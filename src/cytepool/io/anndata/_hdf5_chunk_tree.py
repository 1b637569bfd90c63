"""Check a chunked HDF5 dataset's chunk B-tree before libhdf5 walks it.

A chunked dataset of an HDF5 file (what anndata and h5py write by default, object headers of
version 1 or 2 with a data layout message of version 1 to 3) finds its chunks through a
*version 1 B-tree*: nodes (signature ``TREE``) of a level each, an internal node listing the
addresses of its children, one level lower, a leaf (level 0) the chunks; every node also names
its left and right siblings. libhdf5 trusts the addresses: a child that is its own node, or an
ancestor, made it crash (a segmentation fault, when it iterates the chunks or computes the
tree's size for an object's info) or walk the tree forever (HDF5 1.14.4 and 2.0); a sibling
that is its own node made the computation of the tree's size, which steps from node to sibling,
run forever, though reading the data never follows siblings.

:func:`check_chunk_tree` walks the tree from its root, as libhdf5 would, before anything asks
libhdf5 for a dataset's chunks: every node must lie in the file, be a chunk node of one level
less than its parent, and be reached once (a visited set): a node reached again (a loop) or
any other of these is a :class:`~cytepool.errors.FormatError` naming the file, the dataset and
the node. The work is a read of each node's header (24 bytes) and of an internal node's
children (32 bytes each for a 1-D dataset): one node per 64 chunks or fewer, as h5py writes
them. Siblings are not followed, as libhdf5 does not follow them to read.
cytepool never asks libhdf5 for what follows them: it walks a file's objects with
:func:`object_address` rather than with ``visititems`` (whose object info computes every
dataset's tree size).

What is not checked: the chunk indexes of files written with ``libver="latest"`` (layout
messages of version 4: fixed and extensible arrays, version 2 B-trees), whose nodes carry
checksums and whose depths follow from their parents (a version 2 B-tree whose root lists
itself as a child, its checksum made anew, is refused by libhdf5 itself: "incorrect cache
entry type", HDF5 1.14.4 and 2.0); a header this reader cannot follow (then the dataset is
left to libhdf5, as before); the B-trees of groups' links.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cytepool.errors import FormatError
from cytepool.io.anndata._hdf5_headers import header_messages

if TYPE_CHECKING:
    import h5py

__all__ = ["FileBytes", "check_chunk_tree", "object_address", "objects"]

_LAYOUT = 0x0008  # the data layout message
_CHUNKED = 2  # its layout class
_SIGNATURE = b"TREE"
_CHUNK_NODE = 1  # the node type of chunk B-trees (0: groups)
_LONG_BITS = struct.calcsize("L") * 8


def object_address(node: h5py.HLObject) -> int:
    """The address of the object header of ``node`` (an h5py group or dataset), counted from
    the end of the file's user block.

    Asked with ``H5Gget_objinfo``, which reads only the header: ``H5Oget_info`` (h5py's
    ``h5o.get_info``, ``visititems``) also sums the sizes of a dataset's chunk B-tree, walking
    it through siblings, and so never returns on a tree whose siblings loop."""
    import h5py

    low, high = h5py.h5g.get_objinfo(node.id).objno
    return int(low) | int(high) << _LONG_BITS if _LONG_BITS < 64 else int(low)


def objects(file: h5py.File) -> Iterator[tuple[str, Any]]:
    """Every object of ``file`` reached by hard links, once each, as ``visititems`` gives
    them: its name (``"X/data"``) and the object, depth first in the order of names; found by
    its links (``H5Lvisit``), without asking libhdf5 for any object's info (see
    :func:`object_address`). Soft and external links are not followed (anndata writes none)."""
    import h5py

    links: list[tuple[bytes, int]] = []

    def visit(name: bytes, info: Any) -> None:
        if info.type == h5py.h5l.TYPE_HARD:
            links.append((name, int(info.u)))

    file.id.links.visit(visit, info=True)
    seen = {object_address(file)}
    for name, address in links:
        if address not in seen:
            seen.add(address)
            yield name.decode("utf-8", "surrogateescape"), file[name]


def check_chunk_tree(dataset: h5py.Dataset, where: str, view: FileBytes | None = None) -> None:
    """Walk the chunk B-tree of ``dataset`` (if it has one: see the module's text) and raise
    :class:`FormatError` if it is not a tree libhdf5 can walk; ``where`` names the dataset in
    messages (``"cells.h5ad: dataset 'X/data'"``). ``view``: the file's bytes, if the caller
    has it open (a check of every dataset of a file opens it once), else it is opened here.

    Raises
    ------
    FormatError
        A node outside the file, not a chunk node, of the wrong level, or reached twice.
    """
    import h5py

    if dataset.id.get_create_plist().get_layout() != h5py.h5d.CHUNKED:
        return
    if view is not None:
        _check_tree(dataset, view, where)
        return
    path = Path(dataset.file.filename)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        _check_tree(dataset, FileBytes(fd, os.fstat(fd).st_size, path), where)
    finally:
        os.close(fd)


def _check_tree(dataset: h5py.Dataset, view: FileBytes, where: str) -> None:
    plist = dataset.file.id.get_create_plist()
    offsets, lengths = plist.get_sizes()
    base = plist.get_userblock()
    messages = header_messages(view, object_address(dataset), (offsets, lengths), base)
    tree = _tree(messages or [], offsets)
    if tree is not None:
        _walk(view, tree, (offsets, base), where)


class FileBytes:
    """The bytes of an open file as cytepool's checks of an ``.h5ad`` read them: ``len``, a
    byte, a slice (bytes) and ``find``, each read with ``os.pread`` when asked (FormatError
    if the file was cut short meanwhile).

    Not a memory map: the pages of a mapped file count in the process's resident memory
    (each touch maps the pages read ahead around it: 77 MiB for the 10 MiB searched in a
    1.5 GiB ``.h5ad``), and a file cut short while mapped kills the process (SIGBUS) where a
    read comes back short.
    """

    PIECE = 1 << 20  # bytes searched per read

    def __init__(self, fd: int, size: int, path: Path) -> None:
        self.fd, self.size, self.path = fd, size, path

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            start, stop, _ = key.indices(self.size)
            return self._read(start, stop)
        return self._read(key, key + 1)[0]

    def find(self, sub: bytes, start: int, stop: int) -> int:
        """The first position of ``sub`` wholly in ``[start, stop)``, or -1."""
        for position in range(start, stop, self.PIECE):
            end = min(position + self.PIECE + len(sub) - 1, stop)
            at = self._read(position, end).find(sub)
            if at >= 0:
                return position + at
        return -1

    def _read(self, start: int, stop: int) -> bytes:
        if stop <= start:
            return b""
        data = os.pread(self.fd, stop - start, start)
        if len(data) != stop - start:
            msg = f"{self.path} was cut short while read: bytes {start} to {stop} are gone"
            raise FormatError(msg)
        return data


def _tree(messages: list[tuple[int, bytes]], offsets: int) -> tuple[int, int] | None:
    """The root address and the key dimensions of the version 1 chunk B-tree that the data
    layout message among ``messages`` names; None for another layout or index, or no tree
    (nothing written)."""
    layout = next((data for kind, data in messages if kind == _LAYOUT), b"")
    if len(layout) < 3:
        return None
    version = layout[0]
    if version in (1, 2) and layout[2] == _CHUNKED:
        dims, at = layout[1], 8
    elif version == 3 and layout[1] == _CHUNKED:
        dims, at = layout[2], 3
    else:
        return None  # not chunked, or a chunk index of version 4 (see the module's text)
    raw = layout[at : at + offsets]
    if len(raw) < offsets or raw == b"\xff" * offsets:  # undefined: no chunk written
        return None
    return int.from_bytes(raw, "little"), dims


def _walk(view: FileBytes, tree: tuple[int, int], sizes: tuple[int, int], where: str) -> None:
    """Visit every node of the tree ``tree`` (root address, key dimensions) once, depth first,
    each checked (:func:`_node`); ``sizes``: the file's size of offsets and its user block's
    size."""
    root, dims = tree
    offsets = sizes[0]
    key = 8 + 8 * dims  # chunk size, filter mask, an offset per dimension
    seen: set[int] = set()
    stack: list[tuple[int, int | None, int | None]] = [(root, None, None)]
    while stack:
        address, level, parent = stack.pop()
        if address in seen:
            msg = (
                f"{where}: its chunk index (a B-tree) is damaged: the node at byte {parent} "
                f"lists the node at byte {address} as a child, which is reached twice (a "
                "loop); libhdf5 would crash or read it without end"
            )
            raise FormatError(msg)
        seen.add(address)
        found, count = _node(view, (address, level, parent), sizes, where)
        if found == 0:
            continue
        entries = _read(view, (address, sizes[1]), 8 + 2 * offsets, count * (key + offsets), where)
        children = [
            int.from_bytes(entries[k + key : k + key + offsets], "little")
            for k in range(0, len(entries), key + offsets)
        ]
        stack.extend((child, found - 1, address) for child in reversed(children))


def _node(
    view: FileBytes, node: tuple[int, int | None, int | None], sizes: tuple[int, int], where: str
) -> tuple[int, int]:
    """The level and the number of children of the node ``node`` (its address, the level
    expected, None for the root, and its parent's address), checked."""
    address, level, parent = node
    offsets, base = sizes
    header = _read(view, (address, base), 0, 8 + 2 * offsets, where)
    found, count = header[5], int.from_bytes(header[6:8], "little")
    named = "the root node" if parent is None else f"the node at byte {parent} lists a child"
    if header[:4] != _SIGNATURE or header[4] != _CHUNK_NODE:
        problem = "no node of a chunk B-tree"
    elif level is not None and found != level:
        problem = f"of level {found}, expected {level} (one less than its parent)"
    else:
        return found, count
    msg = f"{where}: its chunk index (a B-tree) is damaged: {named} at byte {address}, {problem}"
    raise FormatError(msg)


def _read(view: FileBytes, node: tuple[int, int], skip: int, size: int, where: str) -> bytes:
    """``size`` bytes at ``skip`` bytes into the node at ``node`` (its address, counted from
    the end of a user block of ``node[1]`` bytes), which must all lie in the file."""
    address, base = node
    start = base + address + skip
    if start + size > len(view):
        msg = (
            f"{where}: its chunk index (a B-tree) is damaged: the node at byte {address} "
            f"goes past the end of the file ({len(view)} bytes)"
        )
        raise FormatError(msg)
    return view[start : start + size]
