"""Smoke test: benchmarks/startup.py runs end to end (one run per case, no timing assertions)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "startup.py"


def test_startup_benchmark_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("pandas", "scipy"):
        pytest.importorskip(name)
    spec = importlib.util.spec_from_file_location("startup_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--runs", "1", "--dir", str(tmp_path), "--no-larger"]) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0][2:]: line for line in out.splitlines() if line.startswith("| ")}
    for case in (
        "python -c pass",
        "import cytepool",
        "import cytepool.io",
        "cytepool --help",
        "cytepool info SMALL.cube.zarr",
        "first from_cells, small",
        "first from_cells, medium",
        "first from_cells, large",
    ):
        assert case in rows, case
    assert "first call" in rows["first from_cells, large"]
    assert not any("larger" in case for case in rows)  # --no-larger
    for size in ("small", "medium", "large"):  # pooled with numpy
        assert "numba" not in rows[f"first from_cells, {size}"]
    assert list(tmp_path.iterdir()) == []  # the cube file and numba caches are removed


def test_heavy_imports_counts_outermost_modules_once() -> None:
    spec = importlib.util.spec_from_file_location("startup_benchmark", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stderr = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       100 |        100 |     pandas._libs",
            "import time:       200 |        300 |   pandas.core",
            "import time:        50 |         50 |     pyarrow.lib",
            "import time:        10 |         60 |   pyarrow",
            "import time:      1000 |       1360 | cytepool.io",
            "import time:       400 |        400 | pandas.io",
        ]
    )
    assert module.heavy_imports(stderr) == pytest.approx({"pandas": 0.0007, "pyarrow": 0.00006})
    marked = stderr.replace(
        "import time:      1000 |       1360 | cytepool.io",
        "import time:         5 |           5 | colorsys",
    )
    assert module.heavy_imports(marked) == pytest.approx({"pandas": 0.0004})  # after the marker
