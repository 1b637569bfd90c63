"""Files of every AnnData / MuData writer in use pool by path as in memory, to the same cube.

tests/data/anndata-corpus/ holds one small dataset written by anndata 0.6 (the legacy layout:
compound obs/var, ``raw.X``) through 0.13 (Zarr v3, sharded), as .h5ad, Zarr v2 and v3 stores
and .h5mu; scripts/make_anndata_corpus.py made them and MANIFEST.json records the versions. A
cube pooled from a path (matrices read in row blocks) must have the fingerprint of the cube
pooled from anndata's own in-memory read, and sums equal to pandas' on that read.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.io.anndata import _direct as direct
from cytepool.io.anndata import _readers as readers

ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sparse = pytest.importorskip("scipy.sparse")

from cytepool.cli import main  # noqa: E402
from cytepool.errors import NotCountsWarning  # noqa: E402
from cytepool.io import read_cube  # noqa: E402
from cytepool.io.anndata import from_anndata, from_mudata_cells  # noqa: E402

CORPUS = Path(__file__).parents[1] / "data" / "anndata-corpus"
MANIFEST = json.loads((CORPUS / "MANIFEST.json").read_text())
FILES = sorted(name for writer in MANIFEST.values() for name in writer["files"])
ANNDATA_FILES = [name for name in FILES if not name.endswith(".h5mu")]
MUDATA_FILES = [name for name in FILES if name.endswith(".h5mu")]
KEYS = {"sample_key": "sample", "group_key": "cell_type"}
SOURCES = {"X": {}, "layer": {"layer": "counts"}, "raw": {"use_raw": True}}


def read_in_memory(path: Path) -> Any:
    """The file as anndata (or mudata) itself reads it, wholly into memory."""
    with warnings.catch_warnings():  # anndata's notes about old layouts it converts
        warnings.simplefilter("ignore")
        if path.suffix == ".h5mu":
            import mudata as md

            return md.read_h5mu(path)
        if path.suffix == ".zarr":
            return ad.read_zarr(path)
        return ad.read_h5ad(path)


def counts_of(adata: Any, source: dict[str, Any]) -> tuple[np.ndarray, list[str]]:
    """The matrix a source names, dense float64, and its feature names."""
    if source.get("use_raw"):
        matrix, names = adata.raw.X, list(adata.raw.var_names)
    else:
        matrix = adata.layers[source["layer"]] if "layer" in source else adata.X
        names = list(adata.var_names)
    dense = matrix.toarray() if sparse.issparse(matrix) else np.asarray(matrix)
    return dense.astype(np.float64), names


def assert_sums(cube: Any, obs: Any, counts: np.ndarray, features: list[str]) -> None:
    """The cube's sums and cell numbers equal pandas' group-by on the same cells."""
    frame = pd.DataFrame(counts, columns=features)
    keys = [obs["cell_type"].astype(str).to_numpy(), obs["sample"].astype(str).to_numpy()]
    sums = frame.groupby(keys).sum()
    sizes = frame.groupby(keys).size()
    assert list(cube.features.index) == features
    for g, group in enumerate(cube.groups.index):
        profiles = np.asarray(cube.profiles(g), dtype=np.float64)
        for s, sample in enumerate(cube.samples.index):
            present = (group, sample) in sums.index
            expected = sums.loc[(group, sample)].to_numpy() if present else 0
            np.testing.assert_allclose(profiles[s], expected, rtol=1e-12, atol=0)
            assert cube.cells[g, s] == (sizes.loc[(group, sample)] if present else 0)


@pytest.fixture
def blocks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Small blocks; the list receives the bounds of each block of rows (or columns) read."""
    monkeypatch.setattr(readers, "BLOCK_NONZEROS", 40)
    monkeypatch.setattr(readers, "BLOCK_BYTES", 100)
    monkeypatch.setattr(direct, "BLOCK_VALUES", 40)
    monkeypatch.setattr(direct, "DENSE_BLOCK_BYTES", 320)
    seen: list[tuple[int, int]] = []
    for module, name in (
        (readers, "block_bounds"),
        (readers, "nonzero_bounds"),
        (direct, "major_bounds"),
        (direct, "row_bounds"),
    ):
        original = getattr(module, name)

        def counted(*args: Any, original: Any = original) -> Iterator[tuple[int, int]]:
            for bounds in original(*args):
                seen.append(bounds)
                yield bounds

        monkeypatch.setattr(module, name, counted)
    return seen


