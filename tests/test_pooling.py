"""Tests of cytepool.from_cells: exact sums for every input kind, labels, tables and errors."""

from __future__ import annotations

import enum
import itertools
import re
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import cytepool
from cytepool import from_cells
from cytepool.errors import InputTypeError, NotCountsWarning, SumOverflowError

pytestmark = pytest.mark.usefixtures("pooling_path")

BOTH = ("counts", "detected")


def reference(
    x: np.ndarray, sample_labels: Any, group_labels: Any
) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Sorted str ids, cells, sums and detected counts, the simple way."""
    s = np.array([str(v) for v in sample_labels])
    g = np.array([str(v) for v in group_labels])
    sample_ids, group_ids = sorted(set(s)), sorted(set(g))
    sums = np.zeros((len(group_ids), len(sample_ids), x.shape[1]), dtype=x.dtype)
    detected = np.zeros(sums.shape, dtype=np.int64)
    cells = np.zeros(sums.shape[:2], dtype=np.int64)
    for i, gid in enumerate(group_ids):
        for j, sid in enumerate(sample_ids):
            rows = x[(g == gid) & (s == sid)]
            sums[i, j] = rows.sum(axis=0)
            detected[i, j] = (rows != 0).sum(axis=0)
            cells[i, j] = len(rows)
    return sample_ids, group_ids, cells, sums, detected


def random_counts(
    rng: np.random.Generator, n_cells: int = 60, n_features: int = 7, density: float = 0.4
) -> np.ndarray:
    x = rng.integers(1, 20, size=(n_cells, n_features)).astype(np.float32)
    x[rng.random(x.shape) > density] = 0
    return x


def row_blocks(x: np.ndarray) -> list[Any]:
    """Uneven blocks, CSR, dense and CSC in turn, one of them empty."""
    n = len(x)
    cuts = [0, 0, min(5, n), max(min(5, n), n // 2), n]
    kinds = [sp.csr_matrix, np.asarray, sp.csc_matrix]
    return [kinds[i % 3](x[a:b]) for i, (a, b) in enumerate(itertools.pairwise(cuts))]


INPUTS: dict[str, Callable[[np.ndarray], Any]] = {
    "dense": lambda x: x,
    "dense-fortran": np.asfortranarray,
    "csr": sp.csr_matrix,
    "csr-array-int64-indices": lambda x: _int64_indices(sp.csr_array(x)),
    "csc": sp.csc_matrix,
    "csc-array": sp.csc_array,
    "row-blocks": row_blocks,
    "row-blocks-generator": lambda x: (b for b in row_blocks(x)),
}


def _int64_indices(m: Any) -> Any:
    m.indices = m.indices.astype(np.int64)
    m.indptr = m.indptr.astype(np.int64)
    return m


def labels(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.choice(["s1", "s2", "s3"], n), rng.choice(["B", "T", "NK", "Mono"], n)


def assert_pooled(cube: cytepool.Cube, x: np.ndarray, sample_labels: Any, group_labels: Any):
    sample_ids, group_ids, cells, sums, detected = reference(x, sample_labels, group_labels)
    assert list(cube.samples.index) == sample_ids
    assert list(cube.groups.index) == group_ids
    np.testing.assert_array_equal(cube.cells, cells)
    counts = cube.to_numpy("counts")
    np.testing.assert_array_equal(counts, sums)
    if "detected" in cube.layers:
        np.testing.assert_array_equal(cube.to_numpy("detected"), detected)
        assert cube.layers["detected"].dtype == np.int64


def pooled_with_warnings(counts: Any, **arguments: Any) -> tuple[cytepool.Cube, list[str]]:
    """from_cells, and the messages of the NotCountsWarnings it gave (any other warning fails)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cube = from_cells(counts, **arguments)
    assert {w.category for w in caught} <= {NotCountsWarning}, [str(w.message) for w in caught]
    return cube, [str(w.message) for w in caught]


def assert_names_a_fraction(message: str, x: np.ndarray, matrix: str = "counts") -> None:
    """The warning names a value of x that is not a whole number, where it is."""
    found = re.match(
        rf"{re.escape(matrix)}: not every value is a count \(a whole number below 2\*\*31\), "
        r"e.g. (\S+) at row (\d+)(?: \(cell '[^']*'\))?, column (\d+).*; the layer 'counts' "
        r"holds float64 sums\. If you meant to pool counts, .*; if these values are meant, pass "
        r"allow_float=True to pool them without this warning$",
        message,
    )
    assert found, message
    value, row, column = float(found[1]), int(found[2]), int(found[3])
    assert x[row, column] == pytest.approx(value, rel=1e-5)
    assert x[row, column] != np.floor(x[row, column]) or x[row, column] >= 2**31


# --------------------------------------------------------------------------- inputs


@pytest.mark.parametrize("kind", list(INPUTS))
def test_every_input_kind_pools_exactly(kind: str) -> None:
    rng = np.random.default_rng(1)
    x = random_counts(rng)
    s, g = labels(rng, len(x))
    cube = from_cells(
        INPUTS[kind](x), sample_labels=s, group_labels=g, layers=("counts", "detected")
    )
    assert_pooled(cube, x.astype(np.int64), s, g)
    assert cube.layers["counts"].dtype == np.int64
    assert list(cube.layers) == ["counts", "detected"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "uint64"])
def test_whole_numbers_pool_to_int64(dtype: str) -> None:
    rng = np.random.default_rng(2)
    x = random_counts(rng).astype(dtype)
    s, g = labels(rng, len(x))
    for counts in (x, sp.csr_matrix(x)):
        cube = from_cells(counts, sample_labels=s, group_labels=g)
        assert cube.layers["counts"].dtype == np.int64
        assert_pooled(cube, x.astype(np.int64), s, g)


