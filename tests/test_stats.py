"""Statistics and filters on the cube: numpy over the cells, re-pooling, decoupler's filters."""

from __future__ import annotations

import re
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from cytepool import Cube, from_cells
from cytepool.errors import (
    ConstraintError,
    InputError,
    InputTypeError,
    NotCountsWarning,
    UnknownIdError,
)

dc = pytest.importorskip("decoupler")
pytestmark = pytest.mark.filterwarnings(
    # decoupler calls select_dtypes(include="object"), which pandas 3 deprecates for str
    "ignore:For backward compatibility, 'str' dtypes:DeprecationWarning"
)

SAMPLES = ["s0", "s1", "s2", "s3", "s4", "s5"]
GROUPS = ["B", "Mono", "T"]
DONOR = {"s0": "D1", "s1": "D1", "s2": "D2", "s3": "D2", "s4": "D3", "s5": "D3"}
CONDITION = {"s0": "ctrl", "s1": "stim", "s2": "ctrl", "s3": "stim", "s4": "ctrl", "s5": "stim"}


class Cells:
    """Synthetic cells: counts ``(n_cells, n_genes)`` and a sample and a group per cell."""

    def __init__(self, counts: np.ndarray, samples: np.ndarray, groups: np.ndarray):
        self.counts, self.samples, self.groups = counts, samples, groups

    def of(self, group: str | list[str], sample: str | list[str]) -> np.ndarray:
        """The rows of the cells of some groups and samples."""
        mask = np.isin(self.groups, group) & np.isin(self.samples, sample)
        return self.counts[mask]

    def cube(self, dtype: Any = np.int64, *, squares: bool = True) -> Cube:
        """The cube of these cells: counts, detected and squares summed by numpy."""
        shape = (len(GROUPS), len(SAMPLES), self.counts.shape[1])
        sums = {"counts": np.zeros(shape, dtype), "detected": np.zeros(shape, np.int64)}
        if squares:
            sums["squares"] = np.zeros(shape, dtype)
        cells = np.zeros(shape[:2], dtype=np.int64)
        for g, group in enumerate(GROUPS):
            for s, sample in enumerate(SAMPLES):
                x = self.of(group, sample)
                cells[g, s] = len(x)
                sums["counts"][g, s] = x.sum(axis=0)
                sums["detected"][g, s] = (x > 0).sum(axis=0)
                if squares:
                    sums["squares"][g, s] = (x * x).sum(axis=0)
        return Cube(
            sums,
            samples=pd.DataFrame(
                {
                    "sample_id": SAMPLES,
                    "donor": [DONOR[s] for s in SAMPLES],
                    "condition": [CONDITION[s] for s in SAMPLES],
                }
            ),
            groups=pd.DataFrame({"group_id": GROUPS, "lineage": ["lymph", "myelo", "lymph"]}),
            features=pd.DataFrame({"feature_id": [f"g{j}" for j in range(shape[2])]}),
            cells=cells,
        )


def make_cells(seed: int = 0, n_cells: int = 900, n_genes: int = 40, scale: float = 1.0) -> Cells:
    """Negative-binomial counts of varied depth per gene; profile (Mono, s5) is empty and
    (T, s0) has one cell."""
    rng = np.random.default_rng(seed)
    samples = rng.choice(SAMPLES, n_cells)
    groups = rng.choice(GROUPS, n_cells)
    groups[(groups == "Mono") & (samples == "s5")] = "B"
    lonely = np.flatnonzero((groups == "T") & (samples == "s0"))
    groups[lonely[1:]] = "B"
    means = rng.gamma(0.6, 3.0, n_genes) * scale
    depth = rng.lognormal(0.0, 0.4, n_cells)[:, None]
    counts = rng.negative_binomial(2, 2 / (2 + means * depth)).astype(np.int64)
    return Cells(counts, samples, groups)


@pytest.fixture(scope="module")
def cells() -> Cells:
    return make_cells()


@pytest.fixture(scope="module")
def cube(cells: Cells) -> Cube:
    return cells.cube()


def reference(cells: Cells, groups: list[list[str]], samples: list[list[str]], func: Any):
    """``func`` over the cells of every (groups, samples) profile; NaN if func cannot."""
    n_genes = cells.counts.shape[1]
    out = np.full((len(groups), len(samples), n_genes), np.nan)
    for g, group in enumerate(groups):
        for s, sample in enumerate(samples):
            x = cells.of(group, sample).astype(np.float64)
            out[g, s] = func(x)
    return out


