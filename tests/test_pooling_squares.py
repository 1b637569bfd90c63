"""The layer "squares" of from_cells: per-profile sums of x², exact and additive (issue 17)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import cytepool
from cytepool import from_cells
from cytepool.errors import SumOverflowError
from test_pooling import INPUTS

pytestmark = pytest.mark.usefixtures("pooling_path")

ALL = ("counts", "detected", "squares")


def counts_of(kind: str, x: np.ndarray, chunks: tuple[int, int] = (1, 2)) -> Any:
    """``x`` as the input ``kind``: one of INPUTS, or a dask array of ``chunks``."""
    if kind == "dask":
        da = pytest.importorskip("dask.array")
        return da.from_array(x, chunks=chunks)
    return INPUTS[kind](x)


def reference(x: np.ndarray, s: Any, g: Any) -> np.ndarray:
    """Sums of squares per (group, sample, feature) over the cells, by numpy (float64)."""
    s_ids, g_ids = sorted(set(map(str, s))), sorted(set(map(str, g)))
    si = np.searchsorted(s_ids, [str(v) for v in s])
    gi = np.searchsorted(g_ids, [str(v) for v in g])
    out = np.zeros((len(g_ids), len(s_ids), x.shape[1]))
    np.add.at(out, (gi, si), np.asarray(x, dtype=np.float64) ** 2)
    return out


def cells(seed: int = 3, n: int = 90, whole: bool = True) -> tuple[np.ndarray, Any, Any]:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 40, size=(n, 9)).astype(np.float32)
    x[rng.random(x.shape) > 0.45] = 0
    if not whole:
        x[x > 30] += 0.25
    s = rng.choice(["s1", "s2", "s3", "s4"], n)
    g = pd.Categorical(rng.choice(["B", "T", "NK"], n))
    return x, s, g


@pytest.mark.parametrize("kind", [*INPUTS, "dask"])
@pytest.mark.parametrize("layers", [ALL, ("squares",), ("squares", "counts")])
def test_squares_are_exact_integer_sums(kind: str, layers: tuple[str, ...]) -> None:
    x, s, g = cells()
    counts = counts_of(kind, x, (25, 4))
    cube = from_cells(counts, sample_labels=s, group_labels=g, layers=layers)
    assert list(cube.layers) == list(layers)
    assert cube.layers["squares"].dtype == np.int64
    np.testing.assert_array_equal(cube.to_numpy("squares"), reference(x, s, g))
    if "counts" in layers:
        direct = from_cells(x, sample_labels=s, group_labels=g)
        np.testing.assert_array_equal(cube.to_numpy("counts"), direct.to_numpy("counts"))


@pytest.mark.parametrize("kind", ["dense", "csr", "csc", "row-blocks"])
def test_squares_follow_counts_to_float64(kind: str) -> None:
    x, s, g = cells(whole=False)
    cube = from_cells(
        INPUTS[kind](x), sample_labels=s, group_labels=g, layers=ALL, allow_float=True
    )
    assert cube.layers["counts"].dtype == cube.layers["squares"].dtype == np.float64
    np.testing.assert_allclose(cube.to_numpy("squares"), reference(x, s, g), rtol=1e-12)


def test_squares_square_a_repeated_column_of_a_row_once() -> None:
    x = sp.csr_matrix(
        (np.array([2.0, 3.0, 1.0]), np.array([1, 1, 0]), np.array([0, 2, 3])), shape=(2, 2)
    )
    cube = from_cells(x, sample_labels=["a", "a"], group_labels=["g", "g"], layers=ALL)
    # row 0 holds (2 + 3) at column 1, as scipy reads it: x² is of that cell, 25 (not 4 + 9)
    np.testing.assert_array_equal(cube.to_numpy("squares"), [[[1, 25]]])
    np.testing.assert_array_equal(cube.to_numpy("detected"), [[[1, 1]]])


BIG = 2**31 - 1  # (2**31 - 1)**2 * 3 > 2**63 - 1: three such cells overflow int64


@pytest.mark.parametrize("kind", ["dense", "csr", "csc", "row-blocks", "dask"])
def test_squares_overflow_names_the_layer_and_group(kind: str) -> None:
    x = np.zeros((5, 2), dtype=np.float64)
    x[[0, 2, 4], 1] = BIG
    s = ["s1", "s2", "s1", "s2", "s1"]
    g = ["T", "B", "T", "B", "T"]
    counts = counts_of(kind, x)
    message = r"layer 'squares': a sum of squares of group 'T' in sample 's1' does not fit"
    with pytest.raises(SumOverflowError, match=message) as caught:
        from_cells(counts, sample_labels=s, group_labels=g, layers=ALL)
    assert isinstance(caught.value, OverflowError)
    two = from_cells(INPUTS["csr"](x[:3]), sample_labels=s[:3], group_labels=g[:3], layers=ALL)
    assert two.to_numpy("squares")[1, 0, 1] == 2 * BIG**2  # below 2**63: exact


def test_infinite_float_squares_overflow() -> None:
    x = np.array([[1e200, 1.5]])
    with pytest.raises(SumOverflowError, match=r"group 'g' in sample 'a' does not fit"):
        from_cells(x, sample_labels=["a"], group_labels=["g"], layers=ALL, allow_float=True)


def test_squares_repool_exactly_after_merge_groups_and_pool_samples() -> None:
    x, s, g = cells(seed=5, n=200)
    donors = {"s1": "d1", "s2": "d1", "s3": "d2", "s4": "d2"}
    samples = pd.DataFrame({"sample_id": ["s1", "s2", "s3", "s4"], "donor": donors.values()})
    cube = from_cells(x, sample_labels=s, group_labels=g, samples=samples, layers=ALL)
    merged = cube.merge_groups({"lymphoid": ["B", "T", "NK"]})
    lymphoid = np.where(np.isin(np.asarray(g), ["B", "T", "NK"]), "lymphoid", "other")
    np.testing.assert_array_equal(merged.to_numpy("squares"), reference(x, s, lymphoid))
    pooled = cube.pool_samples("donor")
    by_donor = [donors[v] for v in s]
    np.testing.assert_array_equal(pooled.to_numpy("squares"), reference(x, by_donor, g))
    direct = from_cells(x, sample_labels=by_donor, group_labels=g, layers=ALL)
    np.testing.assert_array_equal(pooled.to_numpy("squares"), direct.to_numpy("squares"))


def test_squares_add_and_concat_exactly() -> None:
    x, s, g = cells(seed=6, n=120)
    half = 60
    first = from_cells(x[:half], sample_labels=s[:half], group_labels=g[:half], layers=ALL)
    second = from_cells(x[half:], sample_labels=s[half:], group_labels=g[half:], layers=ALL)
    assert first.shape[:2] == second.shape[:2]  # every profile has cells in both halves
    total = cytepool.add([first, second])
    np.testing.assert_array_equal(total.to_numpy("squares"), reference(x, s, g))
    names = [f"gene{j}" for j in range(x.shape[1])]
    left = from_cells(x[:, :4], sample_labels=s, group_labels=g, features=names[:4], layers=ALL)
    right = from_cells(x[:, 4:], sample_labels=s, group_labels=g, features=names[4:], layers=ALL)
    joined = cytepool.concat([left, right], axis="features")
    np.testing.assert_array_equal(joined.to_numpy("squares"), reference(x, s, g))


def test_squares_overflow_in_merge_groups_raises() -> None:
    x = np.zeros((4, 1))
    x[:, 0] = BIG
    cube = from_cells(x, sample_labels=["a"] * 4, group_labels=["A", "A", "B", "B"], layers=ALL)
    merged = cube.merge_groups({"AB": ["A", "B"]})
    with pytest.raises(OverflowError, match="squares"):
        merged.to_numpy("squares")


@pytest.mark.interop
@pytest.mark.parametrize("where", ["memory", "path", "backed", "csc-path"])
def test_from_anndata_pools_squares(tmp_path: Path, where: str) -> None:
    ad = pytest.importorskip("anndata")
    from cytepool.io.anndata import from_anndata

    x, s, g = cells(seed=7, n=150)
    matrix = sp.csc_matrix(x) if where == "csc-path" else sp.csr_matrix(x)
    obs = pd.DataFrame({"sample": s, "cell_type": g}, index=[f"c{i}" for i in range(len(x))])
    adata = ad.AnnData(X=matrix, obs=obs)
    source: Any = adata
    if where != "memory":
        adata.write_h5ad(tmp_path / "cells.h5ad")
        source = tmp_path / "cells.h5ad"
        if where == "backed":
            source = ad.read_h5ad(source, backed="r")
    cube = from_anndata(source, sample_key="sample", group_key="cell_type", layers=ALL)
    np.testing.assert_array_equal(cube.to_numpy("squares"), reference(x, s, g))
    if where == "backed":
        source.file.close()


def test_unknown_layer_lists_squares() -> None:
    with pytest.raises(TypeError, match=re.escape("among ['counts', 'detected', 'squares']")):
        from_cells(np.eye(2), sample_labels=["a"] * 2, group_labels=["g"] * 2, layers="sum")


@pytest.mark.parametrize("cells_per_block", [1, 2])
def test_squares_overflow_across_small_blocks(cells_per_block: int) -> None:
    # each block is small (numpy); once their squares could wrap, the checked kernels go on
    x = np.zeros((4, 2), dtype=np.float64)  # float32 holds no 2**31 - 1
    x[:, 0] = BIG
    blocks = [sp.csr_matrix(x[i : i + cells_per_block]) for i in range(0, 4, cells_per_block)]
    labels = {"sample_labels": ["a"] * 4, "group_labels": ["T"] * 4}
    with pytest.raises(SumOverflowError, match="group 'T' in sample 'a'"):
        from_cells(blocks, **labels, layers=("squares",))
    two = from_cells(
        blocks[: 2 // cells_per_block],
        sample_labels=["a"] * 2,
        group_labels=["T"] * 2,
        layers=("squares",),
    )
    assert two.to_numpy("squares")[0, 0, 0] == 2 * BIG**2


# The position of the one cell that holds 2**31 (no whole number below 2**31) among three
# cells of BIG in feature 1, whose int64 squares overflow once summed.
ORDERS = {"large-first": [3, 0, 1, 2], "large-middle": [0, 1, 3, 2], "large-last": [0, 1, 2, 3]}


def _big_cells(order: list[int], large: float) -> np.ndarray:
    x = np.zeros((4, 2), dtype=np.float64)
    x[:3, 1] = BIG
    x[3, 0] = large
    return x[order]


@pytest.mark.parametrize("order", ORDERS.values(), ids=list(ORDERS))
@pytest.mark.parametrize("kind", ["dense", "csr", "csc", "row-blocks", "dask"])
def test_an_int64_overflow_before_the_float64_switch_is_no_error(
    kind: str, order: list[int]
) -> None:
    """The layers end float64 (a value of 2**31), so their sums are those of a float64 pass
    over the cells, finite: whatever the cells' order or the storage, the same cube."""
    x, labels = _big_cells(order, 2.0**31), {"sample_labels": ["a"] * 4, "group_labels": ["g"] * 4}
    counts = counts_of(kind, x)
    cube = from_cells(counts, **labels, layers=ALL, allow_float=True)
    assert cube.layers["counts"].dtype == cube.layers["squares"].dtype == np.float64
    np.testing.assert_array_equal(cube.to_numpy("squares"), [[[2.0**62, 3 * float(BIG) ** 2]]])
    np.testing.assert_array_equal(cube.to_numpy("counts"), [[[2.0**31, 3.0 * BIG]]])
    np.testing.assert_array_equal(cube.to_numpy("detected"), [[[1, 3]]])