def test_bool_counts_pool_to_int64() -> None:
    x = np.array([[True, False], [True, True], [False, False]])
    cube = from_cells(sp.csr_matrix(x), sample_labels=["a", "a", "b"], group_labels=["g"] * 3)
    np.testing.assert_array_equal(cube.to_numpy(), [[[2, 1], [0, 0]]])


@pytest.mark.parametrize("kind", list(INPUTS))
def test_non_integers_pool_to_float64(kind: str) -> None:
    rng = np.random.default_rng(3)
    x = random_counts(rng).astype(np.float64)
    x[-1, :] = np.where(x[-1] > 0, x[-1] + 0.25, 0.5)  # only the last cell is not whole
    s, g = labels(rng, len(x))
    cube, messages = pooled_with_warnings(
        INPUTS[kind](x), sample_labels=s, group_labels=g, layers=("counts", "detected")
    )
    assert cube.layers["counts"].dtype == np.float64
    assert_pooled(cube, x, s, g)  # quarters add exactly in any order
    assert len(messages) == 1
    assert_names_a_fraction(messages[0], x)
    assert re.search(r"at row 59, column 0;", messages[0])  # the only cell that is not whole


@pytest.mark.parametrize("kind", list(INPUTS))
def test_intended_floats_pool_without_a_warning(kind: str) -> None:
    rng = np.random.default_rng(3)
    x = np.log1p(random_counts(rng).astype(np.float64))
    s, g = labels(rng, len(x))
    cube = from_cells(INPUTS[kind](x), sample_labels=s, group_labels=g, allow_float=True)
    assert cube.layers["counts"].dtype == np.float64
    np.testing.assert_allclose(cube.to_numpy(), reference(x, s, g)[3], rtol=1e-12)


def test_detected_alone_does_not_warn_about_floats() -> None:
    x = np.array([[0.5, 0.0], [1.5, 2.0]])
    cube = from_cells(x, sample_labels=["a", "b"], group_labels=["g", "g"], layers="detected")
    np.testing.assert_array_equal(cube.to_numpy("detected"), [[[1, 0], [1, 1]]])


def test_the_warning_points_at_the_caller() -> None:
    with pytest.warns(NotCountsWarning) as caught:
        from_cells(np.array([[0.5]]), sample_labels=["a"], group_labels=["g"])
    assert caught[0].filename == __file__


def test_switch_to_float64_keeps_earlier_sums_exact() -> None:
    # A value of 2**40 would not survive a float32 accumulation; the sums switch to float64
    # midway through a group and through a later block, and must stay exact.
    x = np.zeros((6, 2), dtype=np.float64)
    x[:, 0] = [2.0**30, 2.0**30, 1.0, 3.0, 2.0**30, 2.0**30]
    x[3, 1] = 0.5
    blocks = [x[:2], x[2:4], x[4:]]
    with pytest.warns(NotCountsWarning, match=r"e.g. 0.5 at row 3, column 1;"):
        cube = from_cells(blocks, sample_labels=["a"] * 6, group_labels=["g"] * 6)
    assert cube.layers["counts"].dtype == np.float64
    np.testing.assert_array_equal(cube.to_numpy()[0, 0], [4 * 2.0**30 + 4, 0.5])


def test_large_whole_numbers_pool_to_float64() -> None:
    x = np.array([[2.0**31], [1.0]])
    with pytest.warns(NotCountsWarning, match=r"e.g. 2.14748e\+09 at row 0, column 0;"):
        cube = from_cells(x, sample_labels=["a", "a"], group_labels=["g", "g"])
    assert cube.layers["counts"].dtype == np.float64
    assert cube.to_numpy()[0, 0, 0] == 2.0**31 + 1


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_detected_ignores_stored_zeros_and_counts_duplicates_once(fmt: str) -> None:
    # Line 0 stores an explicit zero and, unsorted, position 1 twice (1 + 2); line 1 is
    # canonical. As CSR the lines are cells; as CSC, features (the expected values transposed).
    data = np.array([0.0, 1.0, 4.0, 2.0, 5.0], dtype=np.float32)
    indices = np.array([0, 1, 2, 1, 1], dtype=np.int32)
    indptr = np.array([0, 4, 5])
    if fmt == "csr":
        x = sp.csr_matrix((data, indices, indptr), shape=(2, 3))
        labels = {"sample_labels": ["a", "a"], "group_labels": ["g", "g"]}
        counts, detected = [[0, 8, 4]], [[0, 2, 1]]
    else:
        x = sp.csc_matrix((data, indices, indptr), shape=(3, 2))
        labels = {"sample_labels": ["a", "b", "c"], "group_labels": ["g"] * 3}
        counts, detected = [[0, 0], [3, 5], [4, 0]], [[0, 0], [1, 1], [1, 0]]
    cube = from_cells(x, **labels, layers=["detected", "counts"])
    np.testing.assert_array_equal(cube.to_numpy("counts")[0], counts)
    np.testing.assert_array_equal(cube.to_numpy("detected")[0], detected)
    assert list(cube.layers) == ["detected", "counts"]
    assert x.data.tolist() == data.tolist()  # the input is not modified


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float64])
def test_a_cell_stored_twice_is_one_cell_in_every_layer(fmt: str, dtype: Any) -> None:
    """scipy reads values stored twice at one place as their sum: its square is that of the
    sum (it was the sum of their squares), as pooling the matrix made canonical gives."""
    rng = np.random.default_rng(3)
    n_cells, n_features, n_values = 60, 7, 400
    rows, columns = rng.integers(0, n_cells, n_values), rng.integers(0, n_features, n_values)
    values = rng.integers(1, 6, n_values).astype(dtype)
    if dtype == np.float64:
        values = values / 4
    lines, positions = (rows, columns) if fmt == "csr" else (columns, rows)
    order = np.argsort(lines, kind="stable")  # lines in order, positions as they came
    n_lines = n_cells if fmt == "csr" else n_features
    indptr = np.r_[0, np.cumsum(np.bincount(lines, minlength=n_lines))]
    kind = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    x = kind((values[order], positions[order], indptr), shape=(n_cells, n_features))
    assert not x.has_canonical_format
    canonical = x.copy()
    canonical.sum_duplicates()
    labels = {
        "sample_labels": rng.choice(["a", "b"], n_cells),
        "group_labels": rng.choice(["g", "h", "k"], n_cells),
        "layers": ["counts", "detected", "squares"],
        "allow_float": True,
    }
    found, expected = from_cells(x, **labels), from_cells(canonical, **labels)
    for name in labels["layers"]:
        np.testing.assert_array_equal(found.to_numpy(name), expected.to_numpy(name))
    assert found.fingerprint == expected.fingerprint


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_a_cell_stored_twice_whose_square_does_not_fit_int64_is_an_overflow(fmt: str) -> None:
    big = np.array([2**31 - 1, 2**31 - 1], dtype=np.int64)  # one cell: 2**32 - 2
    kind = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    x = kind((big, np.array([0, 0]), np.array([0, 2])), shape=(1, 1))
    with pytest.raises(SumOverflowError, match="layer 'squares': a sum of squares of group 'g'"):
        from_cells(x, sample_labels=["s"], group_labels=["g"], layers=["counts", "squares"])


