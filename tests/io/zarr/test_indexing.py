"""Chunk-grid arithmetic without files: selections -> per-chunk pieces, chunk keys."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cytepool.errors import InputError, InputTypeError
from cytepool.io.zarr.indexing import (
    ArrayAxis,
    IntAxis,
    SliceAxis,
    as_index,
    chunk_key,
    grid_shape,
    parse_selection,
)


def positions_from_pieces(axis: Any, chunk: int) -> np.ndarray[Any, Any]:
    """Rebuild the selected positions (in output order) from an axis's pieces."""
    out = np.full(axis.size, -1)
    for piece in axis.pieces(chunk):
        inner = np.arange(chunk)[piece.chunk_sel]
        assert len(inner)
        assert inner.max() < chunk
        target = np.arange(axis.size)[piece.out_sel]
        assert (out[target] == -1).all(), "every output position is written once"
        out[target] = piece.chunk * chunk + inner
    assert (out >= 0).all()
    return out


@pytest.mark.parametrize("n", [0, 1, 5, 12])
@pytest.mark.parametrize("chunk", [1, 2, 5, 13])
def test_slices_exhaustively(n: int, chunk: int) -> None:
    bounds = [None, *range(-n - 2, n + 3)]
    for start, stop, step in itertools.product(bounds, bounds, [None, 1, 2, 3, 7, -1, -2, -5]):
        key = slice(start, stop, step)
        expected = np.arange(n)[key]
        selection = parse_selection(key, (n,), orthogonal=False)
        (axis,) = selection.axes
        assert selection.shape == expected.shape
        assert positions_from_pieces(axis, chunk).tolist() == expected.tolist(), key


def test_slice_pieces_are_slices_per_chunk() -> None:
    pieces = SliceAxis(1, 10, 2).pieces(4)
    assert [p.chunk for p in pieces] == [0, 1, 2]
    assert [(p.chunk_sel, p.out_sel) for p in pieces] == [
        (slice(1, 4, 2), slice(0, 2, 1)),
        (slice(1, 4, 2), slice(2, 4, 1)),
        (slice(1, 2, 2), slice(4, 5, 1)),
    ]


def test_large_steps_visit_only_selected_chunks() -> None:
    pieces = SliceAxis(0, 10**12, 10**11).pieces(3)
    assert [p.chunk * 3 + p.chunk_sel.start for p in pieces] == list(range(0, 10**12, 10**11))


@pytest.mark.parametrize("seed", range(20))
def test_integer_arrays_in_any_order_with_repeats(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, chunk = int(rng.integers(1, 30)), int(rng.integers(1, 7))
    positions = rng.integers(-n, n, size=int(rng.integers(0, 15)))
    selection = parse_selection(positions, (n,), orthogonal=True)
    (axis,) = selection.axes
    assert isinstance(axis, ArrayAxis)
    assert positions_from_pieces(axis, chunk).tolist() == np.arange(n)[positions].tolist()


def test_contiguous_runs_become_slices() -> None:
    (piece,) = ArrayAxis(np.array([4, 5, 6])).pieces(10)
    assert piece.chunk_sel == slice(4, 7, 1)
    assert piece.out_sel == slice(0, 3, 1)
    pieces = ArrayAxis(np.array([6, 1, 7])).pieces(5)
    assert [p.chunk for p in pieces] == [0, 1]
    assert pieces[1].chunk_sel == slice(1, 3, 1)
    assert pieces[1].out_sel.tolist() == [0, 2]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "mask", [[True, False, True, True], np.array([False] * 4), np.ones(4, dtype=bool)]
)
def test_boolean_masks(mask: Any) -> None:
    (axis,) = parse_selection(mask, (4,), orthogonal=True).axes
    assert positions_from_pieces(axis, 3).tolist() == np.flatnonzero(mask).tolist()


def test_integers_drop_axes_and_make_scalars() -> None:
    selection = parse_selection((2, -1), (5, 4), orthogonal=False)
    assert selection.axes == (IntAxis(2), IntAxis(3))
    assert selection.scalar
    assert selection.shape == ()
    assert selection.full_shape == (1, 1)
    assert not parse_selection((2, -1, ...), (5, 4), orthogonal=False).scalar
    assert parse_selection((), (), orthogonal=False).scalar
    assert not parse_selection(..., (), orthogonal=False).scalar
    assert parse_selection(np.int8(1), (5,), orthogonal=False).scalar


@pytest.mark.parametrize(
    ("key", "shape"),
    [
        ((Ellipsis, 1), (3, 4, 5)),
        ((1, Ellipsis), (3, 4, 5)),
        ((1, Ellipsis, 2), (3, 4, 5)),
        ((slice(None, None, -1), 1), (3, 4)),
        ((), (3, 4)),
        ((Ellipsis,), ()),
        (slice(1, 2), (3, 4)),
    ],
)
def test_shapes_match_numpy(key: Any, shape: tuple[int, ...]) -> None:
    data = np.zeros(shape)
    assert parse_selection(key, shape, orthogonal=False).shape == np.shape(data[key])


def test_orthogonal_shape() -> None:
    selection = parse_selection((0, [3, 1, 3], [True, False]), (2, 4, 2), orthogonal=True)
    assert selection.shape == (3, 1)
    assert not selection.scalar


