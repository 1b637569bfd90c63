"""Labels and arguments of from_cells and from_anndata: one id per text, every 1-D array-like,
clear errors (also for sums that overflow and feature columns given as arrays)."""

from __future__ import annotations

import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from cytepool import from_cells
from cytepool.errors import InputError, InputTypeError, SumOverflowError
from cytepool.io.zarr import open_array, write_array
from test_pooling import INPUTS


def pool(labels: Any) -> Any:
    """The cube of one cell per label, all in one group."""
    n = len(labels)
    return from_cells(np.ones((n, 1), dtype=np.int64), sample_labels=labels, group_labels=["g"] * n)


def objects(*values: Any) -> np.ndarray:
    """An object array of ``values`` as they are (numpy would make floats of them)."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


# --------------------------------------------------------------------------- one to one


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param([0.0, -0.0], id="list"),
        pytest.param(objects(0.0, -0.0), id="object-array"),
        pytest.param(objects(np.float64(0.0), np.float64(-0.0)), id="numpy-scalars"),
        pytest.param(pd.Series([0.0, -0.0], dtype=object), id="object-series"),
        pytest.param([1.0, 0.0, 2.0, -0.0], id="among-others"),
    ],
)
def test_signed_zeros_are_an_error_in_any_container(labels: Any) -> None:
    with pytest.raises(InputError, match=r"^sample_labels: the labels (np\.float64\()?0\.0"):
        pool(labels)
    with pytest.raises(InputError, match=r"are equal but read differently \('0\.0' and '-0\.0'\)"):
        pool(labels)


def test_labels_of_an_array_like_that_is_not_iterable(tmp_path: Path) -> None:
    """A ZarrArray (array-like through ``__array__``, not iterable) is labels one per cell,
    as the docstring's "any 1-D array-like" says; None and numbers are refused."""
    write_array(tmp_path / "labels", np.array(["a", "b", "a"]), chunks=(2,))
    labels = open_array(tmp_path / "labels")
    cube = from_cells(np.ones((3, 2), np.int64), sample_labels=labels, group_labels=["g"] * 3)
    assert cube.samples.index.tolist() == ["a", "b"]
    np.testing.assert_array_equal(cube.cells, [[2, 1]])
    for bad in (None, 3):
        with pytest.raises(InputTypeError, match="sample_labels: expected a 1-D array-like"):
            from_cells(np.ones((3, 2), np.int64), sample_labels=bad, group_labels=["g"] * 3)


@pytest.mark.parametrize("masked", ["sample_labels", "group_labels", "counts", "row block"])
def test_masked_arrays_are_refused(masked: str) -> None:
    x = np.array([[1, 2], [3, 4], [5, 6]])
    kwargs: dict[str, Any] = {"counts": x, "sample_labels": ["a", "b", "a"]}
    kwargs["group_labels"] = ["T"] * 3
    mask = [False, True, False]
    if masked.endswith("labels"):
        kwargs[masked] = np.ma.masked_array(kwargs[masked], mask=mask)
    else:
        counts = np.ma.masked_array(x, mask=np.array([mask, mask]).T)
        kwargs["counts"] = counts if masked == "counts" else [counts]
    what = "counts: row block 0" if masked == "row block" else masked
    n = 1 if "labels" in masked else 2
    with pytest.raises(
        InputTypeError,
        match=rf"^{what}: expected an array without a mask, found a numpy masked array "
        rf"\({n} values? masked\); fill the masked values",
    ):
        from_cells(**kwargs)


def test_signed_zeros_of_an_obs_column_are_an_error() -> None:
    ad = pytest.importorskip("anndata")
    from cytepool.io.anndata import from_anndata

    obs = pd.DataFrame({"s": objects(0.0, -0.0), "g": ["g", "g"]}, index=["c1", "c2"])
    adata = ad.AnnData(np.ones((2, 1), dtype=np.float32), obs=obs)
    match = r"^column 's' of adata\.obs \(sample_key\): the labels 0\.0 and -0\.0 are equal"
    with pytest.raises(InputError, match=match):
        from_anndata(adata, sample_key="s", group_key="g")


def test_equal_labels_of_one_type_that_read_differently_are_an_error() -> None:
    with pytest.raises(InputError, match=r"Decimal\('1\.0'\) and Decimal\('1\.00'\) are equal"):
        pool([Decimal("1.0"), Decimal("1.00")])


