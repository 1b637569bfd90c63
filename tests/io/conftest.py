"""Fixtures shared by the store-layer tests (tests/io is on sys.path for their helpers)."""

from __future__ import annotations

import os

import pytest
from special_files import SPECIAL_FILES


@pytest.fixture(params=list(SPECIAL_FILES))
def special(request: pytest.FixtureRequest) -> str:
    """Each kind of special file (POSIX only)."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("FIFOs and sockets are POSIX")
    return str(request.param)


@pytest.fixture(params=["fast", "stdlib"])
def inflate(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each set of decoders a read may use: the fast decoders (libdeflate for gzip, zstandard
    for zstd; dependencies of cytepool) and, forced with CYTEPOOL_ZARR_FAST=0, the standard
    library's zlib and the zstd module alone (in subprocesses too). Both stacks run both."""
    if request.param == "fast":
        import deflate  # noqa: F401  (installed with cytepool: a failure, not a skip)
        import zstandard  # noqa: F401

    monkeypatch.setenv("CYTEPOOL_ZARR_FAST", "1" if request.param == "fast" else "0")
    return str(request.param)
