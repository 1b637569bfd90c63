"""A minimal reader and writer for Zarr v3 arrays and groups, in local directories.

This module implements, with numpy and the standard library only, the part of the Zarr core
specification, version 3.1 (Miles et al. 2025), that cube files need, with the bytes and gzip
codecs of the Zarr specifications (Zarr developers 2023) and the zstd codec of its registered
extensions (Maitin-Shepard 2025).

Reading supports:

- group and array metadata documents (zarr.json);
- the core data types bool, int8 to int64, uint8 to uint64, float16, float32, float64,
  complex64 and complex128, the floating-point types in the binary formats of IEEE 754;
- the regular chunk grid, and the default and v2 chunk key encodings with either separator;
- fill values in every form the specification permits; a chunk that is not stored reads as
  the fill value;
- the bytes codec in either byte order, followed by any sequence of gzip codecs, whose chunks
  are gzip streams (RFC 1952) of DEFLATE data (RFC 1951), and zstd codecs, whose chunks are
  Zstandard frames (RFC 8878).

Beyond that text, because anndata and zarr-python write them by default, this module also
supports:

- zstd through ``compression.zstd`` (Python 3.14+) or else the ``backports.zstd`` package
  (a dependency on older Pythons), imported at its first use under a lock, through the import
  system, so decoding threads that reach zstd at the same time share one complete module;
  without either, zstd raises a ValueError saying how to get it;
- the ``string`` data type with the ``vlen-utf8`` codec, read and written: reads return numpy
  arrays of ``numpy.dtypes.StringDType()``, writes take numpy ``str``/StringDType arrays or
  object arrays of ``str``; the fill value is ``""`` and edge chunks are padded with it;
- the ``numpy.datetime64`` and ``numpy.timedelta64`` data types (zarr-extensions) with their
  ``unit`` and ``scale_factor`` configuration, read and written; the fill value is NaT; the
  ``generic`` unit (numpy's ``datetime64`` without a unit) is read but not written, as
  zarr-python 3.1 cannot open it: write_array asks for a unit;
- reading the ``sharding_indexed`` codec (anndata 0.13 shards by default): the index at the
  end or the start of a shard, its ``crc32c`` checksum verified, inner chunks decoded by the
  inner codec chain, empty inner chunks read as the fill value, and only the index and the
  needed inner chunks read (by URL from a web server that serves no byte ranges, each shard
  whole, at most the bytes of a shard whose inner chunks are packed). Shards are not written.

Anything else, such as another data type, the blosc or transpose codec, crc32c outside a shard
index, nested sharding, another chunk grid or a storage transformer, raises an
UnsupportedFeatureError (a FormatError, so a ValueError) that names it; zarr-python reads such
stores.

**One store handle per read.** A read opens the store once and fetches every object through
that handle (:mod:`cytepool.io.zarr.store`: get a whole object, get a byte range, list). A
local store's handle is a file descriptor of its directory, and every file is opened relative
to it (``openat``), never by resolving the store's path again. An array's read first checks
that its zarr.json (or, for an array opened through consolidated metadata, the root document
that held its metadata) is still the file it was when the array was opened (same inode, size
and modification time), and at its end that the directory is still at the path; so a
read returns values wholly from the store the array was opened in, or raises
StoreChangedError (a RuntimeError): never a mix of two stores, never a FormatError because a
store was replaced while it was read. A ZarrArray holds no open files and
can be pickled: each read, in any process, opens the store by its path and makes the same
checks. Objects that are not regular files (FIFOs, sockets, devices, directories) are refused
with FormatError without being opened for reading, so a read never blocks on one.

**Memory is bounded by the result.** A read allocates its result once and walks its chunk plan
as it goes, keeping no record per chunk (a few numbers per axis, and for integer-array
selections a few per selected position). It fetches only the chunks that hold a selected
element, each whole and refused unread if it is larger than any valid encoding of the chunk can
be, and decodes each once. Chunks are decoded (and, when writing, encoded) a few at a time on a
small shared thread pool, since zlib and zstd release the GIL, unlike the base text, which
decodes one chunk at a time: as many threads as the process may use CPUs, at most four. The
environment variable ``CYTEPOOL_ZARR_THREADS`` (an integer from 1 to 64) sets the number; ``1``
works on one chunk at a time in the calling thread, as in the base text. Results, stored files
and errors do not depend on it: chunks go to disjoint parts of the result, are stored in order,
and a failure is raised for the first bad chunk in order once the chunks being decoded have
settled. Besides its result, a read holds what the chunk each thread works on takes:

- an uncompressed chunk that fills a block of the result whose rows are contiguous (rows of at
  least 512 bytes) is read from a local store straight into that block (``os.preadv``), with no
  chunk buffer at all, unless a row would land 1 to 63 bytes past its offset in the file within
  a 4 KiB memory page, where some processors (AMD Zen) copy from the file many times slower (a
  large numpy array starts 16 bytes into a page). Any other uncompressed chunk is read whole,
  then copied into place;
- a compressed chunk is held as stored while it is decoded, in pieces of 256 KiB of its stored
  bytes, straight into the result where the whole chunk fills such a block of it, else into the
  thread's chunk buffer, which is then copied into place and kept (up to 16 MiB) for the
  thread's later reads;
- with the fast decoders installed with cytepool, a chunk of a fixed-size data type under one gzip
  codec is first inflated whole by libdeflate (the ``deflate`` package) into a new buffer of
  exactly its decoded size, about three times as fast, so the thread holds the stored chunk and
  its output; one under one zstd codec is decoded by ``zstandard`` straight into its place in
  the result (or the thread's chunk buffer). Either is taken only for one complete member or
  frame of exactly the chunk's size with nothing after it, and anything else is decoded again
  as above, so results and errors do not depend on the extra (``CYTEPOOL_ZARR_FAST=0``
  switches it off).

So a read holds about one chunk per thread beyond its result, two (the stored chunk and its
output) with libdeflate or a chunk buffer: for chunks of 8 MiB on two threads, about 16 MiB,
32 MiB with libdeflate. A zstd decoder also keeps its frame's window, outside Python's
allocations: up to the size of the chunk, and 2 MiB at zstd's default level of 3 (frames asking
for a window larger than both the chunk and the 8 MiB that RFC 8878 asks every decoder to
support are refused). A chunk compressed twice is decoded as a stream through both steps. A
string chunk decodes its items a batch of at most 256 KiB at a time (a larger item alone), so
decoding holds the chunk's bytes, the strings made so far, 8 bytes per item and one batch:
about twice the decoded strings plus the chunk; a large last item is stored in the result only
once the chunk is let go, so a chunk of one large string is read holding its stored bytes (and
the decoded ones, when compressed) and the result: twice the string for ASCII text (three
times for other text, which Python decodes through a working copy). A read that
needs at least 64 chunks (shards) of a local store first lists the directories that hold them,
once, if they have fewer entries than the read needs chunks: the chunks that are not stored are
then filled at once, with no lookup each (a million of them in milliseconds), and a chunk
listed but gone when opened reads as not stored, as ever; remote stores are never listed. A
metadata document larger than MAX_METADATA_BYTES (64 MiB) is refused with FormatError unread.
Selections take integers and slices, and, through ZarrArray.oindex, integer arrays and boolean
masks along any axes.

Reading is strict. A metadata document must be a JSON object without repeated keys or NaN and
Infinity tokens, and every field must be valid; a field the specification does not define is
an error unless its value is an object with ``"must_understand": false``. A chunk must decode
to exactly the bytes its shape needs, compressed streams must be complete and pass their
checksums, and bool chunks may hold only the bytes 0 and 1. Memory and time stay bounded on
malformed files: arrays whose chunks would hold more than 2 GiB (MAX_CHUNK_BYTES) are refused,
at most the bytes a valid encoding of a chunk can take are read, every decoding step stops just
past the most bytes a valid chunk can produce, and a chunk may hold at most 1,024 gzip members
or zstd frames (writers use one). A string chunk may decode to at most MAX_CHUNK_BYTES. Every
error about a file's content is a FormatError (an UnsupportedFeatureError for a valid feature
this module does not implement); a missing node raises FileNotFoundError.

Writing produces arrays with a regular chunk grid, the default chunk key encoding with /, a
fill value of zero (false for bool, ``""`` for strings, NaT for datetime64/timedelta64) and the
bytes codec, little endian (vlen-utf8 for strings), followed by gzip, zstd (with a checksum) or
no compression. A bool is stored as the byte 0 or 1 (a numpy bool array may hold other bytes,
made with ``view(bool)``: each is stored as 1, numpy's True). A chunk whose bytes are all zero
equals the fill value and is not stored. Node
names follow one rule, for readers and writers alike
(:func:`cytepool.io.zarr.names.node_name_problem`).

Examples
--------
>>> import tempfile, pathlib
>>> import numpy as np
>>> from cytepool.io.zarr import open_array, write_array, write_group, node_type
>>> root = pathlib.Path(tempfile.mkdtemp()) / "store"
>>> write_group(root, {"kind": "example"})
>>> write_array(root / "x", np.arange(10, dtype=np.int32), chunks=(4,), compression="zstd")
>>> node_type(root), node_type(root / "x")
('group', 'array')
>>> open_array(root / "x")[3:6]
array([3, 4, 5], dtype=int32)
"""

from __future__ import annotations

from cytepool.io.zarr.array import (
    DEFAULT_LEVELS,
    ZarrArray,
    check_compression,
    open_array,
    write_array,
)
from cytepool.io.zarr.codecs import MAX_CHUNK_BYTES
from cytepool.io.zarr.groups import node_type, read_group_attributes, write_group
from cytepool.io.zarr.metadata import DATA_TYPES, MAX_METADATA_BYTES, METADATA_FILE

__all__ = [
    "DATA_TYPES",
    "DEFAULT_LEVELS",
    "MAX_CHUNK_BYTES",
    "MAX_METADATA_BYTES",
    "METADATA_FILE",
    "ZarrArray",
    "check_compression",
    "node_type",
    "open_array",
    "read_group_attributes",
    "write_array",
    "write_group",
]