@pytest.mark.parametrize(
    ("labels", "ids"),
    [
        pytest.param([1.0, np.float32(1.0)], ["1.0"], id="float-float32"),
        pytest.param([0.5, np.float32(0.5), np.float16(0.5)], ["0.5"], id="three-types"),
        pytest.param([np.float64(2.0), np.float16(2.0), 3.0], ["2.0", "3.0"], id="float16"),
        pytest.param([Decimal(1), 1, 2], ["1", "2"], id="decimal-int"),
        pytest.param([True, np.True_, False], ["False", "True"], id="bools"),
    ],
)
def test_equal_labels_that_read_the_same_are_one_id(labels: list[Any], ids: list[str]) -> None:
    cube = pool(labels)
    assert list(cube.samples.index) == ids
    assert cube.cells.sum() == len(labels)
    assert cube.cells[0, 0] == sum(str(label) == ids[0] for label in labels)


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        pytest.param(
            [0.1, np.float32(0.1)],
            r"the labels 0\.1 \(float\) and np\.float32\(0\.1\) \(float32\) differ but read the "
            r"same, '0\.1'",
            id="float-float32",
        ),
        pytest.param(
            [np.float32(0.1), np.float64(0.1)],
            r"the labels np\.float32\(0\.1\) \(float32\) and np\.float64\(0\.1\) "
            r"\(float64\) differ",
            id="float32-float64",
        ),
        pytest.param(
            [np.float16(0.1), 0.1],
            r"the labels np\.float16\(0\.1\) \(float16\) and 0\.1 \(float\) differ",
            id="float16-float",
        ),
    ],
)
def test_labels_that_differ_but_read_the_same_are_an_error(labels: list[Any], match: str) -> None:
    """numpy finds ``0.1 == numpy.float32(0.1)`` (in float32): the labels are not equal."""
    with pytest.raises(InputError, match=rf"^sample_labels: {match}.*make them one type first"):
        pool(labels)


# --------------------------------------------------------------------------- array-likes


@pytest.mark.parametrize(
    ("labels", "ids"),
    [
        pytest.param(pa.array(["b", "a", "b"]), ["a", "b"], id="arrow-strings"),
        pytest.param(pa.chunked_array([["b"], ["a", "b"]]), ["a", "b"], id="arrow-chunked"),
        pytest.param(pa.array(["b", "a", "b"]).dictionary_encode(), ["a", "b"], id="dictionary"),
        pytest.param(pa.array([9, 10, 9]), ["10", "9"], id="arrow-ints"),
        pytest.param(pa.array([1.5, -0.5, 1.5]), ["-0.5", "1.5"], id="arrow-floats"),
        pytest.param(pa.array(["b", "a", "b"], pa.large_string()), ["a", "b"], id="large"),
        pytest.param(pl.Series(["b", "a", "b"], dtype=pl.Categorical), ["a", "b"], id="polars"),
        pytest.param(pl.Series([2, 1, 2]), ["1", "2"], id="polars-ints"),
    ],
)
def test_arrow_and_polars_labels(labels: Any, ids: list[str]) -> None:
    cube = pool(labels)
    assert list(cube.samples.index) == ids
    np.testing.assert_array_equal(cube.cells, [[1, 2]])


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param(pa.array(["a", None, None]), id="arrow-null"),
        pytest.param(pa.chunked_array([["a", None], [None]]), id="arrow-chunked-null"),
        pytest.param(pa.array([0.0, float("nan"), None]), id="arrow-nan"),
        pytest.param(pa.array([1, None, None]), id="arrow-int-null"),
        pytest.param(pa.array([True, None, None]), id="arrow-bool-null"),
        pytest.param(pl.Series(["a", None, None]), id="polars-null"),
        pytest.param(pl.Series([1.0, float("nan"), None]), id="polars-nan"),
    ],
)
def test_arrow_and_polars_nulls_are_missing_labels(labels: Any) -> None:
    with pytest.raises(InputError, match=r"^sample_labels: 2 of 3 cells have a missing label"):
        pool(labels)


# --------------------------------------------------------------------------- other errors


