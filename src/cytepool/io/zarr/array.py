"""Zarr v3 arrays: :class:`ZarrArray`, open_array and write_array."""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cytepool._utf8 import is_unicode
from cytepool.errors import FormatError, InputError, InputTypeError, StoreChangedError
from cytepool.io.zarr._reading import Reader
from cytepool.io.zarr._store import as_path, open_store, read_document, write_document
from cytepool.io.zarr._writing import NAT, write_chunks
from cytepool.io.zarr.codecs import (
    MAX_CHUNK_BYTES,
    BytesCodec,
    CodecChain,
    GzipCodec,
    VlenUtf8Codec,
    ZstdCodec,
    import_zstd,
)
from cytepool.io.zarr.fetching import fetch_shards_ahead
from cytepool.io.zarr.fields import json_copy
from cytepool.io.zarr.indexing import Selection, parse_selection
from cytepool.io.zarr.metadata import (
    METADATA_FILE,
    ArrayMetadata,
    ChunkKeyEncoding,
    DataType,
    RegularChunkGrid,
    check_attributes,
)
from cytepool.io.zarr.store import (
    LocalStore,
    Store,
    StoreHandle,
    StorePath,
    Version,
    join,
    reading,
    refuse_url,
)

__all__ = [
    "DEFAULT_LEVELS",
    "ZarrArray",
    "array_handle",
    "check_compression",
    "open_array",
    "write_array",
]

DEFAULT_LEVELS: Mapping[str, int] = types.MappingProxyType({"gzip": 4, "zstd": 3})
_LEVEL_RANGES = {"gzip": (0, 9), "zstd": (-131072, 22)}


