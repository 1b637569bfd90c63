"""Pooling straight from a file (issue 23): cytepool's own readers, every layout, hostile files.

``from_anndata(path)`` reads X (or a layer, or raw.X) through cytepool's array sources
(:mod:`cytepool.io.anndata._sources`) in blocks read ahead of the pooling. Every layout must
give the cube of anndata's own in-memory read, bit for bit (counts, detected, squares), and
sums equal to scanpy's ``sc.get.aggregate``; a damaged file must raise a FormatError naming the
file and the array, never hang, never allocate what its metadata claims.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sparse = pytest.importorskip("scipy.sparse")
h5py = pytest.importorskip("h5py")
numcodecs = pytest.importorskip("numcodecs")

from anndata_stores import filter_indices  # noqa: E402

from cytepool.errors import (  # noqa: E402
    FormatError,
    InputError,
    InputTypeError,
    NotCountsWarning,
    SumOverflowError,
)
from cytepool.io.anndata import _direct as direct  # noqa: E402
from cytepool.io.anndata import _readers as readers  # noqa: E402
from cytepool.io.anndata import _sources as sources  # noqa: E402
from cytepool.io.anndata import from_anndata  # noqa: E402

KEYS = {"sample_key": "sample", "group_key": "cell_type"}
LAYERS = ("counts", "detected", "squares")
N_CELLS, N_GENES = 300, 40


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 100 stored values (dense: 800 bytes): many blocks, read ahead, on every file."""
    monkeypatch.setattr(direct, "BLOCK_VALUES", 100)
    monkeypatch.setattr(direct, "DENSE_BLOCK_BYTES", 800)


@pytest.fixture(autouse=True)
def deadline() -> Iterator[None]:
    """No test here may hang (a FIFO read would block forever)."""

    def expire(*_: Any) -> None:
        raise TimeoutError("the read hung")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(900)  # generous: first calls compile numba kernels on a busy machine
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def cells(values: str = "counts") -> Any:
    """An AnnData of counts (float32 CSR), with a layer and raw holding other values."""
    rng = np.random.default_rng(7)
    numbers = np.floor(rng.random((N_CELLS, N_GENES)) * 20) + 1
    matrix = sparse.csr_matrix(np.where(rng.random(numbers.shape) < 0.2, numbers, 0).astype("f4"))
    if values == "fractions":
        matrix.data = matrix.data / 3
    obs = pd.DataFrame(
        {
            "sample": pd.Categorical(rng.choice(["s1", "s2", "s3"], N_CELLS)),
            "cell_type": rng.choice(["B", "T"], N_CELLS),
        },
        index=[f"c{i}" for i in range(N_CELLS)],
    )
    adata = ad.AnnData(matrix, obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(N_GENES)]))
    adata.layers["twice"] = matrix * 2
    adata.raw = ad.AnnData(matrix * 3, obs=obs, var=adata.var)
    return adata


def as_layout(adata: Any, layout: str) -> Any:
    if layout == "csr":
        return adata
    convert = (lambda m: m.tocsc()) if layout == "csc" else (lambda m: m.toarray())
    other = ad.AnnData(convert(adata.X), obs=adata.obs, var=adata.var)
    other.layers["twice"] = convert(adata.layers["twice"])
    other.raw = ad.AnnData(convert(adata.raw.X), obs=adata.obs, var=adata.var)
    return other


