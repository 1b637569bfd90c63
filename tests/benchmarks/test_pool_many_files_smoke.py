"""Smoke test: the many-files section of benchmarks/pool_files.py (pool_many_files.py) runs end
to end with --small (no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "pool_files.py"


def test_pool_many_files_benchmark_small(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("scanpy")
    pytest.importorskip("psutil")
    spec = importlib.util.spec_from_file_location("pool_files_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--small", "--sections", "many", "--repeats", "1", "--dir", str(tmp_path)]
    assert module.main(argv) == 0
    out = capsys.readouterr().out
    assert "3 files x 2,000 cells x 500 genes" in out
    assert "| bound with jobs=2's own CPU: wall of jobs=1 / (CPU of jobs=2 / " in out
    for case in ("cytepool jobs=1", "cytepool jobs=2"):
        line = next(row for row in out.splitlines() if row.startswith(f"| {case} |"))
        assert line.endswith("| equal |"), line
    assert "| jobs=1 / jobs=2 (wall) |" in out
    assert "| jobs=2 / one file, memory held at once |" in out
    jobs2 = next(row for row in out.splitlines() if row.startswith("| cytepool jobs=2 |"))
    assert int(jobs2.split("|")[6]) >= 3  # the case, the fork server and its workers watched
    assert float(jobs2.split("|")[4]) > 0  # the memory held at once was read