def test_empty_profiles_have_no_cells_and_zero_values() -> None:
    x = np.array([[1, 2], [3, 4], [5, 6]])
    cube = from_cells(x, sample_labels=["s1", "s2", "s2"], group_labels=["B", "T", "T"])
    np.testing.assert_array_equal(cube.cells, [[1, 0], [0, 2]])
    np.testing.assert_array_equal(cube.to_numpy(), [[[1, 2], [0, 0]], [[0, 0], [8, 10]]])


def test_no_features() -> None:
    cube = from_cells(np.zeros((3, 0)), sample_labels=["a", "b", "a"], group_labels=["g"] * 3)
    assert cube.shape == (1, 2, 0)
    np.testing.assert_array_equal(cube.cells, [[2, 1]])


def test_a_non_main_thread_gives_the_same_cube() -> None:
    rng = np.random.default_rng(4)
    x = random_counts(rng, n_cells=200)
    s, g = labels(rng, len(x))
    results: list[cytepool.Cube] = []
    thread = threading.Thread(
        target=lambda: results.append(from_cells(sp.csr_matrix(x), sample_labels=s, group_labels=g))
    )
    thread.start()
    thread.join()
    assert results[0].fingerprint == from_cells(x, sample_labels=s, group_labels=g).fingerprint