def write(adata: Any, path: Path, storage: str) -> Path:
    """Write ``adata`` as anndata writes it in ``storage``; the path."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's notes on Zarr v2
        if storage == "h5ad":
            adata.write_h5ad(path)
        elif storage in ("gzip", "lzf"):
            adata.write_h5ad(path, compression=storage)
        elif storage == "zarr-v2":
            with ad.settings.override(zarr_write_format=2):
                adata.write_zarr(path)
        elif storage == "zarr-v3":
            with ad.settings.override(zarr_write_format=3):
                adata.write_zarr(path)
        elif storage == "zarr-v3-sharded":
            with ad.settings.override(zarr_write_format=3, auto_shard_zarr_v3=True):
                adata.write_zarr(path)
    return path


def pooled(path_or_adata: Any, **source: Any) -> dict[str, np.ndarray]:
    cube = from_anndata(path_or_adata, **KEYS, layers=LAYERS, **source)
    return {name: cube.to_numpy(name) for name in LAYERS}


def assert_identical(found: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    for name, values in expected.items():
        assert found[name].dtype == values.dtype, name
        np.testing.assert_array_equal(found[name], values, err_msg=name)


def reader_of(path: Path, **source: Any) -> Any:
    """The matrix object open_cells gives (cytepool's reader or anndata's)."""
    with readers.open_cells(
        path, layer=source.get("layer"), use_raw=source.get("use_raw", False)
    ) as (
        matrix,
        *_,
    ):
        return matrix


STORAGES = ["h5ad", "gzip", "lzf", "zarr-v2", "zarr-v3", "zarr-v3-sharded"]
SOURCES = {"X": {}, "layer": {"layer": "twice"}, "raw": {"use_raw": True}}


@pytest.mark.interop
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("layout", ["csr", "csc", "dense"])
@pytest.mark.parametrize("storage", STORAGES)
def test_file_pools_as_in_memory(tmp_path: Path, storage: str, layout: str, source: str) -> None:
    adata = as_layout(cells(), layout)
    suffix = ".h5ad" if storage in ("h5ad", "gzip", "lzf") else ".zarr"
    path = write(adata, tmp_path / f"cells{suffix}", storage)
    matrix = reader_of(path, **SOURCES[source])
    assert isinstance(matrix, direct.SparseMatrix | direct.DenseMatrix), type(matrix)
    assert_identical(pooled(path, **SOURCES[source]), pooled(adata, **SOURCES[source]))


@pytest.mark.interop
@pytest.mark.parametrize("layout", ["csr", "csc", "dense"])
@pytest.mark.parametrize("storage", ["h5ad", "gzip", "zarr-v2"])
def test_file_sums_equal_scanpy(tmp_path: Path, storage: str, layout: str) -> None:
    sc = pytest.importorskip("scanpy")
    adata = as_layout(cells(), layout)
    path = write(adata, tmp_path / ("c.zarr" if "zarr" in storage else "c.h5ad"), storage)
    sums = pooled(path)["counts"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        aggregated = sc.get.aggregate(adata, by=["cell_type", "sample"], func="sum")
    for i, (group, sample) in enumerate(
        zip(aggregated.obs["cell_type"], aggregated.obs["sample"], strict=True)
    ):
        g, s = ["B", "T"].index(str(group)), ["s1", "s2", "s3"].index(str(sample))
        expected = np.asarray(aggregated.layers["sum"][i]).ravel()
        np.testing.assert_array_equal(sums[g, s], expected.astype(np.int64))


@pytest.mark.interop
@pytest.mark.parametrize("layout", ["csr", "csc"])
@pytest.mark.parametrize("storage", ["h5ad", "gzip", "zarr-v2", "zarr-v3"])
def test_blocks_a_caller_keeps_are_never_read_over(tmp_path: Path, storage: str, layout: str):
    """Blocks are read into kept arrays, taken again once no block refers to them: blocks
    kept by the caller (all of them, here) keep their values, and together make the matrix."""
    adata = as_layout(cells(), layout)
    suffix = ".h5ad" if storage in ("h5ad", "gzip") else ".zarr"
    path = write(adata, tmp_path / f"cells{suffix}", storage)
    with readers.open_cells(path, layer=None, use_raw=False) as (matrix, *_):
        blocks = [block.copy() for _, _, block in matrix.blocks()]  # copies: the values read
        kept = [block for _, _, block in matrix.blocks()]  # the blocks themselves, all kept
    assert len(kept) > 3
    for block, copy in zip(kept, blocks, strict=True):
        assert (block != copy).nnz == 0
    stack = sparse.vstack if layout == "csr" else sparse.hstack
    assert (stack(kept).tocsr() != adata.X.tocsr()).nnz == 0


@pytest.mark.parametrize("storage", ["h5ad", "zarr-v2", "zarr-v3"])
def test_sources_read_into_a_given_array(tmp_path: Path, storage: str) -> None:
    adata = cells()
    path = write(adata, tmp_path / ("c.h5ad" if storage == "h5ad" else "c.zarr"), storage)
    with readers.open_cells(path, layer=None, use_raw=False) as (matrix, *_):
        source = matrix.data
        out = np.full(30, -1, dtype=source.dtype)
        assert source.read(5, 35, out) is out
        np.testing.assert_array_equal(out, adata.X.data[5:35])
        with pytest.raises(InputError, match=r"out must be a C-contiguous float32 array"):
            source.read(5, 36, out)


def test_block_buffers_are_taken_again_only_once_free() -> None:
    buffers = direct.Buffers(np.dtype("f4"), 10)
    first, second = buffers.take(10), buffers.take(7)
    assert first is not None
    assert second is not None
    assert not np.shares_memory(first, second)
    address = first.__array_interface__["data"][0]
    del first  # its array is free again; second's is not
    third = buffers.take(9)
    assert third is not None
    assert third.__array_interface__["data"][0] == address
    assert len(buffers.arrays) == 2
    assert buffers.take(11) is None  # larger than the kept arrays: a new array
    assert direct.Buffers(np.dtype("f4"), 0).take(1) is None  # none kept


def test_fractions_pool_as_in_memory_from_a_file(tmp_path: Path) -> None:
    """Float sums are added in the order of the cells, whatever the blocks: bit-identical."""
    adata = cells("fractions")
    path = write(adata, tmp_path / "c.zarr", "zarr-v2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = pooled(adata)
        found = pooled(path)
    assert found["counts"].dtype == np.float64
    assert_identical(found, expected)


def csc_cells(kind: str) -> Any:
    """An AnnData of :func:`cells` with X as CSC of ``kind``: empty columns (the first, the
    last, a run), every column empty, one column, int32 counts, or float32 fractions."""
    adata = cells("fractions" if kind == "fractions" else "counts")
    matrix = adata.X.toarray()
    if kind == "empty-columns":
        matrix[:, [0, 5, 6, 7, 20, N_GENES - 1]] = 0
    elif kind == "all-empty":
        matrix[:] = 0
    elif kind == "one-column":
        matrix = matrix[:, 3:4]
    elif kind == "int32":
        matrix = matrix.astype(np.int32)
    var = pd.DataFrame(index=[f"g{j}" for j in range(matrix.shape[1])])
    return ad.AnnData(sparse.csc_matrix(matrix), obs=adata.obs, var=var)


@pytest.mark.interop
@pytest.mark.parametrize("kind", ["empty-columns", "all-empty", "one-column", "int32", "fractions"])
@pytest.mark.parametrize("storage", ["h5ad", "gzip", "zarr-v2", "zarr-v3-sharded"])
def test_csc_file_pools_into_its_columns_as_in_memory(
    tmp_path: Path, storage: str, kind: str, pooling_path: str
) -> None:
    """CSC blocks of a few columns each (BLOCK_VALUES is 100 here) add straight into their
    columns of the sums, on each pooling path: the cube of the matrix in memory, bit for bit
    (as CSC, read whole, and as CSR), fingerprint included."""
    adata = csc_cells(kind)
    suffix = ".h5ad" if storage in ("h5ad", "gzip") else ".zarr"
    path = write(adata, tmp_path / f"cells{suffix}", storage)
    assert isinstance(reader_of(path), direct.SparseMatrix)
    as_csr = ad.AnnData(adata.X.tocsr(), obs=adata.obs, var=adata.var)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fractions are not counts
        cubes = [from_anndata(source, **KEYS, layers=LAYERS) for source in (path, adata, as_csr)]
    found, *expected = ({name: cube.to_numpy(name) for name in LAYERS} for cube in cubes)
    for other in expected:
        assert_identical(found, other)
    assert cubes[0].fingerprint == cubes[1].fingerprint == cubes[2].fingerprint
    assert found["counts"].dtype == (np.float64 if kind == "fractions" else np.int64)


@pytest.mark.parametrize("value", [-1.0, 0.5])
def test_csc_file_names_the_cell_and_feature_of_a_bad_value(
    tmp_path: Path, value: float, pooling_path: str
) -> None:
    """A value in a later block of columns is named by its column in the whole matrix."""
    adata = csc_cells("int32")
    matrix = adata.X.toarray().astype(np.float32)
    matrix[7, 30] = value
    adata = ad.AnnData(sparse.csc_matrix(matrix), obs=adata.obs, var=adata.var)
    path = write(adata, tmp_path / "cells.h5ad", "h5ad")
    place = r"row 7 \(cell 'c7'\), column 30 \(feature 'g30'\)"
    if value < 0:
        with pytest.raises(InputError, match=rf"X of .*cells\.h5ad: {place} holds -1\.0;"):
            from_anndata(path, **KEYS)
        return
    with pytest.warns(NotCountsWarning, match=rf"not every value is a count .* 0\.5 at {place};"):
        from_anndata(path, **KEYS)


@pytest.mark.parametrize("storage", ["h5ad", "zarr-v3"])
@pytest.mark.parametrize("wanted", ["one", "many"])
def test_an_error_about_a_file_names_it(tmp_path: Path, storage: str, wanted: str) -> None:
    """One file, as a file of many does: the error names the file (and keeps its type)."""
    adata = cells()
    adata = ad.AnnData(adata.X.toarray().astype(np.float16), obs=adata.obs, var=adata.var)
    path = write(adata, tmp_path / f"cells.{storage}", storage)
    paths: Any = path if wanted == "one" else [path]
    with pytest.raises(InputTypeError, match=r"^\S*cells\.(h5ad|zarr-v3): counts: .* float16"):
        from_anndata(paths, **KEYS, jobs=1) if wanted == "many" else from_anndata(paths, **KEYS)
    with pytest.raises(KeyError, match=r"'nope' .* of obs of \S*cells\.(h5ad|zarr-v3)"):
        from_anndata(path, sample_key="nope", group_key="cell_type")


@pytest.mark.parametrize("storage", ["h5ad", "zarr-v2", "zarr-v3"])
@pytest.mark.parametrize("layer", ["", "./twice", "twice/", "/twice", "..", "."])
def test_a_layer_name_that_is_no_key_is_no_layer(tmp_path: Path, storage: str, layer: str) -> None:
    """A name that cannot be a key of adata.layers is a layer the file lacks, as in memory:
    h5py followed ``./twice`` to the layer ``twice``, zarr-python refused it (which read as a
    damaged store), and ``""`` named the layers group itself."""
    path = write(cells(), tmp_path / f"cells.{storage}", storage)
    with pytest.raises(KeyError, match=rf"cells\.{storage} has no layer {re.escape(repr(layer))}"):
        from_anndata(path, **KEYS, layer=layer)
    with pytest.raises(KeyError, match=rf"adata has no layer {re.escape(repr(layer))}"):
        from_anndata(cells(), **KEYS, layer=layer)


@pytest.mark.parametrize("wanted", ["one", "many"])
def test_a_sum_that_overflows_names_the_file(tmp_path: Path, wanted: str) -> None:
    """A float64 sum of finite values that is not finite: a SumOverflowError (an
    OverflowError) naming the file, whether it is pooled alone or in a list."""
    adata = cells()
    matrix = adata.X.toarray().astype(np.float64)
    first = np.flatnonzero(
        (adata.obs["sample"] == adata.obs["sample"].iloc[0]).to_numpy()
        & (adata.obs["cell_type"] == adata.obs["cell_type"].iloc[0]).to_numpy()
    )[:2]
    matrix[first, 3] = 1e308
    adata = ad.AnnData(matrix, obs=adata.obs, var=adata.var)
    path = write(adata, tmp_path / "cells.h5ad", "h5ad")
    paths: Any = path if wanted == "one" else [path]
    with pytest.raises(SumOverflowError, match=r"^\S*cells\.h5ad: layer 'counts': a sum of group"):
        from_anndata(paths, **KEYS, jobs=1) if wanted == "many" else from_anndata(paths, **KEYS)


@pytest.mark.parametrize("storage", ["h5ad", "zarr-v2", "zarr-v3"])
def test_obs_is_read_without_its_names_until_a_message_names_a_cell(
    tmp_path: Path, storage: str
) -> None:
    """The names of the cells stay in the file (obs's columns are read, rows numbered): a
    message that names a cell reads them then."""
    adata = cells()
    adata.obs.index = [f"cell-{i}" for i in range(N_CELLS)]
    adata.obs["sample"] = adata.obs["sample"].cat.add_categories(["s4"])
    adata.obs.loc["cell-3", "sample"] = np.nan
    path = write(adata, tmp_path / "cells", storage)
    with readers.open_cells(path, layer=None, use_raw=False) as (_, obs, _, source):
        pd.testing.assert_frame_equal(obs, adata.obs.reset_index(drop=True))
        assert source.cells.names is None
        assert source.cells[299] == "cell-299"
    with pytest.raises(InputError, match=r"has 1 missing labels, e\.g\. in row 'cell-3'"):
        from_anndata(path, **KEYS)
    adata.obs["sample"] = adata.obs["sample"].fillna("s1")
    first = adata.X.indptr[5]
    adata.X.data[first] = -1.0
    place = rf"row 5 \(cell 'cell-5'\), column {adata.X.indices[first]} \(feature 'g\d+'\)"
    path = write(adata, tmp_path / "negative", storage)
    with pytest.raises(InputError, match=place):
        from_anndata(path, **KEYS)


@pytest.mark.parametrize(("chunk", "sizes"), [(7, {7}), (30, {5}), (None, {5})])
def test_dense_blocks_hold_whole_chunks(tmp_path: Path, chunk: int | None, sizes: set[int]) -> None:
    """Blocks of 800 bytes (5 rows of 40 float32) grow to whole chunks of rows where a chunk
    takes at most four times as many bytes (7 rows, not 30); a chunk cut by a block's end
    would be decoded twice."""
    path = tmp_path / "dense.h5ad"
    adata = as_layout(cells(), "dense")
    with h5py.File(path, "w") as file:
        ad.io.write_elem(file, "obs", adata.obs)
        ad.io.write_elem(file, "var", adata.var)
        chunks = None if chunk is None else (chunk, N_GENES)
        file.create_dataset("X", data=adata.X, chunks=chunks, compression="gzip" if chunk else None)
        file.attrs.update({"encoding-type": "anndata", "encoding-version": "0.1.0"})
    with readers.open_cells(path, layer=None, use_raw=False) as (matrix, *_):
        assert isinstance(matrix, direct.DenseMatrix)
        bounds = [(start, stop) for start, stop, _ in matrix.blocks()]
    assert {stop - start for start, stop in bounds[:-1]} == sizes
    assert bounds[-1][1] == N_CELLS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_identical(pooled(path), pooled(adata))


# --------------------------------------------------------------------------- Zarr v2 codecs


def recode(array: Path, compressor: dict[str, Any] | None, dtype: str | None = None) -> None:
    """Rewrite a Zarr v2 array's chunks with another compressor (and byte order)."""
    meta = json.loads((array / ".zarray").read_text())
    old = numcodecs.get_codec(meta["compressor"]) if meta["compressor"] else None
    new = numcodecs.get_codec(compressor) if compressor else None
    stored = np.dtype(meta["dtype"])
    target = np.dtype(dtype) if dtype else stored
    for chunk in [p for p in array.iterdir() if not p.name.startswith(".")]:
        raw = chunk.read_bytes()
        decoded = np.frombuffer(old.decode(raw) if old else raw, dtype=stored).astype(target)
        chunk.write_bytes(new.encode(decoded.tobytes()) if new else decoded.tobytes())
    meta["compressor"], meta["dtype"] = compressor, target.str
    (array / ".zarray").write_text(json.dumps(meta))
    unconsolidate(array)


def unconsolidate(node: Path) -> None:
    """Drop the store's consolidated metadata (its copy of the old .zarray)."""
    for folder in (node, *node.parents):
        (folder / ".zmetadata").unlink(missing_ok=True)
        if (folder / ".zattrs").exists() and not (folder.parent / ".zgroup").exists():
            return


CODECS = {
    "zstd": {"id": "zstd", "level": 3},
    "gzip": {"id": "gzip", "level": 4},
    "zlib": {"id": "zlib", "level": 4},
    "none": None,
    "blosc-zstd": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0},
}


