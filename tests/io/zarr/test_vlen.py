"""The vlen-utf8 encoder and decoder (cytepool.io.zarr._vlen) against a plain reference.

The chunk layout itself, malformed chunks and streaming are tested with the codec in
test_codecs.py; these tests cover the numpy fast paths (one length, NUL separators, the NUL
and all-ASCII fallbacks), padding, and the Arrow-style buffers of ``Decoder.buffers``.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cytepool.errors import FormatError, InputError
from cytepool.io.zarr import _vlen

STRING = np.dtypes.StringDType()

CASES = [
    [],
    [""],
    ["", "", ""],
    ["a"],
    ["abc", "def", "ghi"],  # one length
    ["abc", "def", "gh"],
    ["é€😀", "x", "", "日本語"],
    ["trailing\x00", "\x00", "x\x00y", ""],  # NULs: lengths from the characters
    ["\x00\x00", "\x00\x00"],  # NULs, one length
    ["x" * 100_000, *["y"] * 50],
    [f"cell-{i:08d}" for i in range(1000)],
    [str(i) for i in range(1000)],
    ["".join(map(chr, range(128))), "é", "", "\x7f"],  # no unused ASCII separator
    ["".join(map(chr, range(128)))] * 3,
]


def reference(values: list[str], count: int | None = None) -> bytes:
    """The vlen-utf8 chunk, one item at a time."""
    parts = [(len(values) if count is None else count).to_bytes(4, "little")]
    for value in values:
        item = value.encode()
        parts += [len(item).to_bytes(4, "little"), item]
    parts += [bytes(4)] * ((count or len(values)) - len(values))
    return b"".join(parts)


def decode_buffers(data: bytes, count: int, piece: int | None = None) -> tuple[list[int], bytes]:
    decoder = _vlen.Decoder(count, "c/0")
    step = piece or max(1, len(data))
    for i in range(0, len(data), step):
        decoder.feed(data[i : i + step])
    lengths, body = decoder.buffers()
    assert lengths.dtype == np.int64
    assert body.dtype == np.uint8
    return lengths.tolist(), body.tobytes()


@pytest.mark.parametrize("values", CASES, ids=range(len(CASES)))
@pytest.mark.parametrize("dtype", [object, STRING])
def test_encode_matches_the_reference(values: list[str], dtype: object) -> None:
    array = np.array(values, dtype=dtype)
    assert _vlen.encode(array) == reference(values)
    assert _vlen.encode(array, len(values) + 3) == reference(values, len(values) + 3)
    assert _vlen.payload(array).tobytes() == reference(values)


def test_encode_refuses_a_count_below_the_items() -> None:
    with pytest.raises(ValueError, match="a chunk of 1 items cannot hold 2 strings"):
        _vlen.encode(np.array(["a", "b"], dtype=object), 1)


@pytest.mark.parametrize("values", CASES, ids=range(len(CASES)))
def test_assemble_from_lengths_and_bytes(values: list[str]) -> None:
    items = [value.encode() for value in values]
    lengths = np.array([len(item) for item in items], dtype=np.int64)
    body = np.frombuffer(b"".join(items), dtype=np.uint8)
    assert _vlen.assemble(lengths, body).tobytes() == reference(values)
    assert _vlen.assemble(lengths, body, len(values) + 2).tobytes() == reference(
        values, len(values) + 2
    )


@pytest.mark.parametrize("values", [["abc", "", "é"], ["x\0y", "é€", "z"], ["ab", "cd"]])
@pytest.mark.parametrize("padding", [0, 2])
def test_a_limit_is_met_exactly_and_refuses_one_byte_more(values: list[str], padding: int) -> None:
    items = [value.encode() for value in values]
    lengths = np.array([len(item) for item in items], dtype=np.int64)
    body = np.frombuffer(b"".join(items), dtype=np.uint8)
    count = len(values) + padding
    expected = reference(values, count)
    at = _vlen.ChunkLimit(len(expected), "c/3 of the Zarr array /data/s")
    assert _vlen.assemble(lengths, body, count, limit=at).tobytes() == expected
    array = np.array(values, dtype=object)
    assert _vlen.payload(array, count, limit=at).tobytes() == expected
    below = _vlen.ChunkLimit(len(expected) - 1, "c/3 of the Zarr array /data/s")
    problem = (
        f"the strings of chunk c/3 of the Zarr array /data/s would take {len(expected)} bytes"
        f" encoded as vlen-utf8, more than MAX_CHUNK_BYTES \\({len(expected) - 1}\\)"
    )
    with pytest.raises(InputError, match=problem):
        _vlen.assemble(lengths, body, count, limit=below)
    with pytest.raises(InputError, match=problem):
        _vlen.payload(array, count, limit=below)


def test_a_chunk_beyond_its_limit_is_refused_before_it_is_made() -> None:
    limit = _vlen.ChunkLimit(100, "c/0 of the Zarr array /data/s")
    lengths, body = np.array([1], dtype=np.int64), np.frombuffer(b"a", dtype=np.uint8)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="would take 4000005 bytes"):
            _vlen.assemble(lengths, body, 10**6, limit=limit)  # 4 MB of padding
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20


@pytest.mark.parametrize(
    ("values", "count", "found"),
    [(["a" * 20], 1, "1 items, the longest of 20 bytes"), ([""], 16, "16 items")],
)
def test_length_fields_never_wrap_past_32_bits(
    monkeypatch: pytest.MonkeyPatch, values: list[str], count: int, found: str
) -> None:
    monkeypatch.setattr(_vlen, "_U32_MAX", 15)  # as if the chunk took 4 GiB or more
    array = np.array(values, dtype=object)
    with pytest.raises(InputError, match=f"32 bits; {found}"):
        _vlen.payload(array, count)
    lengths = np.array([len(v) for v in values], dtype=np.int64)
    with pytest.raises(InputError, match=f"32 bits; {found}"):
        _vlen.assemble(lengths, np.frombuffer("".join(values).encode(), np.uint8), count)
    monkeypatch.setattr(_vlen, "_U32_MAX", 2**32 - 1)
    assert _vlen.payload(array, count).tobytes() == reference(values, count)


@pytest.mark.parametrize("values", CASES, ids=range(len(CASES)))
@pytest.mark.parametrize("piece", [None, 1, 5, 1000])
def test_decode_into_strings_and_buffers(values: list[str], piece: int | None) -> None:
    data = reference(values)
    for objects in (True, False):
        decoder = _vlen.Decoder(len(values), "c/0")
        step = piece or max(1, len(data))
        for i in range(0, len(data), step):
            decoder.feed(data[i : i + step])
        result = decoder.finish(objects=objects)
        assert result.dtype == (object if objects else STRING)
        assert result.tolist() == values
    items = [value.encode() for value in values]
    assert decode_buffers(data, len(values), piece) == ([len(i) for i in items], b"".join(items))


@pytest.mark.parametrize("values", CASES, ids=range(len(CASES)))
@pytest.mark.parametrize("parsed", [True, False])  # by a Decoder; or kept and parsed when used
def test_items_kept_spaced_are_the_decoded_ones(values: list[str], parsed: bool) -> None:
    data = reference(values)
    n, items = len(values), [value.encode() for value in values]
    if parsed:  # from a thread's reused buffer: copied, so that reusing it changes nothing
        reused = np.frombuffer(bytearray(data), dtype=np.uint8)
        decoder = _vlen.Decoder(n, "c/0")
        decoder.feed_whole(reused, 5)
        kept = decoder.spaced(1, n) if n else decoder.spaced(0, 0)
        reused[:] = 0xFF
        items = items[1:]
    else:
        kept = _vlen.spaced(bytearray(data), n, "c/0")
    prefixed = kept.prefixed()
    assert prefixed is not None
    assert prefixed.tobytes() == b"".join(len(i).to_bytes(4, "little") + i for i in items)
    assert kept.to_list() == items
    assert kept.prefixed() is None  # joined once used


def test_items_kept_spaced_check_their_count_now_and_the_rest_when_used() -> None:
    data = reference(["ab", "cd"])
    with pytest.raises(FormatError, match="c/0: the vlen-utf8 data holds 2 items, expected 3"):
        _vlen.spaced(data, 3, "c/0")
    with pytest.raises(FormatError, match="c/0: the vlen-utf8 data is truncated"):
        _vlen.spaced(data[:3], 2, "c/0")
    kept = _vlen.spaced(data + b"x", 2, "c/0")  # a trailing byte: found by the parse
    with pytest.raises(FormatError, match="c/0: 1 trailing bytes after the last vlen-utf8 item"):
        kept.to_list()


@settings(max_examples=150, deadline=None)
@given(
    size=st.integers(0, 9),
    n=st.integers(1, 12),
    edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4),
    cut=st.integers(-3, 3),
)
def test_a_one_size_layout_is_only_found_where_a_parse_finds_it(
    size: int, n: int, edits: list[tuple[int, int]], cut: int
) -> None:
    """Whatever the bytes (items of one size, then bytes changed, cut or added), the items are
    taken to have one size only where the parser reads that same layout."""
    body = bytearray((size.to_bytes(4, "little") + b"x" * size) * n)
    for place, value in edits:
        body[place % len(body)] = value
    body = body[: len(body) + cut] if cut < 0 else body + b"y" * cut
    kept = _vlen.spaced(bytearray(n.to_bytes(4, "little") + body), n, "c/0")
    found = kept.uniform_size()
    decoder = _vlen.Decoder(n, "c/0")
    try:
        decoder.feed(bytes(n.to_bytes(4, "little") + body))
        lengths = decoder.lengths().tolist()
    except FormatError:
        lengths = None
    assert found is None or lengths == [found] * n


@pytest.mark.parametrize(
    ("chunk", "problem"),
    [
        # the first field gives a size the rest do not share: parsed, and the parse finds it
        (b"\x02\0\0\0" + b"\x01\0\0\0a" + b"\x03\0\0\0bc", "claims 3 bytes, only 2 remain"),
        (b"\x02\0\0\0" + b"\x01\0\0\0a" + b"\x01\0\0\0bx", "1 trailing bytes"),
        (b"\x02\0\0\0" + b"\x01\0\0\0a" + b"\x01\0\0\0", "claims 1 bytes, only 0 remain"),
        # as many bytes as two items of one byte, but the second field says 0
        (b"\x02\0\0\0" + b"\x01\0\0\0a" + b"\x00\0\0\0x", "1 trailing bytes"),
    ],
)
def test_items_that_only_seem_of_one_size_are_parsed(chunk: bytes, problem: str) -> None:
    kept = _vlen.spaced(bytearray(chunk), 2, "c/0")
    assert kept.uniform_size() is None
    with pytest.raises(FormatError, match=f"c/0: .*{problem}"):
        kept.located(np.array([1]))


@pytest.mark.parametrize(
    "items",
    [
        [b"\xc3", b"\xa9"],  # together "é", apart invalid
        [b"ab", b"\xc3", b"\xa9c"],
        [b"\xff"],
        [b"\xed\xa0\x80"],  # a surrogate
        [b"ok", b"x\xe2\x82"],  # cut at the end
        [b"\xe2\x82", b"\xac\xe2"],  # one length
    ],
)
def test_buffers_check_each_item_is_utf8(items: list[bytes]) -> None:
    parts = [len(items).to_bytes(4, "little")]
    for item in items:
        parts += [len(item).to_bytes(4, "little"), item]
    decoder = _vlen.Decoder(len(items), "/s/c/0")
    decoder.feed(b"".join(parts))
    with pytest.raises(FormatError, match=r"/s/c/0: a vlen-utf8 item is not valid UTF-8"):
        decoder.buffers()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\x02\0\0", "truncated: 3 bytes"),
        (reference([])[:0] + (1).to_bytes(4, "little"), "truncated in the length of item 0"),
        (reference(["a"])[:-1], "item 0 claims 1 bytes, only 0 remain"),
    ],
)
def test_buffers_check_completeness(data: bytes, problem: str) -> None:
    decoder = _vlen.Decoder(1, "c/0")
    decoder.feed(data)
    with pytest.raises(FormatError, match=problem):
        decoder.buffers()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.text(st.characters(exclude_categories=("Cs",)), max_size=12), max_size=60),
    st.integers(0, 4),
    st.integers(1, 40),
)
def test_round_trips(values: list[str], padding: int, piece: int) -> None:
    count = len(values) + padding
    data = _vlen.encode(np.array(values, dtype=object), count)
    assert data == reference(values, count)
    expected = [*values, *[""] * padding]
    decoder = _vlen.Decoder(count, "c/0")
    for i in range(0, len(data), piece):
        decoder.feed(data[i : i + piece])
    assert decoder.finish(objects=True).tolist() == expected
    lengths, body = decode_buffers(data, count, piece)
    assert lengths == [len(v.encode()) for v in expected]
    assert body == "".join(values).encode()


def _runs_case(kind: str, n: int, rng: np.random.Generator) -> list[str]:
    """Items whose lengths come in long runs (copied run by run) or change often (a mask)."""
    lengths = rng.integers(0, 4, n)
    if kind == "runs":
        lengths.sort()
    letters = ["a", "é", "\x00", "😀"]
    return ["".join(rng.choice(letters, int(k))) for k in lengths]


@pytest.mark.parametrize("kind", ["runs", "mixed"])
@pytest.mark.parametrize("n", [1, 2, 63, 64, 500, 5000])
def test_items_in_runs_of_one_length_decode_as_items_of_any_lengths(kind: str, n: int) -> None:
    values = _runs_case(kind, n, np.random.default_rng(n))
    chunk = _vlen.encode(np.array(values, dtype=object))
    assert _vlen.decode(chunk, n, "c/0", objects=True).tolist() == values
    decoder = _vlen.Decoder(n, "c/0")
    decoder.feed(chunk)
    lengths, body = decoder.buffers()
    assert body.tobytes() == "".join(values).encode()
    assert lengths.tolist() == [len(value.encode()) for value in values]


def test_an_item_cut_in_a_run_of_one_length_is_not_valid_utf8() -> None:
    chunk = bytearray(_vlen.encode(np.array(["é"] * 200, dtype=object)))
    chunk[-1] = ord("x")  # the last item: a lead byte, then an ASCII byte
    decoder = _vlen.Decoder(200, "c/0")
    decoder.feed(chunk)
    with pytest.raises(FormatError, match=r"corrupt chunk c/0: a vlen-utf8 item is not valid"):
        decoder.buffers()


def _outcome(feed: Callable[[], _vlen.Decoder]) -> tuple[str, Any]:
    """What a decoder made of its input: its items, or the error it raised."""
    try:
        decoder = feed()
        return "ok", decoder.finish(objects=True).tolist()
    except FormatError as error:
        return "error", str(error)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(max_size=9), max_size=60),
    st.integers(-1, 1),
    st.sampled_from(["whole", "truncated", "trailing", "long length"]),
    st.sampled_from([1, 3, 5, 8, 64, 1 << 20]),
)
def test_a_stream_decoded_whole_is_checked_as_its_pieces_would_be(
    values: list[str], count_delta: int, damage: str, piece: int
) -> None:
    data = bytearray(reference(values))
    if damage == "truncated" and data:
        del data[len(data) // 2 :]
    elif damage == "trailing":
        data += b"\x01\x02\x03"
    elif damage == "long length" and values:
        data[4:8] = (1 << 20).to_bytes(4, "little")
    count = max(0, len(values) + count_delta)

    def in_pieces() -> _vlen.Decoder:
        decoder = _vlen.Decoder(count, "c/0")
        for start in range(0, max(len(data), 1), piece):
            decoder.feed(bytes(data[start : start + piece]))
        return decoder

    def whole() -> _vlen.Decoder:
        decoder = _vlen.Decoder(count, "c/0")
        decoder.feed_whole(bytes(data), piece)
        return decoder

    assert _outcome(whole) == _outcome(in_pieces)


def _symbols(n: int, rng: np.random.Generator, odd: list[str] | None = None) -> list[str]:
    """Items of lengths that change from one to the next (gene symbols), with ``odd`` items
    (NULs, empty items, lengths of 256 bytes, ...) put among them."""
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-é"))
    values = ["".join(rng.choice(letters, int(k))) for k in rng.integers(1, 12, n)]
    for value, at in zip(odd or [], rng.integers(0, n, len(odd or [])), strict=True):
        values[int(at)] = value
    return values


def _recorded_leaps(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The decoders' leaps from now on, each as the bytes it looked at and the items it took."""
    leaps: list[tuple[int, int]] = []
    leap = _vlen.Decoder._leap

    def recorded(self: _vlen.Decoder, end: int, window: int) -> int:
        looked = min(window, end - self.pos)
        leaps.append((looked, leap(self, end, window)))
        return leaps[-1][1]

    monkeypatch.setattr(_vlen.Decoder, "_leap", recorded)
    return leaps


