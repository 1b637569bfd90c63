"""Check an HDF5 file's global heap before h5py reads a string from it.

The variable-length strings of an HDF5 file (every attribute h5py writes, such as anndata's
``encoding-type``; anndata's string arrays: obs and var names, categories) are stored in *global
heap collections*; an attribute or dataset holds, per string, a descriptor: its length, the
address of its collection and its index there. libhdf5 trusts both:

- it parses a whole collection when it first reads a string from it, stepping from object to
  object by their stored sizes; an object of size 0 at index 0 makes it step in place forever
  (``H5HG__cache_heap_deserialize``, HDF5 1.14 and 2.0), a huge size makes it step outside the
  collection;
- it allocates a string's length, as the descriptor gives it (up to 4 GiB), before it compares
  it with the size of the heap object.

:func:`check_global_heaps` runs when cytepool opens an ``.h5ad`` (or ``.h5mu``) file, before any
attribute or string is read: it finds the file's collections (their signature ``GCOL``, searched
for everywhere except in the stored values of datasets, where no collection is stored but any
bytes may be, and at every address a descriptor it reads names) and walks each as libhdf5
would, and it checks the descriptors of every string dataset against them. A collection whose
walk would not end inside it, or a descriptor whose collection or object does not exist or
whose length is not that of its object, is a :class:`~cytepool.errors.FormatError` naming the
file and the byte or the dataset.

It also checks the attributes of every object cytepool may read (all but those under ``uns``,
``obsm``, ``varm``, ``obsp`` and ``varp``): each must open, must not be a variable-length
sequence (h5py crashes reading a damaged one), and the descriptors of its strings, read from the
object's header (:mod:`cytepool.io.anndata._hdf5_headers`), must match the heap as a dataset's
do.

What it cannot check: the strings of attributes in headers of version 2 (libhdf5 checks those
headers' checksums itself), of densely stored attributes or with a shared datatype, string
datasets stored with a filter cytepool does not decode, strings inside compound records (the obs
and var of files of anndata < 0.7), and a collection that only those name, inside the range a
damaged chunk index claims for a dataset. The signature followed by a version of 1 and a size
in the stored value of an attribute or of a compact dataset (in an object header) is still
taken for a collection.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cytepool._pool_sums import KERNELS
from cytepool.errors import FormatError
from cytepool.io.anndata._hdf5 import check_regular, stored_chunks, system_error
from cytepool.io.anndata._hdf5_chunk_tree import FileBytes, object_address, objects
from cytepool.io.anndata._hdf5_filters import Pipeline
from cytepool.io.anndata._hdf5_headers import string_attributes

if TYPE_CHECKING:
    import h5py

__all__ = ["PYTHON_WALK_BYTES", "check_global_heaps", "heap_objects_walked", "walker"]

_SIGNATURE = b"GCOL"
_ALIGN = 8  # heap objects are padded to multiples of 8 bytes
PYTHON_WALK_BYTES = 2 << 20  # collections of this many bytes in all are walked in Python
_KERNELS = ("cytepool.io.anndata._hdf5_kernels", KERNELS)  # numba's kernels, once imported
_UNREAD = frozenset({"uns", "obsm", "varm", "obsp", "varp"})  # never read when pooling


@dataclass(frozen=True)
class _Datasets:
    """What :func:`check_global_heaps` needs of a file's objects."""

    stored: list[tuple[int, int]]  # (byte offset, size) of the stored values of every dataset
    strings: list[h5py.Dataset]  # datasets of variable-length values
    attributed: list[h5py.Group | h5py.Dataset]  # objects whose attributes cytepool reads


