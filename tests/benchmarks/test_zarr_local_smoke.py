"""Smoke test: benchmarks/zarr_local.py runs end to end (small, no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "zarr_local.py"


@pytest.mark.interop
def test_zarr_local_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorstore")
    spec = importlib.util.spec_from_file_location("zarr_local_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--quick", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for case in (
        "2^12 one-byte chunks, none stored",
        "2^12 one-byte chunks, 1 in 1,000 stored",
        "8 MiB whole chunks",
        "8 MiB chunks of 4 KiB rows",
    ):
        assert case in out
    for label in ("uncompressed, StringDType", "gzip, object"):
        assert f"| {label} |" in out
    assert list(tmp_path.iterdir()) == []  # the stores are removed
