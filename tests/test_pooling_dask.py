"""from_cells on dask arrays: the same cube as in memory, threaded and on a LocalCluster."""

from __future__ import annotations

import re
import sys
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from cytepool import Cube, from_cells
from cytepool.errors import InputError, NotCountsWarning

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

BOTH = ("counts", "detected")


def data(seed: int, n_cells: int = 500, n_features: int = 12, *, whole: bool = True):
    rng = np.random.default_rng(seed)
    x = rng.integers(1, 9, size=(n_cells, n_features)).astype(np.float32)
    x[rng.random(x.shape) < 0.6] = 0
    if not whole:
        x[x > 6] += 0.25  # quarters: every order of additions gives the same float64 sums
    s = pd.Categorical(rng.choice(["s1", "s2", "s3"], n_cells), categories=["s0", "s1", "s2", "s3"])
    g = rng.choice(["B", "T", "NK"], n_cells)
    return x, s, g


def pooled(counts: Any, x: np.ndarray, **arguments: Any) -> Cube:
    """from_cells; when x is not all whole numbers, it warns once, naming such a value of x."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cube = from_cells(counts, **arguments)
    messages = [str(w.message) for w in caught if w.category is NotCountsWarning]
    assert len(messages) == len(caught) == (0 if (x == np.floor(x)).all() else 1)
    for message in messages:
        found = re.search(r"e.g. (\S+) at row (\d+), column (\d+);", message)
        assert found, message
        value = x[int(found[2]), int(found[3])]
        assert value == float(found[1])
        assert value != np.floor(value)
    return cube


def csr_chunks(array: Any) -> Any:
    return array.map_blocks(sp.csr_matrix, dtype=array.dtype)


CHUNKINGS = {
    "even-rows": ((100,) * 5, (12,)),
    "uneven-with-empty-blocks": ((0, 7, 250, 0, 143, 100), (12,)),
    "rows-and-columns": ((200, 300), (5, 7)),
    "chains-of-small-blocks": ((13,) * 38 + (6,), (12,)),
}


@pytest.mark.parametrize("chunks", list(CHUNKINGS))
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "csr"])
@pytest.mark.parametrize("whole", [True, False], ids=["integer", "float"])
@pytest.mark.usefixtures("pooling_path")
def test_threaded_equals_in_memory(chunks: str, sparse: bool, whole: bool) -> None:
    x, s, g = data(1, whole=whole)
    counts = da.from_array(x, chunks=CHUNKINGS[chunks])
    counts = csr_chunks(counts) if sparse else counts
    with dask.config.set(scheduler="threads"):
        cube = pooled(counts, x, sample_labels=s, group_labels=g, layers=BOTH)
    expected = pooled(x, x, sample_labels=s, group_labels=g, layers=BOTH)
    assert cube.layers["counts"].dtype == (np.int64 if whole else np.float64)
    assert cube.fingerprint == expected.fingerprint
    assert list(cube.samples.index) == ["s1", "s2", "s3"]  # the unused category is left out
    assert cube.provenance[0].parameters["input"] == "dask"


def test_dask_labels_and_sync_scheduler() -> None:
    x, s, g = data(2)
    counts = da.from_array(x, chunks=(64, 12))
    labels = da.from_array(np.asarray(g), chunks=64)
    with dask.config.set(scheduler="sync"):
        cube = from_cells(counts, sample_labels=s, group_labels=labels)
    assert cube.fingerprint == from_cells(x, sample_labels=s, group_labels=g).fingerprint


@pytest.mark.usefixtures("pooling_path")
def test_invalid_values_are_located_in_the_whole_array() -> None:
    x = np.ones((10, 6))
    x[7, 4] = -2.0
    counts = da.from_array(x, chunks=(5, 3))
    with pytest.raises(ValueError, match=r"counts: row 7, column 4 holds -2.0"):
        from_cells(counts, sample_labels=["a"] * 10, group_labels=["g"] * 10)


@pytest.mark.parametrize("chunks", [(50, 7), (50, 3), (300, 1)])
def test_the_warning_names_the_first_fraction_in_row_order(chunks: tuple[int, int]) -> None:
    """As in memory, whatever the chunks: the column block of a later row came first."""
    x = np.ones((300, 7), dtype=np.float32)
    x[100, 6], x[250, 1] = 1.5, 0.5
    labels = {"sample_labels": np.repeat(["a", "b", "c"], 100), "group_labels": ["x"] * 300}
    with pytest.warns(NotCountsWarning, match=r"e\.g\. 1\.5 at row 100, column 6;"):
        from_cells(da.from_array(x, chunks=chunks), **labels)


@pytest.mark.parametrize("kind", ["DataFrame", "Bag", "Delayed"])
def test_other_dask_collections_are_a_type_error(kind: str) -> None:
    """A dask DataFrame, Bag or Delayed is no matrix of cells: a TypeError naming it, before
    anything is computed (a Bag was iterated as row blocks, computed by processes)."""
    import dask.bag

    with warnings.catch_warnings():  # dask 2024.8 without dask-expr: its legacy DataFrame
        warnings.simplefilter("ignore", FutureWarning)
        import dask.dataframe

    x = np.arange(12).reshape(4, 3)
    counts = {
        "DataFrame": lambda: dask.dataframe.from_pandas(pd.DataFrame(x), npartitions=2),
        "Bag": lambda: dask.bag.from_sequence(list(x), npartitions=2),
        "Delayed": lambda: dask.delayed(x),
    }[kind]()
    with pytest.raises(TypeError, match=rf"counts: expected a dask array, found a dask {kind}"):
        from_cells(counts, sample_labels=["a", "a", "b", "b"], group_labels=["x"] * 4)


def test_unknown_chunk_sizes() -> None:
    x = da.from_array(np.ones((6, 2)), chunks=(3, 2))
    counts = x[x[:, 0] > 0]
    with pytest.raises(ValueError, match=r"unknown chunk sizes; call .compute_chunk_sizes\(\)"):
        from_cells(counts, sample_labels=["a"] * 6, group_labels=["g"] * 6)


def test_unsupported_chunks() -> None:
    counts = da.from_array(np.ones((4, 2)), chunks=(2, 2))
    counts = counts.map_blocks(lambda b: b.tolist(), meta=np.empty((0, 0)))
    with pytest.raises(TypeError, match=r"expected dask chunks that are numpy arrays or scipy"):
        from_cells(counts, sample_labels=["a"] * 4, group_labels=["g"] * 4)


BLOCKS_RESHAPED = {
    "fewer rows": (lambda b: b[:1], r"\(1, 2\)"),  # summed 24 where 46 was right, silently
    "more rows": (lambda b: np.vstack([b, b]), r"\(4, 2\)"),  # a bare IndexError
    "fewer columns": (lambda b: b[:, :1], r"\(2, 1\)"),
    "more columns": (lambda b: np.hstack([b, b]), r"\(2, 4\)"),
}


@pytest.mark.parametrize("case", BLOCKS_RESHAPED)
def test_chunks_of_another_shape_than_declared_are_an_error(case: str) -> None:
    """dask trusts the chunks an array declares: a block mapped to another shape is named,
    never pooled into wrong sums."""
    reshape, found = BLOCKS_RESHAPED[case]
    x = np.arange(24).reshape(6, 4) % 5
    counts = da.from_array(x, chunks=2).map_blocks(reshape, dtype=x.dtype)
    message = rf"the dask chunk at row \d+, column \d+ has shape {found}, but the array declares"
    with pytest.raises(InputError, match=message + r" \(2, 2\)"):
        from_cells(counts, sample_labels=list("aabbcc"), group_labels=list("TTTBBB"))


def test_missing_dask_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeDaskArray:
        __module__ = "dask.array.core"

        def to_delayed(self) -> None:
            raise AssertionError

    monkeypatch.setitem(sys.modules, "dask.array", None)
    with pytest.raises(
        ImportError,
        match=r"extra 'dask' \(in a checkout of cytepool: pip install -e '\.\[dask\]'\)",
    ):
        from_cells(FakeDaskArray(), sample_labels=["a"], group_labels=["g"])


@pytest.mark.parametrize("whole", [True, False], ids=["integer", "float"])
def test_local_cluster_equals_in_memory(client: Any, whole: bool) -> None:
    x, s, g = data(3, n_cells=2000, whole=whole)
    counts = csr_chunks(da.from_array(x, chunks=((300, 0, 700, 1000), (6, 6))))
    cube = pooled(counts, x, sample_labels=s, group_labels=g, layers=BOTH)
    expected = pooled(x, x, sample_labels=s, group_labels=g, layers=BOTH)
    assert cube.fingerprint == expected.fingerprint