@pytest.mark.interop
@pytest.mark.parametrize("codec", list(CODECS))
def test_zarr_v2_codecs_pool_as_in_memory(tmp_path: Path, codec: str) -> None:
    adata = cells()
    path = write(adata, tmp_path / "c.zarr", "zarr-v2")
    for name in ("data", "indices", "indptr"):
        recode(path / "X" / name, CODECS[codec])
    assert isinstance(reader_of(path).data, sources.ZarrV2Source)
    assert_identical(pooled(path), pooled(adata))


def test_big_endian_values_are_read(tmp_path: Path) -> None:
    adata = cells()
    zarr_path = write(adata, tmp_path / "c.zarr", "zarr-v2")
    for name, dtype in (("data", ">f4"), ("indices", ">i4"), ("indptr", ">i8")):
        recode(zarr_path / "X" / name, CODECS["zstd"], dtype)
    h5_path = write(adata, tmp_path / "c.h5ad", "h5ad")
    with h5py.File(h5_path, "a") as f:
        for name, dtype in (("data", ">f4"), ("indices", ">i4")):
            values = f["X"][name][...]
            del f["X"][name]
            f["X"].create_dataset(name, data=values.astype(dtype), chunks=(64,))
    expected = pooled(adata)
    assert_identical(pooled(zarr_path), expected)
    assert_identical(pooled(h5_path), expected)


