"""AnnData / MuData converters: pooling cells, pseudobulk round trips, and the real tools."""

from __future__ import annotations

import copy
import io
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.io.anndata import _readers as readers
from cytepool.io.anndata._pseudobulk import mudata_defaults

ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sparse = pytest.importorskip("scipy.sparse")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cytepool  # noqa: E402
from cytepool import _progress  # noqa: E402
from cytepool.errors import InputError, NotCountsWarning  # noqa: E402
from cytepool.io import anndata as conv  # noqa: E402
from cytepool.io.anndata import (  # noqa: E402
    from_anndata,
    from_pseudobulk,
    to_anndata,
)

DONORS = ["D1", "D2", "D3", "D4"]
LAYERS = ("counts", "detected", "squares")
TYPES = ["B", "NK", "T"]


def make_cells(n_cells: int = 240, n_genes: int = 12, seed: int = 0) -> Any:
    """Whole-number float32 counts (CSR) with donors x conditions and cell types."""
    rng = np.random.default_rng(seed)
    donor = rng.choice(DONORS, n_cells)
    condition = rng.choice(["ctrl", "stim"], n_cells)
    obs = pd.DataFrame(
        {
            "sample": pd.Categorical([f"{d}-{c}" for d, c in zip(donor, condition, strict=True)]),
            "donor": pd.Categorical(donor),
            "condition": condition,  # object strings
            "age": pd.Series(donor).map({"D1": 31, "D2": 45, "D3": 52, "D4": 29}).to_numpy(),
            "cell_type": pd.Categorical(rng.choice(TYPES, n_cells), categories=TYPES),
            "n_counts": rng.random(n_cells),
        },
        index=[f"cell{i}" for i in range(n_cells)],
    )
    obs["lineage"] = obs["cell_type"].map({"B": "lymphoid", "NK": "lymphoid", "T": "lymphoid"})
    obs["lineage"] = obs["lineage"].astype(str)
    obs["lineage"] = np.where(obs["cell_type"] == "NK", "innate", obs["lineage"])
    counts = rng.negative_binomial(2, 0.6, size=(n_cells, n_genes)).astype(np.float32)
    var = pd.DataFrame(
        {"symbol": [f"S{j}" for j in range(n_genes)], "chrom": ["1", "2"] * (n_genes // 2)},
        index=[f"gene{j}" for j in range(n_genes)],
    )
    adata = ad.AnnData(X=sparse.csr_matrix(counts), obs=obs, var=var)
    adata.layers["counts"] = sparse.csr_matrix(counts)
    return adata


def group_sums(adata: Any, sample_key: str = "sample", group_key: str = "cell_type") -> Any:
    """Reference: a frame of sums per (sample, group) computed with pandas."""
    dense = np.asarray(adata.X.toarray() if sparse.issparse(adata.X) else adata.X)
    frame = pd.DataFrame(dense.astype(np.int64), columns=adata.var_names)
    frame["s"] = adata.obs[sample_key].astype(str).to_numpy()
    frame["g"] = adata.obs[group_key].astype(str).to_numpy()
    return frame.groupby(["g", "s"]).sum()


def assert_pooled(cube: Any, adata: Any) -> None:
    reference = group_sums(adata)
    sizes = adata.obs.groupby(["cell_type", "sample"], observed=True).size()
    samples = list(cube.samples.index)
    for g, group in enumerate(cube.groups.index):
        profiles = cube.profiles(g)
        for s, sample in enumerate(samples):
            expected = reference.loc[(group, sample)] if (group, sample) in reference.index else 0
            np.testing.assert_array_equal(profiles[s], expected)
            assert cube.cells[g, s] == sizes.get((group, sample), 0)


def write_zarr(adata: Any, path: Path, zarr_format: int) -> None:
    """Write an AnnData zarr store in the given Zarr format (a setting deprecated in 0.13)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with ad.settings.override(zarr_write_format=zarr_format):
            adata.write_zarr(path)


def snapshot(data: Any) -> Any:
    """A deep copy that compares equal exactly when nothing in the AnnData/MuData changed."""
    if hasattr(data, "mod"):  # parts, as MuData.copy() of mudata 0.4 makes str columns string
        mods = {name: mod.copy() for name, mod in data.mod.items()}
        return types.SimpleNamespace(mod=mods, obs=data.obs.copy(), uns=copy.deepcopy(data.uns))
    return data.copy()


def assert_unchanged(before: Any, after: Any) -> None:
    """Deep comparison of two AnnData objects: every frame with its dtypes, every array."""
    if hasattr(before, "mod"):
        assert list(before.mod) == list(after.mod)
        for name in before.mod:
            assert_unchanged(before.mod[name], after.mod[name])
        pd.testing.assert_frame_equal(before.obs, after.obs)
        assert_same(before.uns, after.uns)
        return
    pd.testing.assert_frame_equal(before.obs, after.obs)
    pd.testing.assert_frame_equal(before.var, after.var)
    assert_same(before.X, after.X)
    assert list(before.layers) == list(after.layers)
    for name in before.layers:
        assert_same(before.layers[name], after.layers[name])
    assert_same(before.uns, after.uns)
    assert (before.raw is None) == (after.raw is None)
    if before.raw is not None:
        assert_same(before.raw.X, after.raw.X)


def assert_same(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
    elif sparse.issparse(a):
        assert a.dtype == b.dtype
        assert (a != b).nnz == 0
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def rich_cube() -> Any:
    """A cube with every kind of part the round trips must keep."""
    rng = np.random.default_rng(3)
    n_groups, n_samples, n_features = 3, 5, 7
    cells = rng.integers(1, 20, (n_groups, n_samples))
    cells[1, 2] = 0
    cells[:, 4] = 0  # sample s4 has no cells at all
    counts = rng.integers(0, 50, (n_groups, n_samples, n_features)).astype(np.int32)
    counts[cells == 0] = 0
    detected = np.minimum(counts, 3).astype(np.uint32)
    samples = pd.DataFrame(
        {
            "sample_id": [f"s{i}" for i in range(n_samples)],
            "donor": ["D1", "D1", "D2", "D2", "D3"],
            "condition": pd.Categorical(["ctrl", "stim", "ctrl", "stim", "ctrl"]),
            "age": pd.array([31, 31, None, 45, 50], dtype="Int64"),
            "weight": [70.5, np.nan, 80.0, 81.0, 60.0],
            "smoker": [True, False, True, False, False],
            "note": pd.array(["a", None, "c", "d", "e"], dtype="string"),
            "visit": pd.to_datetime(["2021-01-02", "2021-03-04", None, "2022-01-01", "2022-02-02"]),
        }
    )
    groups = pd.DataFrame(
        {"group_id": ["B", "T/NK", "Mono"], "lineage": ["lymphoid", "lymphoid", "myeloid"]}
    )
    features = pd.DataFrame(
        {
            "feature_id": [f"g{j}" for j in range(n_features)],
            "chrom": ["1", "1", "2", "2", "X", "X", "X"],
            "length": np.arange(n_features) * 100,
        }
    )
    factors = rng.uniform(0.5, 2.0, (n_groups, n_samples))
    return cytepool.Cube(
        {"counts": counts, "detected": detected},
        samples=samples,
        groups=groups,
        features=features,
        cells=cells,
        normalization=cytepool.Normalization("tmm", factors),
        metadata={"study": "x", "tags": [1, None, True], "nested": {"a": []}},
    )


@pytest.fixture
def cells() -> Any:
    return make_cells()


@pytest.fixture
def cube(cells: Any) -> Any:
    return from_anndata(cells, sample_key="sample", group_key="cell_type")


# ---------------------------------------------------------------------------------------------
# from_anndata
# ---------------------------------------------------------------------------------------------


def test_module_is_an_attribute_of_cytepool_io_and_imports_nothing_heavy() -> None:
    code = (
        "import sys, cytepool.io\n"
        "assert callable(cytepool.io.anndata.from_anndata)\n"
        "import cytepool.cli\n"
        "heavy = {'anndata', 'mudata', 'scipy', 'pandas', 'h5py', 'zarr', 'scanpy'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.interop
def test_from_anndata_pools_exactly(cells: Any, cube: Any) -> None:
    assert cube.shape == (3, 8, 12)
    assert list(cube.groups.index) == TYPES  # category order
    assert list(cube.samples.index) == sorted(
        {f"{d}-{c}" for d in DONORS for c in ("ctrl", "stim")}
    )
    assert cube.layers["counts"].dtype.kind in "iu"
    assert_pooled(cube, cells)


@pytest.mark.interop
def test_from_anndata_covariates(cube: Any) -> None:
    assert list(cube.samples.columns) == ["donor", "condition", "age"]
    assert list(cube.groups.columns) == ["lineage"]
    assert cube.samples.loc["D2-stim", "donor"] == "D2"
    assert cube.samples["donor"].dtype == "category"
    assert cube.samples.loc["D3-ctrl", "age"] == 52
    assert cube.groups.loc["NK", "lineage"] == "innate"
    assert list(cube.features.columns) == ["symbol", "chrom"]
    assert list(cube.features.index[:2]) == ["gene0", "gene1"]


@pytest.mark.interop
def test_named_covariates(cells: Any) -> None:
    cube = from_anndata(
        cells,
        sample_key="sample",
        group_key="cell_type",
        samples=["age"],
        groups=[],
        features=["symbol"],
    )
    assert list(cube.samples.columns) == ["age"]
    assert list(cube.groups.columns) == []
    assert list(cube.features.columns) == ["symbol"]


@pytest.mark.interop
def test_varying_covariate_names_column_and_sample(cells: Any) -> None:
    with pytest.raises(ValueError, match=r"'n_counts'.*varies within sample '\S+'"):
        from_anndata(cells, sample_key="sample", group_key="cell_type", samples=["n_counts"])
    with pytest.raises(ValueError, match=r"'donor'.*varies within group 'B'"):
        from_anndata(cells, sample_key="sample", group_key="cell_type", groups=["donor"])


@pytest.mark.interop
@pytest.mark.parametrize("where", ["layer", "raw"])
def test_layer_and_raw(cells: Any, cube: Any, where: str) -> None:
    source = cells.copy()
    source.X = sparse.csr_matrix(np.log1p(cells.X.toarray()))
    if where == "raw":
        source.raw = cells
        pooled = from_anndata(source, sample_key="sample", group_key="cell_type", use_raw=True)
    else:
        pooled = from_anndata(source, sample_key="sample", group_key="cell_type", layer="counts")
    assert pooled.fingerprint == cube.fingerprint


@pytest.mark.interop
def test_dense_and_csc_in_memory(cells: Any, cube: Any) -> None:
    for matrix in (cells.X.toarray(), cells.X.tocsc(), cells.X.toarray().astype(np.int32)):
        source = ad.AnnData(X=matrix, obs=cells.obs, var=cells.var)
        pooled = from_anndata(source, sample_key="sample", group_key="cell_type")
        np.testing.assert_array_equal(pooled.to_numpy("counts"), cube.to_numpy("counts"))


@pytest.mark.interop
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("matrix", ["dense", "csr", "csc"])
def test_a_view_pools_as_its_copy(cells: Any, matrix: str, dtype: str) -> None:
    """``adata[mask]``, the usual way to filter cells, is a view: its dense X is an ndarray
    subclass whose ufunc hook numpy's ``add.at`` cannot go through (a TypeError before)."""
    values = cells.X.toarray().astype(dtype)
    x = {"dense": values, "csr": sparse.csr_matrix(values), "csc": sparse.csc_matrix(values)}
    source = ad.AnnData(X=x[matrix], obs=cells.obs, var=cells.var)
    view = source[source.obs["n_counts"] > 0.3]
    assert view.is_view
    pooled = from_anndata(view, sample_key="sample", group_key="cell_type")
    expected = from_anndata(view.copy(), sample_key="sample", group_key="cell_type")
    assert pooled.fingerprint == expected.fingerprint


@pytest.mark.parametrize("data", [b"cells.h5ad", 3, None])
def test_neither_data_nor_a_path_is_a_type_error(data: Any) -> None:
    with pytest.raises(TypeError, match=r"adata: expected an AnnData, a path .* found "):
        from_anndata(data, sample_key="sample", group_key="cell_type")
    with pytest.raises(TypeError, match=r"mdata: expected a MuData, a path .* found "):
        conv.from_mudata_cells(data, sample_key="sample", group_key="cell_type")


NOT_COUNTS = (
    r"^{matrix}: not every value is a count \(a whole number below 2\*\*31\), e.g. 0.5 at row 7 "
    r"\(cell 'cell7'\), column 10 \(feature 'gene10'\); the layer 'counts' holds float64 sums\. "
    r"If you meant to pool counts, choose the matrix that holds them with layer= or "
    r"use_raw=True; if these values are meant, pass allow_float=True to pool them without this "
    r"warning$"
)


@pytest.mark.interop
@pytest.mark.parametrize("where", ["X", "dense X", "layer", "raw", "path", "backed"])
def test_values_that_are_not_whole_numbers_warn(tmp_path: Path, cells: Any, where: str) -> None:
    source = cells.copy()
    values = cells.X.toarray()
    values[7, 10] = 0.5
    source.X = values if where == "dense X" else sparse.csr_matrix(values)
    keys = {"sample_key": "sample", "group_key": "cell_type"}
    matrix, arguments = {
        "X": ("adata.X", {}),
        "dense X": ("adata.X", {}),
        "layer": ("adata.layers['half']", {"layer": "half"}),
        "raw": ("adata.raw.X", {"use_raw": True}),
        "path": (f"X of {tmp_path / 'cells.h5ad'}", {}),
        "backed": ("adata.X", {}),
    }[where]
    if where in ("layer", "raw"):
        source.layers["half"] = source.X
        source.raw = source.copy()
        source.X = cells.X
    adata: Any = source
    if where in ("path", "backed"):
        source.write_h5ad(tmp_path / "cells.h5ad")
        adata = tmp_path / "cells.h5ad"
        if where == "backed":
            adata = ad.read_h5ad(adata, backed="r")
    with pytest.warns(NotCountsWarning, match=NOT_COUNTS.format(matrix=re.escape(matrix))) as w:
        pooled = from_anndata(adata, **keys, **arguments)
    assert len(w) == 1
    assert w[0].filename == __file__  # the line of the caller, not of cytepool
    assert pooled.layers["counts"].dtype == np.float64
    quiet = from_anndata(adata, **keys, **arguments, allow_float=True)
    assert quiet.fingerprint == pooled.fingerprint
    if where == "backed":
        adata.file.close()


@pytest.mark.interop
def test_scanpy_pbmc68k_reduced_is_not_counts() -> None:
    sc = pytest.importorskip("scanpy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scanpy's own deprecations when loading its dataset
        pbmc = sc.datasets.pbmc68k_reduced()
    keys = {"sample_key": "phase", "group_key": "bulk_labels"}
    # raw.X: log-normalized values
    pattern = (
        r"^adata.raw.X: not every value is a count .*, e.g. \S+ at row \d+ \(cell '[ACGT]+-\d'\)"
        r", column \d+ \(feature '\S+'\);.* layer= or use_raw=True; .* allow_float=True"
    )
    with pytest.warns(NotCountsWarning, match=pattern):
        cube = from_anndata(pbmc, **keys, use_raw=True)
    assert cube.layers["counts"].dtype == np.float64
    quiet = from_anndata(pbmc, **keys, use_raw=True, allow_float=True)
    np.testing.assert_array_equal(quiet.to_numpy(), cube.to_numpy())
    expected = sc.get.aggregate(pbmc.raw.to_adata(), by=["bulk_labels", "phase"], func="sum")
    assert np.isclose(expected.layers["sum"].sum(), cube.to_numpy().sum(), rtol=1e-9)
    # X: scaled, with negative values
    with pytest.raises(ValueError, match=r"^adata.X: row \d+ \(cell '\S+'\), .* holds -\d"):
        from_anndata(pbmc, **keys)


@pytest.mark.interop
@pytest.mark.parametrize(
    ("values", "match"),
    [
        pytest.param(
            [1.0, 1, 2] * 4, "the labels 1.0 and 1 are equal but read differently", id="1.0-1"
        ),
        pytest.param([1, "1", 2] * 4, r"the labels 1 \(int\) and '1' \(str\) differ", id="1-'1'"),
    ],
)
def test_ambiguous_labels_are_one_rule_for_anndata_and_from_cells(values: Any, match: str) -> None:
    obs = pd.DataFrame(
        {"donor": np.array(values, dtype=object), "cell_type": ["B"] * len(values)},
        index=[f"c{i}" for i in range(len(values))],
    )
    adata = ad.AnnData(np.ones((len(values), 2), dtype=np.float32), obs=obs)
    with pytest.raises(ValueError, match=rf"^column 'donor' of adata.obs \(sample_key\): {match}"):
        from_anndata(adata, sample_key="donor", group_key="cell_type")
    with pytest.raises(ValueError, match=rf"^sample_labels: {match}"):
        cytepool.from_cells(adata.X, sample_labels=obs["donor"], group_labels=obs["cell_type"])
    adata.obs["donor"] = adata.obs["donor"].astype(str)  # what the message says to do
    cube = from_anndata(adata, sample_key="donor", group_key="cell_type")
    labels = adata.obs["donor"]
    same = cytepool.from_cells(adata.X, sample_labels=labels, group_labels=obs["cell_type"])
    assert list(cube.samples.index) == list(same.samples.index) == sorted(set(map(str, values)))


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read on-disk matrices in many small row blocks."""
    monkeypatch.setattr(readers, "BLOCK_NONZEROS", 97)
    monkeypatch.setattr(readers, "BLOCK_BYTES", 500)


@pytest.mark.interop
@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("dense", [False, True], ids=["csr", "dense"])
def test_backed_h5ad_matches_in_memory(tmp_path: Path, cells: Any, dense: bool) -> None:
    if dense:
        cells = ad.AnnData(X=cells.X.toarray(), obs=cells.obs, var=cells.var)
    cells.write_h5ad(tmp_path / "cells.h5ad")  # (makes repeated strings categorical)
    loaded = ad.read_h5ad(tmp_path / "cells.h5ad")
    expected = from_anndata(loaded, sample_key="sample", group_key="cell_type")
    backed = ad.read_h5ad(tmp_path / "cells.h5ad", backed="r")
    try:
        before = backed.obs.copy()
        pooled = from_anndata(backed, sample_key="sample", group_key="cell_type")
        pd.testing.assert_frame_equal(backed.obs, before)
    finally:
        backed.file.close()
    assert pooled.fingerprint == expected.fingerprint
    assert_pooled(pooled, loaded)


@pytest.mark.interop
@pytest.mark.parametrize("fmt", ["csr", "csc", "dense"])
def test_backed_pseudobulk_is_read(tmp_path: Path, fmt: str) -> None:
    """from_pseudobulk of a backed AnnData: a sparse X on disk is read into memory (it was an
    InputTypeError, "adata.X has dtype object")."""
    cube = rich_cube()
    pseudobulk = to_anndata(cube)
    convert = {"csr": sparse.csr_matrix, "csc": sparse.csc_matrix, "dense": np.asarray}[fmt]
    pseudobulk.X = convert(pseudobulk.X)
    pseudobulk.write_h5ad(tmp_path / "pb.h5ad")
    backed = ad.read_h5ad(tmp_path / "pb.h5ad", backed="r")
    try:
        assert from_pseudobulk(backed).fingerprint == cube.fingerprint
    finally:
        backed.file.close()


@pytest.mark.interop
@pytest.mark.usefixtures("small_blocks")
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_paths_of_h5ad_and_zarr(tmp_path: Path, cells: Any, zarr_format: int) -> None:
    cells.strings_to_categoricals()  # as writing does: the cube from memory is the same then
    cube = from_anndata(cells, sample_key="sample", group_key="cell_type")
    cells.write_h5ad(tmp_path / "cells.h5ad")
    write_zarr(cells, tmp_path / "cells.zarr", zarr_format)
    for path in (tmp_path / "cells.h5ad", str(tmp_path / "cells.zarr")):
        pooled = from_anndata(path, sample_key="sample", group_key="cell_type", progress=False)
        assert pooled.fingerprint == cube.fingerprint
    pooled = from_anndata(
        tmp_path / "cells.zarr", sample_key="sample", group_key="cell_type", layer="counts"
    )
    assert pooled.fingerprint == cube.fingerprint


@pytest.mark.interop
def test_path_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        from_anndata(tmp_path / "missing.h5ad", sample_key="s", group_key="g")
    (tmp_path / "text.h5ad").write_text("not hdf5")
    with pytest.raises(ValueError, match=r"not an .h5ad"):
        from_anndata(tmp_path / "text.h5ad", sample_key="s", group_key="g")


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")  # zarr formats
@pytest.mark.parametrize("dense", [False, True], ids=["csr", "dense"])
@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
def test_zero_cells_pool_by_path_as_in_memory(tmp_path: Path, dense: bool, suffix: str) -> None:
    empty = make_cells()[:0].copy()
    empty.strings_to_categoricals()  # as writing does
    if dense:
        empty.X = np.zeros((0, empty.n_vars), dtype=np.float32)
    expected = from_anndata(empty, sample_key="sample", group_key="cell_type")
    path = tmp_path / f"empty{suffix}"
    if suffix == ".h5ad":
        empty.write_h5ad(path)
    else:
        write_zarr(empty, path, 3)
    pooled = from_anndata(path, sample_key="sample", group_key="cell_type")
    assert pooled.shape == (0, 0, empty.n_vars)
    assert pooled.fingerprint == expected.fingerprint


@pytest.mark.interop
@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("fraction", [False, True])
def test_csc_on_disk_is_read_in_column_blocks(tmp_path: Path, cells: Any, fraction: bool) -> None:
    dense = cells.X.toarray()
    if fraction:  # one block pools to float64, the others to int64
        dense[7, 10] = 0.5
        dense[9, 11] = 0.25  # another block: the warning is given once
    counts = sparse.csc_matrix(dense)
    ad.AnnData(X=counts, obs=cells.obs, var=cells.var).write_h5ad(tmp_path / "c.h5ad")
    loaded = ad.read_h5ad(tmp_path / "c.h5ad")
    keys = {"sample_key": "sample", "group_key": "cell_type", "layers": LAYERS}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = from_anndata(loaded, **keys)
        pooled = from_anndata(tmp_path / "c.h5ad", **keys)
    messages = [str(w.message) for w in caught]
    matrices = [re.escape(name) for name in ("adata.X", f"X of {tmp_path / 'c.h5ad'}")]
    assert len(messages) == (2 if fraction else 0)
    for message, matrix in zip(messages, matrices, strict=False):
        assert re.match(NOT_COUNTS.format(matrix=matrix), message), message
    assert pooled.layers["counts"].dtype == (np.float64 if fraction else np.int64)
    assert pooled.fingerprint == expected.fingerprint


def test_dask_matrix_is_read_in_row_blocks(cells: Any, cube: Any) -> None:
    da = pytest.importorskip("dask.array")
    lazy = da.from_array(cells.X.toarray(), chunks=(50, 5))
    source = ad.AnnData(X=lazy, obs=cells.obs, var=cells.var)
    pooled = from_anndata(source, sample_key="sample", group_key="cell_type")
    assert pooled.fingerprint == cube.fingerprint


@pytest.mark.usefixtures("small_blocks")
def test_lazily_opened_anndata(tmp_path: Path, cells: Any) -> None:
    pytest.importorskip("xarray")  # anndata's read_lazy needs it
    pytest.importorskip("dask")
    cells.write_h5ad(tmp_path / "cells.h5ad")
    loaded = ad.read_h5ad(tmp_path / "cells.h5ad")
    expected = from_anndata(loaded, sample_key="sample", group_key="cell_type")
    lazy = ad.experimental.read_lazy(tmp_path / "cells.h5ad")
    cube = from_anndata(lazy, sample_key="sample", group_key="cell_type")
    assert cube.fingerprint == expected.fingerprint
    to_anndata(cube).write_h5ad(tmp_path / "pseudobulk.h5ad")
    lazy = ad.experimental.read_lazy(tmp_path / "pseudobulk.h5ad")
    assert from_pseudobulk(lazy).fingerprint == cube.fingerprint


@pytest.mark.interop
@pytest.mark.usefixtures("small_blocks")
def test_progress_bar(
    tmp_path: Path, cells: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cells.write_h5ad(tmp_path / "cells.h5ad")
    monkeypatch.setattr(_progress.Progress, "_INTERVAL", 0.0)
    from_anndata(tmp_path / "cells.h5ad", sample_key="sample", group_key="cell_type", progress=True)
    err = capsys.readouterr().err
    assert "pooling [" in err
    assert f"{cells.n_obs}/{cells.n_obs} cells" in err
    assert err.endswith("\n")
    from_anndata(tmp_path / "cells.h5ad", sample_key="sample", group_key="cell_type")
    assert capsys.readouterr().err == ""  # stderr is not a terminal here


def test_progress_bar_draws_on_a_stream() -> None:
    stream = io.StringIO()
    bar = _progress.Progress(10, "pooling", "cells", enabled=True, stream=stream)
    bar.update(4)
    bar.update(6)
    bar.close()
    assert stream.getvalue().startswith("\rpooling [")
    assert "100% 10/10 cells" in stream.getvalue()


@pytest.mark.interop
def test_from_anndata_errors(cells: Any) -> None:
    keys = {"sample_key": "sample", "group_key": "cell_type"}
    with pytest.raises(KeyError, match="sample_key 'donr' is not a column"):
        from_anndata(cells, sample_key="donr", group_key="cell_type")
    with pytest.raises(KeyError, match="no layer 'spliced'"):
        from_anndata(cells, **keys, layer="spliced")
    with pytest.raises(ValueError, match="not both"):
        from_anndata(cells, **keys, layer="counts", use_raw=True)
    with pytest.raises(ValueError, match=r"adata.raw is None"):
        from_anndata(cells, **keys, use_raw=True)
    with pytest.raises(KeyError, match="covariate 'agee'"):
        from_anndata(cells, **keys, samples=["agee"])
    with pytest.raises(KeyError, match="feature column 'sym'"):
        from_anndata(cells, **keys, features=["sym"])


@pytest.mark.interop
def test_null_labels_are_an_error(cells: Any) -> None:
    broken = cells.copy()
    broken.obs["sample"] = broken.obs["sample"].astype(object)
    broken.obs.loc[["cell3", "cell7"], "sample"] = None
    pattern = r"^column 'sample' of adata.obs \(sample_key\) has 2 missing labels.*'cell3'"
    with pytest.raises(ValueError, match=pattern):
        from_anndata(broken, sample_key="sample", group_key="cell_type")


@pytest.mark.interop
@pytest.mark.parametrize(
    ("value", "message"),
    [(-1.0, "-1.0"), (np.nan, "nan"), (np.inf, "inf")],
)
def test_values_that_are_not_counts(cells: Any, value: float, message: str) -> None:
    broken = cells.copy()
    broken.X = broken.X.toarray()
    broken.X[5, 3] = value
    pattern = (
        rf"^adata.X: row 5 \(cell 'cell5'\), column 3 \(feature 'gene3'\) holds {message}; "
        r"expected counts, finite values >= 0: choose the matrix that holds them with layer= or "
        r"use_raw=True$"
    )
    with pytest.raises(ValueError, match=pattern):
        from_anndata(broken, sample_key="sample", group_key="cell_type")


@pytest.mark.interop
def test_duplicate_var_names(cells: Any) -> None:
    broken = cells.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata warns about non-unique names
        broken.var_names = ["a", "b", "a", *[f"x{i}" for i in range(9)]]
    with pytest.raises(ValueError, match=r"names of adata.var are not unique \(e.g. 'a' appears 2"):
        from_anndata(broken, sample_key="sample", group_key="cell_type")


@pytest.mark.interop
def test_inputs_are_never_modified(tmp_path: Path, cells: Any) -> None:
    cells.raw = cells.copy()
    cells.uns["note"] = {"a": np.arange(3)}
    before = snapshot(cells)
    cube = from_anndata(cells, sample_key="sample", group_key="cell_type")
    from_anndata(cells, sample_key="sample", group_key="cell_type", use_raw=True)
    assert_unchanged(before, cells)
    pseudobulk = to_anndata(cube)
    before = snapshot(pseudobulk)
    from_pseudobulk(pseudobulk)
    assert_unchanged(before, pseudobulk)


# ---------------------------------------------------------------------------------------------
# to_anndata / from_pseudobulk
# ---------------------------------------------------------------------------------------------


@pytest.mark.interop
def test_cells_to_cube_to_anndata_keeps_everything(cells: Any, cube: Any) -> None:
    pseudobulk = to_anndata(cube)
    reference = group_sums(cells)
    assert pseudobulk.n_obs == len(reference)  # one observation per non-empty profile
    assert pseudobulk.X.dtype.kind in "iu"
    assert isinstance(pseudobulk.X, np.ndarray)
    for row, (name, obs) in enumerate(pseudobulk.obs.iterrows()):
        assert name == f"{obs['sample_id']}_{obs['group_id']}"
        np.testing.assert_array_equal(
            pseudobulk.X[row], reference.loc[(obs["group_id"], obs["sample_id"])]
        )
        first = cells.obs[
            (cells.obs["sample"] == obs["sample_id"]) & (cells.obs["cell_type"] == obs["group_id"])
        ]
        assert obs["n_cells"] == len(first)
        for column in ("donor", "condition", "age", "lineage"):
            assert obs[column] == first[column].iloc[0]
    assert list(pseudobulk.var_names) == list(cells.var_names)
    pd.testing.assert_frame_equal(
        pseudobulk.var.reset_index(drop=True), cells.var.reset_index(drop=True)
    )
    assert from_pseudobulk(pseudobulk).fingerprint == cube.fingerprint


@pytest.mark.interop
def test_rich_cube_round_trip() -> None:
    cube = rich_cube()
    pseudobulk = to_anndata(cube)
    assert pseudobulk.n_obs == int(np.count_nonzero(cube.cells))
    assert pseudobulk.X.dtype == np.int32
    assert pseudobulk.layers["detected"].dtype == np.uint32
    assert "s4" not in set(pseudobulk.obs["sample_id"])
    assert pseudobulk.uns["cytepool"]["normalization"]["method"] == "tmm"
    back = from_pseudobulk(pseudobulk)
    assert back.fingerprint == cube.fingerprint
    assert back.metadata == cube.metadata
    assert [p.operation for p in back.provenance][: len(cube.provenance)] == [
        p.operation for p in cube.provenance
    ]
    full = to_anndata(cube, drop_empty=False)
    assert full.n_obs == cube.cells.size
    assert from_pseudobulk(full).fingerprint == cube.fingerprint


@pytest.mark.interop
def test_to_anndata_other_layer_and_name_clashes() -> None:
    cube = rich_cube()
    pseudobulk = to_anndata(cube, layer="detected")
    assert pseudobulk.X.dtype == np.uint32
    names = [name for name in pseudobulk.layers if name is not None]  # anndata 0.13: None is X
    assert names == ["counts", "psbulk_props"]
    assert from_pseudobulk(pseudobulk).fingerprint == cube.fingerprint
    with pytest.raises(KeyError, match="no layer 'spliced'"):
        to_anndata(cube, layer="spliced")
    clash = cytepool.Cube(
        {"counts": np.ones((1, 1, 1), dtype=np.int64)},
        samples=pd.DataFrame(
            {"sample_id": ["s"], "n_cells": [7], "psbulk_counts": [1.0], "kind": ["x"]}
        ),
        groups=pd.DataFrame({"group_id": ["g"], "kind": ["y"]}),
        features=pd.DataFrame({"feature_id": ["f"]}),
        cells=np.array([[1]]),
    )
    obs = to_anndata(clash).obs
    assert list(obs.columns) == [
        "sample_id",
        "group_id",
        "n_cells",
        "psbulk_cells",
        "psbulk_counts",
        "sample_n_cells",
        "sample_psbulk_counts",
        "kind",
        "group_kind",
    ]
    assert obs["kind"].iloc[0] == "x"
    assert obs["group_kind"].iloc[0] == "y"


@pytest.mark.interop
def test_subset_pseudobulk_keeps_present_ids() -> None:
    cube = rich_cube()
    pseudobulk = to_anndata(cube)
    one_group = pseudobulk[pseudobulk.obs["group_id"] == "Mono"].copy()
    back = from_pseudobulk(one_group)
    assert list(back.groups.index) == ["Mono"]
    assert list(back.samples.index) == ["s0", "s1", "s2", "s3"]
    np.testing.assert_array_equal(back.to_numpy("counts")[0], cube.to_numpy("counts")[2, :4])
    assert back.normalization is not None
    np.testing.assert_array_equal(back.normalization.factors, cube.normalization.factors[2:, :4])
    some_genes = pseudobulk[:, ["g1", "g5"]].copy()
    assert list(from_pseudobulk(some_genes).features.index) == ["g1", "g5"]


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("suffix", ["h5ad", "zarr"])
def test_cube_file_to_anndata_file_keeps_fingerprint(tmp_path: Path, suffix: str) -> None:
    from cytepool.io import read_cube, write_cube

    cube = rich_cube()
    write_cube(cube, tmp_path / "c.cube.zarr")
    lazy = read_cube(tmp_path / "c.cube.zarr")
    again = written_and_read(to_anndata(lazy), tmp_path / f"pb.{suffix}")
    assert from_pseudobulk(again).fingerprint == cube.fingerprint


def written_and_read(pseudobulk: Any, path: Path) -> Any:
    """``pseudobulk`` written by anndata to ``path`` (.h5ad or .zarr) and read back."""
    if path.suffix == ".h5ad":
        pseudobulk.write_h5ad(path)
        return ad.read_h5ad(path)
    pseudobulk.write_zarr(path)
    return ad.read_zarr(path)


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("suffix", ["h5ad", "zarr"])
def test_dates_of_a_cube_file_go_to_anndata_and_back(tmp_path: Path, suffix: str) -> None:
    """A cube read from a file holds dates as pyarrow dates, which anndata cannot write: they
    go as ISO texts, and come back as dates (anndata raised IORegistryError before)."""
    import datetime as dt

    from cytepool.io import read_cube, write_cube

    days = pd.array([dt.date(2024, 1, 1), None, dt.date(1, 1, 1)], dtype="date32[pyarrow]")
    cube = cytepool.Cube(
        {"counts": np.ones((1, 3, 2), dtype=np.int64)},
        samples=pd.DataFrame({"sample_id": ["s1", "s2", "s3"], "day": days}),
        groups=pd.DataFrame({"group_id": ["g"]}),
        features=pd.DataFrame({"feature_id": ["f1", "f2"]}),
        cells=np.ones((1, 3), dtype=np.int64),
    )
    write_cube(cube, tmp_path / "c.cube.zarr")
    pseudobulk = to_anndata(read_cube(tmp_path / "c.cube.zarr"))
    back = from_pseudobulk(written_and_read(pseudobulk, tmp_path / f"pb.{suffix}"))
    assert back.fingerprint == cube.fingerprint
    pd.testing.assert_frame_equal(back.samples, cube.samples)


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("backend", ["polars", "pyarrow"])
def test_polars_and_pyarrow_tables_go_to_anndata_and_back(tmp_path: Path, backend: str) -> None:
    """Integers and booleans with missing values, and dates, of a polars or pyarrow table
    reach anndata in pandas types of the same canonical form (plain pandas made floats,
    objects and datetimes of them, so the fingerprint changed or from_pseudobulk failed)."""
    import datetime as dt

    pa = pytest.importorskip("pyarrow")
    pl = pytest.importorskip("polars")
    columns = {
        "sample_id": pa.array(["s1", "s2", "s3"]),
        "n": pa.array([3, None, 5], pa.int32()),
        "u": pa.array([1, 2, None], pa.uint8()),
        "ok": pa.array([True, None, False]),
        "day": pa.array([dt.date(2024, 1, 1), None, dt.date(1, 1, 1)], pa.date32()),
        "x": pa.array([1.5, None, 2.0]),
    }

    def table(data: dict[str, Any]) -> Any:
        arrow = pa.table(data)
        return pl.from_arrow(arrow) if backend == "polars" else arrow

    cube = cytepool.Cube(
        {"counts": np.ones((1, 3, 1), dtype=np.int64)},
        samples=table(columns),
        groups=table({"group_id": ["g"]}),
        features=table({"feature_id": ["f"]}),
        cells=np.ones((1, 3), dtype=np.int64),
    )
    pseudobulk = to_anndata(cube)
    assert from_pseudobulk(pseudobulk).fingerprint == cube.fingerprint
    pseudobulk.write_h5ad(tmp_path / "pb.h5ad")
    assert from_pseudobulk(ad.read_h5ad(tmp_path / "pb.h5ad")).fingerprint == cube.fingerprint


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("suffix", ["h5ad", "zarr"])
def test_date_objects_go_to_anndata_and_back(tmp_path: Path, suffix: str) -> None:
    """A pandas column of datetime.date objects (digested as dates) goes as ISO texts and
    comes back as such objects: write_h5ad raised anndata's TypeError, and write_zarr gave
    texts back (another fingerprint)."""
    import datetime as dt

    cube = cytepool.Cube(
        {"counts": np.ones((2, 2, 3), dtype=np.int64)},
        samples=pd.DataFrame({"sample_id": ["s0", "s1"], "day": [dt.date(2020, 1, 1), None]}),
        groups=pd.DataFrame({"group_id": ["g0", "g1"], "day": [dt.date(1, 1, 1)] * 2}),
        features=pd.DataFrame({"feature_id": ["f0", "f1", "f2"]}),
        cells=np.full((2, 2), 5),
    )
    assert from_pseudobulk(to_anndata(cube)).fingerprint == cube.fingerprint
    back = from_pseudobulk(written_and_read(to_anndata(cube), tmp_path / f"pb.{suffix}"))
    assert back.fingerprint == cube.fingerprint
    pd.testing.assert_frame_equal(back.groups, cube.groups)
    assert back.samples["day"].tolist() == [dt.date(2020, 1, 1), None]


@pytest.mark.interop
def test_polars_enum_and_categorical_columns_go_to_anndata_and_mudata() -> None:
    """polars' Enum and Categorical reach pyarrow with unsigned dictionary indices, which
    pyarrow 18 cannot make pandas of (ArrowTypeError): made signed first."""
    pl = pytest.importorskip("polars")
    pytest.importorskip("mudata")
    samples = pl.DataFrame(
        {
            "sample_id": ["s0", "s1"],
            "condition": pl.Series(["ctrl", "stim"], dtype=pl.Enum(["ctrl", "stim"])),
            "site": pl.Series(["x", "y"], dtype=pl.Categorical()),
        }
    )
    cube = cytepool.Cube(
        {"counts": np.ones((1, 2, 2), dtype=np.int64)},
        samples=samples,
        groups=pl.DataFrame({"group_id": ["g0"]}),
        features=pl.DataFrame({"feature_id": ["f0", "f1"]}),
        cells=np.full((1, 2), 3),
    )
    pseudobulk = to_anndata(cube)
    assert pseudobulk.obs["condition"].tolist() == ["ctrl", "stim"]
    assert from_pseudobulk(pseudobulk).fingerprint == cube.fingerprint
    assert conv.from_mudata(conv.to_mudata(cube)).fingerprint == cube.fingerprint


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_floats_with_missing_values_go_to_anndata_and_back(tmp_path: Path) -> None:
    """anndata cannot write pandas' Float32/Float64 (IORegistryError before): they go as
    floats with NaN, which the digest counts as missing as it does <NA>, and come back."""
    cube = cytepool.Cube(
        {"counts": np.ones((1, 3, 1), dtype=np.int64)},
        samples=pd.DataFrame(
            {
                "sample_id": ["s1", "s2", "s3"],
                "age": pd.array([31.5, None, -0.0], dtype="Float64"),
                "weight": pd.array([1.5, None, 2.0], dtype="Float32"),
            }
        ),
        groups=pd.DataFrame({"group_id": ["g"]}),
        features=pd.DataFrame({"feature_id": ["f"]}),
        cells=np.ones((1, 3), dtype=np.int64),
    )
    to_anndata(cube).write_h5ad(tmp_path / "pb.h5ad")
    back = from_pseudobulk(ad.read_h5ad(tmp_path / "pb.h5ad"))
    assert back.fingerprint == cube.fingerprint
    assert back.samples["age"].dtype == "Float64"
    assert back.samples["weight"].dtype == "Float32"


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("where", ["memory", "h5ad", "zarr", "MuData"])
@pytest.mark.parametrize("values", [["x", None, "z"], ["x", "y", "x"]])
def test_str_columns_go_to_anndata_and_back(
    tmp_path: Path, where: str, values: list[str | None]
) -> None:
    """pandas 3's default strings, StringDtype(na_value=NaN), which pandas 2.3 reads a cube
    file pandas 3 wrote in: recorded as "str", which pandas 2.3 made Python strings of (its
    missing values the text 'None', another fingerprint)."""
    column = pd.array(values, dtype=pd.StringDtype(na_value=np.nan))
    cube = one_column_cube(column)
    if where == "MuData":
        pytest.importorskip("mudata")
        back = conv.from_mudata(conv.to_mudata(cube))
    else:
        back = round_tripped(cube, tmp_path, where)
    assert back.fingerprint == cube.fingerprint
    assert back.samples["c"].dtype == pd.StringDtype(na_value=np.nan)
    assert back.samples["c"].isna().tolist() == [value is None for value in values]
    pd.testing.assert_frame_equal(back.samples, cube.samples)


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_zone_with_summer_time_goes_to_anndata_and_back(tmp_path: Path) -> None:
    """Winter and summer times of one zone are texts with two offsets: parsed as UTC, then
    put in the zone (pandas 3 raised "Mixed timezones detected", pandas 2 warned)."""
    when = pd.to_datetime(["2024-01-15 10:00", "2024-07-15 10:00", None])
    cube = cytepool.Cube(
        {"counts": np.ones((1, 3, 1), dtype=np.int64)},
        samples=pd.DataFrame(
            {"sample_id": ["s1", "s2", "s3"], "at": when.tz_localize("Europe/Berlin")}
        ),
        groups=pd.DataFrame({"group_id": ["g"]}),
        features=pd.DataFrame({"feature_id": ["f"]}),
        cells=np.ones((1, 3), dtype=np.int64),
    )
    assert from_pseudobulk(to_anndata(cube)).fingerprint == cube.fingerprint
    to_anndata(cube).write_h5ad(tmp_path / "pb.h5ad")
    back = from_pseudobulk(ad.read_h5ad(tmp_path / "pb.h5ad"))
    assert back.fingerprint == cube.fingerprint
    pd.testing.assert_frame_equal(back.samples, cube.samples)


def one_column_cube(column: Any, name: str = "c", features: Any = None) -> Any:
    """A cube of three samples whose sample table holds ``column`` (and features ``f``)."""
    return cytepool.Cube(
        {"counts": np.ones((1, 3, 1), dtype=np.int64)},
        samples=pd.DataFrame({"sample_id": ["s1", "s2", "s3"], name: column}),
        groups=pd.DataFrame({"group_id": ["g"]}),
        features=pd.DataFrame({"feature_id": ["f"]}) if features is None else features,
        cells=np.ones((1, 3), dtype=np.int64),
    )


def round_tripped(cube: Any, tmp_path: Path, where: str) -> Any:
    """``from_pseudobulk(to_anndata(cube))``, in memory or through an .h5ad / .zarr file."""
    pseudobulk = to_anndata(cube)
    if where != "memory":
        pseudobulk = written_and_read(pseudobulk, tmp_path / f"pb.{where}")
    return from_pseudobulk(pseudobulk)


def _time_categories() -> dict[str, Any]:
    import datetime as dt

    days = pd.to_datetime(["2020-01-01 00:00", "2021-06-01 12:30", "2019-01-01 00:00"])
    return {
        "datetime[ns]": days,
        "datetime[s]": days.as_unit("s"),
        "datetime[us,UTC]": days.as_unit("us").tz_localize("UTC"),
        "datetime[ns,Europe/Berlin]": days.tz_localize("Europe/Berlin"),
        "duration[ns]": pd.to_timedelta([1, 2, 3], unit="h"),
        "duration[ms]": pd.to_timedelta([1, -2, 3], unit="s").as_unit("ms"),
        "date objects": pd.Index([dt.date(2020, 1, 1), dt.date(2021, 1, 1), dt.date(1, 1, 1)]),
    }


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("where", ["memory", "h5ad", "zarr"])
@pytest.mark.parametrize("kind", list(_time_categories()))
def test_categoricals_of_times_go_to_anndata_and_back(
    tmp_path: Path, kind: str, where: str
) -> None:
    """A categorical whose categories are datetimes (with or without zone), durations or
    dates: anndata cannot write such categories (write_h5ad raised TypeError) and write_zarr
    gave zoned datetimes and dates back as texts (another fingerprint). The categories go as
    ISO texts, the codes and order kept, and come back exactly."""
    categories = _time_categories()[kind]
    column = pd.Categorical.from_codes([2, -1, 0], categories=categories, ordered=True)
    cube = one_column_cube(column)
    back = round_tripped(cube, tmp_path, where)
    assert back.fingerprint == cube.fingerprint
    pd.testing.assert_frame_equal(back.samples, cube.samples)
    assert list(back.samples["c"].cat.categories) == list(categories)  # unused one kept


def _zones() -> dict[str, Any]:
    import datetime as dt

    import dateutil.tz as dateutil_tz

    zones = {
        "dateutil Europe/Berlin": dateutil_tz.gettz("Europe/Berlin"),
        "dateutil UTC": dateutil_tz.tzutc(),
        "dateutil offset": dateutil_tz.tzoffset(None, -3 * 3600),
        "datetime.timezone offset": dt.timezone(dt.timedelta(hours=5, minutes=30)),
    }
    try:
        import pytz
    except ImportError:  # the newest stack has no pytz
        return zones
    return {
        **zones,
        "pytz.FixedOffset": pytz.FixedOffset(330),
        "pytz named": pytz.timezone("US/Eastern"),
    }


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("kind", ["AnnData", "MuData", "h5ad"])
@pytest.mark.parametrize("zone", list(_zones()))
def test_datetimes_of_any_zone_library_go_to_anndata_and_back(
    tmp_path: Path, zone: str, kind: str
) -> None:
    """The recorded dtype names a zone as the tables do (zone_name): pandas' own name of a
    dateutil or pytz offset zone ("tzfile('/usr/share/zoneinfo/Europe/Berlin')",
    "pytz.FixedOffset(330)") made from_pseudobulk and from_mudata raise TypeError."""
    from cytepool.io.tables.zones import zone_name

    when = pd.to_datetime(["2020-01-01 00:00", "2021-07-01 10:00", None]).tz_localize(
        _zones()[zone]
    )
    cube = one_column_cube(when)
    if kind == "MuData":
        pytest.importorskip("mudata")
        back = conv.from_mudata(conv.to_mudata(cube))
    else:
        back = round_tripped(cube, tmp_path, "memory" if kind == "AnnData" else "h5ad")
    assert back.fingerprint == cube.fingerprint
    assert zone_name(back.samples["c"].dt.tz) == zone_name(when.tz)
    assert back.samples["c"].tolist() == cube.samples["c"].tolist()


def _arrow_columns() -> dict[str, Any]:
    import datetime as dt

    pa = pytest.importorskip("pyarrow")

    def arrow(values: list[Any], kind: Any) -> Any:
        return pd.array(values, dtype=pd.ArrowDtype(kind))

    when = [dt.datetime(2020, 1, 1, 10), None, dt.datetime(1000, 1, 1)]
    return {
        "int64": arrow([31, None, 45], pa.int64()),
        "uint8": arrow([1, 2, None], pa.uint8()),
        "int32 without missing": arrow([1, 2, 3], pa.int32()),
        "double": arrow([1.5, None, -2.0], pa.float64()),
        "float": arrow([1.5, 2.0, None], pa.float32()),
        "bool": arrow([True, None, False], pa.bool_()),
        "string": arrow(["a", None, "c"], pa.string()),
        "string without missing": arrow(["a", "b", "a"], pa.string()),
        "large_string": arrow(["a", "b", None], pa.large_string()),
        "timestamp[s]": arrow(when, pa.timestamp("s")),
        "timestamp[us, UTC]": arrow(
            [*when[:2], dt.datetime(2021, 7, 1)], pa.timestamp("us", "UTC")
        ),
        "timestamp[ms, Europe/Berlin]": arrow(
            [dt.datetime(2020, 1, 1, tzinfo=dt.UTC), None, dt.datetime(2021, 7, 1, tzinfo=dt.UTC)],
            pa.timestamp("ms", "Europe/Berlin"),
        ),
        "duration[ms]": arrow(
            [dt.timedelta(seconds=1.5), None, dt.timedelta(days=-1)], pa.duration("ms")
        ),
        "categorical of int64[pyarrow]": pd.Categorical.from_codes(
            [1, 0, -1], pd.Index(arrow([7, 3], pa.int64()))
        ),
    }


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("where", ["memory", "h5ad", "zarr"])
@pytest.mark.parametrize("kind", list(_arrow_columns()))
def test_pyarrow_backed_columns_go_to_anndata_and_back(
    tmp_path: Path, kind: str, where: str
) -> None:
    """pandas columns backed by pyarrow, which a cube holds, made the AnnData unwritable
    (IORegistryError: no method for ArrowExtensionArray): they go in the numpy or nullable
    pandas type holding their values, in obs, var and the record, and come back in their type."""
    column = _arrow_columns()[kind]
    features = pd.DataFrame({"feature_id": ["f"], "c": column[:1]})
    cube = one_column_cube(column, features=features)
    pseudobulk = to_anndata(cube)
    assert not any(isinstance(t, pd.ArrowDtype) for t in pseudobulk.obs.dtypes)
    back = round_tripped(cube, tmp_path, where)
    assert back.fingerprint == cube.fingerprint
    pd.testing.assert_frame_equal(back.samples, cube.samples)
    pd.testing.assert_frame_equal(back.features, cube.features)


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("where", ["memory", "h5ad"])
@pytest.mark.parametrize(
    "column",
    [
        np.array(["1000-01-01", "2020-01-01T10:00:01", "NaT"], dtype="datetime64[s]"),
        np.array(["0001-01-01", "9999-12-31T23:59:59.999", "1500-06-30"], dtype="datetime64[ms]"),
        np.array(["1200-01-01", "2020-01-01", "NaT"], dtype="datetime64[us]"),
        np.array([300 * 365 * 86400, -5, -(10**11)], dtype="timedelta64[s]"),
        np.array([400 * 365 * 86400 * 1000 + 7, 0, "NaT"], dtype="timedelta64[ms]"),
    ],
    ids=["datetime64[s]", "datetime64[ms]", "datetime64[us]", "timedelta64[s]", "timedelta64[ms]"],
)
def test_times_outside_nanoseconds_go_to_anndata_and_back(
    tmp_path: Path, column: Any, where: str
) -> None:
    """Datetimes and durations of a unit coarser than ns beyond the range of nanoseconds
    (years 1677-2262, +-292 years) are parsed straight into their unit: pandas' parsing
    through nanoseconds raised OutOfBoundsDatetime / OutOfBoundsTimedelta."""
    cube = one_column_cube(pd.Series(column))
    back = round_tripped(cube, tmp_path, where)
    assert back.fingerprint == cube.fingerprint
    pd.testing.assert_frame_equal(back.samples, cube.samples)


@pytest.mark.interop
@pytest.mark.parametrize(
    ("texts", "unit", "expected"),
    [
        (
            ["2020-01-01T01:00:00+01:00", "2020-01-01T00:00:00-05:30"],
            "s",
            ["2020-01-01T00:00:00", "2020-01-01T05:30:00"],
        ),
        (["2020-01-01T00:00:00.000000001", None], "ns", ["2020-01-01T00:00:00.000000001", "NaT"]),
        (["1000-01-01T00:00:00Z", float("nan")], "ms", ["1000-01-01T00:00:00", "NaT"]),
        (
            ["1935-05-01T12:00:00+00:19:32", "1900-01-01T00:00:00-00:17:30"],
            "s",
            ["1935-05-01T11:40:28", "1900-01-01T00:17:30"],
        ),
        (
            ["2020-01-01T00:00:05.000007+00:00:05.000007", "2020-01-01T00:00:00-00:00:00.500000"],
            "ns",
            ["2020-01-01T00:00:00", "2020-01-01T00:00:00.5"],
        ),
    ],
)
def test_datetime_texts_are_parsed_into_their_unit(
    texts: list[Any], unit: str, expected: list[str]
) -> None:
    from cytepool.io.anndata._times import datetimes_from_texts

    parsed = datetimes_from_texts(texts, unit)
    np.testing.assert_array_equal(parsed, np.array(expected, dtype=f"datetime64[{unit}]"))


@pytest.mark.interop
def test_a_datetime_text_of_a_finer_unit_is_an_input_error() -> None:
    """An offset of microseconds makes a time no datetime64[s] holds: an error, not rounded."""
    from cytepool.io.anndata._times import datetimes_from_texts

    text = "2020-01-01T00:00:00+00:00:00.000007"
    with pytest.raises(InputError, match=rf"as datetimes, but it holds {re.escape(repr(text))}"):
        datetimes_from_texts([text], "s", "c")


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("where", ["memory", "h5ad", "MuData"])
@pytest.mark.parametrize("unit", ["s", "ns"])
def test_a_zone_offset_of_seconds_goes_to_anndata_and_back(
    tmp_path: Path, where: str, unit: str
) -> None:
    """Europe/Amsterdam before 1937 was local mean time, +00:19:32, which isoformat writes
    with its seconds: from_pseudobulk and from_mudata refused what to_anndata wrote."""
    import zoneinfo

    when = pd.to_datetime(["1935-05-01 12:00", "1950-05-01 12:00", None]).as_unit(unit)
    cube = one_column_cube(when.tz_localize(zoneinfo.ZoneInfo("Europe/Amsterdam")))
    assert to_anndata(cube).obs["c"].iloc[0] == "1935-05-01T12:00:00+00:19:32"
    if where == "MuData":
        pytest.importorskip("mudata")
        back = conv.from_mudata(conv.to_mudata(cube))
    else:
        back = round_tripped(cube, tmp_path, where)
    assert back.fingerprint == cube.fingerprint
    assert back.samples["c"].tolist() == cube.samples["c"].tolist()


@pytest.mark.interop
@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_duration_texts_are_parsed_into_their_unit(unit: str) -> None:
    from cytepool.io.anndata._times import durations_from_texts

    values = pd.to_timedelta([-1, 0, 86_399, 10**9 + 1], unit=unit).as_unit(unit)
    texts = [value.isoformat() for value in values] + [None]
    expected = np.append(values.to_numpy(), np.timedelta64("NaT", unit))
    np.testing.assert_array_equal(durations_from_texts(texts, unit), expected)


@pytest.mark.interop
@pytest.mark.parametrize("kind", ["datetime", "duration"])
def test_a_damaged_time_text_is_an_input_error(kind: str) -> None:
    pseudobulk = to_anndata(
        one_column_cube(
            pd.to_datetime(["2020-01-01"] * 3)
            if kind == "datetime"
            else pd.to_timedelta([1, 2, 3], unit="s")
        )
    )
    record = pseudobulk.uns["cytepool"]
    first = "2020-01-01T00:00:00" if kind == "datetime" else "P0DT0H0M1S"
    record["samples"] = record["samples"].assign(c=[first, "yesterday", None])
    with pytest.raises(InputError, match=rf"column 'c' as {kind}s, but it holds 'yesterday'"):
        from_pseudobulk(pseudobulk)


@pytest.mark.interop
@pytest.mark.parametrize(
    ("recorded", "zone"),
    [
        ("datetime64[ns, tzfile('/usr/share/zoneinfo/Europe/Berlin')]", "Europe/Berlin"),
        ("datetime64[ns, pytz.FixedOffset(330)]", "+05:30"),
        ("datetime64[ns, pytz.FixedOffset(-90)]", "-01:30"),
        ("datetime64[ns, UTC+05:30]", "+05:30"),
        ("datetime64[ns, UTC]", "UTC"),
    ],
)
def test_records_naming_zones_as_pandas_printed_them_are_read(recorded: str, zone: str) -> None:
    """Records written before zones were named by zone_name (files of dateutil and pytz
    offset zones, which from_pseudobulk could not read) are read, in the zone they name."""
    import json

    from cytepool.io.tables.zones import zone_name

    when = pd.to_datetime(["2020-01-01", "2021-07-01", "2022-01-01"]).tz_localize("UTC")
    pseudobulk = to_anndata(one_column_cube(when))
    record = pseudobulk.uns["cytepool"]
    dtypes = json.loads(record["dtypes"])
    dtypes["samples"]["c"] = recorded
    record["dtypes"] = json.dumps(dtypes)
    back = from_pseudobulk(pseudobulk).samples["c"]
    assert zone_name(back.dt.tz) == zone
    assert back.dt.tz_convert("UTC").tolist() == when.tolist()


@pytest.mark.interop
def test_record_dtype_mismatch_is_an_error() -> None:
    pseudobulk = to_anndata(rich_cube())
    pseudobulk.X = pseudobulk.X * 0.5
    with pytest.raises(ValueError, match=r"non-integer values .* integers \(int32\) are required"):
        from_pseudobulk(pseudobulk)
    pseudobulk.uns["cytepool"]["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        from_pseudobulk(pseudobulk)


def _dtypes_with(table: str, column: str, name: Any) -> str:
    import json

    dtypes = json.loads(to_anndata(rich_cube()).uns["cytepool"]["dtypes"])
    dtypes[table][column] = name
    return json.dumps(dtypes)


@pytest.mark.interop
@pytest.mark.parametrize(
    ("field", "value", "detail"),
    [
        ("cells", np.ones((3, 3), dtype=np.int64), r"its 'cells' are int64 of shape \(3, 3\), "),
        ("cells", np.ones(5, dtype=np.int64), r"its 'cells' are int64 of shape \(5,\), expected"),
        ("cells", np.full((3, 5), 1.5), r"its 'cells' are float64 of shape \(3, 5\), expected"),
        ("version", "1.0", r"its 'version' is '1\.0', expected the integer 1"),
        ("version", 1.0, r"its 'version' is 1\.0, expected the integer 1"),
        ("dtypes", "[]", r"its 'dtypes' are \[\], expected an object with the dtypes of 'layers'"),
        (
            "dtypes",
            '{"layers": {}}',
            r"its 'dtypes' of 'layers' name no dtype of the layer 'counts'",
        ),
        ("dtypes", '{"layers": [], "samples": {}}', r"its 'dtypes' are \{'layers': \[\]"),
        (
            "dtypes",
            _dtypes_with("layers", "counts", "nonsense"),
            r"its 'dtypes' of 'layers' give 'counts' the unknown dtype 'nonsense'",
        ),
        (
            "dtypes",
            _dtypes_with("samples", "donor", "nonsense"),
            r"its 'dtypes' of 'samples' give 'donor' the unknown dtype 'nonsense'",
        ),
        (
            "dtypes",
            _dtypes_with("samples", "visit", "datetime64[ns, Nowhere/Atlantis]"),
            r"its 'dtypes' of 'samples' give 'visit' the unknown dtype 'datetime64\[ns, Nowhere/",
        ),
        (
            "dtypes",
            _dtypes_with("groups", "lineage", 3),
            r"its 'dtypes' of 'groups' give 'lineage' the unknown dtype 3",
        ),
        ("layer", "spliced", r"its 'layer' 'spliced' is not one of its 'layers'"),
        ("metadata", "[1]", r"its 'metadata' is a list, expected an object"),
        ("provenance", "{}", r"its 'provenance' is a dict, expected a list"),
    ],
)
def test_a_damaged_record_is_an_input_error_naming_the_field(
    field: str, value: Any, detail: str
) -> None:
    """A record of another type or shape than to_anndata writes raised IndexError (cells),
    ValueError (version "1.0"), AttributeError (dtypes "[]") or TypeError (an unknown dtype)."""
    pseudobulk = to_anndata(rich_cube())
    pseudobulk.uns["cytepool"][field] = value
    message = rf"^adata\.uns\['cytepool'\] is damaged \({detail}.*\): delete it or rewrite it$"
    with pytest.raises(InputError, match=message):
        from_pseudobulk(pseudobulk)


@pytest.mark.interop
@pytest.mark.parametrize(
    ("text", "detail"),
    [(False, r"its 'modalities' are 1, expected one per"), (True, r".*is the text 'xx")],
)
def test_a_damaged_record_of_a_mudata_is_an_input_error(text: bool, detail: str) -> None:
    """Modalities of another number than the groups, or a text (whose letters, as many as
    the groups, were once taken as the names)."""
    pytest.importorskip("mudata")
    cube = rich_cube()
    mdata = conv.to_mudata(cube)
    mdata.uns["cytepool"]["modalities"] = "x" * len(cube.groups) if text else ["B"]
    message = rf"^mdata\.uns\['cytepool'\] is damaged \({detail}"
    with pytest.raises(InputError, match=message):
        conv.from_mudata(mdata)


@pytest.mark.interop
@pytest.mark.parametrize("dtype", ["int32", "int64", "uint32", "uint64"])
@pytest.mark.parametrize(
    ("spoiled", "layer", "named"),
    [
        ("X", None, r"adata\.X holds"),  # scanpy's workflow: counts in layers, X normalised
        ("counts", "counts", r"adata\.layers\['counts'\] holds"),  # read from there by layer=
        ("detected", None, r"adata\.layers\['detected'\] holds"),
    ],
)
def test_non_integer_sums_are_named_by_the_matrix_they_are_in(
    dtype: str, spoiled: str, layer: str | None, named: str
) -> None:
    """The error names the matrix holding the non-integer values: with the counts in X as
    recorded, a normalised X was blamed on "layer 'counts'", the cube's name of the layer,
    although adata.layers['counts'] held the counts the user kept there."""
    counts = np.arange(1, 9).reshape(1, 2, 4).astype(dtype)
    cube = cytepool.Cube(
        {"counts": counts, "detected": counts.copy()},
        samples=pd.DataFrame({"sample_id": ["a", "b"]}),
        groups=pd.DataFrame({"group_id": ["A"]}),
        features=pd.DataFrame({"feature_id": list("wxyz")}),
        cells=np.full((1, 2), 5),
    )
    pseudobulk = to_anndata(cube)
    pseudobulk.layers["counts"] = pseudobulk.X.copy()
    if spoiled == "X":
        pseudobulk.X = pseudobulk.X / 3
    else:
        pseudobulk.layers[spoiled] = pseudobulk.layers[spoiled] / 3
    with pytest.raises(
        InputError, match=rf"^{named} non-integer values .* \({dtype}\) are required"
    ):
        from_pseudobulk(pseudobulk, layer=layer)


@pytest.mark.interop
def test_non_integer_sums_of_modalities_are_named_so() -> None:
    pytest.importorskip("mudata")
    mdata = conv.to_mudata(rich_cube())
    for modality in mdata.mod.values():
        modality.X = modality.X / 3
    with pytest.raises(InputError, match=r"^mdata: the modalities' X holds non-integer values"):
        conv.from_mudata(mdata)


@pytest.mark.interop
def test_unknown_ids_with_a_record_are_an_error() -> None:
    pseudobulk = to_anndata(rich_cube())
    obs = pseudobulk.obs.copy()
    obs["sample_id"] = obs["sample_id"].cat.rename_categories({"s0": "zz"})
    pseudobulk.obs = obs
    with pytest.raises(ValueError, match=r"sample ids that uns.* does not know, e.g. 'zz'"):
        from_pseudobulk(pseudobulk)


def pseudobulk_frame(sums: Any, cells: list[float], **obs: Any) -> Any:
    frame = pd.DataFrame(obs, index=[f"p{i}" for i in range(len(cells))])
    frame["psbulk_cells"] = cells
    return ad.AnnData(X=np.asarray(sums), obs=frame)


@pytest.mark.interop
def test_from_pseudobulk_foreign_dtypes_and_covariates() -> None:
    sums = np.array([[1.0, 2.0], [3.0, 0.0], [5.0, 6.0]])
    adata = pseudobulk_frame(
        sums,
        [1.0, 2.0, 3.0],
        donor=["b", "a", "a"],
        ct=["T", "T", "B"],
        sex=["F", "M", "M"],
        kind=["L", "L", "L"],
    )
    cube = from_pseudobulk(adata, sample_key="donor", group_key="ct")
    assert cube.layers["counts"].dtype == np.int64
    assert list(cube.samples.index) == ["a", "b"]
    assert list(cube.groups.index) == ["B", "T"]
    assert list(cube.samples.columns) == ["sex", "kind"]
    assert list(cube.groups.columns) == []
    np.testing.assert_array_equal(cube.cells, [[3, 0], [2, 1]])
    np.testing.assert_array_equal(cube.profiles("T"), [[3, 0], [1, 2]])
    fractional = pseudobulk_frame(sums / 2, [1.0, 2.0, 3.0], d=["b", "a", "a"], g=["T", "T", "B"])
    assert (
        from_pseudobulk(fractional, sample_key="d", group_key="g").layers["counts"].dtype
        == np.float64
    )
    integers = pseudobulk_frame(sums.astype(np.uint32), [1, 2, 3], d=["b", "a", "a"], g=list("TTB"))
    assert (
        from_pseudobulk(integers, sample_key="d", group_key="g").layers["counts"].dtype == np.uint32
    )


@pytest.mark.interop
def test_from_pseudobulk_errors() -> None:
    sums = np.array([[1.0, 2.0], [3.0, 0.0]])
    keys = {"sample_key": "d", "group_key": "g"}
    adata = pseudobulk_frame(sums, [1.0, 2.0], d=["a", "b"], g=["T", "T"])
    no_cells = adata.copy()
    del no_cells.obs["psbulk_cells"]
    with pytest.raises(ValueError, match=r"no cell numbers .* pass cells_key="):
        from_pseudobulk(no_cells, **keys)
    with pytest.raises(KeyError, match="cells_key 'cells'"):
        from_pseudobulk(adata, **keys, cells_key="cells")
    fractional = pseudobulk_frame(sums, [1.5, 2.0], d=["a", "b"], g=["T", "T"])
    with pytest.raises(ValueError, match=r"'psbulk_cells' must hold cell numbers.*1.5.*'p0'"):
        from_pseudobulk(fractional, **keys)
    twice = pseudobulk_frame(sums, [1.0, 2.0], d=["a", "a"], g=["T", "T"])
    with pytest.raises(ValueError, match="sample 'a' and group 'T' appears 2 times"):
        from_pseudobulk(twice, **keys)
    negative = pseudobulk_frame(-sums, [1.0, 2.0], d=["a", "b"], g=["T", "T"])
    with pytest.raises(ValueError, match=r"adata.X holds negative values"):
        from_pseudobulk(negative, **keys)
    empty = ad.AnnData(obs=adata.obs, var=adata.var, layers={"sum": sums})
    with pytest.raises(ValueError, match=r"adata.X is empty.*layer= naming one of \['sum'\]"):
        from_pseudobulk(empty, **keys)
    with pytest.raises(KeyError, match="no layer 'summ'"):
        from_pseudobulk(empty, **keys, layer="summ")
    with pytest.raises(KeyError, match="group_key 'ct'"):
        from_pseudobulk(adata, sample_key="d", group_key="ct")


@pytest.mark.interop
@pytest.mark.parametrize(
    ("cells", "found"),
    [
        (np.array([1e19, 6.0]), r"holds 1e\+19 in row 'p0'"),  # was -9223372036854775808
        (np.array([6.0, 2.0**63]), r"holds 9\.223372036854776e\+18 in row 'p1'"),
        (np.array([2**63, 6], dtype=np.uint64), r"holds 9223372036854775808 in row 'p0'"),
        (pd.array([1, None], dtype="Int64"), r"holds <NA> in row 'p1'"),
        (np.array([np.inf, 1.0]), r"holds inf in row 'p0'"),
    ],
    ids=["1e19", "2**63 float", "2**63 uint64", "missing", "inf"],
)
def test_cell_numbers_out_of_int64_are_an_input_error(cells: Any, found: str) -> None:
    """Cell numbers were read through float64 and cast to int64 unchecked: 1e19 became
    -9223372036854775808, and the error blamed a number the column never held."""
    adata = pseudobulk_frame(np.ones((2, 1)), cells, d=["a", "b"], g=["T", "T"])
    message = (
        r"^adata: obs column 'psbulk_cells' must hold cell numbers \(whole numbers from 0 to "
        rf"9223372036854775807\) but {found}: correct it \(or, if it is not the column of cell "
        r"numbers, pass cells_key="
    )
    with pytest.raises(InputError, match=message):
        from_pseudobulk(adata, sample_key="d", group_key="g")


@pytest.mark.interop
@pytest.mark.parametrize(
    ("cells", "found"),
    [
        (np.array(["1", "2"], dtype=object), r"dtype (object|str) \(e\.g\. '1' in row 'p0'\)"),
        (np.array([True, False]), r"dtype bool \(e\.g\. True in row 'p0'\)"),
        (pd.array([True, None], dtype="boolean"), r"dtype boolean \(e\.g\. True in row 'p0'\)"),
        (pd.Categorical([3, 4]), r"dtype category \(e\.g\. 3 in row 'p0'\)"),
        (
            pd.to_timedelta([1, 2], unit="s"),
            r"dtype timedelta64\[\w+\] \(e\.g\. Timedelta\('0 days 00:00:01'\) in row 'p0'\)",
        ),
    ],
    ids=["strings", "bool", "boolean", "category", "timedelta"],
)
def test_cell_numbers_of_a_dtype_not_of_numbers_are_an_input_error(cells: Any, found: str) -> None:
    """ "whole numbers, of any numeric dtype": strings were parsed and booleans counted."""
    adata = pseudobulk_frame(np.ones((2, 1)), cells, d=["a", "b"], g=["T", "T"])
    message = (
        r"^adata: obs column 'psbulk_cells' must hold cell numbers, of an integer or float "
        rf"dtype, but is of {found}: convert it \(obs\['psbulk_cells'\]\.astype\('int64'\)\)"
    )
    with pytest.raises(InputError, match=message):
        from_pseudobulk(adata, sample_key="d", group_key="g")


@pytest.mark.interop
@pytest.mark.parametrize("dtype", ["int64", "uint64", "Int64", "uint64[pyarrow]", "float64"])
def test_cell_numbers_are_read_exactly(dtype: str) -> None:
    """Integers past 2**53 were rounded through float64 (2**53 + 1 read as 2**53)."""
    if dtype.endswith("[pyarrow]"):
        pytest.importorskip("pyarrow")
    numbers = [2**53 + 1, 2**63 - 1] if dtype != "float64" else [2.0**53, 2.0**62]
    adata = pseudobulk_frame(
        np.ones((2, 1)), pd.array(numbers, dtype=dtype), d=["a", "b"], g=["T", "T"]
    )
    cube = from_pseudobulk(adata, sample_key="d", group_key="g")
    assert cube.cells.tolist() == [[int(n) for n in numbers]]


@pytest.mark.interop
@pytest.mark.parametrize("kind", ["AnnData", "MuData"])
def test_cell_numbers_past_2_53_go_to_anndata_and_back(kind: str) -> None:
    """from_pseudobulk(to_anndata(cube)) changed 2**53 + 1 cells into 2**53 (another
    fingerprint); from_mudata refused what to_mudata wrote (it read 2**53, recorded + 1)."""
    n = 2**53 + 1
    cube = cytepool.Cube(
        {"counts": np.array([[[n, 0]]], dtype=np.int64)},
        samples=pd.DataFrame({"sample_id": ["s1"]}),
        groups=pd.DataFrame({"group_id": ["A"]}),
        features=pd.DataFrame({"feature_id": ["f1", "f2"]}),
        cells=np.array([[n]]),
    )
    if kind == "MuData":
        pytest.importorskip("mudata")
        back = conv.from_mudata(conv.to_mudata(cube))
    else:
        back = from_pseudobulk(to_anndata(cube))
    assert back.cells.tolist() == [[n]]
    assert back.fingerprint == cube.fingerprint


@pytest.mark.interop
def test_cell_numbers_of_a_modality_are_checked_in_their_column() -> None:
    """from_mudata's cells_key: the error names the modality and its column, as read."""
    md = pytest.importorskip("mudata")
    var = pd.DataFrame(index=["a", "b"])
    mods = {
        "B": ad.AnnData(
            np.ones((2, 2)), obs=pd.DataFrame({"k": [1, 2]}, index=["s1", "s2"]), var=var
        ),
        "T": ad.AnnData(
            np.ones((2, 2)), obs=pd.DataFrame({"k": ["1", "x"]}, index=["s1", "s2"]), var=var
        ),
    }
    with mudata_defaults(md):
        mdata = md.MuData(mods, axis=-1)
    message = r"^modality 'T': obs column 'k' must hold cell numbers, of an integer or float dtype"
    with pytest.raises(InputError, match=message):
        conv.from_mudata(mdata, cells_key="k")


@pytest.mark.interop
def test_layer_naming_a_recorded_layer_gives_the_cube() -> None:
    """With the record, layer= naming a layer it lists gives the cube: it read that layer
    as the layer of X (the detected values came back as "counts", the counts were lost)."""
    cube = rich_cube()
    pseudobulk = to_anndata(cube)
    for layer in (None, "counts", "detected"):
        assert from_pseudobulk(pseudobulk, layer=layer).fingerprint == cube.fingerprint
    other = to_anndata(cube, layer="detected")
    assert from_pseudobulk(other, layer="counts").fingerprint == cube.fingerprint
    moved = pseudobulk.copy()  # X normalized, the counts kept in a layer: read from there
    moved.layers["counts"] = moved.X.copy()
    moved.X = moved.X / 2.0
    assert from_pseudobulk(moved, layer="counts").fingerprint == cube.fingerprint
    message = (
        r"^adata: layer='psbulk_props' is not a layer of the cube uns\['cytepool'\] records "
        r"\(X holds 'counts'; its layers are \['counts', 'detected'\]\): omit layer="
    )
    with pytest.raises(InputError, match=message):
        from_pseudobulk(pseudobulk, layer="psbulk_props")
    with pytest.raises(KeyError, match="no layer 'spliced'"):
        from_pseudobulk(pseudobulk, layer="spliced")


@pytest.mark.interop
def test_n_obs_aggregated_holds_the_cell_numbers() -> None:
    """scanpy >= 1.12's sc.get.aggregate records the cells of each profile as
    obs["n_obs_aggregated"]: found without cells_key, after n_cells and psbulk_cells, and
    never a covariate."""
    sums = np.array([[1, 2], [3, 0], [4, 4]])
    adata = pseudobulk_frame(sums, [1, 2, 3], d=["a", "b", "b"], g=["T", "T", "B"])
    adata.obs = adata.obs.rename(columns={"psbulk_cells": "n_obs_aggregated"})
    cube = from_pseudobulk(adata, sample_key="d", group_key="g")
    assert cube.cells.tolist() == [[0, 3], [1, 2]]
    assert list(cube.samples.columns) == []
    adata.obs["psbulk_cells"] = [5, 6, 7]
    assert from_pseudobulk(adata, sample_key="d", group_key="g").cells.tolist() == [[0, 7], [5, 6]]
    del adata.obs["psbulk_cells"], adata.obs["n_obs_aggregated"]
    message = (
        r"looked for 'n_cells', 'psbulk_cells', 'n_obs_aggregated'\): pass cells_key= .* "
        r"\(sc.get.aggregate records them as 'n_obs_aggregated' from scanpy 1.12 on, not before"
    )
    with pytest.raises(InputError, match=message):
        from_pseudobulk(adata, sample_key="d", group_key="g")


# ---------------------------------------------------------------------------------------------
# The real tools
# ---------------------------------------------------------------------------------------------


def test_scanpy_runs_on_to_anndata_output(cube: Any) -> None:
    sc = pytest.importorskip("scanpy")
    pseudobulk = to_anndata(cube)
    sc.pp.normalize_total(pseudobulk)
    sc.pp.log1p(pseudobulk)
    sc.tl.pca(pseudobulk, n_comps=3)
    assert pseudobulk.obsm["X_pca"].shape == (pseudobulk.n_obs, 3)


def test_sums_equal_scanpy_aggregate(cells: Any, cube: Any) -> None:
    sc = pytest.importorskip("scanpy")
    before = snapshot(cells)
    aggregated = sc.get.aggregate(cells, by=["sample", "cell_type"], func="sum")
    assert_unchanged(before, cells)
    sizes = cells.obs.groupby(["sample", "cell_type"], observed=True).size()
    obs = aggregated.obs.copy()
    obs["n_cells"] = [
        sizes.get((s, g), 0) for s, g in zip(obs["sample"], obs["cell_type"], strict=True)
    ]
    aggregated.obs = obs
    aggregated = aggregated[aggregated.obs["n_cells"] > 0].copy()
    pooled = from_pseudobulk(aggregated, sample_key="sample", group_key="cell_type", layer="sum")
    np.testing.assert_array_equal(pooled.to_numpy("counts"), cube.to_numpy("counts"))
    np.testing.assert_array_equal(pooled.cells, cube.cells)


def test_scanpy_aggregate_output_needs_no_cells_key_from_scanpy_1_12(cells: Any, cube: Any) -> None:
    """scanpy 1.12 records the cell numbers (n_obs_aggregated); before, the error says so."""
    sc = pytest.importorskip("scanpy")
    aggregated = sc.get.aggregate(cells, by=["sample", "cell_type"], func="sum")
    if "n_obs_aggregated" not in aggregated.obs:
        from importlib.metadata import version

        release = version("scanpy")
        assert tuple(int(part) for part in release.split(".")[:2]) < (1, 12)
        with pytest.raises(InputError, match=r"pass cells_key= .* from scanpy 1.12 on, not before"):
            from_pseudobulk(aggregated, sample_key="sample", group_key="cell_type", layer="sum")
        return
    aggregated = aggregated[aggregated.obs["n_obs_aggregated"] > 0].copy()
    pooled = from_pseudobulk(aggregated, sample_key="sample", group_key="cell_type", layer="sum")
    np.testing.assert_array_equal(pooled.to_numpy("counts"), cube.to_numpy("counts"))
    np.testing.assert_array_equal(pooled.cells, cube.cells)


# decoupler calls select_dtypes(include="object"), which pandas 3 deprecates for str columns
@pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes:DeprecationWarning")
def test_sums_equal_decoupler_pseudobulk(cells: Any, cube: Any) -> None:
    dc = pytest.importorskip("decoupler")
    before = snapshot(cells)
    pseudobulk = dc.pp.pseudobulk(cells, sample_col="sample", groups_col="cell_type")
    assert_unchanged(before, cells)
    pooled = from_pseudobulk(pseudobulk, sample_key="sample", group_key="cell_type")
    np.testing.assert_array_equal(pooled.to_numpy("counts"), cube.to_numpy("counts"))
    np.testing.assert_array_equal(pooled.cells, cube.cells)
    assert pooled.layers["counts"].dtype == np.int64
    assert list(pooled.samples.columns) == ["donor", "condition", "age"]


def test_pydeseq2_accepts_one_group(cube: Any) -> None:
    dds_module = pytest.importorskip("pydeseq2.dds")
    pseudobulk = to_anndata(cube.select(groups=["T"]))
    dds = dds_module.DeseqDataSet(adata=pseudobulk, design="~condition", quiet=True)
    dds.fit_size_factors()
    assert dds.obs["size_factors"].shape == (pseudobulk.n_obs,)
    assert (dds.obs["size_factors"] > 0).all()


# ---------------------------------------------------------------------------------------------
# MuData
# ---------------------------------------------------------------------------------------------


def test_mudata_round_trip(tmp_path: Path) -> None:
    md = pytest.importorskip("mudata")
    cube = rich_cube()
    mdata = conv.to_mudata(cube)
    assert list(mdata.mod) == ["B", "T_NK", "Mono"]
    t_nk = mdata.mod["T_NK"]
    assert list(t_nk.obs_names) == list(cube.samples.index)
    np.testing.assert_array_equal(t_nk.obs["n_cells"], cube.cells[1])
    np.testing.assert_array_equal(t_nk.X, cube.profiles(1))
    assert t_nk.layers["detected"].dtype == np.uint32
    assert list(mdata.obs["donor"]) == list(cube.samples["donor"])
    before = snapshot(mdata)
    assert conv.from_mudata(mdata).fingerprint == cube.fingerprint
    assert_unchanged(before, mdata)
    with mudata_defaults(md):
        mdata.write(tmp_path / "cube.h5mu")
        again = md.read_h5mu(tmp_path / "cube.h5mu")
    assert conv.from_mudata(again).fingerprint == cube.fingerprint


def test_from_mudata_reads_the_cell_numbers_to_mudata_wrote(tmp_path: Path) -> None:
    """A sample covariate named n_cells pushes the cell numbers to n_cells_: from_mudata
    read the covariate as the cell numbers (a wrong cube, silently)."""
    md = pytest.importorskip("mudata")
    cube = cytepool.Cube(
        {"counts": np.ones((2, 3, 2), dtype=np.int64)},
        samples=pd.DataFrame({"sample_id": ["s0", "s1", "s2"], "n_cells": [100, 200, 300]}),
        groups=pd.DataFrame({"group_id": ["g0", "g1"]}),
        features=pd.DataFrame({"feature_id": ["f0", "f1"]}),
        cells=np.array([[5, 6, 7], [1, 2, 3]]),
    )
    mdata = conv.to_mudata(cube)
    assert mdata.mod["g1"].obs["n_cells_"].tolist() == [1, 2, 3]
    assert conv.from_mudata(mdata).fingerprint == cube.fingerprint
    with mudata_defaults(md):
        mdata.write(tmp_path / "cube.h5mu")
        again = md.read_h5mu(tmp_path / "cube.h5mu")
    assert conv.from_mudata(again).fingerprint == cube.fingerprint
    edited = mdata.mod["g1"].obs.copy()
    edited.loc["s1", "n_cells_"] = 9
    mdata.mod["g1"].obs = edited
    message = (
        r"^modality 'g1': obs column 'n_cells_', where to_mudata wrote the "
        r"cell numbers, holds 9 for sample 's1', but uns\['cytepool'\] records 2: pass cells_key="
    )
    with pytest.raises(InputError, match=message):
        conv.from_mudata(mdata)
    chosen = conv.from_mudata(mdata, cells_key="n_cells_")
    assert chosen.cells.tolist() == [[5, 6, 7], [1, 9, 3]]
    for name in mdata.mod:  # the column gone: the record's numbers
        mdata.mod[name].obs = mdata.mod[name].obs.drop(columns="n_cells_")
    assert conv.from_mudata(mdata).fingerprint == cube.fingerprint


def cube_without_groups(kind: str) -> Any:
    """No cells pooled (no groups, no samples), or samples but no groups."""
    features = pd.DataFrame({"feature_id": [f"g{j}" for j in range(30)], "chrom": ["1"] * 30})
    if kind == "no cells":
        nothing = np.array([], dtype=object)
        counts = np.zeros((0, 30), dtype=np.float32)
        return cytepool.from_cells(
            counts, sample_labels=nothing, group_labels=nothing, features=features
        )
    return cytepool.Cube(
        {"counts": np.zeros((0, 2, 30), dtype=np.int64)},
        samples=pd.DataFrame({"sample_id": ["s1", "s2"], "age": [30, 41]}),
        groups=pd.DataFrame({"group_id": pd.Series([], dtype=object)}),
        features=features,
        cells=np.zeros((0, 2), dtype=np.int64),
    )


@pytest.mark.parametrize("kind", ["no cells", "samples but no groups"])
def test_mudata_of_a_cube_without_groups(tmp_path: Path, kind: str) -> None:
    md = pytest.importorskip("mudata")
    cube = cube_without_groups(kind)
    mdata = conv.to_mudata(cube)
    assert list(mdata.mod) == []
    assert conv.from_mudata(mdata).fingerprint == cube.fingerprint
    mdata.write_h5mu(tmp_path / "empty.h5mu")
    back = conv.from_mudata(md.read_h5mu(tmp_path / "empty.h5mu"))
    assert back.fingerprint == cube.fingerprint
    pd.testing.assert_frame_equal(back.features, cube.features)
    assert from_pseudobulk(to_anndata(cube)).fingerprint == cube.fingerprint
    del mdata.uns[conv.RECORD_KEY]
    with pytest.raises(ValueError, match="mdata has no modalities, and no record of to_mudata"):
        conv.from_mudata(mdata)


def test_from_mudata_without_record() -> None:
    md = pytest.importorskip("mudata")
    obs = pd.DataFrame({"n_cells": [2, 0]}, index=["s1", "s2"])
    mods = {
        name: ad.AnnData(
            np.array([[1, 2], [0, 0]]) * k, obs=obs, var=pd.DataFrame(index=["a", "b"])
        )
        for k, name in enumerate(["B", "T"], start=1)
    }
    with mudata_defaults(md):
        mdata = md.MuData(mods, axis=-1)
    cube = conv.from_mudata(mdata)
    assert list(cube.groups.index) == ["B", "T"]
    np.testing.assert_array_equal(cube.profiles("T"), [[2, 4], [0, 0]])
    other = mods | {"T": ad.AnnData(np.ones((2, 1)), obs=obs, var=pd.DataFrame(index=["c"]))}
    with mudata_defaults(md), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mixed = md.MuData(other, axis=-1)
    with pytest.raises(ValueError, match="modality 'T' has other features"):
        conv.from_mudata(mixed)


def test_from_mudata_cells_shares_samples_and_groups(cells: Any, cube: Any) -> None:
    md = pytest.importorskip("mudata")
    rna = ad.AnnData(cells.X, obs=cells.obs, var=cells.var)
    keep = cells.obs_names[cells.obs["sample"] != "D1-ctrl"]
    protein_counts = sparse.csr_matrix(np.arange(len(keep) * 3).reshape(-1, 3) % 5)
    prot = ad.AnnData(
        protein_counts,
        obs=pd.DataFrame(index=keep),
        var=pd.DataFrame(index=["CD3", "CD19", "CD56"]),
    )
    with mudata_defaults(md):
        mdata = md.MuData({"rna": rna, "prot": prot})
    mdata.obs["sample"] = cells.obs["sample"].reindex(mdata.obs_names).to_numpy()
    mdata.obs["cell_type"] = cells.obs["cell_type"].reindex(mdata.obs_names).to_numpy()
    before = snapshot(mdata)
    cubes = conv.from_mudata_cells(mdata, sample_key="sample", group_key="cell_type")
    assert_unchanged(before, mdata)
    assert list(cubes) == ["rna", "prot"]
    np.testing.assert_array_equal(cubes["rna"].to_numpy("counts"), cube.to_numpy("counts"))
    for name in ("samples", "groups"):
        pd.testing.assert_frame_equal(getattr(cubes["rna"], name), getattr(cubes["prot"], name))
    assert cubes["prot"].cells[:, list(cubes["prot"].samples.index).index("D1-ctrl")].sum() == 0
    assert cubes["prot"].shape[2] == 3
    with pytest.raises(KeyError, match="'batch' is in neither"):
        conv.from_mudata_cells(mdata, sample_key="batch", group_key="cell_type")


def test_from_mudata_cells_names_the_modality_and_records_covariates(cells: Any) -> None:
    md = pytest.importorskip("mudata")
    rna = ad.AnnData(cells.X, obs=cells.obs, var=cells.var)
    prot = ad.AnnData(
        np.full((cells.n_obs, 2), 0.5, dtype=np.float32),
        obs=cells.obs,
        var=pd.DataFrame(index=["CD3", "CD19"]),
    )
    with mudata_defaults(md):
        mdata = md.MuData({"rna": rna, "prot": prot})
    pattern = (
        r"^mdata.mod\['prot'\].X: not every value is a count .* e.g. 0.5 at row \d+ \(cell "
        r"'cell\d+'\), column 0 \(feature 'CD3'\);.* put the raw counts in the X of each "
        r"modality; .* allow_float=True"
    )
    with pytest.warns(NotCountsWarning, match=pattern) as caught:
        cubes = conv.from_mudata_cells(mdata, sample_key="sample", group_key="cell_type")
    assert len(caught) == 1
    for cube in cubes.values():
        record = cube.provenance[-1]
        assert record.operation == "from_mudata_cells"
        assert record.parameters["covariates"]["samples"] == ["donor", "condition", "age"]
        assert record.parameters["covariates"]["groups"] == ["lineage"]
        assert list(record.parameters["covariates"]["dropped"]) == ["n_counts"]
    quiet = conv.from_mudata_cells(
        mdata, sample_key="sample", group_key="cell_type", allow_float=True
    )
    assert quiet["prot"].fingerprint == cubes["prot"].fingerprint


@pytest.mark.interop
def test_from_anndata_records_the_covariates_kept_and_dropped(cells: Any) -> None:
    cube = from_anndata(cells, sample_key="sample", group_key="cell_type")
    record = cube.provenance[-1]
    assert record.operation == "from_anndata"
    covariates = record.parameters["covariates"]
    assert covariates["samples"] == list(cube.samples.columns) == ["donor", "condition", "age"]
    assert covariates["groups"] == list(cube.groups.columns) == ["lineage"]
    assert list(covariates["dropped"]) == ["n_counts"]
    assert re.fullmatch(
        r"varies within sample '\S+' \(0\.\d+ and 0\.\d+\) and within group '\S+' "
        r"\(0\.\d+ and 0\.\d+\)",
        covariates["dropped"]["n_counts"],
    )
    named = from_anndata(cells, sample_key="sample", group_key="cell_type", samples=["age"])
    dropped = named.provenance[-1].parameters["covariates"]["dropped"]
    assert re.fullmatch(
        r"not named as a sample covariate and varies within group '\S+' \('D\d' and 'D\d'\)",
        dropped["donor"],
    )
    assert named.provenance[-1].parameters["covariates"]["groups"] == ["lineage"]


UNSTORABLE = {
    "ints as objects": lambda donors: pd.Series([int(d[1:]) for d in donors], dtype=object),
    "complex": lambda donors: [complex(int(d[1:])) for d in donors],
    "periods": lambda donors: pd.PeriodIndex([f"2020-0{d[1:]}" for d in donors], freq="M"),
    "intervals": lambda donors: pd.IntervalIndex.from_tuples([(0, int(d[1:])) for d in donors]),
}


@pytest.mark.parametrize("kind", list(UNSTORABLE))
def test_a_column_no_table_can_hold_is_dropped_with_its_reason(cells: Any, kind: str) -> None:
    """Constant within each sample, but of a type a cube's table cannot hold: not a reason
    to fail the pooling (it was an InputTypeError), a reason to drop it, named."""
    cells.obs["odd"] = np.asarray(UNSTORABLE[kind](cells.obs["donor"].astype(str).tolist()))
    if kind == "ints as objects":
        cells.obs["odd"] = cells.obs["odd"].astype(object)
    cube = from_anndata(cells, sample_key="sample", group_key="cell_type")
    dropped = cube.provenance[-1].parameters["covariates"]["dropped"]
    assert "odd" not in cube.samples.columns
    assert re.match(r"holds values a cube's table cannot hold \(table column 'odd'", dropped["odd"])


def test_a_column_named_so_no_file_can_hold_it_is_dropped(cells: Any) -> None:
    cells.obs["a/b"] = cells.obs["donor"].astype(str)
    cells.obs["_index"] = cells.obs["donor"].astype(str)
    cube = from_anndata(cells, sample_key="sample", group_key="cell_type")
    dropped = cube.provenance[-1].parameters["covariates"]["dropped"]
    assert dropped["a/b"].startswith("is named so that no cube file can hold it (column name")
    assert dropped["_index"].startswith("is named so that no cube file can hold it ('_index'")


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_cells=st.integers(1, 40),
    n_genes=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
    drop_empty=st.booleans(),
)
def test_pool_then_pseudobulk_round_trip(
    n_cells: int, n_genes: int, seed: int, drop_empty: bool
) -> None:
    rng = np.random.default_rng(seed)
    obs = pd.DataFrame(
        {"sample": rng.choice(["a", "b", "c"], n_cells), "group": rng.choice(["x", "y"], n_cells)},
        index=[str(i) for i in range(n_cells)],
    )
    counts = rng.integers(0, 4, (n_cells, n_genes)).astype(np.float32)
    adata = ad.AnnData(sparse.csr_matrix(counts), obs=obs)
    cube = from_anndata(adata, sample_key="sample", group_key="group")
    assert_pooled_plain(cube, counts, obs)
    back = from_pseudobulk(to_anndata(cube, drop_empty=drop_empty))
    assert back.fingerprint == cube.fingerprint


def assert_pooled_plain(cube: Any, counts: np.ndarray, obs: Any) -> None:
    for g, group in enumerate(cube.groups.index):
        for s, sample in enumerate(cube.samples.index):
            rows = ((obs["sample"] == sample) & (obs["group"] == group)).to_numpy()
            np.testing.assert_array_equal(cube.profiles(g)[s], counts[rows].sum(axis=0))
            assert cube.cells[g, s] == rows.sum()


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("where", ["memory", "h5ad", "zarr"])
@pytest.mark.parametrize("values", ["strings", "integers"])
@pytest.mark.parametrize("ordered", [False, True])
def test_pyarrow_dictionary_columns_go_to_anndata_and_back(
    tmp_path: Path, where: str, values: str, ordered: bool
) -> None:
    """A pandas column of a pyarrow dictionary, which a cube holds as a categorical: anndata
    could not write the AnnData of to_anndata (IORegistryError). It goes as the pandas
    Categorical of the same codes, categories and order, which has its fingerprint."""
    pa = pytest.importorskip("pyarrow")
    categories = pa.array(["x", "y", "z"] if values == "strings" else [7, 3, 5])
    array = pa.DictionaryArray.from_arrays(
        pa.array([2, None, 0], pa.int32()), categories, ordered=ordered
    )
    column = pd.Series(array, dtype=pd.ArrowDtype(array.type))
    cube = one_column_cube(column)
    back = round_tripped(cube, tmp_path, where)
    assert back.fingerprint == cube.fingerprint
    restored = back.samples["c"]
    assert isinstance(restored.dtype, pd.CategoricalDtype)
    assert restored.cat.ordered == ordered
    assert list(restored.cat.categories) == categories.to_pylist()  # the unused one kept
    assert restored.cat.codes.tolist() == [2, -1, 0]


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("where", ["memory", "h5ad", "MuData"])
@pytest.mark.parametrize("table", ["pyarrow", "pandas"])
@pytest.mark.parametrize("zone", ["Asia/Kathmandu", "+05:45", "UTC"])
def test_pyarrow_dictionaries_of_zoned_timestamps_keep_their_zone(
    tmp_path: Path, zone: str, table: str, where: str
) -> None:
    """A pyarrow dictionary of zoned timestamps (in a pyarrow table or a pandas column):
    pyarrow's to_pandas makes its categories naive, so to_anndata recorded and wrote them
    without their zone (category[datetime64[us]]) and the cube came back another."""
    import datetime as dt

    from cytepool.io.tables.zones import zone_name

    pa = pytest.importorskip("pyarrow")
    when = [dt.datetime(2020, 1, 1, tzinfo=dt.UTC), None, dt.datetime(2020, 1, 2, tzinfo=dt.UTC)]
    column = pa.array(when, pa.timestamp("us", tz=zone)).dictionary_encode()
    samples: Any = pa.table({"sample_id": ["s1", "s2", "s3"], "c": column})
    if table == "pandas":
        samples = pd.DataFrame(
            {
                "sample_id": ["s1", "s2", "s3"],
                "c": pd.Series(column, dtype=pd.ArrowDtype(column.type)),
            }
        )
    cube = cytepool.Cube(
        {"counts": np.ones((1, 3, 1), dtype=np.int64)},
        samples=samples,
        groups=pd.DataFrame({"group_id": ["g"]}),
        features=pd.DataFrame({"feature_id": ["f"]}),
        cells=np.ones((1, 3), dtype=np.int64),
    )
    pseudobulk = to_anndata(cube)
    assert f'"c": "category[datetime64[us, {zone}]]"' in pseudobulk.uns["cytepool"]["dtypes"]
    if where == "MuData":
        pytest.importorskip("mudata")
        back = conv.from_mudata(conv.to_mudata(cube))
    else:
        back = round_tripped(cube, tmp_path, where)
    assert back.fingerprint == cube.fingerprint
    restored = back.samples["c"]
    assert zone_name(restored.cat.categories.tz) == zone
    assert restored.tolist() == [pd.Timestamp(t).tz_convert(zone) if t else pd.NaT for t in when]