class ZarrArray:
    """A Zarr v3 array in a store (a local directory), read chunk by chunk.

    Open one with :func:`open_array`. ``array[key]`` takes integers, slices and one ellipsis;
    ``array.oindex[key]`` also takes 1-D integer arrays and boolean masks along any axes.
    Reads return new arrays in native byte order (numpy scalars when every axis gets an
    integer) and read only the chunks the selection touches; a chunk that is not stored
    reads as the fill value.

    Each read opens the store once (for a local store, a file descriptor of its directory)
    and fetches every chunk through that handle (see :mod:`cytepool.io.zarr.store`). It
    first checks that the array's zarr.json (or the root document of consolidated metadata it
    was opened through) is still the file it was when the array was opened, and at its end
    that the store is still at its path; otherwise it raises StoreChangedError (a
    RuntimeError). So a read returns values wholly from the store the
    array was opened in, or raises: never a mix of two stores. The array holds no open
    files, so it can be pickled; a copy unpickled in another process opens the store by its
    path at each read and makes the same checks, so it too reads the store it was opened
    in, or raises StoreChangedError.

    Parameters
    ----------
    path
        The array's directory, or the :class:`~cytepool.io.zarr.store.Store` that holds it at
        ``key``.
    metadata
        Its parsed metadata.
    stamp
        The version of its zarr.json when the metadata was read (for a local store, a
        :class:`~cytepool.io.zarr.store.Stamp`).
    key
        The array's key in the store (``""``: the store is the array).
    handle
        An open handle of the store that reads use while it is open (instead of opening the
        store themselves); the handle's owner verifies the store when it closes it.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> write_array(tmp / "a", np.arange(12).reshape(3, 4), chunks=(2, 2))
    >>> a = open_array(tmp / "a")
    >>> a.shape, a.chunks, a.dtype
    ((3, 4), (2, 2), dtype('int64'))
    >>> a[1, 1:3]
    array([5, 6])
    >>> a.oindex[[2, 0], [True, False, False, True]]
    array([[ 8, 11],
           [ 0,  3]])
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Store,
        metadata: ArrayMetadata,
        stamp: Version,
        *,
        key: str = "",
        handle: StoreHandle | None = None,
    ):
        self._store: Store = LocalStore(Path(path)) if isinstance(path, str | os.PathLike) else path
        self._key = key
        self._metadata = metadata
        self._stamp = stamp
        self._handle = handle

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the handle of an open store."""
        return {**self.__dict__, "_handle": None}

    @property
    def path(self) -> Path | str:
        """The array's directory (a Path), or its URL (a str, as given) in a remote store."""
        where = self._store.where(self._key)
        return Path(where) if isinstance(self._store, LocalStore) else where

    @property
    def store(self) -> Store:
        """The store that holds the array."""
        return self._store

    @property
    def key(self) -> str:
        """The array's key in its store (``""`` when the store is the array)."""
        return self._key

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self._metadata.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The data type of the values a read returns, in native byte order."""
        return self._metadata.data_type.dtype

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._metadata.shape)

    @property
    def chunks(self) -> tuple[int, ...]:
        """The chunk shape of the regular chunk grid."""
        return self._metadata.chunk_grid.chunk_shape

    @property
    def fill_value(self) -> Any:
        """The value of elements in chunks that are not stored, as a numpy scalar."""
        return self._metadata.fill_value

    @property
    def attributes(self) -> dict[str, Any]:
        """A copy of the array's attributes."""
        return dict(json_copy(self._metadata.attributes))

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        """The name of each dimension (None for an unnamed one), or None."""
        return self._metadata.dimension_names

    @property
    def metadata(self) -> ArrayMetadata:
        """The parsed metadata document."""
        return self._metadata

    @property
    def oindex(self) -> _OIndex:
        """Orthogonal indexing, which selects along each axis independently.

        ``array.oindex[key]`` gives each axis an integer, a slice, a 1-D integer array or a
        boolean mask (arrays as lists or numpy arrays), and selects every combination.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> tmp = pathlib.Path(tempfile.mkdtemp())
        >>> write_array(tmp / "a", np.arange(6).reshape(2, 3), chunks=(1, 2))
        >>> open_array(tmp / "a").oindex[:, [2, 0, 2]]
        array([[2, 0, 2],
               [5, 3, 5]])
        """
        return _OIndex(self)

    @contextlib.contextmanager
    def reading(self, keys: Sequence[Any] = ()) -> Iterator[ZarrArray]:
        """Read several times through one opening of the store, the chunks of the ``oindex``
        selections ``keys`` fetched ahead (a remote store fetches them concurrently, all of
        them in one stream of requests rather than one round per read; a local store fetches
        nothing ahead, and a key is checked when it is read).

        Reads of this array in this thread, inside the ``with`` block, share one store handle;
        the store is checked when the block starts and verified when it ends, as for one read:
        if it was replaced meanwhile the block raises StoreChangedError, and nothing read inside
        it may be trusted (a read inside the block is not verified on its own).

        Examples
        --------
        >>> import tempfile, pathlib
        >>> tmp = pathlib.Path(tempfile.mkdtemp())
        >>> write_array(tmp / "a", np.arange(12).reshape(3, 4), chunks=(1, 4))
        >>> a = open_array(tmp / "a")
        >>> with a.reading([(0, slice(None)), (2, [1, 3])]):
        ...     a.oindex[0, :].tolist(), a.oindex[2, [1, 3]].tolist()
        ([0, 1, 2, 3], [9, 11])
        """
        sessions = _sessions()
        if id(self) in sessions:  # nested: the outer block's handle
            yield self
            return
        with array_handle(self) as handle:
            sessions[id(self)] = handle
            try:
                inner = getattr(handle, "inner", handle)  # a consolidated handle's own
                if getattr(inner, "prefetch", None) is not None:  # a local store: none
                    for key in keys:
                        selection = parse_selection(key, self.shape, orthogonal=True)
                        reader = Reader(handle, self._key, self._metadata)
                        _fetch_ahead(handle, reader, self, selection)
                yield self
            finally:
                del sessions[id(self)]

    def __getitem__(self, key: Any) -> Any:
        """Read what integers, slices and an ellipsis select (numpy basic indexing)."""
        return self._read(parse_selection(key, self.shape, orthogonal=False))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        """Read the whole array (strings straight into str objects for ``dtype=object``)."""
        objects = dtype is not None and np.dtype(dtype) == np.dtype(object)
        if objects and self._metadata.data_type.is_string:
            result: np.ndarray[Any, Any] = self._read(
                parse_selection(..., self.shape, orthogonal=False), objects=True
            )
            return result
        result = self[...]
        return result if dtype is None else result.astype(dtype, copy=False)

    def __len__(self) -> int:
        """The length of the first axis."""
        if not self.shape:
            msg = "len() of a 0-d array"
            raise InputTypeError(msg)
        return self.shape[0]

    def __repr__(self) -> str:
        """Path, shape, chunks and dtype."""
        return (
            f"<ZarrArray {self._store.where(self._key)!r} shape={self.shape} chunks={self.chunks}"
            f" dtype={self.dtype}>"
        )

    def read_into(
        self,
        out: np.ndarray[Any, Any],
        *,
        on_rows: Callable[[int, int], object] | None = None,
    ) -> None:
        """Read the whole array into ``out``, and hand over rows as they arrive.

        Parameters
        ----------
        out
            A writeable C-contiguous array of the array's shape and data type (native byte
            order); chunks are decoded straight into it where they can be.
        on_rows
            Called as ``on_rows(start, stop)`` once every chunk of ``out[start:stop]`` (along
            the first axis) is in place, on the thread that decoded the last of them, while
            other threads go on decoding (work such as hashing a block overlaps the decoding).
            Each row is handed over exactly once; if a call raises, the read stops and the first
            failure in chunk order is raised.

        Raises
        ------
        InputTypeError
            If ``out`` is not such an array, or the array is 0-d or holds strings.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> tmp = pathlib.Path(tempfile.mkdtemp())
        >>> write_array(tmp / "a", np.arange(12).reshape(3, 4), chunks=(2, 2))
        >>> out, seen = np.empty((3, 4), dtype="int64"), []
        >>> open_array(tmp / "a").read_into(out, on_rows=lambda a, b: seen.append((a, b)))
        >>> out[2].tolist(), sorted(seen)
        ([8, 9, 10, 11], [(0, 2), (2, 3)])
        """
        self._check_out(out)
        selection = parse_selection(..., self.shape, orthogonal=False)
        with array_handle(self) as handle:
            reader = Reader(handle, self._key, self._metadata)
            _fetch_ahead(handle, reader, self, selection)  # a remote store: one stream of requests
            reader.read(selection, out, on_rows)

    def _check_out(self, out: Any) -> None:
        fits = (
            isinstance(out, np.ndarray)
            and out.shape == self.shape
            and out.dtype == self.dtype
            and out.dtype.isnative
            and out.flags.c_contiguous
            and out.flags.writeable
        )
        if not fits or not self.shape or self._metadata.data_type.is_string:
            found = f"{type(out).__name__} {getattr(out, 'shape', '')} {getattr(out, 'dtype', '')}"
            msg = (
                f"read_into: expected a writeable C-contiguous numpy array of shape {self.shape}"
                f" and data type {self.dtype} (not 0-d, not strings), found {found};"
                " read with array[...] instead"
            )
            raise InputTypeError(msg)

    def _read(self, selection: Selection, *, objects: bool = False) -> Any:
        with array_handle(self) as handle:
            out = np.empty(selection.shape, dtype=object if objects else self.dtype)
            work = out.reshape(selection.full_shape)
            reader = Reader(handle, self._key, self._metadata, objects=objects)
            _fetch_ahead(handle, reader, self, selection)
            reader.read(selection, work)
        return out[()] if selection.scalar else out


