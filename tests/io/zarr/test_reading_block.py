"""ZarrArray.reading and LazyLayer.reading: several reads through one opening of the store."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from cytepool.errors import StoreChangedError
from cytepool.io.zarr import open_array, write_array
from cytepool.layers import ArrayLayer, SelectLayer

VALUES = np.arange(3 * 4 * 5, dtype=np.int32).reshape(3, 4, 5)


@pytest.fixture
def array_path(tmp_path: Path) -> Path:
    write_array(tmp_path / "a", VALUES, chunks=(1, 4, 2))
    return tmp_path / "a"


def _swap(path: Path, values: np.ndarray, *, remove: bool = True) -> None:
    """Replace the array at ``path`` by another one, as an atomic writer would."""
    other = path.with_name("other")
    write_array(other, values, chunks=(1, 4, 2))
    old = path.with_name("old")
    os.rename(path, old)
    os.rename(other, path)
    if remove:
        shutil.rmtree(old)


def test_reads_in_a_block_come_from_the_store_it_opened(array_path: Path) -> None:
    array = open_array(array_path)
    keys = [(0, slice(None), [1, 3]), (2, slice(None), slice(None))]
    changed = pytest.raises(StoreChangedError, match="replaced while it was being read")
    with changed, array.reading(keys):
        first = array.oindex[0, :, [1, 3]]
        _swap(array_path, VALUES + 100, remove=False)
        last = array[2]  # still the store the block opened
    assert np.array_equal(first, VALUES[0][:, [1, 3]])
    assert np.array_equal(last, VALUES[2])
    assert np.array_equal(open_array(array_path)[2], VALUES[2] + 100)


def test_a_store_removed_inside_a_block_raises_when_the_block_ends(array_path: Path) -> None:
    array = open_array(array_path)
    changed = pytest.raises(StoreChangedError, match="replaced while it was being read")
    with changed, array.reading():
        _swap(array_path, VALUES + 100)  # the old store's chunks are gone: fill values
        array[2]


def test_outside_a_block_each_read_opens_the_store(array_path: Path) -> None:
    array = open_array(array_path)
    with array.reading([(0, slice(None), slice(None))]):
        assert np.array_equal(array[0], VALUES[0])
    _swap(array_path, VALUES)  # same values, another store
    with pytest.raises(StoreChangedError, match="changed since it was opened"):
        array[0]


@pytest.mark.parametrize("nested", [False, True])
def test_blocks_nest_and_end_cleanly(array_path: Path, nested: bool) -> None:
    array = open_array(array_path)
    with array.reading():
        if nested:
            with array.reading([(1, 0, 0)]):
                assert array[1, 0, 0] == VALUES[1, 0, 0]
        assert np.array_equal(np.asarray(array), VALUES)
    assert np.array_equal(array[...], VALUES)  # after the block, reads open the store again


def test_layer_blocks_map_selected_groups_to_the_base(array_path: Path) -> None:
    array = open_array(array_path)
    base = ArrayLayer(array, name="counts")
    selected = SelectLayer(base, groups=np.array([2, 0]), features=np.array([4, 1]))
    with selected.reading([0, 1]):
        blocks = [selected.read(0), selected.read(1)]
    assert np.array_equal(blocks[0], VALUES[2][:, [4, 1]])
    assert np.array_equal(blocks[1], VALUES[0][:, [4, 1]])
    assert np.array_equal(np.asarray(selected), VALUES[[2, 0]][:, :, [4, 1]])
    in_memory = ArrayLayer(VALUES, name="counts", checked=True)
    with in_memory.reading([0]):  # nothing to open
        assert np.array_equal(in_memory.read(0), VALUES[0])
