"""Write the corpus of AnnData / MuData files under tests/data/anndata-corpus/, one per writer.

Each writer is a pinned release of anndata (and mudata) installed in a throwaway virtual
environment made with one of pyenv's Pythons; every writer stores the same small dataset
(:data:`WRITER` below, built without random numbers so that every numpy makes the same
values), so the tests can check that every file pools to the same cube. The versions that
wrote each file (``pip freeze`` of its environment) go to ``MANIFEST.json`` beside them.

Run once, from the repository root, when a writer is added (it takes a few minutes and needs
PyPI and the Pythons under ``$(pyenv root)/versions``)::

    python3 scripts/make_anndata_corpus.py            # every writer
    python3 scripts/make_anndata_corpus.py 0.13.4     # only the writers whose name holds 0.13.4

The files are committed; the tests never run this script.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "anndata-corpus"


@dataclass(frozen=True)
class Writer:
    """One environment: a Python, exact pins, and the files it writes."""

    name: str
    python: str  # a pyenv version
    pins: tuple[str, ...]
    outputs: tuple[str, ...]  # h5ad, zarr (the writer's default format), zarr-v3, h5mu


WRITERS = (
    Writer(
        "anndata-0.6.22.post1",
        "3.7.16",
        (
            "anndata==0.6.22.post1",
            "numpy==1.17.5",
            "pandas==0.25.3",
            "h5py==2.10.0",
            "scipy==1.4.1",
            "natsort==7.0.1",
        ),
        ("h5ad",),  # its zarr stores hold object arrays zarr-python 3 cannot read
    ),
    Writer(
        "anndata-0.7.8",
        "3.8.18",
        (
            "anndata==0.7.8",
            "numpy==1.21.6",
            "pandas==1.3.5",
            "h5py==3.6.0",
            "scipy==1.7.3",
            "zarr==2.10.3",
            "numcodecs==0.9.1",
        ),
        ("h5ad", "zarr"),
    ),
    Writer(
        "anndata-0.8.0",
        "3.9.18",
        (
            "anndata==0.8.0",
            "numpy==1.22.4",
            "pandas==1.4.4",
            "h5py==3.7.0",
            "scipy==1.8.1",
            "zarr==2.12.0",
            "numcodecs==0.10.2",
        ),
        ("h5ad", "zarr"),
    ),
    Writer(
        "anndata-0.9.2",
        "3.10.13",
        (
            "anndata==0.9.2",
            "numpy==1.24.4",
            "pandas==2.0.3",
            "h5py==3.9.0",
            "scipy==1.11.4",
            "zarr==2.16.1",
            "numcodecs==0.11.0",
            "mudata==0.2.3",
        ),
        ("h5ad", "zarr", "h5mu"),
    ),
    Writer(
        "anndata-0.10.9",
        "3.11.7",
        (
            "anndata==0.10.9",
            "numpy==1.26.4",
            "pandas==2.2.2",
            "h5py==3.11.0",
            "scipy==1.13.1",
            "zarr==2.18.2",
            "numcodecs==0.13.0",
        ),
        ("h5ad", "zarr"),
    ),
    Writer(
        "anndata-0.11.4",
        "3.12.1",
        (
            "anndata==0.11.4",
            "numpy==2.2.6",
            "pandas==2.2.3",
            "h5py==3.13.0",
            "scipy==1.15.3",
            "zarr==2.18.7",
            "numcodecs==0.15.1",
        ),
        ("h5ad", "zarr"),
    ),
    Writer(
        "anndata-0.12.19",
        "3.11.7",
        (
            "anndata==0.12.19",
            "numpy==2.4.6",
            "pandas==2.3.3",
            "h5py==3.16.0",
            "scipy==1.17.1",
            "zarr==3.1.6",
            "mudata==0.3.10",
        ),
        ("h5ad", "zarr", "zarr-v3", "h5mu"),
    ),
    Writer(
        "anndata-0.13.4",
        "3.13.0",
        (
            "anndata==0.13.4",
            "numpy==2.5.5",
            "pandas==3.1.1",
            "h5py==3.16.0",
            "scipy==1.18.1",
            "zarr==3.4.2",
            "mudata==0.4.1",
        ),
        ("h5ad", "zarr", "h5mu"),
    ),
)

# The writer, run by each environment's Python (3.7 and newer: no newer syntax here). It
# builds the dataset with integer arithmetic only and writes the files named on the command
# line. The dataset: 48 cells of 3 samples (2 donors) and 4 cell types, 6 genes in X (CSR),
# layers["counts"] (dense), and raw with 8 genes (CSC), plus a protein modality for MuData.
WRITER = r"""
import sys, warnings
import numpy as np
import pandas as pd
import scipy.sparse as sp
import anndata as ad

