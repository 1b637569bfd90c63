"""Smoke test of benchmarks/tables.py with a tiny table."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "tables.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmark_tables", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_measures_every_contender_in_process() -> None:
    pytest.importorskip("polars")
    pytest.importorskip("anndata")
    pytest.importorskip("zarr")
    bench = _load()
    results: dict[str, object] = {
        case: bench.measure(case, 40, 2, "zstd")
        for case in bench.CASES
        if case != "zarrwhals-polars"
    }
    results["zarrwhals-polars"] = "not run"
    for case in ("cytepool-pandas", "cytepool-polars", "anndata"):
        result = results[case]
        assert isinstance(result, dict)
        assert result["write"] > 0
        assert result["read"] > 0
        assert result["frame"] > 0
    args = bench.argparse.Namespace(rows=40, compression="zstd", repeats=2)
    text = bench.table(results, args)
    assert "| cytepool write_table/read_table (polars) |" in text
    assert "anndata / this" in text


def test_benchmark_command_prints_a_markdown_table() -> None:
    pytest.importorskip("polars")
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--rows",
            "30",
            "--repeats",
            "1",
            "--cases",
            "cytepool-polars",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "30 rows, compression zstd, median of 1 rounds"
    row = next(
        line for line in lines if line.startswith("| cytepool write_table/read_table (polars)")
    )
    assert "failed" not in row
