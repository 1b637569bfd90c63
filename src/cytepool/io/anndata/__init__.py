"""Convert between cubes and AnnData / MuData, the formats scanpy, decoupler and PyDESeq2 use.

Cells to cubes: :func:`from_anndata` pools the cells of an AnnData (in memory, backed, lazily
opened with dask, or a path to an ``.h5ad`` file or AnnData ``.zarr`` store) with
:func:`cytepool.from_cells`, reading on-disk matrices in row blocks so that memory stays
bounded by one block plus the cube; :func:`from_mudata_cells` does the same for every
modality of a MuData. Both take a list of paths too: the files are pooled in worker processes
(or on a dask client) and their cubes added up, features aligned by id.

Cubes to pseudobulk AnnData and back: :func:`to_anndata` writes one observation per profile
(sample x group) and :func:`from_pseudobulk` reads ours, scanpy's ``sc.get.aggregate``
output and decoupler's pseudobulk output. :func:`to_mudata` / :func:`from_mudata` use one
modality per group.

What ``to_anndata`` and ``to_mudata`` store under ``uns["cytepool"]`` (only types that
``write_h5ad`` and ``write_zarr`` accept):

- ``format`` (``"cytepool.pseudobulk"``) and ``version`` (1);
- ``layer``: the name of the layer held in ``X``; ``layers``: every layer name, in order;
- ``dtypes``: JSON text ``{"layers": {name: dtype}, "samples" | "groups" | "features":
  {column: pandas dtype}}``, so that the reader restores what writing changed (anndata
  turns repeated strings into categoricals; columns anndata cannot write, such as
  nullable strings or datetimes, are stored as strings or categoricals; pandas 3's ``str``
  columns, which anndata 0.13 writes, are kept). Datetimes and durations go as ISO texts,
  parsed back straight into their unit; a zone is named as tables name it (``Europe/Berlin``,
  ``+05:30``, whatever library made it); a categorical whose categories are times or
  pyarrow-backed keeps its codes, its categories written so and recorded as
  ``category[<their dtype>]``; pyarrow-backed columns (``int64[pyarrow]``...) go in the
  numpy or nullable pandas type holding their values (pyarrow strings are recorded as
  ``utf8[pyarrow]``, since ``string[pyarrow]`` names pandas' ``StringDtype``); nullable
  floats (pandas' ``Float32`` / ``Float64``, pyarrow's) go as floats with NaN for missing
  values, and ``"nan": {table: {column: [ids]}}`` lists the rows of those holding NaN that is
  not missing (only the columns holding some), which get NaN back, the others ``<NA>``.
  The tables of a cube of polars or pyarrow tables come back in the pandas types that
  ``read_cube`` gives them;
- ``samples``, ``groups``: the whole sample and group tables (samples whose profiles are
  all empty are in no observation, yet belong to the cube);
- ``cells``: the cell numbers ``(n_groups, n_samples)``;
- ``normalization``: ``{"method", "factors"}`` when the cube has one;
- ``metadata``, ``provenance``: JSON text;
- ``modalities`` (MuData only): the modality name of each group (its id, or a name that
  ``.h5mu`` and ``.zarr`` files can hold: see :func:`to_mudata`);
- ``features`` (MuData only, of a cube without groups): the feature table, which no modality
  holds then.

The anndata and mudata packages (the ``anndata`` extra) are imported only when a function
needs them.

The package keeps each part in its own module: ``_cells`` (pooling cells), ``_pseudobulk``
(pseudobulk AnnData / MuData to and from cubes), ``_record`` (the ``uns`` record),
``_modality_names`` (the MuData modality name of each group), ``_covariates`` (labels,
covariates, tables), ``_readers`` (matrices, paths, legacy files) and ``_many`` (many files
into one cube).
"""

from __future__ import annotations

from cytepool.io.anndata._cells import from_anndata, from_mudata_cells
from cytepool.io.anndata._pseudobulk import from_mudata, from_pseudobulk, to_anndata, to_mudata
from cytepool.io.anndata._record import RECORD_KEY

__all__ = [
    "RECORD_KEY",
    "from_anndata",
    "from_mudata",
    "from_mudata_cells",
    "from_pseudobulk",
    "to_anndata",
    "to_mudata",
]