@contextlib.contextmanager
def array_handle(array: ZarrArray) -> Iterator[StoreHandle]:
    """The store handle of one read of ``array``.

    The array's own open handle if it has one; else the store is opened now, the array's
    zarr.json checked against its stamp, and the store verified when the read ends.
    """
    bound = array._handle
    if bound is None or bound.closed:
        bound = _sessions().get(id(array))
    if bound is not None and not bound.closed:
        yield bound
        return
    with reading(array._store.open()) as handle:
        _check_stamp(array, handle)
        yield handle


_local = threading.local()


def _sessions() -> dict[int, StoreHandle]:
    """The handles of this thread's :meth:`ZarrArray.reading` blocks, by array."""
    sessions: dict[int, StoreHandle] | None = getattr(_local, "sessions", None)
    if sessions is None:
        sessions = _local.sessions = {}
    return sessions


def _fetch_ahead(
    handle: StoreHandle, reader: Reader, array: ZarrArray, selection: Selection
) -> None:
    """Ask a handle that fetches ahead (a remote one) for the chunks the read will take, in
    the order it takes them (for a sharded array: its shard indexes, then inner chunks)."""
    prefetch = getattr(handle, "prefetch", None)
    if prefetch is None:
        return
    if reader.shard is not None:
        inner = getattr(handle, "inner", handle)  # a consolidated handle's remote one
        if hasattr(inner, "prefetch_ranges"):
            fetch_shards_ahead(handle, reader, selection)
        return
    encode = array._metadata.chunk_key_encoding.encode
    keys = (
        join(array._key, encode(piece.coords)) for piece in selection.pieces(reader.chunk_shape)
    )
    prefetch(keys, limit=reader.chunk_limit)