def test_the_kernel_keeps_its_threads_for_the_blocks_that_follow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Blocks pooled by numba's kernels on several threads give the cube pooled at once, and
    the threads are started once, not for each block."""
    import numba

    from cytepool import _pool_sums

    monkeypatch.setattr(_pool_sums, "SMALL_VALUES", 0)  # every block through the kernels
    monkeypatch.setattr(_pool_sums, "FIRST_VALUES", 0)
    rng = np.random.default_rng(11)
    x = sp.csr_matrix(random_counts(rng, n_cells=400))
    s, g = labels(rng, x.shape[0])
    expected = from_cells(x.toarray(), sample_labels=s, group_labels=g).fingerprint

    from cytepool import _pool_kernels

    ran_on: list[threading.Thread] = []  # the threads themselves: an ident can be reused
    scatter = _pool_kernels.scatter

    def recorded(*args: object) -> object:
        ran_on.append(threading.current_thread())
        return scatter(*args)

    monkeypatch.setattr(_pool_kernels, "scatter", recorded)
    for _ in range(3):
        blocks = (x[i : i + 40] for i in range(0, x.shape[0], 40))
        assert from_cells(blocks, sample_labels=s, group_labels=g).fingerprint == expected
    assert len(ran_on) >= 30  # every group of each of the 30 blocks
    others = {id(thread) for thread in ran_on if thread is not threading.main_thread()}
    assert len(others) <= numba.get_num_threads()  # not two new threads for every block


def test_the_order_of_cells_does_not_change_the_cube() -> None:
    rng = np.random.default_rng(5)
    x = random_counts(rng)
    s, g = labels(rng, len(x))
    perm = rng.permutation(len(x))
    a = from_cells(x, sample_labels=s, group_labels=g)
    b = from_cells(sp.csr_matrix(x[perm]), sample_labels=s[perm], group_labels=g[perm])
    assert a.fingerprint == b.fingerprint


def test_provenance_record() -> None:
    cube = from_cells(np.eye(2), sample_labels=["a", "b"], group_labels=["g", "g"])
    (record,) = cube.provenance
    assert record.operation == "from_cells"
    assert record.parameters == {"layers": ["counts"], "cells": 2, "input": "dense"}
    assert record.version == cytepool.__version__
    assert record.inputs == ()


# --------------------------------------------------------------------------- labels


def test_categorical_labels_drop_unused_categories_and_sort_ids() -> None:
    s = pd.Categorical(["s2", "s1", "s2"], categories=["s3", "s2", "s1"])
    g = pd.Series(pd.Categorical(["T", "T", "B"], categories=["T", "B", "unused"]))
    cube = from_cells(np.ones((3, 1)), sample_labels=s, group_labels=g)
    assert list(cube.samples.index) == ["s1", "s2"]
    assert list(cube.groups.index) == ["B", "T"]
    np.testing.assert_array_equal(cube.cells, [[0, 1], [1, 1]])


@pytest.mark.parametrize(
    ("values", "ids"),
    [
        pytest.param([10, 9, 2, 10], ["10", "2", "9"], id="ints-sorted-as-strings"),
        pytest.param(np.array([1.5, 2.0, 1.5]), ["1.5", "2.0"], id="floats"),
        pytest.param(np.array(["b", "a", "b"]), ["a", "b"], id="numpy-str"),
        pytest.param(np.array(["b", "a", "b"], dtype="T"), ["a", "b"], id="numpy-stringdtype"),
        pytest.param(pd.Series(["b", "a", "b"], dtype="string"), ["a", "b"], id="pandas-string"),
        pytest.param(pl.Series(["b", "a", "b"]), ["a", "b"], id="polars"),
        pytest.param(np.array([1, 1.0, "x"], dtype=object)[[0, 2]], ["1", "x"], id="object"),
        pytest.param(np.array([1, np.int64(1), 2], dtype=object), ["1", "2"], id="int-types"),
        pytest.param(np.array(["a", np.str_("a")], dtype=object), ["a"], id="str-types"),
        pytest.param(np.array([-0.0, -0.0, 1.0]), ["-0.0", "1.0"], id="negative-zero"),
        pytest.param([True, False, True], ["False", "True"], id="bool"),
        pytest.param(pd.Categorical([3, 1, 3]), ["1", "3"], id="categorical-ints"),
    ],
)
def test_label_types(values: Any, ids: list[str]) -> None:
    n = len(values)
    cube = from_cells(np.ones((n, 1)), sample_labels=values, group_labels=["g"] * n)
    assert list(cube.samples.index) == ids
    assert cube.cells.sum() == n


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(["a", None, None], id="none"),
        pytest.param([1.0, np.nan, np.nan], id="nan"),
        pytest.param(pd.Series(["a", pd.NA, pd.NA], dtype="string"), id="pd-na"),
        pytest.param(pd.Categorical(["a", None, None]), id="categorical"),
        pytest.param(pd.array([1, None, None], dtype="Int64"), id="nullable-int"),
        pytest.param(np.array(["2024-01-01", "NaT", "NaT"], dtype="datetime64[D]"), id="nat"),
    ],
)
def test_missing_labels_are_counted(values: Any) -> None:
    with pytest.raises(ValueError, match=r"group_labels: 2 of 3 cells have a missing label"):
        from_cells(np.ones((3, 1)), sample_labels=["a"] * 3, group_labels=values)


AMBIGUOUS_LABELS = [
    pytest.param(
        [1.0, 1, 2], r"the labels 1.0 and 1 are equal but read differently", id="1.0-and-1"
    ),
    pytest.param([True, 1], r"the labels True and 1 are equal", id="True-and-1"),
    pytest.param(np.array([0.0, -0.0]), r"the labels 0.0 and -0.0 are equal", id="signed-zeros"),
    pytest.param(
        [1, "1"], r"the labels 1 \(int\) and '1' \(str\) differ but read the same", id="1-and-'1'"
    ),
    pytest.param(
        pd.Categorical([1, "1"]), r"the labels 1 \(int\) and '1' \(str\) differ", id="categories"
    ),
]


@pytest.mark.parametrize(("values", "match"), AMBIGUOUS_LABELS)
def test_labels_must_match_their_texts_one_to_one(values: Any, match: str) -> None:
    n = len(values)
    with pytest.raises(ValueError, match=rf"^sample_labels: {match}.*make them one type first"):
        from_cells(np.ones((n, 1)), sample_labels=values, group_labels=["g"] * n)


def test_label_lengths_must_match() -> None:
    with pytest.raises(ValueError, match=r"one label per cell in each, found 3 and 2"):
        from_cells(np.ones((3, 1)), sample_labels=["a"] * 3, group_labels=["g"] * 2)
    with pytest.raises(ValueError, match=r"one row per label \(2\), found 3 rows"):
        from_cells(np.ones((3, 1)), sample_labels=["a"] * 2, group_labels=["g"] * 2)
    with pytest.raises(ValueError, match=r"expected a 1-D array-like of labels"):
        from_cells(np.ones((3, 1)), sample_labels=[["a"]] * 3, group_labels=["g"] * 3)


# --------------------------------------------------------------------------- tables


def test_tables_are_aligned_to_the_ids() -> None:
    samples = pd.DataFrame({"sample_id": ["s2", "s1"], "donor": ["d2", "d1"]})
    groups = pd.DataFrame({"lineage": ["lymphoid", "myeloid"]}, index=["T", "Mono"])
    groups.index.name = "group_id"
    features = pd.DataFrame({"feature_id": ["CD3E", "LYZ"], "symbol": ["CD3E", "LYZ"]})
    cube = from_cells(
        np.array([[1, 0], [0, 2], [3, 3]]),
        sample_labels=["s1", "s2", "s2"],
        group_labels=["T", "Mono", "T"],
        samples=samples,
        groups=groups,
        features=features,
    )
    assert cube.samples["donor"].tolist() == ["d1", "d2"]
    assert cube.groups["lineage"].tolist() == ["myeloid", "lymphoid"]
    assert cube.features.index.tolist() == ["CD3E", "LYZ"]
    np.testing.assert_array_equal(cube.to_numpy()[1], [[1, 0], [3, 3]])


def test_id_tables_follow_the_backend_of_a_given_table() -> None:
    features = pl.DataFrame({"feature_id": ["a", "b"]})
    cube = from_cells(np.eye(2), sample_labels=[2, 1], group_labels=["g", "g"], features=features)
    assert isinstance(cube.samples, pl.DataFrame)
    assert cube.samples["sample_id"].to_list() == ["1", "2"]
    assert cube.groups["group_id"].to_list() == ["g"]


def test_id_tables_without_tables() -> None:
    cube = from_cells(np.eye(3), sample_labels=["a"] * 3, group_labels=["g"] * 3)
    assert isinstance(cube.features, pd.DataFrame)
    assert cube.features.index.tolist() == ["0", "1", "2"]
    assert cube.features.index.name == "feature_id"


def test_features_as_ids() -> None:
    ids = pd.Index(["CD3E", "LYZ"])
    cube = from_cells(np.eye(2), sample_labels=["a"] * 2, group_labels=["g"] * 2, features=ids)
    assert cube.features.index.tolist() == ["CD3E", "LYZ"]


def test_table_missing_ids_are_named() -> None:
    samples = pd.DataFrame({"sample_id": ["s1"]})
    with pytest.raises(
        ValueError, match=r"samples: the table has no row for 2 ids .*\['s2', 's3'\]"
    ):
        from_cells(
            np.ones((3, 1)),
            sample_labels=["s1", "s2", "s3"],
            group_labels=list("ggg"),
            samples=samples,
        )


def test_table_extra_rows_are_named() -> None:
    groups = pl.DataFrame({"group_id": ["T", "B", "NK"]})
    with pytest.raises(
        ValueError, match=r"groups: the table has rows for 2 ids that label no cell: \['B', 'NK'\]"
    ):
        from_cells(np.ones((1, 1)), sample_labels=["s"], group_labels=["T"], groups=groups)


def test_features_table_must_match_the_columns() -> None:
    features = pd.DataFrame({"feature_id": ["a", "b", "c"]})
    with pytest.raises(
        ValueError, match=r"features: expected one row per column of counts \(2\), found 3"
    ):
        from_cells(np.eye(2), sample_labels=["a"] * 2, group_labels=["g"] * 2, features=features)
    with pytest.raises(
        ValueError, match=r"features: expected one row per column of counts \(2\), found 1"
    ):
        from_cells(np.eye(2), sample_labels=["a"] * 2, group_labels=["g"] * 2, features=["x"])


@pytest.mark.parametrize(
    ("features", "error", "match"),
    [
        ("ab", TypeError, "expected a table .* or a sequence of string ids .*, found a str"),
        (b"ab", TypeError, "expected a table .* or a sequence of string ids .*, found a bytes"),
        (5, TypeError, "expected a table .* or a sequence of string ids .*, found 5"),
        ([1, 2], TypeError, r"the ids must be strings, found 1 \(int\) at position 0"),
        ([1.0, 2], TypeError, r"the ids must be strings, found 1.0 \(float\) at position 0"),
        ([b"a", b"b"], TypeError, r"the ids must be strings, found b'a' \(bytes\) at position 0"),
        (np.array([1, 2]), TypeError, r"the ids must be strings, found 1 \(int\) at position 0"),
        (["a", None], ValueError, r"1 id is missing \(positions \[1\]\)"),
        (pd.Index(["a", np.nan]), ValueError, r"1 id is missing \(positions \[1\]\)"),
    ],
)
def test_feature_ids_are_strings_as_in_a_cube(features: Any, error: type, match: str) -> None:
    """They were converted: "ab" to ["a", "b"], [1, 2] to ["1", "2"], bytes decoded."""
    with pytest.raises(error, match=f"^features: {match}"):
        from_cells(np.eye(2), sample_labels=["a"] * 2, group_labels=["g"] * 2, features=features)


class _Gene(str, enum.Enum):  # noqa: UP042 (str() is not its value, as for StrEnum)
    A = "a"
    B = "b"


@pytest.mark.parametrize(
    "features",
    [
        pd.Index(["a", "b"]),
        pl.Series(["a", "b"]),
        np.array(["a", "b"]),
        ("a", "b"),
        list(np.array(["a", "b"])),  # numpy.str_ items (a bare StopIteration once)
        [_Gene.A, _Gene.B],  # subclasses of str
    ],
)
def test_feature_ids_of_any_sequence_of_strings(features: Any) -> None:
    cube = from_cells(np.eye(2), sample_labels=["a"] * 2, group_labels=["g"] * 2, features=features)
    assert cube.features.index.tolist() == ["a", "b"]
    assert {type(i) for i in cube.features.index} == {str}


def test_layers_given_as_an_iterator() -> None:
    """The names were checked, then read again: an iterator was used up ("found []")."""
    cube = from_cells(
        np.eye(2), sample_labels=["a"] * 2, group_labels=["g"] * 2, layers=iter(["detected"])
    )
    assert list(cube.layers) == ["detected"]


def test_bad_tables_are_reported_by_the_cube() -> None:
    with pytest.raises(ValueError, match=r"samples: expected an id column 'sample_id'"):
        from_cells(
            np.eye(1), sample_labels=["a"], group_labels=["g"], samples=pd.DataFrame({"x": [1]})
        )


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
@pytest.mark.parametrize("kind", ["dense", "csr", "csc", "row-blocks"])
def test_invalid_values_are_located(bad: float, kind: str) -> None:
    x = np.ones((4, 3))
    x[2, 1] = bad
    with pytest.raises(
        ValueError, match=r"counts: row 2, column 1 holds .*expected counts, finite values >= 0"
    ):
        from_cells(INPUTS[kind](x), sample_labels=["a"] * 4, group_labels=["g"] * 4)


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
@pytest.mark.parametrize("kind", ["dense", "csr", "csc", "row-blocks"])
def test_invalid_values_after_a_fraction_are_located(bad: float, kind: str) -> None:
    """Once the sums are float64, the rows are checked for finite values >= 0 alone."""
    x = np.ones((4, 3))
    x[0, 2] = 0.5
    x[2, 1] = bad
    with pytest.raises(
        ValueError, match=r"counts: row 2, column 1 holds .*expected counts, finite values >= 0"
    ):
        from_cells(
            INPUTS[kind](x), sample_labels=["a"] * 4, group_labels=["g"] * 4, allow_float=True
        )


def test_invalid_sparse_indices_after_a_fraction() -> None:
    x = sp.csr_matrix((np.array([0.5, 1.0]), np.array([0, 5]), np.array([0, 1, 2])), shape=(2, 3))
    with pytest.raises(ValueError, match=r"the sparse matrix is invalid: row 1 holds column"):
        from_cells(x, sample_labels=["a", "a"], group_labels=["g", "g"], allow_float=True)


def test_invalid_sparse_indices() -> None:
    x = sp.csr_matrix((np.ones(2), np.array([0, 5]), np.array([0, 1, 2])), shape=(2, 3))
    with pytest.raises(ValueError, match=r"the sparse matrix is invalid: row 1 holds column"):
        from_cells(x, sample_labels=["a", "a"], group_labels=["g", "g"])
    x = sp.csc_matrix((np.ones(2), np.array([0, -1]), np.array([0, 1, 1, 2])), shape=(2, 3))
    with pytest.raises(ValueError, match=r"the sparse matrix is invalid: column 2 holds row"):
        from_cells(x, sample_labels=["a", "a"], group_labels=["g", "g"])


def _bad_indptr(fmt: str, indptr: list[int]) -> Any:
    x = (sp.csr_matrix if fmt == "csr" else sp.csc_matrix)(np.arange(9.0).reshape(3, 3))
    x.indptr[:] = indptr  # past scipy's checks, as a matrix changed in place is
    return x


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize(
    ("indptr", "match"),
    [
        pytest.param([2, 4, 6, 8], "its indptr starts at 2, not 0", id="start"),
        pytest.param([0, 5, 2, 8], r"its indptr decreases after entry 1 \(5 then 2\)", id="down"),
        pytest.param([0, 2, 5, 13], "its indptr ends at 13, past the 8 stored values", id="end"),
    ],
)
@pytest.mark.parametrize("blocks", [False, True])
def test_invalid_sparse_indptr(fmt: str, indptr: list[int], match: str, blocks: bool) -> None:
    x = _bad_indptr(fmt, indptr)
    what = "counts: row block 0" if blocks else "counts"
    with pytest.raises(ValueError, match=rf"{what}: not a valid {fmt.upper()} matrix: {match}"):
        from_cells(
            [x] if blocks else x,
            sample_labels=["a", "b", "a"],
            group_labels=["g"] * 3,
            layers=("counts", "detected", "squares"),
        )


@pytest.mark.parametrize(
    ("counts", "match"),
    [
        pytest.param(
            sp.coo_matrix(np.eye(2)), "expected a CSR or CSC sparse matrix, found coo", id="coo"
        ),
        pytest.param(
            np.eye(2, dtype=np.float16), "expected bool, integer, float32 or float64", id="f16"
        ),
        pytest.param(np.eye(2, dtype=complex), "found complex128", id="complex"),
        pytest.param(pd.DataFrame(np.eye(2)), "found DataFrame", id="frame"),
        pytest.param(3, "found int", id="int"),
        pytest.param(
            [np.ones(2)], r"row block 0: expected a 2-D .*found ndarray\(2,\)", id="1-d-block"
        ),
        pytest.param([[1, 2]], "row block 0: expected a 2-D numpy array", id="list"),
    ],
)
def test_unsupported_counts(counts: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        from_cells(counts, sample_labels=["a", "a"], group_labels=["g", "g"])


def test_row_blocks_must_fit_the_labels() -> None:
    s, g = ["a"] * 3, ["g"] * 3
    with pytest.raises(ValueError, match=r"row block 1: expected 2 columns like the first"):
        from_cells([np.ones((1, 2)), np.ones((1, 3))], sample_labels=s, group_labels=g)
    with pytest.raises(ValueError, match=r"row block 1: the blocks hold more rows than the 3"):
        from_cells([np.ones((2, 2)), np.ones((2, 2))], sample_labels=s, group_labels=g)
    with pytest.raises(ValueError, match=r"the row blocks hold 2 rows, expected 3"):
        from_cells([np.ones((2, 2))], sample_labels=s, group_labels=g)
    with pytest.raises(ValueError, match=r"the row blocks hold 0 rows, expected 3"):
        from_cells([], sample_labels=s, group_labels=g)


def test_dense_counts_must_be_2d() -> None:
    with pytest.raises(ValueError, match=r"expected a 2-D array \(cells x features\)"):
        from_cells(np.ones(2), sample_labels=["a"] * 2, group_labels=["g"] * 2)


@pytest.mark.parametrize(
    ("layers", "error"),
    [(("counts", "mean"), TypeError), ((), ValueError), (("counts", "counts"), ValueError)],
)
def test_layers_are_checked(layers: Any, error: type[Exception]) -> None:
    with pytest.raises(
        error, match=r"layers: expected distinct names among \['counts', 'detected', 'squares'\]"
    ):
        from_cells(np.eye(1), sample_labels=["a"], group_labels=["g"], layers=layers)


@pytest.mark.parametrize(
    ("argument", "value", "found"),
    [
        ("layers", None, "None"),
        ("layers", 5, "5"),
        ("sample_labels", None, "None"),
        ("group_labels", 3, r"3 \(int\)"),
        ("features", 5, "5"),
    ],
)
def test_arguments_of_the_wrong_type_are_named(argument: str, value: Any, found: str) -> None:
    """They raised bare TypeErrors: "'NoneType' object is not iterable"."""
    kwargs: dict[str, Any] = {"sample_labels": ["a"], "group_labels": ["g"], argument: value}
    expected = {
        "layers": r"a sequence of names among \['counts', 'detected', 'squares'\]",
        "features": r"a table \(pandas, polars or pyarrow\) or a sequence of string ids",
    }.get(argument, "a 1-D array-like of labels, one per cell")
    with pytest.raises(InputTypeError, match=rf"^{argument}: expected {expected}.*found {found}$"):
        from_cells(np.eye(1), **kwargs)


def test_layers_may_be_one_name() -> None:
    cube = from_cells(np.eye(2), sample_labels=["a"] * 2, group_labels=["g"] * 2, layers="detected")
    assert list(cube.layers) == ["detected"]


# --------------------------------------------------------------------------- properties


@st.composite
def pooling_cases(
    draw: st.DrawFn, values: st.SearchStrategy[float] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_cells = draw(st.integers(1, 40))
    n_features = draw(st.integers(1, 6))
    if values is None:
        values = st.sampled_from([0.0, 0.0, 0.0, 1.0, 2.0, 7.0, 0.5])
    x = np.array(
        draw(st.lists(values, min_size=n_cells * n_features, max_size=n_cells * n_features))
    )
    s = np.array(
        draw(st.lists(st.sampled_from(["s1", "s2", "s3"]), min_size=n_cells, max_size=n_cells))
    )
    g = np.array(draw(st.lists(st.integers(0, 3), min_size=n_cells, max_size=n_cells)))
    return x.reshape(n_cells, n_features), s, g


@settings(max_examples=40, deadline=None)
@given(case=pooling_cases(), kind=st.sampled_from(list(INPUTS)))
def test_random_matrices_pool_like_numpy(case: tuple[np.ndarray, ...], kind: str) -> None:
    x, s, g = case
    cube, messages = pooled_with_warnings(
        INPUTS[kind](x), sample_labels=s, group_labels=g, layers=("counts", "detected")
    )
    whole = bool((x == np.floor(x)).all())
    assert cube.layers["counts"].dtype == (np.int64 if whole else np.float64)
    assert_pooled(cube, x, s, g)
    assert len(messages) == (0 if whole else 1)
    for message in messages:
        assert_names_a_fraction(message, x)


# Whole numbers up to the largest count (2**31 - 1): a few of them pass 2**32 in a profile
LARGE = st.sampled_from([0.0, 0.0, 1.0, 7.0, 2.0**30, 2.0**31 - 1, 2.0**31 - 1, 0.5])


@settings(max_examples=60, deadline=None)
@given(
    case=pooling_cases(LARGE),
    cuts=st.lists(st.floats(0, 1), max_size=4),
    kind=st.sampled_from([sp.csr_matrix, np.asarray, sp.csc_matrix]),
)
def test_row_blocks_of_large_counts_pool_exactly(
    case: tuple[np.ndarray, ...], cuts: list[float], kind: Callable[[np.ndarray], Any]
) -> None:
    # Row blocks of counts alone pool into uint32 sums while each profile's bound allows;
    # a profile that might pass 2**32 - 1 (in one row, or over rows and blocks) makes them
    # int64, and a fraction float64, exactly; a block of another kind (CSC) makes them int64.
    x, s, g = case
    bounds = sorted({0, len(x), *(int(c * len(x)) for c in cuts)})
    blocks = [kind(x[a:b]) for a, b in itertools.pairwise(bounds)]
    blocks[-1] = sp.csr_matrix(blocks[-1])
    cube, messages = pooled_with_warnings(blocks, sample_labels=s, group_labels=g)
    whole = bool((x == np.floor(x)).all())
    assert cube.layers["counts"].dtype == (np.int64 if whole else np.float64)
    assert_pooled(cube, x, s, g)
    assert len(messages) == (0 if whole else 1)


def test_a_row_past_two_to_the_32_alone_pools_exactly() -> None:
    # Row 1's sum passes 2**32 by itself (no narrow row can take it); group T then meets a
    # fraction in the same run of the kernel.
    big = 2.0**31 - 1
    x = np.array(
        [[1.0, 2.0, 3.0], [big, big, big], [big, 1.0, 0.0], [big, 0.0, 0.0], [0.0, 0.5, 4.0]]
    )
    blocks = [sp.csr_matrix(x[:2]), sp.csr_matrix(x[2:])]
    with pytest.warns(NotCountsWarning, match=r"e.g. 0.5 at row 4, column 1;"):
        cube = from_cells(blocks, sample_labels=["a"] * 5, group_labels=[*"BBBB", "T"])
    expected = [[[1 + 3 * big, 3 + big, 3 + big]], [[0.0, 0.5, 4.0]]]
    np.testing.assert_array_equal(cube.to_numpy(), expected)


def test_the_kernel_takes_one_thread_while_it_sits_idle_waiting_for_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Blocks that come late from another thread (readers behind): one thread. Blocks made on
    # the pooling's own thread, or ready at once: numba's threads. Clocks of our own, so
    # that a busy machine does not change the answer.
    import types

    from cytepool import _waits

    clock = {"wall": 0.0, "thread": 0.0}
    fake = types.SimpleNamespace(
        perf_counter=lambda: clock["wall"], thread_time=lambda: clock["thread"]
    )
    monkeypatch.setattr(_waits, "time", fake)

    def blocks(idle: float, busy: float) -> Any:
        for i in range(2):
            clock["wall"] += idle + busy
            clock["thread"] += busy
            yield i

    for idle, busy, behind in [(0.2, 0.0, True), (0.0, 0.2, False), (0.0, 0.0, False)]:
        waits = _waits.Waits(blocks(idle, busy))
        next(waits)
        assert not waits.behind()  # nothing pooled yet to compare with
        clock["wall"] += 0.1  # the pooling of the first block
        next(waits)
        assert waits.behind() == behind


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9), min_size=0, max_size=12),
    size=st.integers(1, 12),
)
def test_pieces_cover_every_line_once_within_their_size(sizes: list[int], size: int) -> None:
    from cytepool import _pool_sums

    indptr = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    ranges = list(_pool_sums.pieces(indptr, size))
    assert [line for start, stop in ranges for line in range(start, stop)] == list(
        range(len(sizes))
    )
    for start, stop in ranges:
        assert stop - start == 1 or indptr[stop] - indptr[start] <= size
    data = np.arange(indptr[-1], dtype=np.float64)
    pieces = [_pool_sums.piece((data, data, indptr), start, stop) for start, stop in ranges]
    assert np.array_equal(np.concatenate([data[:0], *(piece[0] for piece in pieces)]), data)


def test_inputs_pool_with_numpy_until_the_kernels_are_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from cytepool import _pool_sums

    first, small = 100, 10  # the limits of either pooling path would make this trivial
    monkeypatch.setattr(_pool_sums, "FIRST_VALUES", first)
    monkeypatch.setattr(_pool_sums, "SMALL_VALUES", small)
    monkeypatch.setattr(_pool_sums, "_spent", [0])
    monkeypatch.delitem(sys.modules, "cytepool._pool_kernels", raising=False)
    assert _pool_sums.small_values(max(first, small)) == max(first, small)
    assert _pool_sums.small_values(first + 1) == small
    assert _pool_sums.small_values(None) == small  # blocks of an input of unknown size
    monkeypatch.setitem(sys.modules, "cytepool._pool_kernels", sys)  # loaded: any module
    assert _pool_sums.small_values(1) == small


def test_many_first_inputs_spend_a_budget_then_start_numba(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inputs above SMALL_VALUES pool with numpy until they add up to NUMPY_BUDGET values."""
    import sys

    from cytepool import _pool_sums

    monkeypatch.delitem(sys.modules, "cytepool._pool_kernels", raising=False)
    monkeypatch.setattr(_pool_sums, "_spent", [0])
    monkeypatch.setattr(_pool_sums, "SMALL_VALUES", 10)
    monkeypatch.setattr(_pool_sums, "FIRST_VALUES", 100)
    monkeypatch.setattr(_pool_sums, "NUMPY_BUDGET", 250)
    assert [_pool_sums.small_values(100) for _ in range(3)] == [100, 100, 10]
    assert _pool_sums.small_values(50) == 100  # what is left of the budget
    assert _pool_sums.small_values(8) == 100  # small inputs do not count
    assert _pool_sums._spent == [250]


