"""Unique ids kept as the UTF-8 buffer they were read as, found without a ``str`` per id.

A cube file's id columns are read as a :class:`~cytepool._utf8.Utf8Buffer`. :class:`BufferIds`
keeps that buffer, checks that no id repeats and finds the positions of given ids with a 64-bit
hash of each id's bytes, computed with numpy over the whole buffer: the hashes' upper halves are
sorted once, a lookup is a binary search, and every match is confirmed by comparing the bytes.
No Python string is made per stored id; the ids become a list of ``str`` only when something
asks for them.

Examples
--------
>>> import numpy as np
>>> from cytepool._utf8 import Utf8Buffer, windows
>>> ids = BufferIds(Utf8Buffer.from_str(["CD4", "CD8A", "", "MS4A1"]))
>>> ids.find(["MS4A1", "CD4", "nope", ""]).tolist()
[3, 0, -1, 2]
>>> ids.repeated(), BufferIds(Utf8Buffer.from_str(["a", "b", "a"])).repeated()
([], ['a'])
>>> ids.take(np.array([3, 1])).to_list()
['MS4A1', 'CD8A']
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from cytepool._utf8 import Utf8Buffer, windows

__all__ = ["BufferIds"]

_MULTIPLIER = np.uint64(0x100000001B3)  # FNV-1's 64-bit prime: the base of a polynomial hash
_SIZE_MIX = np.uint64(0x9E3779B97F4A7C15)  # the size is mixed in, so "" and "\0" differ
_MOST_LENGTHS = 32  # beyond as many distinct lengths, the ids are hashed byte by byte
_AVALANCHE = (np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53))
_AVALANCHE_SHIFT = np.uint64(33)
_UPPER = 1 if sys.byteorder == "little" else 0  # where a hash's upper half lies, as uint32
_INT32_ROWS = np.iinfo(np.int32).max  # up to as many ids, the index keeps rows as int32
_COUNTED_LENGTHS = 1 << 16  # ids no longer than this find their distinct lengths by counting


def _hashes(buffer: Utf8Buffer) -> np.ndarray[Any, Any]:
    """A 64-bit hash of each item's bytes, mixed with its length (wrapping arithmetic).

    An item's bytes, padded with zeros to a multiple of 8, are read as little-endian uint64
    words, and the words are the digits of a polynomial in ``_MULTIPLIER`` (Horner's rule).
    Items of one length are read where they lie (:func:`_even_hashes`), without their sizes
    when the buffer knows they share one (ids kept as a vlen-utf8 chunk holds them). Items of
    a few lengths are gathered, each length at once, into rows of a structured array (a row
    copied as one piece, which numpy does far faster than a narrow 2-D copy); ids usually
    have few distinct lengths.
    """
    size = buffer.uniform_size()  # known without the sizes: items kept as stored
    if size:
        return _even_hashes(buffer, size)
    sizes = buffer.sizes()
    if not len(sizes):
        return np.zeros(0, dtype=np.uint64)
    shortest, longest = int(sizes.min()), int(sizes.max())
    if shortest == longest:
        lengths = np.array([shortest])
    elif longest <= _COUNTED_LENGTHS:  # counted in one pass, cheaper than np.unique's sort
        lengths = np.flatnonzero(np.bincount(sizes, minlength=longest + 1))
    else:
        lengths = np.unique(sizes)
    if len(lengths) > _MOST_LENGTHS:  # many lengths: one pass over the bytes instead
        return _hashes_by_byte(buffer, sizes)
    if len(lengths) == 1 and shortest:  # one length: the items are evenly spaced
        return _even_hashes(buffer, shortest)
    out = np.zeros(len(sizes), dtype=np.uint64)
    data, starts, _ = buffer.located()  # where the bytes are, joined or not
    data = np.ascontiguousarray(data)
    for length in lengths.tolist():
        if length:
            rows = np.flatnonzero(sizes == length)  # their items start at some of the windows
            out[rows] = _word_hashes(windows(data, f"V{length}")[starts[rows]])
    return _finished(out, sizes)


def _even_hashes(buffer: Utf8Buffer, length: int) -> np.ndarray[Any, Any]:
    """:func:`_hashes` of items all ``length`` (> 0) bytes long, evenly spaced where they are
    (back to back, or each after its length field).

    Items of a word or more are read in place as unaligned uint64 words, a strided view per
    word and no copy of the bytes: the last, partial word is the word that ends where the item
    ends, shifted right past the bytes the word before it covered (its zero padding).
    """
    data, (first,), gap = buffer.located(slice(0, 1))
    n, step = len(buffer), length + gap
    if length < 8:  # less than a word: copied into zero-padded words
        return _finished(_word_hashes(np.ndarray(n, f"V{length}", data, first, (step,))), length)
    full, rest = divmod(length, 8)

    def word(start: int) -> np.ndarray[Any, Any]:
        return np.ndarray(n, "<u8", data, first + start, (step,))

    out = word(0).astype(np.uint64)
    scratch = np.empty_like(out)
    for k in range(1, full):  # wraps modulo 2**64, as meant
        out *= _MULTIPLIER
        out += word(8 * k)
    if rest:
        out *= _MULTIPLIER
        out += np.right_shift(word(length - 8), np.uint64(8 * (8 - rest)), out=scratch)
    return _finished(out, length, scratch)


def _word_hashes(items: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The word polynomial of each item of ``items`` (numpy void elements, of one size > 0)."""
    length = items.dtype.itemsize
    words = (length + 7) // 8
    padded = np.dtype({"names": ["v"], "formats": [f"V{length}"], "itemsize": 8 * words})
    rows = np.zeros(len(items), dtype=padded)
    rows["v"] = items
    matrix = rows.view("<u8").reshape(-1, words)
    out = matrix[:, 0].copy()
    for k in range(1, words):  # wraps modulo 2**64, as meant
        out *= _MULTIPLIER
        out += matrix[:, k]
    return out


def _finished(
    out: np.ndarray[Any, Any],
    sizes: np.ndarray[Any, Any] | int,
    shifted: np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    """The polynomials ``out`` (changed in place) mixed with the sizes (an array, or one size
    for all), then avalanched (MurmurHash3's 64-bit finalizer), so that every bit of an item
    moves the upper half, the part the index sorts by. ``shifted``: scratch of ``out``'s shape
    and type, if the caller has one."""
    if isinstance(sizes, int):  # one size: a scalar, wrapped as the array product would be
        out ^= np.uint64(sizes * int(_SIZE_MIX) % 2**64)
    else:
        out ^= sizes.astype(np.uint64) * _SIZE_MIX
    shifted = np.empty_like(out) if shifted is None else shifted
    for multiplier in _AVALANCHE:
        out ^= np.right_shift(out, _AVALANCHE_SHIFT, out=shifted)
        out *= multiplier
    out ^= np.right_shift(out, _AVALANCHE_SHIFT, out=shifted)
    return out


def _powers(n: int) -> np.ndarray[Any, Any]:
    """``_MULTIPLIER ** k`` for k in ``range(n)``, modulo 2**64."""
    powers = np.full(max(n, 1), _MULTIPLIER, dtype=np.uint64)
    powers[0] = 1
    return np.cumprod(powers)[:n]  # wraps modulo 2**64, as meant


def _hashes_by_byte(buffer: Utf8Buffer, sizes: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """:func:`_hashes` of items of many lengths, in one pass over the bytes: each byte shifted
    to its place in its word and weighted by its word's place from the item's end, summed per
    item."""
    first = int(buffer.offsets[0])
    data = buffer.data[first : int(buffer.offsets[-1])]
    starts = buffer.offsets[:-1].astype(np.intp) - first
    place = np.arange(len(data), dtype=np.intp) - np.repeat(starts, sizes)  # in its item
    last_word = np.repeat((sizes.astype(np.intp) + 7) // 8 - 1, sizes)
    shifted = data.astype(np.uint64) << (8 * (place % 8)).astype(np.uint64)
    weights = _powers(int(last_word.max(initial=0)) + 1)[last_word - place // 8]
    terms = np.append(shifted * weights, np.uint64(0))
    out = np.add.reduceat(terms, np.minimum(starts, len(data)))
    out[sizes == 0] = 0  # reduceat gives the next item's first term for an empty one
    return _finished(out, sizes)


def _keys(buffer: Utf8Buffer) -> np.ndarray[Any, Any]:
    """The upper 32 bits of each item's hash (uint32): the key the ids are sorted and found by
    (a key shared by different ids is told apart by their bytes)."""
    return _hashes(buffer).view(np.uint32)[_UPPER::2]  # a view: no copy


def _equal(a: Utf8Buffer, b: Utf8Buffer) -> np.ndarray[Any, Any]:
    """Whether each item of ``a`` has the bytes of the same item of ``b`` (as many items)."""
    sizes = a.sizes()
    same = sizes == b.sizes()
    rows = np.flatnonzero(same)
    left, right = a.take(rows), b.take(rows)  # the same sizes: their bytes line up
    differ = np.append(left.data != right.data, False)
    starts = np.minimum(left.offsets[:-1], len(left.data)).astype(np.intp)
    counts = np.add.reduceat(differ.astype(np.int64), starts) if len(rows) else differ[:0]
    counts[sizes[rows] == 0] = 0
    same[rows] = counts == 0
    return same


def _same_items(
    a: Utf8Buffer, rows_a: np.ndarray[Any, Any], b: Utf8Buffer, rows_b: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Whether item ``rows_a[i]`` of ``a`` has the bytes of item ``rows_b[i]`` of ``b``; ids
    of one length (``a.uniform_size()``) compared as one element each, without gathering."""
    size = a.uniform_size()
    if not size:
        return _equal(a.take(rows_a), b.take(rows_b))
    same = b.sizes_at(rows_b) == size
    kept = np.flatnonzero(same)
    (data_a, starts_a, _), (data_b, starts_b, _) = a.located(rows_a[kept]), b.located(rows_b[kept])
    kind = f"V{size}"
    items_a = windows(np.ascontiguousarray(data_a), kind)[starts_a]
    same[kept] = items_a == windows(np.ascontiguousarray(data_b), kind)[starts_b]
    return same


def _sorted_keys(keys: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``keys`` (uint32) in increasing order, and the row of each (int32; rows of one key in
    increasing order): see :meth:`BufferIds._index`."""
    if len(keys) > _INT32_ROWS:  # rows past int32 (never met: 2**31 ids): a stable argsort
        order = np.argsort(keys, kind="stable")
        return keys[order], order
    packed = np.empty(len(keys), dtype=np.uint64)
    halves = packed.view(np.uint32)  # each entry's upper half: its key; lower half: its row
    halves[_UPPER::2] = keys
    halves[1 - _UPPER :: 2] = np.arange(len(keys), dtype=np.uint32)
    packed.sort()
    rows = halves[1 - _UPPER :: 2].astype(np.int32)  # below 2**31
    return halves[_UPPER::2].copy(), rows


class BufferIds:
    """Ids as a UTF-8 buffer, with a sorted hash index made when first needed."""

    def __init__(self, buffer: Utf8Buffer):
        self.buffer = buffer
        self._sorted: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None

    def __len__(self) -> int:
        return len(self.buffer)

    def to_list(self) -> list[str]:
        """The ids as ``str``."""
        return self.buffer.to_str()

    def take(self, rows: np.ndarray[Any, Any]) -> BufferIds:
        """The ids at ``rows`` (positions), in that order."""
        return BufferIds(self.buffer.take(np.asarray(rows, dtype=np.intp)))

    def _index(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The keys (:func:`_keys`) in increasing order and the row of each (rows of one key
        in increasing order).

        Each key and its row are packed into one 64-bit integer, key above, and the packed
        integers sorted: numpy sorts 64-bit integers with SIMD (x86-simd-sort, Highway), so
        one sort of 30,000 ids takes 0.25 ms, where a stable argsort of the keys, or two
        radix passes of 16 bits and their gathers, take 0.5 to 1.8 ms.
        """
        if self._sorted is None:
            self._sorted = _sorted_keys(_keys(self.buffer))
        return self._sorted

    def repeated(self) -> list[str]:
        """The ids held more than once, sorted (empty when every id is unique)."""
        index, order = self._index()
        same = np.flatnonzero(index[1:] == index[:-1])
        if not len(same):
            return []
        rows = np.unique(np.concatenate([order[same], order[same + 1]]))
        seen: dict[bytes, int] = {}
        for row in rows.tolist():  # only the rows whose key another shares: confirmed by bytes
            item = self.buffer.item(row)
            seen[item] = seen.get(item, 0) + 1
        return sorted(item.decode("utf-8") for item, count in seen.items() if count > 1)

    def find(self, ids: Sequence[str]) -> np.ndarray[Any, Any]:
        """The position of each of ``ids`` (``str``), -1 for one not held.

        Raises UnicodeEncodeError for a ``str`` holding a lone surrogate (held by no id).
        """
        wanted = Utf8Buffer.from_str(list(ids))
        index, order = self._index()
        keys = _keys(wanted)
        first = np.searchsorted(index, keys, side="left")
        last = np.searchsorted(index, keys, side="right")
        out = np.full(len(keys), -1, dtype=np.intp)
        hit = np.flatnonzero(last > first)
        candidates = order[first[hit]]
        same = _same_items(self.buffer, candidates, wanted, hit)
        out[hit[same]] = candidates[same]
        for i in hit[~same & (last[hit] - first[hit] > 1)].tolist():  # a shared key: rare
            item, shared = wanted.item(i), order[first[i] : last[i]].tolist()
            rows = [row for row in shared if self.buffer.item(row) == item]
            out[i] = rows[0] if rows else -1
        return out

    def __getstate__(self) -> dict[str, Any]:
        """The buffer only: the index is made again when needed."""
        return {"buffer": self.buffer, "_sorted": None}
