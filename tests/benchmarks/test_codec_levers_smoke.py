"""Smoke test: benchmarks/codec_levers.py runs end to end (small, no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "codec_levers.py"


def load() -> object:
    spec = importlib.util.spec_from_file_location("codec_levers_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_codec_levers_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load()
    assert module.main(["--quick", "--dir", str(tmp_path)]) == 0  # type: ignore[attr-defined]
    out = capsys.readouterr().out
    for row in (
        "| gzip 4 | zlib (stdlib), streamed 256 KiB |",
        "| zstd 3 | zstd module, streamed 256 KiB |",
        "| SHA-256 (hashlib), one group in",
        "| bytes.count (holds the GIL: the control) |",
    ):
        assert row in out
    assert list(tmp_path.iterdir()) == []
