"""The axis tables the converters rebuild (``cytepool.io.anndata._covariates``): their indexes
as ``read_cube`` gives them, empty or not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
ad = pytest.importorskip("anndata")

from test_anndata_record import round_trip  # noqa: E402

import cytepool  # noqa: E402
from cytepool.io import read_cube, write_cube  # noqa: E402

TEXTS = pd.Index(["a"]).dtype  # pandas' default for texts: str (pandas 3) or object


def empty_cube(kind: str) -> Any:
    """A cube without features, without groups, or without cells (no samples, no groups)."""
    if kind == "no features":
        return cytepool.Cube(
            {"counts": np.zeros((1, 2, 0), dtype=np.int64)},
            samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
            groups=pd.DataFrame({"group_id": ["B"]}),
            features=pd.DataFrame({"feature_id": pd.Series([], dtype=TEXTS)}),
            cells=np.array([[1, 2]]),
        )
    if kind == "no groups":
        return cytepool.Cube(
            {"counts": np.zeros((0, 2, 1), dtype=np.int64)},
            samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
            groups=pd.DataFrame({"group_id": pd.Series([], dtype=TEXTS)}),
            features=pd.DataFrame({"feature_id": ["f"]}),
            cells=np.zeros((0, 2), dtype=np.int64),
        )
    nothing = np.array([], dtype=object)
    return cytepool.from_cells(
        np.zeros((0, 2), dtype=np.float32),
        sample_labels=nothing,
        group_labels=nothing,
        features=pd.DataFrame({"feature_id": ["f1", "f2"]}),
    )


@pytest.mark.interop
@pytest.mark.parametrize("where", ["memory", "h5ad", "zarr", "MuData", "h5mu"])
@pytest.mark.parametrize("kind", ["no features", "no groups", "no cells"])
def test_empty_tables_keep_the_dtype_of_their_index(tmp_path: Path, where: str, kind: str) -> None:
    """An empty feature table's index came back as object where the cube and read_cube have
    pandas 3's str."""
    cube = empty_cube(kind)
    write_cube(cube, tmp_path / "cube.cube.zarr")
    expected = read_cube(tmp_path / "cube.cube.zarr")
    back = round_trip(cube, tmp_path, where)
    assert back.fingerprint == cube.fingerprint
    for name in ("samples", "groups", "features"):
        assert getattr(back, name).index.dtype == TEXTS, name
        pd.testing.assert_frame_equal(getattr(back, name), getattr(expected, name))
        pd.testing.assert_frame_equal(getattr(back, name), getattr(cube, name))
