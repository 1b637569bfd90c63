"""Convert between cubes and AnnData / MuData, the formats scanpy, decoupler and PyDESeq2 use.

Cells to cubes: :func:`from_anndata` pools the cells of an AnnData (in memory, backed, lazily
opened with dask, or a path to an ``.h5ad`` file or AnnData ``.zarr`` store) with
:func:`cytepool.from_cells`, reading on-disk matrices in row blocks so that memory stays
bounded by one block plus the cube; :func:`from_mudata_cells` does the same for every
modality of a MuData.

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
  columns, which anndata 0.13 writes, are kept);
- ``samples``, ``groups``: the whole sample and group tables (samples whose profiles are
  all empty are in no observation, yet belong to the cube);
- ``cells``: the cell numbers ``(n_groups, n_samples)``;
- ``normalization``: ``{"method", "factors"}`` when the cube has one;
- ``metadata``, ``provenance``: JSON text;
- ``modalities`` (MuData only): the modality name of each group;
- ``features`` (MuData only, of a cube without groups): the feature table, which no modality
  holds then.

The anndata and mudata packages (the ``anndata`` extra) are imported only when a function
needs them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cytepool import _progress, _words
from cytepool._assemble import from_parts, provenance_record, with_provenance
from cytepool._labels import factorize
from cytepool.errors import InputError, InputTypeError, UnknownIdError

if TYPE_CHECKING:
    import anndata
    import mudata
    import pandas as pd

    from cytepool.cube import Cube

__all__ = [
    "RECORD_KEY",
    "from_anndata",
    "from_mudata",
    "from_mudata_cells",
    "from_pseudobulk",
    "to_anndata",
    "to_mudata",
]

RECORD_KEY = "cytepool"
"""The ``uns`` key under which :func:`to_anndata` and :func:`to_mudata` store the record."""

_RECORD_FORMAT = "cytepool.pseudobulk"
_RECORD_VERSION = 1
_ID_COLUMNS = {"samples": "sample_id", "groups": "group_id", "features": "feature_id"}
_CELLS_COLUMNS = ("n_cells", "psbulk_cells")
_INTEGER_DTYPES = frozenset({"int32", "int64", "uint32", "uint64"})
_BLOCK_NONZEROS = 1 << 24  # nonzeros per row block read from a sparse matrix on disk
_BLOCK_BYTES = 1 << 27  # bytes per row block read from a dense matrix on disk

Covariates = Sequence[str] | None

# ---------------------------------------------------------------------------------------------
# Cells to cubes
# ---------------------------------------------------------------------------------------------


def from_anndata(
    adata: anndata.AnnData | str | os.PathLike[str],
    *,
    sample_key: str,
    group_key: str,
    layer: str | None = None,
    use_raw: bool = False,
    samples: Covariates = None,
    groups: Covariates = None,
    features: Covariates = None,
    layers: Sequence[str] = ("counts",),
    allow_float: bool = False,
    progress: bool | None = None,
) -> Cube:
    """Pool the cells of an AnnData into a cube, one profile per sample and group.

    The counts are read once, pooled with :func:`cytepool.from_cells`. A matrix that
    lives on disk (``.h5ad`` opened with ``backed="r"``, a path, or a dask array from a
    lazily opened AnnData) is read in row blocks, so memory stays bounded by one block plus
    the cube whatever the number of cells. The input is never modified.

    Parameters
    ----------
    adata
        The cells: an AnnData, or the path of an ``.h5ad`` file or AnnData ``.zarr`` store
        (Zarr v2 or v3, sharded or not), which is opened read-only (only ``obs``, ``var`` and
        the matrix are read). A file in the layout of anndata < 0.7 (``obs`` a compound
        dataset, ``raw.X``) is opened by anndata's own backed reader, which also reads its
        ``uns``, ``obsm`` and layers into memory; its ``X`` and ``raw.X`` are still read in row
        blocks.
    sample_key, group_key
        The ``obs`` columns that hold each cell's sample and group (cell type). Ids are the
        ``str`` values of the labels, sorted, by the rule of :func:`cytepool.from_cells`
        (labels and their texts must match one to one: ``1`` and ``1.0`` are an error).
    layer
        The layer that holds the counts; None for ``X``.
    use_raw
        Read ``raw.X`` and take the features from ``raw.var``.
    samples
        The ``obs`` columns kept as sample covariates. None keeps every column that is
        constant within each sample; a named column that varies within a sample is an
        error.
    groups
        The ``obs`` columns kept as group covariates. None keeps every column that is
        constant within each group and is not a sample covariate.
    features
        The ``var`` (or ``raw.var``) columns kept in the feature table; None keeps all.
    layers
        The layers to make, as in :func:`cytepool.from_cells`: ``"counts"`` and/or
        ``"detected"`` (the number of cells with a nonzero value).
    allow_float
        Values that are not whole numbers are meant: pool them without a
        :class:`~cytepool.errors.NotCountsWarning` (see :func:`cytepool.from_cells`).
    progress
        Show a progress bar while an on-disk matrix is read: None shows it on stderr when
        that is a terminal, and in the notebook when run in Jupyter.

    Returns
    -------
    Cube
        With the layer ``"counts"`` (integer when every value is a whole number, else
        float64) and the cell numbers of every profile. Its last provenance record,
        ``"from_anndata"``, holds the obs columns kept as covariates and those dropped, with
        the reason (see "Cube files and provenance records").

    Warns
    -----
    NotCountsWarning
        When ``"counts"`` is pooled from values that are not whole numbers (log-normalized
        data, say) and ``allow_float`` is False; the message names the matrix, one such
        value with its cell and feature, and how to choose the raw counts (``layer=``,
        ``use_raw=True``).

    Raises
    ------
    KeyError
        If a key, layer or column does not exist.
    ValueError
        If a label is missing, labels do not match their texts one to one, a named covariate
        varies within a sample or group, the values are negative or not finite, var names
        are not unique, or ``layer`` and ``use_raw`` are both given.

    Examples
    --------
    >>> import anndata as ad
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool.io.anndata import from_anndata
    >>> obs = pd.DataFrame(
    ...     {"donor": ["d1", "d1", "d2"], "age": [30, 30, 41], "cell_type": ["B", "T", "B"]},
    ...     index=["c1", "c2", "c3"],
    ... )
    >>> adata = ad.AnnData(np.array([[1, 0], [2, 3], [0, 4]], dtype=np.float32), obs=obs)
    >>> cube = from_anndata(adata, sample_key="donor", group_key="cell_type")
    >>> cube.profiles("B").tolist()
    [[1, 0], [0, 4]]
    >>> cube.samples
              age
    sample_id
    d1         30
    d2         41
    """
    if isinstance(adata, str | os.PathLike):
        with _open_cells(adata, layer=layer, use_raw=use_raw) as (matrix, obs, var, source):
            return _pool(matrix, obs, var, source, **_keys(locals()))
    matrix, var, source = _matrix_of(adata, layer=layer, use_raw=use_raw)
    return _pool(matrix, _frame(adata.obs), _frame(var), source, **_keys(locals()))


def _keys(arguments: Mapping[str, Any]) -> dict[str, Any]:
    names = ("sample_key", "group_key", "samples", "groups", "features", "layers")
    return {name: arguments[name] for name in (*names, "allow_float", "progress")}


@dataclass(frozen=True)
class _Source:
    """How messages name the cells being pooled: ``adata.raw.X``, or ``X of cells.h5ad``."""

    owner: str  # "adata", "mdata.mod['rna']", or a path as the user gave it
    matrix_key: str  # "X", "raw.X", "layers['counts']" (or "layer 'counts'" for a path)
    path: bool = False
    modality: bool = False  # of a MuData, whose X is pooled: no other matrix can be chosen

    def part(self, name: str) -> str:
        return f"{name} of {self.owner}" if self.path else f"{self.owner}.{name}"

    @property
    def matrix(self) -> str:
        return self.part(self.matrix_key)

    @property
    def obs(self) -> str:
        return self.part("obs")

    @property
    def var(self) -> str:
        return self.part("raw.var" if self.matrix_key == "raw.X" else "var")

    def pick_counts(self) -> str:
        """How to pool counts instead of this matrix, in the caller's words."""
        if self.modality:
            return "put the raw counts in the X of each modality"
        layer, raw = _words.option("layer"), _words.option("use_raw")
        return f"choose the matrix that holds them with {layer} or {raw}"