def test_what_is_not_decoded_falls_back_to_anndata(tmp_path: Path) -> None:
    """A Zarr v2 array with filters is read by anndata's reader: the same cube."""
    adata = cells()
    path = write(adata, tmp_path / "c.zarr", "zarr-v2")
    filter_indices(path)
    assert not isinstance(reader_of(path), direct.SparseMatrix)
    assert_identical(pooled(path), pooled(adata))


# --------------------------------------------------------------------------- hostile files


def h5_with(tmp_path: Path, change: Callable[[Any], None]) -> Path:
    path = write(cells(), tmp_path / "c.h5ad", "h5ad")
    with h5py.File(path, "a") as f:
        change(f["X"])
    return path


def replace(group: Any, name: str, values: np.ndarray) -> None:
    del group[name]
    group.create_dataset(name, data=values)


BAD_CSR: dict[str, tuple[Callable[[Any], None], str]] = {
    "decreasing indptr": (
        lambda x: replace(x, "indptr", x["indptr"][...][::-1].copy()),
        r"X/indptr of .*c\.h5ad is not a valid index pointer: it starts at",
    ),
    "non-monotone indptr": (
        lambda x: replace(x, "indptr", np.r_[0, 50, 10, x["indptr"][3:]]),
        r"X/indptr of .*c\.h5ad is not a valid index pointer: it decreases after entry 1",
    ),
    "negative indptr": (
        lambda x: replace(x, "indptr", np.r_[-5, x["indptr"][1:]]),
        r"X/indptr of .*: it starts at -5",
    ),
    "indptr past data": (
        lambda x: replace(x, "indptr", np.r_[x["indptr"][:-1], 10**9]),
        r"X/indptr of .*: it ends at 1000000000, past the \d+ stored values",
    ),
    "indptr of the wrong length": (
        lambda x: replace(x, "indptr", x["indptr"][:-2]),
        r"X/indptr of .*c\.h5ad has 299 entries; expected one per row plus one \(301\)",
    ),
    "data and indices of different lengths": (
        lambda x: replace(x, "indices", x["indices"][:-1]),
        r"X of .*c\.h5ad: data and indices have different lengths",
    ),
    "indices of floats": (
        lambda x: replace(x, "indices", x["indices"][...].astype(np.float32)),
        r"X/indices of .*c\.h5ad holds float32; expected integers",
    ),
}


