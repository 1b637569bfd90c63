"""`import cytepool` needs only the core dependencies; optional libraries load lazily."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# What a fresh process may import for each start-up path (issue 16, item 4): none of these
# heavy libraries unless the path needs it. Checked on sys.modules, not by timing.
HEAVY = ("numba", "llvmlite", "pandas", "pyarrow", "anndata", "scipy", "polars", "narwhals")
LIGHT_START = {
    "import cytepool": ("import cytepool", ()),
    "cytepool --help": ("from cytepool.cli import main; main(['--help'])", ()),
    # the help of --level names the default levels of cytepool.io.zarr, which needs numpy
    "cytepool pool --help": (
        "from cytepool.cli import main; main(['pool', '--help'])",
        ("numpy",),
    ),
    "cytepool --version": (
        "from cytepool.cli import main; main(['--version'])",
        ("importlib.metadata",),
    ),
}


def loaded_after(code: str) -> tuple[set[str], str]:
    """The heavy modules (and numpy, importlib.metadata) a fresh process loaded running code."""
    probe = (
        "import sys\n"
        f"{code}\n"
        f"names = {(*HEAVY, 'numpy', 'importlib.metadata')!r}\n"
        "print('loaded:' + ','.join(sorted(n for n in names if n in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    last = done.stdout.rstrip("\n").splitlines()[-1].removeprefix("loaded:")
    return {name for name in last.split(",") if name}, done.stdout


@pytest.mark.parametrize("case", list(LIGHT_START))
def test_start_up_imports_no_heavy_library(case: str) -> None:
    code, allowed = LIGHT_START[case]
    loaded, _ = loaded_after(code)
    assert loaded <= {*allowed}, f"{case} imported {sorted(loaded)}"


def test_first_attribute_imports_the_name() -> None:
    loaded, out = loaded_after("import cytepool\nprint(cytepool.Cube.__name__)")
    assert "Cube" in out
    assert "numpy" in loaded
    assert not loaded & {"numba", "pandas", "pyarrow", "anndata", "scipy"}
    loaded, out = loaded_after("import cytepool\nprint(cytepool.__version__)")
    assert loaded == {"importlib.metadata"}


def test_unknown_attribute_is_an_attribute_error() -> None:
    import cytepool
    import cytepool.io

    with pytest.raises(AttributeError, match="module 'cytepool' has no attribute 'cube_of'"):
        _ = cytepool.cube_of  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match=r"module 'cytepool\.io' has no attribute 'read'"):
        _ = cytepool.io.read  # type: ignore[attr-defined]
    assert {"Cube", "from_cells", "__version__"} <= set(dir(cytepool))
    assert {"read_cube", "anndata"} <= set(dir(cytepool.io))


SMALL_CUBES = {
    "pooled": (
        "cube = cytepool.from_cells(np.eye(3, dtype=np.int32), sample_labels=['a', 'b', 'a'],"
        " group_labels=['T', 'T', 'B'])\n"
    ),
    "covariates": (
        "import pandas as pd\n"
        "samples = pd.DataFrame({'donor': ['d1', None], 'age': [1.5, float('nan')],"
        " 'n': [1, 2], 'ok': [True, False]}, index=pd.Index(['a', 'b'], name='sample_id'))\n"
        "groups = pd.DataFrame({'kind': ['x', 'y']}, index=pd.Index(['B', 'T'], name='group_id'))\n"
        "features = pd.DataFrame({'symbol': ['A', 'é', 'C']},"
        " index=pd.Index(['f1', 'f2', 'f3'], name='feature_id'))\n"
        "cube = cytepool.Cube({'counts': np.ones((2, 2, 3), dtype=np.int64)}, samples=samples,"
        " groups=groups, features=features, cells=np.ones((2, 2), dtype=np.int64))\n"
    ),
}


@pytest.mark.parametrize("case", list(SMALL_CUBES))
def test_info_of_a_small_cube_imports_no_table_library(tmp_path: Any, case: str) -> None:
    path = str(tmp_path / "small.cube.zarr")
    code = (
        "import numpy as np, cytepool\n"
        "from cytepool.io import write_cube\n"
        f"{SMALL_CUBES[case]}write_cube(cube, {path!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    loaded, out = loaded_after(f"from cytepool.cli import main; main(['info', {path!r}])")
    assert "3 features" in out
    if case == "covariates":
        assert "donor (String), age (Float64), n (Int64), ok (Boolean)" in out
        assert "symbol (String)" in out
    # the tables are verified from their stored values; no frame is built for info (so no
    # narwhals); asyncio serves remote stores only
    unwanted = {"numba", "llvmlite", "anndata", "scipy", "polars", "pandas", "pyarrow"}
    unwanted |= {"narwhals", "asyncio"}
    assert not loaded & unwanted, sorted(loaded)


# (cells, genes, density): a small input, and one above SMALL_VALUES (1.2 million values)
FIRST_INPUTS = {"small": (300, 40, 0.2), "larger": (4000, 300, 1.0)}


@pytest.mark.parametrize("size", list(FIRST_INPUTS))
def test_first_from_cells_does_not_start_numba(size: str) -> None:
    """Until numba's kernels are loaded, inputs of up to FIRST_VALUES values pool with numpy,
    whole numbers and then others (the sums turn float64 at the first fraction)."""
    n_cells, n_genes, density = FIRST_INPUTS[size]
    code = (
        "import numpy as np, scipy.sparse as sp, cytepool\n"
        f"x = sp.random({n_cells}, {n_genes}, density={density}, format='csr', dtype=np.float32,"
        " random_state=0)\n"
        "x.data[:] = 2\n"
        "for layers in (('counts',), ('counts', 'detected', 'squares')):\n"
        "    for counts in (x, x.tocsc(), x.toarray()):\n"
        f"        cube = cytepool.from_cells(counts, sample_labels=np.arange({n_cells}) % 3,\n"
        f"            group_labels=np.arange({n_cells}) % 2, layers=layers)\n"
        "x.data[-1] = 0.5\n"
        f"half = cytepool.from_cells(x, sample_labels=np.arange({n_cells}) % 3,\n"
        f"                           group_labels=np.arange({n_cells}) % 2)\n"
        "print('sums', int(cube.to_numpy('counts').sum()), int(x.sum() + 1.5))\n"
        "print('half', half.to_numpy('counts').dtype, float(half.to_numpy('counts').sum()))\n"
    )
    loaded, out = loaded_after(code)
    _, pooled, total = next(line for line in out.splitlines() if line.startswith("sums")).split()
    assert pooled == total
    assert f"half float64 {float(total) - 1.5}" in out
    # pandas builds the id-only tables (their documented backend)
    assert not loaded & {"numba", "llvmlite", "anndata", "polars"}, sorted(loaded)


@pytest.mark.parametrize("layout", ["csr", "dense"])
def test_first_pooling_of_a_small_file_does_not_start_numba(tmp_path: Any, layout: str) -> None:
    """A file of at most FIRST_VALUES stored values, read in blocks above SMALL_VALUES, pools
    with numpy while numba's kernels are not loaded, as an in-memory input does."""
    ad = pytest.importorskip("anndata")
    import numpy as np
    import pandas as pd
    import scipy.sparse as sp

    n_cells, n_genes, _ = FIRST_INPUTS["larger"]  # 1.2 million values: above SMALL_VALUES
    x = np.full((n_cells, n_genes), 2, dtype=np.float32)
    obs = pd.DataFrame(
        {"sample": [f"s{i % 3}" for i in range(n_cells)], "cell_type": ["T", "B"] * (n_cells // 2)},
        index=[f"c{i}" for i in range(n_cells)],
    )
    path = tmp_path / "cells.h5ad"
    ad.AnnData(sp.csr_matrix(x) if layout == "csr" else x, obs=obs).write_h5ad(path)
    assert pooled_alone(path) == 2 * n_cells * n_genes  # and numba not started


def test_a_file_of_many_names_does_not_start_numba_to_check_its_heap(tmp_path: Any) -> None:
    """The names of 30,000 cells and 10,000 genes (1.3 MB of heap objects, past the 1 MiB
    the heap was once walked in Python within) are checked without starting numba, for a
    matrix numpy pools (see _hdf5_heap.walker)."""
    ad = pytest.importorskip("anndata")
    import numpy as np
    import pandas as pd
    import scipy.sparse as sp

    from cytepool.io.anndata._hdf5_heap import PYTHON_WALK_BYTES

    n_cells, n_genes = 30_000, 10_000
    x = sp.csr_matrix(
        (np.ones(n_cells, np.float32), (np.arange(n_cells), np.arange(n_cells) % n_genes)),
        shape=(n_cells, n_genes),
    )
    obs = pd.DataFrame(
        {"sample": [f"s{i % 3}" for i in range(n_cells)], "cell_type": ["T", "B"] * (n_cells // 2)},
        index=[f"cell-{i:08d}" for i in range(n_cells)],
    )
    var = pd.DataFrame(index=[f"ENSG{j:011d}" for j in range(n_genes)])
    path = tmp_path / "cells.h5ad"
    ad.AnnData(x, obs=obs, var=var).write_h5ad(path)
    data = path.read_bytes()
    heap = sum(
        int.from_bytes(data[at.start() + 8 : at.start() + 16], "little")
        for at in re.finditer(b"GCOL", data)
    )
    assert 1 << 20 < heap <= PYTHON_WALK_BYTES
    assert pooled_alone(path) == n_cells  # and numba not started


def pooled_alone(path: Path) -> int:
    """The sum of the counts of the file at ``path`` pooled in a fresh process, checked to
    have imported neither numba nor anndata."""
    code = (
        "from cytepool.io.anndata import from_anndata\n"
        f"cube = from_anndata({str(path)!r}, sample_key='sample', group_key='cell_type')\n"
        "print('sums', int(cube.to_numpy('counts').sum()))\n"
    )
    loaded, out = loaded_after(code)
    assert not loaded & {"numba", "llvmlite", "anndata"}, sorted(loaded)
    return int(re.findall(r"sums (\d+)", out)[-1])


def test_local_reads_never_import_the_remote_module(tmp_path: Any) -> None:
    """The store seam chooses a remote store for URLs only (issue 22, item 11): reading a cube,
    a table and an array from local paths loads neither the remote module nor asyncio."""
    path = str(tmp_path / "small.cube.zarr")
    code = (
        "import numpy as np, cytepool\n"
        "from cytepool.io import write_cube\n"
        f"{SMALL_CUBES['pooled']}write_cube(cube, {path!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    probe = (
        "import sys\n"
        "from cytepool.io import read_cube, read_table\n"
        "from cytepool.io.zarr import open_array, read_group_attributes\n"
        f"cube = read_cube({path!r})\n"
        "cube.to_numpy('counts'), cube.samples\n"
        f"read_table({path!r} + '/samples'), open_array({path!r} + '/cells')[...]\n"
        f"read_group_attributes({path!r})\n"
        "print(sorted(m for m in ('cytepool.io.zarr.remote', 'asyncio', 'obstore')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def run_as_program(args: list[str], entry: str) -> str:
    """The last line a fresh process prints after running the command line with ``args``
    through ``cytepool.cli.run`` (as the program does) or ``cytepool.cli.main`` (as Python
    code does): its status, and whether dask.array and anndata were imported."""
    call = "main(sys.argv[1:])" if entry == "main" else "run()"
    code = (
        "import sys\n"
        "from cytepool.cli import main, run\n"
        f"sys.argv = ['cytepool', *{args!r}]\n"
        "try:\n"
        f"    status = {call}\n"
        "except SystemExit as stop:\n"
        "    status = stop.code\n"
        "print('status', status, 'dask.array' in sys.modules, 'anndata' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[-1]


def test_the_program_pools_an_h5ad_without_importing_dask(tmp_path: Any) -> None:
    # anndata imports dask.array whenever dask is installed; no command uses it
    pytest.importorskip("dask")
    ad = pytest.importorskip("anndata")
    import numpy as np
    import pandas as pd

    obs = pd.DataFrame({"donor": ["a", "b"] * 3, "cell_type": ["T"] * 6})
    obs.index = obs.index.astype(str)
    ad.AnnData(np.ones((6, 3), dtype=np.float32), obs=obs).write_h5ad(tmp_path / "c.h5ad")
    args = [str(tmp_path / "c.h5ad"), "--sample-key", "donor", "--group-key", "cell_type"]
    # obs and var are read without anndata, so neither it nor dask is imported, either way
    for entry in ("run", "main"):
        out_path = str(tmp_path / f"{entry}.cube.zarr")
        assert run_as_program(["pool", *args, out_path, "--no-progress"], entry) == (
            "status 0 False False"
        )
    # a file of anndata < 0.7 is read by anndata, which the program lets not import dask;
    # main, called from Python, leaves the calling process as it was
    legacy = Path(__file__).parent / "data" / "anndata-corpus" / "anndata-0.6.22.post1.h5ad"
    args = [str(legacy), "--sample-key", "sample", "--group-key", "cell_type", "--no-progress"]
    out = run_as_program(["pool", *args, str(tmp_path / "legacy.cube.zarr")], "run")
    assert out == "status 0 False True"
    out = run_as_program(["pool", *args, str(tmp_path / "again.cube.zarr")], "main")
    assert out == "status 0 True True"
