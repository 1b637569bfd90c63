"""1-D string arrays read and written as UTF-8 buffers, without a Python ``str`` per row.

The table serialisers store string columns through these functions: :func:`write_strings`
stores a 1-D ``string`` array exactly as :func:`~cytepool.io.zarr.write_array` stores it
(``vlen-utf8`` chunks of the same size, the last one padded with ``""``, chunks of only ``""``
not stored, zarr.json written last), encoding each chunk from the rows' UTF-8 bytes when the
rows give them; :func:`read_strings` reads a whole 1-D string array into a
:class:`~cytepool._utf8.Utf8Buffer` with every check of an ordinary read, and
:func:`decode_strings` makes ``str`` objects of buffers when they are needed.

Examples
--------
>>> import tempfile, pathlib
>>> import numpy as np
>>> from cytepool._utf8 import Utf8Buffer
>>> from cytepool.io.zarr import open_array
>>> from cytepool.io.zarr.strings import read_strings, write_strings
>>> path = pathlib.Path(tempfile.mkdtemp()) / "names"
>>> write_strings(path, Utf8Buffer.from_str(["ab", "", "é"]), chunks=2, compression="zstd")
>>> open_array(path)[:].tolist()
['ab', '', 'é']
>>> read_strings(open_array(path)).to_list()
[b'ab', b'', b'\\xc3\\xa9']
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from cytepool._utf8 import Utf8Buffer
from cytepool.errors import InputError
from cytepool.io.zarr import _vlen
from cytepool.io.zarr._reading import Reader
from cytepool.io.zarr._store import as_path, write_document
from cytepool.io.zarr._writing import Payload, string_rows, write_payloads
from cytepool.io.zarr.array import ZarrArray, array_handle, new_metadata
from cytepool.io.zarr.indexing import parse_selection
from cytepool.io.zarr.store import refuse_url

__all__ = ["decode_strings", "read_strings", "write_strings"]

_OBJECT = np.dtype(object)


def write_strings(
    path: str | os.PathLike[str],
    rows: Any,
    *,
    chunks: int,
    compression: str | None = "gzip",
    level: int | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> None:
    """Store ``rows`` as a new 1-D ``string`` array, as ``write_array`` would.

    ``rows`` has a length, and either a method ``utf8(start, stop)`` giving the byte length
    of each row in ``[start, stop)`` and their UTF-8 bytes back to back (such as a
    :class:`~cytepool._utf8.Utf8Buffer`'s ``rows``), or gives those rows as a numpy array of
    ``str`` through ``rows[start:stop]``. The arguments are checked as by ``write_array``,
    and a chunk whose encoding would exceed MAX_CHUNK_BYTES is refused (InputError, a
    ValueError) before it is made, leaving a directory that does not open as an array.
    """
    refuse_url(path, "a Zarr array")
    directory = as_path(path)
    n = len(rows)
    meta = new_metadata((n,), _OBJECT, (chunks,), compression, level, attributes, None)
    document = meta.to_json()
    json.dumps(document, allow_nan=False)
    directory.mkdir()
    write_payloads(directory, meta, _payload(rows, n, chunks, str(directory)))
    write_document(directory, document)


def _payload(rows: Any, n: int, count: int, where: str) -> Payload:
    """Makes the vlen-utf8 encoding of a chunk of ``count`` rows (the last one padded), refused
    before it is assembled if it exceeds its limit (an InputError naming ``where`` for a str
    holding a lone surrogate)."""
    utf8 = getattr(rows, "utf8", None)

    def make(index: int, limit: _vlen.ChunkLimit) -> np.ndarray[Any, Any]:
        start = index * count
        stop = min(start + count, n)
        if utf8 is not None:
            lengths, body = utf8(start, stop)
            _check_rows(np.shape(lengths), f"rows.utf8({start}, {stop})", stop - start, where)
            return _vlen.assemble(lengths, body, count, limit=limit)
        values = np.asarray(rows[start:stop])
        _check_rows(values.shape, f"rows[{start}:{stop}]", stop - start, where)
        values = string_rows(values, (start, stop))
        try:
            return _vlen.payload(values, count, limit=limit)
        except UnicodeEncodeError:
            raise _vlen.invalid_unicode(where, values, start) from None

    return make


def _check_rows(shape: tuple[int, ...], given: str, expected: int, where: str) -> None:
    """InputError unless what ``given`` gave (of ``shape``) is ``expected`` rows: ``rows``
    gave fewer, or more, than its length says it holds."""
    if shape != (expected,):
        msg = (
            f"cannot write the string array {where}: {given} gave shape {shape}, expected "
            f"({expected},), as len(rows) says"
        )
        raise InputError(msg)


def read_strings(array: ZarrArray) -> Utf8Buffer:
    """Read a whole 1-D string array into UTF-8 buffers, checked as every read.

    Chunks (and inner chunks of a shard) that are not stored read as the array's fill value
    (``""`` in the arrays cytepool writes; zarr-python may write another). An array of one
    chunk is returned as a :class:`~cytepool._utf8.SpacedUtf8Buffer`: its items stay where the
    chunk holds them (a digest reads them there) and are joined, their UTF-8 checked, when
    first used.
    """
    pieces: list[tuple[int, np.ndarray[Any, Any] | None, Any]] = []
    with array_handle(array) as handle:
        reader = Reader(handle, array.key, array.metadata, pieces=pieces, spaced=True)
        selection = parse_selection(..., array.shape, orthogonal=False)
        reader.read(selection, np.empty(0, dtype=object))
    if len(pieces) == 1 and isinstance(pieces[0][2], Utf8Buffer):
        return pieces.pop()[2]
    pieces.sort(key=lambda piece: piece[0])
    # several pieces (or one not stored): lengths and bytes, only one chunk is kept spaced
    parts = [(cast("np.ndarray[Any, Any]", lengths), body) for _, lengths, body in pieces]
    pieces.clear()
    return Utf8Buffer.from_parts(parts)


def decode_strings(lengths: np.ndarray[Any, Any], body: np.ndarray[Any, Any]) -> Any:
    """An object array of the ``str`` whose UTF-8 is ``body``, cut at ``lengths``."""
    payload = bytearray(_vlen.assemble(lengths, body).tobytes())
    decoder = _vlen.Decoder(len(lengths), "(in memory)")
    decoder.feed(payload)
    return decoder.finish(objects=True)
