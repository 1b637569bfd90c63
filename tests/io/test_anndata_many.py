"""Many files, one cube: from_anndata / from_mudata_cells of a list of paths, and the CLI.

Every cube is compared, fingerprint included, with from_anndata of the same cells
concatenated in memory with anndata.concat.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sparse = pytest.importorskip("scipy.sparse")
pytest.importorskip("zarr")
pytest.importorskip("numcodecs")

from anndata_stores import filter_indices  # noqa: E402

from cytepool.cli import main  # noqa: E402
from cytepool.errors import (  # noqa: E402
    FormatError,
    InputError,
    InputTypeError,
    NotCountsWarning,
    SumOverflowError,
    UnknownIdError,
)
from cytepool.io import read_cube  # noqa: E402
from cytepool.io.anndata import from_anndata, from_mudata_cells  # noqa: E402
from cytepool.io.anndata._running import Runner  # noqa: E402

TYPES = ["B", "CD4 T", "NK"]
GENES = [f"g{j}" for j in range(12)]
KEYS = {"sample_key": "donor", "group_key": "cell_type"}
HERE = {"jobs": 1, "progress": False}  # in this process: most tests need no worker processes


def cells(i: int, *, n: int = 120, donors: list[str] | None = None, seed: int = 0) -> ad.AnnData:
    """File ``i``: whole-number counts, features in an order of its own, covariates of
    samples (batch, age) and of groups (lineage)."""
    rng = np.random.default_rng(seed + i)
    donors = donors if donors is not None else [f"d{i}a", f"d{i}b"]
    donor = rng.choice(donors, n)
    kind = rng.choice(TYPES, n)
    obs = pd.DataFrame(
        {
            "donor": pd.Categorical(donor),
            "cell_type": pd.Categorical(kind),
            "batch": pd.Categorical([f"b{i}"] * n),
            "age": [20 + 3 * donors.index(d) for d in donor],
            "lineage": ["lymphoid" if k != "B" else "B lineage" for k in kind],
            "quality": rng.random(n),
        },
        index=[f"f{i}c{j}" for j in range(n)],
    )
    counts = rng.poisson(0.7, (n, len(GENES))).astype(np.float32)
    var = pd.DataFrame({"symbol": [g.upper() for g in GENES]}, index=GENES)
    adata = ad.AnnData(sparse.csr_matrix(counts), obs=obs, var=var)
    order = rng.permutation(len(GENES)) if i else np.arange(len(GENES))
    return adata[:, order].copy()


def write(adata: ad.AnnData, path: Path, *, dense: bool = False) -> str:
    if dense:
        adata = adata.copy()
        adata.X = np.asarray(adata.X.toarray())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zarr v3 notes of some versions
        if path.suffix == ".zarr":
            adata.write_zarr(path)
        else:
            adata.write_h5ad(path)
    return str(path)


def expected(paths: list[str], **options: Any) -> Any:
    """from_anndata of the files' cells concatenated in memory (var columns kept when the
    same)."""
    label = options.pop("label", None)
    keys = options.pop("keys", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        adatas = [ad.read_zarr(p) if p.endswith(".zarr") else ad.read_h5ad(p) for p in paths]
        together = ad.concat(adatas, merge="same", label=label, keys=keys)
    return from_anndata(together, **options)


def same_cube(cube: Any, reference: Any) -> None:
    assert cube.fingerprint == reference.fingerprint
    for name in ("samples", "groups", "features"):
        pd.testing.assert_frame_equal(getattr(cube, name), getattr(reference, name))
    for name in reference.layers:
        np.testing.assert_array_equal(cube.to_numpy(name), reference.to_numpy(name))
        assert cube.layers[name].dtype == reference.layers[name].dtype


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    return [write(cells(i), tmp_path / f"part{i}.h5ad") for i in range(3)]


# ---------------------------------------------------------------------------------------------
# The same cube as in memory
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("suffixes", "dense", "jobs"),
    [
        ((".h5ad", ".h5ad", ".h5ad"), False, 1),
        ((".h5ad", ".zarr", ".h5ad"), True, 1),
        ((".zarr", ".h5ad", ".zarr"), False, 2),
    ],
    ids=["h5ad-csr", "mixed-dense", "zarr-csr-processes"],
)
def test_many_files_equal_the_cells_concatenated(
    tmp_path: Path, suffixes: tuple[str, ...], dense: bool, jobs: int
) -> None:
    adatas = [cells(i) for i in range(3)]
    paths = [
        write(a, tmp_path / f"part{i}{suffix}", dense=dense and i == 1)
        for i, (a, suffix) in enumerate(zip(adatas, suffixes, strict=True))
    ]
    options = {**KEYS, "layers": ("counts", "detected", "squares")}
    cube = from_anndata(paths, jobs=jobs, progress=False, **options)
    reference = expected(paths, **options)
    same_cube(cube, reference)
    assert list(cube.samples.columns) == ["batch", "age"]
    assert list(cube.groups.columns) == ["lineage"]
    assert list(cube.features.index) == GENES  # the first file's order
    covariates = cube.provenance[-1].parameters["covariates"]
    alike = reference.provenance[-1].parameters["covariates"]
    assert {**covariates, "dropped": list(covariates["dropped"])} == {
        **alike,
        "dropped": list(alike["dropped"]),
    }
    assert covariates["dropped"]["quality"].startswith("varies within sample 'd0b' (")
    assert covariates["dropped"]["quality"].endswith(f"in {paths[0]}")
    records = cube.provenance[:-1]
    assert [r.operation for r in records] == ["pool_file"] * 3
    for record, path in zip(records, paths, strict=True):
        alone = from_anndata(path, **options)
        assert record.parameters["path"] == path
        assert record.parameters["cells"] == 120
        assert record.parameters["bytes"] > 0
        assert record.inputs == (alone.fingerprint,)
    assert cube.provenance[-1].inputs == tuple(r.inputs[0] for r in records)


def test_a_covariate_that_differs_between_files_is_dropped(tmp_path: Path) -> None:
    adatas = [cells(i, donors=["x", "y"] if i < 2 else ["z"]) for i in range(3)]
    adatas[1].obs["age"] += 1  # same donors, another age: not a sample covariate
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    cube = from_anndata(paths, **KEYS, **HERE, duplicates="add")
    reference = expected(paths, **KEYS)
    same_cube(cube, reference)
    dropped = cube.provenance[-1].parameters["covariates"]["dropped"]
    assert "varies within sample 'x' (20 in " in dropped["age"]
    assert "batch" in dropped
    with pytest.raises(InputError, match=r"column 'age' varies within sample 'x' .*samples="):
        from_anndata(paths, **KEYS, **HERE, samples=["age"], duplicates="add")


def test_a_categorical_missing_in_a_whole_file_stays_categorical(tmp_path: Path) -> None:
    """A file whose column holds no value reads back with categories of no type (object),
    which pandas 3 will not unite with the others' (str): as concatenated in memory, the
    covariate stays a categorical."""
    adatas = [cells(i) for i in range(2)]
    adatas[0].obs["site"] = pd.Categorical(["Lyon"] * 120)
    adatas[1].obs["site"] = pd.Categorical([None] * 120, categories=pd.Index([], dtype=object))
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    cube = from_anndata(paths, **KEYS, **HERE)
    same_cube(cube, expected(paths, **KEYS))
    assert isinstance(cube.samples["site"].dtype, pd.CategoricalDtype)


CATEGORICALS = {
    "ordered alike": (["mild", "severe"], True, ["mild", "severe"], True),
    "ordered alike, not sorted": (["severe", "mild"], True, ["severe", "mild"], True),
    "unordered, other categories": (["y", "x"], False, ["z", "w"], False),
    "unordered, natural order": (["c10"], False, ["c2"], False),
    "ordered unlike": (["mild", "severe"], True, ["severe", "mild"], True),
    "ordered and unordered": (["mild", "severe"], True, ["mild", "severe"], False),
    "ordered numbers unlike": ([10, 2], True, [2, 10], True),
    "numbers and text": ([1], False, ["a"], False),
}


@pytest.mark.parametrize("case", CATEGORICALS)
def test_categorical_covariates_join_as_anndata_concat_does(tmp_path: Path, case: str) -> None:
    """Categories of the files joined as anndata.concat(merge="same") joins them: ordered
    kept when alike, the union in natural order when unordered, objects when ordered unlike
    (numbers as objects are dropped, text kept), so the cube is the one of the cells in
    memory, tables, dtypes and fingerprint."""
    first, first_ordered, second, second_ordered = CATEGORICALS[case]
    adatas = [cells(i) for i in range(2)]
    for adata, categories, ordered in (
        (adatas[0], first, first_ordered),
        (adatas[1], second, second_ordered),
    ):
        adata.obs["severity"] = pd.Categorical(
            [categories[0]] * adata.n_obs, categories=categories, ordered=ordered
        )
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    cube = from_anndata(paths, **KEYS, **HERE)
    same_cube(cube, expected(paths, **KEYS))


def test_an_ordered_categorical_stays_ordered(tmp_path: Path) -> None:
    adatas = [cells(i) for i in range(2)]
    for adata, value in zip(adatas, ["mild", "severe"], strict=True):
        adata.obs["severity"] = pd.Categorical(
            [value] * adata.n_obs, categories=["mild", "severe"], ordered=True
        )
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    severity = from_anndata(paths, **KEYS, **HERE).samples["severity"]
    assert severity.cat.ordered
    assert list(severity.cat.categories) == ["mild", "severe"]


def test_numbers_ordered_unlike_cannot_be_a_named_covariate(tmp_path: Path) -> None:
    """anndata.concat makes objects of them, which no table column holds."""
    adatas = [cells(i) for i in range(2)]
    for adata, categories in zip(adatas, ([10, 2], [2, 10]), strict=True):
        adata.obs["severity"] = pd.Categorical(
            [categories[0]] * adata.n_obs, categories=categories, ordered=True
        )
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    with pytest.raises(InputError, match=r"'severity' holds values a cube's table cannot hold"):
        from_anndata(paths, **KEYS, **HERE, samples=["severity"])


def test_a_covariate_of_two_numpy_types_is_promoted_as_in_memory(tmp_path: Path) -> None:
    """True in one file and 1 in another: int64, as concatenating the cells in memory gives
    (pandas alone would join them as objects, which no table column holds)."""
    adatas = [cells(i) for i in range(2)]
    adatas[0].obs["treated"] = True
    adatas[1].obs["treated"] = 1
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    cube = from_anndata(paths, **KEYS, **HERE)
    same_cube(cube, expected(paths, **KEYS))
    assert cube.samples["treated"].dtype == np.dtype("int64")


@pytest.mark.parametrize("named", [False, True])
def test_a_covariate_of_two_types_without_a_common_one_is_dropped(
    tmp_path: Path, named: bool
) -> None:
    """Text in one file (read back as a categorical) and numbers in another have no common
    type: the column is not a covariate (the reason names both types and files), and naming
    it is an error."""
    adatas = [cells(i) for i in range(2)]
    adatas[0].obs["seen"] = "early"
    adatas[1].obs["seen"] = 3
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    reason = f"is category in {paths[0]} and int64 in {paths[1]}"
    if named:
        with pytest.raises(InputError, match=f"column 'seen' {re.escape(reason)}: it cannot"):
            from_anndata(paths, **KEYS, **HERE, samples=["seen"])
        return
    cube = from_anndata(paths, **KEYS, **HERE)
    assert cube.provenance[-1].parameters["covariates"]["dropped"]["seen"].startswith(reason)
    assert "seen" not in cube.samples.columns
    assert "seen" not in cube.groups.columns


LABELS_APART = {
    "1 and 1.0": (1, 1.0, r"are equal but read differently \('1' and '1\.0'\)"),
    "True and 1": (True, 1, r"are equal but read differently \('True' and '1'\)"),
    "1 and '1'": (1, "1", r"'1' \(str\) in .*p1\.h5ad differ but read the same, '1'"),
}


@pytest.mark.parametrize("case", LABELS_APART)
def test_labels_that_do_not_match_their_ids_across_files_are_an_error(
    tmp_path: Path, case: str
) -> None:
    """The rule of from_cells over the files: labels of two files that are equal but read
    differently, or that read the same but differ, are refused, never split or merged."""
    first, second, match = LABELS_APART[case]
    adatas = [cells(i) for i in range(2)]
    for adata, label in zip(adatas, (first, second), strict=True):
        adata.obs["donor"] = label
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    where = r"column 'donor' of the files' obs \(sample_key\): the labels .*p0\.h5ad and "
    with pytest.raises(InputError, match=where + ".*" + match + ".*one type first in every file"):
        from_anndata(paths, **KEYS, **HERE)


def test_labels_equal_and_read_the_same_across_files_are_one_id(tmp_path: Path) -> None:
    """1.0 (float64) in one file and 1.0 (float32) in another: one sample, as in memory."""
    adatas = [cells(i) for i in range(2)]
    adatas[0].obs["donor"] = 1.0
    adatas[1].obs["donor"] = np.float32(1.0)
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    cube = from_anndata(paths, **KEYS, **HERE, duplicates="add")
    same_cube(cube, expected(paths, **KEYS))
    assert list(cube.samples.index) == ["1.0"]


MISSING_IN_A_FILE = {
    "text": ["frozen"] * 120,
    "nullable integers": pd.array([3] * 120, dtype="Int64"),
    "nullable booleans": pd.array([True] * 120, dtype="boolean"),
}


@pytest.mark.parametrize("first", [True, False], ids=["file with values first", "second"])
@pytest.mark.parametrize("case", MISSING_IN_A_FILE)
def test_a_covariate_missing_in_a_whole_file_joins_as_in_memory(
    tmp_path: Path, case: str, first: bool
) -> None:
    """A column whose values are all missing (NaN, float64) in one file takes the type
    pandas gives it when anndata.concat joins the files' obs (that of the other file with
    pandas < 3, objects or floats with pandas 3): no conflict of types."""
    adatas = [cells(i) for i in range(2)]
    adatas[0 if first else 1].obs["note"] = MISSING_IN_A_FILE[case]
    adatas[1 if first else 0].obs["note"] = np.nan
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    cube = from_anndata(paths, **KEYS, **HERE)
    reference = expected(paths, **KEYS)
    same_cube(cube, reference)
    if case != "nullable booleans":  # pandas 3 joins True and NaN as objects: not storable
        assert "note" in cube.samples.columns


def test_text_of_other_categories_and_a_file_without_it_join_as_in_memory(
    tmp_path: Path,
) -> None:
    """Text read back as categoricals of other categories in two files, missing (NaN) in a
    third: anndata.concat joins them as text (objects), which a table holds: kept."""
    adatas = [cells(i) for i in range(3)]
    for adata, note in zip(adatas, ["x", "y", np.nan], strict=True):
        adata.obs["note"] = note
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    cube = from_anndata(paths, **KEYS, **HERE)
    same_cube(cube, expected(paths, **KEYS))
    assert "note" in cube.samples.columns


def test_a_var_column_of_equal_values_and_two_types_is_dropped_as_in_memory(
    tmp_path: Path,
) -> None:
    """1.0 (float64) in one file and 1 (int64) in another: not the same column, as
    anndata.concat(merge="same") finds it; naming it is an error that names both types."""
    adatas = [cells(i) for i in range(2)]
    adatas[0].var["chrom"] = (np.arange(len(GENES)) % 3).astype(np.float64)
    adatas[1].var["chrom"] = (np.arange(len(GENES)) % 3).astype(np.int64)[
        [GENES.index(g) for g in adatas[1].var_names]
    ]
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    cube = from_anndata(paths, **KEYS, **HERE)
    same_cube(cube, expected(paths, **KEYS))
    assert list(cube.features.columns) == ["symbol"]
    assert cube.provenance[-1].parameters["features"]["dropped_columns"] == ["chrom"]
    with pytest.raises(
        InputError,
        match=r"feature column 'chrom' differs between .*p0\.h5ad and .*p1\.h5ad \(of type "
        r"float64 and int64\): a feature table column must be the same, values and type",
    ):
        from_anndata(paths, **KEYS, **HERE, features=["symbol", "chrom"])


def test_features_that_differ_are_an_error_or_their_intersection(tmp_path: Path) -> None:
    adatas = [cells(i) for i in range(3)]
    adatas[2] = adatas[2][:, [g for g in adatas[2].var_names if g not in {"g3", "g7"}]].copy()
    adatas[1].var_names = [("extra" if g == "g5" else g) for g in adatas[1].var_names]
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    with pytest.raises(
        InputError,
        match=r"not have the same features: .*p1\.h5ad has 1 that .*p0\.h5ad lacks \('extra'\) "
        r"and lacks 1 of its \('g5'\).*pass features='intersection'",
    ):
        from_anndata(paths, **KEYS, **HERE)
    cube = from_anndata(paths, **KEYS, **HERE, features="intersection")
    reference = expected(paths, **KEYS)
    same_cube(cube, reference)
    assert list(cube.features.index) == [g for g in GENES if g not in {"g3", "g5", "g7"}]
    record = cube.provenance[-1].parameters["features"]
    assert record == {"ids": "intersection", "n": 9, "dropped_columns": []}


def test_a_profile_in_two_files_is_an_error_unless_added(tmp_path: Path) -> None:
    adatas = [cells(i, donors=["same"]) for i in range(2)]
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    with pytest.raises(
        InputError,
        match=r"group 'B' and sample 'same' is in two files, .*p0\.h5ad and .*p1\.h5ad "
        r"\(3 such profiles\); .*pass duplicates='add'",
    ):
        from_anndata(paths, **KEYS, **HERE)
    cube = from_anndata(paths, **KEYS, **HERE, duplicates="add")
    same_cube(cube, expected(paths, **KEYS))
    assert int(np.sum(cube.cells)) == 240


OVERFLOWS = {
    # one file's squares fit int64, three files' do not
    "squares": (np.int64(2**31 - 1), 3, ("counts", "squares"), "a sum of squares of", "f2"),
    # one file's float64 sum of counts is finite, two files' is not
    "counts": (np.float64(1e308), 2, ("counts",), "a sum of", "f1"),
}


@pytest.mark.parametrize("layer", OVERFLOWS)
def test_an_overflow_of_the_files_sums_names_the_profile_and_the_file(
    tmp_path: Path, layer: str
) -> None:
    """As for one file (the cells concatenated in memory): a SumOverflowError naming the
    layer, group and sample, with advice for from_anndata; and the file added last."""
    value, n_files, layers, words, last = OVERFLOWS[layer]
    paths = []
    for i in range(n_files):
        obs = pd.DataFrame({"donor": ["d1"], "cell_type": ["B"]}, index=[f"c{i}"])
        adata = ad.AnnData(np.full((1, 1), value), obs=obs, var=pd.DataFrame(index=["g0"]))
        paths.append(write(adata, tmp_path / f"f{i}.h5ad"))
    where = rf"layer '{layer}': {words} group 'B' in sample 'd1'"
    with pytest.raises(SumOverflowError, match=where + " does not fit"):
        expected(paths, **KEYS, layers=layers, allow_float=True)
    match = where + rf", with the sums of \S*{last}\.h5ad added, does not fit its data type"
    with pytest.raises(SumOverflowError, match=match + r".*expected smaller sums"):
        from_anndata(paths, **KEYS, **HERE, layers=layers, allow_float=True, duplicates="add")


def _overflow_files(tmp_path: Path, fraction: bool) -> list[str]:
    """File ``b``: whole numbers whose int64 squares do not fit alone; file ``a``: one cell,
    0.5 (a value that makes the layers float64) or 1."""
    big = 2**31 - 1
    paths = []
    for name, rows, donor in (
        ("a", [[0.5 if fraction else 1.0, 1.0]], "d1"),
        ("b", [[big, 1.0]] * 3, "d2"),
    ):
        obs = pd.DataFrame(
            {"donor": [donor] * len(rows), "cell_type": ["T"] * len(rows)},
            index=[f"{name}{i}" for i in range(len(rows))],
        )
        adata = ad.AnnData(np.array(rows), obs=obs, var=pd.DataFrame(index=["g0", "g1"]))
        paths.append(write(adata, tmp_path / f"{name}.h5ad"))
    return paths


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("order", [1, -1])
def test_a_file_whose_squares_overflow_int64_pools_in_float64_when_another_is_float(
    tmp_path: Path, jobs: int, order: int
) -> None:
    """File b alone is whole numbers whose int64 sums of squares do not fit; file a holds 0.5,
    so the cells concatenated give float64 layers, and so do the files, in either order
    (file b raised SumOverflowError before anything was added up)."""
    paths = _overflow_files(tmp_path, fraction=True)[::order]
    options = {**KEYS, "layers": ("counts", "detected", "squares"), "allow_float": True}
    cube = from_anndata(paths, **options, jobs=jobs, progress=False)
    same_cube(cube, expected(paths, **options))
    assert cube.to_numpy("squares").dtype == np.float64
    assert cube.to_numpy("squares")[0, :, 0].tolist() == [0.25, 3 * float(2**31 - 1) ** 2]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_file_whose_squares_overflow_int64_among_whole_numbers_is_an_error(
    tmp_path: Path, jobs: int
) -> None:
    """Every file whole numbers: the layers are int64, and file b's sum of squares does not
    fit, as for the cells concatenated; the error names the file, the group and the sample."""
    paths = _overflow_files(tmp_path, fraction=False)
    options = {**KEYS, "layers": ("counts", "squares")}
    where = "layer 'squares': a sum of squares of group 'T' in sample 'd2' does not fit"
    with pytest.raises(SumOverflowError, match=where):
        expected(paths, **options)
    with pytest.raises(SumOverflowError, match=rf"\S*b\.h5ad: {where}"):
        from_anndata(paths, **options, jobs=jobs, progress=False)


def test_one_sample_per_file(tmp_path: Path) -> None:
    adatas = [cells(i) for i in range(3)]
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    ids = ["s1", "s2", "s0"]
    cube = from_anndata(paths, group_key="cell_type", sample_ids=ids, **HERE)
    reference = expected(paths, group_key="cell_type", sample_key="file", label="file", keys=ids)
    same_cube(cube, reference)
    assert list(cube.samples.index) == ["s0", "s1", "s2"]
    assert list(cube.samples.columns) == ["batch"]
    assert [r.parameters["sample"] for r in cube.provenance[:-1]] == ids


def test_arguments_of_many_files_are_checked(files: list[str]) -> None:
    paths = files
    cases = [
        ({"sample_ids": ["a"], "group_key": "cell_type"}, InputError, "1 ids for 3 files"),
        ({**KEYS, "sample_ids": ["a", "b", "c"]}, InputError, "not both"),
        ({"group_key": "cell_type"}, InputError, "give sample_key= .* or sample_ids="),
        ({**KEYS, "duplicates": "sum"}, InputError, "duplicates must be 'error' or 'add'"),
        ({**KEYS, "jobs": 0}, InputError, "jobs must be a positive integer"),
        ({**KEYS, "features": "union"}, InputError, "'intersection', found 'union'"),
    ]
    for options, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            from_anndata(paths, **options, progress=False)
    with pytest.raises(InputError, match="is given twice"):
        from_anndata([paths[0], paths[1], paths[0]], **KEYS, **HERE)
    with pytest.raises(InputError, match="at least one path"):
        from_anndata([], **KEYS)
    with pytest.raises(InputError, match="sample_ids= names the sample of each file"):
        from_anndata(paths[0], group_key="cell_type", sample_key="donor", sample_ids=["a"])


# ---------------------------------------------------------------------------------------------
# Failing files
# ---------------------------------------------------------------------------------------------


def test_a_failing_file_stops_the_run_naming_it(tmp_path: Path) -> None:
    adatas = [cells(i) for i in range(3)]
    adatas[1].obs = adatas[1].obs.rename(columns={"donor": "individual"})
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    for jobs in (1, 2):
        with pytest.raises(UnknownIdError, match=r"'donor' is not a column of obs of .*p1\.h5ad"):
            from_anndata(paths, **KEYS, jobs=jobs)
    negative = cells(3)
    negative.X.data[0] = -1.0
    paths[1] = write(negative, tmp_path / "negative.h5ad")
    with pytest.raises(InputError, match=r"negative\.h5ad: row 0 .* holds -1\.0; expected counts"):
        from_anndata(paths, **KEYS, **HERE)
    corrupt = tmp_path / "corrupt.h5ad"
    corrupt.write_bytes(Path(paths[0]).read_bytes()[:3000])
    paths[1] = str(corrupt)
    with pytest.raises(Exception, match=r"corrupt\.h5ad"):
        from_anndata(paths, **KEYS, jobs=2)


@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
def test_the_survey_reads_the_shape_and_var_index(tmp_path: Path, suffix: str) -> None:
    from cytepool.io.anndata._readers import survey_cells

    adata = cells(1)
    adata.layers["counts"] = adata.X.copy()
    adata.raw = adata[:, :5].copy()
    path = write(adata, tmp_path / f"p{suffix}")
    sources = [("counts", False, adata.var_names), (None, True, adata.raw.var_names)]
    for layer, use_raw, ids in sources:
        n, index = survey_cells(path, layer=layer, use_raw=use_raw)
        assert (n, list(index)) == (120, list(ids))


def test_the_survey_reads_no_obs_and_the_pooling_names_a_damaged_one(tmp_path: Path) -> None:
    """The files are surveyed (cells, feature ids) from the matrix's shape and var's index
    alone; a damaged obs is met when the file is pooled, and named."""
    import h5py

    from cytepool.io.anndata._readers import survey_cells

    paths = [write(cells(i), tmp_path / f"p{i}.h5ad") for i in range(2)]
    with h5py.File(paths[1], "r+") as file:
        del file["obs/quality"]  # obs now lists a column it lacks
    n, index = survey_cells(paths[1], layer=None, use_raw=False)
    assert (n, sorted(index)) == (120, sorted(GENES))
    with pytest.raises(FormatError, match=r"p1\.h5ad cannot be read as AnnData, it is damaged"):
        from_anndata(paths, **KEYS, **HERE)


def test_this_process_and_workers_share_the_files_and_a_failure_anywhere_names_it(
    tmp_path: Path,
) -> None:
    # jobs=3: this process and two worker processes (a fork server) take the files in order
    adatas = [cells(i) for i in range(5)]
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    cube = from_anndata(paths, **KEYS, jobs=3, progress=False)
    same_cube(cube, expected(paths, **KEYS))
    for bad in (0, 4):  # the first file (a worker's, most likely) and the last
        negative = cells(bad)
        negative.X.data[0] = -1.0
        broken = [*paths]
        broken[bad] = write(negative, tmp_path / f"negative{bad}.h5ad")
        with pytest.raises(InputError, match=rf"negative{bad}\.h5ad: row 0 .* holds -1\.0"):
            from_anndata(broken, **KEYS, jobs=3, progress=False)


@dataclass(frozen=True)
class Probe:
    """A task of the runner (what it needs of one: its position and a file's name)."""

    index: int
    path: str


def dask_in_worker(task: Probe, parent: int) -> tuple[bool, bool, bool]:
    """Run by the runner: (in a worker process, dask findable there, anndata imported);
    this process sleeps, so that the worker surely takes tasks too."""
    if os.getpid() == parent:
        time.sleep(0.2)
    import anndata

    dask_found = importlib.util.find_spec("dask") is not None
    return os.getpid() != parent, dask_found, anndata.AnnData is not None


@pytest.mark.parametrize("jobs", [2, 3])  # one worker spawned; two from a fork server
def test_worker_processes_import_anndata_without_dask(jobs: int) -> None:
    # anndata imports dask.array when dask is installed, which a worker never uses
    pytest.importorskip("dask")
    tasks = [Probe(i, f"file{i}.h5ad") for i in range(4)]
    with Runner(jobs, None) as run:
        results = [outcome for _, outcome in run(dask_in_worker, tasks, os.getpid(), here=False)]
    in_workers = [result for result in results if result[0]]
    assert in_workers, "no task ran in a worker process"
    assert all(result == (True, False, True) for result in in_workers)
    assert importlib.util.find_spec("dask") is not None  # this process is left as it was


def test_values_that_are_not_counts_warn_once(tmp_path: Path) -> None:
    adatas = [cells(i) for i in range(2)]
    for a in adatas:
        a.X = a.X * 0.5
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    with pytest.warns(NotCountsWarning, match=r"p0\.h5ad") as caught:
        cube = from_anndata(paths, **KEYS, **HERE)
    assert sum(issubclass(w.category, NotCountsWarning) for w in caught) == 1
    np.testing.assert_array_equal(
        cube.to_numpy(), expected(paths, **KEYS, allow_float=True).to_numpy()
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_anndata(paths, **KEYS, **HERE, allow_float=True)


# ---------------------------------------------------------------------------------------------
# MuData
# ---------------------------------------------------------------------------------------------


def test_many_mudata_files(tmp_path: Path) -> None:
    md = pytest.importorskip("mudata")
    paths: list[str] = []
    references: dict[str, list[str]] = {"rna": [], "prot": []}
    for i in range(2):
        rna = cells(i)
        prot = cells(i, seed=10)[:, :3].copy()
        prot.obs = rna.obs.copy()
        prot.var_names = ["CD3", "CD4", "CD19"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            mdata = md.MuData({"rna": rna, "prot": prot})
        path = tmp_path / f"p{i}.h5mu"
        mdata.write(path)
        paths.append(str(path))
        references["rna"].append(write(rna, tmp_path / f"rna{i}.h5ad"))
        references["prot"].append(write(prot, tmp_path / f"prot{i}.h5ad"))
    cubes = from_mudata_cells(paths, **KEYS, progress=False, jobs=2)
    assert list(cubes) == ["rna", "prot"]
    for name, alone in references.items():
        reference = expected(alone, **KEYS)
        assert cubes[name].fingerprint == reference.fingerprint, name
    assert cubes["prot"].provenance[-1].parameters["modality"] == "prot"


def test_many_mudata_files_one_sample_each_and_shared_features(tmp_path: Path) -> None:
    md = pytest.importorskip("mudata")
    paths = []
    for i in range(2):
        rna = cells(i)
        prot = cells(i, seed=10)[:, :3].copy()
        prot.obs = rna.obs.copy()
        prot.var_names = ["CD3", "CD4", "CD19" if i == 0 else "CD8"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            mdata = md.MuData({"rna": rna, "prot": prot})
        mdata.write(tmp_path / f"p{i}.h5mu")
        paths.append(str(tmp_path / f"p{i}.h5mu"))
    options = {"group_key": "cell_type", "sample_ids": ["a", "b"], **HERE}
    with pytest.raises(InputError, match=r"same features in modality 'prot': .*\('CD8'\)"):
        from_mudata_cells(paths, **options)
    cubes = from_mudata_cells(paths, **options, features="intersection")
    assert list(cubes["prot"].features.index) == ["CD3", "CD4"]
    assert list(cubes["rna"].features.index) == GENES
    for cube in cubes.values():
        assert list(cube.samples.index) == ["a", "b"]
        assert int(np.sum(cube.cells)) == 240


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_pools_files_a_directory_or_a_glob(
    files: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = files
    reference = expected(paths, **KEYS)
    (tmp_path / "._part0.h5ad").write_bytes(b"\x00\x05\x16\x07")  # macOS's AppleDouble: hidden
    keys = ["--sample-key", "donor", "--group-key", "cell_type", "--no-progress"]
    inputs = {
        "files": paths,
        "directory": [str(tmp_path)],
        "glob": [str(tmp_path / "part*.h5ad")],
    }
    for name, given in inputs.items():
        output = tmp_path / f"{name}.cube.zarr"
        code, out, err = run(["pool", *given, str(output), *keys, "--jobs", "1"], capsys)
        assert (code, err) == (0, ""), err
        assert "from 3 files" in out
        assert read_cube(output).fingerprint == reference.fingerprint


def test_cli_sample_from_filename(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    adatas = [cells(i) for i in range(2)]
    paths = [write(a, tmp_path / f"donor{i}.cells.h5ad") for i, a in enumerate(adatas)]
    output = tmp_path / "out.cube.zarr"
    args = ["pool", *paths, str(output), "--sample-from-filename", "--group-key", "cell_type"]
    code, _, err = run([*args, "--no-progress", "--jobs", "1"], capsys)
    assert (code, err) == (0, "")
    assert list(read_cube(output).samples.index) == ["donor0", "donor1"]


def test_cli_sample_from_filename_refuses_two_files_of_one_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name ends at its first dot, so patient.A and patient.B would be one sample: said
    before pooling, unless --duplicates add says the files hold one sample."""
    adatas = [cells(i) for i in range(2)]
    paths = [write(a, tmp_path / f"patient.{x}.h5ad") for a, x in zip(adatas, "AB", strict=True)]
    output = tmp_path / "out.cube.zarr"
    args = ["pool", *paths, str(output), "--sample-from-filename", "--group-key", "cell_type"]
    code, out, err = run([*args, "--no-progress", "--jobs", "1"], capsys)
    assert (code, out) == (2, "")
    assert f"names both {paths[0]} and {paths[1]} 'patient'" in err
    assert "pass --duplicates add" in err
    assert not output.exists()
    code, _, err = run([*args, "--no-progress", "--jobs", "1", "--duplicates", "add"], capsys)
    assert (code, err) == (0, "")
    assert list(read_cube(output).samples.index) == ["patient"]


def test_cli_failing_file_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    adatas = [cells(i) for i in range(2)]
    adatas[1].var_names = [f"x{j}" for j in range(len(GENES))]
    paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
    output = tmp_path / "out.cube.zarr"
    keys = ["--sample-key", "donor", "--group-key", "cell_type"]
    code, out, err = run(["pool", *paths, str(output), *keys, "--jobs", "1"], capsys)
    assert code == 1
    assert err.count("\n") == 1
    assert "pass --features intersection" in err
    assert out == ""
    assert not output.exists()
    code, _, err = run(["pool", str(tmp_path / "none*.h5ad"), str(output), *keys], capsys)
    assert code == 1
    assert "no file matches" in err


# ---------------------------------------------------------------------------------------------
# A dask distributed cluster (the `client` fixture is in tests/conftest.py)
# ---------------------------------------------------------------------------------------------


def test_files_pooled_on_a_local_cluster(client: Any, files: list[str]) -> None:
    paths = files
    cube = from_anndata(paths, **KEYS, client=client, progress=False)
    same_cube(cube, expected(paths, **KEYS))
    broken = [*paths[:2], str(Path(paths[0]).with_name("missing.h5ad"))]
    with pytest.raises(FileNotFoundError, match=r"missing\.h5ad"):
        from_anndata(broken, **KEYS, client=client)


@pytest.mark.parametrize("layout", ["csr", "csc", "csc read by anndata"])
def test_one_file_hands_its_total_on_and_files_of_many_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """A file alone hands its stored values on with its row or column blocks, so a small one
    pools with numpy before numba is started; a file of several does not (its worker pools
    the others after it, and starts numba once: blocks without a total). The CSC matrix of
    an .h5ad is read by cytepool, that of a Zarr v2 store with a filter by anndata."""
    from cytepool import _pool_sums

    asked: list[int | None] = []
    choose = _pool_sums.small_values
    monkeypatch.setattr(_pool_sums, "small_values", lambda n: asked.append(n) or choose(n))
    suffix = ".zarr" if layout == "csc read by anndata" else ".h5ad"
    paths = [write(cells(i), tmp_path / f"c{i}{suffix}") for i in range(2)]
    if layout != "csr":
        for i, path in enumerate(paths):
            as_csc(cells(i), Path(path), filtered=layout == "csc read by anndata")
    from_anndata(paths[0], **KEYS)
    assert asked == [cells(0).X.nnz]
    asked.clear()
    from_anndata(paths, **KEYS, **HERE)
    assert asked == [None, None]


def as_csc(adata: ad.AnnData, path: Path, *, filtered: bool) -> None:
    """Write ``adata`` at ``path`` again with X as a CSC matrix; ``filtered``: as a Zarr v2
    store whose X/indices has a filter (delta), which cytepool's reader leaves to anndata
    (:func:`anndata_stores.filter_indices`)."""
    adata = adata.copy()
    adata.X = sparse.csc_matrix(adata.X)
    shutil.rmtree(path, ignore_errors=True)
    path.unlink(missing_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's notes on Zarr v2
        if not filtered:
            adata.write_h5ad(path)
            return
        with ad.settings.override(zarr_write_format=2):
            adata.write_zarr(path)
    filter_indices(path)


# ---------------------------------------------------------------------------------------------
# Column names given as one string
# ---------------------------------------------------------------------------------------------


def _str_inputs(tmp_path: Path) -> dict[str, Any]:
    """The cells of file 0, with columns named by the letters of 'age' and 'batch' too."""
    adata = cells(0)
    for letter in "agebtch":
        adata.obs[letter] = 1
        adata.var[letter] = 1
    adata.var["symbol"] = adata.var_names
    inputs = {"AnnData": adata, "path": write(adata, tmp_path / "one.h5ad")}
    inputs["paths"] = [inputs["path"], write(cells(1), tmp_path / "two.h5ad")]
    return inputs


@pytest.mark.parametrize("given", ["AnnData", "path", "paths", "MuData", "MuData paths"])
@pytest.mark.parametrize(("option", "name"), [("samples", "age"), ("groups", "batch")])
def test_covariates_named_by_one_string_are_a_type_error(
    tmp_path: Path, given: str, option: str, name: str
) -> None:
    """A string is not split into letters (the columns 'a', 'g', 'e' were kept silently)."""
    inputs = _str_inputs(tmp_path)
    pool: Any = from_anndata
    if given.startswith("MuData"):
        md = pytest.importorskip("mudata")
        pool = from_mudata_cells
        inputs["MuData"] = md.MuData({"rna": inputs["AnnData"]})
        path = str(tmp_path / "one.h5mu")
        inputs["MuData"].write_h5mu(path)
        inputs["MuData paths"] = [path]
    with pytest.raises(
        InputTypeError, match=rf"{option}= takes a list .*give a list: {option}=\['{name}'\]"
    ):
        pool(inputs[given], **KEYS, **HERE, **{option: name})


@pytest.mark.parametrize("given", ["AnnData", "path", "paths"])
def test_features_named_by_one_string_are_refused(tmp_path: Path, given: str) -> None:
    """A type error for one file; for many, where features= may be 'intersection', the
    InputError of any other string."""
    inputs = _str_inputs(tmp_path)
    error = InputError if given == "paths" else InputTypeError
    for name in ("symbol", "age"):
        with pytest.raises(error, match=rf"features=\['{name}'\]"):
            from_anndata(inputs[given], **KEYS, **HERE, features=name)


def test_from_pseudobulk_covariates_named_by_one_string_are_a_type_error() -> None:
    from cytepool.io.anndata import from_pseudobulk, to_anndata

    obs = pd.DataFrame(
        {"donor": ["d1", "d2"], "cell_type": ["B", "B"], "n_cells": [3, 4], "age": [1, 2]},
        index=["p1", "p2"],
    ).assign(a=1, g=1, e=1)
    adata = ad.AnnData(np.ones((2, 3), np.float32), obs=obs)
    with pytest.raises(InputTypeError, match=r"give a list: samples=\['age'\]"):
        from_pseudobulk(adata, **KEYS, samples="age")
    ours = to_anndata(from_pseudobulk(adata, **KEYS))  # with the record: refused all the same
    with pytest.raises(InputTypeError, match=r"give a list: groups=\['age'\]"):
        from_pseudobulk(ours, groups="age")


# ---------------------------------------------------------------------------------------------
# Columns dropped, and the reasons the docs list
# ---------------------------------------------------------------------------------------------


def _with_feature_id(adata: ad.AnnData) -> ad.AnnData:
    adata.var["feature_id"] = [f"ENSG{j:02d}" for j in range(adata.n_vars)]
    adata.var["symbol"] = adata.var_names
    return adata


@pytest.mark.parametrize("given", ["AnnData", "paths", "MuData"])
def test_a_var_column_named_feature_id_is_dropped_with_its_reason(
    tmp_path: Path, given: str
) -> None:
    """As an obs column named sample_id is: the cube keeps the other columns, and the record
    says why (it raised "both the index and a column are named 'feature_id'")."""
    adatas = [_with_feature_id(cells(i)) for i in range(2)]
    if given == "AnnData":
        cube = from_anndata(adatas[0], **KEYS)
    elif given == "MuData":
        md = pytest.importorskip("mudata")
        cube = from_mudata_cells(md.MuData({"rna": adatas[0]}), **KEYS)["rna"]
    else:
        paths = [write(a, tmp_path / f"p{i}.h5ad") for i, a in enumerate(adatas)]
        cube = from_anndata(paths, **KEYS, **HERE)
        same_cube(cube, expected(paths, **KEYS))
    assert list(cube.features.columns) == ["symbol"]
    features = cube.provenance[-1].parameters["features"]
    assert features["dropped"] == {"feature_id": "named like an id column"}


def test_a_var_column_named_feature_id_cannot_be_named() -> None:
    with pytest.raises(InputError, match=r"'feature_id' cannot be a feature column .*leave it"):
        from_anndata(_with_feature_id(cells(0)), **KEYS, features=["symbol", "feature_id"])


def test_every_reason_of_a_dropped_column_is_documented() -> None:
    """docs/cube-files.md lists the forms of the reasons; complex numbers are named so."""
    docs = (Path(__file__).parents[2] / "docs" / "cube-files.md").read_text()
    listed = docs[docs.index("A reason is one of") :].split("\n\n")[1]
    forms = [re.split(r" [<(']", item)[0] for item in re.findall(r"^- `([^`]+)`", listed, re.M)]
    adata = cells(0)
    adata.obs["batch/lane"] = adata.obs["batch"]  # constant per donor, a name no file holds
    adata.obs["phase"] = (adata.obs["age"] * 1j).astype(complex)  # constant per donor
    adata.obs["sample_id"] = "x"
    adata.obs["cells"] = [[1]] * adata.n_obs
    adata.obs["n"] = np.arange(adata.n_obs)
    dropped = {}
    for named in ({}, {"samples": ["age"]}):
        cube = from_anndata(adata, **KEYS, **named)
        dropped |= {(c, len(named)): r for c, r in dropped_columns(cube).items()}
    expected = {"batch/lane", "phase", "sample_id", "cells", "n"}
    assert expected <= {column for column, named in dropped if not named}
    for column, reason in dropped.items():
        assert reason.startswith(tuple(forms)), (column, reason, forms)
    assert "data type complex128 is not supported" in dropped["phase", 0]


def dropped_columns(cube: Any) -> dict[str, str]:
    return cube.provenance[-1].parameters["covariates"]["dropped"]


def test_features_of_one_mudata_are_refused() -> None:
    """features= names var columns of one AnnData; of one MuData it was ignored silently (each
    modality keeps its var columns): an InputError saying so, a string a type error."""
    md = pytest.importorskip("mudata")
    rna = cells(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        mdata = md.MuData({"rna": rna})
    with pytest.raises(InputError, match=r"features= of one MuData: found \['symbol'\]; every"):
        from_mudata_cells(mdata, **KEYS, features=["symbol"])
    with pytest.raises(InputTypeError, match=r"give a list"):
        from_mudata_cells(mdata, **KEYS, features="symbol")
    assert from_mudata_cells(mdata, **KEYS)["rna"].shape[2] == rna.n_vars