def np_var(ddof: int) -> Any:
    return lambda x: np.var(x, axis=0, ddof=ddof) if len(x) > ddof else np.nan


def np_mean(x: np.ndarray) -> Any:
    return x.mean(axis=0) if len(x) else np.nan


def np_fraction(x: np.ndarray) -> Any:
    return (x > 0).mean(axis=0) if len(x) else np.nan


ONE_EACH = ([[g] for g in GROUPS], [[s] for s in SAMPLES])


# --------------------------------------------------------------------------- statistics


@pytest.mark.parametrize(
    ("statistic", "func"),
    [
        (lambda c: c.mean(), np_mean),
        (lambda c: c.fraction_detected(), np_fraction),
        (lambda c: c.variance(), np_var(1)),
        (lambda c: c.variance(ddof=0), np_var(0)),
        (lambda c: c.variance(ddof=2), np_var(2)),
    ],
    ids=["mean", "fraction", "var1", "var0", "var2"],
)
@pytest.mark.parametrize("dtype", [np.int64, np.uint32, np.float64])
def test_statistics_equal_numpy_over_the_cells(
    cells: Cells, statistic: Any, func: Any, dtype: Any
) -> None:
    found = np.asarray(statistic(cells.cube(dtype)))
    expected = reference(cells, *ONE_EACH, func)
    assert found.dtype == np.float64
    np.testing.assert_allclose(found, expected, rtol=1e-12, atol=0)
    assert np.isnan(found[GROUPS.index("Mono"), SAMPLES.index("s5")]).all()  # 0 cells


def test_variance_of_one_cell_is_nan_for_ddof_1_and_0_for_ddof_0(cube: Cube) -> None:
    t, s0 = GROUPS.index("T"), SAMPLES.index("s0")
    assert cube.cells[t, s0] == 1
    assert np.isnan(cube.variance().profiles("T")[s0]).all()
    np.testing.assert_array_equal(cube.variance(ddof=0).profiles("T")[s0], 0.0)


@pytest.mark.parametrize(
    ("method", "func"),
    [
        (lambda c: c.mean(), np_mean),
        (lambda c: c.fraction_detected(), np_fraction),
        (lambda c: c.variance(), np_var(1)),
        (lambda c: c.variance(ddof=0), np_var(0)),
    ],
    ids=["mean", "fraction", "var1", "var0"],
)
def test_statistics_of_merged_and_pooled_cubes_equal_those_of_the_pooled_cells(
    cells: Cells, cube: Cube, method: Any, func: Any
) -> None:
    merged = cube.merge_groups({"lymphoid": ["B", "T"]})
    expected = reference(cells, [["B", "T"], ["Mono"]], [[s] for s in SAMPLES], func)
    np.testing.assert_allclose(np.asarray(method(merged)), expected, rtol=1e-12)
    pooled = merged.pool_samples(by="donor")
    donors = [[s for s in SAMPLES if DONOR[s] == d] for d in ("D1", "D2", "D3")]
    expected = reference(cells, [["B", "T"], ["Mono"]], donors, func)
    np.testing.assert_allclose(np.asarray(method(pooled)), expected, rtol=1e-12)


def test_statistics_read_lazily_group_by_group(tmp_path: Path, cells: Cells, cube: Cube) -> None:
    from cytepool.io import read_cube, write_cube

    write_cube(cube, tmp_path / "c.cube.zarr")
    lazy = read_cube(tmp_path / "c.cube.zarr")
    expected = reference(cells, *ONE_EACH, np_var(1))
    variance = lazy.variance()
    assert variance.shape == cube.shape
    assert variance.dtype == np.float64
    np.testing.assert_allclose(variance.profiles("Mono"), expected[1], rtol=1e-12)
    np.testing.assert_allclose(variance[2, 1:3], expected[2, 1:3], rtol=1e-12)
    np.testing.assert_allclose(
        variance.oindex[[0, 2], [4, 1], [3, 0]], expected[np.ix_([0, 2], [4, 1], [3, 0])]
    )
    sub = lazy.select(samples=["s3", "s1"], features=["g5", "g2"], groups=["T"])
    np.testing.assert_allclose(
        sub.variance().profiles("T"), expected[2][np.ix_([3, 1], [5, 2])], rtol=1e-12
    )


