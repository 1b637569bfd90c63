"""Cells to cubes: the cells of an AnnData, or of every modality of a MuData, pooled."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from cytepool import _progress, _words
from cytepool._assemble import from_parts
from cytepool._blocks import ColumnBlocks, RowBlocks
from cytepool.errors import InputError, InputTypeError, UnknownIdError
from cytepool.io.anndata import _readers

if TYPE_CHECKING:
    import anndata
    import mudata
    import pandas as pd

    from cytepool.cube import Cube
from cytepool.io.anndata._covariates import (
    Covariates,
    axis_tables,
    concat_frames,
    features_record,
    features_table,
    label_codes,
)
from cytepool.io.anndata._direct import DenseMatrix, SparseMatrix
from cytepool.io.anndata._many import check_single, pool_files
from cytepool.io.anndata._readers import (
    Modality,
    Source,
    as_pandas_frame,
    cell_rows,
    is_sparse_dataset,
    matrix_of,
    open_cells,
    open_modalities,
    read_damaged,
    shown,
)
from cytepool.io.anndata._record import stamped
from cytepool.io.anndata._running import naming_file


def from_anndata(
    adata: anndata.AnnData | str | os.PathLike[str] | list[str | os.PathLike[str]],
    *,
    sample_key: str | None = None,
    group_key: str,
    layer: str | None = None,
    use_raw: bool = False,
    samples: Covariates = None,
    groups: Covariates = None,
    features: Covariates | str = None,
    layers: Sequence[str] = ("counts",),
    allow_float: bool = False,
    progress: bool | None = None,
    sample_ids: Sequence[str] | None = None,
    duplicates: str = "error",
    jobs: int | None = None,
    client: Any = None,
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
        the matrix are read). The matrix of a path is read by cytepool's own readers (HDF5
        chunks, Zarr v2 chunks through numcodecs, Zarr v3 through :mod:`cytepool.io.zarr`),
        decoded in parallel, a few blocks ahead of the pooling (see "Pooling cells from a
        file"); what they do not decode is read by anndata's backed reader, with the same
        result. A file in the layout of anndata < 0.7 (``obs`` a compound
        dataset, ``raw.X``) is opened by anndata's own backed reader, which also reads its
        ``uns``, ``obsm`` and layers into memory; its ``X`` and ``raw.X`` are still read in row
        blocks. A list of paths pools every file into one cube: each file on its own, in
        this process and worker processes (``jobs``) or on a dask client's workers
        (``client``), the cubes
        added up with features aligned by id; the cube equals pooling the files concatenated
        in memory (see "Many files" in the dask guide), but for labels: those of all the
        files must match their texts one to one, as those of one file.
    sample_key, group_key
        The ``obs`` columns that hold each cell's sample and group (cell type). Ids are the
        ``str`` values of the labels, sorted, by the rule of :func:`cytepool.from_cells`
        (labels and their texts must match one to one: ``1`` and ``1.0`` are an error).
        ``sample_key`` may be left out for a list of paths given ``sample_ids``.
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
        The ``var`` (or ``raw.var``) columns kept in the feature table (a list or array of
        names, such as ``adata.var.columns``); None keeps all but one named ``feature_id``,
        the name of the feature table's id column (dropped, with the reason in the provenance
        record; naming it is an error). With a list of paths, every
        file must hold the same feature ids (in any order), else InputError;
        ``"intersection"`` pools only the ids all files share (keeping the ``var`` columns
        that are the same in every file, as None does).
    layers
        The layers to make, as in :func:`cytepool.from_cells`: any of ``"counts"``,
        ``"detected"`` (the number of cells with a nonzero value) and ``"squares"`` (the
        sums of the squared values), pooled in one pass.
    allow_float
        Values that are not whole numbers are meant: pool them without a
        :class:`~cytepool.errors.NotCountsWarning` (see :func:`cytepool.from_cells`).
    progress
        Show a progress bar while an on-disk matrix is read: None shows it on stderr when
        that is a terminal, and in the notebook when run in Jupyter. With a list of paths it
        counts the cells of all files, as files finish.
    sample_ids
        With a list of paths whose files are one sample each: the sample id of each file,
        in their order (instead of ``sample_key``).
    duplicates
        With a list of paths: ``"error"`` (default) refuses a profile (group and sample) with
        cells in two files, naming both; ``"add"`` adds them (one sample split over files).
    jobs
        With a list of paths: how many files are pooled at once, each in its own process
        (this one and ``jobs - 1`` worker processes, which take the files in order); None
        uses every CPU this process may run on; 1 pools them here, one after the other.
    client
        With a list of paths: a ``dask.distributed`` client whose workers pool the files
        (``jobs`` is then unused); the cubes are added on this side.

    Returns
    -------
    Cube
        With the layer ``"counts"`` (integer when every value is a whole number, else
        float64) and the cell numbers of every profile. With a list of paths, a provenance
        record ``"pool_file"`` per file (its path, size, cells, and the fingerprint of its own
        cube), then the record ``"from_anndata"``. Its last provenance record,
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
        are not unique, or ``layer`` and ``use_raw`` are both given. With a list of paths,
        also if the files' features differ, a profile is in two files (unless
        ``duplicates="add"``), the labels of two files do not match their texts one to one
        (``1`` in one, ``1.0`` in another), or ``sample_ids`` does not name one sample per
        file; a file that fails stops the run with its error, naming the file.
    TypeError
        If ``samples``, ``groups`` or ``features`` is one string (``samples="age"``) instead
        of a list of column names (an :class:`~cytepool.errors.InputTypeError`).
    OverflowError
        If a sum does not fit the layer's data type (float64 sums of finite values that
        overflow, int64 sums of squares): a :class:`~cytepool.errors.SumOverflowError` naming
        the layer, group and sample, and the file.
    cytepool.errors.FormatError
        (a ValueError) If the file is damaged: an invalid sparse structure (``indptr``),
        metadata that claims more entries than the matrix has, a chunk that cannot be
        decoded or decodes to the wrong size, a path or store file that is not a regular
        file; the message names the file, the array and the chunk.

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
    if isinstance(adata, list | tuple):  # several files
        return pool_files(adata, pool_file, mudata=False, options=locals())
    check_single(locals())
    if isinstance(adata, str | os.PathLike):
        with naming_file(adata), open_cells(adata, layer=layer, use_raw=use_raw) as opened:
            return _pool(*opened, **_keys(locals()))
    _check_kind(adata, ("obs", "var"), "adata", "an AnnData, a path to its .h5ad file or .zarr")
    matrix, var, source = matrix_of(adata, layer=layer, use_raw=use_raw)
    return _pool(
        matrix, as_pandas_frame(adata.obs), as_pandas_frame(var), source, **_keys(locals())
    )


def _check_kind(data: Any, needs: tuple[str, ...], name: str, expected: str) -> None:
    """InputTypeError unless ``data`` has the attributes ``needs`` (an AnnData, a MuData)."""
    if not all(hasattr(data, attribute) for attribute in needs):
        msg = (
            f"{name}: expected {expected} store, or a list of such paths; found "
            f"{type(data).__name__}"
        )
        raise InputTypeError(msg)


def _keys(arguments: Mapping[str, Any]) -> dict[str, Any]:
    names = ("sample_key", "group_key", "samples", "groups", "features", "layers")
    return {name: arguments[name] for name in (*names, "allow_float", "progress")}


def pool_file(
    path: str | os.PathLike[str],
    sample: tuple[str, str] | None,
    options: Mapping[str, Any],
    *,
    mudata: bool,
) -> tuple[Cube | dict[str, Cube], pd.DataFrame, str]:
    """One file of several (see ``_many``): :func:`from_anndata` or :func:`from_mudata_cells`
    of ``path``, with ``sample`` (an obs column and its value) added when a file is a sample.

    Returns the cube (a cube per modality), the obs its covariates come from and its name.
    """
    keys = {name: options[name] for name in ("sample_key", "group_key", "samples", "groups")}
    keys |= {"layers": options["layers"], "allow_float": options["allow_float"], "progress": False}
    keys["alone"] = False  # its worker pools other files after it (see _pool_with_tables)
    if sample is not None:
        keys["sample_key"] = sample[0]
    if not mudata:
        with open_cells(path, layer=options["layer"], use_raw=options["use_raw"]) as opened:
            matrix, obs, var, source = opened
            obs = _with_sample(obs, sample)
            features = None if isinstance(options["features"], str) else options["features"]
            return _pool(matrix, obs, var, source, features=features, **keys), obs, source.obs
    wanted = _wanted_modalities(options["modalities"])
    with open_modalities(path) as (everyone, found):
        everyone = _with_sample(everyone, sample)
        chosen = _chosen(found, wanted, os.fspath(path))
        pair = (keys["sample_key"], keys["group_key"])
        every = [_modality_obs(m.obs, everyone, name, pair) for name, m in chosen.items()]
        cubes = _pool_modalities(everyone, chosen, **keys)
        return cubes, concat_frames(every), f"the obs of the modalities of {os.fspath(path)}"


def _with_sample(obs: pd.DataFrame, sample: tuple[str, str] | None) -> pd.DataFrame:
    if sample is None:
        return obs
    column, value = sample
    return obs.assign(**{column: np.full(len(obs), value, dtype=object)})


def from_mudata_cells(
    mdata: mudata.MuData | str | os.PathLike[str] | list[str | os.PathLike[str]],
    *,
    sample_key: str | None = None,
    group_key: str,
    samples: Covariates = None,
    groups: Covariates = None,
    layers: Sequence[str] = ("counts",),
    modalities: Sequence[str] | None = None,
    allow_float: bool = False,
    progress: bool | None = None,
    features: str | None = None,
    sample_ids: Sequence[str] | None = None,
    duplicates: str = "error",
    jobs: int | None = None,
    client: Any = None,
) -> dict[str, Cube]:
    """Pool each modality of a cell-level MuData (e.g. RNA + protein) into its own cube.

    The cubes share their samples and groups: the same ids, in the same order, with the
    same covariates, so that a profile of one modality has its partner in every other (a
    sample or group absent from a modality gets empty profiles there). ``modalities``
    pools some of them only; they then share the samples and groups of those.

    Parameters
    ----------
    mdata
        The cells: a MuData, or the path of an ``.h5mu`` file (or MuData ``.zarr`` store),
        which is opened read-only; each modality's ``X`` is then read in row blocks, as
        :func:`from_anndata` reads a path. Labels and covariates are read from each
        modality's ``obs``, or, for a key a modality lacks, from the global ``mdata.obs``.
        A list of paths pools every file, as :func:`from_anndata` does, into one cube per
        modality; the cubes share their samples and groups. One difference: a file of
        whole numbers whose int64 sum of squares does not fit raises
        :class:`~cytepool.errors.SumOverflowError` even when another file holds values that
        make the layers float64 (the files concatenated would give float64 layers).
    sample_key, group_key, samples, groups, layers, allow_float, progress
        As in :func:`from_anndata`.
    features, sample_ids, duplicates, jobs, client
        With a list of paths, as in :func:`from_anndata` (``features`` is None or
        ``"intersection"``, per modality).
    modalities
        The names of the modalities to pool, in this order (default: all, in MuData's order).

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
        As :func:`from_anndata`, naming the modality; a KeyError for a modality not in
        ``mdata``.

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
    if isinstance(mdata, list | tuple):  # several files
        return pool_files(mdata, pool_file, mudata=True, options=locals())
    sample_key = check_single(locals())
    if features is not None:  # not "intersection" (check_single): a list of var columns
        msg = (
            f"features= of one MuData: found {features!r}; every modality keeps its var "
            "columns (features= is None or 'intersection', with a list of paths)"
        )
        raise InputError(msg)
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
    wanted = _wanted_modalities(modalities)
    if isinstance(mdata, str | os.PathLike):
        with naming_file(mdata), open_modalities(mdata) as (everyone, found):
            return pool(everyone, _chosen(found, wanted, os.fspath(mdata)))
    _check_kind(mdata, ("mod", "obs"), "mdata", "a MuData, a path to its .h5mu file or .zarr")
    found = {name: _in_memory(mod, name) for name, mod in mdata.mod.items()}
    return pool(mdata.obs, _chosen(found, wanted, "mdata"))


def _wanted_modalities(modalities: Sequence[str] | None) -> list[str] | None:
    if modalities is None:
        return None
    if isinstance(modalities, str) or not all(isinstance(m, str) for m in modalities):
        msg = f"modalities must be a list of modality names, found {modalities!r}"
        raise InputTypeError(msg)
    if len(set(modalities)) != len(modalities) or not len(modalities):
        msg = f"modalities must name each modality once and at least one, found {modalities!r}"
        raise InputError(msg)
    return [str(name) for name in modalities]


def _chosen(
    found: Mapping[str, Modality], wanted: list[str] | None, where: str
) -> dict[str, Modality]:
    """The modalities ``wanted`` (all if None), in that order."""
    if wanted is None:
        return dict(found)
    for name in wanted:
        if name not in found:
            msg = f"{where} has no modality {name!r} (it has {', '.join(map(repr, found))})"
            raise UnknownIdError(msg, unknown=name, known=list(found))
    return {name: found[name] for name in wanted}


def _in_memory(modality: anndata.AnnData, name: str) -> Modality:
    matrix, var, source = matrix_of(
        modality, layer=None, use_raw=False, owner=f"mdata.mod[{name!r}]"
    )
    return Modality(matrix, modality.obs, var, replace(source, modality=True))


def _pool_modalities(
    everyone: pd.DataFrame,
    modalities: Mapping[str, Modality],
    *,
    sample_key: str,
    group_key: str,
    samples: Covariates,
    groups: Covariates,
    layers: Sequence[str],
    allow_float: bool,
    progress: bool | None,
    alone: bool = True,
) -> dict[str, Cube]:
    """One cube per modality, on the samples and groups of all; ``everyone`` is the global obs
    (``alone``: as :func:`_pool_with_tables` takes it)."""
    keys = (sample_key, group_key)
    observations = {
        name: _modality_obs(modality.obs, everyone, name, keys)
        for name, modality in modalities.items()
    }
    everything = concat_frames(list(observations.values()))
    roles = ((sample_key, "sample_key"), (group_key, "group_key"))
    every_obs = "the obs of mdata's modalities"
    (sample_codes, sample_ids), (group_codes, group_ids) = (
        label_codes(everything, key, role, every_obs) for key, role in roles
    )
    sample_table, group_table, covariates = axis_tables(
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
        labels = [label_codes(obs, key, role, source.obs) for key, role in roles]
        tables = (sample_table.loc[labels[0][1]], group_table.loc[labels[1][1]])
        options = {"layers": layers, "allow_float": allow_float, "progress": progress}
        options["alone"] = alone
        frames = (obs, modality.var)
        cube = _pool_with_tables(modality.matrix, frames, source, labels, tables, None, options)
        cube = _widened(cube, sample_table, group_table)
        parameters = {
            "modality": name,
            "sample_key": sample_key,
            "group_key": group_key,
            "covariates": covariates,
            **features_record(modality.var, None),
        }
        cubes[name] = stamped(cube, cube.provenance, "from_mudata_cells", parameters)
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
    source: Source,
    *,
    sample_key: str,
    group_key: str,
    samples: Covariates,
    groups: Covariates,
    features: Covariates,
    **options: Any,
) -> Cube:
    """Pool ``matrix`` by the labels in ``obs``; ``options``: layers, allow_float, progress
    (and alone, see :func:`_pool_with_tables`)."""
    cells = source.names_of_cells(obs)
    labels = [
        label_codes(obs, sample_key, "sample_key", source.obs, cells),
        label_codes(obs, group_key, "group_key", source.obs, cells),
    ]
    *tables, covariates = axis_tables(
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
        **features_record(var, features),
    }
    return stamped(cube, cube.provenance, "from_anndata", parameters)


def _pool_with_tables(
    matrix: Any,
    frames: tuple[pd.DataFrame, pd.DataFrame],
    source: Source,
    labels: Sequence[tuple[np.ndarray, list[str]]],
    tables: tuple[pd.DataFrame, pd.DataFrame],
    features: Covariates,
    options: Mapping[str, Any],
) -> Cube:
    """Pool ``matrix`` (cells x features) by the (codes, ids) ``labels`` of its rows.

    ``frames`` are its obs and var, ``tables`` the sample and group tables, ``features`` the
    var columns to keep; ``options``: ``layers``, ``allow_float`` and ``progress``, as
    :func:`from_anndata` takes them, and ``alone`` (default True): False for a file pooled as
    one of several (``pool_file``), whose row or column blocks then go without their total,
    as blocks of unknown size do, to numba's kernels: its worker pools other files after it,
    and numba's start, paid once, costs less than numpy's slower pooling of each (8 files of
    50 million values on 2 workers: 0.2-0.5 s more with numpy first).
    """
    from cytepool.pooling import from_codes

    obs, var = frames
    feature_table = features_table(var, features, source.var)
    shape = tuple(matrix.shape)
    expected = (len(labels[0][0]), len(feature_table))
    if shape != expected:
        msg = f"{source.matrix} has shape {shape}, expected {expected} (cells x features)"
        raise InputError(msg)
    coded = [_coded(codes, ids, table) for (codes, ids), table in zip(labels, tables, strict=True)]

    def pool(counts: Any, features: pd.DataFrame, allow_float: bool) -> Cube:
        return from_codes(
            counts,
            coded[0],
            coded[1],
            samples=tables[0],
            groups=tables[1],
            features=features,
            layers=options["layers"],
            allow_float=allow_float,
        )

    names = {"matrix": source.matrix, "pick": source.pick_counts()}
    names["cells"] = source.names_of_cells(obs)
    names["features"] = feature_table.index
    if source.path:  # indices out of range are damage to the file's array
        names["indices"] = _indices_array(matrix, source.owner)
    with _words.speaking(**names), contextlib.ExitStack() as stack:
        counts = _counts(matrix, source, options, stack)
        return pool(counts, feature_table, options["allow_float"])


def _counts(
    matrix: Any, source: Source, options: Mapping[str, Any], stack: contextlib.ExitStack[Any]
) -> Any:
    """What :func:`cytepool.pooling.from_codes` pools of ``matrix``: the matrix in memory,
    or its blocks (each read in ``stack``), which can be read again for a second pass."""
    alone = options.get("alone", True)

    def again() -> Any:
        return _counts(matrix, source, options, stack)

    if isinstance(matrix, SparseMatrix | DenseMatrix):  # read by cytepool, blocks ahead
        blocks = stack.enter_context(contextlib.closing(matrix.blocks()))
        total = _stored_values(matrix) if alone else None
        if isinstance(matrix, SparseMatrix) and matrix.format == "csc":
            return _columns(blocks, matrix.shape, total, options["progress"], again)
        rows = (block for _, _, block in blocks)
        return RowBlocks(shown(rows, matrix.shape[0], options["progress"]), total, again)
    if is_sparse_dataset(matrix) and matrix.format == "csc":
        indptr = matrix.group["indptr"]
        bounds = _readers.nonzero_bounds(indptr, matrix.shape[1])
        column_blocks: Iterable[tuple[int, int, Any]]
        column_blocks = ((a, b, matrix[:, a:b]) for a, b in bounds)
        if source.path:
            column_blocks = read_damaged(column_blocks, source.owner)
        values = int(matrix.group["data"].shape[0]) if alone else None
        return _columns(column_blocks, matrix.shape, values, options["progress"], again)
    counts = cell_rows(matrix, options["progress"])
    if isinstance(counts, np.ndarray) or hasattr(counts, "nnz"):
        return counts
    if source.path:
        counts = read_damaged(counts, source.owner)
    return RowBlocks(counts, None, again)


def _indices_array(matrix: Any, owner: str) -> str:
    """The array of the file ``owner`` holding the sparse indices of ``matrix``
    (``"X/indices of cells.h5ad"``), or "" for a dense matrix."""
    if isinstance(matrix, SparseMatrix):
        return matrix.indices.where
    group = getattr(matrix, "group", None)  # anndata's backed sparse dataset (not imported)
    if group is not None and getattr(matrix, "format", None) in ("csr", "csc"):
        return f"{str(group.name).strip('/')}/indices of {owner}"
    return ""


def _stored_values(matrix: SparseMatrix | DenseMatrix) -> int:
    """The values a matrix read by cytepool stores (a CSR matrix's data, a dense one's every
    entry): what chooses numpy or numba to pool it (:class:`~cytepool._blocks.RowBlocks`)."""
    if isinstance(matrix, SparseMatrix):
        return int(matrix.data.shape[0])
    return int(matrix.shape[0]) * int(matrix.shape[1])


def _coded(
    codes: np.ndarray, ids: Sequence[str], table: pd.DataFrame
) -> tuple[np.ndarray, list[str]]:
    """Codes into the ids of ``table`` (which holds every id of ``ids``, sorted, and no other:
    the codes are then handed on as they are), for :func:`cytepool.pooling.from_codes`."""
    positions = table.index.get_indexer(list(ids))
    if not np.array_equal(positions, np.arange(len(table))):
        codes = positions[codes]
    return codes.astype(np.int64, copy=False), [str(name) for name in table.index]


def _columns(
    blocks: Iterable[tuple[int, int, Any]],
    shape: tuple[int, int],
    values: int | None,
    progress: Any,
    again: Callable[[], Any] | None = None,
) -> ColumnBlocks:
    """A CSC matrix on disk as blocks of its columns, ``(start, stop, block)``, which the
    pooling adds straight into their columns of the sums (no cube per block, no join); with
    a progress bar of the features. ``values``: its stored values, or None (a file of
    several: numba's kernels, as for row blocks)."""

    def shown_columns() -> Iterator[tuple[int, int, Any]]:
        bar = _progress.Progress(shape[1], "pooling", "features", enabled=progress)
        try:
            for start, stop, block in blocks:
                yield start, stop, block
                bar.update(stop - start)
        finally:
            bar.close()

    return ColumnBlocks(shape, shown_columns(), values, again)
