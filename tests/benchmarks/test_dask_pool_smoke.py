"""Smoke test: benchmarks/dask_pool.py runs end to end (tiny, four cases, no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "dask_pool.py"


def test_dask_pool_benchmark_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("dask", "anndata", "zarr"):
        pytest.importorskip(name)
    spec = importlib.util.spec_from_file_location("dask_pool_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--cells", "400", "--genes", "30", "--chunk-rows", "150", "--repeats", "1"]
    argv += [
        "--cache",
        str(tmp_path),
        "--cases",
        "memory-read-1,memory-1,dask-memory-2,zarr-threads-2",
    ]
    assert module.main(argv) == 0
    out = capsys.readouterr().out
    assert "every case gave the same fingerprint" in out
    assert "| in memory incl. reading X (anndata read_elem), 1 numba thread | 1 |" in out
    assert "| in memory, numba threads | 1 |" in out
    assert "| dask threads, X in memory | 2 |" in out
    assert "| dask threads, X from zarr | 2 |" in out
    assert "cells per CPU s" in out