def _check_stamp(array: ZarrArray, handle: StoreHandle) -> None:
    key = join(array._key, METADATA_FILE)
    stamped = getattr(handle, "stamped_where", handle.where)  # the root document, if consolidated
    where = stamped(key)
    current = handle.version(key)
    changed = f"the Zarr array {array.path} changed since it was opened: {where}"
    if current is None:
        msg = f"{changed} is gone"
        raise StoreChangedError(msg)
    if not array._stamp.matches(current):
        msg = (
            f"{changed} is not the file it was (inode, size or modification time differ);"
            " open it again"
        )
        raise StoreChangedError(msg)


class _OIndex:
    """The ``oindex`` helper of a ZarrArray."""

    def __init__(self, array: ZarrArray):
        self._array = array

    def __getitem__(self, key: Any) -> Any:
        array = self._array
        return array._read(parse_selection(key, array.shape, orthogonal=True))


def open_array(
    path: str | os.PathLike[str] | StorePath, *, storage_options: Mapping[str, Any] | None = None
) -> ZarrArray:
    """Open a Zarr v3 array for reading.

    Parameters
    ----------
    path
        The array's directory, which holds its zarr.json, its URL (``https://``, ``s3://``,
        ``gs://``, ``az://``; needs ``cytepool[remote]``), or a node of an open store
        (:class:`~cytepool.io.zarr.store.StorePath`), whose handle the array then reads
        through while it is open.
    storage_options
        For a URL: credentials, endpoint, region, ``anonymous``, timeouts, retries and
        requests in flight (see :class:`~cytepool.io.zarr.remote.RemoteStore`).

    Returns
    -------
    A ZarrArray; nothing but the metadata is read.

    Raises
    ------
    FileNotFoundError
        If there is no array metadata at path.
    ValueError
        If the metadata is invalid or uses a feature this module does not support (the
        message names it), or ``storage_options`` are given for a local path, hold an
        unknown key or a value of the wrong type or range (an
        :class:`~cytepool.errors.InputError` naming the option).
    PermissionError
        If the store may not be read: a local file this process may not read, or a server
        that refuses the request (401, 403); the message names the URL and says how to give
        credentials.
    ImportError
        If ``path`` is a URL and obstore (``cytepool[remote]``) is not installed.
    cytepool.errors.RemoteStoreError
        If a remote store cannot be reached or keeps failing beyond the retries (an
        ``OSError``), or this process was forked after its parent read by URL (use the
        ``"spawn"`` or ``"forkserver"`` start method).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> write_array(tmp / "a", np.array([1.5, 2.5], dtype=np.float32), chunks=(1,))
    >>> open_array(tmp / "a")[:]
    array([1.5, 2.5], dtype=float32)
    """
    node = path if isinstance(path, StorePath) else None
    if node is None:
        with reading(open_store(path, storage_options)) as handle:
            return _open(StorePath(handle), None)
    return _open(node, node.handle)


def _open(node: StorePath, handle: StoreHandle | None) -> ZarrArray:
    parsed = getattr(node.handle, "parsed", None)  # a handle whose documents never change
    opened = None if parsed is None else parsed.get(node.key)
    if opened is None:
        doc, stamp, where = read_document(node, shared=True)  # only parsed
        if isinstance(doc, dict) and doc.get("node_type") == "group":
            msg = f"{node} is a Zarr group, not an array ({where})"
            raise FormatError(msg)
        opened = (ArrayMetadata.from_json(doc, where), stamp)
        if parsed is not None:
            parsed[node.key] = opened
    return ZarrArray(node.handle.store, *opened, key=node.key, handle=handle)


# ---------------------------------------------------------------------------------------------
# Writing


