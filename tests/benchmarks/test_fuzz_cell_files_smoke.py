"""Smoke test: benchmarks/fuzz_cell_files.py pools a few dozen mutated files: documented errors
only."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_cell_files.py"


def test_fuzz_cell_files_few_cases(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("anndata")
    spec = importlib.util.spec_from_file_location("fuzz_cell_files", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--cases", "36", "--seed", "5", "--timeout", "120"]) == 0
    out = capsys.readouterr().out
    assert "36 mutated files of" in out
    assert "UNDOCUMENTED" not in out
    assert "HANG" not in out
