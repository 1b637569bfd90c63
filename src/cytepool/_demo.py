"""The data of ``cytepool demo``: a seeded simulation of single cells (anndata, pandas, scipy)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import anndata

__all__ = ["CELL_TYPES", "prepare_directory", "simulate_cells"]

_MARKER = ".cytepool-demo"  # says the directory is a demo's, which a rerun may write into

CELL_TYPES = {  # name: (share of cells, lineage)
    "B": (0.14, "lymphoid"),
    "CD4 T": (0.30, "lymphoid"),
    "CD8 T": (0.18, "lymphoid"),
    "NK": (0.10, "lymphoid"),
    "Monocyte": (0.22, "myeloid"),
    "DC": (0.06, "myeloid"),
}


def simulate_cells(n_cells: int, *, seed: int) -> anndata.AnnData:
    """Seeded negative-binomial counts: 8 donors x 2 conditions, 6 cell types, 2,000 genes."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse

    rng = np.random.default_rng(seed)
    n_genes, dispersion = 2_000, 0.4
    donors = [f"D{i}" for i in range(1, 9)]
    types = list(CELL_TYPES)
    base = np.exp(rng.normal(-3.2, 1.6, n_genes))  # mean counts per cell, heavy-tailed
    type_effect = np.exp(rng.normal(0.0, 0.6, (len(types), n_genes)) * (rng.random(n_genes) < 0.3))
    donor_effect = np.exp(rng.normal(0.0, 0.15, (len(donors), n_genes)))
    stim_effect = np.where(rng.random(n_genes) < 0.05, np.exp(rng.normal(0.0, 1.0, n_genes)), 1.0)
    shares = np.array([share for share, _ in CELL_TYPES.values()])
    blocks, rows = [], []
    per_sample = n_cells / (2 * len(donors))
    for d, donor in enumerate(donors):
        for condition in ("ctrl", "stim"):
            n = int(rng.poisson(per_sample))
            kinds = rng.choice(len(types), size=n, p=shares)
            depth = rng.lognormal(0.0, 0.35, n)[:, None]
            mean = base * type_effect[kinds] * donor_effect[d] * depth
            if condition == "stim":
                mean = mean * stim_effect
            counts = rng.poisson(rng.gamma(1 / dispersion, mean * dispersion))
            blocks.append(scipy.sparse.csr_matrix(counts.astype(np.float32)))
            rows.append(
                pd.DataFrame(
                    {"donor": donor, "condition": condition, "cell_type": np.array(types)[kinds]}
                )
            )
    obs = pd.concat(rows, ignore_index=True)
    obs["sample"] = obs["donor"] + "-" + obs["condition"]
    obs["sex"] = obs["donor"].map({d: "F" if i % 2 else "M" for i, d in enumerate(donors)})
    obs["age"] = obs["donor"].map({d: 25 + 6 * i for i, d in enumerate(donors)})
    obs["lineage"] = obs["cell_type"].map({t: lineage for t, (_, lineage) in CELL_TYPES.items()})
    for column in ("donor", "condition", "cell_type", "sample", "sex", "lineage"):
        obs[column] = obs[column].astype("category")
    obs.index = [f"cell{i:06d}" for i in range(len(obs))]
    var = pd.DataFrame(
        {"gene_symbol": [f"GENE{j:04d}" for j in range(n_genes)]},
        index=[f"ENSG{j:011d}" for j in range(n_genes)],
    )
    counts = scipy.sparse.vstack(blocks, format="csr")
    obs["n_counts"] = np.asarray(counts.sum(axis=1)).ravel()
    return ad.AnnData(X=counts, obs=obs, var=var)


def prepare_directory(directory: Path, outputs: Sequence[str]) -> Path:
    """Make ``directory`` ready for ``outputs``: new, empty, or an earlier demo's, whose
    outputs stay until each is replaced (atomically) by the new one: an interrupted or
    terminated demo leaves what was there. Nothing is deleted here; the marker file only
    says the directory is the demo's, so what it lists is never taken as names to delete."""
    marker = directory / _MARKER
    if directory.exists() and not directory.is_dir():
        msg = f"{directory} exists and is not a directory"
        raise FileExistsError(msg)
    if directory.is_dir() and any(directory.iterdir()) and not marker.is_file():
        msg = (
            f"{directory} is not empty and was not written by `cytepool demo`; "
            f"name a new or empty directory: cytepool demo DIR"
        )
        raise FileExistsError(msg)
    directory.mkdir(parents=True, exist_ok=True)
    _write_text(marker, json.dumps(list(outputs)))
    return directory


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file next to ``path``, then move it into place."""
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
    ) as file:
        file.write(text)
    try:
        os.replace(file.name, path)
    except BaseException:
        Path(file.name).unlink(missing_ok=True)
        raise
