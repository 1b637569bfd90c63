"""Smoke test: benchmarks/zarr_io.py runs end to end (small, no timing assertions)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _zarr_smoke import run_quick


@pytest.mark.interop
def test_zarr_io_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("zarr")
    pytest.importorskip("tensorstore")  # not in the test extra yet (issue 16)
    out = run_quick("zarr_io", ["--quick", "--one-thread", "--dir", str(tmp_path)], capsys)
    header = next(line for line in out.splitlines() if line.startswith("| operation"))
    for contender in ("cytepool", "tensorstore", "zarr-python", "floor", "cytepool 1 thread"):
        assert f"| {contender} wall / CPU (ms) |" in header
    for operation in ("full read", "one group x 10 genes", "write"):
        for codec in ("gzip 4", "zstd 3"):
            assert out.count(f"| {operation} | {codec} |") == 2  # times and ratios
    assert "cytepool / tensorstore wall" in out
    assert list(tmp_path.iterdir()) == []  # the stores are removed
