"""The vlen-utf8 byte layout, encoded and decoded with numpy instead of a loop per string.

A chunk is a u32 item count, then for each item (C order) a u32 byte length and that many bytes
of UTF-8, all integers little endian. Decoding checks the count, every length, truncation,
trailing bytes and UTF-8 (each item on its own), and raises FormatError naming the chunk.

Decoded items are made into strings a batch at a time (items of at most 256 KiB together, or
one larger item alone), so decoding holds the chunk's bytes, the strings made so far and one
batch: at most about twice the decoded strings plus the chunk. A last item alone in its batch is
decoded, then the chunk is let go before the string goes into the result, so a chunk of one
large string never holds the chunk, the string and its copy in a StringDType array at once.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from cytepool._utf8 import SpacedUtf8Buffer, is_unicode, move_by_size, size_runs
from cytepool._utf8 import encode as encode_utf8
from cytepool.errors import FormatError, InputError

__all__ = [
    "ChunkLimit",
    "Decoder",
    "assemble",
    "decode",
    "encode",
    "invalid_unicode",
    "payload",
    "spaced",
]

_STRING = np.dtypes.StringDType()
_U32 = struct.Struct("<I")
_U32_MAX = 2**32 - 1
_OFFSETS = np.arange(4)
_BATCH_BYTES = 256 * 1024

_Decoded: TypeAlias = "bytes | bytearray | np.ndarray[Any, Any]"
"""Decoded bytes: a bytes object, a bytearray or a uint8 array (a thread's chunk buffer)."""


def _corrupt(where: str, problem: str) -> FormatError:
    return FormatError(f"corrupt chunk {where}: {problem}")


# ---------------------------------------------------------------------------------------------
# Encoding


@dataclass(frozen=True)
class ChunkLimit:
    """The most bytes the vlen-utf8 encoding of a chunk to be written may take, and the chunk
    as an error names it (``"c/0 of the Zarr array /data/names"``).

    Writers give MAX_CHUNK_BYTES, the largest chunk cytepool reads: a chunk written larger
    could not be read back. Since it is below 4 GiB, every item count and length field of a
    chunk written fits in its 32 bits.
    """

    nbytes: int
    where: str

    def check(self, size: int) -> None:
        """Raise InputError if an encoding of ``size`` bytes exceeds the limit."""
        if size > self.nbytes:
            msg = (
                f"the strings of chunk {self.where} would take {size} bytes encoded as vlen-utf8,"
                f" more than MAX_CHUNK_BYTES ({self.nbytes}), the largest chunk cytepool"
                " reads or writes; write them in smaller chunks (fewer rows along the first axis)"
            )
            raise InputError(msg)


def encode(values: np.ndarray[Any, Any], count: int | None = None) -> bytes:
    """The vlen-utf8 encoding of a 1-D array of str (UnicodeEncodeError for lone surrogates).

    ``count`` (at least the number of values) pads the chunk with empty strings.
    """
    return payload(values, count).tobytes()


def invalid_unicode(where: str, values: np.ndarray[Any, Any], first: Any) -> InputError:
    """The error for strings to write of which one holds a lone surrogate (the encoding raised
    UnicodeEncodeError): it names ``where``, the array, and the position in it of the first
    such string of ``values``, a block of the array's strings whose first is at ``first``
    (an index per axis; an int for 1-D)."""
    strings = values.ravel().tolist()
    flat = next(i for i, value in enumerate(strings) if not is_unicode(value))
    if values.ndim > 1:
        offsets = np.unravel_index(flat, values.shape)
        position: Any = tuple(int(a) + int(b) for a, b in zip(first, offsets, strict=True))
    elif values.ndim == 1:
        position = int(first[0] if isinstance(first, tuple) else first) + flat
    else:
        position = ()
    text = strings[flat]
    at = next(i for i, char in enumerate(text) if "\ud800" <= char <= "\udfff")
    msg = (
        f"cannot write the string array {where}: the string at index {position} holds a lone "
        f"surrogate ({text[at]!r} at character {at}); strings must be valid Unicode (no "
        "lone surrogates): fix or drop it, e.g. s.encode('utf-8', 'replace').decode()"
    )
    return InputError(msg)


def payload(
    values: np.ndarray[Any, Any], count: int | None = None, *, limit: ChunkLimit | None = None
) -> np.ndarray[Any, Any]:
    """:func:`encode` as a uint8 array (no copy into a bytes object).

    With ``limit``, an encoding larger than it is refused (InputError) before it is made.
    """
    lengths, raw, separated = _encode_items(values)
    return _assemble(lengths, raw, separated, count, limit)


def assemble(
    lengths: np.ndarray[Any, Any],
    body: np.ndarray[Any, Any],
    count: int | None = None,
    *,
    limit: ChunkLimit | None = None,
) -> np.ndarray[Any, Any]:
    """The vlen-utf8 encoding (uint8) of items given as byte lengths and their bytes joined.

    The bytes must be the items' UTF-8, which is not checked here. ``count`` (at least the
    number of items) pads the chunk with empty items. With ``limit``, an encoding larger than
    it is refused (InputError) before it is made.
    """
    return _assemble(np.asarray(lengths, dtype=np.int64), body, False, count, limit)


def _encode_items(
    values: np.ndarray[Any, Any],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], bool]:
    """The byte length of each item, their UTF-8 and whether NULs separate the items there
    (see :func:`cytepool._utf8.encode`)."""
    encoded = encode_utf8(values.tolist())
    return encoded.sizes, encoded.raw, encoded.separated


