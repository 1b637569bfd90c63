"""String columns as UTF-8 buffers, written and read chunk by chunk without Python strings.

A string array of a table is stored through :mod:`cytepool.io.zarr.strings`, exactly as
:func:`cytepool.io.zarr.write_array` stores it, but its chunks are encoded from the column's
bytes:

* :class:`Utf8Strings` holds a column as a :class:`~cytepool._utf8.Utf8Buffer` (offsets and
  UTF-8 bytes), taken without a copy from a polars or pyarrow column, and is what reads for
  polars and pyarrow return: chunks decode straight into such buffers, which become an Arrow
  array (``pyarrow.Array.from_buffers``), so no Python ``str`` is made for a row;
* :class:`RowNumbers` makes the unnamed index of row numbers, chunk by chunk, from the
  digits of the numbers;
* numpy arrays of ``str`` (what pandas holds) are encoded a chunk at a time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cytepool._utf8 import Utf8Buffer
from cytepool.errors import InputIndexError
from cytepool.io import zarr as _zarr
from cytepool.io.zarr import strings as _strings

__all__ = ["RowNumbers", "StringRows", "Utf8Strings", "decimal", "read_strings", "write_strings"]

_OBJECT = np.dtype(object)


class StringRows:
    """A 1-D string column that gives its rows as UTF-8 (``utf8``), for the chunk encoder.

    It has the ``shape``, ``ndim`` and ``dtype`` (object) of a numpy array of ``str``, and
    ``rows[a:b]`` gives those rows as one, for code that needs the strings themselves.
    """

    dtype = _OBJECT
    ndim = 1

    def __init__(self, length: int):
        self.shape = (length,)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            msg = f"{type(self).__name__} takes slices with step 1, found {key!r}"
            raise InputIndexError(msg)
        stop = max(start, stop)
        lengths, body = self.utf8(start, stop)
        return _strings.decode_strings(lengths, body)

    def utf8(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The byte length of each row in ``[start, stop)`` and their UTF-8 joined."""
        raise NotImplementedError


class Utf8Strings(StringRows):
    """A string column held as a :class:`~cytepool._utf8.Utf8Buffer`.

    Missing values, if any, are ``""`` here; their mask is kept with the column.
    """

    def __init__(self, buffer: Utf8Buffer):
        super().__init__(len(buffer))
        self.buffer = buffer

    @classmethod
    def from_arrow(cls, array: Any) -> Utf8Strings:
        """Take the buffers of a pyarrow string, large_string or string_view array (or a
        chunked one); missing values become ``""``."""
        return cls(Utf8Buffer.from_arrow(array))

    def utf8(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The byte length of each row in ``[start, stop)`` and their UTF-8 joined."""
        return self.buffer.utf8(start, stop)

    def to_arrow(self, mask: np.ndarray | None = None, *, large: bool = False) -> Any:
        """A pyarrow ``string`` array (``large_string`` beyond 2 GiB, or if ``large``), null
        where ``mask``."""
        return self.buffer.to_arrow(mask, large=large)


class RowNumbers(StringRows):
    """The row numbers ``start, start + step, ...`` as decimal strings, made from digits."""

    def __init__(self, length: int, start: int = 0, step: int = 1):
        super().__init__(length)
        self.start, self.step = start, step

    def utf8(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The byte length of each row in ``[start, stop)`` and their UTF-8 joined."""
        first = self.start + start * self.step
        return decimal(np.arange(first, first + (stop - start) * self.step, self.step))


def decimal(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The decimal strings of int64 ``values`` as ASCII: the length of each and the digits.

    Examples
    --------
    >>> lengths, body = decimal(np.array([0, 7, -12, 305]))
    >>> lengths.tolist(), body.tobytes()
    ([1, 1, 3, 3], b'07-12305')
    """
    values = np.asarray(values, dtype=np.int64)
    negative = values < 0
    magnitude = values.astype(np.uint64)
    np.negative(magnitude, out=magnitude, where=negative)  # modulo 2**64: |int64 min| fits
    digits = np.ones(len(values), dtype=np.int64)
    for power in range(1, 20):
        above = magnitude >= np.uint64(10**power)
        if not above.any():
            break
        digits += above
    lengths = digits + negative
    ends = np.cumsum(lengths)
    body = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    body[(ends - lengths)[negative]] = ord("-")
    positions = ends - 1
    fewest = int(np.min(digits)) if len(digits) else 0
    for k in range(int(np.max(digits)) if len(digits) else 0):
        if k >= fewest:  # only the numbers with more than k digits
            keep = digits > k
            magnitude, positions, digits = magnitude[keep], positions[keep], digits[keep]
        quotient = magnitude // np.uint64(10)
        body[positions] = (magnitude - quotient * np.uint64(10)).astype(np.uint8) + ord("0")
        magnitude, positions = quotient, positions - 1
    return lengths, body


# --------------------------------------------------------------------------------------------
# Writing and reading


def write_strings(
    path: Path,
    data: Any,
    *,
    chunks: int,
    compression: str | None,
    level: int | None,
    attributes: dict[str, Any],
) -> None:
    """Store a 1-D string column as ``write_array`` would, encoding the chunks from ``data``.

    ``data`` is a :class:`StringRows`, a numpy array of ``str``, or any object whose
    ``data[a:b]`` gives those rows as one (``columns.LazyRows``); see
    :func:`cytepool.io.zarr.strings.write_strings`.
    """
    _strings.write_strings(
        path, data, chunks=chunks, compression=compression, level=level, attributes=attributes
    )


def read_strings(array: _zarr.ZarrArray) -> Utf8Strings:
    """Read a whole 1-D string array into buffers, checked as every read of the Zarr module.

    Chunks that are not stored read as the array's fill value (``""`` in the arrays cytepool
    writes).
    """
    return Utf8Strings(_strings.read_strings(array))
