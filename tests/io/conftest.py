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
