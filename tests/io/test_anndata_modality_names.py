"""The modality name of each group (``cytepool.io.anndata._modality_names``): one that ``.h5mu``
and ``.zarr`` files hold, unique, stable, the id itself when it can be, mapped back exactly."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.io.anndata._modality_names import MAX_NAME_BYTES, modality_names

pd = pytest.importorskip("pandas")
md = pytest.importorskip("mudata")

import cytepool  # noqa: E402
from cytepool.errors import InputError  # noqa: E402
from cytepool.io.anndata import from_mudata, to_mudata  # noqa: E402
from cytepool.io.anndata._pseudobulk import mudata_defaults  # noqa: E402

# Group ids a cube takes whose own name mudata could not write (.h5mu, .zarr or both).
AWKWARD = {
    "empty": ("", "_"),
    "dot": (".", "_."),
    "dots": ("..", "_.."),
    "backslash": ("a\\b", "a_b"),
    "slash": ("T/NK", "T_NK"),
    "NUL": ("\x00", "_"),
    "line break": ("a\nb", "a_b"),
    "zarr.json": ("zarr.json", "_zarr.json"),
    ".zattrs": (".ZATTRS", "_.ZATTRS"),
}
LONG = {"300 letters": "x" * 300, "300 bytes": "é" * 150}


def mudata_cube(group_ids: list[str]) -> Any:
    """A cube of the groups ``group_ids`` (2 samples, 2 features), each of its own counts."""
    n = len(group_ids)
    return cytepool.Cube(
        {"counts": np.arange(n * 4, dtype=np.int64).reshape(n, 2, 2)},
        samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
        groups=pd.DataFrame({"group_id": group_ids}),
        features=pd.DataFrame({"feature_id": ["f1", "f2"]}),
        cells=np.full((n, 2), 3),
    )


def written_and_read(mdata: Any, path: Path) -> Any:
    """``mdata`` written by mudata to ``path`` (.h5mu or .zarr) and read back."""
    with mudata_defaults(md), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mudata's and zarr's own warnings on these stores
        if path.suffix == ".h5mu":
            mdata.write(path)
            return md.read_h5mu(path)
        mdata.write_zarr(path)
        return md.read_zarr(path)


def assert_storable(name: str) -> None:
    assert name.strip(".")
    assert not set(name) & {"/", "\\", "\x00", "\n"}
    assert len(name.encode("utf-8")) <= MAX_NAME_BYTES


@pytest.mark.parametrize(("group", "expected"), list(AWKWARD.values()), ids=list(AWKWARD))
def test_an_id_no_store_takes_gets_a_name_one_does(group: str, expected: str) -> None:
    assert modality_names([group, "B"]) == [expected, "B"]


@pytest.mark.parametrize("ids", [["B", "T", "NK"], ["CD4+ T", "é", "__x", " ", "obs", "mod"]])
def test_a_plain_id_is_its_own_name(ids: list[str]) -> None:
    assert modality_names(ids) == ids


@pytest.mark.parametrize("group", list(LONG.values()), ids=list(LONG))
def test_a_long_id_is_cut_and_ends_in_a_digest_of_the_id(group: str) -> None:
    name, other = modality_names([group, group + "y"])
    assert_storable(name)
    assert_storable(other)
    assert name != other
    assert group.startswith(name[: name.index("~")])
    assert modality_names([group, group + "y"]) == [name, other]  # stable


def test_names_taken_get_underscores_and_stay_within_the_length() -> None:
    assert modality_names(["T/NK", "T_NK", "T\\NK"]) == ["T_NK", "T_NK_", "T_NK__"]
    stem = "a" * (MAX_NAME_BYTES - 1)
    ids = [f"{stem}{end}" for end in ("/", "\\", "_", "\x00", "\t")]
    names = modality_names(ids)
    assert names[0] == f"{stem}_"
    assert len(set(names)) == len(ids)
    for name in names:
        assert_storable(name)
    assert modality_names(ids) == names


CASES = {**{key: value[0] for key, value in AWKWARD.items()}, **LONG}


@pytest.mark.interop
@pytest.mark.parametrize("where", ["memory", "h5mu", "zarr"])
@pytest.mark.parametrize("group", list(CASES.values()), ids=list(CASES))
def test_any_group_id_goes_to_mudata_files_and_back(tmp_path: Path, where: str, group: str) -> None:
    """Ids such as "", "." or ".." were modality names mudata could not write (KeyError,
    TypeError, ValueError), and in .zarr also "a\\b", a NUL and a 300-letter id."""
    cube = mudata_cube([group, "B"])
    mdata = to_mudata(cube)
    for name in mdata.mod:
        assert_storable(name)
    if where == "h5mu" and "\x00" in group:  # HDF5 strings hold no NUL: nor the group table
        with pytest.raises(ValueError, match="embedded NULL"):
            written_and_read(mdata, tmp_path / "cube.h5mu")
        return
    if where != "memory":
        mdata = written_and_read(mdata, tmp_path / f"cube.{where}")
    back = from_mudata(mdata)
    assert back.fingerprint == cube.fingerprint
    assert back.groups.index.tolist() == [group, "B"]
    np.testing.assert_array_equal(back.profiles(0), cube.profiles(0))


@pytest.mark.interop
@pytest.mark.parametrize("where", ["memory", "h5mu", "zarr"])
def test_ids_whose_names_collide_map_back_to_their_groups(tmp_path: Path, where: str) -> None:
    cube = mudata_cube(["T_NK", "T/NK", "T\\NK", ".", "_."])
    mdata = to_mudata(cube)
    assert list(mdata.mod) == ["T_NK", "T_NK_", "T_NK__", "_.", "_._"]
    if where != "memory":
        mdata = written_and_read(mdata, tmp_path / f"cube.{where}")
    back = from_mudata(mdata)
    assert back.fingerprint == cube.fingerprint
    for g in range(len(cube.groups)):
        np.testing.assert_array_equal(back.profiles(g), cube.profiles(g))


def test_a_record_naming_a_modality_twice_is_an_input_error() -> None:
    mdata = to_mudata(mudata_cube(["B", "T"]))
    mdata.uns["cytepool"]["modalities"] = ["B", "B"]
    with pytest.raises(InputError, match=r"its 'modalities' name 'B' twice, expected a name"):
        from_mudata(mdata)