ODD_ITEMS = {
    "plain": [],
    "NULs": ["a\x00b", "\x00", "\x00\x00\x00"],
    "empty items": ["", "", "x"] * 20,
    "lengths of 256 and 512 bytes": ["a" * 256, "b" * 512, "c" * 255, "d" * 257],
    "a long item": ["z" * 70_000],  # longer than one leap looks at
}


@pytest.mark.parametrize("odd", list(ODD_ITEMS), ids=list(ODD_ITEMS))
@pytest.mark.parametrize("piece", [None, 7, 1000, 65_539])
def test_items_of_changing_lengths_are_taken_by_leaps(
    odd: str, piece: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = _symbols(30_000, np.random.default_rng(len(odd)), ODD_ITEMS[odd])
    leaps = _recorded_leaps(monkeypatch)
    data = reference(values)
    items = [value.encode() for value in values]
    assert decode_buffers(data, len(values), piece) == ([len(i) for i in items], b"".join(items))
    if piece != 7:  # pieces of a few bytes hold an item or two: taken one by one
        assert sum(taken for _, taken in leaps) > 0.6 * len(values)  # most items
    decoder = _vlen.Decoder(len(values), "c/0")
    decoder.feed_whole(data, piece or len(data))
    assert decoder.finish(objects=True).tolist() == values


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(st.text("ab\x00é", max_size=6), st.just("x" * 256)), min_size=33, max_size=300
    ),
    st.integers(-1, 1),
    st.sampled_from(["whole", "truncated", "trailing", "long length", "last length"]),
    st.sampled_from([1, 5, 64, 1 << 20]),
)
def test_leaps_take_what_one_by_one_would(
    values: list[str], count_delta: int, damage: str, piece: int
) -> None:
    data = bytearray(reference(values))
    if damage == "truncated":
        del data[len(data) * 2 // 3 :]
    elif damage == "trailing":
        data += b"\x00\x00\x00\x01"
    elif damage == "long length":  # an item past the first leap claims more than remains
        at = 4 + sum(4 + len(value.encode()) for value in values[:40])
        data[at : at + 4] = (1 << 16).to_bytes(4, "little")
    elif damage == "last length":
        last = len(data) - 4 - len(values[-1].encode())
        data[last : last + 4] = (len(values[-1].encode()) + 1).to_bytes(4, "little")
    count = max(0, len(values) + count_delta)

    def in_pieces(leaps: bool) -> _vlen.Decoder:
        decoder = _vlen.Decoder(count, "c/0")
        if not leaps:
            decoder._leap = lambda end, window: 0  # type: ignore[method-assign]
        for start in range(0, len(data), piece):
            decoder.feed(bytes(data[start : start + piece]))
        return decoder

    expected = _outcome(lambda: in_pieces(False))
    assert _outcome(lambda: in_pieces(True)) == expected
    if damage == "whole" and count_delta == 0:
        assert expected == ("ok", values)


@pytest.mark.parametrize("every", [2, 17, 40, 300])
def test_the_work_of_leaps_is_linear_whatever_breaks_their_chains(
    every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Items that break the guessed chain every few items (a NUL) make leaps take little:
    the bytes the leaps look at stay within a few times the stream's."""
    values = _symbols(20_000, np.random.default_rng(every))
    values[::every] = ["a\x00b"] * len(values[::every])
    leaps = _recorded_leaps(monkeypatch)
    data = reference(values)
    assert _vlen.decode(data, len(values), "c/0", objects=True).tolist() == values
    looked = sum(window for window, _ in leaps)
    assert looked <= 4 * len(data) + 4096 * (len(values) // 64 + 1)