def check_global_heaps(file: h5py.File, path: str | os.PathLike[str]) -> None:
    """Check the global heap of the open HDF5 file ``file`` at ``path`` (see the module's text).

    Raises
    ------
    FormatError
        A damaged collection, a string dataset or attribute whose descriptors do not match
        the heap, or an attribute that does not open or is a variable-length sequence.
    """
    path = Path(path)
    check_regular(path)
    plist = file.id.get_create_plist()
    addresses, lengths = plist.get_sizes()
    base = plist.get_userblock()  # addresses in the file count from its end
    addressing = (addresses, lengths, base)
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return
        view = FileBytes(handle.fileno(), size, path)
        datasets = _datasets(file, path, view)
        gaps = _gaps(datasets.stored, size)
        heaps = _collections(view, gaps, lengths, path)
        for dataset in datasets.strings:
            _check_descriptors(dataset, view, heaps, addressing, path)
        strings = [
            found
            for node in [file, *datasets.attributed]
            for found in _attributes(node, view, addressing, path)
        ]
        _check_attribute_strings(strings, view, heaps, addressing, path)


def _datasets(file: h5py.File, path: Path, view: FileBytes) -> _Datasets:
    """The ranges of the stored values of the datasets of ``file`` (no heap collection lies
    there, but any bytes may, ``GCOL`` among them), its string datasets, and the objects whose
    attributes cytepool reads. Walked with :func:`objects`, not ``visititems``, which would
    ask libhdf5 for the size of every chunk index (see :mod:`._hdf5_chunk_tree`)."""
    import h5py

    stored: list[tuple[int, int]] = []
    strings: list[h5py.Dataset] = []
    attributed: list[Any] = []
    for name, node in objects(file):
        if _UNREAD.isdisjoint(name.split("/")):
            attributed.append(node)
        if not isinstance(node, h5py.Dataset):
            continue
        if h5py.check_vlen_dtype(node.dtype) is not None:
            strings.append(node)
        stored.extend(_stored_ranges(node, f"{path}: dataset {node.name!r}", view))
    return _Datasets(stored, strings, attributed)


def _attributes(
    node: Any, view: FileBytes, addressing: tuple[int, int, int], path: Path
) -> list[tuple[str, bytes]]:
    """Check that the attributes of ``node`` (an h5py group or dataset) open and are of kinds
    h5py reads safely; the stored descriptors of its string attributes, each with how
    messages name it. ``addressing``: the file's sizes of offsets and lengths, and its user
    block's size."""
    import h5py

    count = h5py.h5a.get_num_attrs(node.id)
    for index in range(count):
        try:
            attribute = h5py.h5a.open(node.id, index=index)
        except (OSError, KeyError, ValueError, RuntimeError) as error:  # libhdf5 refuses it
            if system_error(error):
                raise
            msg = f"{path}: attribute {index} of {node.name!r} cannot be opened: {error}"
            raise FormatError(msg) from error
        if isinstance(attribute.get_type(), h5py.h5t.TypeVlenID):  # strings are TypeStringID
            name = attribute.get_name().decode("utf-8", "replace")
            msg = (
                f"{path}: attribute {name!r} of {node.name!r} is a variable-length sequence, "
                "which no AnnData writer stores (h5py crashes reading a damaged one): the file "
                "is damaged"
            )
            raise FormatError(msg)
    addresses, lengths, base = addressing
    if not count:
        return []
    header = object_address(node)
    found = string_attributes(view, header, (addresses, lengths), base)
    return [(f"{path}: attribute {name!r} of {node.name!r}", raw) for name, raw in found]


def _check_attribute_strings(
    strings: list[tuple[str, bytes]],
    view: FileBytes,
    heaps: dict[int, np.ndarray[Any, Any]],
    addressing: tuple[int, int, int],
    path: Path,
) -> None:
    """Each stored string descriptor of ``strings`` (how messages name its attribute, its
    descriptors) names an object of its length in ``heaps`` (to which the collections they
    name are added): all checked at once, and attribute by attribute only to name the first
    that does not."""
    addresses, lengths, base = addressing
    descriptor = _descriptor(addresses)
    if not strings or descriptor is None:
        return
    joined = np.frombuffer(b"".join(raw for _, raw in strings), descriptor)
    _add_named(joined, view, heaps, (lengths, base), path)
    try:
        _check_against_heaps(joined, 1, heaps, base, "")
    except FormatError:
        for where, raw in strings:
            _check_against_heaps(np.frombuffer(raw, descriptor), 1, heaps, base, where)
        raise


