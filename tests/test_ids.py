"""Ids kept as UTF-8 buffers (cytepool._ids): found and checked for repeats like a dict of str."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cytepool import _ids
from cytepool._assemble import parts_of
from cytepool._ids import BufferIds, _hashes, _hashes_by_byte, _keys
from cytepool._table import _FEW_IDS
from cytepool._utf8 import Utf8Buffer
from cytepool.errors import FormatError, UnknownIdError
from cytepool.io import read_cube, write_cube
from cytepool.io.zarr import _vlen
from factories import make_cube, string_values

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=150, deadline=None)
@given(st.lists(texts, max_size=40), st.lists(texts, max_size=10))
def test_find_and_repeated_agree_with_a_dict(ids: list[str], queries: list[str]) -> None:
    held = BufferIds(Utf8Buffer.from_str(ids))
    first = {}
    for i, value in enumerate(ids):
        first.setdefault(value, i)
    counts = {value: ids.count(value) for value in ids}
    assert held.repeated() == sorted(value for value, n in counts.items() if n > 1)
    if not held.repeated():
        wanted = queries + ids[:5]
        assert held.find(wanted).tolist() == [first.get(q, -1) for q in wanted]


@pytest.mark.parametrize(
    "ids",
    [
        [f"ENSG{i:011d}" for i in range(500)],  # one length: words read where they lie
        ["", "a", "\0", "a\0", "\0a", "é", "ab", "ba", *[chr(i) * i for i in range(1, 60)]],
        [f"s{i:07d}" for i in range(300)],  # one length of exactly one word
        # one length each: less than a word (copied), whole words, or a partial word shifted
        *([f"{i:0{size}d}" for i in range(120)] for size in (4, 7, 9, 16, 17, 23)),
        ["x", "y", "é", "z"],  # one length shorter than a word
        ["", "b", "ab"],  # a length of no bytes among few
        [f"gene{i}" for i in range(2000)] + ["名前" * 9, "αβγδεζηθ" * 3],  # few lengths
        ["x" * 70_000, "y", "zz", "y" * 9],  # lengths beyond those counted: np.unique
    ],
)
def test_both_hashes_agree(ids: list[str]) -> None:
    buffer = Utf8Buffer.from_str(ids)
    assert (_hashes(buffer) == _hashes_by_byte(buffer, buffer.sizes())).all()
    assert len(set(_hashes(buffer).tolist())) == len(ids)
    assert (_hashes(spaced(ids)) == _hashes(buffer)).all()  # hashed where a chunk holds them
    assert (_hashes(spaced(ids, parsed=False)) == _hashes(buffer)).all()


def spaced(ids: list[str], *, parsed: bool = True) -> Utf8Buffer:
    """The ids as a reader keeps a vlen-utf8 chunk of them: each after its length field, the
    lengths parsed by a Decoder or (``parsed`` False) when first needed."""
    chunk = _vlen.encode(np.array(ids, dtype=object))
    if not parsed:
        return _vlen.spaced(chunk, len(ids), "(test)")
    decoder = _vlen.Decoder(len(ids), "(test)")
    decoder.feed(chunk)
    return decoder.spaced(0, len(ids))


@given(st.lists(texts, max_size=40, unique=True), st.lists(texts, max_size=8))
@settings(max_examples=60, deadline=None)
def test_ids_kept_spaced_are_found_as_joined_ones(ids: list[str], wanted: list[str]) -> None:
    kept, joined = BufferIds(spaced(ids)), BufferIds(Utf8Buffer.from_str(ids))
    assert kept.find(wanted).tolist() == joined.find(wanted).tolist()
    assert kept.buffer.located()[2] == 4  # found without joining
    assert kept.take(np.arange(len(ids))[::-1]).to_list() == ids[::-1]


@pytest.mark.parametrize("parsed", [True, False])
def test_ids_of_one_length_are_compared_where_they_lie(parsed: bool) -> None:
    ids = [f"ENSG{i:011d}" for i in range(300)]
    kept = BufferIds(spaced(ids, parsed=parsed))
    assert kept.buffer.uniform_size() == 15
    wanted = ["ENSG00000000299", "ENSG00000000000", "ENSG0000000030", "ENSG000000000300"]
    wanted += ["", "ENSG00000000301", "ENSG00000000007", "ENSG00000000299"]
    assert kept.find(wanted).tolist() == [299, 0, -1, -1, -1, -1, 7, 299]
    assert kept.buffer.located()[2] == 4  # found without joining


def test_ids_sharing_a_hash_are_told_apart_by_their_bytes() -> None:
    ids = ["T", "B", "NK", "B"]
    held = BufferIds(Utf8Buffer.from_str(ids))
    held._sorted = (np.zeros(4, dtype=np.uint64), np.arange(4))  # as if every key collided
    assert held.repeated() == ["B"]
    unique = BufferIds(Utf8Buffer.from_str(ids[:3]))
    h = _keys(unique.buffer)
    entries = sorted([(h[0], 0), (h[1], 0), (h[1], 1), (h[2], 2)], key=lambda e: int(e[0]))
    # "B"'s hash listed first for row 0 ("T"): the bytes must send the search on to row 1
    unique._sorted = (np.array([e[0] for e in entries]), np.array([e[1] for e in entries]))
    assert unique.find(["NK", "B", "T", "CD4"]).tolist() == [2, 1, 0, -1]


def test_a_cube_file_keeps_its_ids_as_stored_until_asked(tmp_path: Path) -> None:
    n = _FEW_IDS + 1  # fewer are looked up in a dict of str (see the next test)
    features = [f"ENSG{i:05d}" for i in range(n)]
    cube = make_cube(np.ones((2, 3, n), dtype=np.int32), ids={"features": features})
    write_cube(cube, tmp_path / "c.cube.zarr")
    read = read_cube(tmp_path / "c.cube.zarr")
    table = parts_of(read).tables["features"]
    selected = read.select(features=["ENSG00031", "ENSG00002"])
    assert table._ids is None  # no str per id was made to open and select
    assert selected.features.index.tolist() == ["ENSG00031", "ENSG00002"]
    np.testing.assert_array_equal(selected.profiles("g1"), np.ones((3, 2), dtype=np.int32))
    with pytest.raises(UnknownIdError, match=r"unknown ids \['nope', '\\ud800'\]"):
        read.select(features=["ENSG00001", "nope", "\ud800"])
    with pytest.raises(ValueError, match=r"selects \['ENSG00001'\] more than once"):
        read.select(features=["ENSG00001", "ENSG00001"])
    assert table.ids == features  # made when asked for


def test_a_few_stored_ids_are_looked_up_in_a_dict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cell types and samples: a dict of a dozen str, made once, is cheaper than hashing the
    ids asked for and searching the buffer (about 10 µs against 110 µs a lookup)."""
    write_cube(make_cube(), tmp_path / "c.cube.zarr")
    read = read_cube(tmp_path / "c.cube.zarr")

    def refused(self: BufferIds, ids: Any) -> Any:
        raise AssertionError("searched the buffer")

    monkeypatch.setattr(BufferIds, "find", refused)
    groups = parts_of(read).tables["groups"].ids
    assert read.select(groups=[groups[1]]).groups.index.tolist() == [groups[1]]
    np.testing.assert_array_equal(read.profiles(groups[0]), read.profiles(0))
    with pytest.raises(UnknownIdError, match=r"unknown ids \['nope'\]"):
        read.profiles("nope")


