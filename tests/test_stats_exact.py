"""Statistics decided per value (issue 22): integer layers give the exact variance and mean,
rounded once to float64, whatever their size and whatever is read with them."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cytepool
from cytepool import Cube
from cytepool.errors import ConstraintError

TOP = {np.int64: 2**63 - 1, np.uint64: 2**64 - 1}


def exact_variance(n: int, s: int, q: int, ddof: int) -> float:
    """The variance of a profile from its sums, as an exact fraction rounded once."""
    if n <= ddof:
        return math.nan
    return float(Fraction(n * q - s * s, n * (n - ddof)))


def exact_mean(n: int, s: int) -> float:
    return math.nan if n == 0 else float(Fraction(s, n))


def cube_of(counts: Any, squares: Any, cells: Any) -> Cube:
    """A cube of one group "T" with samples s0, s1, ... and features f0, f1, ..."""
    counts, squares = np.asarray(counts), np.asarray(squares)
    _, n_samples, n_features = counts.shape
    return Cube(
        {"counts": counts, "squares": squares},
        samples=pd.DataFrame({"sample_id": [f"s{i}" for i in range(n_samples)]}),
        groups=pd.DataFrame({"group_id": ["T"]}),
        features=pd.DataFrame({"feature_id": [f"f{j}" for j in range(n_features)]}),
        cells=np.asarray(cells, dtype=np.int64).reshape(1, n_samples),
    )


def reference(cube: Cube, ddof: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact variance and mean of every value of group 0, from Python integers."""
    n = [int(v) for v in cube.cells[0]]
    sums, squares = cube.profiles(0).tolist(), cube.profiles(0, "squares").tolist()
    variance = [
        [exact_variance(n[i], s, q, ddof) for s, q in zip(sums[i], squares[i], strict=True)]
        for i in range(len(n))
    ]
    mean = [[exact_mean(n[i], s) for s in sums[i]] for i in range(len(n))]
    return np.array(variance), np.array(mean)


# --------------------------------------------------------------------------- the issue's case


def issue_cube() -> tuple[Cube, np.ndarray]:
    rng = np.random.default_rng(0)
    x = (2**20 + rng.integers(0, 4, size=(8000, 1))).astype(np.int64)
    labels = {"sample_labels": ["s1"] * 2000 + ["s2"] * 6000, "group_labels": ["A"] * 8000}
    return cytepool.from_cells(x, **labels, layers=("counts", "squares")), x


def test_a_profile_variance_does_not_depend_on_what_is_read_with_it() -> None:
    cube, x = issue_cube()
    whole = cube.variance().profiles("A")
    assert int(cube.profiles("A")[1, 0]) ** 2 > 2**63  # s2's (Σx)² is past int64
    for i, sample in enumerate(["s1", "s2"]):
        alone = cube.select(samples=[sample]).variance().profiles("A")
        assert alone[0, 0] == whole[i, 0]
        rows = x[:2000, 0] if sample == "s1" else x[2000:, 0]
        n, s, q = len(rows), sum(map(int, rows)), sum(int(v) ** 2 for v in rows)
        assert whole[i, 0] == exact_variance(n, s, q, ddof=1)
    assert whole[0, 0] == np.var(x[:2000], ddof=1)  # numpy's, here rounded the same way


def test_the_exact_variance_is_the_same_in_memory_and_read_from_a_file(tmp_path: Path) -> None:
    from cytepool.io import read_cube, write_cube

    cube, _ = issue_cube()
    write_cube(cube, tmp_path / "c.cube.zarr")
    lazy = read_cube(tmp_path / "c.cube.zarr")
    expected = np.asarray(cube.variance())
    np.testing.assert_array_equal(np.asarray(lazy.variance()), expected)
    for i, sample in enumerate(["s1", "s2"]):
        alone = lazy.select(samples=[sample]).variance()[0]
        np.testing.assert_array_equal(alone, expected[0, i : i + 1])
    np.testing.assert_array_equal(np.asarray(lazy.mean()), np.asarray(cube.mean()))


def test_a_cube_pooled_on_dask_gives_the_same_exact_variance() -> None:
    da = pytest.importorskip("dask.array")
    cube, x = issue_cube()
    labels = {"sample_labels": ["s1"] * 2000 + ["s2"] * 6000, "group_labels": ["A"] * 8000}
    lazy = cytepool.from_cells(da.from_array(x, chunks=(1500, 1)), **labels, layers=cube.layers)
    np.testing.assert_array_equal(np.asarray(lazy.variance()), np.asarray(cube.variance()))


