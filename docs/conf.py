"""Sphinx configuration of the cytepool documentation.

Build it with ``sphinx-build -W -b html docs docs/_build/html`` (the docs extra installs what it
needs). Notebooks in ``notebooks/`` are the tutorials; they are stored with their outputs
(``scripts/run-notebooks.py`` runs them in place), which the build shows as they are; pass
``-D nb_execution_mode=force`` to run them again (tests/test_notebooks.py executes them). Links
to the other projects' documentation (intersphinx) are fetched when the network is there, and
fall back to small inventories made offline otherwise, so the build never depends on the
network; ``CYTEPOOL_DOCS_OFFLINE=1`` skips the fetch.
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

from offline_inventories import intersphinx_mapping_with_fallbacks  # noqa: E402

import cytepool  # noqa: E402

project = "cytepool"
author = "cytepool developers"
copyright = "cytepool developers"
release = cytepool.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "numpydoc",
    "myst_nb",
    "cytepool_crosslinks",
]

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
root_doc = "index"

# --- API reference -----------------------------------------------------------------------------
autosummary_generate = False  # the API pages list their names and document them on the page
autodoc_typehints = "none"  # numpydoc docstrings carry the types
autodoc_member_order = "bysource"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# Types in Parameters/Returns link to their docs when numpydoc knows them; other words stay text.
numpydoc_xref_param_type = True
numpydoc_xref_ignore = "all"
numpydoc_xref_aliases = {
    "ndarray": "numpy.ndarray",
    "numpy.ndarray": "numpy.ndarray",
    "dtype": "numpy.dtype",
    "Path": "pathlib.Path",
    "PathLike": "os.PathLike",
    "Mapping": "collections.abc.Mapping",
    "Iterable": "collections.abc.Iterable",
    "DataFrame": "pandas.DataFrame",
    "pandas.DataFrame": "pandas.DataFrame",
    "polars.DataFrame": "polars.DataFrame",
    "AnnData": "anndata.AnnData",
    "anndata.AnnData": "anndata.AnnData",
    "MuData": "mudata.MuData",
    "mudata.MuData": "mudata.MuData",
    "Cube": "cytepool.Cube",
    "cytepool.Cube": "cytepool.Cube",
    "Normalization": "cytepool.Normalization",
    "Provenance": "cytepool.Provenance",
    "ZarrArray": "cytepool.io.zarr.ZarrArray",
}

# --- Markdown and notebooks (MyST-NB) ------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # stored with their outputs: scripts/run-notebooks.py
nb_execution_timeout = 120
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

# --- Links to other projects ----------------------------------------------------------------------
intersphinx_mapping = intersphinx_mapping_with_fallbacks(
    offline=os.environ.get("CYTEPOOL_DOCS_OFFLINE", "") not in ("", "0"),
)
intersphinx_timeout = 10

# --- HTML ---------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"cytepool {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_static_path: list[str] = []

# --- "Used in" / "Explained in" links (docs/_ext/cytepool_crosslinks.py) ------------------------
cytepool_crosslinks_modules = [
    "cytepool",
    "cytepool.io",
    "cytepool.io.zarr",
    "cytepool.io.anndata",
    "cytepool.errors",
]
cytepool_crosslinks_tutorials = [  # in the order of the index
    "tutorials/export-from-another-tool",
    "tutorials/differential-expression",
    "tutorials/bulk-rna-seq",
    "tutorials/round-trip-scanpy",
]
cytepool_crosslinks_explanations = ["cube", "cube-files", "tables", "dask", "performance"]
