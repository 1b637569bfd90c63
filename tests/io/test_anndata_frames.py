"""obs and var read without anndata (``cytepool.io.anndata._frames``) are anndata's own.

Every dataframe of the corpus (anndata 0.6 to 0.13, ``.h5ad``, Zarr v2 and v3, ``.h5mu``) and
frames of every column kind written by this stack's anndata are read both ways and must be
equal: values, dtypes, categories and their order, the index and its name, the arrays' types.
Pooling a file of anndata >= 0.7 then never imports anndata.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")

from anndata.io import read_elem  # noqa: E402

from cytepool.io.anndata import _frames as frames  # noqa: E402

CORPUS = Path(__file__).parents[1] / "data" / "anndata-corpus"
FRAME_GROUPS = ("obs", "var", "raw/var")
N = 9


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Any]:
    """The store (zarr-python) or file (h5py, closed after) at ``path``, as cytepool opens it."""
    if path.is_dir():
        yield zarr.open_group(path, mode="r")
        return
    with h5py.File(path, "r") as file:
        yield file


def dataframes(root: Any) -> Iterator[str]:
    """The paths of the dataframe groups pooling reads: obs, var, raw's var, and each
    modality's (an anndata < 0.7 file holds compound datasets there, which anndata reads)."""
    tops = [root, *(root["mod"][name] for name in root.get("mod", {}))]
    for top in tops:
        for name in FRAME_GROUPS:
            if name in top:
                yield f"{top.name.rstrip('/')}/{name}".lstrip("/")