warnings.simplefilter("ignore")
out, outputs = sys.argv[1], sys.argv[2].split(",")
n_cells, n_genes, n_raw = 48, 6, 8
rows = np.arange(n_cells)[:, None]
values = (rows * 7 + np.arange(n_raw)[None, :] * 3) % 5
values[(rows + np.arange(n_raw)[None, :]) % 3 == 0] = 0
samples = np.array(["s1", "s2", "s3"])[np.arange(n_cells) % 3]
types = np.array(["B", "T", "NK", "Mono"])[(np.arange(n_cells) // 3) % 4]
obs = pd.DataFrame(
    {
        "sample": samples,
        "cell_type": types,
        "donor": np.where(samples == "s3", "d2", "d1"),
        "age": np.where(samples == "s3", 41, 30),
        "lineage": np.where(types == "Mono", "myeloid", "lymphoid"),
        "score": np.arange(n_cells) * 0.5,
        "barcode": ["AC%03d" % i for i in range(n_cells)],
    },
    index=["cell%d" % i for i in range(n_cells)],
)
genes = ["gene%d" % j for j in range(n_raw)]
var = pd.DataFrame(
    {"symbol": ["G%d" % j for j in range(n_genes)], "highly_variable": [True, False] * 3},
    index=genes[:n_genes],
)
x = sp.csr_matrix(values[:, :n_genes].astype(np.float32))
counts = (values[:, :n_genes] * 2).astype(np.int64)
adata = ad.AnnData(X=x, obs=obs, var=var, layers={"counts": counts})
raw = ad.AnnData(
    X=sp.csc_matrix((values * 3).astype(np.float32)),
    obs=obs[[]],
    var=pd.DataFrame({"symbol": ["G%d" % j for j in range(n_raw)]}, index=genes),
)
adata.raw = raw
base = out + "/" + sys.argv[3]
for kind in outputs:
    if kind == "h5ad":
        adata.copy().write_h5ad(base + ".h5ad")
    elif kind == "zarr":
        adata.copy().write_zarr(base + ".zarr", chunks=None)
    elif kind == "zarr-v3":
        with ad.settings.override(zarr_write_format=3):
            adata.copy().write_zarr(base + "-v3.zarr")
    elif kind == "h5mu":
        import mudata as md
        protein = ad.AnnData(
            X=(values[:, :3] * 5).astype(np.float32),
            obs=obs[["sample"]],
            var=pd.DataFrame(index=["CD3", "CD19", "CD14"]),
        )
        rna = adata.copy()
        del rna.obs["sample"]  # taken from the global obs
        mdata = md.MuData({"rna": rna, "prot": protein})
        mdata.obs["sample"] = samples  # rna has no sample, prot no cell type: from here
        mdata.obs["cell_type"] = types
        mdata.write_h5mu(base + ".h5mu")
"""


def pyenv_python(version: str) -> Path:
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    return Path(root) / "versions" / version / "bin" / "python3"


def run(command: list[str | Path]) -> str:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(map(str, command))} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def make(writer: Writer, scratch: Path) -> dict[str, object]:
    """Install ``writer``'s pins in a fresh venv, write its files; return its manifest entry."""
    venv = scratch / writer.name
    run([pyenv_python(writer.python), "-m", "venv", venv])
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", "--prefer-binary", *writer.pins])
    script = scratch / "writer.py"
    script.write_text(WRITER)
    for stale in OUT.glob(f"{writer.name}.*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    run([python, script, OUT, ",".join(writer.outputs), writer.name])
    version = run([python, "-c", "import sys; print(sys.version.split()[0])"]).strip()
    freeze = run([python, "-m", "pip", "freeze", "--all"]).split()
    files = sorted(p.name for p in OUT.glob(f"{writer.name}*"))
    return {"python": version, "packages": freeze, "files": files}


def main(selection: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    manifest_path = OUT / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    chosen = [w for w in WRITERS if not selection or any(s in w.name for s in selection)]
    with tempfile.TemporaryDirectory(prefix="anndata-corpus-") as scratch:
        for writer in chosen:
            print(f"{writer.name} (Python {writer.python}) ...", flush=True)
            manifest[writer.name] = make(writer, Path(scratch))
    manifest = dict(sorted(manifest.items()))
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
