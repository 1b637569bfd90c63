"""The vlen-utf8 byte layout, encoded and decoded with numpy instead of a loop per string.

A chunk is a u32 item count, then for each item (C order) a u32 byte length and that many bytes
of UTF-8, all integers little endian. Decoding checks the count, every length, truncation,
trailing bytes and UTF-8 (each item on its own), and raises FormatError naming the chunk.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

import numpy as np

from cytepool.errors import FormatError

__all__ = ["decode", "encode"]

_STRING = np.dtypes.StringDType()
_U32 = struct.Struct("<I")
_OFFSETS = np.arange(4)


def _corrupt(where: str, problem: str) -> FormatError:
    return FormatError(f"corrupt chunk {where}: {problem}")


# ---------------------------------------------------------------------------------------------
# Encoding


def encode(values: np.ndarray[Any, Any]) -> bytes:
    """The vlen-utf8 encoding of a 1-D array of str (UnicodeEncodeError for lone surrogates)."""
    strings = values.tolist()
    text = "".join(strings)
    body = text.encode("utf-8")
    if values.dtype.kind in "TU":
        chars = np.strings.str_len(values).astype(np.int64)
    else:
        chars = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    lengths = chars if len(body) == len(text) else _utf8_lengths(text, chars)
    return _assemble(body, lengths)


def _utf8_lengths(text: str, chars: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Bytes per item, from the code points of the joined text and the characters per item."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    per_char = 1 + (codes >= 0x80) + (codes >= 0x800) + (codes >= 0x10000)
    total = np.concatenate([[0], np.cumsum(per_char)])
    ends = np.cumsum(chars)
    return np.asarray(total[ends] - total[ends - chars], dtype=np.int64)


def _assemble(body: bytes, lengths: np.ndarray[Any, Any]) -> bytes:
    n = len(lengths)
    out = np.empty(4 + 4 * n + len(body), dtype=np.uint8)
    out[:4] = np.frombuffer(_U32.pack(n), dtype=np.uint8)
    fields = _field_bytes(4 + 4 * np.arange(n) + np.cumsum(lengths) - lengths)
    out[fields] = lengths.astype("<u4").view(np.uint8)
    keep = np.ones(len(out), dtype=bool)
    keep[:4] = False
    keep[fields] = False
    out[keep] = np.frombuffer(body, dtype=np.uint8)
    return out.tobytes()


def _field_bytes(fields: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The positions of the 4 bytes of each length field."""
    return (fields[:, None] + _OFFSETS).reshape(-1)


# ---------------------------------------------------------------------------------------------
# Decoding


def decode(
    data: bytes | bytearray, count: int, where: str, *, objects: bool = False
) -> np.ndarray[Any, Any]:
    """Decode a chunk of ``count`` strings into a 1-D StringDType (or object) array."""
    decoder = Decoder(count, where)
    decoder.feed(data)
    return decoder.finish(objects=objects)


