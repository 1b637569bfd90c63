"""Fixtures shared by every test; the factories they use are in tests/factories.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
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


@pytest.fixture
def unwritable_directory(tmp_path: Path) -> Iterator[Path]:
    """An empty directory nothing can be made in: without write permission, or, for root
    (whom permissions do not stop), immutable (``chattr +i``); skipped where neither holds."""
    directory = tmp_path / "unwritable"
    directory.mkdir()
    immutable = os.geteuid() == 0 if hasattr(os, "geteuid") else False
    if immutable:
        chattr = shutil.which("chattr")
        made = (
            chattr is not None
            and not subprocess.run(
                [chattr, "+i", directory], check=False, capture_output=True
            ).returncode
        )
        if not made:
            pytest.skip("running as root, and the directory cannot be made immutable")
    else:
        directory.chmod(0o555)
    try:
        if os.access(directory, os.W_OK) and not immutable:
            pytest.skip("the directory stays writable")
        yield directory
    finally:
        if immutable:
            subprocess.run([str(shutil.which("chattr")), "-i", directory], check=True)
        else:
            directory.chmod(0o755)