def from_mudata_cells(
    mdata: mudata.MuData | str | os.PathLike[str],
    *,
    sample_key: str,
    group_key: str,
    samples: Covariates = None,
    groups: Covariates = None,
    layers: Sequence[str] = ("counts",),
    allow_float: bool = False,
    progress: bool | None = None,
) -> dict[str, Cube]:
    """Pool each modality of a cell-level MuData (e.g. RNA + protein) into its own cube.

    The cubes share their samples and groups: the same ids, in the same order, with the
    same covariates, so that a profile of one modality has its partner in every other (a
    sample or group absent from a modality gets empty profiles there).

    Parameters
    ----------
    mdata
        The cells: a MuData, or the path of an ``.h5mu`` file (or MuData ``.zarr`` store),
        which is opened read-only; each modality's ``X`` is then read in row blocks, as
        :func:`from_anndata` reads a path. Labels and covariates are read from each
        modality's ``obs``, or, for a key a modality lacks, from the global ``mdata.obs``.
    sample_key, group_key, samples, groups, layers, allow_float, progress
        As in :func:`from_anndata`.

    Returns
    -------
    dict of str to Cube
        One cube per modality, in modality order, each with the layer ``"counts"`` from the
        modality's ``X``.

    Warns
    -----
    NotCountsWarning
        As :func:`from_anndata`, naming the modality.

    Raises
    ------
    KeyError, ValueError
        As :func:`from_anndata`, naming the modality.

    Examples
    --------
    >>> import anndata as ad
    >>> import mudata as md
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool.io.anndata import from_mudata_cells
    >>> obs = pd.DataFrame({"donor": ["d1", "d2"], "cell_type": ["B", "B"]}, index=["c1", "c2"])
    >>> genes, proteins = pd.DataFrame(index=["CD19", "MS4A1"]), pd.DataFrame(index=["CD20"])
    >>> rna = ad.AnnData(np.array([[1, 2], [3, 4]]), obs=obs, var=genes)
    >>> prot = ad.AnnData(np.array([[5], [6]]), obs=obs, var=proteins)
    >>> mdata = md.MuData({"rna": rna, "prot": prot})
    >>> cubes = from_mudata_cells(mdata, sample_key="donor", group_key="cell_type")
    >>> {name: cube.shape for name, cube in cubes.items()}
    {'rna': (1, 2, 2), 'prot': (1, 2, 1)}
    """
    pool = functools.partial(
        _pool_modalities,
        sample_key=sample_key,
        group_key=group_key,
        samples=samples,
        groups=groups,
        layers=layers,
        allow_float=allow_float,
        progress=progress,
    )
    if isinstance(mdata, str | os.PathLike):
        with _open_modalities(mdata) as (everyone, modalities):
            return pool(everyone, modalities)
    modalities = {name: _in_memory(mod, name) for name, mod in mdata.mod.items()}
    return pool(mdata.obs, modalities)


def _in_memory(modality: anndata.AnnData, name: str) -> _Modality:
    matrix, var, source = _matrix_of(
        modality, layer=None, use_raw=False, owner=f"mdata.mod[{name!r}]"
    )
    return _Modality(matrix, modality.obs, var, replace(source, modality=True))


@dataclass(frozen=True)
class _Modality:
    """What pooling needs of a modality: its matrix (in memory or on disk), obs, var, names."""

    matrix: Any
    obs: pd.DataFrame
    var: pd.DataFrame
    source: _Source


def _pool_modalities(
    everyone: pd.DataFrame,
    modalities: Mapping[str, _Modality],
    *,
    sample_key: str,
    group_key: str,
    samples: Covariates,
    groups: Covariates,
    layers: Sequence[str],
    allow_float: bool,
    progress: bool | None,
) -> dict[str, Cube]:
    """One cube per modality, on the samples and groups of all; ``everyone`` is the global obs."""
    keys = (sample_key, group_key)
    observations = {
        name: _modality_obs(modality.obs, everyone, name, keys)
        for name, modality in modalities.items()
    }
    everything = _concat_frames(list(observations.values()))
    roles = ((sample_key, "sample_key"), (group_key, "group_key"))
    every_obs = "the obs of mdata's modalities"
    (sample_codes, sample_ids), (group_codes, group_ids) = (
        _labels(everything, key, role, every_obs) for key, role in roles
    )
    sample_table, group_table, covariates = _axis_tables(
        everything,
        keys,
        (sample_codes, group_codes),
        (sample_ids, group_ids),
        (samples, groups),
        every_obs,
    )
    cubes = {}
    for name, obs in observations.items():
        modality = modalities[name]
        source = modality.source
        labels = [_labels(obs, key, role, source.obs) for key, role in roles]
        tables = (sample_table.loc[labels[0][1]], group_table.loc[labels[1][1]])
        options = {"layers": layers, "allow_float": allow_float, "progress": progress}
        frames = (obs, modality.var)
        cube = _pool_with_tables(modality.matrix, frames, source, labels, tables, None, options)
        cube = _widened(cube, sample_table, group_table)
        parameters = {
            "modality": name,
            "sample_key": sample_key,
            "group_key": group_key,
            "covariates": covariates,
        }
        cubes[name] = _stamped(cube, cube.provenance, "from_mudata_cells", parameters)
    return cubes


def _widened(cube: Cube, samples: pd.DataFrame, groups: pd.DataFrame) -> Cube:
    """The cube on all of ``samples`` and ``groups``: the profiles it lacks are empty."""

    if cube.shape[:2] == (len(groups), len(samples)):
        return cube
    rows = np.ix_(
        groups.index.get_indexer(cube.groups.index), samples.index.get_indexer(cube.samples.index)
    )
    layers = {}
    for name, layer in cube.layers.items():
        layers[name] = np.zeros((len(groups), len(samples), cube.shape[2]), dtype=layer.dtype)
        layers[name][rows] = cube.to_numpy(name)
    cells = np.zeros((len(groups), len(samples)), dtype=np.int64)
    cells[rows] = cube.cells
    return from_parts(
        layers,
        samples=samples,
        groups=groups,
        features=cube.features,
        cells=cells,
        normalization=None,
        metadata=None,
        provenance=cube.provenance,
        digests=None,
    )


def _modality_obs(
    obs: pd.DataFrame, everyone: pd.DataFrame, name: str, keys: Sequence[str]
) -> pd.DataFrame:
    """The obs of one modality, with the keys it lacks taken from the global obs."""
    missing = [key for key in keys if key not in obs.columns]
    if not missing:
        return obs
    absent = [key for key in missing if key not in everyone.columns]
    if absent:
        msg = (
            f"obs column {absent[0]!r} is in neither the obs of modality {name!r} nor the "
            f"global mdata.obs"
        )
        raise UnknownIdError(msg)
    if not everyone.index.is_unique:
        msg = "mdata.obs_names are not unique: cannot take labels from the global obs"
        raise InputError(msg)
    obs = obs.copy()
    for key in missing:
        obs[key] = everyone[key].reindex(obs.index).to_numpy()
    return obs


def _pool(
    matrix: Any,
    obs: pd.DataFrame,
    var: pd.DataFrame,
    source: _Source,
    *,
    sample_key: str,
    group_key: str,
    samples: Covariates,
    groups: Covariates,
    features: Covariates,
    **options: Any,
) -> Cube:
    """Pool ``matrix`` by the labels in ``obs``; ``options``: layers, allow_float, progress."""
    labels = [
        _labels(obs, sample_key, "sample_key", source.obs),
        _labels(obs, group_key, "group_key", source.obs),
    ]
    *tables, covariates = _axis_tables(
        obs,
        (sample_key, group_key),
        (labels[0][0], labels[1][0]),
        (labels[0][1], labels[1][1]),
        (samples, groups),
        source.obs,
    )
    frames = (obs, var)
    cube = _pool_with_tables(
        matrix, frames, source, labels, (tables[0], tables[1]), features, options
    )
    parameters = {
        "source": source.matrix,
        "sample_key": sample_key,
        "group_key": group_key,
        "covariates": covariates,
    }
    return _stamped(cube, cube.provenance, "from_anndata", parameters)


def _pool_with_tables(
    matrix: Any,
    frames: tuple[pd.DataFrame, pd.DataFrame],
    source: _Source,
    labels: Sequence[tuple[np.ndarray, list[str]]],
    tables: tuple[pd.DataFrame, pd.DataFrame],
    features: Covariates,
    options: Mapping[str, Any],
) -> Cube:
    """Pool ``matrix`` (cells x features) by the (codes, ids) ``labels`` of its rows.

    ``frames`` are its obs and var, ``tables`` the sample and group tables, ``features`` the
    var columns to keep; ``options``: ``layers``, ``allow_float`` and ``progress``, as
    :func:`from_anndata` takes them.
    """
    import pandas as pd

    from cytepool.pooling import from_cells

    obs, var = frames
    feature_table = _feature_table(var, features, source.var)
    shape = tuple(matrix.shape)
    expected = (len(labels[0][0]), len(feature_table))
    if shape != expected:
        msg = f"{source.matrix} has shape {shape}, expected {expected} (cells x features)"
        raise InputError(msg)
    sample_labels, group_labels = (
        pd.Categorical.from_codes(
            table.index.get_indexer(pd.Index(ids, dtype=object))[codes], categories=table.index
        )
        for (codes, ids), table in zip(labels, tables, strict=True)
    )

    def pool(counts: Any, features: pd.DataFrame, allow_float: bool) -> Cube:
        return from_cells(
            counts,
            sample_labels=sample_labels,
            group_labels=group_labels,
            samples=tables[0],
            groups=tables[1],
            features=features,
            layers=options["layers"],
            allow_float=allow_float,
        )

    names = {"matrix": source.matrix, "pick": source.pick_counts(), "cells": obs.index}
    names["features"] = feature_table.index
    with _words.speaking(**names):
        if _is_sparse_dataset(matrix) and matrix.format == "csc":
            return _pool_columns(matrix, feature_table, pool, options)
        counts = _cell_rows(matrix, options["progress"])
        return pool(counts, feature_table, options["allow_float"])