@pytest.mark.parametrize("values", [None, 1200])
def test_row_blocks_with_their_values_pool_as_the_whole_matrix(
    monkeypatch: pytest.MonkeyPatch, values: int | None
) -> None:
    """RowBlocks hand the stored values of the whole matrix to small_values, which chooses
    numpy or numba for every block as for the whole; the sums are those of the matrix."""
    from cytepool import _pool_sums
    from cytepool._blocks import RowBlocks

    asked: list[int | None] = []
    choose = _pool_sums.small_values
    monkeypatch.setattr(_pool_sums, "small_values", lambda n: asked.append(n) or choose(n))
    rng = np.random.default_rng(11)
    x = sp.csr_matrix(random_counts(rng, n_cells=60, n_features=20))
    s, g = labels(rng, x.shape[0])
    blocks = RowBlocks((x[i : i + 25] for i in range(0, x.shape[0], 25)), values)
    pooled = from_cells(blocks, sample_labels=s, group_labels=g)
    whole = from_cells(x, sample_labels=s, group_labels=g)
    assert asked[0] == values
    np.testing.assert_array_equal(pooled.to_numpy("counts"), whole.to_numpy("counts"))


# --------------------------------------------------------------------------- scanpy


def test_equals_scanpy_aggregate_sum() -> None:
    sc = pytest.importorskip("scanpy")
    anndata = pytest.importorskip("anndata")
    rng = np.random.default_rng(6)
    x = random_counts(rng, n_cells=300, n_features=25)
    s, g = labels(rng, len(x))
    obs = pd.DataFrame({"sample": pd.Categorical(s), "group": pd.Categorical(g)})
    obs.index = obs.index.astype(str)
    adata = anndata.AnnData(sp.csr_matrix(x), obs=obs)
    theirs = sc.get.aggregate(adata, by=["group", "sample"], func="sum")
    cube = from_cells(adata.X, sample_labels=obs["sample"], group_labels=obs["group"])
    ours = cube.to_numpy()
    group_ids = list(cube.groups.index)
    sample_ids = list(cube.samples.index)
    assert theirs.n_obs == int((cube.cells > 0).sum())
    for i, row in enumerate(theirs.obs.itertuples()):
        profile = ours[group_ids.index(row.group), sample_ids.index(row.sample)]
        np.testing.assert_array_equal(profile, theirs.layers["sum"][i])