def _assemble(
    lengths: np.ndarray[Any, Any],
    raw: np.ndarray[Any, Any],
    separated: bool,
    count: int | None,
    limit: ChunkLimit | None,
) -> np.ndarray[Any, Any]:
    """Interleave the length fields with the items' bytes (``raw``: joined by NULs if
    ``separated``, else back to back), then pad with ``count - n`` empty items; refuse an
    encoding larger than ``limit`` (if given) before making it."""
    n = len(lengths)
    count = n if count is None else count
    if count < n:
        msg = f"a chunk of {count} items cannot hold {n} strings"
        raise InputError(msg)
    size = len(raw) - (n - 1 if separated and n else 0)
    end = 4 + 4 * n + size
    total = end + 4 * (count - n)
    if limit is not None:
        limit.check(total)
    if total > _U32_MAX:  # never for a chunk written: its limit is below 4 GiB
        _check_fields(lengths, count)
    out = np.empty(total, dtype=np.uint8)
    out[:4] = np.frombuffer(_U32.pack(count), dtype=np.uint8)
    out[end:] = 0  # the length fields of the padding
    if not n:
        return out
    first = int(lengths[0])
    if (lengths == first).all():  # one length: a 2-D block, no index arrays
        rows = out[4:end].reshape(n, 4 + first)
        rows[:, :4] = np.frombuffer(_U32.pack(first), dtype=np.uint8)
        if first and separated:
            rows[: n - 1, 4:] = raw[: (n - 1) * (first + 1)].reshape(n - 1, first + 1)[:, :first]
            rows[n - 1, 4:] = raw[len(raw) - first :]
        elif first:
            rows[:, 4:] = raw.reshape(n, first)
        return out
    fields = 4 + 4 * np.arange(n) + np.cumsum(lengths) - lengths
    keep = np.ones(end, dtype=bool)
    if separated:  # the separator before item i lands on the last byte of its length field
        keep[:8] = False
        later = fields[1:]
        keep[later] = keep[later + 1] = keep[later + 2] = False
    else:
        keep[:4] = False
        keep[_field_bytes(fields)] = False
    out[:end][keep] = raw
    out[_field_bytes(fields)] = lengths.astype("<u4").view(np.uint8)
    return out