@pytest.mark.parametrize("reader", ["cytepool", "anndata"])
@pytest.mark.parametrize("case", list(BAD_CSR))
def test_invalid_csr_structure_is_a_format_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, reader: str
) -> None:
    """Also when anndata's backed reader reads the matrix (as for a filter cytepool cannot
    decode): checked as cytepool's reader checks it (it was an InputError, or pooled)."""
    change, message = BAD_CSR[case]
    path = h5_with(tmp_path, change)
    if reader == "anndata":
        monkeypatch.setattr(readers, "open_matrix", lambda *_: None)
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)


def test_invalid_indptr_in_memory_stays_an_input_error(tmp_path: Path) -> None:
    path = h5_with(tmp_path, lambda x: replace(x, "indptr", np.r_[0, 50, 10, x["indptr"][3:]]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        damaged = ad.read_h5ad(path)
    with pytest.raises(InputError, match=r"not a valid CSR matrix") as caught:
        from_anndata(damaged, **KEYS)
    assert not isinstance(caught.value, FormatError)


def filtered_store(tmp_path: Path, fmt: str = "csr") -> Path:
    """A Zarr v2 store whose X/indices has a filter: read by anndata's backed reader."""
    adata = cells()
    if fmt == "csc":
        adata.X = sparse.csc_matrix(adata.X)
    path = write(adata, tmp_path / "c.zarr", "zarr-v2")
    filter_indices(path)
    return path


def store_indptr(path: Path, values: np.ndarray, length: int | None = None) -> None:
    """Store X/indptr of the store at ``path`` again as ``values``; its metadata then claims
    ``length`` entries (if given), of which only those of ``values`` are written."""
    import zarr

    group: Any = zarr.open_group(path / "X", mode="r+")
    attributes = dict(group["indptr"].attrs)
    del group["indptr"]
    shape = (len(values),) if length is None else (length,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python's notes on Zarr v2
        array = group.create_array("indptr", shape=shape, dtype=values.dtype, chunks=(1 << 20,))
    array[: len(values)] = values
    array.attrs.update(attributes)
    (path / "X" / ".zmetadata").unlink(missing_ok=True)
    (path / ".zmetadata").unlink(missing_ok=True)


FALLBACK_INDPTR: dict[str, tuple[Callable[[np.ndarray], np.ndarray], int | None, str]] = {
    "claims 10**12 entries": (
        lambda indptr: indptr,
        10**12,
        r"X/indptr of .*c\.zarr has 1000000000000 entries; expected one per row plus one \(301\)",
    ),
    "ends at 2**56": (
        lambda indptr: np.r_[indptr[:-1], 2**56],
        None,
        r"X/indptr of .*c\.zarr is not a valid index pointer: it ends at 72057594037927936, "
        r"past the \d+ stored values",
    ),
    "decreases": (
        lambda indptr: np.r_[indptr[:5], indptr[6] + 1, indptr[6:]],
        None,
        r"X/indptr of .*c\.zarr is not a valid index pointer: it decreases after entry 5",
    ),
}


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("case", list(FALLBACK_INDPTR))
def test_indptr_read_by_anndata_is_checked_before_it_is_used(
    tmp_path: Path, case: str, fmt: str
) -> None:
    """A store read by anndata's backed reader (a filter): its indptr is checked against the
    shape before it is read (a claim of 10**12 entries was read, 3e8 took 3.6 GiB) and its
    values before they are used (an end of 2**56 made a MemoryError, a decrease an
    InputError)."""
    path = filtered_store(tmp_path, fmt)
    change, length, message = FALLBACK_INDPTR[case]
    indptr = zarr_array(path / "X" / "indptr")
    store_indptr(path, change(indptr.astype(np.int64)).astype(np.int64), length)
    assert not isinstance(reader_of_unchecked(path), direct.SparseMatrix)
    if fmt == "csc":
        message = message.replace("per row plus one \\(301\\)", "per column plus one \\(41\\)")
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)


def zarr_array(path: Path) -> np.ndarray:
    import zarr

    return np.asarray(zarr.open_array(path, mode="r")[...])


def reader_of_unchecked(path: Path) -> Any:
    """Whether cytepool's reader would read X of ``path`` (its checks not run)."""
    import zarr

    root = zarr.open_group(path, mode="r")
    return direct.open_matrix(root, "X", path, str(path))


def test_data_and_indices_read_by_anndata_have_the_same_length(tmp_path: Path) -> None:
    import zarr

    path = filtered_store(tmp_path)
    group: Any = zarr.open_group(path / "X", mode="r+")
    data = np.r_[group["data"][...], np.full(7, 1000, dtype=np.float32)]
    attributes = dict(group["data"].attrs)
    del group["data"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group.create_array("data", data=data).attrs.update(attributes)
    (path / ".zmetadata").unlink(missing_ok=True)
    message = r"X of .*c\.zarr: data and indices have different lengths \(\d+ and \d+\)"
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)


CORPUS = Path(__file__).parents[1] / "data" / "anndata-corpus"


@pytest.mark.parametrize(
    ("element", "change", "message"),
    [
        ("X", "decreasing", r"X/indptr of .*old\.h5ad is not a valid index pointer: it decreases"),
        ("raw.X", "decreasing", r"raw\.X/indptr of .*old\.h5ad is not a valid index pointer"),
        ("X", "claims", r"X/indptr of .*old\.h5ad has 300000000 entries; expected one per row"),
        ("X", "one row more", r"X of .*old\.h5ad has shape \(49, 6\), but obs has 48 rows"),
    ],
)
def test_legacy_sparse_matrix_is_checked_before_it_is_used(
    tmp_path: Path, element: str, change: str, message: str
) -> None:
    """An .h5ad in the layout of anndata < 0.7 (read by anndata's backed reader): a damaged
    indptr is a FormatError naming the file and the array, before anything is allocated (a
    claim of 3e8 entries took 4.8 GiB), and so is a shape of more rows than obs has (it was
    an InputError)."""
    path = tmp_path / "old.h5ad"
    shutil.copyfile(CORPUS / "anndata-0.6.22.post1.h5ad", path)
    with h5py.File(path, "a") as f:
        group = f[element]
        indptr = group["indptr"][...]
        if change == "decreasing":
            replace(group, "indptr", np.r_[indptr[:3], indptr[4] + 1, indptr[4:]])
        elif change == "claims":
            del group["indptr"]
            claimed = group.create_dataset("indptr", (3 * 10**8,), np.int64, chunks=(1 << 20,))
            claimed[: len(indptr)] = indptr
        else:
            group.attrs["h5sparse_shape"] = group.attrs["h5sparse_shape"] + [1, 0]
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS, use_raw=element == "raw.X")


def test_column_indices_out_of_range_name_the_matrix(tmp_path: Path) -> None:
    path = h5_with(tmp_path, lambda x: replace(x, "indices", x["indices"][...] + N_GENES))
    with pytest.raises(ValueError, match=r"X of .*c\.h5ad: the sparse matrix is invalid"):
        from_anndata(path, **KEYS)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("reader", ["cytepool", "anndata"])
@pytest.mark.parametrize("index", [-1, 10**6])
def test_indices_out_of_range_in_a_file_are_a_format_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, reader: str, index: int
) -> None:
    """In a file, indices out of range are damage, as a damaged indptr is: a FormatError
    naming the file and the array (it was an InputError); in memory, an InputError."""
    adata = cells()
    if fmt == "csc":
        adata.X = sparse.csc_matrix(adata.X)
    path = write(adata, tmp_path / "c.h5ad", "h5ad")
    with h5py.File(path, "a") as f:
        indices = f["X/indices"][...]
        indices[5] = index
        replace(f["X"], "indices", indices)
    if reader == "anndata":  # anndata's backed reader, as for a filter cytepool cannot decode
        monkeypatch.setattr(readers, "open_matrix", lambda *_: None)
    what = "row 0 holds column" if fmt == "csr" else "column 0 holds row"
    message = (
        rf"^X of .*c\.h5ad: the sparse matrix is invalid: {what} indices out of range: "
        rf"X/indices of .*c\.h5ad is damaged$"
    )
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)
    damaged = ad.read_h5ad(path)
    with pytest.raises(InputError, match=r"the sparse matrix is invalid") as caught:
        from_anndata(damaged, **KEYS)
    assert not isinstance(caught.value, FormatError)