# --------------------------------------------------------------------------- any size


@st.composite
def profile_sums(draw: Any, n: int, top: int) -> tuple[int, int]:
    """``(Σx, Σx²)`` of a profile of ``n`` cells that real values could have: n·Σx² >= (Σx)²,
    near the bound (a tiny variance of large values) or anywhere below ``top``."""
    if n == 0:
        return 0, 0
    if draw(st.booleans()):
        s = draw(st.integers(0, min(top, math.isqrt(n * top))))
        q = min(top, -(-s * s // n) + draw(st.integers(0, 2**20)))
        return s, q
    q = draw(st.integers(0, top))
    return draw(st.integers(0, min(top, math.isqrt(n * q)))), q


CELLS = st.one_of(
    st.integers(0, 4),
    st.integers(5, 2**40),
    st.sampled_from(
        [94_906_265, 94_906_266, 3_037_000_499, 3_037_000_500, 2**53 + 1, 2**62, 2**62 + 3]
    ),
)


@st.composite
def cubes(draw: Any) -> Cube:
    dtype = draw(st.sampled_from([np.int64, np.uint64]))
    n_samples, n_features = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    cells = draw(st.lists(CELLS, min_size=n_samples, max_size=n_samples))
    pairs = [[draw(profile_sums(n, TOP[dtype])) for _ in range(n_features)] for n in cells]
    sums = np.array([[[s for s, _ in row] for row in pairs]], dtype=dtype)
    squares = np.array([[[q for _, q in row] for row in pairs]], dtype=dtype)
    return cube_of(sums, squares, cells)


@settings(max_examples=80, deadline=None)
@given(cube=cubes(), ddof=st.integers(0, 3))
def test_integer_statistics_are_exact_per_value_at_any_size(cube: Cube, ddof: int) -> None:
    variance, mean = reference(cube, ddof)
    found = cube.variance(ddof=ddof).profiles("T")
    np.testing.assert_array_equal(found, variance)
    np.testing.assert_array_equal(cube.mean().profiles("T"), mean)
    _, n_samples, n_features = cube.shape
    for i in range(n_samples):  # each profile alone, and each value of the last feature
        alone = cube.select(samples=[i]).variance(ddof=ddof)
        np.testing.assert_array_equal(alone.profiles(0), found[i : i + 1])
        alone = cube.select(samples=[i], features=[n_features - 1]).variance(ddof=ddof)
        np.testing.assert_array_equal(alone.profiles(0), found[i : i + 1, -1:])


@pytest.mark.parametrize("dtype", [np.int32, np.uint64, np.float32, np.float64])
@pytest.mark.parametrize("n", [2**53 + 1, 2**62 + 3, 2**63 - 1])
def test_mean_and_fraction_of_more_than_2_53_cells_are_rounded_once(dtype: Any, n: int) -> None:
    sums = np.array([[[3, 0, 2**24 - 1]]], dtype=dtype)  # small sums: one division is not enough
    cube = Cube(
        {"counts": sums, "detected": sums},
        samples=pd.DataFrame({"sample_id": ["s"]}),
        groups=pd.DataFrame({"group_id": ["T"]}),
        features=pd.DataFrame({"feature_id": ["a", "b", "c"]}),
        cells=[[n]],
    )
    expected = [[float(Fraction(int(v), n)) for v in sums[0, 0]]]
    np.testing.assert_array_equal(cube.mean().profiles("T"), expected)
    np.testing.assert_array_equal(cube.fraction_detected().profiles("T"), expected)


@pytest.mark.parametrize(
    ("dtype", "top_mean", "top_cells"),
    [
        (np.int32, 2**7, 2**15),
        (np.uint32, 2**7, 2**15),
        (np.int64, 2**20, 2**22),
        (np.uint64, 2**20, 2**22),
    ],
)
def test_integer_layers_of_every_type_give_the_exact_variance(
    dtype: Any, top_mean: int, top_cells: int
) -> None:
    rng = np.random.default_rng(1)
    cells = np.array([1, 3, 700, top_cells])
    means = rng.integers(0, top_mean, (1, 4, 50))
    sums = means * cells[None, :, None]
    squares = sums * means + rng.integers(0, cells, (1, 50, 4)).transpose(0, 2, 1)  # tiny spread
    cube = cube_of(sums.astype(dtype), squares.astype(dtype), cells)
    for ddof in (0, 1):
        expected = reference(cube, ddof)[0]
        np.testing.assert_array_equal(cube.variance(ddof=ddof).profiles("T"), expected)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64, np.float64])