def _pool_columns(
    matrix: Any,
    features: pd.DataFrame,
    pool: Callable[[Any, pd.DataFrame, bool], Cube],
    options: Mapping[str, Any],
) -> Cube:
    """Pool a CSC matrix on disk in blocks of columns, then join them along the features.

    Values that are not counts are warned about once, in the first block that holds one.
    """

    progress = _progress.Progress(
        matrix.shape[1], "pooling", "features", enabled=options["progress"]
    )
    parts: list[Cube] = []
    allow_float = options["allow_float"]
    try:
        for start, stop in _nonzero_bounds(matrix.group["indptr"], matrix.shape[1]):
            with _words.speaking(first_column=start):
                parts.append(pool(matrix[:, start:stop], features.iloc[start:stop], allow_float))
            allow_float = allow_float or _float_counts(parts[-1])
            progress.update(stop - start)
    finally:
        progress.close()
    if len(parts) == 1:
        return parts[0]
    layers = {}
    for name in parts[0].layers:
        dtype = np.result_type(*(part.layers[name].dtype for part in parts))
        layers[name] = np.concatenate([part.to_numpy(name).astype(dtype) for part in parts], 2)
    first = parts[0]
    return from_parts(
        layers,
        samples=first.samples,
        groups=first.groups,
        features=features,
        cells=first.cells,
        normalization=None,
        metadata=None,
        provenance=first.provenance,
        digests=None,
    )


def _float_counts(cube: Cube) -> bool:
    return "counts" in cube.layers and np.dtype(cube.layers["counts"].dtype).kind == "f"


# ---------------------------------------------------------------------------------------------
# Cubes to pseudobulk AnnData / MuData and back
# ---------------------------------------------------------------------------------------------


def to_anndata(cube: Cube, *, layer: str = "counts", drop_empty: bool = True) -> anndata.AnnData:
    """Make a pseudobulk AnnData: one observation per profile (sample x group).

    It is what scanpy, decoupler and PyDESeq2 (which refuses sparse ``X``) expect of a
    pseudobulk AnnData. Observations go group by group, samples in cube order within each
    group, named ``"<sample_id>_<group_id>"``.

    Parameters
    ----------
    cube
        The cube; lazy layers are read one group at a time.
    layer
        The layer that becomes ``X`` (dense, with the layer's dtype, so integer when the
        layer is). The other layers go to ``.layers`` under their names.
    drop_empty
        Leave out the profiles with no cells.

    Returns
    -------
    anndata.AnnData
        ``obs``: ``sample_id``, ``group_id`` (categoricals in cube order), ``n_cells``, then
        the sample covariates and the group covariates (a name already taken gets the prefix
        ``sample_`` or ``group_``); ``var``: the feature table; ``uns["cytepool"]``: the
        normalization, metadata, provenance and what :func:`from_pseudobulk` needs to
        rebuild the cube exactly (see the module documentation).

    Raises
    ------
    KeyError
        If the cube has no layer ``layer``.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool import Cube
    >>> from cytepool.io.anndata import to_anndata
    >>> cube = Cube(
    ...     {"counts": np.array([[[3, 0], [2, 5]], [[0, 0], [1, 1]]], dtype=np.int64)},
    ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"], "condition": ["ctrl", "stim"]}),
    ...     groups=pd.DataFrame({"group_id": ["B", "T"]}),
    ...     features=pd.DataFrame({"feature_id": ["CD19", "CD3E"]}),
    ...     cells=np.array([[4, 6], [0, 2]]),
    ... )
    >>> adata = to_anndata(cube)
    >>> adata.obs
         sample_id group_id  n_cells condition
    s1_B        s1        B        4      ctrl
    s2_B        s2        B        6      stim
    s2_T        s2        T        2      stim
    >>> adata.X
    array([[3, 0],
           [2, 5],
           [1, 1]])
    """
    import anndata as ad

    names = list(cube.layers)
    if layer not in names:
        msg = f"the cube has no layer {layer!r}; its layers are {names}"
        raise UnknownIdError(msg, unknown=layer, known=names)
    cells = np.asarray(cube.cells, dtype=np.int64)
    group_rows, sample_rows = np.nonzero(cells > 0 if drop_empty else np.ones_like(cells, bool))
    tables = _cube_tables(cube)
    values = {name: _profile_rows(cube, name, group_rows, sample_rows) for name in names}
    obs = _profile_obs(tables, group_rows, sample_rows, cells[group_rows, sample_rows])
    adata = ad.AnnData(
        X=values.pop(layer),
        obs=obs,
        var=_writable(tables["features"]),
        layers=values,
    )
    adata.uns[RECORD_KEY] = _record(cube, tables, layer, cells)
    return adata


def from_pseudobulk(
    adata: anndata.AnnData,
    *,
    sample_key: str = "sample_id",
    group_key: str = "group_id",
    layer: str | None = None,
    cells_key: str | None = None,
    samples: Covariates = None,
    groups: Covariates = None,
) -> Cube:
    """Make a cube from a pseudobulk AnnData, one observation per profile.

    Reads ours (:func:`to_anndata`), scanpy's ``sc.get.aggregate`` output (sums in
    ``layers["sum"]``, which has no cell numbers: add them to ``obs`` and name the column
    with ``cells_key``) and decoupler's pseudobulk output (sums in ``X``, cell numbers in
    ``obs["psbulk_cells"]`` as floats). Profiles absent from ``obs`` are empty.

    When ``uns["cytepool"]`` describes ``adata`` (every profile that had cells is there,
    with the same number of cells) the cube is rebuilt exactly: ``from_pseudobulk(
    to_anndata(cube))`` has the fingerprint of ``cube``, also after ``write_h5ad`` /
    ``write_zarr`` and reading back. The sample and group tables, layer dtypes,
    normalization, metadata and provenance come from the record then; observations
    removed since keep only the samples and groups still present. Features always come
    from ``var`` (columns added to it are kept).

    Without a record, the layer is ``"counts"``: integer dtypes are kept, floats that are
    all whole numbers become int64, other floats float64. Sample and group covariates are
    found as in :func:`from_anndata`.

    Parameters
    ----------
    adata
        The pseudobulk AnnData; never modified.
    sample_key, group_key
        The ``obs`` columns holding each profile's sample and group.
    layer
        Where the sums are: a key of ``layers``, or None for ``X``.
    cells_key
        The ``obs`` column holding cell numbers (whole numbers, of any numeric dtype).
        None looks for ``n_cells``, then ``psbulk_cells``.
    samples, groups
        Covariates, as in :func:`from_anndata` (ignored when the record is used).

    Returns
    -------
    Cube

    Raises
    ------
    KeyError
        If a key, layer or column does not exist.
    ValueError
        If there are no cell numbers, a label is missing, a profile appears twice, a value
        is negative, not finite or (for integer layers and cell numbers) not a whole number,
        or var names are not unique.

    Examples
    --------
    >>> import anndata as ad
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool.io.anndata import from_pseudobulk
    >>> obs = pd.DataFrame(
    ...     {"donor": ["d1", "d2"], "cell_type": ["B", "B"], "psbulk_cells": [4.0, 6.0]},
    ...     index=["d1_B", "d2_B"],
    ... )
    >>> adata = ad.AnnData(np.array([[3.0, 0.0], [2.0, 5.0]]), obs=obs)
    >>> cube = from_pseudobulk(adata, sample_key="donor", group_key="cell_type")
    >>> cube.cells.tolist(), cube.layers["counts"].dtype
    ([[4, 6]], dtype('int64'))
    """
    where = "adata"
    sums: dict[str | None, np.ndarray] = {None: _pseudobulk_matrix(adata, layer, where)}
    record = _read_record(adata.uns, where)
    if record is not None:
        for name in record["layers"]:
            if name != record["layer"] and name in adata.layers and name != layer:
                sums[name] = _pseudobulk_matrix(adata, name, where)
    return _from_profiles(
        _frame(adata.obs),
        sums,
        _frame(adata.var),
        record,
        where,
        keys=(sample_key, group_key),
        cells_key=cells_key,
        covariates=(samples, groups),
        stamp=(
            "from_pseudobulk",
            {
                "sample_key": sample_key,
                "group_key": group_key,
                "layer": layer,
                "cells_key": cells_key,
            },
        ),
    )


