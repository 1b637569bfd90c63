"""Read an HDF5 dataset of an ``.h5ad`` file from its stored chunks, outside h5py.

h5py reads through one global lock, on one thread, with zlib. :class:`DirectDataset` asks h5py
only for the dataset's layout and its chunk index (each stored chunk's element offset, filter
mask, byte offset and stored size), once, when it opens; after that it reads the stored bytes
with ``os.pread`` on a file descriptor of its own and decodes them on cytepool's decode threads
(:mod:`cytepool.io.zarr._threads`), which run without the GIL. What it decodes: uncompressed
chunks and contiguous datasets (read in place, straight into the result), deflate (gzip),
shuffle, Fletcher-32 and LZF (see :mod:`._hdf5_filters`); a chunk that skipped a filter (its
filter mask) is decoded without it; a chunk never written reads as the fill value (as zeros when
the fill time is "never", as h5py reads it); big-endian values are swapped to the native order.
Anything else (another filter, such as blosc or zstd through hdf5plugin, szip, n-bit or
scale-offset; a compact, virtual or external dataset; a type other than a plain integer or
float; a file with a user block whose offsets, as h5py gives them, are not found to count from
the file's start) makes :meth:`DirectDataset.open` return None, and the caller reads the
dataset with h5py as before.

Nothing read from the file is trusted: the chunk B-tree is walked by cytepool before h5py is
asked for the chunks (:mod:`._hdf5_chunk_tree`: libhdf5 crashes or loops on one that loops),
every chunk's offset must lie on the chunk grid inside
the dataset's shape, every stored range inside the file, every stored size within what the
chunk's filters can produce; these are checked when the dataset opens, before anything is
allocated, and a chunk whose bytes do not decode to exactly its size is found when it is read.
Each is a :class:`~cytepool.errors.FormatError` naming the file, the dataset and the chunk.
The path must be a regular file (checked before h5py ever opens it, so a FIFO never hangs).
"""

from __future__ import annotations

import math
import os
import stat
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from cytepool.errors import FormatError, InputError, InputIndexError
from cytepool.io.anndata._hdf5_chunk_tree import FileBytes, check_chunk_tree
from cytepool.io.anndata._hdf5_filters import Pipeline, filter_name
from cytepool.io.zarr._fast import fast_inflate
from cytepool.io.zarr._threads import for_each

if TYPE_CHECKING:
    import h5py

__all__ = ["DirectDataset", "check_regular", "read_together", "stored_chunks"]

_PIECE = 8 << 20  # bytes read by one call into the result (contiguous data, runs of raw chunks)
_MOST_CHUNK = (1 << 32) - 1  # HDF5 chunks hold less than 4 GiB


@dataclass(frozen=True)
class _Index:
    """The stored chunks, by grid position (row-major over the chunk grid), sorted."""

    cells: np.ndarray[Any, Any]  # int64 grid positions
    offsets: np.ndarray[Any, Any]  # int64 byte offsets in the file
    sizes: np.ndarray[Any, Any]  # int64 stored sizes
    masks: np.ndarray[Any, Any]  # int64 filter masks


@dataclass(frozen=True)
class _Layout:
    """What :class:`DirectDataset` needs of a dataset: its type, shape and storage."""

    shape: tuple[int, ...]
    stored: np.dtype[Any]  # the type as stored (its byte order)
    fill: np.ndarray[Any, Any]  # 0-d, native order
    chunks: tuple[int, ...] | None  # None: contiguous
    pipeline: Pipeline
    index: _Index
    contiguous: int | None  # a contiguous dataset's byte offset (None: never written)


