"""Smoke test: benchmarks/cube_io.py runs end to end (small, no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cube_io.py"


@pytest.mark.interop
def test_cube_io_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("zarr")
    pytest.importorskip("pandas")
    spec = importlib.util.spec_from_file_location("cube_io_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
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
    opening = [line for line in lines if "| open + select + read |" in line]
    assert all(line.endswith("| 1 | 1 |") for line in opening)  # chunk files opened, needed
    assert list(tmp_path.iterdir()) == []  # the stores are removed
