"""Smoke test: benchmarks/pool_files.py runs end to end on tiny files (no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "pool_files.py"


def _module() -> object:
    spec = importlib.util.spec_from_file_location("pool_files_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pool_files_benchmark_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("scanpy")
    pytest.importorskip("zarr")
    module = _module()
    argv = ["--cells", "400", "--genes", "100", "--repeats", "1", "--dir", str(tmp_path)]
    argv += [
        "--layouts",
        "chunked.h5ad,v2.zarr,csc.h5ad",
        "--cases",
        "from_anndata,cli,scanpy",
    ]
    argv += ["--sections", "files"]
    assert module.main(argv) == 0  # type: ignore[attr-defined]
    out = capsys.readouterr().out
    assert "decoders and readers: numcodecs" in out
    for layout in ("chunked.h5ad", "v2.zarr", "csc.h5ad"):
        assert f"| {layout} | " in out
        line = next(
            row
            for row in out.splitlines()
            if row.startswith(f"| {layout} | ") and row.endswith("|") and row.count("|") == 5
        )
        assert line.endswith("| equal |"), line
    assert "| cytepool pool |" in out
    assert "The cube itself (counts, int64) takes" in out