def _check_fields(lengths: np.ndarray[Any, Any], count: int) -> None:
    """Refuse an item count or a byte length that its 32-bit field cannot hold."""
    longest = int(lengths.max()) if len(lengths) else 0
    if count > _U32_MAX or longest > _U32_MAX:
        msg = (
            f"vlen-utf8 stores item counts and lengths in 32 bits; {count} items, the longest"
            f" of {longest} bytes, do not fit: store fewer items (or shorter strings) per chunk"
        )
        raise InputError(msg)


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
    length are checked with numpy, and so are items of lengths that change from one to the
    next (gene symbols), where their length fields can be told from their bytes
    (:meth:`_leap`); other items are taken one by one.
    """

    _RUN = 16  # equal lengths in a row before trying a vectorised run
    _FLUSH = 4096  # lengths kept as Python integers (after a piece) before an array takes them

    def __init__(self, count: int, where: str):
        self.count, self.where = count, where
        self.data: _Decoded = bytearray()
        self.items, self.pos = 0, 4  # items whose length is known; the next length field
        self.parts: list[np.ndarray[Any, Any]] = []
        self.pending: list[int] = []

    def feed(self, piece: bytes | bytearray | memoryview) -> None:
        """Append decoded bytes and check them (FormatError as soon as something is wrong).

        A bytes or bytearray object fed first is taken over without a copy (and not changed).
        """
        had = len(self.data)
        if not had and isinstance(piece, bytes | bytearray):
            self.data = piece
        else:
            if not isinstance(self.data, bytearray):
                self.data = bytearray(self.data)
            self.data += piece
        self._check(had, len(self.data))

    def feed_whole(self, whole: _Decoded, piece: int) -> None:
        """Take over ``whole`` (not copied, not changed), the stream decoded in one step (bytes,
        or a uint8 array), and check it as :meth:`feed` would check it fed in pieces of
        ``piece`` bytes: the same results, the same errors at the same points. Feed nothing
        before it."""
        self.data = whole
        had = 0
        for end in range(min(piece, len(whole)), len(whole) + piece, piece):
            end = min(end, len(whole))
            self._check(had, end)
            if end == len(whole):
                break
            had = end

    def _check(self, had: int, end: int) -> None:
        """Check the stream's bytes up to ``end``, ``had`` of which were checked before."""
        if had < 4 <= end:
            found = _U32.unpack_from(self.data, 0)[0]
            if found != self.count:
                problem = f"the vlen-utf8 data holds {found} items, expected {self.count}"
                raise _corrupt(self.where, problem)
        if end >= 4:
            self._advance(end)
        if self.items == self.count and end > self.pos:
            problem = f"{end - self.pos} trailing bytes after the last vlen-utf8 item"
            raise _corrupt(self.where, problem)

    def _advance(self, end: int) -> None:
        data, unpack, append = self.data, _U32.unpack_from, self.pending.append
        count, items, pos = self.count, self.items, self.pos
        streak, previous = 0, -1
        pace = _Pace()
        wait = _Pace.WAIT  # items to take one by one before the next leap
        while items < count and pos + 4 <= end:
            if wait <= 0:
                self.items, self.pos = items, pos
                taken = self._leap(end, pace.window)
                wait = pace.leapt(taken, self.pos - pos)
                items, pos = self.items, self.pos
                if taken:
                    streak, previous = 0, -1
                    continue
            wait -= 1
            (length,) = unpack(data, pos)
            append(length)
            items += 1
            pos += 4 + length
            if length != previous:
                streak, previous = 0, length
                continue
            streak += 1
            if streak >= self._RUN:
                self.items, self.pos = items, pos
                self._run(length, end)
                items, pos, streak, wait = self.items, self.pos, 0, _Pace.WAIT
        self.items, self.pos = items, pos
        if len(self.pending) >= self._FLUSH:  # 8 bytes per length, not a Python int
            self._flush()

    def _run(self, length: int, end: int) -> None:
        """Skip the items that follow with the same length (up to ``end``), checked with
        numpy."""
        step = 4 + length
        fit = min(self.count - self.items, (end - self.pos - 4) // step + 1)
        if fit <= 0:
            return
        fields = np.ndarray((fit,), dtype="<u4", buffer=self.data, offset=self.pos, strides=(step,))
        same = fields == length
        del fields  # release the buffer, which grows with the next piece
        run = fit if same.all() else int(np.argmin(same))
        if run:
            self._flush()
            self.parts.append(np.full(run, length))
            self.items += run
            self.pos += run * step

    def _leap(self, end: int, window: int) -> int:
        """Take the items whose length fields a vectorised pass proves, in the next ``window``
        bytes (up to ``end``); return how many it took.

        A length field below 2**24 ends with a zero byte, and when no item holds a NUL, every
        run of zero bytes ends a length field: the ends of the runs give where the fields may
        start. The guesses are kept only as far as they chain from the next field, each
        field starting where the item before it ends (its length read from its own four
        bytes), so what is taken is exactly what reading the fields one by one would take;
        where a guess is wrong (a NUL in an item, a length of 256 bytes) the chain stops and
        the items after it are taken one by one.
        """
        pos, stop = self.pos, min(end, self.pos + window)
        region = np.frombuffer(self.data, dtype=np.uint8, count=stop - pos, offset=pos)
        zero = region == 0
        starts = np.flatnonzero(zero[:-1] > zero[1:]) - 3  # a run ending inside the region
        if not len(starts) or starts[0] != 0:
            del region  # release the buffer, which grows with the next piece
            return 0
        lengths = region.take(starts).astype(np.int64)  # the fourth byte is the run's last 0
        lengths += region.take(starts + 1).astype(np.int64) << 8
        lengths += region.take(starts + 2).astype(np.int64) << 16
        del region
        ends = starts + 4 + lengths
        chained = np.append(starts[1:] == ends[:-1], False)
        taken = min(int(np.argmin(chained)) + 1, self.count - self.items)
        self._flush()
        self.parts.append(lengths[:taken])
        self.items += taken
        self.pos += int(ends[taken - 1])
        return taken

    def _flush(self) -> None:
        self.parts.append(np.array(self.pending, dtype=np.int64))
        self.pending.clear()

    def finish(
        self, *, objects: bool = False, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        """Check that the stream is complete and return its strings.

        The strings go into ``out`` (a 1-D array of ``count`` elements, object or StringDType)
        if given, else into a new StringDType (or, with ``objects``, object) array. The decoder
        gives the decoded bytes up (to let them go as early as it can): call ``finish`` or
        ``buffers`` once, and feed nothing after it.
        """
        lengths = self.lengths()
        if out is None:
            out = np.empty(self.count, dtype=object if objects else _STRING)
        chunk = [self.data]  # given to _split, which lets it go before the last item goes in
        self.data = b""
        _split(chunk, lengths, self.where, out)
        return out

    def buffers(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Check that the stream is complete and return its items as Arrow-style buffers.

        Returns the byte length of each item (int64) and the items' UTF-8 joined (uint8),
        each item checked to be valid UTF-8 on its own; no Python strings are kept.
        """
        lengths = self.lengths()
        return lengths, _join(self.data, lengths, self.where)

    def spaced(self, start: int, stop: int) -> SpacedUtf8Buffer:
        """Check that the stream is complete and return items ``[start, stop)`` where they are,
        each after its length field: joined, and their UTF-8 checked, when first used (see
        :class:`~cytepool._utf8.SpacedUtf8Buffer`). The bytes are kept (copied if they are a
        decoding thread's reused buffer)."""
        lengths = self.lengths()
        first = 4 * start + int(lengths[:start].sum())  # 4 bytes before item start's field
        lengths = lengths[start:stop]
        end = first + 4 + 4 * len(lengths) + int(lengths.sum())
        data = self.data
        kept = (
            np.array(data[first:end])
            if isinstance(data, np.ndarray)
            else np.frombuffer(data, np.uint8, end - first, first)
        )
        return SpacedUtf8Buffer(kept[4:], len(lengths), lengths, _Joining(kept, self.where))

    def lengths(self) -> np.ndarray[Any, Any]:
        """Check that the stream is complete and return the byte length of each item."""
        size = len(self.data)
        if size < 4:
            raise _corrupt(self.where, f"the vlen-utf8 data is truncated: {size} bytes")
        lengths = np.concatenate([*self.parts, np.array(self.pending, dtype=np.int64)])
        self.parts, self.pending = [lengths], []  # one array, not two copies
        if self.pos > size:
            i, length = self.items - 1, int(lengths[-1])
            remain = size - (self.pos - length)
            problem = f"vlen-utf8 item {i} claims {length} bytes, only {remain} remain"
            raise _corrupt(self.where, problem)
        if self.items < self.count:
            problem = f"the vlen-utf8 data is truncated in the length of item {self.items}"
            raise _corrupt(self.where, problem)
        return lengths


def spaced(data: bytes | bytearray, count: int, where: str) -> SpacedUtf8Buffer:
    """The ``count`` items of the decoded chunk ``data`` (not copied), each left after its
    length field and not parsed: the layout is checked (count, every length, trailing bytes,
    as a :class:`Decoder` checks it) when their lengths are first needed, and their UTF-8
    when they are joined. For a chunk of known, bounded size (decoded whole) whose items
    are first hashed as stored (a cube file's column digest)."""
    found = _U32.unpack_from(data, 0)[0] if len(data) >= 4 else None
    if found != count:  # the one field a digest of the items does not cover: checked now
        problem = f"the vlen-utf8 data holds {found} items, expected {count}"
        raise _corrupt(where, problem if found is not None else "the vlen-utf8 data is truncated")
    kept = np.frombuffer(data, dtype=np.uint8)
    return SpacedUtf8Buffer(kept[4:], count, _Parsing(data, count, where), _Joining(kept, where))


@dataclass(frozen=True)
class _Parsing:
    """Parses a kept chunk's lengths when called (:func:`spaced`): a function that pickles."""

    data: bytes | bytearray
    count: int
    where: str

    def __call__(self) -> np.ndarray[Any, Any]:
        decoder = Decoder(self.count, self.where)
        decoder.feed(self.data)
        return decoder.lengths()


@dataclass(frozen=True)
class _Joining:
    """Joins kept items (:meth:`Decoder.spaced`) when called: a function that pickles."""

    data: np.ndarray[Any, Any]  # 4 bytes (not read), then each item after its length field
    where: str

    def __call__(self, lengths: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return _join(self.data, lengths, self.where)


class _Pace:
    """When a vlen-utf8 decoder leaps (:meth:`Decoder._leap`), and how far it looks.

    A leap looks at a window of bytes: 4 KiB first, then four times what the last leap took
    (4 to 64 KiB). After a leap, 32 items are taken one by one (past what stopped it); after
    one that took fewer than 64 items, where leaping costs more than it saves, 256, twice as
    many after each such leap in a row (up to 8,192). So a leap looks at no more than 4 KiB,
    or four times the bytes the last one took, and follows 32 items at least: linear in the
    stream whatever the items (a NUL in every other item, say) make of the guesses, and never
    much slower than taking every item one by one.
    """

    FIRST, MOST = 4 * 1024, 64 * 1024  # bytes a leap looks at
    FEWEST = 64  # items a leap takes for it to be worth the next one soon
    WAIT, PATIENCE, LONGEST = 32, 256, 8192  # items taken one by one between leaps

    def __init__(self) -> None:
        self.window, self.patience = self.FIRST, self.PATIENCE

    def leapt(self, taken: int, moved: int) -> int:
        """Note a leap that took ``taken`` items of ``moved`` bytes; the items to take one by
        one before the next."""
        self.window = min(max(4 * moved, self.FIRST), self.MOST)
        if taken >= self.FEWEST:
            self.patience = self.PATIENCE
            return self.WAIT
        wait, self.patience = self.patience, min(2 * self.patience, self.LONGEST)
        return wait


def _batches(
    data: _Decoded, lengths: np.ndarray[Any, Any]
) -> Generator[tuple[int, int, np.ndarray[Any, Any], np.ndarray[Any, Any]], None, None]:
    """Items ``a:b`` of at most _BATCH_BYTES together (or one larger item alone).

    Yields ``a``, ``b``, the bytes of those items with their length fields (a view of
    ``data``) and where each item's length field starts in them.
    """
    buffer = np.frombuffer(data, dtype=np.uint8)
    ends = lengths + 4
    np.cumsum(ends, out=ends)  # where each item ends, after the item count
    n, a = len(lengths), 0
    while a < n:
        base = int(ends[a - 1]) if a else 0
        b = max(a + 1, int(np.searchsorted(ends, base + _BATCH_BYTES, side="right")))
        fields = np.concatenate([[0], ends[a : b - 1] - base])
        yield a, b, buffer[4 + base : 4 + int(ends[b - 1])], fields
        a = b


def _compact(
    span: np.ndarray[Any, Any],
    fields: np.ndarray[Any, Any],
    lengths: np.ndarray[Any, Any],
    separator: int | None,
    out: np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    """The items of a span back to back (in ``out``, of their size, if given: else a new uint8
    array), each after ``separator`` if one is given (where the last byte of its length field
    was; ``span`` is not changed).

    Items in runs of one length (fixed-width ids, ids numbered in order) are copied a run at a
    time, each item (with the byte before it, where a separator goes) as one numpy void
    element of a strided view of ``span``, which numpy copies far faster than the rows of a
    narrow 2-D block; items of lengths that change often are moved a length at a time
    (:func:`~cytepool._utf8.move_by_size`), or, of many lengths, picked with a mask."""
    n = len(lengths)
    keep = 0 if separator is None else 1
    runs = size_runs(lengths)
    if out is None:
        out = np.empty(int(lengths.sum()) + keep * n, dtype=np.uint8)
    if runs is not None:
        at = 0
        for start, stop in runs:
            width, count = int(lengths[start]) + keep, stop - start
            if width:
                items = np.ndarray(
                    (count,),
                    dtype=f"V{width}",
                    buffer=span,
                    offset=int(fields[start]) + 4 - keep,
                    strides=(4 + width - keep,),
                )
                out[at : at + count * width].view(f"V{width}")[:] = items
            at += count * width
        if separator is not None:
            out[np.cumsum(lengths + 1) - lengths - 1] = separator
        return out
    places = np.cumsum(lengths + keep) - lengths  # of each item's bytes in ``out``
    if move_by_size(span, fields + 4, lengths, out, places):
        if separator is not None:
            out[places - 1] = separator
        return out
    mask = np.ones(len(span), dtype=bool)
    for byte in range(4 - keep):  # cheaper than one index of every field's bytes
        mask[fields + byte] = False
    np.compress(mask, span, out=out)
    if separator is not None:  # each kept byte moved back by the 3 dropped before it
        out[fields - 3 * np.arange(n)] = separator
    return out


def _split(
    chunk: list[_Decoded],
    lengths: np.ndarray[Any, Any],
    where: str,
    out: np.ndarray[Any, Any],
) -> None:
    """Decode the items of ``chunk[0]`` into ``out``, a batch at a time.

    A batch of several items is joined with one separator byte, an ASCII byte that none of
    them holds, decoded once and split in C; since a character cut by an item boundary gets a
    separator in the middle, decoding also checks that each item is valid UTF-8 on its own.
    A last item alone in its batch (a large one) is decoded, then the chunk is let go (taken
    out of ``chunk``) before the string is stored, so a chunk of one large string is never held
    with both the string and its copy in a StringDType ``out``.
    """
    batches = _batches(chunk[0], lengths)
    for a, b, span, fields in batches:
        if b - a == 1:
            text = _utf8(span[4:].data, where)
            if b == len(lengths):
                del span
                batches.close()
                chunk.clear()
            out[a] = text
            continue
        joined = _compact(span, fields, lengths[a:b], 0)
        if len(joined) - np.count_nonzero(joined) == b - a:  # no item holds a NUL
            out[a:b] = _utf8(joined.data, where).split("\0")[1:]
        else:
            out[a:b] = _split_on_unused(joined, lengths[a:b], where)
        del joined


def _split_on_unused(
    joined: np.ndarray[Any, Any], lengths: np.ndarray[Any, Any], where: str
) -> list[str]:
    separators = np.arange(len(lengths)) + np.cumsum(lengths) - lengths
    for separator in range(1, 128):  # the first ASCII byte no item holds (separators are 0)
        if not (joined == separator).any():
            joined[separators] = separator
            return _utf8(joined.data, where).split(chr(separator))[1:]
    # the items use every ASCII byte: decode them one by one (a batch is small)
    raw = joined.tobytes()
    starts = (separators + 1).tolist()
    return [_utf8(raw[a : a + k], where) for a, k in zip(starts, lengths.tolist(), strict=True)]


def _join(data: _Decoded, lengths: np.ndarray[Any, Any], where: str) -> np.ndarray[Any, Any]:
    """The items' bytes back to back (uint8), each checked to be valid UTF-8 on its own."""
    body = np.empty(int(lengths.sum()), dtype=np.uint8)
    position = 0
    for a, b, span, fields in _batches(data, lengths):
        size = int(lengths[a:b].sum())
        part = _compact(span, fields, lengths[a:b], None, body[position : position + size])
        position += size
        if size and part.max() >= 0x80:  # not ASCII: decode with a NUL between the items
            _utf8(_compact(span, fields, lengths[a:b], 0).data, where)
    return body


def _utf8(raw: bytes | memoryview, where: str) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as error:
        raise _corrupt(where, f"a vlen-utf8 item is not valid UTF-8: {error}") from error