def test_the_corpus_has_every_writer() -> None:
    writers = {name.split("-")[1] for name in MANIFEST}
    assert {"0.6.22.post1", "0.7.8", "0.8.0", "0.9.2", "0.10.9", "0.11.4"} <= writers
    assert {"0.12.19", "0.13.4"} <= writers
    assert any(name.endswith("-v3.zarr") for name in FILES)  # 0.12's v3, unsharded
    assert len(MUDATA_FILES) >= 2
    size = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    assert size < 3_000_000


def test_the_corpus_has_every_layout() -> None:
    import h5py

    with h5py.File(CORPUS / "anndata-0.6.22.post1.h5ad", "r") as legacy:
        assert isinstance(legacy["obs"], h5py.Dataset)  # a compound dataset
        assert "raw.X" in legacy
        assert "raw.var" in legacy
    assert (CORPUS / "anndata-0.12.19.zarr" / ".zgroup").is_file()  # Zarr v2, the default
    sharded = CORPUS / "anndata-0.13.4.zarr"
    assert json.loads((sharded / "zarr.json").read_text())["zarr_format"] == 3
    assert any("sharding_indexed" in p.read_text() for p in sharded.rglob("zarr.json"))
    unsharded = CORPUS / "anndata-0.12.19-v3.zarr"
    assert not any("sharding_indexed" in p.read_text() for p in unsharded.rglob("zarr.json"))


@pytest.mark.interop
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("name", ANNDATA_FILES)
def test_corpus_file_pools_by_path_as_in_memory(
    name: str, source: str, blocks: list[tuple[int, int]]
) -> None:
    path = CORPUS / name
    by_path = from_anndata(path, **KEYS, **SOURCES[source])
    if source != "layer" or not path.name.startswith("anndata-0.6"):  # legacy: layers in memory
        assert len(blocks) > 1, "the matrix on disk was read in row blocks"
    adata = read_in_memory(path)
    in_memory = from_anndata(adata, **KEYS, **SOURCES[source])
    assert by_path.fingerprint == in_memory.fingerprint
    assert_sums(by_path, adata.obs, *counts_of(adata, SOURCES[source]))
    assert list(by_path.samples.columns) == ["donor", "age"]
    assert list(by_path.groups.columns) == ["lineage"]


@pytest.mark.interop
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("name", ANNDATA_FILES)
def test_corpus_file_surveys_as_it_opens(name: str, source: str) -> None:
    """What planning many files takes (cells, feature ids), read without obs or the matrix,
    is what the whole file gives (the legacy layout through anndata's reader)."""
    from cytepool.io.anndata._readers import open_cells, survey_cells

    options = {"layer": None, "use_raw": False} | SOURCES[source]
    cells, index = survey_cells(CORPUS / name, **options)
    with open_cells(CORPUS / name, **options) as (matrix, obs, var, _):
        assert cells == matrix.shape[0] == len(obs)
        pd.testing.assert_index_equal(index, var.index, exact=False)
    assert list(map(str, index)) == counts_of(read_in_memory(CORPUS / name), SOURCES[source])[1]


@pytest.mark.interop
@pytest.mark.parametrize("name", MUDATA_FILES)
def test_corpus_mudata_surveys_as_it_opens(name: str) -> None:
    from cytepool.io.anndata._readers import open_modalities, survey_modalities

    surveyed = survey_modalities(CORPUS / name)
    with open_modalities(CORPUS / name) as (_, modalities):
        assert list(surveyed) == list(modalities)
        for modality, (cells, index) in surveyed.items():
            assert cells == modalities[modality].matrix.shape[0]
            pd.testing.assert_index_equal(index, modalities[modality].var.index, exact=False)
    mdata = read_in_memory(CORPUS / name)
    assert {k: list(map(str, v[1])) for k, v in surveyed.items()} == {
        k: list(mdata[k].var_names) for k in mdata.mod
    }


@pytest.mark.interop
@pytest.mark.parametrize("source", list(SOURCES))
def test_every_writer_gives_the_same_cube(source: str) -> None:
    fingerprints = {
        name: from_anndata(CORPUS / name, **KEYS, **SOURCES[source]).fingerprint
        for name in ANNDATA_FILES
    }
    assert len(set(fingerprints.values())) == 1, fingerprints


