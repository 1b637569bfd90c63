"""The body the smoke tests of benchmarks/zarr_io.py, zarr_local.py and cube_io.py share: load
the script from its file, run its ``main`` and return what it printed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_quick(name: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``benchmarks/<name>.py`` with ``argv``; check it returns 0 and give its output."""
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCHMARKS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(argv) == 0
    return capsys.readouterr().out
