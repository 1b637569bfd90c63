"""Smoke test: benchmarks/remote_clients.py runs end to end (tiny, no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "remote_clients.py"


def test_remote_clients_benchmark_tiny(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("obstore", reason="the benchmark measures obstore")
    pytest.importorskip("moto", reason="the S3 test server needs moto[server]")
    spec = importlib.util.spec_from_file_location("remote_clients_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--ranges", "2", "--repeat", "1", "--latency", "0"]) == 0
    out = capsys.readouterr().out
    for case in ("HTTP objects", "S3 objects", "HTTP ranges"):
        assert f"| {case} | obstore asyncio, 16 in flight | 2 |" in out
    assert "| HTTP ranges | obstore get_ranges (coalesce 1 MiB, default) | 1 | 1 | 1 | 3 |" in out
