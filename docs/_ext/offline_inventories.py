"""Intersphinx mappings that work without the network.

Each project is looked up first at its documentation site and then in a small inventory written
here, at build time, for the names cytepool's pages and docstrings refer to. Sphinx reports only
the first failure as information when the second location works, so a build without the network
(as in CI) links the names below and gives no warning. Online builds get the projects' full
inventories.
"""

import hashlib
import tempfile
import zlib
from pathlib import Path

#: Documentation root of each project, and the names cytepool refers to (name, role, page).
#: A page ending in "#$" points at the name's own anchor, as in Sphinx inventories.
PROJECTS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "python": (
        "https://docs.python.org/3/",
        [
            ("pathlib.Path", "py:class", "library/pathlib.html#$"),
            ("os.PathLike", "py:class", "library/os.html#$"),
            ("collections.abc.Mapping", "py:class", "library/collections.abc.html#$"),
            ("collections.abc.Iterable", "py:class", "library/collections.abc.html#$"),
            *(
                (name, "py:exception", "library/exceptions.html#$")
                for name in (
                    "Exception",
                    "ValueError",
                    "TypeError",
                    "KeyError",
                    "IndexError",
                    "RuntimeError",
                    "OverflowError",
                    "FileNotFoundError",
                    "FileExistsError",
                    "ImportError",
                )
            ),
        ],
    ),
    "numpy": (
        "https://numpy.org/doc/stable/",
        [
            ("numpy.ndarray", "py:class", "reference/generated/numpy.ndarray.html#$"),
            ("numpy.dtype", "py:class", "reference/generated/numpy.dtype.html#$"),
            ("numpy.asarray", "py:function", "reference/generated/numpy.asarray.html#$"),
            ("numpy.ix_", "py:function", "reference/generated/numpy.ix_.html#$"),
            ("numpy.dtypes.StringDType", "py:class", "reference/routines.dtypes.html#$"),
            ("numpy.datetime64", "py:class", "reference/arrays.scalars.html#$"),
            ("numpy.timedelta64", "py:class", "reference/arrays.scalars.html#$"),
            ("numpy.random.default_rng", "py:function", "reference/random/generator.html#$"),
        ],
    ),
    "pandas": (
        "https://pandas.pydata.org/docs/",
        [
            (name, kind, f"reference/api/{name}.html#$")
            for name, kind in (
                ("pandas.DataFrame", "py:class"),
                ("pandas.Series", "py:class"),
                ("pandas.Index", "py:class"),
                ("pandas.Categorical", "py:class"),
                ("pandas.StringDtype", "py:class"),
                ("pandas.DataFrame.groupby", "py:method"),
            )
        ],
    ),
    "polars": (
        "https://docs.pola.rs/api/python/stable/",
        [
            ("polars.DataFrame", "py:class", "reference/dataframe/index.html#$"),
            ("polars.Series", "py:class", "reference/series/index.html#$"),
        ],
    ),
    "anndata": (
        "https://anndata.readthedocs.io/en/stable/",
        [
            (name, kind, f"generated/{name}.html#$")
            for name, kind in (
                ("anndata.AnnData", "py:class"),
                ("anndata.io.read_elem", "py:function"),
                ("anndata.io.write_elem", "py:function"),
                ("anndata.io.read_h5ad", "py:function"),
                ("anndata.io.read_zarr", "py:function"),
            )
        ],
    ),
    "scanpy": (
        "https://scanpy.readthedocs.io/en/stable/",
        [
            (name, "py:function", f"generated/{name}.html#$")
            for name in (
                "scanpy.get.aggregate",
                "scanpy.pp.normalize_total",
                "scanpy.pp.log1p",
                "scanpy.tl.pca",
                "scanpy.pl.pca",
            )
        ],
    ),
    "mudata": (
        "https://mudata.readthedocs.io/en/latest/",
        [
            ("mudata.MuData", "py:class", "api/generated/mudata.MuData.html#$"),
            ("mudata.read_h5mu", "py:function", "api/generated/mudata.read_h5mu.html#$"),
        ],
    ),
    "zarr": (
        "https://zarr.readthedocs.io/en/stable/",
        [
            ("zarr.Array", "py:class", "api/zarr/array/#$"),
            ("zarr.open_array", "py:function", "api/zarr/functions/open_array/#$"),
            ("zarr.open_group", "py:function", "api/zarr/functions/open_group/#$"),
        ],
    ),
}


def _inventory_bytes(project: str, entries: list[tuple[str, str, str]]) -> bytes:
    """Encode entries as a Sphinx inventory, version 2."""
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        "# Version: \n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    body = "".join(f"{name} {role} 1 {page} -\n" for name, role, page in entries)
    return header.encode() + zlib.compress(body.encode())


def write_inventories(directory: Path) -> dict[str, Path]:
    """Write one inventory per project into directory and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for project, (_, entries) in PROJECTS.items():
        path = directory / f"{project}.inv"
        data = _inventory_bytes(project, entries)
        if not path.is_file() or path.read_bytes() != data:
            temporary = path.with_suffix(f".{hashlib.sha256(data).hexdigest()[:8]}.tmp")
            temporary.write_bytes(data)
            temporary.replace(path)
        paths[project] = path
    return paths


def intersphinx_mapping_with_fallbacks(*, offline: bool) -> dict[str, tuple[str, tuple]]:
    """The intersphinx mapping: each site's inventory, then the local one (only it if offline)."""
    digest = hashlib.sha256(repr(sorted(PROJECTS.items())).encode()).hexdigest()[:12]
    paths = write_inventories(Path(tempfile.gettempdir()) / f"cytepool-docs-inventories-{digest}")
    mapping = {}
    for project, (url, _) in PROJECTS.items():
        local = str(paths[project])
        mapping[project] = (url, (local,) if offline else (None, local))
    return mapping
