"""Tables through the record in ``uns`` and the types anndata writes
(``cytepool.io.anndata._record``): what comes back is what ``read_cube`` gives of the cube."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
ad = pytest.importorskip("anndata")
pa = pytest.importorskip("pyarrow")

import cytepool  # noqa: E402
from cytepool.errors import InputError  # noqa: E402
from cytepool.io import read_cube, write_cube  # noqa: E402
from cytepool.io.anndata import from_mudata, from_pseudobulk, to_anndata, to_mudata  # noqa: E402
from cytepool.io.anndata._pseudobulk import mudata_defaults  # noqa: E402

NAN = float("nan")
WHERE = ["memory", "h5ad", "zarr", "MuData", "h5mu", "MuData zarr"]


def floats(backend: str, values: list[float | None], bits: int = 64) -> Any:
    """``values`` (None: missing) as a float column of ``backend``, NaN kept apart."""
    if backend == "pandas":
        mask = np.array([value is None for value in values])
        numbers = np.array([0.0 if value is None else value for value in values])
        return pd.arrays.FloatingArray(numbers.astype(f"float{bits}"), mask)
    arrow = pa.array(values, pa.float64() if bits == 64 else pa.float32())
    if backend == "pandas[pyarrow]":
        return pd.arrays.ArrowExtensionArray(arrow)
    return arrow


def table(backend: str, columns: dict[str, Any]) -> Any:
    """A table of ``backend`` (pandas, polars, pyarrow) of ``columns``."""
    if backend.startswith("pandas"):
        return pd.DataFrame(columns)
    arrow = pa.table(columns)
    if backend == "polars":
        pl = pytest.importorskip("polars")
        return pl.from_arrow(arrow)
    return arrow


def float_cube(backend: str, bits: int = 64) -> Any:
    """Samples, groups and features each with a column of floats holding NaN and missing."""
    kind = "pyarrow" if backend == "pandas[pyarrow]" else backend
    return cytepool.Cube(
        {"counts": np.ones((2, 3, 2), dtype=np.int64)},
        samples=table(
            kind, {"sample_id": ["s1", "s2", "s3"], "x": floats(backend, [1.0, None, NAN], bits)}
        ),
        groups=table(kind, {"group_id": ["B", "T"], "y": floats(backend, [NAN, None], bits)}),
        features=table(kind, {"feature_id": ["f1", "f2"], "z": floats(backend, [NAN, 2.5], bits)}),
        cells=np.ones((2, 3), dtype=np.int64),
    )


def round_trip(cube: Any, tmp_path: Path, where: str) -> Any:
    """``cube`` to AnnData or MuData and back, in memory or through a file anndata or mudata
    wrote."""
    if "MuData" in where or where == "h5mu":
        md = pytest.importorskip("mudata")
        mdata = to_mudata(cube)
        with mudata_defaults(md), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # mudata's and zarr's own warnings
            if where == "h5mu":
                mdata.write(tmp_path / "cube.h5mu")
                mdata = md.read_h5mu(tmp_path / "cube.h5mu")
            elif where == "MuData zarr":
                mdata.write_zarr(tmp_path / "cube.zarr")
                mdata = md.read_zarr(tmp_path / "cube.zarr")
        return from_mudata(mdata)
    adata = to_anndata(cube)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if where == "h5ad":
            adata.write_h5ad(tmp_path / "pb.h5ad")
            adata = ad.read_h5ad(tmp_path / "pb.h5ad")
        elif where == "zarr":
            adata.write_zarr(tmp_path / "pb.zarr")
            adata = ad.read_zarr(tmp_path / "pb.zarr")
    return from_pseudobulk(adata)


def expected_tables(cube: Any, tmp_path: Path) -> Any:
    """The cube's tables in pandas: its own frames, or ``read_cube``'s of another backend."""
    if isinstance(cube.samples, pd.DataFrame):
        return cube
    write_cube(cube, tmp_path / "cube.cube.zarr")
    return read_cube(tmp_path / "cube.cube.zarr")


def assert_same_tables(back: Any, expected: Any) -> None:
    for name in ("samples", "groups", "features"):
        got, wanted = getattr(back, name), getattr(expected, name)
        pd.testing.assert_frame_equal(got, wanted, check_exact=True)
        for column in wanted.columns:  # missing and NaN where they were (not only equal)
            assert got[column].isna().tolist() == wanted[column].isna().tolist(), column
            assert nans(got[column]) == nans(wanted[column]), column


def nans(column: Any) -> list[bool]:
    return [isinstance(value, float) and value != value for value in column.tolist()]


@pytest.mark.interop
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize(
    ("backend", "bits"),
    [
        ("pandas", 64),
        ("pandas", 32),
        ("polars", 64),
        ("polars", 32),
        ("pyarrow", 64),
        ("pandas[pyarrow]", 64),
    ],
)
def test_floats_keep_missing_values_apart_from_nan(
    tmp_path: Path, where: str, backend: str, bits: int
) -> None:
    """Float32 / Float64 with <NA> and NaN came back with <NA> for both; polars and pyarrow
    floats with nulls came back as float64 with NaN for both (the fingerprint, which counts
    NaN as missing, did not see it)."""
    cube = float_cube(backend, bits)
    back = round_trip(cube, tmp_path, where)
    assert back.fingerprint == cube.fingerprint
    assert_same_tables(back, expected_tables(cube, tmp_path))


STRINGS = {"with missing": ["a", None, "b"], "without": ["a", "c", "b"]}


@pytest.mark.interop
@pytest.mark.parametrize("where", ["memory", "h5ad", "MuData"])
@pytest.mark.parametrize("backend", ["polars", "pyarrow"])
@pytest.mark.parametrize("values", list(STRINGS.values()), ids=list(STRINGS))
def test_strings_of_polars_and_pyarrow_come_back_as_read_cube_gives_them(
    tmp_path: Path, where: str, backend: str, values: list[str | None]
) -> None:
    """Strings with nulls came back as pandas 3's ``str`` (NaN) or objects (None) where
    read_cube gives ``string`` (<NA>); strings without as ``str`` where it gives objects."""
    cube = cytepool.Cube(
        {"counts": np.ones((1, 3, 1), dtype=np.int64)},
        samples=table(backend, {"sample_id": ["s1", "s2", "s3"], "c": values}),
        groups=table(backend, {"group_id": ["B"]}),
        features=table(backend, {"feature_id": ["f"]}),
        cells=np.ones((1, 3), dtype=np.int64),
    )
    back = round_trip(cube, tmp_path, where)
    assert back.fingerprint == cube.fingerprint
    assert_same_tables(back, expected_tables(cube, tmp_path))


def test_only_columns_holding_nan_and_missing_values_are_recorded() -> None:
    cube = float_cube("pandas")
    dtypes = json.loads(to_anndata(cube).uns["cytepool"]["dtypes"])
    assert dtypes["nan"] == {
        "samples": {"x": ["s3"]},
        "groups": {"y": ["B"]},
        "features": {"z": ["f1"]},
    }
    assert dtypes["nan"] == json.loads(to_mudata(cube).uns["cytepool"]["dtypes"])["nan"]
    plain = float_cube("pandas")
    plain = cytepool.Cube(
        {"counts": np.ones((2, 3, 2), dtype=np.int64)},
        samples=plain.samples.assign(x=pd.array([1.0, None, 2.0], dtype="Float64")),
        groups=plain.groups.drop(columns="y"),
        features=plain.features.drop(columns="z"),
        cells=np.ones((2, 3), dtype=np.int64),
    )
    assert "nan" not in json.loads(to_anndata(plain).uns["cytepool"]["dtypes"])


def test_nan_of_a_subset_of_features_go_where_they_were() -> None:
    """The NaN are listed by id: a subset of var (or one reordered) gets them right."""
    cube = float_cube("pandas")
    adata = to_anndata(cube)[:, ["f2", "f1"]].copy()
    back = from_pseudobulk(adata)
    assert back.features["z"].isna().tolist() == [False, False]
    assert nans(back.features["z"]) == [False, True]


DAMAGED = {
    "not an object": ([1], r"its 'dtypes' of 'nan' are \[1\], expected an object"),
    "unknown table": (
        {"cells": {}},
        r"its 'dtypes' of 'nan' give 'cells' \{\}, expected an object of the columns of",
    ),
    "not floats": (
        {"samples": {"sample_id": ["s1"]}},
        r"its 'dtypes' of 'nan' name the column 'sample_id' of 'samples', whose recorded "
        r"dtype is None, not one of nullable floats",
    ),
    "no list": (
        {"samples": {"x": "s3"}},
        r"its 'dtypes' of 'nan' give the column 'x' of 'samples' 's3', expected a list of ids",
    ),
}


@pytest.mark.parametrize("kind", ["AnnData", "MuData"])
@pytest.mark.parametrize(("nan", "message"), list(DAMAGED.values()), ids=list(DAMAGED))
def test_a_damaged_record_of_nan_is_an_input_error(kind: str, nan: Any, message: str) -> None:
    if kind == "MuData":
        pytest.importorskip("mudata")
    cube = float_cube("pandas")
    data = to_anndata(cube) if kind == "AnnData" else to_mudata(cube)
    dtypes = json.loads(data.uns["cytepool"]["dtypes"])
    dtypes["nan"] = nan
    data.uns["cytepool"]["dtypes"] = json.dumps(dtypes)
    with pytest.raises(InputError, match=r"\.uns\['cytepool'\] is damaged \(" + message):
        from_pseudobulk(data) if kind == "AnnData" else from_mudata(data)