def _stored_ranges(dataset: h5py.Dataset, where: str, view: FileBytes) -> list[tuple[int, int]]:
    """``(byte offset, size)`` of the stored values of a contiguous or chunked dataset (its
    chunk index checked first; ``where`` names it in messages)."""
    offset = dataset.id.get_offset()
    if offset is not None:
        return [(int(offset), int(dataset.id.get_storage_size()))]
    if dataset.chunks is None:
        return []
    return [(offset, size) for _, _, offset, size in stored_chunks(dataset, where, view)]


def _gaps(ranges: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges of the file not in ``ranges`` (which may overlap)."""
    gaps, position = [], 0
    for offset, length in sorted(ranges):
        if offset > position:
            gaps.append((position, min(offset, size)))
        position = max(position, offset + length)
    if position < size:
        gaps.append((position, size))
    return [(start, stop) for start, stop in gaps if start < stop]


def _collections(
    view: FileBytes, gaps: list[tuple[int, int]], lengths: int, path: Path
) -> dict[int, np.ndarray[Any, Any]]:
    """The collections found in ``gaps``: address to the sizes of their objects by index
    (-1 where there is none), walked in Python or by a numba kernel (see :func:`walker`)."""
    found: list[tuple[int, int]] = []
    for start, stop in gaps:
        at = view.find(_SIGNATURE, start, stop)
        while at >= 0:
            size = _collection_size(view, at, lengths)
            if size is None:  # not a collection libhdf5 would read: it refuses it itself
                at = view.find(_SIGNATURE, at + 1, stop)
                continue
            found.append((at, size))
            at = view.find(_SIGNATURE, at + size, stop)
    return _walked(view, found, lengths, path)


def _add_named(
    descriptors: np.ndarray[Any, Any],
    view: FileBytes,
    heaps: dict[int, np.ndarray[Any, Any]],
    sizes: tuple[int, int],
    path: Path,
) -> None:
    """Add to ``heaps`` the collections that ``descriptors`` (of values not empty) name and
    ``heaps`` lacks, walked: a collection libhdf5 reads is walked wherever it lies (a damaged
    chunk index may claim its range for a dataset, which the search skips). ``sizes``: the
    file's size of lengths, and its user block's size (addresses count from its end)."""
    lengths, base = sizes
    named = np.unique(descriptors["heap"][descriptors["n"] != 0]).tolist()
    found = []
    for heap in named:
        if heap + base in heaps:
            continue
        size = _collection_size(view, heap + base, lengths)
        if size is not None:  # else no collection: its descriptors are found wrong
            found.append((heap + base, size))
    heaps.update(_walked(view, found, lengths, path))


def _walked(
    view: FileBytes, found: list[tuple[int, int]], lengths: int, path: Path
) -> dict[int, np.ndarray[Any, Any]]:
    """The collections ``found`` (byte offset, size), walked in Python or by a numba kernel
    (see :func:`walker`): address to the sizes of their objects by index (-1 where there is
    none)."""
    if not found:
        return {}
    if walker([size for _, size in found]) == "python":
        walk = heap_objects_walked
    else:
        from cytepool.io.anndata._hdf5_kernels import heap_objects as walk
    return {at: _objects(view, at, size, lengths, path, walk) for at, size in found}


def walker(sizes: list[int]) -> str:
    """How collections of ``sizes`` bytes are walked: ``"python"``, an object at a time, when
    they hold at most :data:`PYTHON_WALK_BYTES` in all and numba's kernels are not loaded in
    the process; else ``"numba"`` (:mod:`._hdf5_kernels`).

    Python takes about 1 µs per object (some 40 ns per byte of short names); starting numba
    takes about 0.5 s. A file's heap holds its cell and gene names, some 32 bytes each: up to
    2 MiB, the names of 30,000 cells and 30,000 genes, whose matrix (at 5 % nonzero, below
    2**26 values) numpy pools without numba; a larger file starts numba for its pooling
    anyway, and its heap is then walked by numba's kernel.
    """
    loaded = any(name in sys.modules for name in _KERNELS)
    return "python" if sum(sizes) <= PYTHON_WALK_BYTES and not loaded else "numba"


def heap_objects_walked(
    data: np.ndarray[Any, Any], start: int, object_header: int, found: np.ndarray[Any, Any]
) -> tuple[int, int]:
    """:func:`cytepool.io.anndata._hdf5_kernels.heap_objects` in Python, step for step (for
    collections too small to be worth starting numba)."""
    raw = data.tobytes()
    end, position, count = len(raw), start, 0
    while position + object_header <= end:
        index = int.from_bytes(raw[position : position + 2], "little")
        length = int.from_bytes(raw[position + 8 : position + object_header], "little")
        need = object_header + (length + 7) // 8 * 8 if index else length
        if need <= 0 or length > end or position + need > end:
            return count, position
        if index:
            found[count] = index, length
            count += 1
        position += need
    return count, -1


def _collection_size(view: FileBytes, at: int, lengths: int) -> int | None:
    """The size of the collection at ``at``, or None if libhdf5 would refuse to read it
    (no signature, as at an address a damaged descriptor names; another version; a size
    past the file's end)."""
    header = 8 + lengths
    if at + header > len(view) or bytes(view[at : at + 4]) != _SIGNATURE or view[at + 4] != 1:
        return None
    size = int.from_bytes(view[at + 8 : at + header], "little")
    if size < header or size > len(view) - at:
        return None
    return size


def _objects(
    view: FileBytes, at: int, size: int, lengths: int, path: Path, walk: Any
) -> np.ndarray[Any, Any]:
    """Walk the objects of the collection at ``at`` as libhdf5 does (with ``walk``,
    :func:`heap_objects_walked` or its numba kernel); the sizes of its objects by index (-1
    where there is none)."""
    header = 8 + lengths  # signature, version, 3 reserved bytes, collection size
    object_header = 8 + lengths  # index, reference count, 4 reserved bytes, size
    data = np.frombuffer(view[at : at + size], np.uint8)
    found = np.zeros((size // object_header + 1, 2), np.int64)
    count, bad = walk(data, header, object_header, found)
    if bad >= 0:
        index = int.from_bytes(data[bad : bad + 2].tobytes(), "little")
        length = int.from_bytes(data[bad + 8 : bad + object_header].tobytes(), "little")
        what = "as empty free space" if length == 0 else f"of {length} bytes, past its end"
        msg = (
            f"{path} is damaged: its global heap collection at byte {at} lists object "
            f"{index} (at byte {at + bad}) {what}; libhdf5 would read it without end"
        )
        raise FormatError(msg)
    indices, lengths_found = found[:count, 0], found[:count, 1]
    sizes = np.full(int(np.max(indices)) + 1 if count else 1, -1, np.int64)
    sizes[indices] = lengths_found
    return sizes


def _check_descriptors(
    dataset: h5py.Dataset,
    view: FileBytes,
    heaps: dict[int, np.ndarray[Any, Any]],
    addressing: tuple[int, int, int],
    path: Path,
) -> None:
    """Every descriptor of the variable-length dataset names an object of its length (the
    collections they name are added to ``heaps``); ``addressing``: the sizes of addresses
    and lengths in the file, and the user block's size (addresses count from its end, the
    byte offsets of ``heaps`` from the start of the file)."""
    import h5py

    base = h5py.check_vlen_dtype(dataset.dtype)
    itemsize = 1 if base in (str, bytes) else np.dtype(base).itemsize
    addresses, lengths, base = addressing
    descriptor = _descriptor(addresses)
    if descriptor is None:
        return
    where = f"{path}: dataset {dataset.name!r}"
    for raw in _stored_descriptors(dataset, view, descriptor.itemsize, where):
        descriptors = np.frombuffer(raw, descriptor)
        _add_named(descriptors, view, heaps, (lengths, base), path)
        _check_against_heaps(descriptors, itemsize, heaps, base, where)


def _descriptor(addresses: int) -> np.dtype[Any] | None:
    """The stored descriptor of a variable-length value (its length, the address of its heap
    collection, its index there) in a file of addresses of ``addresses`` bytes; None for sizes
    other than 4 and 8 (not checked)."""
    if addresses not in (4, 8):
        return None
    return np.dtype([("n", "<u4"), ("heap", f"<u{addresses}"), ("index", "<u4")])


def _check_against_heaps(
    descriptors: np.ndarray[Any, Any],
    itemsize: int,
    heaps: dict[int, np.ndarray[Any, Any]],
    base: int,
    where: str,
) -> None:
    """Each descriptor (of a value not empty) names an object of its length in ``heaps``.

    All are looked up at once (an obs index of 200,000 names spreads over some 80
    collections, which a pass per collection went through 80 times); the one reported, if
    any, is the first listed in the collection of the lowest address that holds a wrong one.
    """
    used = descriptors[descriptors["n"] != 0]
    heap, index = used["heap"].astype(np.uint64), used["index"].astype(np.int64)
    known, found = _objects_named(heap, index, heaps, base)
    wrong = np.flatnonzero(~known | (found != used["n"].astype(np.int64) * itemsize))
    if not wrong.size:
        return
    k = wrong[np.argmin(heap[wrong])]
    if not known[k]:
        msg = f"{where} lists strings in a global heap collection at byte {heap[k]}, not one"
        raise FormatError(msg)
    stored = "none" if found[k] < 0 else f"one of {found[k]} bytes"
    msg = (
        f"{where} lists a value of {int(used['n'][k]) * itemsize} bytes as object "
        f"{int(index[k])} of the global heap collection at byte {heap[k]}, which holds "
        f"{stored}"
    )
    raise FormatError(msg)


def _objects_named(
    heap: np.ndarray[Any, Any],
    index: np.ndarray[Any, Any],
    heaps: dict[int, np.ndarray[Any, Any]],
    base: int,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """For descriptors naming object ``index`` of the collection at ``heap`` (an address as
    descriptors give it, counted from the end of a user block of ``base`` bytes): whether
    ``heaps`` (by byte offset in the file) holds that collection, and the size of the object
    (-1 where there is none)."""
    addresses = sorted(at - base for at in heaps if at >= base)
    names = np.array(addresses, dtype=np.uint64)
    tables = [heaps[at + base] for at in addresses] or [np.full(1, -1, np.int64)]
    slot = np.minimum(np.searchsorted(names, heap), max(names.size - 1, 0))
    known = names[slot] == heap if names.size else np.zeros(heap.size, bool)
    counts = np.array([table.size for table in tables], dtype=np.int64)
    inside = known & (index < counts[slot])
    at = np.where(inside, (np.cumsum(counts) - counts)[slot] + index, 0)
    return known, np.where(inside, np.concatenate(tables)[at], -1)


def _stored_descriptors(
    dataset: h5py.Dataset, view: FileBytes, itemsize: int, where: str
) -> list[bytes]:
    """The descriptors of a variable-length dataset, as stored (chunk by chunk); none when
    they are stored in a way cytepool does not read (compact, a filter it does not decode)."""
    import h5py

    count = math.prod(dataset.shape or ())
    offset = dataset.id.get_offset()
    if offset is not None:
        stop = int(offset) + count * itemsize
        if stop > len(view):
            msg = f"{where}: its values go past the end of the file"
            raise FormatError(msg)
        return [view[int(offset) : stop]]
    plist = dataset.id.get_create_plist()
    if plist.get_layout() != h5py.h5d.CHUNKED:
        return []
    filters = [plist.get_filter(k)[::2] for k in range(plist.get_nfilters())]
    pipeline = Pipeline.check(filters, itemsize)
    if isinstance(pipeline, str):
        return []
    nbytes = math.prod(dataset.chunks or ()) * itemsize
    found = []
    for _, mask, offset, size in stored_chunks(dataset, where, view):
        if offset + size > len(view):
            msg = f"{where}: a chunk at byte {offset} goes past the end of the file"
            raise FormatError(msg)
        try:
            found.append(pipeline.decode(view[offset : offset + size], mask, nbytes, None))
        except FormatError as error:
            msg = f"{where}: the chunk at byte {offset} {error}"
            raise FormatError(msg) from error
    return [bytes(chunk) for chunk in found]