def test_indptr_metadata_that_lies_allocates_nothing(tmp_path: Path) -> None:
    path = write(cells(), tmp_path / "c.zarr", "zarr-v2")
    meta_path = path / "X" / "indptr" / ".zarray"
    meta = json.loads(meta_path.read_text())
    meta["shape"] = [10**15]
    meta_path.write_text(json.dumps(meta))
    message = r"X/indptr of .*c\.zarr has 1000000000000000 entries; expected one per row"
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)


def damage_first_chunk(path: Path, codec: str, damage: Callable[[bytes], bytes]) -> None:
    array = path / "X" / "data"
    if CODECS.get(codec, "blosc") != "blosc":
        recode(array, CODECS[codec])
    chunk = array / "0"
    chunk.write_bytes(damage(chunk.read_bytes()))


DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda b: b[: len(b) // 2],
    "garbled": lambda b: b[:16] + bytes(255 - x for x in b[16:]),
    "empty": lambda b: b"",
}


# a garbled uncompressed chunk has the right size: nothing can tell it from values
DAMAGED = [
    (codec, damage)
    for codec in ("blosc", "zstd", "gzip", "zlib", "none")
    for damage in DAMAGES
    if (codec, damage) != ("none", "garbled")
]


@pytest.mark.parametrize(("codec", "damage"), DAMAGED)
def test_damaged_zarr_v2_chunk_is_a_format_error(tmp_path: Path, codec: str, damage: str) -> None:
    path = write(cells(), tmp_path / "c.zarr", "zarr-v2")
    damage_first_chunk(path, codec, DAMAGES[damage])
    with pytest.raises(FormatError, match=r"X/data of .*c\.zarr, chunk 0: "):
        from_anndata(path, **KEYS)