@pytest.mark.parametrize("ddof", [2**62, 2**63 - 1, 2**63, 10**30])
def test_a_ddof_of_any_size_gives_nan_where_cells_do_not_exceed_it(dtype: Any, ddof: int) -> None:
    cells = [2, 2**62 + 3, 2**63 - 1]
    cube = cube_of(np.full((1, 3, 1), 3, dtype=dtype), np.full((1, 3, 1), 5, dtype=dtype), cells)
    found = cube.variance(ddof=ddof).profiles("T")[:, 0]
    expected = [exact_variance(n, 3, 5, ddof) for n in cells]
    if np.dtype(dtype).kind == "f":  # float layers: within rounding
        np.testing.assert_allclose(found, expected, rtol=1e-12)
    else:
        np.testing.assert_array_equal(found, expected)
    assert np.isnan(found[2]) == (ddof >= 2**63 - 1)


def test_inconsistent_squares_past_int64_are_a_constraint_error() -> None:
    s = 2**40  # (Σx)² = 2**80 over 2 cells needs Σx² >= 2**79
    cube = cube_of([[[4, s], [0, 0]]], [[[8, 2**63 - 1], [0, 0]]], [2, 0])
    with pytest.raises(ConstraintError, match=r"group 'T', sample 's0', feature 'f1'.*= -"):
        cube.variance().profiles("T")
    cube = cube_of(np.array([[[0, s]]], np.uint64), np.array([[[0, 2**64 - 1]]], np.uint64), [2])
    with pytest.raises(ConstraintError, match=r"feature 'f1'.*the squares layer does not hold"):
        cube.variance(ddof=2).profiles("T")  # checked where the variance is undefined too


# --------------------------------------------------------------------------- float layers


def test_float_variance_is_decided_per_value_and_within_1e_12() -> None:
    rng = np.random.default_rng(7)
    x = rng.gamma(2.0, 3.0, (3000, 5))
    x[:1500, 0] += 1e6  # a large mean in one profile does not change the others
    labels = {"sample_labels": ["a"] * 1500 + ["b"] * 1500, "group_labels": ["T"] * 3000}
    cube = cytepool.from_cells(x, **labels, layers=("counts", "squares"), allow_float=True)
    assert cube.layers["squares"].dtype == np.float64
    whole = cube.variance().profiles("T")
    np.testing.assert_array_equal(cube.select(samples=["b"]).variance()[0], whole[1:])
    np.testing.assert_array_equal(cube.select(features=["1"]).variance()[0], whole[:, 1:2])
    expected = np.array([np.var(x[:1500], axis=0, ddof=1), np.var(x[1500:], axis=0, ddof=1)])
    np.testing.assert_allclose(whole[:, 1:], expected[:, 1:], rtol=1e-12)
    np.testing.assert_allclose(whole[1, 0], expected[1, 0], rtol=1e-12)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("squares", [1.0, 1e300, 1.7e308])
def test_float_squares_too_small_for_sums_whose_square_overflows_are_refused(
    squares: float,
) -> None:
    # Σx = 1e200 over 2 cells needs Σx² >= 5e399: no float64 Σx² belongs to it
    cube = cube_of([[[1e200]]], [[[squares]]], [[2]])
    with pytest.raises(ConstraintError, match=r"feature 'f0'.*Σx² − \(Σx\)²/n = -.*squares"):
        cube.variance().profiles("T")


def test_float_variance_of_large_values_whose_squares_fit() -> None:
    x = np.array([[1e153], [3e153]])  # (Σx)²/n = 8e306 fits, Σx² = 1e307
    cube = cube_of([[[x.sum()]]], [[[(x * x).sum()]]], [[2]])
    np.testing.assert_allclose(cube.variance().profiles("T"), [[np.var(x, ddof=1)]], rtol=1e-14)


# --------------------------------------------------------------------------- the arithmetic


@settings(max_examples=300, deadline=None)
@given(
    a=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=8),
    b=st.integers(1, 2**53),
    midpoint=st.booleans(),
)
def test_quotients_are_rounded_once(a: list[int], b: int, midpoint: bool) -> None:
    from cytepool._exact import quotient

    if midpoint:  # a / b = 2m + 1 of 54 bits, halfway between two float64 neighbours
        b = b % 2**9 + 1
        a = [b * (2 * (2**52 + v % 2**52) + 1) for v in a]
    found = quotient(np.array(a, dtype=np.int64), np.full(len(a), b, dtype=np.int64))
    np.testing.assert_array_equal(found, [float(Fraction(v, b)) for v in a])
