"""UTF-8 buffers (cytepool._utf8): the one representation of many strings, against plain Python."""

from __future__ import annotations

import numpy as np
import pytest

from cytepool._utf8 import Utf8Buffer, encode

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
