"""Fixtures shared by every test; the factories they use are in tests/factories.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from factories import BACKENDS


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each table backend, skipped when its package is missing."""
    pytest.importorskip(request.param)
    return str(request.param)


@pytest.fixture(params=["numba", "numpy"])
def pooling_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way from_cells pools a block: the numba kernels, and numpy for small blocks
    (the default for the small inputs of tests, so "numba" turns that path off; "numpy"
    adds them in pieces of a few values, so a block spans several)."""
    from cytepool import _pool_sums

    if request.param == "numba":
        monkeypatch.setattr(_pool_sums, "SMALL_VALUES", -1)
        monkeypatch.setattr(_pool_sums, "FIRST_VALUES", -1)
    else:
        monkeypatch.setattr(_pool_sums, "PIECE_VALUES", 7)
    return str(request.param)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """A dask ``distributed`` client of a real LocalCluster: two worker processes of one
    thread each, the dashboard on a free port (tests on several xdist workers would clash
    on 8787); skipped when distributed is missing."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