def test_variance_of_floats_is_clamped_at_zero_and_accurate() -> None:
    rng = np.random.default_rng(5)
    values = rng.uniform(0, 10, (200, 3))
    values[:, 2] = 0.1  # all cells alike: the variance is 0, rounding may say -tiny
    cells = Cells(values, np.array(["s0"] * 200), np.array(["B"] * 200))
    found = np.asarray(cells.cube(np.float64).variance())[0, 0]
    np.testing.assert_allclose(found[:2], np.var(values[:, :2], axis=0, ddof=1), rtol=1e-12)
    assert 0.0 <= found[2] < 1e-15


@pytest.mark.parametrize(("n", "value"), [(10_000, 0.1), (6_000, 12345.678)])
def test_variance_of_many_alike_float_cells_is_zero_not_an_error(n: int, value: float) -> None:
    """Rounding over n additions grows with n: it is no inconsistency (was a ConstraintError)."""
    values = np.full((n, 1), value)
    labels = {"sample_labels": ["s0"] * n, "group_labels": ["B"] * n}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotCountsWarning)
        cube = from_cells(values, **labels, layers=("counts", "squares"))
    assert 0.0 <= np.asarray(cube.variance())[0, 0, 0] <= 1e-9 * value**2


@pytest.mark.parametrize("value", [0.3, 0.7, 1.3])
def test_variance_tolerates_the_rounding_of_a_float32_layer(value: float) -> None:
    """Sums added up in float32 are off by float32's rounding, not float64's."""
    cells = np.full(1000, value, dtype=np.float32)
    counts = np.cumsum(cells)[-1:].reshape(1, 1, 1)  # one addition after another
    squares = np.cumsum(cells * cells)[-1:].reshape(1, 1, 1)
    assert squares[0, 0, 0] < counts[0, 0, 0].astype(np.float64) ** 2 / 1000  # rounding says < 0
    cube = Cube(
        {"counts": counts, "squares": squares},
        samples=pd.DataFrame({"sample_id": ["s1"]}),
        groups=pd.DataFrame({"group_id": ["T"]}),
        features=pd.DataFrame({"feature_id": ["a"]}),
        cells=[[1000]],
    )
    assert np.asarray(cube.variance())[0, 0, 0] == 0.0