@pytest.mark.parametrize(
    ("labels", "kind"),
    [
        pytest.param([{"a": 1}, {"a": 1}], "dict", id="dicts"),
        pytest.param(objects([1], [2]), "list", id="lists-in-object-array"),
        pytest.param(objects("a", {1}), "set", id="mixed"),
        pytest.param(objects((1, [2]), (1, [2])), "tuple", id="tuple-holding-a-list"),
    ],
)
def test_unhashable_labels_are_a_type_error(labels: Any, kind: str) -> None:
    match = rf"^sample_labels: expected hashable labels .*found a label of type {kind}\b"
    with pytest.raises(InputTypeError, match=match):
        pool(labels)


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param([[1], [1, 2]], id="ragged-lists"),
        pytest.param([("a",), ("a", "b")], id="ragged-tuples"),
        pytest.param([[1], [2]], id="nested"),
    ],
)
def test_nested_labels_must_be_one_dimensional(labels: Any) -> None:
    with pytest.raises(InputError, match=r"^sample_labels: expected a 1-D array-like of labels"):
        pool(labels)


# --------------------------------------------------------------------------- no cells


def test_no_row_blocks_for_no_labels_is_a_clear_error() -> None:
    match = r"^counts: expected at least one row block \(it gives the number of features\)"
    with pytest.raises(InputError, match=match):
        from_cells([], sample_labels=[], group_labels=[])
    with pytest.raises(InputError, match=r"one block of 0 rows, such as numpy\.zeros"):
        from_cells(iter([]), sample_labels=[], group_labels=[])
    cube = from_cells([np.zeros((0, 3))], sample_labels=[], group_labels=[])
    assert cube.shape == (0, 0, 3)


# --------------------------------------------------------------------------- overflow

HUGE = 1e308  # finite; two of them sum to inf in float64


@pytest.mark.usefixtures("pooling_path")
@pytest.mark.parametrize("kind", sorted(INPUTS))
@pytest.mark.parametrize("layers", [("counts",), ("counts", "detected"), ("squares", "counts")])
def test_finite_values_whose_float_sum_overflows_name_the_layer(
    kind: str, layers: tuple[str, ...]
) -> None:
    x = np.ones((5, 2))
    x[[1, 3], 1] = HUGE
    s, g = ["s1", "s2", "s1", "s2", "s1"], ["T", "B", "T", "B", "T"]
    match = r"^layer 'counts': a sum of group 'B' in sample 's2' does not fit its data type"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow in add: not leaked
        with pytest.raises(SumOverflowError, match=match):
            from_cells(INPUTS[kind](x), sample_labels=s, group_labels=g, layers=layers)


def test_an_infinite_sum_of_a_dask_array_names_the_layer() -> None:
    dask = pytest.importorskip("dask")
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.array([[HUGE, 1.0], [HUGE, 2.0]]), chunks=(1, 2))  # a chunk a cell
    with warnings.catch_warnings(), dask.config.set(scheduler="sync"):
        warnings.simplefilter("error")
        with pytest.raises(SumOverflowError, match=r"^layer 'counts': a sum of group 'g'"):
            from_cells(x, sample_labels=["a", "a"], group_labels=["g", "g"])


@pytest.mark.usefixtures("pooling_path")
def test_an_infinite_sum_of_counts_not_asked_for_is_no_error() -> None:
    x = np.array([[HUGE, 1.0], [HUGE, 2.5]])
    cube = from_cells(x, sample_labels=["a", "a"], group_labels=["g", "g"], layers=("detected",))
    np.testing.assert_array_equal(cube.to_numpy("detected"), [[[2, 2]]])
    with pytest.raises(SumOverflowError, match=r"^layer 'squares': a sum of squares of group"):
        from_cells(x, sample_labels=["a", "a"], group_labels=["g", "g"], layers=("squares",))


# --------------------------------------------------------------------------- feature columns


@pytest.fixture
def adata() -> Any:
    ad = pytest.importorskip("anndata")
    obs = pd.DataFrame({"donor": ["d1", "d2"], "cell_type": ["B", "B"]}, index=["c1", "c2"])
    var = pd.DataFrame({"symbol": ["CD19", "MS4A1"], "chrom": ["16", "11"]}, index=["g1", "g2"])
    return ad.AnnData(np.ones((2, 2), dtype=np.float32), obs=obs, var=var)


