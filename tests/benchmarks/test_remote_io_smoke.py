"""Smoke test: benchmarks/remote_io.py runs end to end (tiny, no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "remote_io.py"


def test_remote_io_benchmark_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("obstore", reason="the benchmark reads with obstore")
    spec = importlib.util.spec_from_file_location("remote_io_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick", "--latency", "0"]) == 0
    out = capsys.readouterr().out
    for row in ("open", "one group x 50 genes", "one full layer"):
        assert f"| {row} | cytepool |" in out
        assert f"| {row} | zarr-python (ObjectStore) |" in out