def test_damaged_zarr_v3_shard_is_a_format_error(tmp_path: Path) -> None:
    path = write(cells(), tmp_path / "c.zarr", "zarr-v3-sharded")
    shard = next(
        p for p in (path / "X" / "data").rglob("*") if p.is_file() and p.name != "zarr.json"
    )
    data = shard.read_bytes()
    shard.write_bytes(data[:-8] + bytes(8))  # the index's checksum no longer matches
    with pytest.raises(FormatError, match=r"X/data"):
        from_anndata(path, **KEYS)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_for_the_file_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "c.h5ad")
    with pytest.raises(FormatError, match=r"c\.h5ad is neither a regular file nor a directory"):
        from_anndata(tmp_path / "c.h5ad", **KEYS)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
@pytest.mark.parametrize("chunk", ["X/data/0", "obs/sample/codes/0"])
def test_a_fifo_for_a_zarr_chunk_does_not_hang(tmp_path: Path, chunk: str) -> None:
    path = write(cells(), tmp_path / "c.zarr", "zarr-v2")
    (path / chunk).unlink()
    os.mkfifo(path / chunk)
    with pytest.raises(FormatError, match=r"is not a regular file"):
        from_anndata(path, **KEYS)


def test_a_store_is_walked_once_and_a_linked_folder_not_at_all(tmp_path: Path) -> None:
    """The bound on what a store's arrays may claim is every file's bytes; a link to a
    folder (here one that holds the store: a loop) is not followed."""
    path = write(cells(), tmp_path / "c.zarr", "zarr-v2")
    expected = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    (path / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    assert readers._store_bytes(path) == expected
    (path / "obs" / "sample" / "odd").symlink_to(path / "nowhere")  # a dangling link
    with pytest.raises(FormatError, match=r"obs/sample/odd in the store .*c\.zarr is not a reg"):
        from_anndata(path, **KEYS)


def test_a_fifo_is_refused_by_the_chunk_reader(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(FormatError, match=r"the chunk is not a regular file"):
        sources.open_regular(tmp_path / "fifo", "the chunk")


def test_cli_on_a_corrupt_zarr_store_prints_one_error(tmp_path: Path) -> None:
    """One CPU (as taskset -c 0 pins it): the error line alone, no asyncio complaints."""
    path = write(cells(), tmp_path / "c.zarr", "zarr-v2")
    damage_first_chunk(path, "blosc", DAMAGES["garbled"])
    command = [sys.executable, "-m", "cytepool", "pool", str(path), str(tmp_path / "o.cube.zarr")]
    command += ["--sample-key", "sample", "--group-key", "cell_type"]
    if hasattr(os, "sched_setaffinity"):
        command = ["taskset", "-c", "0", *command] if _has_taskset() else command
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    assert "chunk 0" in done.stderr
    assert "Task was destroyed" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 3, done.stderr


def _has_taskset() -> bool:
    from shutil import which

    return which("taskset") is not None


# --------------------------------------------------------------------------- read ahead


def test_prefetched_keeps_order_and_bounds_what_is_ahead() -> None:
    import threading

    started: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> Callable[[], int]:
        def run() -> int:
            with lock:
                started.append(i)
            return i

        return run

    taken = []
    for value in direct.prefetched((task(i) for i in range(10)), ahead=2):
        with lock:
            assert max(started) <= value + 2  # at most two tasks beyond the one in hand
        taken.append(value)
    assert taken == list(range(10))


def test_prefetched_stops_its_reader_when_the_caller_stops() -> None:
    import threading

    ran: list[int] = []
    gate = threading.Event()

    def task(i: int) -> Callable[[], int]:
        def run() -> int:
            ran.append(i)
            if i == 0:
                gate.set()
            return i

        return run

    blocks = direct.prefetched((task(i) for i in range(100)), ahead=2)
    assert next(blocks) == 0
    blocks.close()
    assert gate.is_set()
    assert len(ran) <= 3
    assert not any(
        t.name.startswith("cytepool-read") and t.is_alive() for t in threading.enumerate()
    )


@pytest.mark.parametrize("at", [0, 2, 3])
@pytest.mark.parametrize("layout", ["csr", "csc", "dense"])
def test_an_int64_overflow_before_the_float64_switch_is_no_error_in_a_file(
    tmp_path: Path, layout: str, at: int, pooling_path: str
) -> None:
    """uint32 counts: three cells of 2**31 - 1 (their int64 squares overflow once summed) and,
    at row ``at``, one of 2**32 - 1 (no whole number below 2**31: the layers end float64).
    Every layout pools, wherever that cell is, to the sums of a float64 pass, as in memory."""
    matrix = np.zeros((4, 2), dtype=np.uint32)
    matrix[[row for row in range(4) if row != at], 1] = 2**31 - 1
    matrix[at, 0] = 2**32 - 1
    obs = pd.DataFrame({"sample": ["a"] * 4, "cell_type": ["T"] * 4}, index=list("wxyz"))
    stored = {"csr": sparse.csr_matrix, "csc": sparse.csc_matrix, "dense": np.asarray}
    adata = ad.AnnData(stored[layout](matrix), obs=obs, var=pd.DataFrame(index=["g0", "g1"]))
    path = write(adata, tmp_path / "cells.h5ad", "h5ad")
    cubes = [
        from_anndata(source, **KEYS, layers=LAYERS, allow_float=True) for source in (path, adata)
    ]
    values = matrix.astype(np.float64)
    expected = {"counts": values.sum(axis=0), "squares": (values * values).sum(axis=0)}
    for cube in cubes:
        for name, sums in expected.items():
            assert cube.layers[name].dtype == np.float64
            np.testing.assert_array_equal(cube.to_numpy(name)[0, 0], sums, err_msg=name)
    assert cubes[0].fingerprint == cubes[1].fingerprint