def test_a_repeated_stored_id_is_refused(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    features = [f"ENSG{i:05d}" for i in range(6)]
    cube = make_cube(np.ones((3, 4, 6), dtype=np.int32), ids={"features": features})
    write_cube(cube, tmp_path / "c.cube.zarr")
    array = zarr.open_array(
        string_values(tmp_path / "c.cube.zarr" / "features" / "feature_id"), mode="r+"
    )
    array[4] = "ENSG00001"
    with pytest.raises(
        FormatError,
        match=r"features: the ids must be unique; it holds \['ENSG00001'\] more than once",
    ):
        read_cube(tmp_path / "c.cube.zarr")


def test_ids_sharing_a_key_are_told_apart_and_found_first_by_row() -> None:
    """The index keeps a hash's upper 32 bits: ids whose keys collide (300,000 ids hold a few
    such pairs) are confirmed by their bytes, and rows of one key stay in order."""
    ids = [f"cell{i:07d}" for i in range(300_000)]
    held = BufferIds(Utf8Buffer.from_str(ids))
    keys, order = held._index()
    assert (keys[1:] >= keys[:-1]).all()
    ties = np.flatnonzero(keys[1:] == keys[:-1])
    assert 0 < len(ties) < 50  # collisions of 32-bit keys, as many as chance makes
    assert (order[ties] < order[ties + 1]).all()
    assert held.repeated() == []
    wanted = [ids[i] for i in [*order[ties].tolist(), *order[ties + 1].tolist(), 0, 299_999]]
    position = {value: i for i, value in enumerate(ids)}
    assert held.find([*wanted, "cell0300000"]).tolist() == [position[w] for w in wanted] + [-1]
    twice = BufferIds(Utf8Buffer.from_str([*ids[:5000], ids[17], *ids[5000:]]))
    assert twice.repeated() == [ids[17]]


@given(
    st.lists(st.integers(0, 2**32 - 1), max_size=60) | st.lists(st.integers(0, 3), max_size=60),
    st.booleans(),
)
def test_the_index_sorts_keys_as_a_stable_argsort(keys: list[int], past_int32: bool) -> None:
    """Keys in increasing order, rows of one key in increasing order, the rows int32: as numpy's
    stable argsort gives them, with the packed sort and with the fallback for rows past int32."""
    array = np.array(keys, dtype=np.uint32)
    expected = np.argsort(array, kind="stable")
    with pytest.MonkeyPatch.context() as patch:
        if past_int32:  # as many rows as int32 cannot hold, made few
            patch.setattr(_ids, "_INT32_ROWS", 0)
        found, rows = _ids._sorted_keys(array)
    np.testing.assert_array_equal(found, array[expected])
    np.testing.assert_array_equal(rows, expected)
    assert found.dtype == np.uint32
    assert rows.dtype == (np.intp if past_int32 and keys else np.int32)