def to_mudata(cube: Cube, *, layer: str = "counts") -> mudata.MuData:
    """Make a MuData with one modality per group.

    Each modality has one observation per sample (all samples, ``n_cells`` 0 for empty
    profiles) with the sample covariates and ``n_cells`` in ``obs``, the feature table as
    ``var``, the layer as ``X`` and the other layers in ``.layers``; the modalities share
    both axes (MuData ``axis=-1``). The global ``obs`` is the sample table, the global
    ``var`` the feature table; ``uns["cytepool"]`` is the record :func:`from_mudata` rebuilds the
    cube from (with the group table and the modality name of each group: a ``/`` in a
    group id becomes ``_`` in the modality name).

    Parameters
    ----------
    cube
        The cube.
    layer
        The layer that becomes each modality's ``X``.

    Returns
    -------
    mudata.MuData

    Raises
    ------
    KeyError
        If the cube has no layer ``layer``.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool import Cube
    >>> from cytepool.io.anndata import to_mudata
    >>> cube = Cube(
    ...     {"counts": np.array([[[3, 0], [2, 5]], [[0, 0], [1, 1]]], dtype=np.int64)},
    ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
    ...     groups=pd.DataFrame({"group_id": ["B", "T"]}),
    ...     features=pd.DataFrame({"feature_id": ["CD19", "CD3E"]}),
    ...     cells=np.array([[4, 6], [0, 2]]),
    ... )
    >>> mdata = to_mudata(cube)
    >>> list(mdata.mod), mdata.mod["T"].obs["n_cells"].tolist()
    (['B', 'T'], [0, 2])
    """
    import anndata as ad
    import mudata as md

    names = list(cube.layers)
    if layer not in names:
        msg = f"the cube has no layer {layer!r}; its layers are {names}"
        raise UnknownIdError(msg, unknown=layer, known=names)
    tables = _cube_tables(cube)
    cells = np.asarray(cube.cells, dtype=np.int64)
    modalities = _modality_names(tables["groups"].index)
    samples = _writable(tables["samples"])
    samples.index.name = None
    features = _writable(tables["features"])
    mods = {}
    for g, name in enumerate(modalities):
        obs = samples.copy()
        obs[_free_name("n_cells", obs.columns, "")] = cells[g]
        values = {key: np.asarray(cube.profiles(g, layer=key)) for key in names}
        mods[name] = ad.AnnData(values.pop(layer), obs=obs, var=features, layers=values)
    with _mudata_defaults(md):
        mdata = md.MuData(mods, axis=-1)  # every modality has the same obs and var
    record = _record(cube, tables, layer, cells)
    record["modalities"] = modalities
    if mods:
        mdata.obs = samples
        mdata.var = features
    else:  # no groups (no cells were pooled, say): no modality holds the features
        record["features"] = _writable(tables["features"])
    mdata.uns[RECORD_KEY] = record
    return mdata


def from_mudata(mdata: mudata.MuData, *, cells_key: str | None = None) -> Cube:
    """Make a cube from a MuData with one modality per group, the inverse of :func:`to_mudata`.

    Each modality holds one observation per sample (``obs_names`` are the sample ids) and
    the cell numbers in ``obs`` (``cells_key``, or ``n_cells`` / ``psbulk_cells``); every
    modality must have the same features. With the record of :func:`to_mudata` the cube is
    rebuilt exactly (see :func:`from_pseudobulk`); without it, the groups are the modality
    names and the layer ``"counts"`` holds each modality's ``X``.

    Parameters
    ----------
    mdata
        The MuData; never modified.
    cells_key
        The ``obs`` column of each modality holding cell numbers.

    Returns
    -------
    Cube

    Raises
    ------
    KeyError, ValueError
        As :func:`from_pseudobulk`, and if the modalities' features differ.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool import Cube
    >>> from cytepool.io.anndata import from_mudata, to_mudata
    >>> cube = Cube(
    ...     {"counts": np.array([[[3, 0], [2, 5]]], dtype=np.int64)},
    ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
    ...     groups=pd.DataFrame({"group_id": ["B"]}),
    ...     features=pd.DataFrame({"feature_id": ["CD19", "CD3E"]}),
    ...     cells=np.array([[4, 6]]),
    ... )
    >>> from_mudata(to_mudata(cube)).fingerprint == cube.fingerprint
    True
    """
    import pandas as pd

    record = _read_record(mdata.uns, "mdata")
    names = list(mdata.mod)
    if not names:
        return _without_groups(record)
    layers: list[str | None] = [None]
    if record is not None:
        layers += [
            name
            for name in record["layers"]
            if name != record["layer"] and all(name in mdata.mod[mod].layers for mod in names)
        ]
    group_of = (
        dict(zip(record["modalities"], record["groups"].index, strict=True)) if record else {}
    )
    frames: list[pd.DataFrame] = []
    sums: dict[str | None, list[np.ndarray]] = {}
    var: pd.DataFrame | None = None
    for name in names:
        modality, where = mdata.mod[name], f"modality {name!r}"
        var = _same_features(var, modality.var, where)
        obs = pd.DataFrame(modality.obs).copy()
        key = _cells_column(obs, cells_key, where)
        frames.append(
            pd.DataFrame(
                {
                    "sample_id": obs.index.to_numpy(),
                    "group_id": group_of.get(name, name),
                    "n_cells": obs[key].to_numpy(),
                },
            )
        )
        for layer in layers:
            sums.setdefault(layer, []).append(_pseudobulk_matrix(modality, layer, where))
    obs = _concat_frames(frames)
    stacked = {layer: np.concatenate(blocks) for layer, blocks in sums.items()}
    return _from_modality_rows(obs, stacked, var, record, cells_key)


def _from_modality_rows(
    obs: pd.DataFrame,
    sums: Mapping[str | None, np.ndarray],
    var: pd.DataFrame,
    record: dict[str, Any] | None,
    cells_key: str | None,
) -> Cube:
    """The cube of from_mudata, from one row per (sample, group): sample_id, group_id, n_cells."""
    return _from_profiles(
        obs,
        sums,
        var,
        record,
        "mdata",
        keys=("sample_id", "group_id"),
        cells_key="n_cells",
        covariates=((), ()),
        stamp=("from_mudata", {"cells_key": cells_key}),
    )


def _without_groups(record: dict[str, Any] | None) -> Cube:
    """The cube of a MuData without modalities: one without groups, if the record says so."""
    import pandas as pd

    if record is None or "features" not in record:
        msg = "mdata has no modalities, and no record of to_mudata with the features of a cube"
        raise InputError(msg)
    features = record["features"]
    obs = pd.DataFrame({"sample_id": [], "group_id": [], "n_cells": []}, dtype=object)
    sums: dict[str | None, np.ndarray] = {
        None if name == record["layer"] else name: np.zeros((0, len(features)))
        for name in record["layers"]
    }
    return _from_modality_rows(obs, sums, features, record, None)


def _mudata_defaults(md: Any) -> contextlib.AbstractContextManager[Any]:
    """mudata 0.4's behaviour, pulling no columns on update (0.3 warns unless told so)."""
    if hasattr(md, "set_options"):  # mudata < 0.4
        return md.set_options(pull_on_update=False)
    return contextlib.nullcontext()


def _same_features(var: pd.DataFrame | None, other: pd.DataFrame, where: str) -> pd.DataFrame:
    if var is not None and not var.index.equals(other.index):
        msg = f"{where} has other features than the first modality: every modality must match"
        raise InputError(msg)
    return other if var is None else var


# ---------------------------------------------------------------------------------------------
# Profiles (one row per sample x group) to a cube
# ---------------------------------------------------------------------------------------------


def _from_profiles(
    obs: pd.DataFrame,
    sums: Mapping[str | None, np.ndarray],
    var: pd.DataFrame,
    record: dict[str, Any] | None,
    where: str,
    *,
    keys: tuple[str, str],
    cells_key: str | None,
    covariates: tuple[Covariates, Covariates],
    stamp: tuple[str, dict[str, Any]],
) -> Cube:
    """Build a cube from profile rows; ``sums[None]`` holds the layer of ``X``."""
    sample_codes, sample_ids = _labels(obs, keys[0], "sample_key", f"{where}.obs")
    group_codes, group_ids = _labels(obs, keys[1], "group_key", f"{where}.obs")
    cells = _whole_numbers(obs[_cells_column(obs, cells_key, where)], where)
    _check_unique_profiles(sample_codes, group_codes, sample_ids, group_ids, where)
    features = _feature_table(var, None, f"{where}.var")
    if record is None:
        tables = _axis_tables(
            obs,
            keys,
            (sample_codes, group_codes),
            (sample_ids, group_ids),
            covariates,
            f"{where}.obs",
            exclude=(_cells_column(obs, cells_key, where),),
        )
        layers = {"counts": _foreign_layer(sums[None], where)}
        parts = _Parts(tables[0], tables[1], layers, None, {}, None)
    else:
        parts = _recorded_parts(record, sums, sample_ids, group_ids, cells, where)
        parts.samples, parts.groups, keep = _kept_axes(
            record, parts, (sample_codes, group_codes), (sample_ids, group_ids), cells
        )
        parts.normalization = _kept_normalization(parts, keep)
        features = _restore(features, record["dtypes"].get("features", {}))
    codes, ids = (sample_codes, group_codes), (sample_ids, group_ids)
    return _assemble(parts, features, codes, ids, cells, stamp)


@dataclass
class _Parts:
    """What a cube is built from, besides the features and the profile rows."""

    samples: pd.DataFrame
    groups: pd.DataFrame
    layers: dict[str, np.ndarray]
    normalization: tuple[str, np.ndarray] | None
    metadata: dict[str, Any]
    provenance: list[dict[str, Any]] | None


