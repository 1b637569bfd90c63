"""Smoke tests: benchmarks/concurrency_stress.py and benchmarks/fuzz_stores.py run (small)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCHMARKS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_concurrency_stress_quick(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pandas")
    module = load("concurrency_stress")
    assert module.main(["--runs", "2", "--runs-without-overwrite", "1", "--overwrites", "2"]) == 0
    out = capsys.readouterr().out
    assert "| 2 succeeded, 0 FileExistsError | 2 |" in out
    assert "| 1 succeeded, 1 FileExistsError | 1 |" in out
    assert "failures (mixed reads, failed writers, leftovers, wrong errors): 0" in out


def test_fuzz_table(capsys: pytest.CaptureFixture[str]) -> None:
    module = load("fuzz_stores")
    records = [
        {"kind": "array", "store": "gzip", "outcome": "read", "s": 0.01, "peak": 2**20},
        {"kind": "array", "store": "zstd", "outcome": "FormatError", "s": 0.02, "peak": 0},
        {"kind": "cube", "store": "cube", "outcome": "FormatError", "s": 0.25, "peak": 2**21},
    ]
    module.print_table(records, 1, 3.0)
    out = capsys.readouterr().out
    assert "| 2 | array | 2 | 1 | 1 | 20 ms | 1.0 MiB |" in out
    assert "| 1 | cube | 1 | 1 | 0 | 250 ms | 2.0 MiB |" in out