class DirectDataset:
    """An HDF5 dataset (1-D, or 2-D for dense X) read from its stored chunks, outside h5py.

    Open it with :meth:`open`; read with :meth:`read` (or :func:`read_together`); close it
    with :meth:`close` or a ``with`` block.

    Attributes
    ----------
    path, name
        The file and the dataset's name in it.
    shape
        The dataset's shape.
    dtype
        The values' type, in the native byte order (big-endian values are swapped).
    chunks
        The chunk shape, or None for a contiguous dataset.
    filters
        The names of the dataset's filters, in the order they were applied when writing.
    """

    path: Path
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    chunks: tuple[int, ...] | None
    filters: tuple[str, ...]

    def __init__(self, path: Path, name: str, fd: int, layout: _Layout):
        self.path, self.name, self._fd, self._layout = path, name, fd, layout
        self.shape, self.chunks = layout.shape, layout.chunks
        self.dtype = layout.stored.newbyteorder("=")
        self.filters = layout.pipeline.names
        self._closer = weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, path: str | os.PathLike[str], name: str) -> DirectDataset | None:
        """The dataset ``name`` of the HDF5 file ``path``, or None when it uses something
        cytepool does not decode (the caller then reads it with h5py).

        Raises
        ------
        FormatError
            ``path`` is not a regular file or not an HDF5 file, ``name`` is not a dataset,
            or the dataset's chunk index is invalid.
        OSError
            ``path`` cannot be opened (FileNotFoundError, PermissionError, ...).
        """
        found = cls.open_or_reason(path, name)
        return found if isinstance(found, DirectDataset) else None

    @classmethod
    def open_or_reason(cls, path: str | os.PathLike[str], name: str) -> DirectDataset | str:
        """As :meth:`open`, but the reason (one line) instead of None."""
        path = Path(path)
        fd = _open_regular(path)
        try:
            layout = _read_layout(path, name, fd)
        except BaseException:
            os.close(fd)
            raise
        if isinstance(layout, str):
            os.close(fd)
            return layout
        return cls(path, name, fd, layout)

    def read(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        """Elements ``[start, stop)`` of a 1-D dataset, or rows ``[start, stop)`` of a 2-D one.

        Chunks are read and decoded in parallel on the decode threads.

        Parameters
        ----------
        start, stop
            The range, ``0 <= start <= stop <= shape[0]``.
        out
            Where to put the values: a C-contiguous writable array of :attr:`dtype` and shape
            ``(stop - start, *shape[1:])``; a new array if None.

        Returns
        -------
        ``out``, filled.

        Raises
        ------
        FormatError
            A chunk is corrupt (see the module's description).
        InputIndexError, InputError
            The range is outside the dataset, or ``out`` does not fit.
        """
        return read_together([(self, start, stop)], outs=[out])[0]

    def close(self) -> None:
        """Close the file descriptor (reading after this raises :class:`InputError`)."""
        self._closer()
        self._fd = -1

    def __enter__(self) -> DirectDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        storage = f"chunks {self.chunks}" if self.chunks is not None else "contiguous"
        filters = ", ".join(self.filters) or "no filters"
        return (
            f"<DirectDataset {self.name!r} of {self.path}: shape {self.shape}, {self.dtype}, "
            f"{storage}, {filters}>"
        )

    def _where(self, cell: int | None = None) -> str:
        """The file, the dataset and, if given, the chunk at grid position ``cell``."""
        where = f"{self.path}: dataset {self.name!r}"
        if cell is None or self.chunks is None:
            return where
        grid = _grid(self.shape, self.chunks)
        position = tuple(
            int(k) * c for k, c in zip(np.unravel_index(cell, grid), self.chunks, strict=True)
        )
        return f"{where}, chunk at {position}"

    def _tasks(
        self, start: int, stop: int, out: np.ndarray[Any, Any], fast: ModuleType | None
    ) -> list[_Task]:
        """The reads that fill ``out`` with rows ``[start, stop)``."""
        if start == stop or out.size == 0:
            return []
        if self.chunks is None:
            return self._contiguous_tasks(start, stop, out)
        return _chunk_tasks(self, start, stop, out, fast)

    def _contiguous_tasks(self, start: int, stop: int, out: np.ndarray[Any, Any]) -> list[_Task]:
        layout = self._layout
        if layout.contiguous is None:
            return [_Fill(out, layout.fill)]
        row = out.nbytes // (stop - start)
        return _direct(self, out, [[layout.contiguous + start * row, 0, out.nbytes]])


def read_together(
    requests: Sequence[tuple[DirectDataset, int, int]],
    outs: Sequence[np.ndarray[Any, Any] | None] | None = None,
) -> list[np.ndarray[Any, Any]]:
    """:meth:`DirectDataset.read` of several ``(dataset, start, stop)`` at once: all their
    chunks in one pass over the decode threads (a row block's data and indices together, say).

    Parameters
    ----------
    requests
        The datasets and ranges.
    outs
        Where to put each result (None entries: new arrays), as ``out`` of
        :meth:`DirectDataset.read`.

    Returns
    -------
    The results, in the order asked.
    """
    outs = list(outs) if outs is not None else [None] * len(requests)
    if len(outs) != len(requests):
        msg = f"{len(outs)} outputs for {len(requests)} requests"
        raise InputError(msg)
    results, tasks = [], []
    fast = fast_inflate()
    for (dataset, start, stop), out in zip(requests, outs, strict=True):
        result = _checked_out(dataset, start, stop, out)
        results.append(result)
        tasks.extend(dataset._tasks(start, stop, result, fast))
    for_each(_run, tasks)
    return results


def _run(task: _Task) -> None:
    task.run()


def _checked_out(
    dataset: DirectDataset, start: int, stop: int, out: np.ndarray[Any, Any] | None
) -> np.ndarray[Any, Any]:
    """``out``, or a new array, for rows ``[start, stop)``, checked."""
    length = dataset.shape[0]
    if dataset._fd < 0:
        msg = f"{dataset._where()} was closed: open it again to read"
        raise InputError(msg)
    if not (isinstance(start, int | np.integer) and isinstance(stop, int | np.integer)):
        msg = f"start and stop must be integers, found {start!r} and {stop!r}"
        raise InputError(msg)
    if not 0 <= start <= stop <= length:
        msg = f"range [{start}, {stop}) is outside {dataset._where()} of length {length}"
        raise InputIndexError(msg)
    shape = (int(stop) - int(start), *dataset.shape[1:])
    if out is None:
        return np.empty(shape, dataset.dtype)
    fits = (
        isinstance(out, np.ndarray)
        and out.dtype == dataset.dtype
        and out.shape == shape
        and out.flags.c_contiguous
        and out.flags.writeable
    )
    if not fits:
        found = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        expected = f"a writable C-contiguous {dataset.dtype} array of shape {shape}"
        msg = f"out must be {expected}, found {found}"
        raise InputError(msg)
    return out


# --- the reads ------------------------------------------------------------------------------


@dataclass
class _Fill:
    """Values of chunks never written: the fill value."""

    target: np.ndarray[Any, Any]
    value: np.ndarray[Any, Any]

    def run(self) -> None:
        self.target[...] = self.value


@dataclass
class _Direct:
    """Stored bytes read straight into a contiguous piece of the result, swapped if big-endian."""

    dataset: DirectDataset
    offset: int
    target: np.ndarray[Any, Any]  # uint8, contiguous

    def run(self) -> None:
        view = memoryview(self.target)
        done = 0
        while done < len(view):
            got = os.preadv(self.dataset._fd, [view[done:]], self.offset + done)
            if got == 0:
                _raise_short(self.dataset, self.offset + done)
            done += got
        if self.dataset._layout.stored.byteorder == ">":
            self.target.view(self.dataset.dtype).byteswap(inplace=True)


@dataclass
class _Decode:
    """One chunk read, decoded, and its part copied into the result."""

    dataset: DirectDataset
    entry: int  # the chunk's position in the index
    target: np.ndarray[Any, Any]
    selection: tuple[slice, ...]  # of the chunk
    fast: ModuleType | None  # the libdeflate binding

    def run(self) -> None:
        dataset = self.dataset
        layout = dataset._layout
        assert layout.chunks is not None
        index = layout.index
        offset, size = int(index.offsets[self.entry]), int(index.sizes[self.entry])
        data = os.pread(dataset._fd, size, offset)
        if len(data) != size:
            _raise_short(dataset, offset + len(data), dataset._where(int(index.cells[self.entry])))
        nbytes = math.prod(layout.chunks) * layout.stored.itemsize
        try:
            raw = layout.pipeline.decode(data, int(index.masks[self.entry]), nbytes, self.fast)
        except FormatError as error:
            msg = f"{dataset._where(int(index.cells[self.entry]))}: {error}"
            raise FormatError(msg) from error
        chunk = raw.view(layout.stored).reshape(layout.chunks)
        self.target[...] = chunk[self.selection]


_Task = _Fill | _Direct | _Decode
"""One read of the decode threads."""


def _raise_short(dataset: DirectDataset, end: int, where: str | None = None) -> None:
    msg = f"{where or dataset._where()}: the file ends at byte {end}, before the data it lists"
    raise FormatError(msg)


def _direct(
    dataset: DirectDataset, out: np.ndarray[Any, Any], runs: list[list[int]]
) -> list[_Task]:
    """Reads of runs ``[byte offset in the file, byte offset in out, length]`` straight into
    ``out``, in pieces of at most ``_PIECE`` bytes (whole elements)."""
    itemsize = dataset.dtype.itemsize
    piece = max(itemsize, _PIECE // itemsize * itemsize)
    flat = out.reshape(-1).view(np.uint8)
    tasks: list[_Task] = []
    for offset, begin, length in runs:
        for done in range(0, length, piece):
            target = flat[begin + done : begin + min(length, done + piece)]
            tasks.append(_Direct(dataset, offset + done, target))
    return tasks


def _grid(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[int, ...]:
    """The number of chunks along each axis."""
    return tuple(-(-length // chunk) for length, chunk in zip(shape, chunks, strict=True))


def _chunk_tasks(
    dataset: DirectDataset,
    start: int,
    stop: int,
    out: np.ndarray[Any, Any],
    fast: ModuleType | None,
) -> list[_Task]:
    """The reads of a chunked dataset's rows ``[start, stop)`` into ``out``: raw chunks that
    cover whole rows straight into ``out`` (adjacent ones in one read), the others decoded."""
    layout = dataset._layout
    assert layout.chunks is not None
    chunks, shape, index = layout.chunks, layout.shape, layout.index
    columns = _grid(shape, chunks)[1] if len(shape) == 2 else 1
    cells = np.arange(start // chunks[0] * columns, -(-stop // chunks[0]) * columns, dtype=np.int64)
    found = np.minimum(np.searchsorted(index.cells, cells), max(index.cells.size - 1, 0))
    stored = index.cells[found] == cells if index.cells.size else np.zeros(cells.size, bool)
    in_place = len(shape) == 1 or chunks[1] == shape[1]
    row_bytes = out.nbytes // (stop - start)
    if in_place and not layout.pipeline.codes and stored.all():
        return _direct(
            dataset, out, _raw_runs(index.offsets[found], cells, start, stop, chunks[0], row_bytes)
        )
    tasks: list[_Task] = []
    runs: list[list[int]] = []
    for cell, entry, present in zip(cells.tolist(), found.tolist(), stored.tolist(), strict=True):
        row, column = divmod(cell, columns)
        low, high = max(start, row * chunks[0]), min(stop, (row + 1) * chunks[0])
        rows = slice(low - row * chunks[0], high - row * chunks[0])
        selection: tuple[slice, ...] = (rows,)
        if len(shape) == 1:
            target = out[low - start : high - start]
        else:
            across = slice(column * chunks[1], min(shape[1], (column + 1) * chunks[1]))
            target = out[low - start : high - start, across]
            selection = (rows, slice(0, across.stop - across.start))
        if not present:
            tasks.append(_Fill(target, layout.fill))
        elif in_place and not layout.pipeline.active(int(index.masks[entry])):
            offset = int(index.offsets[entry]) + rows.start * row_bytes
            _extend(runs, offset, (low - start) * row_bytes, (high - low) * row_bytes)
        else:
            tasks.append(_Decode(dataset, entry, target, selection, fast))
    return _direct(dataset, out, runs) + tasks


def _raw_runs(
    offsets: np.ndarray[Any, Any],
    cells: np.ndarray[Any, Any],
    start: int,
    stop: int,
    rows: int,
    row_bytes: int,
) -> list[list[int]]:
    """The reads of rows ``[start, stop)`` from unfiltered chunks of ``rows`` whole rows each
    (those at ``cells`` of the grid, stored at ``offsets``): :func:`_chunk_tasks`'s runs, found
    with numpy. A block of a large matrix spans hundreds of small chunks (h5py's own chunk
    shape for anndata's arrays holds 24,415 values), which a loop in Python took 5 us each
    to list (80 ms of a 200,000-cell file's 0.6 s).

    Examples
    --------
    Rows 5 to 25 of chunks of 10 rows of 4 bytes: the first two stored one after the other
    (one read), the third elsewhere:

    >>> _raw_runs(np.array([1000, 1040, 5000]), np.arange(3), 5, 25, 10, 4)
    [[1020, 0, 60], [5000, 60, 20]]
    """
    firsts = cells * rows
    lows, highs = np.maximum(firsts, start), np.minimum(firsts + rows, stop)
    places = offsets + (lows - firsts) * row_bytes  # in the file
    lengths = (highs - lows) * row_bytes  # each follows the one before in the result
    breaks = np.flatnonzero(places[1:] != places[:-1] + lengths[:-1]) + 1
    heads = np.concatenate([[0], breaks])
    begins = (lows[heads] - start) * row_bytes
    sizes = np.add.reduceat(lengths, heads)
    return np.stack([places[heads], begins, sizes], axis=1).tolist()


def _extend(runs: list[list[int]], offset: int, begin: int, length: int) -> None:
    """Add a read to ``runs``, joined to the last one where both follow on in file and result."""
    if runs and runs[-1][0] + runs[-1][2] == offset and runs[-1][1] + runs[-1][2] == begin:
        runs[-1][2] += length
    else:
        runs.append([offset, begin, length])


# --- opening --------------------------------------------------------------------------------


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def check_regular(path: str | os.PathLike[str]) -> None:
    """Raise :class:`FormatError` unless ``path`` is a regular file (a FIFO, a socket, a
    device or a directory would make h5py block or fail obscurely): call it before h5py or
    anndata opens a path.

    Raises
    ------
    FormatError
        ``path`` is not a regular file ("... is not a regular file: it is a FIFO").
    FileNotFoundError
        ``path`` does not exist.
    """
    _check_regular(Path(path), os.stat(path))


def _open_regular(path: Path) -> int:
    """A read-only descriptor of ``path``, which must be a regular file (never blocks)."""
    check_regular(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        _check_regular(path, os.fstat(fd))  # it may have been replaced since the stat
    except BaseException:
        os.close(fd)
        raise
    return fd


def system_error(error: BaseException) -> bool:
    """Whether ``error`` is an OSError of the system (a file that cannot be read: it has an
    error number, or is a subclass such as FileNotFoundError), which passes as it is; h5py's
    plain OSErrors carry none (libhdf5 refusing what it read, a damaged file)."""
    return isinstance(error, OSError) and (error.errno is not None or type(error) is not OSError)


def _check_regular(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
        msg = f"{path} is not a regular file: it is {kind}"
        raise FormatError(msg)


def _read_layout(path: Path, name: str, fd: int) -> _Layout | str:
    """The layout of dataset ``name``, checked against the file open as ``fd``, or why it is
    not decoded. h5py opens the file ``fd`` is open on (through /proc where there is one), so
    the chunk index and the bytes read later come from the same file even if ``path`` is
    replaced meanwhile."""
    import h5py

    file_size = os.fstat(fd).st_size
    same = Path(f"/proc/self/fd/{fd}")
    try:
        file = h5py.File(same if same.exists() else path, "r")
    except OSError as error:
        if system_error(error):  # FileNotFoundError, PermissionError, ...
            raise
        msg = f"{path}: not a readable HDF5 file ({error})"
        raise FormatError(msg) from error
    with file:
        base = file.id.get_create_plist().get_userblock()
        try:
            node = file.get(name)
        except (KeyError, OSError, RuntimeError) as error:
            msg = f"{path}: cannot open {name!r} ({error})"
            raise FormatError(msg) from error
        if not isinstance(node, h5py.Dataset):
            found = "nothing" if node is None else type(node).__name__.lower()
            msg = f"{path}: expected a dataset at {name!r}, found {found}"
            raise FormatError(msg)
        where = f"{path}: dataset {name!r}"
        try:
            layout = _dataset_layout(node, where, file_size)
            if base and isinstance(layout, _Layout):
                return _past_user_block(node, layout, fd, base) or layout
            return layout
        except FormatError:
            raise
        except (KeyError, OSError, RuntimeError, ValueError) as error:  # HDF5 found it corrupt
            if system_error(error):
                raise
            msg = f"{where}: its layout or chunk index cannot be read ({error})"
            raise FormatError(msg) from error


def _past_user_block(dataset: h5py.Dataset, layout: _Layout, fd: int, base: int) -> str | None:
    """Why the byte offsets h5py gives for ``dataset`` of a file with a user block of ``base``
    bytes (MuData's ``.h5mu`` has one of 512) cannot be trusted, or None when they can.

    libhdf5 counts a file's addresses from the end of its user block. The offsets of chunks
    (``H5Dget_chunk_info``, ``H5Dchunk_iter``) and of contiguous values (``H5Dget_offset``)
    count from the start of the file in HDF5 1.14.4 and 2.0, but have not in every version: the
    first stored chunk as libhdf5 reads it (or the first values) must be found at its offset,
    and not ``base`` bytes further on, or the dataset is read through h5py."""
    index = layout.index
    if layout.chunks is not None and index.cells.size:
        grid = _grid(layout.shape, layout.chunks)
        first = np.unravel_index(int(index.cells[0]), grid)
        origin = tuple(int(k) * n for k, n in zip(first, layout.chunks, strict=True))
        expected = bytes(dataset.id.read_direct_chunk(origin)[1])
        offset = int(index.offsets[0])
    elif layout.chunks is None and layout.contiguous is not None and all(layout.shape):
        count = min(layout.shape[-1], 4096 // layout.stored.itemsize or 1)
        values = dataset[(0,) * (len(layout.shape) - 1) + (slice(0, count),)]
        expected = np.asarray(values, dtype=layout.stored).tobytes()
        offset = layout.contiguous
    else:
        return None  # nothing stored is read from the file
    found, beyond = (os.pread(fd, len(expected), at) for at in (offset, offset + base))
    if found == expected != beyond:
        return None
    return "a user block, from whose end h5py's offsets of this dataset may count"


def _dataset_layout(dataset: h5py.Dataset, where: str, file_size: int) -> _Layout | str:
    """The layout of an open h5py dataset, or why it is not decoded."""
    import h5py

    stored = dataset.dtype
    if stored.kind not in "iuf" or stored.fields or stored.subdtype:
        return f"values of type {stored} are read through h5py"
    if not dataset.id.get_type().equal(h5py.h5t.py_create(stored)):
        return f"values of an unusual HDF5 {stored} type (padding or a custom float layout)"
    shape = tuple(int(n) for n in dataset.shape)
    if len(shape) not in (1, 2):
        return f"{len(shape)}-dimensional datasets are read through h5py"
    plist = dataset.id.get_create_plist()
    if plist.get_external_count():
        return "external storage is read through h5py"
    fill = _fill_value(plist, stored)
    layout = plist.get_layout()
    if layout == h5py.h5d.CONTIGUOUS:
        return _contiguous(dataset, where, file_size, shape, stored, fill)
    if layout != h5py.h5d.CHUNKED:
        return "compact and virtual datasets are read through h5py"
    filters = [plist.get_filter(k)[::2] for k in range(plist.get_nfilters())]  # (id, values)
    pipeline = Pipeline.check(filters, stored.itemsize)
    if isinstance(pipeline, str):
        return pipeline
    chunks = tuple(int(n) for n in plist.get_chunk())
    index = _chunk_index(dataset, where, file_size, shape, chunks, stored.itemsize, pipeline)
    if fill is None and index.cells.size < math.prod(_grid(shape, chunks)):
        return "chunks never written and no fill value defined"
    zero = np.zeros((), stored.newbyteorder("="))
    return _Layout(shape, stored, zero if fill is None else fill, chunks, pipeline, index, None)


def _fill_value(plist: Any, stored: np.dtype[Any]) -> np.ndarray[Any, Any] | None:
    """What values never written read as (0-d, native order): the fill value, zero by default,
    None if undefined.

    A dataset whose fill time is "never" reads as zeros where nothing was written, whatever its
    fill value: libhdf5 then leaves the values it does not read from the file as they are in
    the reader's memory, which h5py (and so anndata) allocates filled with zeros."""
    import h5py

    defined = plist.fill_value_defined()
    fill = np.zeros((), stored.newbyteorder("="))
    if plist.get_fill_time() == h5py.h5d.FILL_TIME_NEVER:
        return fill
    if defined == h5py.h5d.FILL_VALUE_UNDEFINED:
        return None
    if defined == h5py.h5d.FILL_VALUE_USER_DEFINED:
        value = np.zeros(1, stored.newbyteorder("="))
        plist.get_fill_value(value)
        fill[...] = value[0]
    return fill


def _contiguous(
    dataset: h5py.Dataset,
    where: str,
    file_size: int,
    shape: tuple[int, ...],
    stored: np.dtype[Any],
    fill: np.ndarray[Any, Any] | None,
) -> _Layout | str:
    """The layout of a contiguous dataset, its stored range checked against the file."""
    offset = dataset.id.get_offset()
    empty = _Index(*(np.zeros(0, np.int64) for _ in range(4)))
    if offset is None and fill is None:
        return "a dataset never written and no fill value defined"
    nbytes = math.prod(shape) * stored.itemsize
    if offset is not None and (offset < 0 or nbytes > file_size - offset):
        msg = (
            f"{where}: its {nbytes} bytes at byte {offset} go past the end of the file "
            f"({file_size} bytes)"
        )
        raise FormatError(msg)
    zero = np.zeros((), stored.newbyteorder("="))
    fill = zero if fill is None else fill
    return _Layout(shape, stored, fill, None, Pipeline((), stored.itemsize), empty, offset)


def stored_chunks(
    dataset: h5py.Dataset, where: str, view: FileBytes | None = None
) -> list[tuple[Any, ...]]:
    """``(element offset, filter mask, byte offset, size)`` of each stored chunk; the chunk
    index is checked first (:func:`~cytepool.io.anndata._hdf5_chunk_tree.check_chunk_tree`,
    ``where`` naming the dataset in its messages, through the file's bytes ``view`` if the
    caller has them open), as libhdf5 crashes or loops on a damaged one."""
    check_chunk_tree(dataset, where, view)
    found: list[tuple[Any, ...]] = []

    def visit(info: Any) -> None:
        found.append((info.chunk_offset, info.filter_mask, info.byte_offset, info.size))

    try:
        dataset.id.chunk_iter(visit)
    except (AttributeError, NotImplementedError):  # HDF5 without H5Dchunk_iter
        found.clear()
        for k in range(dataset.id.get_num_chunks()):
            visit(dataset.id.get_chunk_info(k))
    return [entry for entry in found if entry[2] is not None]


def _chunk_index(
    dataset: h5py.Dataset,
    where: str,
    file_size: int,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    itemsize: int,
    pipeline: Pipeline,
) -> _Index:
    """The stored chunks, each checked against the grid, the file and its filters."""
    grid = _grid(shape, chunks)
    nbytes = math.prod(chunks) * itemsize
    if min(chunks, default=0) < 1 or len(chunks) != len(shape) or nbytes > _MOST_CHUNK:
        msg = f"{where}: invalid chunk shape {chunks} for shape {shape}"
        raise FormatError(msg)
    if math.prod(grid) >= 1 << 62:
        msg = f"{where}: a chunk grid of {grid} chunks is too large"
        raise FormatError(msg)
    entries = stored_chunks(dataset, where)
    if not entries:
        return _Index(*(np.zeros(0, np.int64) for _ in range(4)))
    positions = np.array([entry[0] for entry in entries], dtype=np.uint64).reshape(len(entries), -1)
    masks, offsets, sizes = (
        np.array([entry[k] for entry in entries], dtype=np.uint64) for k in (1, 2, 3)
    )
    _check_positions(where, positions, shape, chunks)
    cells = np.zeros(len(entries), np.int64)
    for axis in range(len(shape)):
        along = positions[:, axis] // np.uint64(chunks[axis])
        cells = cells * grid[axis] + along.astype(np.int64)
    _check_ranges(where, positions, offsets, sizes, masks, file_size, nbytes, pipeline)
    order = np.argsort(cells, kind="stable")
    cells = cells[order]
    repeated = np.flatnonzero(cells[1:] == cells[:-1])
    if repeated.size:
        msg = f"{where}: the chunk at {_position(positions[order[repeated[0]]])} is listed twice"
        raise FormatError(msg)
    return _Index(cells, *(array[order].astype(np.int64) for array in (offsets, sizes, masks)))


def _position(row: np.ndarray[Any, Any]) -> tuple[int, ...]:
    return tuple(int(k) for k in row)


def _check_positions(
    where: str, positions: np.ndarray[Any, Any], shape: tuple[int, ...], chunks: tuple[int, ...]
) -> None:
    """Every chunk starts on the chunk grid, inside the dataset's shape."""
    if positions.shape[1] != len(shape):
        msg = f"{where}: chunk positions of {positions.shape[1]} dimensions for shape {shape}"
        raise FormatError(msg)
    limits, steps = np.array(shape, np.uint64), np.array(chunks, np.uint64)
    bad = np.flatnonzero(((positions >= limits) | (positions % steps != 0)).any(axis=1))
    if bad.size:
        grid = f"the grid of {chunks} chunks in {shape}"
        msg = f"{where}: a chunk at {_position(positions[bad[0]])}, off {grid}"
        raise FormatError(msg)


def _check_ranges(
    where: str,
    positions: np.ndarray[Any, Any],
    offsets: np.ndarray[Any, Any],
    sizes: np.ndarray[Any, Any],
    masks: np.ndarray[Any, Any],
    file_size: int,
    nbytes: int,
    pipeline: Pipeline,
) -> None:
    """Every chunk's stored bytes lie in the file, as many as its filters can produce."""
    end = np.uint64(file_size)
    past = np.flatnonzero((offsets > end) | (sizes > end - np.minimum(offsets, end)))
    if past.size:
        k = past[0]
        msg = (
            f"{where}, chunk at {_position(positions[k])}: {int(sizes[k])} bytes at byte "
            f"{int(offsets[k])} go past the end of the file ({file_size} bytes)"
        )
        raise FormatError(msg)
    foreign = np.flatnonzero(masks >> np.uint64(len(pipeline.codes)))
    if foreign.size:
        k = foreign[0]
        msg = (
            f"{where}, chunk at {_position(positions[k])}: filter mask {int(masks[k]):#x} skips "
            f"filters the dataset does not have"
        )
        raise FormatError(msg)
    for mask in np.unique(masks).tolist():
        least, most = pipeline.stored_range(int(mask), nbytes)
        bad = np.flatnonzero((masks == mask) & ((sizes < least) | (sizes > most)))
        if bad.size:
            k = bad[0]
            expected = f"{least}" if least == most else f"{least} to {most}"
            msg = (
                f"{where}, chunk at {_position(positions[k])}: {int(sizes[k])} bytes stored, "
                f"expected {expected} for a chunk of {nbytes} bytes through "
                f"{_names(pipeline, int(mask))}"
            )
            raise FormatError(msg)


def _names(pipeline: Pipeline, mask: int) -> str:
    """The filters a chunk with filter mask ``mask`` went through."""
    return ", ".join(filter_name(code) for code in pipeline.active(mask)) or "no filters"
