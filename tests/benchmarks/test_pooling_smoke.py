"""Smoke test: benchmarks/pooling.py runs end to end (tiny, in-process, no timing assertions)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "pooling.py"


def test_pooling_benchmark_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("scanpy")
    pytest.importorskip("decoupler")
    spec = importlib.util.spec_from_file_location("pooling_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases = "from_cells,from_cells-1-thread,from_cells-squares,from_cells-detected,scanpy-1.11,"
    cases += "decoupler,read-floor,scatter-floor"
    argv = ["--cells", "300", "--genes", "40", "--samples", "3", "--groups", "2", "--repeats", "1"]
    argv += ["--in-process", "--cache", str(tmp_path), "--cases", cases, "--scaling", "200,300"]
    assert module.main(argv) == 0
    out = capsys.readouterr().out
    assert "| cytepool from_cells | " in out
    assert "| int64 |" in out
    scanpy = f"scanpy {importlib.metadata.version('scanpy')}"  # the case "scanpy-1.11"
    for label in (scanpy, "decoupler", "floor: scatter"):
        line = next(row for row in out.splitlines() if label in row)
        assert line.endswith("| equal |") or "read" in line, line
    assert "| from_cells 1 thread / scatter floor (1 thread) | " in out
    assert "| from_cells counts + detected + squares / counts + detected (issue 17) | " in out
    for label in ("counts + detected |", "counts + detected + squares |"):
        line = next(row for row in out.splitlines() if label in row)
        assert line.endswith("| equal |"), line
    assert "| scanpy 1.12 (default threads) / from_cells (default threads) | not measured |" in out
    scaling = [line for line in out.splitlines() if line.startswith(("| 200 |", "| 300 |"))]
    assert len(scaling) == 2
    assert "Largest / smallest time per nonzero" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "pooling-200x40-d0.05-3x2-seed0",
        "pooling-300x40-d0.05-3x2-seed0",
    ]


def test_floor_kernels_are_compiled_once() -> None:
    """The timed call of a floor reuses the kernels the warm-up compiled."""
    pytest.importorskip("numba")
    spec = importlib.util.spec_from_file_location("pooling_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module._floor_kernels() is module._floor_kernels()
