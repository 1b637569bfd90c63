"""Smoke test: benchmarks/zarr_io.py runs end to end (small, no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "zarr_io.py"


@pytest.mark.interop
def test_zarr_io_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("zarr")
    pytest.importorskip("tensorstore")  # not in the test extra yet (issue 16)
    spec = importlib.util.spec_from_file_location("zarr_io_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick", "--one-thread", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("| operation"))
    for contender in ("cytepool", "tensorstore", "zarr-python", "floor", "cytepool 1 thread"):
        assert f"| {contender} wall / CPU (ms) |" in header
    for operation in ("full read", "one group x 10 genes", "write"):
        for codec in ("gzip 4", "zstd 3"):
            assert out.count(f"| {operation} | {codec} |") == 2  # times and ratios
    assert "cytepool / tensorstore wall" in out
    assert list(tmp_path.iterdir()) == []  # the stores are removed
