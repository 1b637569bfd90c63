"""Smoke test: benchmarks/cube_io.py runs end to end (small, no timing assertions)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _zarr_smoke import run_quick


@pytest.mark.interop
def test_cube_io_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("zarr")
    pytest.importorskip("pandas")
    out = run_quick("cube_io", ["--quick", "--dir", str(tmp_path)], capsys)
    for codec in ("gzip 4", "zstd 3"):
        for operation in (
            "write: write_cube vs zarr-python writing the layers",
            "verified read (read_cube + to_numpy) vs unverified (io.zarr open_array)",
            "verified read (read_cube + to_numpy) vs zarr-python's bare read",
            "open + select + read",
            "select + read, opened",
        ):
            assert f"| {codec} | {operation} |" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if "| floor, no opening |" in line)
    parts = lines[header + 2 : header + 4]  # what verification adds, one row per codec
    assert [line[:10] for line in parts] == ["| gzip 4 |", "| zstd 3 |"]
    assert all(line.count(" | ") == 9 for line in parts)
    for line in parts:  # lower bound <= floor without opening <= floor with opening
        bound, checked, floor = (float(cell) for cell in line.split(" | ")[5:8])
        assert bound <= checked <= floor
    opening = [line for line in lines if "| open + select + read |" in line]
    assert all(line.endswith("| 1 | 1 |") for line in opening)  # chunk files opened, needed
    assert list(tmp_path.iterdir()) == []  # the stores are removed
