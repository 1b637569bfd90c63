"""UTF-8 buffers (cytepool._utf8): the one representation of many strings, against plain Python."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cytepool._utf8 import SpacedUtf8Buffer, Utf8Buffer, encode

CASES = [
    pytest.param([], id="empty"),
    pytest.param([""], id="one-empty"),
    pytest.param(["ab", "", "é", "日本"], id="mixed"),
    pytest.param(["a\0b", "", "c"], id="nul-inside"),
    pytest.param(["x"] * 5, id="same-length"),
]


@pytest.mark.parametrize("values", CASES)
def test_encode_gives_each_values_utf8(values: list[str]) -> None:
    encoded = encode(values)
    assert encoded.sizes.tolist() == [len(v.encode()) for v in values]
    assert encoded.data().tobytes() == "".join(values).encode()


@pytest.mark.parametrize("values", CASES)
def test_buffers_slice_blank_and_list_like_python(values: list[str]) -> None:
    buffer = Utf8Buffer.from_str(values)
    assert len(buffer) == len(values)
    assert buffer.to_list() == [v.encode() for v in values]
    sizes, data = buffer.utf8(1, len(values))
    assert data.tobytes() == "".join(values[1:]).encode()
    assert sizes.tolist() == [len(v.encode()) for v in values[1:]]
    mask = np.arange(len(values)) % 2 == 0
    blanked = [b"" if m else v.encode() for v, m in zip(values, mask, strict=True)]
    assert buffer.blank(mask).to_list() == blanked


@pytest.mark.parametrize("values", CASES)
def test_buffers_give_their_strs(values: list[str]) -> None:
    strs = Utf8Buffer.from_str(values).to_str()
    assert strs == values
    assert all(type(s) is str for s in strs)
    # a buffer whose offsets start past its first byte (a view of a larger one)
    joined = b"--" + "".join(values).encode()
    offsets = np.concatenate([[0], np.cumsum([len(v.encode()) for v in values])]) + 2
    shifted = Utf8Buffer(offsets.astype(np.int64), np.frombuffer(joined, dtype=np.uint8))
    assert shifted.to_str() == values


def test_parts_join_in_order_and_are_consumed() -> None:
    parts = [Utf8Buffer.from_str(["a", "bc"]).utf8(0, 2), Utf8Buffer.from_str(["", "é"]).utf8(0, 2)]
    joined = Utf8Buffer.from_parts(parts)
    assert parts == []
    assert joined.to_list() == [b"a", b"bc", b"", "é".encode()]
    assert joined.offsets.dtype == np.int32


def test_a_lone_surrogate_raises_the_error_of_its_value() -> None:
    with pytest.raises(UnicodeEncodeError) as info:
        encode(["fine", "bad \ud800"])
    assert info.value.object == "bad \ud800"


def test_arrow_round_trip_with_nulls() -> None:
    pa = pytest.importorskip("pyarrow")
    array = pa.array(["ab", None, "é"]).slice(1)
    buffer = Utf8Buffer.from_arrow(array)
    assert buffer.to_list() == [b"", "é".encode()]
    assert buffer.to_arrow(np.array([True, False])).to_pylist() == [None, "é"]


def test_size_runs_finds_long_runs_only() -> None:
    from cytepool._utf8 import size_runs

    assert size_runs(np.array([3] * 64 + [4] * 64)) == [(0, 64), (64, 128)]
    assert size_runs(np.array([3] * 64 + [4] * 63)) is None  # fewer than 64 per run
    assert size_runs(np.array([7, 7])) == [(0, 2)]  # one run, however short
    assert size_runs(np.array([1, 2]), least=1) == [(0, 1), (1, 2)]


def test_a_single_part_that_owns_its_bytes_is_taken_over_and_a_view_is_copied() -> None:
    sizes, body = np.array([1, 2]), np.frombuffer(b"abc", dtype=np.uint8).copy()
    assert Utf8Buffer.from_parts([(sizes, body)]).data is body
    whole = np.frombuffer(b"--abc", dtype=np.uint8).copy()
    joined = Utf8Buffer.from_parts([(sizes, whole[2:])])  # a view: copied, whole is let go
    assert joined.data.base is None
    assert joined.to_list() == [b"a", b"bc"]


@pytest.mark.parametrize("n_sizes", [1, 2, 9, 32])
def test_move_by_size_copies_each_item_to_its_place(n_sizes: int) -> None:
    from cytepool._utf8 import move_by_size

    rng = np.random.default_rng(n_sizes)
    sizes = rng.integers(0, n_sizes, 3000)
    gaps = rng.integers(0, 3, 3000)
    source = rng.integers(0, 256, int(sizes.sum() + gaps.sum()), dtype=np.uint8)
    starts = np.cumsum(sizes + gaps) - sizes  # each item after its gap
    places = np.cumsum(sizes + 1) - sizes  # one byte left between items in the copy
    out = np.zeros(int(sizes.sum()) + len(sizes), dtype=np.uint8)
    assert move_by_size(source, starts, sizes, out, places)
    expected = np.zeros_like(out)
    for start, size, place in zip(starts.tolist(), sizes.tolist(), places.tolist(), strict=True):
        expected[place : place + size] = source[start : start + size]
    np.testing.assert_array_equal(out, expected)


def test_move_by_size_leaves_items_of_many_sizes_to_the_caller() -> None:
    from cytepool._utf8 import move_by_size

    sizes = np.arange(34)  # 33 sizes but the empty one: more than are moved a size at a time
    source = np.ones(int(sizes.sum()), dtype=np.uint8)
    out = np.zeros_like(source)
    starts = np.cumsum(sizes) - sizes
    assert not move_by_size(source, starts, sizes, out, starts)
    assert not out.any()
    assert move_by_size(np.zeros(0, np.uint8), starts[:0], sizes[:0], out[:0], starts[:0])


@settings(max_examples=80, deadline=None)
@given(
    items=st.integers(0, 20).flatmap(
        lambda size: st.lists(st.binary(min_size=size, max_size=size), min_size=1, max_size=30)
    ),
    rows=st.lists(st.integers(0, 40), max_size=6),
)
def test_items_of_one_size_kept_spaced_are_placed_without_a_parse(
    items: list[bytes], rows: list[int]
) -> None:
    """Items whose length fields, read in place, all give one size lie where a parse would
    place them (each field where the item before it ends), so where they are, their sizes and
    their offsets need no parse."""
    stored = b"".join(len(item).to_bytes(4, "little") + item for item in items)
    joined = Utf8Buffer.from_sizes(
        np.array([len(item) for item in items]), np.frombuffer(b"".join(items), np.uint8)
    )

    def refused() -> np.ndarray:
        raise AssertionError("the lengths were parsed")

    kept = SpacedUtf8Buffer(np.frombuffer(stored, np.uint8), len(items), refused, refused)
    assert kept.uniform_size() == len(items[0])
    picked = np.array([row % len(items) for row in rows], dtype=np.intp)
    source, starts, gap = kept.located(picked)
    assert gap == 4
    size = len(items[0])
    assert [source[a : a + size].tobytes() for a in starts] == [items[r] for r in picked]
    assert kept.sizes_at(picked).tolist() == joined.sizes_at(picked).tolist()
    assert kept.take(picked).to_list() == [items[r] for r in picked]
    assert [kept.item(r) for r in picked] == [items[r] for r in picked]
    assert kept.offsets.tolist() == joined.offsets.tolist()


def test_items_are_taken_at_positions_of_any_integer_type() -> None:
    """Categorical codes of int8 reach 127 (128 categories): one past them must not wrap."""
    values = [f"c{i}" for i in range(128)]
    buffer = Utf8Buffer.from_str(values)
    codes = np.array([127, 0, 126, 127], dtype=np.int8)
    assert buffer.take(codes).to_str() == [values[c] for c in codes]
    assert buffer.sizes_at(codes).tolist() == [len(values[c]) for c in codes]
