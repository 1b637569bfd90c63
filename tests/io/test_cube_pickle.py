"""A cube read from a cube file pickles: fresh, after its tables were used, after a selection,
and into processes started with spawn (what dask and multiprocessing do)."""

from __future__ import annotations

import multiprocessing
import pickle
from operator import attrgetter, methodcaller
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool import Cube
from cytepool._assemble import parts_of
from cytepool.io import read_cube, write_cube
from factories import BACKENDS, make_cube

pd = pytest.importorskip("pandas")

GENES = ["ENSG00003", "ENSG00000", "ENSG00011"]


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 30, size=(3, 4, 12)).astype(np.int32)
    cube = make_cube(
        {"counts": counts},
        ids={
            "groups": ["B", "T", "NK"],
            "samples": [f"s{i}" for i in range(4)],
            "features": [f"ENSG{i:05d}" for i in range(12)],
        },
        samples={"donor": pd.Categorical(["d1", "d2", "d1", "d2"]), "age": [30, 41, 52, 63]},
        features={"symbol": [f"G{i}" for i in range(12)]},
    )
    target = tmp_path_factory.mktemp("pickle") / "p.cube.zarr"
    write_cube(cube, target)
    return target


def deferred(cube: Cube) -> list[str]:
    """The tables whose frame is not made yet."""
    tables = parts_of(cube).tables
    return sorted(axis for axis, table in tables.items() if table._frame is None)


def assert_same(copy: Cube, cube: Cube) -> None:
    assert copy.fingerprint == cube.fingerprint
    np.testing.assert_array_equal(copy.to_numpy("counts"), cube.to_numpy("counts"))
    for axis in ("samples", "groups", "features"):
        assert getattr(copy, axis).equals(getattr(cube, axis))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cube_read_from_a_file_pickles_before_its_tables_are_used(
    path: Path, backend: str
) -> None:
    cube = read_cube(path, backend=backend)
    assert deferred(cube) == ["features", "groups", "samples"]
    copy = pickle.loads(pickle.dumps(cube))
    assert deferred(copy) == ["features", "groups", "samples"]  # still deferred, not built
    assert_same(copy, read_cube(path, backend=backend))


def test_a_cube_pickles_after_its_tables_were_used(path: Path) -> None:
    cube = read_cube(path)
    assert cube.samples["age"].tolist() == [30, 41, 52, 63]
    assert deferred(cube) == ["features", "groups"]
    assert_same(pickle.loads(pickle.dumps(cube)), cube)


def test_a_selection_pickles_and_keeps_its_fingerprint(path: Path) -> None:
    cube = read_cube(path)
    selected = cube.select(groups=["T"], features=GENES)
    assert deferred(selected) == ["features", "groups", "samples"]
    copy = pickle.loads(pickle.dumps(selected))
    np.testing.assert_array_equal(copy.profiles("T"), selected.profiles("T"))
    assert copy.features.index.tolist() == GENES
    assert copy.fingerprint == selected.fingerprint


def test_a_pickled_cube_is_read_in_spawned_processes(path: Path) -> None:
    cube = read_cube(path)
    selected = cube.select(features=GENES)
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        fingerprints = pool.map(attrgetter("fingerprint"), [cube, selected])
        profiles = pool.map(methodcaller("profiles", "NK"), [cube, selected])
    assert fingerprints == [cube.fingerprint, selected.fingerprint]
    np.testing.assert_array_equal(profiles[0], cube.profiles("NK"))
    np.testing.assert_array_equal(profiles[1], selected.profiles("NK"))


def test_a_pickled_cube_checks_its_store_again(path: Path, tmp_path: Path) -> None:
    import shutil

    moved = tmp_path / "m.cube.zarr"
    shutil.copytree(path, moved)
    data = pickle.dumps(read_cube(moved))
    shutil.rmtree(moved)
    copy: Any = pickle.loads(data)
    with pytest.raises(FileNotFoundError):
        copy.to_numpy("counts")
