"""Smoke test: benchmarks/hdf5_direct.py runs end to end (small, no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hdf5_direct.py"


def load() -> object:
    spec = importlib.util.spec_from_file_location("hdf5_direct_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hdf5_direct_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load()
    assert module.main(["--quick", "--dir", str(tmp_path)]) == 0  # type: ignore[attr-defined]
    out = capsys.readouterr().out
    for row in (
        "| chunked | 200,000 |",
        "| gzip 4 | 200,000 |",
        "| lzf | 200,000 |",
        "| contiguous |",
    ):
        assert row in out
    assert list(tmp_path.iterdir()) == []