def test_variance_of_large_integers_is_exact() -> None:
    """Integer sums whose n·Σx² and (Σx)² do not fit int64: still the exact value, rounded once."""
    from fractions import Fraction

    rng = np.random.default_rng(6)
    values = rng.integers(0, 2**27, (50, 4))
    cells = Cells(values, np.array(["s1"] * 50), np.array(["T"] * 50))
    cube = cells.cube(np.int64)
    assert int(cube.to_numpy("counts").max()) ** 2 > 2**63  # past int64
    found = np.asarray(cube.variance())[2, 1]
    sums, squares = values.astype(object).sum(axis=0), (values.astype(object) ** 2).sum(axis=0)
    exact = [float(Fraction(50 * q - s * s, 50 * 49)) for q, s in zip(squares, sums, strict=True)]
    np.testing.assert_array_equal(found, np.array(exact))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.mean("umis"), UnknownIdError, r"mean needs the layer 'umis'"),
        (
            lambda c: c.select(features=[]).variance(layer="detected"),
            InputError,
            r"name the layer holding the sums of squares of 'detected' with squares=",
        ),
        (lambda c: c.variance(ddof=-1), InputError, r"ddof must be >= 0, found -1"),
        (lambda c: c.variance(ddof=1.0), InputTypeError, r"ddof must be an integer"),
        (lambda c: c.variance(squares="sq"), UnknownIdError, r"variance needs the layer 'sq'"),
        (lambda c: c.mean(["counts"]), InputTypeError, r"mean: expected a layer's name \(a str"),
        (lambda c: c.variance(squares=1), InputTypeError, r"variance: expected a layer's name"),
    ],
)
def test_statistic_errors(cube: Cube, call: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call(cube)


def test_missing_squares_and_detected_layers_say_how_to_pool_them(cells: Cells) -> None:
    bare = cells.cube(squares=False)
    with pytest.raises(KeyError, match=r"needs the layer 'squares'.*layers=\(\.\.\., 'squares'\)"):
        bare.variance()
    counts_only = bare.select(groups=["B"])
    counts_only = Cube(
        {"counts": counts_only.to_numpy("counts")},
        samples=counts_only.samples,
        groups=counts_only.groups,
        features=counts_only.features,
        cells=counts_only.cells,
    )
    with pytest.raises(UnknownIdError, match=r"fraction_detected needs the layer 'detected'"):
        counts_only.fraction_detected()
    with pytest.raises(UnknownIdError, match=r"filter_by_prop needs the layer 'detected'"):
        counts_only.filter_by_prop()


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_inconsistent_squares_are_a_constraint_error(dtype: Any) -> None:
    counts = np.array([[[4, 6]]], dtype=dtype)
    squares = np.array([[[8, 10]]], dtype=dtype)  # 2 cells summing 6 need Σx² >= 18
    cube = Cube(
        {"counts": counts, "squares": squares},
        samples=pd.DataFrame({"sample_id": ["s1"]}),
        groups=pd.DataFrame({"group_id": ["T"]}),
        features=pd.DataFrame({"feature_id": ["a", "b"]}),
        cells=[[2]],
    )
    what = "n·Σx² − (Σx)²" if dtype == np.int64 else "Σx² − (Σx)²/n"
    with pytest.raises(ConstraintError, match=rf"feature 'b'.*\({re.escape(what)} = -.*squares"):
        cube.variance().profiles("T")


# --------------------------------------------------------------------------- filters


def test_filter_profiles_empties_profiles_lazily(cube: Cube) -> None:
    totals = cube.to_numpy("counts").sum(axis=2)
    kept = cube.filter_profiles(min_cells=30, min_counts=200)
    keep = (cube.cells >= 30) & (totals >= 200)
    assert 0 < keep.sum() < np.count_nonzero(cube.cells)
    np.testing.assert_array_equal(kept.cells, np.where(keep, cube.cells, 0))
    for name in cube.layers:
        np.testing.assert_array_equal(
            kept.to_numpy(name), np.where(keep[..., None], cube.to_numpy(name), 0)
        )
    assert np.isnan(np.asarray(kept.mean())[~keep]).all()
    assert kept.provenance[-1].operation == "filter_profiles"
    assert kept.provenance[-1].parameters == {"min_cells": 30, "min_counts": 200, "layer": "counts"}
    numpy_numbers = cube.filter_profiles(min_cells=np.int64(30), min_counts=np.float32(200))
    assert numpy_numbers.provenance[-1].parameters["min_cells"] == 30
    np.testing.assert_array_equal(numpy_numbers.cells, kept.cells)
    unchanged = cube.filter_profiles(min_cells=0, min_counts=0)
    assert unchanged.fingerprint == cube.fingerprint


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.filter_profiles(min_cells=-1), InputError, r"min_cells must be a finite"),
        (lambda c: c.filter_profiles(min_counts="9"), InputTypeError, r"min_counts must be a"),
        (lambda c: c.filter_profiles(layer="umi"), UnknownIdError, r"no layer 'umi'"),
        (lambda c: c.filter_features(min_prop=1.5), InputError, r"min_prop must be .* <= 1.0"),
        (lambda c: c.filter_features(group="sex"), UnknownIdError, r"no column 'sex'"),
        (lambda c: c.filter_features(group=1), InputTypeError, r"group must be a column name"),
        (lambda c: c.filter_by_prop(min_samples=np.nan), InputError, r"min_samples must be"),
        # integers past the largest float64
        (lambda c: c.filter_profiles(min_cells=10**400), InputError, r"min_cells must be a fin"),
        (lambda c: c.filter_features(min_count=10**400), InputError, r"min_count must be a fin"),
        (lambda c: c.filter_by_prop(min_samples=-(10**400)), InputError, r"min_samples must"),
        (lambda c: c.filter_by_prop(min_prop=Fraction(3, 2)), InputError, r"min_prop must be"),
    ],
)
def test_filter_errors(cube: Cube, call: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call(cube)


def test_filter_thresholds_may_be_fractions(cube: Cube) -> None:
    ours = cube.filter_profiles(min_cells=Fraction(61, 2), min_counts=Fraction(200))
    np.testing.assert_array_equal(ours.cells, cube.filter_profiles(min_cells=30.5).cells)
    assert ours.provenance[-1].parameters["min_cells"] == 30.5  # recorded as a float
    by_prop = cube.filter_by_prop(min_prop=Fraction(1, 3), min_samples=Fraction(2))
    assert by_prop.features.equals(cube.filter_by_prop(min_prop=1 / 3, min_samples=2).features)
    assert by_prop.provenance[-1].parameters == {"min_prop": 1 / 3, "min_samples": 2.0}
    expr = cube.filter_features(min_count=Fraction(5), min_prop=Fraction(7, 10))
    assert expr.features.equals(cube.filter_features(min_count=5, min_prop=0.7).features)


@pytest.mark.parametrize(
    "condition",
    [
        ["x", None],
        [1.0, np.nan],
        pd.array([1, pd.NA], dtype="Int64"),
        pd.array([True, pd.NA], dtype="boolean"),
        pd.array(["x", pd.NA], dtype="string[python]"),
        pd.Categorical(["x", None]),
        pd.to_datetime(["2024-01-01", None]),
    ],
    ids=["None", "NaN", "Int64", "boolean", "string", "categorical", "NaT"],
)
def test_filter_features_needs_a_value_per_sample(condition: Any) -> None:
    cube = Cube(
        {"counts": np.ones((1, 2, 1), dtype=np.int64)},
        samples=pd.DataFrame({"sample_id": ["a", "b"], "condition": condition}),
        groups=pd.DataFrame({"group_id": ["T"]}),
        features=pd.DataFrame({"feature_id": ["f"]}),
        cells=[[1, 1]],
    )
    with pytest.raises(InputError, match=r"1 samples have no value in 'condition'.*\['b'\]"):
        cube.filter_features(group="condition")


def test_feature_filters_keep_the_union_over_groups(cube: Cube) -> None:
    for method in ("filter_features", "filter_by_prop"):
        each = [set(getattr(cube.select(groups=[g]), method)().features.index) for g in GROUPS]
        assert len({frozenset(s) for s in each}) > 1  # the groups disagree
        union = getattr(cube, method)()
        assert list(union.features.index) == [
            f for f in cube.features.index if any(f in s for s in each)
        ]
        assert union.provenance[-1].operation == method
        np.testing.assert_array_equal(
            union.to_numpy("counts"),
            cube.select(features=list(union.features.index)).to_numpy("counts"),
        )


# --------------------------------------------------------------------------- decoupler


def to_anndata(cube: Cube) -> Any:
    from cytepool.io.anndata import to_anndata as convert

    return convert(cube)


@pytest.mark.parametrize(("min_cells", "min_counts"), [(10, 1000), (30, 200), (1, 0), (45, 2500)])
def test_filter_profiles_equals_decoupler_filter_samples(
    cube: Cube, min_cells: int, min_counts: int
) -> None:
    theirs = dc.pp.filter_samples(
        to_anndata(cube), min_cells=min_cells, min_counts=min_counts, inplace=False
    )
    ours = to_anndata(cube.filter_profiles(min_cells=min_cells, min_counts=min_counts))
    assert list(ours.obs_names) == list(theirs)


FILTER_BY_EXPR = [
    {},
    {"group": "condition"},
    {"min_count": 2, "min_total_count": 40, "group": "condition"},
    {"min_count": 5, "large_n": 2, "min_prop": 0.5},
    {"min_count": 0.5, "min_total_count": 0},
]


@pytest.mark.parametrize("group_id", GROUPS)
@pytest.mark.parametrize("options", FILTER_BY_EXPR, ids=str)
def test_filter_features_equals_decoupler_filter_by_expr(
    cube: Cube, group_id: str, options: dict[str, Any]
) -> None:
    one = cube.select(groups=[group_id])
    theirs = dc.pp.filter_by_expr(to_anndata(one), inplace=False, **options)
    ours = one.filter_features(**options)
    assert list(ours.features.index) == list(theirs)
    assert 0 < len(theirs) < cube.shape[2] or options.get("min_count") == 0.5


@pytest.mark.parametrize("group_id", GROUPS)
@pytest.mark.parametrize(("min_prop", "min_samples"), [(0.1, 2), (0.2, 2), (0.5, 1), (0.3, 4)])
def test_filter_by_prop_equals_decoupler(
    cube: Cube, group_id: str, min_prop: float, min_samples: int
) -> None:
    one = cube.select(groups=[group_id])
    theirs = dc.pp.filter_by_prop(
        to_anndata(one), min_prop=min_prop, min_smpls=min_samples, inplace=False
    )
    ours = one.filter_by_prop(min_prop=min_prop, min_samples=min_samples)
    assert list(ours.features.index) == list(theirs)


def cells_anndata(cells: Cells) -> Any:
    ad = pytest.importorskip("anndata")
    obs = pd.DataFrame(
        {"sample": pd.Categorical(cells.samples), "cell_type": pd.Categorical(cells.groups)},
        index=[f"c{i}" for i in range(len(cells.samples))],
    )
    var = pd.DataFrame(index=[f"g{j}" for j in range(cells.counts.shape[1])])
    return ad.AnnData(X=cells.counts.astype(np.float32), obs=obs, var=var)


def test_to_anndata_columns_equal_decoupler_pseudobulk(cells: Cells, cube: Cube) -> None:
    theirs = dc.pp.pseudobulk(cells_anndata(cells), sample_col="sample", groups_col="cell_type")
    ours = to_anndata(cube)
    theirs = theirs[list(ours.obs_names)]  # the same names: "<sample>_<group>"
    for column in ("psbulk_cells", "psbulk_counts"):
        np.testing.assert_array_equal(ours.obs[column], theirs.obs[column])
    np.testing.assert_array_equal(ours.layers["psbulk_props"], theirs.layers["psbulk_props"])
    np.testing.assert_array_equal(ours.obs["psbulk_cells"], ours.obs["n_cells"])


def test_decoupler_plots_run_on_to_anndata_output(cube: Cube) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    adata = to_anndata(cube)
    figure = dc.pl.filter_samples(adata, groupby="group_id", return_fig=True)
    assert figure is not None
    figure = dc.pl.filter_by_prop(adata, return_fig=True)
    assert figure is not None


def test_from_pseudobulk_reads_decoupler_props_as_detected(cells: Cells, cube: Cube) -> None:
    from cytepool.io.anndata import from_pseudobulk

    theirs = dc.pp.pseudobulk(cells_anndata(cells), sample_col="sample", groups_col="cell_type")
    back = from_pseudobulk(theirs, sample_key="sample", group_key="cell_type")
    assert list(back.layers) == ["counts", "detected"]
    np.testing.assert_array_equal(back.to_numpy("detected"), cube.to_numpy("detected"))
    ours = to_anndata(cube)
    del ours.uns["cytepool"]
    again = from_pseudobulk(ours)
    np.testing.assert_array_equal(again.to_numpy("detected"), cube.to_numpy("detected"))
    assert list(again.samples.columns) == ["donor", "condition"]
    assert list(again.groups.columns) == ["lineage"]


def test_from_pseudobulk_with_a_record_ignores_decoupler_names(cube: Cube) -> None:
    from cytepool.io.anndata import from_pseudobulk

    adata = to_anndata(cube)
    assert from_pseudobulk(adata).fingerprint == cube.fingerprint
    filtered = adata.copy()
    dc.pp.filter_samples(filtered, min_cells=30, min_counts=200)
    dc.pp.filter_by_prop(filtered, min_prop=0.2, min_smpls=2)
    back = from_pseudobulk(filtered)
    assert list(back.layers) == ["counts", "detected", "squares"]
    assert list(back.features.index) == list(filtered.var_names)


def test_props_that_are_not_fractions_of_cells_are_an_error(cube: Cube) -> None:
    from cytepool.io.anndata import from_pseudobulk

    adata = to_anndata(cube)
    del adata.uns["cytepool"]
    adata.layers["psbulk_props"] = (
        adata.layers["psbulk_props"] + 0.3 / adata.obs["n_cells"].to_numpy()[:, None]
    )
    with pytest.raises(InputError, match=r"layers\['psbulk_props'\] x cells is not a number"):
        from_pseudobulk(adata)


def test_filters_compose_with_cytepool_exports(cube: Cube) -> None:
    """The DE recipe: filter profiles, then features per group, then export one group."""
    kept = cube.filter_profiles(min_cells=10, min_counts=100)
    one = kept.select(groups=["B"]).filter_features(group="condition")
    adata = to_anndata(one)
    expected = to_anndata(cube.select(groups=["B"]))
    dc.pp.filter_samples(expected, min_cells=10, min_counts=100)
    dc.pp.filter_by_expr(expected, group="condition")
    assert list(adata.obs_names) == list(expected.obs_names)
    assert list(adata.var_names) == list(expected.var_names)
    np.testing.assert_array_equal(adata.X, expected.X)