class Decoder:
    """Checks a vlen-utf8 stream piece by piece while it is decompressed, then splits it.

    The item count is checked as soon as it arrives, and every length field as soon as it is
    complete, so a stream that holds more bytes than its items (a decompression bomb of
    padding, say) fails within one piece of the last valid byte. Runs of items of equal
    length are checked with numpy, other items one by one.
    """

    _RUN = 16  # equal lengths in a row before trying a vectorised run

    def __init__(self, count: int, where: str):
        self.count, self.where = count, where
        self.data = bytearray()
        self.items, self.pos = 0, 4  # items whose length is known; the next length field
        self.parts: list[np.ndarray[Any, Any]] = []
        self.pending: list[int] = []

    def feed(self, piece: bytes | bytearray | memoryview) -> None:
        """Append decoded bytes and check them (FormatError as soon as something is wrong)."""
        had = len(self.data)
        self.data += piece
        if had < 4 <= len(self.data):
            found = _U32.unpack_from(self.data, 0)[0]
            if found != self.count:
                problem = f"the vlen-utf8 data holds {found} items, expected {self.count}"
                raise _corrupt(self.where, problem)
        if len(self.data) >= 4:
            self._advance()
        if self.items == self.count and len(self.data) > self.pos:
            problem = f"{len(self.data) - self.pos} trailing bytes after the last vlen-utf8 item"
            raise _corrupt(self.where, problem)

    def _advance(self) -> None:
        data, unpack, append = self.data, _U32.unpack_from, self.pending.append
        end, streak, previous = len(data), 0, -1
        while self.items < self.count and self.pos + 4 <= end:
            length = unpack(data, self.pos)[0]
            append(length)
            self.items += 1
            self.pos += 4 + length
            streak = streak + 1 if length == previous else 0
            previous = length
            if streak >= self._RUN:
                self._run(length)
                streak = 0

    def _run(self, length: int) -> None:
        """Skip the items that follow with the same length, checked with numpy."""
        step, end = 4 + length, len(self.data)
        fit = min(self.count - self.items, (end - self.pos - 4) // step + 1)
        if fit <= 0:
            return
        starts = self.pos + step * np.arange(fit)
        found = np.frombuffer(self.data, dtype=np.uint8)[starts[:, None] + _OFFSETS]
        same = found.view("<u4").reshape(-1) == length
        run = fit if same.all() else int(np.argmin(same))
        if run:
            self.parts += [np.array(self.pending, dtype=np.int64), np.full(run, length)]
            self.pending.clear()
            self.items += run
            self.pos += run * step

    def finish(self, *, objects: bool = False) -> np.ndarray[Any, Any]:
        """Check that the stream is complete and return its strings."""
        size = len(self.data)
        if size < 4:
            raise _corrupt(self.where, f"the vlen-utf8 data is truncated: {size} bytes")
        lengths = np.concatenate([*self.parts, np.array(self.pending, dtype=np.int64)])
        if self.pos > size:
            i, length = self.items - 1, int(lengths[-1])
            remain = size - (self.pos - length)
            problem = f"vlen-utf8 item {i} claims {length} bytes, only {remain} remain"
            raise _corrupt(self.where, problem)
        if self.items < self.count:
            problem = f"the vlen-utf8 data is truncated in the length of item {self.items}"
            raise _corrupt(self.where, problem)
        return _split(np.frombuffer(self.data, dtype=np.uint8), lengths, self.where, objects)


def _split(
    buffer: np.ndarray[Any, Any], lengths: np.ndarray[Any, Any], where: str, objects: bool
) -> Any:
    """The items: the bodies joined by one separator byte, decoded once and split in C.

    The separator is an ASCII byte that no item holds, so decoding also checks that each
    item is valid UTF-8 on its own (a character cut by an item boundary gets a separator in
    the middle).
    """
    n = len(lengths)
    fields = 4 + 4 * np.arange(n) + np.cumsum(lengths) - lengths
    keep = np.ones(len(buffer), dtype=bool)
    keep[:4] = False
    keep[_field_bytes(fields)] = False
    keep[fields[1:]] = True  # the first byte of each later length field becomes a separator
    joined = buffer[keep]
    separators = fields[1:] - 4 * np.arange(1, n) + np.arange(n - 1) - 4
    joined[separators] = 0
    raw = joined.tobytes()
    if raw.count(b"\0") == n - 1:  # no item holds a NUL: the usual case
        items = _utf8(raw, where).split("\0")
    else:
        items = _split_on_unused(joined, separators, where)
    result = np.empty(n, dtype=object if objects else _STRING)
    result[:] = items
    return result


def _split_on_unused(
    joined: np.ndarray[Any, Any], separators: np.ndarray[Any, Any], where: str
) -> list[str]:
    counts = np.bincount(joined, minlength=256)[:128]
    counts -= np.bincount(joined[separators], minlength=256)[:128]
    unused = np.flatnonzero(counts == 0)
    if not len(unused):  # the items use every ASCII byte: decode them one by one
        raw = joined.tobytes()
        bounds = [-1, *separators.tolist(), len(raw)]
        return [_utf8(raw[a + 1 : b], where) for a, b in itertools.pairwise(bounds)]
    separator = int(unused[0])
    joined[separators] = separator
    return _utf8(joined.tobytes(), where).split(chr(separator))


def _utf8(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _corrupt(where, f"a vlen-utf8 item is not valid UTF-8: {error}") from error