@pytest.mark.parametrize(
    ("key", "shape", "problem"),
    [
        ((0, 0, 0), (2, 2), "too many indices for array: array is 2-dimensional, but 3"),
        ((..., ...), (2, 2), "single ellipsis"),
        (2, (2,), "index 2 is out of bounds for axis with size 2"),
        (-3, (2,), "index -3 is out of bounds"),
        (None, (2,), "only integers, slices"),
        (1.0, (2,), "only integers, slices"),
        (True, (2,), "only integers, slices"),
        (np.bool_(False), (2,), "only integers, slices"),
        ("a", (2,), "only integers, slices"),
        ([0, 1], (2,), "only integers, slices"),
        (np.array([0]), (2,), "only integers, slices"),
    ],
)
def test_basic_index_errors(key: Any, shape: tuple[int, ...], problem: str) -> None:
    with pytest.raises(IndexError, match=problem):
        parse_selection(key, shape, orthogonal=False)


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ([0, 3], "index 3 is out of bounds"),
        ([-4], "index -4 is out of bounds"),
        (np.array([2**63], dtype=np.uint64), "out of bounds"),
        ([True, False], "boolean index of length 2 does not match axis of length 3"),
        (np.zeros((1, 1), dtype=int), "must be 1-D"),
        ([[0]], "must be 1-D"),
        ([0.5], "must hold integers or booleans"),
        (np.array(["a"]), "must hold integers or booleans"),
        ({0}, "only integers, slices"),
    ],
)
def test_orthogonal_index_errors(key: Any, problem: str) -> None:
    with pytest.raises(IndexError, match=problem):
        parse_selection(key, (3,), orthogonal=True)


def test_slice_errors_are_numpy_errors() -> None:
    """numpy's builtin types, as cytepool's errors (every error raised on purpose is one)."""
    with pytest.raises(InputError, match=r"slice step cannot be zero, found slice\(None, None, 0"):
        parse_selection(slice(None, None, 0), (3,), orthogonal=False)
    with pytest.raises(InputTypeError, match="slice bounds must be integers or None, found"):
        parse_selection(slice(1.5, None), (3,), orthogonal=False)


@pytest.mark.parametrize("seed", range(10))
def test_pieces_tile_the_output(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(0, 6, size=3))
    chunks = tuple(int(c) for c in rng.integers(1, 4, size=3))
    data = rng.random(shape)
    key = tuple(
        rng.integers(-n, n, size=3) if n and rng.random() < 0.5 else slice(None, None, 2)
        for n in shape
    )
    selection = parse_selection(key, shape, orthogonal=True)
    out = np.full(selection.full_shape, np.nan)
    for piece in selection.pieces(chunks):
        region = tuple(slice(c * k, (c + 1) * k) for c, k in zip(piece.coords, chunks, strict=True))
        chunk = np.zeros(chunks)
        block = data[region]
        chunk[tuple(slice(0, n) for n in block.shape)] = block
        out[as_index(piece.out_sel)] = chunk[as_index(piece.chunk_sel)]
    expected = data
    for axis, part in enumerate(key):
        expected = np.take(expected, np.arange(shape[axis])[part], axis=axis)
    np.testing.assert_array_equal(out, expected)


def test_pieces_come_in_c_order() -> None:
    selection = parse_selection(..., (4, 4), orthogonal=False)
    assert [p.coords for p in selection.pieces((2, 2))] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    full = [p.is_full((2, 2)) for p in selection.pieces((2, 2))]
    assert full == [True] * 4
    edge = parse_selection(..., (3, 4), orthogonal=False)
    assert [p.is_full((2, 2)) for p in edge.pieces((2, 2))] == [True, True, False, False]


def test_as_index_uses_ix_for_two_arrays() -> None:
    a = np.arange(24).reshape(2, 3, 4)
    index = as_index((np.array([1, 0]), slice(0, 3, 2), np.array([3, 3])))
    assert a[index].tolist() == [[[15, 15], [23, 23]], [[3, 3], [11, 11]]]
    single = (slice(0, 1, 1), np.array([2]))
    assert as_index(single)[0] == slice(0, 1, 1)
    assert as_index(single)[1] is single[1]


@pytest.mark.parametrize(
    ("coords", "encoding", "separator", "key"),
    [
        ((), "default", "/", "c"),
        ((), "default", ".", "c"),
        ((), "v2", ".", "0"),
        ((), "v2", "/", "0"),
        ((3,), "default", "/", "c/3"),
        ((3,), "v2", ".", "3"),
        ((0, 12, 5), "default", "/", "c/0/12/5"),
        ((0, 12, 5), "default", ".", "c.0.12.5"),
        ((0, 12, 5), "v2", ".", "0.12.5"),
        ((0, 12, 5), "v2", "/", "0/12/5"),
    ],
)
def test_chunk_keys(coords: tuple[int, ...], encoding: str, separator: str, key: str) -> None:
    assert chunk_key(coords, encoding, separator) == key


def test_grid_shape() -> None:
    assert grid_shape((), ()) == ()
    assert grid_shape((0, 7, 8), (1, 2, 8)) == (0, 4, 1)


@given(
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=3),
    extra=st.lists(st.integers(0, 3), min_size=3, max_size=3),
    key=st.sampled_from([..., slice(None), slice(1, None), slice(None, None, 2), 0]),
)
def test_only_piece_is_the_one_piece_a_plan_gives(
    shape: list[int], extra: list[int], key: Any
) -> None:
    """A whole read of an array of one chunk takes its piece without a plan: the same piece
    the plan yields alone; None whenever the plan could give another number of pieces."""
    chunks = [max(n, 1) + e for n, e in zip(shape, extra, strict=False)]
    try:
        selection = parse_selection(key, shape, orthogonal=False)
    except IndexError:  # an integer on a 0-d or empty axis
        return
    only = selection.only_piece(chunks)
    pieces = list(selection.pieces(chunks))
    if only is not None:
        assert pieces == [only]
    else:
        whole = shape and key in (..., slice(None)) and all(shape)
        assert not whole or any(n > c for n, c in zip(shape, chunks, strict=True))