def check_compression(compression: str | None, level: int | None) -> int | None:
    """Check a compression and level for write_array and return the level used.

    Parameters
    ----------
    compression
        ``"gzip"``, ``"zstd"`` (``compression.zstd`` of Python 3.14+, or the backports.zstd
        package) or None for no compression.
    level
        0 to 9 for gzip, -131072 to 22 for zstd (0 asks zstd for its default), or None for
        DEFAULT_LEVELS (4 for gzip, 3 for zstd). It must be None without compression.

    Returns
    -------
    The compression level, or None without compression.

    Raises
    ------
    TypeError
        If compression is not a string or None, or level is not an integer.
    ValueError
        If compression or level is invalid, or zstd is not available.

    Examples
    --------
    >>> check_compression("gzip", None), check_compression("zstd", -5)
    (4, -5)
    >>> check_compression(None, None) is None
    True
    """
    if compression is not None and not isinstance(compression, str):
        msg = f"compression must be a string or None, not {type(compression).__name__}"
        raise InputTypeError(msg)
    if level is not None and (not isinstance(level, int | np.integer) or isinstance(level, bool)):
        msg = f"level must be an integer or None, not {type(level).__name__}"
        raise InputTypeError(msg)
    if compression is None:
        if level is not None:
            msg = f"level must be None without compression, not {level}"
            raise InputError(msg)
        return None
    if compression not in _LEVEL_RANGES:
        msg = f"compression must be 'gzip', 'zstd' or None, not {compression!r}"
        raise InputError(msg)
    if compression == "zstd":
        import_zstd()
    return _check_level(compression, level)


def _check_level(compression: str, level: int | None) -> int:
    if level is None:
        return DEFAULT_LEVELS[compression]
    low, high = _LEVEL_RANGES[compression]
    if not low <= level <= high:
        msg = f"the {compression} level must be from {low} to {high}, not {level}"
        raise InputError(msg)
    return int(level)


def write_array(
    path: str | os.PathLike[str],
    data: Any,
    *,
    chunks: Sequence[int],
    compression: str | None = "gzip",
    level: int | None = None,
    attributes: Mapping[str, Any] | None = None,
    dimension_names: Sequence[str | None] | None = None,
) -> None:
    """Write an array as a new Zarr v3 array directory.

    Chunks are written first and zarr.json last, so a write that fails leaves a directory that
    does not open as an array. A chunk whose bytes are all zero (for strings: all ``""``, for
    datetime64/timedelta64: all NaT) equals the fill value and is not stored.

    Parameters
    ----------
    path
        The directory to create; its parent must exist and it must not.
    data
        A numpy array, or any object with shape and dtype whose ``data[start:stop]`` returns
        those rows along the first axis, such as a ZarrArray. It is read one row of chunks
        at a time. Strings may be numpy ``str``/StringDType arrays or object arrays of str.
    chunks
        The chunk shape: a positive length for each dimension.
    compression
        "gzip", "zstd" or None (see check_compression).
    level
        The compression level, or None for the default.
    attributes
        JSON-serialisable attributes.
    dimension_names
        A name or None for each dimension.

    Raises
    ------
    TypeError
        If data has no shape and dtype, its data type is not a supported data type (or is a
        datetime64/timedelta64 without a unit), it is or gives rows as a numpy masked array,
        or another argument has the wrong type.
    ValueError
        If an argument is invalid, a chunk would exceed MAX_CHUNK_BYTES (for strings:
        its vlen-utf8 encoding, refused before it is made), data gives rows of the wrong
        shape or dtype, a string holds a lone surrogate (an InputError naming the array and
        the string's index), or path is a URL (cytepool writes local directories only).
    FileExistsError
        If path exists.
    FileNotFoundError
        If the parent directory of path does not exist.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> write_array(tmp / "s", np.array(["x", "", "yz"]), chunks=(2,), compression="zstd")
    >>> open_array(tmp / "s")[:].tolist()
    ['x', '', 'yz']
    """
    refuse_url(path, "a Zarr array")
    directory = as_path(path)
    shape, dtype = _shape_and_dtype(data)
    meta = new_metadata(shape, dtype, chunks, compression, level, attributes, dimension_names)
    document = meta.to_json()
    json.dumps(document, allow_nan=False)
    directory.mkdir()
    write_chunks(directory, data, meta, dtype)
    write_document(directory, document)


