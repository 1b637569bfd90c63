"""`import cytepool` needs only the core dependencies; optional libraries load lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

OPTIONAL = (
    "pandas",
    "polars",
    "pyarrow",
    "anndata",
    "mudata",
    "scipy",
    "scanpy",
    "dask",
    "numba",
    "zarr",
)


@pytest.mark.parametrize(
    "module", ["cytepool", "cytepool.io", "cytepool.io.zarr", "cytepool.io.anndata", "cytepool.cli"]
)
def test_import_loads_no_optional_library(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"loaded = sorted(m for m in {OPTIONAL!r} if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_public_names_are_exported() -> None:
    import cytepool
    import cytepool.io

    for name in ("Cube", "Normalization", "from_cells", "concat", "add", "__version__"):
        assert hasattr(cytepool, name), name
    for name in ("read_cube", "write_cube", "read_table", "write_table"):
        assert hasattr(cytepool.io, name), name
