"""A cube read by URL pickles (issue 22, item 7), against the real HTTP and S3 test servers:
the copy reads the same store by its URL, with the same ``storage_options``, which travel in
the pickle whole (credentials included, as docs/remote.md says)."""

from __future__ import annotations

import multiprocessing
import pickle
from operator import attrgetter, methodcaller
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("obstore")

from remote_servers import TEST_SECRET

from cytepool import Cube
from cytepool.errors import StoreChangedError
from cytepool.io import read_cube, write_cube
from factories import make_cube

GENES = ["f5", "f0", "f7"]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(11)
    counts = rng.integers(0, 40, size=(3, 4, 10)).astype(np.int32)
    cube = make_cube(
        {"counts": counts},
        samples={"donor": ["d1", "d2", None, "d1"], "age": [30, 41, 52, 63]},
        features={"symbol": [f"G{i}" for i in range(10)]},
    )
    path = tmp_path_factory.mktemp("remote-pickle") / "p.cube.zarr"
    write_cube(cube, path)
    return path


def assert_same(copy: Cube, cube: Cube) -> None:
    assert copy.fingerprint == cube.fingerprint
    np.testing.assert_array_equal(copy.to_numpy("counts"), cube.to_numpy("counts"))
    assert copy.samples.equals(cube.samples)


def test_a_cube_read_over_http_pickles(local: Path, serve_http) -> None:
    served = serve_http(local)
    cube = read_cube(served.url)
    copy = pickle.loads(pickle.dumps(cube))  # before its tables were used
    assert_same(copy, read_cube(local))
    selected = read_cube(served.url).select(groups=["g1"], features=GENES)
    again = pickle.loads(pickle.dumps(selected))
    np.testing.assert_array_equal(again.profiles("g1"), selected.profiles("g1"))
    assert again.fingerprint == selected.fingerprint


def test_a_cube_read_from_s3_pickles_with_its_storage_options(local: Path, serve_s3) -> None:
    served = serve_s3(local)
    cube = read_cube(served.url, storage_options=served.storage_options)
    data = pickle.dumps(cube)
    assert TEST_SECRET.encode() in data  # the credentials travel with the cube: documented
    assert_same(pickle.loads(data), read_cube(local))


def test_a_remote_cube_is_read_in_spawned_processes(local: Path, serve_s3) -> None:
    served = serve_s3(local)
    cube = read_cube(served.url, storage_options=served.storage_options)
    selected = cube.select(features=GENES)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        fingerprints = pool.map(attrgetter("fingerprint"), [cube, selected])
        profiles = pool.map(methodcaller("profiles", "g2"), [cube, selected])
    assert fingerprints == [cube.fingerprint, selected.fingerprint]
    np.testing.assert_array_equal(profiles[0], cube.profiles("g2"))
    np.testing.assert_array_equal(profiles[1], selected.profiles("g2"))


def test_a_pickled_remote_cube_sees_a_replaced_store(local: Path, serve_http, tmp_path) -> None:
    served = serve_http(local)
    data = pickle.dumps(read_cube(served.url))
    other = tmp_path / "other.cube.zarr"
    write_cube(make_cube(np.ones((3, 4, 10), dtype=np.int32)), other)
    served.replace("zarr.json", (other / "zarr.json").read_bytes())  # a new version of the root
    with pytest.raises(StoreChangedError):
        pickle.loads(data).to_numpy("counts")