def _recorded_parts(
    record: dict[str, Any],
    sums: Mapping[str | None, np.ndarray],
    sample_ids: Sequence[str],
    group_ids: Sequence[str],
    cells: np.ndarray,
    where: str,
) -> _Parts:
    dtypes = record["dtypes"]
    samples = _restore(record["samples"], dtypes.get("samples", {}))
    groups = _restore(record["groups"], dtypes.get("groups", {}))
    for ids, table, name in ((sample_ids, samples, "sample"), (group_ids, groups, "group")):
        unknown = sorted(set(ids) - set(table.index))
        if unknown:
            msg = (
                f"{where}: obs holds {name} ids that uns[{RECORD_KEY!r}] does not know, e.g. "
                f"{unknown[0]!r}; delete uns[{RECORD_KEY!r}] to read it as any pseudobulk AnnData"
            )
            raise InputError(msg)
    layers = {}
    for name in record["layers"]:
        key = None if name == record["layer"] else name
        if key in sums:
            dtype = dtypes["layers"][name]
            layers[name] = _as_dtype(sums[key], dtype, f"{where}: layer {name!r}")
    return _Parts(
        samples,
        groups,
        layers,
        record.get("normalization"),
        record["metadata"],
        record["provenance"],
    )


def _kept_axes(
    record: dict[str, Any],
    parts: _Parts,
    codes: tuple[np.ndarray, np.ndarray],
    ids: tuple[Sequence[str], Sequence[str]],
    cells: np.ndarray,
) -> tuple[pd.DataFrame, pd.DataFrame, tuple[np.ndarray, np.ndarray] | None]:
    """All recorded samples and groups if obs is what was recorded, else those in obs."""
    recorded = np.asarray(record["cells"], dtype=np.int64)
    s_pos = parts.samples.index.get_indexer(np.asarray(ids[0], dtype=object))[codes[0]]
    g_pos = parts.groups.index.get_indexer(np.asarray(ids[1], dtype=object))[codes[1]]
    here = np.zeros_like(recorded)
    here[g_pos, s_pos] = cells
    if np.array_equal(here, recorded):
        return parts.samples, parts.groups, None
    keep_s = np.flatnonzero(np.isin(np.arange(len(parts.samples)), s_pos))
    keep_g = np.flatnonzero(np.isin(np.arange(len(parts.groups)), g_pos))
    return parts.samples.iloc[keep_s], parts.groups.iloc[keep_g], (keep_g, keep_s)


def _kept_normalization(
    parts: _Parts, keep: tuple[np.ndarray, np.ndarray] | None
) -> tuple[str, np.ndarray] | None:
    if parts.normalization is None or keep is None:
        return parts.normalization
    method, factors = parts.normalization
    return method, factors[np.ix_(keep[0], keep[1])]


def _assemble(
    parts: _Parts,
    features: pd.DataFrame,
    codes: tuple[np.ndarray, np.ndarray],
    ids: tuple[Sequence[str], Sequence[str]],
    cells: np.ndarray,
    stamp: tuple[str, dict[str, Any]],
) -> Cube:
    """Scatter profile rows into (groups, samples, features) layers and build the cube."""
    from cytepool.cube import Cube, Normalization

    s_pos = parts.samples.index.get_indexer(np.asarray(ids[0], dtype=object))[codes[0]]
    g_pos = parts.groups.index.get_indexer(np.asarray(ids[1], dtype=object))[codes[1]]
    shape = (len(parts.groups), len(parts.samples))
    cell_numbers = np.zeros(shape, dtype=np.int64)
    cell_numbers[g_pos, s_pos] = cells
    layers = {}
    for name, rows in parts.layers.items():
        layer = np.zeros((*shape, len(features)), dtype=rows.dtype)
        layer[g_pos, s_pos] = rows
        layers[name] = layer
    normalization = None
    if parts.normalization is not None:
        normalization = Normalization(parts.normalization[0], parts.normalization[1])
    cube = Cube(
        layers,
        samples=parts.samples,
        groups=parts.groups,
        features=features,
        cells=cell_numbers,
        normalization=normalization,
        metadata=parts.metadata,
    )
    return _stamped(cube, parts.provenance or (), *stamp)


def _stamped(cube: Cube, history: Iterable[Any], operation: str, parameters: Any) -> Cube:
    """The cube with provenance ``history`` (records or their JSON) plus a record now."""
    from cytepool.cube import Provenance

    records = [
        item if isinstance(item, Provenance) else Provenance.from_json(item) for item in history
    ]
    records.append(provenance_record(operation, parameters, ()))
    return with_provenance(cube, records)


def _check_unique_profiles(
    sample_codes: np.ndarray,
    group_codes: np.ndarray,
    sample_ids: Sequence[str],
    group_ids: Sequence[str],
    where: str,
) -> None:
    pairs = group_codes.astype(np.int64) * len(sample_ids) + sample_codes
    unique, counts = np.unique(pairs, return_counts=True)
    if len(unique) < len(pairs):
        pair = unique[np.argmax(counts > 1)]
        g, s = divmod(int(pair), len(sample_ids))
        msg = (
            f"{where}: the profile of sample {sample_ids[s]!r} and group {group_ids[g]!r} "
            f"appears {np.max(counts)} times in obs; expected one observation per profile"
        )
        raise InputError(msg)


def _foreign_layer(values: np.ndarray, where: str) -> np.ndarray:
    """Integer dtypes kept; whole-number floats to int64; other floats to float64."""
    if values.dtype.kind in "iub":
        dtype = values.dtype.name if values.dtype.name in _INTEGER_DTYPES else "int64"
        return _as_dtype(values, dtype, where)
    if values.size and np.all(np.mod(values, 1) == 0) and values.max() < 2.0**63:
        return values.astype(np.int64)
    return values.astype(np.float64)


def _as_dtype(values: np.ndarray, dtype: str, where: str) -> np.ndarray:
    """``values`` as ``dtype``, exactly, or an error saying why not."""
    target = np.dtype(dtype)
    if values.dtype == target:
        return values
    if target.kind in "iu" and values.dtype.kind == "f":
        fraction = np.mod(values, 1) != 0
        if fraction.any():
            row = int(np.argwhere(fraction)[0][0])
            msg = (
                f"{where} holds non-integer values (e.g. {values[fraction][0]} in row {row}), "
                f"but integers ({dtype}) are required: pass the layer holding the counts"
            )
            raise InputError(msg)
    if target.kind in "iu" and values.size:
        info = np.iinfo(target)
        if values.min() < info.min or values.max() > info.max:
            msg = f"{where} holds values outside the range of {dtype}"
            raise InputError(msg)
    return values.astype(target)


def _whole_numbers(column: pd.Series, where: str) -> np.ndarray:
    """Cell numbers: non-null, non-negative whole numbers, as int64."""
    values = column.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) | (values < 0) | (np.mod(values, 1) != 0)
    if bad.any():
        row = int(np.argmax(bad))
        msg = (
            f"{where}: obs column {column.name!r} must hold cell numbers (whole numbers >= 0) "
            f"but holds {column.iloc[row]!r} in row {column.index[row]!r}"
        )
        raise InputError(msg)
    return values.astype(np.int64)


def _cells_column(obs: pd.DataFrame, cells_key: str | None, where: str) -> str:
    if cells_key is not None:
        if cells_key not in obs.columns:
            msg = f"{where}: cells_key {cells_key!r} is not a column of obs; columns: {list(obs)}"
            raise UnknownIdError(msg, unknown=cells_key, known=obs.columns)
        return cells_key
    for name in _CELLS_COLUMNS:
        if name in obs.columns:
            return name
    msg = (
        f"{where}: obs has no cell numbers (looked for {' and '.join(map(repr, _CELLS_COLUMNS))}): "
        f"pass cells_key= naming the obs column that holds the number of cells of each "
        f"profile (sc.get.aggregate does not record them; count the cells per profile and "
        f"add them to obs)"
    )
    raise InputError(msg)


def _pseudobulk_matrix(adata: anndata.AnnData, layer: str | None, where: str) -> np.ndarray:
    """The dense sums of a pseudobulk AnnData (``X`` or a layer), checked."""
    if layer is not None and layer not in adata.layers:
        msg = f"{where} has no layer {layer!r}; its layers are {_layer_keys(adata)}"
        raise UnknownIdError(msg, unknown=layer, known=_layer_keys(adata))
    values = adata.X if layer is None else adata.layers[layer]
    label = f"{where}.X" if layer is None else f"{where}.layers[{layer!r}]"
    if values is None:
        hint = f" pass layer= naming one of {_layer_keys(adata)}" if _layer_keys(adata) else ""
        msg = f"{label} is empty: there are no sums to read;{hint}"
        raise InputError(msg)
    if hasattr(values, "compute"):  # dask, from a lazily opened AnnData
        values = values.compute()
    if hasattr(values, "toarray"):
        values = values.toarray()
    values = np.asarray(values)
    _check_values(values, label)
    return values


# ---------------------------------------------------------------------------------------------
# Labels, covariates and tables
# ---------------------------------------------------------------------------------------------