@pytest.mark.parametrize("order", ORDERS.values(), ids=list(ORDERS))
@pytest.mark.parametrize("kind", ["dense", "csr", "csc", "row-blocks", "dask"])
def test_an_int64_overflow_of_whole_numbers_raises_whatever_the_order(
    kind: str, order: list[int]
) -> None:
    x, labels = _big_cells(order, BIG), {"sample_labels": ["a"] * 4, "group_labels": ["g"] * 4}
    counts = counts_of(kind, x)
    message = r"layer 'squares': a sum of squares of group 'g' in sample 'a' does not fit"
    with pytest.raises(SumOverflowError, match=message):
        from_cells(counts, **labels, layers=ALL)


def test_a_second_pass_closes_the_blocks_the_first_stopped_in() -> None:
    """The first pass stops at the overflow: its blocks (a file's reader, its progress bar)
    are closed before the cells are read again, not when the garbage collector gets to them."""
    from cytepool._blocks import RowBlocks

    x, events = _big_cells(ORDERS["large-last"], 2.0**31), []

    def blocks() -> Any:
        try:
            yield x[:3]  # the int64 squares overflow here
            yield x[3:]
        finally:
            events.append("closed")

    def again() -> RowBlocks:
        events.append("again")
        return RowBlocks([x[:3], x[3:]])

    labels = {"sample_labels": ["a"] * 4, "group_labels": ["g"] * 4}
    cube = from_cells(RowBlocks(blocks(), None, again), **labels, layers=ALL, allow_float=True)
    assert events == ["closed", "again"]
    np.testing.assert_array_equal(cube.to_numpy("squares"), [[[2.0**62, 3 * float(BIG) ** 2]]])