def _shape_and_dtype(data: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    if isinstance(data, np.ma.MaskedArray):
        msg = "data is a numpy masked array; fill its masked values first"
        raise InputTypeError(msg)
    shape, dtype = getattr(data, "shape", None), getattr(data, "dtype", None)
    if not isinstance(dtype, np.dtype) or not isinstance(shape, tuple):
        msg = f"data must have a shape and a numpy dtype, not {type(data).__name__}"
        raise InputTypeError(msg)
    if not all(isinstance(n, int | np.integer) and n >= 0 for n in shape):
        msg = f"data has an invalid shape {shape!r}"
        raise InputTypeError(msg)
    return tuple(int(n) for n in shape), dtype


def new_metadata(
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    chunks: Any,
    compression: str | None,
    level: int | None,
    attributes: Any,
    dimension_names: Any,
) -> ArrayMetadata:
    data_type = DataType.from_numpy(dtype)
    _check_string_dtype(dtype)
    chunk_shape = _check_chunks(chunks, shape, data_type)
    level = check_compression(compression, level)
    head: BytesCodec | VlenUtf8Codec = (
        VlenUtf8Codec() if data_type.is_string else BytesCodec("little")
    )
    compressors: tuple[GzipCodec | ZstdCodec, ...] = ()
    if compression == "gzip" and level is not None:
        compressors = (GzipCodec(level),)
    elif compression == "zstd" and level is not None:
        compressors = (ZstdCodec(level, checksum=True),)
    return ArrayMetadata(
        shape=shape,
        data_type=data_type,
        chunk_grid=RegularChunkGrid(chunk_shape),
        chunk_key_encoding=ChunkKeyEncoding("default", "/"),
        fill_value=_zero_fill(data_type),
        codecs=CodecChain(head, compressors),
        attributes=check_attributes(attributes),
        dimension_names=_check_dimension_names(dimension_names, len(shape)),
    )


def _check_string_dtype(dtype: np.dtype[Any]) -> None:
    if dtype.kind == "T" and hasattr(dtype, "na_object"):
        msg = f"StringDType with a missing-value object ({dtype.na_object!r}) cannot be written"
        raise InputTypeError(msg)


def _zero_fill(data_type: DataType) -> Any:
    if data_type.is_string:
        return np.str_("")
    if data_type.is_time:
        return np.array(NAT, dtype=np.int64).view(data_type.dtype)[()]
    return data_type.dtype.type(0)


def _check_chunks(chunks: Any, shape: tuple[int, ...], data_type: DataType) -> tuple[int, ...]:
    if not isinstance(chunks, Sequence) or isinstance(chunks, str):
        msg = f"chunks must be a sequence of integers, not {type(chunks).__name__}"
        raise InputTypeError(msg)
    if not all(isinstance(c, int | np.integer) and not isinstance(c, bool) for c in chunks):
        msg = f"chunks must hold integers, not {chunks!r}"
        raise InputTypeError(msg)
    result = tuple(int(c) for c in chunks)
    if len(result) != len(shape) or any(c < 1 for c in result):
        msg = f"chunks must be {len(shape)} positive lengths for shape {shape}, not {result}"
        raise InputError(msg)
    nbytes = math.prod(result) * data_type.itemsize
    if nbytes > MAX_CHUNK_BYTES:
        msg = f"chunks of {result} take {nbytes} bytes, more than MAX_CHUNK_BYTES"
        raise InputError(msg)
    return result


def _check_dimension_names(names: Any, ndim: int) -> tuple[str | None, ...] | None:
    if names is None:
        return None
    if not isinstance(names, Sequence) or isinstance(names, str):
        msg = f"dimension_names must be a sequence, not {type(names).__name__}"
        raise InputTypeError(msg)
    if not all(name is None or isinstance(name, str) for name in names):
        msg = f"dimension_names must hold strings or None, not {names!r}"
        raise InputTypeError(msg)
    if len(names) != ndim:
        msg = f"dimension_names needs {ndim} entries, not {len(names)}"
        raise InputError(msg)
    bad = [name for name in names if name is not None and not is_unicode(name)]
    if bad:
        msg = f"dimension_names: {bad[0]!r} holds a lone surrogate (not Unicode); remove it"
        raise InputError(msg)
    return tuple(names)
