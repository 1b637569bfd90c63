"""Fixtures for the table tests."""

from __future__ import annotations

import pytest
from tables_helpers import BACKENDS


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend read_table can return, skipped when its package is missing."""
    pytest.importorskip(request.param)
    return request.param