@pytest.mark.parametrize("last", ["A", "B"])
@pytest.mark.parametrize("kind", ["dense", "csr", "csc", "row-blocks"])
def test_the_overflow_named_is_one_that_did_not_fit(kind: str, last: str) -> None:
    """Group A's squares sum to 2**63 - 1 exactly (they fit int64; in float64 they round to
    2**63), group B's do not fit: whatever the order, the error names B, the sum the int64
    pass found past the bound, not A, whose float64 sum only looks as large."""
    a = [BIG, BIG, 92681, 408, 19, 1, 1, 1]
    assert sum(v * v for v in a) == 2**63 - 1
    cells = {"A": a, "B": [BIG] * 3}
    order = ["A", "B"] if last == "B" else ["B", "A"]
    x = np.array([[v] for g in order for v in cells[g]], dtype=np.float64)
    groups = [g for g in order for _ in cells[g]]
    message = r"a sum of squares of group 'B' in sample 'a' does not fit"
    with pytest.raises(SumOverflowError, match=message):
        from_cells(INPUTS[kind](x), sample_labels=["a"] * len(x), group_labels=groups, layers=ALL)


@pytest.mark.parametrize("at", [0, 21, 39])
@pytest.mark.parametrize("kind", ["dense", "csr", "csc", "row-blocks"])
def test_float64_sums_are_a_float64_pass_over_the_cells(kind: str, at: int) -> None:
    """Sums of squares past 2**53 before the first fraction are not carried over from int64
    (rounded once) but summed in float64 from the first cell, as by a float64 pass in the
    order of the cells, whatever the storage and wherever the fraction is."""
    x = np.zeros((40, 3), dtype=np.float64)
    x[:, 1] = 2**28 + 1 + np.arange(40) * 77  # squares ~2**56 + 2**29: rounded in float64
    x[::3, 2] = 3
    x[at, 0] = 0.5
    labels = {"sample_labels": ["a"] * 40, "group_labels": ["g"] * 40}
    cube = from_cells(INPUTS[kind](x), **labels, layers=ALL, allow_float=True)
    passed = np.zeros((2, 3))
    for row in x:  # a float64 pass in the order of the cells
        passed += (row, row * row)
    np.testing.assert_array_equal(cube.to_numpy("counts")[0, 0], passed[0])
    np.testing.assert_array_equal(cube.to_numpy("squares")[0, 0], passed[1])
