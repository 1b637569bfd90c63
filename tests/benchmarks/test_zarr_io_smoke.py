"""Smoke test: benchmarks/zarr_io.py runs end to end (small, no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "zarr_io.py"


@pytest.mark.interop
def test_zarr_io_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("zarr")
    spec = importlib.util.spec_from_file_location("zarr_io_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for operation in ("full read", "selective read", "write"):
        for codec in ("gzip 4", "zstd 3"):
            assert f"| {operation} | {codec} |" in out
    assert list(tmp_path.iterdir()) == []  # the stores are removed
