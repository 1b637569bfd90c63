"""Smoke test: benchmarks/zarr_local.py runs end to end (small, no timing assertions)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _zarr_smoke import run_quick


@pytest.mark.interop
def test_zarr_local_benchmark_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorstore")
    out = run_quick("zarr_local", ["--quick", "--dir", str(tmp_path)], capsys)
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