def by_anndata(element: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata 0.7's notes about old categoricals
        return read_elem(element)


def assert_same(ours: Any, theirs: Any) -> None:
    """Equal as pandas compares them, with the same array types column by column."""
    assert type(ours) is type(theirs)
    if isinstance(theirs, pd.DataFrame):
        pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
        assert ours.index.dtype == theirs.index.dtype
        for name in theirs.columns:
            assert type(ours[name].array) is type(theirs[name].array), name
    elif isinstance(theirs, dict):  # anndata 0.7's __categories
        assert ours.keys() == theirs.keys()
        for key, value in theirs.items():
            assert_same(ours[key], value)
    elif isinstance(theirs, np.ndarray):
        np.testing.assert_array_equal(ours, theirs, strict=True)
    else:
        pd.testing.assert_extension_array_equal(ours, theirs, check_exact=True)


def corpus_frames() -> list[tuple[str, str]]:
    """(file, dataframe) of every dataframe pooling reads in the corpus."""
    found = []
    for name in sorted(path.name for path in CORPUS.iterdir() if path.suffix != ".json"):
        with opened(CORPUS / name) as root:
            found += [(name, element) for element in dataframes(root)]
    return found


@pytest.mark.parametrize(("name", "element"), corpus_frames())
def test_corpus_frames_read_as_anndata_reads_them(name: str, element: str) -> None:
    with opened(CORPUS / name) as root:
        group = root[element]
        assert_same(frames.read_element(group), by_anndata(group))
        if frames.is_group(group):
            for column in group:
                assert_same(frames.read_element(group[column]), by_anndata(group[column]))


def test_scanpys_bundled_frames_read_as_anndata_reads_them() -> None:
    """scanpy's pbmc68k (legacy layout up to scanpy 1.11, anndata's current one since 1.12)."""
    scanpy = pytest.importorskip("scanpy")
    path = Path(scanpy.__file__).parent / "datasets" / "10x_pbmc68k_reduced.h5ad"
    with opened(path) as root:
        elements = list(dataframes(root))
        assert elements
        for element in elements:
            assert_same(frames.read_element(root[element]), by_anndata(root[element]))


def every_kind() -> ad.AnnData:
    """Cells with a column of each kind anndata writes into obs, and a var indexed by a
    named index with no columns."""
    letters = np.array(list("abcabcabc"), dtype=object)
    obs = pd.DataFrame(
        {
            "category": pd.Categorical(letters),
            "numbers": pd.Categorical(np.arange(N) % 4),
            "ordered": pd.Categorical(letters, categories=["c", "b", "a"], ordered=True),
            "gaps": pd.Categorical(["x", None, "y", "x", None, "y", "x", "x", "y"]),
            "unique": np.array([f"name-{i}-é日" for i in range(N)], dtype=object),
            "int": np.arange(N, dtype=np.int16),
            "float": np.where(np.arange(N) % 3 == 0, np.nan, np.arange(N) / 7),
            "flag": np.arange(N) % 2 == 0,
            "nullable": pd.array([1, None, 3, 4, None, 6, 7, 8, 9], dtype="Int32"),
            "maybe": pd.array([True, None, False] * 3, dtype="boolean"),
            "text": pd.array([None if i % 3 == 0 else f"t{i}" for i in range(N)], dtype="string"),
        },
        index=pd.Index([f"cell-{i}" for i in range(N)], name="barcode"),
    )
    var = pd.DataFrame(index=pd.Index(["g0", "g1", "g2"]))
    # the same frame in uns, written as it is: anndata turns repeated strings of obs and var
    # (not of uns) into categoricals, as other writers may not
    uns = {"frame": obs.copy()}
    return ad.AnnData(X=np.zeros((N, 3), dtype=np.float32), obs=obs, var=var, uns=uns)


@pytest.fixture(scope="module", params=["h5ad", "zarr-v2", "zarr-v3"])
def written(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """``every_kind`` as this stack's anndata writes it, opened as cytepool opens it."""
    layout = request.param
    path = tmp_path_factory.mktemp("frames") / ("cells.h5ad" if layout == "h5ad" else "cells.zarr")
    adata = every_kind()
    with warnings.catch_warnings(), ad.settings.override(allow_write_nullable_strings=True):
        # the Zarr format setting (deprecated in 0.13) and 0.12's note that v2 ends
        warnings.filterwarnings("ignore", "(?i).*(zarr v3|setting will be removed)")
        if layout == "h5ad":
            adata.write_h5ad(path)
        else:
            with ad.settings.override(zarr_write_format=int(layout[-1])):
                adata.write_zarr(path)
    with opened(path) as root:
        yield root


@pytest.mark.parametrize("element", ["obs", "var", "uns/frame"])
def test_every_column_kind_reads_as_anndata_reads_it(written: Any, element: str) -> None:
    group = written[element]
    assert_same(frames.read_element(group), by_anndata(group))
    for column in group:
        assert_same(frames.read_element(group[column]), by_anndata(group[column]))


def test_the_named_index_keeps_its_name(written: Any) -> None:
    obs = frames.read_element(written["obs"])
    assert obs.index.name == "barcode"
    assert list(obs.index) == [f"cell-{i}" for i in range(N)]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the elements handed to anndata."""
    names: list[str] = []
    original = frames._by_anndata

    def spy(element: Any) -> Any:
        names.append(element.name)
        return original(element)

    monkeypatch.setattr(frames, "_by_anndata", spy)
    return names


def test_every_element_anndata_writes_in_a_frame_is_read_here(
    written: Any, asked: list[str]
) -> None:
    frame = written["uns/frame"]
    encodings = {frame[name].attrs["encoding-type"] for name in frame}
    kinds = {"categorical", "array", "nullable-integer", "nullable-boolean"}
    assert encodings - {"string-array"} == kinds | {"nullable-string-array"}
    frames.read_element(frame)
    frames.read_element(written["obs"])
    assert asked == []


def test_another_anndata_release_reads_everything_itself(
    written: Any, asked: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the readers of anndata 0.12 and 0.13 are repeated here."""
    monkeypatch.setattr(frames, "_anndata_release", lambda: (0, 14))
    assert_same(frames.read_element(written["obs"]), by_anndata(written["obs"]))
    assert asked == ["/obs"]


@pytest.mark.parametrize(
    ("release", "expected"),
    [("0.12.3", (0, 12)), ("0.13rc1", ()), ("0.1\u00b2", ()), ("\u0660.13", ())],
)
def test_anndata_release_takes_ascii_digits_only(
    release: str, expected: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release of other digits ("²" is a digit to str.isdigit, not to int) is unknown."""
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: release)
    assert frames._anndata_release.__wrapped__() == expected


def test_attributes_of_other_types_are_left_to_anndata(tmp_path: Path, asked: list[str]) -> None:
    """A fixed-length string attribute (bytes to h5py, as Julia's HDF5.jl writes them) is
    decoded by anndata, which reads such files."""
    path = tmp_path / "fixed.h5ad"
    with ad.settings.override(allow_write_nullable_strings=True):
        every_kind().write_h5ad(path)
    with h5py.File(path, "r+") as file:
        codes = file["obs/category"]
        codes.attrs.create("encoding-type", np.bytes_(b"categorical"))
    with h5py.File(path, "r") as file:
        assert frames._encoding(file["obs/category"]) == (None, "0.2.0")
        assert_same(frames.read_element(file["obs"]), by_anndata(file["obs"]))
    assert asked == ["/obs/category"]


def test_pooling_a_file_does_not_import_anndata() -> None:
    """``from_anndata(path)`` and ``from_mudata_cells(path)`` on files of anndata >= 0.7 read
    obs and var here, and so never pay anndata's import (0.2–0.6 s); a legacy file is read by
    anndata."""
    script = (
        "import json, sys\n"
        "from cytepool.io.anndata import from_anndata, from_mudata_cells\n"
        "seen = {}\n"
        "for path in sys.argv[1:]:\n"
        "    pool = from_mudata_cells if path.endswith('.h5mu') else from_anndata\n"
        "    pool(path, sample_key='sample', group_key='cell_type')\n"
        "    seen[path] = sorted({'anndata', 'mudata'} & set(sys.modules))\n"
        "print(json.dumps(seen))\n"
    )
    modern = [CORPUS / name for name in ("anndata-0.13.4.h5ad", "anndata-0.8.0.zarr")]
    modern.append(CORPUS / "anndata-0.13.4.h5mu")
    legacy = CORPUS / "anndata-0.6.22.post1.h5ad"
    args = [sys.executable, "-W", "ignore", "-c", script, *map(str, [*modern, legacy])]
    seen = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    assert seen == {**{str(path): [] for path in modern}, str(legacy): ["anndata"]}
