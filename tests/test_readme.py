"""Run the README's Python example on a small `.h5ad` file, so that it stays true."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def _write_cells(path: Path) -> None:
    """Write a small AnnData of whole-number counts with donors and cell types."""
    ad = pytest.importorskip("anndata")
    pd = pytest.importorskip("pandas")
    sparse = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(0)
    n_cells, n_genes = 400, 30
    obs = pd.DataFrame(
        {
            "donor": pd.Categorical(rng.choice(["D1", "D2", "D3"], n_cells)),
            "cell_type": pd.Categorical(rng.choice(["B", "NK", "T"], n_cells)),
        },
        index=[f"cell{i}" for i in range(n_cells)],
    )
    counts = rng.poisson(1.0, size=(n_cells, n_genes)).astype(np.float32)
    var = pd.DataFrame(index=[f"gene{j}" for j in range(n_genes)])
    ad.AnnData(X=sparse.csr_matrix(counts), obs=obs, var=var).write_h5ad(path)


def test_readme_has_an_example() -> None:
    assert len(_python_blocks()) == 1


def test_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_cells(tmp_path / "cells.h5ad")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(_python_blocks()[0], str(README), "exec"), namespace)
    pseudobulk = namespace["pseudobulk"]
    assert pseudobulk.n_obs == 3  # type: ignore[attr-defined]
    assert set(pseudobulk.obs["group_id"]) == {"B"}  # type: ignore[attr-defined]
    assert (tmp_path / "cells.cube.zarr" / "zarr.json").is_file()
