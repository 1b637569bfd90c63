"""Fixtures shared by every test; the factories they use are in tests/factories.py."""

from __future__ import annotations

import pytest

from factories import BACKENDS


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each table backend, skipped when its package is missing."""
    pytest.importorskip(request.param)
    return str(request.param)