def _labels(obs: pd.DataFrame, key: str, role: str, obs_name: str) -> tuple[np.ndarray, list[str]]:
    """Codes per row and the ids: the ``str`` of the labels, sorted (as from_cells does).

    ``role`` is the argument that names ``key`` (``"sample_key"``); ``obs_name`` names
    ``obs`` in messages (``"adata.obs"``).
    """
    if key not in obs.columns:
        msg = (
            f"{_words.option(role)} {key!r} is not a column of {obs_name}; "
            f"its columns: {list(map(str, obs.columns))}"
        )
        raise UnknownIdError(msg, unknown=key, known=obs.columns)
    column = obs[key]
    what = f"column {key!r} of {obs_name} ({_words.option(role)})"
    missing = column.isna().to_numpy()
    if missing.any():
        first = obs.index[int(np.argmax(missing))]
        msg = (
            f"{what} has {int(missing.sum())} missing labels, e.g. in row {str(first)!r}: "
            f"drop those rows or fill them in"
        )
        raise InputError(msg)
    codes, ids = factorize(column, what)
    return codes.astype(np.intp), ids


def _axis_tables(
    obs: pd.DataFrame,
    keys: tuple[str, str],
    codes: tuple[np.ndarray, np.ndarray],
    ids: tuple[Sequence[str], Sequence[str]],
    columns: tuple[Covariates, Covariates],
    obs_name: str,
    *,
    exclude: Iterable[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """The sample and the group table, with their covariates from ``obs``, and what was kept.

    The report (for the provenance record): ``{"samples": [kept], "groups": [kept],
    "dropped": {column: why}}``; the keys, ``exclude`` and id columns are not covariates.
    """
    excluded = {*keys, *exclude}
    samples, why_not_sample = _covariates(
        obs, codes[0], ids[0], columns[0], "sample", excluded, obs_name
    )
    group_excluded = excluded | (set(samples.columns) if columns[1] is None else set())
    groups, why_not_group = _covariates(
        obs, codes[1], ids[1], columns[1], "group", group_excluded, obs_name
    )
    dropped = {}
    for name in obs.columns:
        if name not in excluded and name not in samples and name not in groups:
            dropped[str(name)] = _both(why_not_sample.get(name), why_not_group.get(name))
    report = {
        "samples": [str(name) for name in samples.columns],
        "groups": [str(name) for name in groups.columns],
        "dropped": dropped,
    }
    return samples, groups, report


def _both(first: str | None, second: str | None) -> str:
    """One reason of two: "varies within sample 'a' (1 and 2) and within group 'B' (...)"."""
    if not first or not second or first == second:
        return first or second or ""
    if first.startswith("varies within ") and second.startswith("varies within "):
        second = second.removeprefix("varies ")
    return f"{first} and {second}"


def _covariates(
    obs: pd.DataFrame,
    codes: np.ndarray,
    ids: Sequence[str],
    columns: Covariates,
    axis: str,
    excluded: set[str],
    obs_name: str,
) -> tuple[pd.DataFrame, dict[str, str]]:
    """One row per id: the obs columns constant within each id (all of them, or the named).

    Also why each other column is not one (for the columns not ``excluded``).
    """
    import pandas as pd

    _, first = np.unique(codes, return_index=True)
    candidates = [c for c in obs.columns if c not in excluded]
    why_not = {}
    if columns is None:
        for name in candidates:
            reason = _variation(obs[name], codes, first, ids, axis)
            if name in {"sample_id", "group_id"}:
                reason = "named like an id column"
            if reason is not None:
                why_not[name] = reason
        names = [name for name in candidates if name not in why_not]
    else:
        names = list(columns)
        for name in names:
            _check_covariate(obs, name, codes, first, ids, axis, obs_name)
        why_not = {c: f"not named as a {axis} covariate" for c in candidates if c not in names}
    table = pd.DataFrame({name: obs[name].iloc[first].to_numpy() for name in names})
    for name in names:  # keep dtypes (categoricals, nullables) that to_numpy() loses
        table[name] = obs[name].iloc[first].reset_index(drop=True)
    table.index = pd.Index(list(ids), name=_ID_COLUMNS[f"{axis}s"])
    return table, why_not


def _value_codes(column: pd.Series) -> np.ndarray | None:
    import pandas as pd

    try:
        return pd.factorize(column, use_na_sentinel=False)[0]
    except TypeError:  # unhashable values: never a covariate
        return None


def _variation(
    column: pd.Series, codes: np.ndarray, first: np.ndarray, ids: Sequence[str], axis: str
) -> str | None:
    """Why ``column`` is not constant within each id (sample or group), or None if it is."""
    values = _value_codes(column)
    if values is None:
        return "holds unhashable values"
    varying = np.flatnonzero(values != values[first][codes])
    if not len(varying):
        return None
    row = varying[0]
    one, other = column.iloc[first[codes[row]]], column.iloc[row]
    return f"varies within {axis} {ids[codes[row]]!r} ({_brief(one)} and {_brief(other)})"


def _brief(value: Any) -> str:
    """A short text of a value for messages: 0.585, 'ctrl', 'a very long tex...'."""
    value = value.item() if isinstance(value, np.generic) else value
    text = f"{value:.6g}" if isinstance(value, float) else repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _check_covariate(
    obs: pd.DataFrame,
    name: str,
    codes: np.ndarray,
    first: np.ndarray,
    ids: Sequence[str],
    axis: str,
    obs_name: str,
) -> None:
    if name not in obs.columns:
        msg = (
            f"{axis} covariate {name!r} ({_words.option(f'{axis}s')}) is not a column of "
            f"{obs_name}; its columns: {list(map(str, obs.columns))}"
        )
        raise UnknownIdError(msg, unknown=name, known=obs.columns)
    if name in {"sample_id", "group_id"}:
        msg = f"{name!r} cannot be a {axis} covariate: it is the name of an id column"
        raise InputError(msg)
    reason = _variation(obs[name], codes, first, ids, axis)
    if reason is not None:
        msg = (
            f"column {name!r} of {obs_name} {reason}: it cannot be a {axis} covariate "
            f"({_words.option(f'{axis}s')})"
        )
        raise InputError(msg)


def _feature_table(var: pd.DataFrame, columns: Covariates, var_name: str) -> pd.DataFrame:
    """The feature table from ``var`` (named ``var_name`` in messages: ``"adata.var"``)."""
    import pandas as pd

    index = var.index
    if not index.is_unique:
        duplicated = index[index.duplicated()][0]
        msg = (
            f"the names of {var_name} are not unique (e.g. {str(duplicated)!r} appears "
            f"{int((index == duplicated).sum())} times): make them unique first, e.g. with "
            f"var_names_make_unique() on a copy"
        )
        raise InputError(msg)
    if columns is not None:
        missing = [c for c in columns if c not in var.columns]
        if missing:
            msg = (
                f"feature column {missing[0]!r} is not a column of {var_name}; its columns: "
                f"{list(map(str, var.columns))}"
            )
            raise UnknownIdError(msg, unknown=missing[0], known=var.columns)
    table = pd.DataFrame(var if columns is None else var[list(columns)]).copy()
    table.index = pd.Index([str(name) for name in index], name="feature_id")
    return table


def _concat_frames(frames: list[pd.DataFrame]) -> pd.DataFrame:
    import pandas as pd

    if len(frames) == 1:
        return frames[0]
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------------------------------------
# Reading cells: whole matrices, or row blocks of on-disk and dask matrices
# ---------------------------------------------------------------------------------------------


def _frame(frame: Any) -> pd.DataFrame:
    """obs or var as pandas (a lazily opened AnnData holds them as anndata's Dataset2D)."""
    return frame.to_memory() if hasattr(frame, "to_memory") else frame


def _eager(value: Any) -> Any:
    """A value of uns in memory (a lazily opened AnnData holds dask arrays and Dataset2D)."""
    return value.compute() if hasattr(value, "compute") else _frame(value)


def _layer_keys(adata: anndata.AnnData) -> list[str]:
    """The names of the layers (anndata 0.13 also lists None, for X)."""
    return [name for name in adata.layers.keys() if name is not None]  # noqa: SIM118


def _matrix_of(
    adata: anndata.AnnData, *, layer: str | None, use_raw: bool, owner: str = "adata"
) -> tuple[Any, pd.DataFrame, _Source]:
    """The counts matrix, the var to take features from, and their names for messages."""
    _check_either(layer, use_raw)
    if use_raw:
        if adata.raw is None:
            msg = f"{_words.option('use_raw')} asks for {owner}.raw.X, but {owner}.raw is None"
            raise InputError(msg)
        return adata.raw.X, adata.raw.var, _Source(owner, "raw.X")
    if layer is not None:
        if layer not in adata.layers:
            msg = f"{owner} has no layer {layer!r}; its layers are {_layer_keys(adata)}"
            raise UnknownIdError(msg, unknown=layer, known=_layer_keys(adata))
        return adata.layers[layer], adata.var, _Source(owner, f"layers[{layer!r}]")
    if adata.X is None:
        msg = (
            f"{owner}.X is empty: pass {_words.option('layer')} naming the layer that holds "
            f"the counts, one of {_layer_keys(adata)}"
        )
        raise InputError(msg)
    return adata.X, adata.var, _Source(owner, "X")


def _check_either(layer: str | None, use_raw: bool) -> None:
    if layer is not None and use_raw:
        msg = f"pass either {_words.option('layer')} or {_words.option('use_raw')}, not both"
        raise InputError(msg)


@contextlib.contextmanager
def _open_cells(
    path: str | os.PathLike[str], *, layer: str | None, use_raw: bool
) -> Iterator[tuple[Any, pd.DataFrame, pd.DataFrame, _Source]]:
    """Open an ``.h5ad`` file or AnnData ``.zarr`` store read-only: matrix, obs, var."""
    _check_either(layer, use_raw)
    source = _Source(os.fspath(path), "raw.X" if use_raw else _layer_name(layer), path=True)
    with _open_store(Path(path)) as root:
        if not _is_legacy(root):
            _check_anndata(root, source)
            element = "raw/X" if use_raw else "X" if layer is None else f"layers/{layer}"
            var_path = "raw/var" if use_raw else "var"
            for needed in (element, "obs", var_path):
                if needed not in root:
                    raise _missing_element(root, needed, source)
            matrix = _on_disk_matrix(root[element])
            yield matrix, _read_frame(root["obs"]), _read_frame(root[var_path]), source
            return
    with _legacy_anndata(Path(path)) as adata:
        yield _legacy_cells(adata, source, layer=layer, use_raw=use_raw)


def _layer_name(layer: str | None) -> str:
    return "X" if layer is None else f"layer {layer!r}"


def _missing_element(root: Any, element: str, source: _Source) -> KeyError:
    """The error for an element an AnnData file lacks, named as anndata names it."""
    what = element.replace("/", ".") if element != "raw/X" else "raw.X"
    if element.startswith("layers/"):
        layers = sorted(root["layers"]) if "layers" in root else []
        what = f"{_layer_name(element.removeprefix('layers/'))}; its layers are {layers}"
    msg = f"{source.owner} has no {what}"
    return UnknownIdError(msg)


def _read_frame(element: Any) -> pd.DataFrame:
    """obs or var, read by anndata (files of anndata 0.7 warn of their old categories)."""
    import warnings

    import anndata as ad
    from anndata.io import read_elem

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.OldFormatWarning)
        return read_elem(element)


def _is_legacy(root: Any) -> bool:
    """Whether ``root`` is an ``.h5ad`` file in the layout of anndata < 0.7.

    Its obs and var are compound datasets (categories in ``uns``), raw is ``raw.X`` and
    ``raw.var``, sparse matrices carry ``h5sparse_format``: anndata's own reader knows it.
    """
    import h5py

    if not isinstance(root, h5py.File):
        return False
    frames = (root.get(name) for name in ("obs", "var"))
    return "raw.X" in root or any(isinstance(frame, h5py.Dataset) for frame in frames)


def _check_anndata(root: Any, source: _Source) -> None:
    if "mod" in root and "X" not in root:
        msg = f"{source.owner} is a MuData file: pool its modalities with from_mudata_cells"
        raise InputError(msg)


@contextlib.contextmanager
def _legacy_anndata(path: Path) -> Iterator[anndata.AnnData]:
    """An ``.h5ad`` file of anndata < 0.7, opened backed by anndata, which reads its layout.

    Backed, anndata keeps X and raw.X on disk but reads the rest (obs, var, uns, layers, obsm).
    Its warnings about the old layout (which it converts) are not passed on.
    """
    import warnings

    import anndata as ad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata = ad.read_h5ad(path, backed="r")
    try:
        yield adata
    finally:
        adata.file.close()


def _legacy_cells(
    adata: anndata.AnnData, source: _Source, *, layer: str | None, use_raw: bool
) -> tuple[Any, pd.DataFrame, pd.DataFrame, _Source]:
    """Matrix, obs, var and their names, from an AnnData opened by :func:`_legacy_anndata`."""
    if use_raw and adata.raw is None:
        msg = f"{source.owner} has no raw.X"
        raise UnknownIdError(msg)
    if layer is not None and layer not in adata.layers:
        msg = f"{source.owner} has no {_layer_name(layer)}; its layers are {_layer_keys(adata)}"
        raise UnknownIdError(msg, unknown=layer, known=_layer_keys(adata))
    matrix, var, _ = _matrix_of(adata, layer=layer, use_raw=use_raw)
    return matrix, _frame(adata.obs), _frame(var), source


@contextlib.contextmanager
def _open_modalities(
    path: str | os.PathLike[str],
) -> Iterator[tuple[pd.DataFrame, dict[str, _Modality]]]:
    """Open an ``.h5mu`` file or MuData ``.zarr`` store read-only: global obs, modalities."""
    path = Path(path)
    with _open_store(path) as root:
        if "mod" not in root:
            msg = f"{path} is not a MuData file (it has no 'mod' group): pool it with from_anndata"
            raise InputError(msg)
        if "obs" not in root:
            msg = f"{path} has no element 'obs' (the global obs of a MuData)"
            raise UnknownIdError(msg)
        modalities = {}
        for name in _modality_order(root["mod"]):
            where = f"mod/{name}"
            for needed in ("X", "obs", "var"):
                if f"{where}/{needed}" not in root:
                    msg = f"{path} has no element {where}/{needed}"
                    raise UnknownIdError(msg)
            group = root[where]
            owner = f"modality {name!r} of {os.fspath(path)}"
            modalities[name] = _Modality(
                _on_disk_matrix(group["X"]),
                _read_frame(group["obs"]),
                _read_frame(group["var"]),
                _Source(owner, "X", path=True, modality=True),
            )
        yield _read_frame(root["obs"]), modalities


def _modality_order(mod: Any) -> list[str]:
    """The modality names in MuData's order (attribute ``mod-order``), else as stored."""
    names = [str(name) for name in mod.attrs.get("mod-order", [])]
    return [name for name in names if name in mod] or [str(name) for name in mod]


@contextlib.contextmanager
def _open_store(path: Path) -> Iterator[Any]:
    if not path.exists():
        msg = f"no such file or store: {path}"
        raise FileNotFoundError(msg)
    if path.is_dir():
        import zarr

        try:
            group = zarr.open_group(path, mode="r")
        except (ValueError, OSError) as error:
            msg = f"{path} is not an AnnData zarr store: it holds no Zarr group"
            raise InputError(msg) from error
        yield group
        return
    import h5py

    try:
        file = h5py.File(path, "r")
    except OSError as error:
        msg = f"{path} is not an .h5ad (HDF5) file: {error}"
        raise InputError(msg) from error
    with file:
        yield file


def _on_disk_matrix(element: Any) -> Any:
    from anndata.io import sparse_dataset

    encoding = element.attrs.get("encoding-type", "")
    if encoding in {"csr_matrix", "csc_matrix"}:
        return sparse_dataset(element)
    if not hasattr(element, "shape") or len(element.shape) != 2:
        msg = f"{element.name} is not a matrix (encoding {encoding!r})"
        raise InputError(msg)
    return element


def _cell_rows(matrix: Any, progress: bool | None) -> Any:
    """What ``from_cells`` pools: the matrix itself if in memory, else row blocks."""
    import scipy.sparse

    if isinstance(matrix, np.ndarray) or scipy.sparse.issparse(matrix):
        return matrix
    return _shown(_row_blocks(matrix), matrix.shape[0], progress)


def _is_sparse_dataset(matrix: Any) -> bool:
    from anndata.abc import CSCDataset, CSRDataset

    return isinstance(matrix, CSRDataset | CSCDataset)


def _row_blocks(matrix: Any) -> Iterator[Any]:
    """Row blocks of an on-disk matrix (backed sparse, h5py/zarr dense) or a dask array."""
    if hasattr(matrix, "blocks") and hasattr(matrix, "numblocks"):  # dask
        for i in range(matrix.numblocks[0]):
            yield matrix.blocks[i, :].compute()
        return
    for start, stop in _block_bounds(matrix):
        yield matrix[start:stop]


def _block_bounds(matrix: Any) -> Iterator[tuple[int, int]]:
    n_rows, n_columns = matrix.shape
    if n_rows == 0:  # one empty block, which tells from_cells the number of features
        yield 0, 0
        return
    if _is_sparse_dataset(matrix):
        yield from _nonzero_bounds(matrix.group["indptr"], n_rows)
        return
    rows = max(1, _BLOCK_BYTES // max(1, n_columns * np.dtype(matrix.dtype).itemsize))
    for start in range(0, n_rows, rows):
        yield start, min(n_rows, start + rows)


def _nonzero_bounds(indptr: Any, n_major: int) -> Iterator[tuple[int, int]]:
    """Runs of rows (CSR) or columns (CSC) of about _BLOCK_NONZEROS nonzeros, at least one."""
    indptr = np.asarray(indptr[...], dtype=np.int64)
    marks = np.searchsorted(indptr, np.arange(0, indptr[-1], _BLOCK_NONZEROS), "right")
    starts = np.unique(np.concatenate([[0], np.maximum(marks - 1, 0)]))
    stops = np.append(starts[1:], n_major)
    yield from ((int(a), int(b)) for a, b in zip(starts, stops, strict=True) if b > a)


def _shown(blocks: Iterator[Any], n_rows: int, progress: bool | None) -> Iterator[Any]:
    """The blocks, with a progress bar of the rows handed on."""
    bar = _progress.Progress(n_rows, "pooling", "cells", enabled=progress)
    try:
        for block in blocks:
            yield block
            bar.update(block.shape[0])
    finally:
        bar.close()


def _check_values(values: np.ndarray, where: str) -> None:
    """Counts-like values: numbers, finite and non-negative."""
    if values.dtype.kind not in "biuf":
        msg = f"{where} has dtype {values.dtype}; expected numbers (counts)"
        raise InputTypeError(msg)
    if values.size == 0 or values.dtype.kind in "bu":
        return
    low = values.min()
    if not low >= 0:
        what = "NaN values" if np.isnan(low) else f"negative values (min {low})"
        msg = f"{where} holds {what}: expected sums of counts; name their layer with layer="
        raise InputError(msg)
    if values.dtype.kind == "f" and not np.isfinite(values.max()):
        msg = f"{where} holds infinite values: expected counts"
        raise InputError(msg)


# ---------------------------------------------------------------------------------------------
# The record in uns, and tables in the types anndata writes
# ---------------------------------------------------------------------------------------------


def _cube_tables(cube: Cube) -> dict[str, pd.DataFrame]:
    """The cube's tables as pandas frames indexed by their id."""
    return {
        name: _pandas_table(getattr(cube, name), id_column)
        for name, id_column in _ID_COLUMNS.items()
    }


def _pandas_table(table: Any, id_column: str) -> pd.DataFrame:
    import narwhals as nw
    import pandas as pd

    if isinstance(table, pd.DataFrame) and table.index.name == id_column:
        frame = table.copy()
    else:
        frame = nw.from_native(table, eager_only=True).to_pandas().set_index(id_column)
    frame.index = pd.Index([str(i) for i in frame.index], dtype=object, name=id_column)
    return frame


def _profile_rows(cube: Cube, layer: str, group_rows: np.ndarray, sample_rows: np.ndarray) -> Any:
    dtype = np.dtype(cube.layers[layer].dtype)
    rows = np.zeros((len(group_rows), cube.shape[2]), dtype=dtype)
    for g in np.unique(group_rows):
        mine = np.flatnonzero(group_rows == g)
        rows[mine] = np.asarray(cube.profiles(int(g), layer=layer))[sample_rows[mine]]
    return rows


def _profile_obs(
    tables: Mapping[str, pd.DataFrame],
    group_rows: np.ndarray,
    sample_rows: np.ndarray,
    cells: np.ndarray,
) -> pd.DataFrame:
    import pandas as pd

    sample_ids, group_ids = tables["samples"].index, tables["groups"].index
    obs = pd.DataFrame(
        {
            "sample_id": pd.Categorical.from_codes(sample_rows, categories=sample_ids),
            "group_id": pd.Categorical.from_codes(group_rows, categories=group_ids),
            "n_cells": cells.astype(np.int64),
        }
    )
    for axis, rows in (("sample", sample_rows), ("group", group_rows)):
        table = _writable(tables[f"{axis}s"])
        for column in table.columns:
            name = _free_name(column, obs.columns, f"{axis}_")
            obs[name] = table[column].iloc[rows].reset_index(drop=True)
    obs.index = _obs_names(sample_ids[sample_rows], group_ids[group_rows])
    return obs


def _obs_names(sample_ids: pd.Index, group_ids: pd.Index) -> pd.Index:
    import pandas as pd

    names = pd.Index([f"{s}_{g}" for s, g in zip(sample_ids, group_ids, strict=True)])
    if not names.is_unique:  # ids holding "_" can collide: number the profiles instead
        names = pd.Index([f"{name}_{i}" for i, name in enumerate(names)])
    return names


def _free_name(name: str, taken: Iterable[str], prefix: str) -> str:
    taken = set(taken)
    while name in taken:
        name = f"{prefix}{name}" if prefix else f"{name}_"
    return name


def _modality_names(group_ids: pd.Index) -> list[str]:
    names: list[str] = []
    for group in group_ids:
        names.append(_free_name(str(group).replace("/", "_"), names, ""))
    return names


def _record(
    cube: Cube, tables: Mapping[str, pd.DataFrame], layer: str, cells: np.ndarray
) -> dict[str, Any]:
    dtypes = {name: _dtype_names(table) for name, table in tables.items()}
    dtypes["layers"] = {name: np.dtype(array.dtype).name for name, array in cube.layers.items()}
    record: dict[str, Any] = {
        "format": _RECORD_FORMAT,
        "version": _RECORD_VERSION,
        "layer": layer,
        "layers": list(cube.layers),
        "dtypes": json.dumps(dtypes),
        "samples": _writable(tables["samples"]),
        "groups": _writable(tables["groups"]),
        "cells": cells,
        "metadata": json.dumps(dict(cube.metadata or {})),
        "provenance": json.dumps([record.to_json() for record in cube.provenance]),
    }
    if cube.normalization is not None:
        record["normalization"] = {
            "method": cube.normalization.method,
            "factors": np.asarray(cube.normalization.factors, dtype=np.float64),
        }
    return record


def _read_record(uns: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """The record of ``uns``, parsed, or None when there is none."""
    import pandas as pd

    raw = uns.get(RECORD_KEY)
    if not isinstance(raw, Mapping) or raw.get("format") != _RECORD_FORMAT:
        return None
    raw = {key: _eager(value) for key, value in raw.items()}
    if int(raw.get("version", 0)) != _RECORD_VERSION:
        msg = (
            f"{where}.uns[{RECORD_KEY!r}] has version {raw.get('version')!r}; this cytepool "
            f"reads version {_RECORD_VERSION}: upgrade cytepool"
        )
        raise InputError(msg)
    try:
        record = {
            "layer": str(raw["layer"]),
            "layers": [str(name) for name in raw["layers"]],
            "dtypes": json.loads(str(raw["dtypes"])),
            "samples": pd.DataFrame(raw["samples"]),
            "groups": pd.DataFrame(raw["groups"]),
            "cells": np.asarray(raw["cells"], dtype=np.int64),
            "metadata": json.loads(str(raw["metadata"])),
            "provenance": json.loads(str(raw["provenance"])),
        }
        if "normalization" in raw:
            norm = {key: _eager(value) for key, value in raw["normalization"].items()}
            record["normalization"] = (str(norm["method"]), np.asarray(norm["factors"], float))
        if "modalities" in raw:
            record["modalities"] = [str(name) for name in raw["modalities"]]
        if "features" in raw:
            record["features"] = pd.DataFrame(raw["features"])
            record["features"].index = record["features"].index.astype(str)
    except (KeyError, TypeError, ValueError) as error:
        msg = f"{where}.uns[{RECORD_KEY!r}] is damaged ({error!r}): delete it or rewrite it"
        raise InputError(msg) from error
    for name in ("samples", "groups"):
        record[name].index = record[name].index.astype(str).rename(_ID_COLUMNS[name])
    return record


def _dtype_names(frame: pd.DataFrame) -> dict[str, str]:
    return {str(column): _dtype_name(dtype) for column, dtype in frame.dtypes.items()}


def _dtype_name(dtype: Any) -> str:
    import pandas as pd

    if isinstance(dtype, pd.StringDtype):
        return f"string[{dtype.storage}]" if dtype.na_value is pd.NA else str(dtype)
    return str(dtype)


def _writable(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy whose columns anndata can write; :func:`_restore` reverts it by dtype name."""
    import pandas as pd

    frame = frame.copy()
    for column in frame.columns:
        series = frame[column]
        kind = series.dtype.kind if isinstance(series.dtype, np.dtype) else ""
        if kind in ("m", "M") or isinstance(series.dtype, pd.DatetimeTZDtype):
            series = series.map(lambda value: None if pd.isna(value) else value.isoformat())
        strings = isinstance(series.dtype, pd.StringDtype) or series.dtype == object
        if strings and not _is_pandas3_str(series.dtype):
            has_null = bool(series.isna().any())
            series = series.astype("category") if has_null else series.astype(object)
        frame[column] = series
    return frame


def _is_pandas3_str(dtype: Any) -> bool:
    """pandas 3's default ``str`` dtype, which anndata (0.13, the first for pandas 3) writes."""
    import pandas as pd

    if int(pd.__version__.split(".")[0]) < 3:
        return False
    return isinstance(dtype, pd.StringDtype) and dtype.na_value is not pd.NA


def _restore(frame: pd.DataFrame, dtypes: Mapping[str, str]) -> pd.DataFrame:
    """Give the columns named in ``dtypes`` their recorded dtype back."""
    import pandas as pd

    frame = frame.copy()
    for column, name in dtypes.items():
        if column not in frame.columns or _dtype_name(frame[column].dtype) == name:
            continue
        series = frame[column]
        if name.startswith("datetime64"):
            series = pd.to_datetime(series.astype(object), format="ISO8601", utc="UTC" in name)
        elif name.startswith("timedelta64"):
            series = pd.to_timedelta(series.astype(object))
        if series.dtype == "category" and name in {"object", "str"}:
            series = series.astype(object).where(series.notna(), None)
        frame[column] = series.astype(name)
    return frame