@pytest.mark.parametrize(
    ("make", "columns"),
    [
        pytest.param(lambda var: var.columns, ["symbol", "chrom"], id="index"),
        pytest.param(lambda var: var.columns[::-1], ["chrom", "symbol"], id="index-reversed"),
        pytest.param(lambda var: np.array(["chrom", "symbol"]), ["chrom", "symbol"], id="numpy"),
        pytest.param(lambda var: var.columns[:1], ["symbol"], id="one"),
    ],
)
def test_feature_columns_as_an_array(adata: Any, tmp_path: Any, make: Any, columns: Any) -> None:
    from cytepool.io.anndata import from_anndata

    keys = {"sample_key": "donor", "group_key": "cell_type", "features": make(adata.var)}
    assert list(from_anndata(adata, **keys).features.columns) == columns
    paths = [str(tmp_path / "a.h5ad"), str(tmp_path / "b.h5ad")]
    adata.write_h5ad(paths[0])
    adata.obs["donor"] = ["d3", "d4"]
    adata.write_h5ad(paths[1])
    cube = from_anndata(paths, **keys, jobs=1)
    assert list(cube.features.columns) == columns
    assert list(cube.samples.index) == ["d1", "d2", "d3", "d4"]


def test_duplicates_as_an_array_is_an_input_error(adata: Any, tmp_path: Any) -> None:
    from cytepool.io.anndata import from_anndata

    paths = [str(tmp_path / "a.h5ad"), str(tmp_path / "b.h5ad")]
    keys = {"sample_key": "donor", "group_key": "cell_type", "jobs": 1}
    with pytest.raises(InputError, match=r"^duplicates must be 'error' or 'add', found array"):
        from_anndata(paths, **keys, duplicates=np.array(["add", "error"]))


def test_modalities_as_an_array() -> None:
    ad = pytest.importorskip("anndata")
    md = pytest.importorskip("mudata")
    from cytepool.io.anndata import from_mudata_cells

    obs = pd.DataFrame({"donor": ["d1", "d2"], "cell_type": ["B", "B"]}, index=["c1", "c2"])
    rna = ad.AnnData(np.ones((2, 2), np.float32), obs=obs, var=pd.DataFrame(index=["g1", "g2"]))
    prot = ad.AnnData(np.ones((2, 1), np.float32), obs=obs, var=pd.DataFrame(index=["p1"]))
    mdata = md.MuData({"rna": rna, "prot": prot})
    keys = {"sample_key": "donor", "group_key": "cell_type"}
    cubes = from_mudata_cells(mdata, **keys, modalities=np.array(["prot", "rna"]))
    assert [(type(name), cube.shape) for name, cube in cubes.items()] == [
        (str, (1, 2, 1)),
        (str, (1, 2, 2)),
    ]


@pytest.mark.parametrize("labels", ["ab", b"ab", {"a", "b"}, frozenset("ab"), {"a": 1, "b": 2}])
def test_labels_that_are_not_one_per_cell_in_order_are_refused(labels: Any) -> None:
    """A string was split into its characters, a set taken in no order."""
    with pytest.raises(InputTypeError, match=r"sample_labels: expected a 1-D array-like of lab"):
        from_cells(np.ones((2, 1)), sample_labels=labels, group_labels=["g", "g"])


_NOT_UNICODE = (
    r"which is not valid Unicode \(it holds a lone surrogate\); expected valid Unicode "
    r"strings: decode such names with errors='replace', or fix them"
)


@pytest.mark.parametrize("kind", ["list", "object", "categorical"])
def test_a_label_that_is_not_unicode_is_an_error_naming_it(kind: str) -> None:
    labels: Any = ["t", "s\udcff", "s\udcff"]
    if kind != "list":
        labels = pd.Series(labels, dtype=object)
        labels = pd.Categorical(labels) if kind == "categorical" else labels.to_numpy()
    with pytest.raises(
        InputError, match=rf"^sample_labels: cell 1 holds 's\\udcff', {_NOT_UNICODE}"
    ):
        from_cells(np.ones((3, 1)), sample_labels=labels, group_labels=["g"] * 3)
    with pytest.raises(ValueError, match=r"^features: column 'feature_id': row 1 holds 'b\\udcff'"):
        from_cells(
            np.ones((1, 2)), sample_labels=["s"], group_labels=["g"], features=["a", "b\udcff"]
        )