@pytest.mark.interop
@pytest.mark.parametrize("name", MUDATA_FILES)
def test_corpus_mudata_pools_by_path_as_in_memory(name: str, blocks: list[tuple[int, int]]) -> None:
    path = CORPUS / name
    by_path = from_mudata_cells(path, **KEYS)
    assert len(blocks) > 1
    mdata = read_in_memory(path)
    in_memory = from_mudata_cells(mdata, **KEYS)
    assert list(by_path) == list(in_memory) == ["rna", "prot"]
    for modality, cube in by_path.items():
        assert cube.fingerprint == in_memory[modality].fingerprint, modality
        obs = mdata.mod[modality].obs.copy()
        for key in KEYS.values():  # a key a modality lacks comes from the global obs
            if key not in obs:
                obs[key] = mdata.obs[key].reindex(obs.index).to_numpy()
        assert_sums(cube, obs, *counts_of(mdata.mod[modality], {}))


def test_a_failing_modality_closes_what_was_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The matrices of the modalities opened before one that fails (a damaged var), and its
    own, are closed (the files their arrays hold), not left to the garbage collector."""
    import shutil

    import h5py

    from cytepool.errors import FormatError
    from cytepool.io.anndata import _direct

    closed: list[str] = []
    for kind in (_direct.SparseMatrix, _direct.DenseMatrix):
        monkeypatch.setattr(kind, "close", lambda self: closed.append(self.format))
    path = tmp_path / "damaged.h5mu"
    shutil.copy(CORPUS / MUDATA_FILES[-1], path)
    with h5py.File(path, "r+") as file:
        names = [str(name) for name in file["mod"].attrs["mod-order"]]  # the order opened
        del file[f"mod/{names[-1]}/var/_index"]  # the last one's var lacks its index
    with pytest.raises(FormatError, match=r"damaged\.h5mu cannot be read as AnnData"):
        from_mudata_cells(path, **KEYS)
    assert len(closed) == len(names) == 2


def _mudata_writes_zarr() -> bool:
    """mudata 0.4 (0.4.1) stores an int64 attribute in write_zarr, which zarr-python refuses."""
    try:
        return int(importlib.metadata.version("mudata").split(".")[1]) < 4
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - no mudata, no tests
        return True


@pytest.mark.interop
@pytest.mark.xfail(
    not _mudata_writes_zarr(), raises=TypeError, strict=True, reason="mudata 0.4 write_zarr"
)
def test_mudata_zarr_store_pools_by_path(tmp_path: Path) -> None:
    import mudata as md

    mdata = read_in_memory(CORPUS / MUDATA_FILES[-1])
    with warnings.catch_warnings():  # zarr's notes on formats
        warnings.simplefilter("ignore")
        md.write_zarr(tmp_path / "cells.zarr", mdata)
    by_path = from_mudata_cells(tmp_path / "cells.zarr", **KEYS)
    in_memory = from_mudata_cells(mdata, **KEYS)
    assert {k: c.fingerprint for k, c in by_path.items()} == {
        k: c.fingerprint for k, c in in_memory.items()
    }


@pytest.mark.interop
def test_mudata_and_anndata_paths_are_told_apart(tmp_path: Path) -> None:
    h5mu = CORPUS / MUDATA_FILES[0]
    told = r"is a MuData file \(modalities 'rna', 'prot'\): pool one with from_mudata_cells\("
    with pytest.raises(ValueError, match=told):
        from_anndata(h5mu, **KEYS)
    with pytest.raises(ValueError, match=r"is not a MuData file .*: pool it with from_anndata"):
        from_mudata_cells(CORPUS / ANNDATA_FILES[-1], **KEYS)


@pytest.mark.interop
@pytest.mark.parametrize("name", MUDATA_FILES)
def test_mudata_modalities_pool_one_by_one(name: str) -> None:
    every = from_mudata_cells(CORPUS / name, **KEYS)
    for modality in ("prot", "rna"):
        chosen = from_mudata_cells(CORPUS / name, **KEYS, modalities=[modality])
        assert list(chosen) == [modality]
        assert (
            chosen[modality].to_numpy("counts").tolist()
            == every[modality].to_numpy("counts").tolist()
        )
        assert chosen[modality].samples.index.equals(every[modality].samples.index)
    # covariates come from the modalities pooled: prot's obs has none of rna's donor and age
    assert list(chosen["rna"].samples.columns) == ["donor", "age"]
    prot = from_mudata_cells(CORPUS / name, **KEYS, modalities=["prot"])["prot"]
    assert list(prot.samples.columns) == []
    in_memory = from_mudata_cells(read_in_memory(CORPUS / name), **KEYS, modalities=["prot", "rna"])
    assert list(in_memory) == ["prot", "rna"]


@pytest.mark.interop
@pytest.mark.parametrize(
    ("modalities", "error", "pattern"),
    [
        (["prt"], KeyError, r"has no modality 'prt' \(it has 'rna', 'prot'\); did you mean 'prot'"),
        ("prot", TypeError, r"modalities must be a list of modality names, found 'prot'"),
        (["rna", "rna"], ValueError, r"modalities must name each modality once"),
        ([], ValueError, r"modalities must name each modality once and at least one"),
    ],
)
def test_mudata_modalities_errors(modalities: Any, error: type, pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        from_mudata_cells(CORPUS / MUDATA_FILES[-1], **KEYS, modalities=modalities)


@pytest.mark.interop
def test_cli_pools_one_modality(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    h5mu, out = CORPUS / MUDATA_FILES[-1], tmp_path / "prot.cube.zarr"
    keys = ["--sample-key", "sample", "--group-key", "cell_type", "--no-progress"]
    assert main(["pool", str(h5mu), str(out), *keys]) == 1
    err = capsys.readouterr().err
    assert err.endswith("(modalities 'rna', 'prot'): pool one with --modality NAME\n"), err
    assert main(["pool", str(h5mu), str(out), *keys, "--modality", "prot"]) == 0
    expected = from_mudata_cells(h5mu, **KEYS, modalities=["prot"])["prot"]
    assert read_cube(out).to_numpy("counts").tolist() == expected.to_numpy("counts").tolist()
    capsys.readouterr()
    h5ad = CORPUS / ANNDATA_FILES[-1]
    assert main(["pool", str(h5ad), str(tmp_path / "x.cube.zarr"), *keys, "--modality", "rna"]) == 1
    err = capsys.readouterr().err
    assert err.endswith("(it has no 'mod' group): drop --modality to pool it\n"), err


@pytest.mark.interop
@pytest.mark.parametrize("name", [n for n in ANNDATA_FILES if n.startswith("anndata-0.6")])
def test_legacy_file_errors_name_the_legacy_elements(name: str) -> None:
    with pytest.raises(KeyError, match=r"has no layer 'missing'; its layers are \['counts'\]"):
        from_anndata(CORPUS / name, **KEYS, layer="missing")


# ---------------------------------------------------------------------------------------------
# scanpy's bundled pbmc68k (the legacy layout up to scanpy 1.11, the current one since 1.12)
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def pbmc68k() -> Path:
    scanpy = pytest.importorskip("scanpy")
    path = Path(os.path.dirname(scanpy.__file__)) / "datasets" / "10x_pbmc68k_reduced.h5ad"
    assert path.is_file()
    return path


PBMC_KEYS = {"sample_key": "phase", "group_key": "bulk_labels"}


@pytest.mark.interop
def test_pbmc68k_pools_by_path(pbmc68k: Path) -> None:
    with pytest.warns(
        NotCountsWarning, match=r"raw\.X of .*10x_pbmc68k_reduced\.h5ad.*allow_float"
    ):
        by_path = from_anndata(pbmc68k, **PBMC_KEYS, use_raw=True)  # log values, not counts
    adata = read_in_memory(pbmc68k)
    in_memory = from_anndata(adata, **PBMC_KEYS, use_raw=True, allow_float=True)
    assert by_path.fingerprint == in_memory.fingerprint
    assert by_path.shape == (10, 3, adata.raw.n_vars)
    obs = adata.obs.rename(columns={"phase": "sample", "bulk_labels": "cell_type"})
    assert_sums(by_path, obs, *counts_of(adata, {"use_raw": True}))
    with pytest.raises(ValueError, match=r"expected counts, finite values >= 0"):  # X is scaled
        from_anndata(pbmc68k, **PBMC_KEYS)


@pytest.mark.interop
def test_pbmc68k_pools_by_cli(
    pbmc68k: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pbmc.cube.zarr"
    args = [str(pbmc68k), str(out), "--sample-key", "phase", "--group-key", "bulk_labels"]
    code = main(["pool", *args, "--raw", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    warning = [line for line in captured.err.splitlines() if "not every value is a count" in line]
    assert len(warning) == 1, captured.err  # log values: one line, in the CLI's words
    assert "--allow-float" in warning[0], warning[0]
    assert "allow_float" not in warning[0].replace("--allow-float", ""), warning[0]
    adata = read_in_memory(pbmc68k)
    expected = from_anndata(adata, **PBMC_KEYS, use_raw=True, allow_float=True)
    assert read_cube(out).fingerprint == expected.fingerprint
