"""Write the golden cube file of the format version the cytepool on the path writes.

    PYTHONPATH=src python tests/data/cube-files/make.py [SUFFIX]

writes ``tests/data/cube-files/format-<version><SUFFIX>.cube.zarr`` (gzip, level 4) from the
cube of :func:`golden_cube`, and prints its fingerprint. The files of formats 1.0 and 1.1 were
written by the cytepool of their time (1.0: the parent of commit eab7b08; 1.1: commit 73ad122),
on the oldest stack, and are never written again: tests/io/test_cube_golden.py reads them and
checks every stored digest and the fingerprint they were written with. Of format 1.2,
``format-1.2.cube.zarr`` was written on the oldest stack (pandas 2: plain string columns) and
``format-1.2-pandas3.cube.zarr`` on the newest (pandas 3: nullable string columns); both are
read and verified on both stacks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from cytepool import Cube, Normalization
from cytepool.io import cubes, read_cube, write_cube

# log1p of the counts as the golden files store them, written out: numpy's log1p can differ
# in the last bit between machines (its SIMD loops follow the CPU), and these must not
_LOGGED = [  # 2 groups x 3 samples x 5 features, in order
    -0.0,
    3.5263605246161616,
    1.6094379124341003,
    2.3978952727983707,
    2.772588722239781,
    2.772588722239781,
    3.828641396489095,
    3.6888794541139363,
    3.828641396489095,
    3.912023005428146,
    1.3862943611198906,
    2.0794415416798357,
    3.784189633918261,
    1.3862943611198906,
    2.1972245773362196,
    2.302585092994046,
    3.828641396489095,
    2.8903717578961645,
    2.639057329615259,
    2.1972245773362196,
    3.1354942159291497,
    3.4011973816621555,
    3.713572066704308,
    3.4339872044851463,
    3.912023005428146,
    1.791759469228055,
    3.2188758248682006,
    3.367295829986474,
    3.5553480614894135,
    0.0,
]


def golden_cube() -> Cube:
    """A small cube with a column of every kind a table stores, a normalization and metadata."""
    rng = np.random.default_rng(2024)
    counts = rng.integers(0, 50, size=(2, 3, 5)).astype(np.int32)
    logged = np.array(_LOGGED).reshape(counts.shape)  # log1p(counts), -0.0 first
    samples = pd.DataFrame(
        {
            "sample_id": ["s1", "s2", "é3"],
            "donor": pd.Categorical(["d1", "d2", "d1"]),
            "age": [31, 45, 52],
            "weight": [61.5, np.nan, 80.25],
            "treated": [True, False, True],
            "batch": pd.array([1, None, 3], dtype="Int64"),
            "note": pd.array(["a", None, "ü"], dtype="string"),
        }
    )
    groups = pd.DataFrame({"group_id": ["B cells", "T cells"], "lineage": ["lymphoid"] * 2})
    features = pd.DataFrame(
        {"feature_id": [f"ENSG{i:05d}" for i in range(5)], "symbol": list("ABCDE")}
    )
    cells = rng.integers(1, 9, size=(2, 3))
    factors = rng.uniform(0.5, 2.0, size=(2, 3))
    return Cube(
        {"counts": counts, "logged": logged},
        samples=samples,
        groups=groups,
        features=features,
        cells=cells,
        normalization=Normalization("size_factors", factors),
        metadata={"study": "golden", "nested": {"n": 1, "x": [1.5, "two"]}},
    )


def main() -> None:
    suffix = sys.argv[1] if len(sys.argv) > 1 else ""
    target = Path(__file__).parent / f"format-{cubes.FORMAT_VERSION}{suffix}.cube.zarr"
    write_cube(golden_cube(), target, overwrite=True)
    print(target.name, read_cube(target).fingerprint, file=sys.stdout)


if __name__ == "__main__":
    main()
