"""Cubes to pseudobulk AnnData / MuData and back; profiles (a row per sample x group) to cubes."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cytepool.errors import InputError, UnknownIdError
from cytepool.io.anndata._record import stamped

if TYPE_CHECKING:
    import anndata
    import mudata
    import pandas as pd

    from cytepool.cube import Cube
from cytepool.io.anndata._covariates import (
    Covariates,
    axis_tables,
    check_names,
    concat_frames,
    features_table,
    label_codes,
)
from cytepool.io.anndata._modality_names import modality_names
from cytepool.io.anndata._readers import (
    as_pandas_frame,
    check_values,
    is_sparse_dataset,
    layer_keys,
)
from cytepool.io.anndata._record import (
    RECORD_KEY,
    cube_tables,
    free_name,
    make_record,
    profile_obs,
    profile_rows,
    read_record,
    restore,
    writable,
)

_CELLS_COLUMNS = ("n_cells", "psbulk_cells", "n_obs_aggregated")
_COUNTS_COLUMN = "psbulk_counts"
PROPS_LAYER = "psbulk_props"
"""decoupler's layer of the fraction of cells in which a feature is detected, per profile."""
_WHOLE = 0.01  # props x cells this close to a whole number is a number of detecting cells
_INTEGER_DTYPES = frozenset({"int32", "int64", "uint32", "uint64"})
_INT64_MAX = int(np.iinfo(np.int64).max)


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
        decoupler's ``psbulk_cells`` (the same numbers) and ``psbulk_counts`` (each
        profile's total over the features of ``"counts"``, or of ``layer`` without it, as
        float64), then the sample covariates and the group covariates (a name already taken
        gets the prefix ``sample_`` or ``group_``); ``var``: the feature table;
        ``.layers``: the other layers and, when the cube has ``"detected"``, decoupler's
        ``psbulk_props`` (``detected / cells``, float64; 0 for an empty profile), so that
        decoupler's ``pp.filter_samples``, ``pp.filter_by_expr``, ``pp.filter_by_prop`` and
        plots run on it unchanged; ``uns["cytepool"]``: the normalization, metadata,
        provenance and what :func:`from_pseudobulk` needs to rebuild the cube exactly (see
        the module documentation).

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
    >>> adata.obs[["sample_id", "group_id", "n_cells", "psbulk_counts", "condition"]]
         sample_id group_id  n_cells  psbulk_counts condition
    s1_B        s1        B        4            3.0      ctrl
    s2_B        s2        B        6            7.0      stim
    s2_T        s2        T        2            2.0      stim
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
    tables = cube_tables(cube)
    values = {name: profile_rows(cube, name, group_rows, sample_rows) for name in names}
    profile_cells = cells[group_rows, sample_rows]
    counts = _totals(values["counts" if "counts" in values else layer])
    obs = profile_obs(tables, group_rows, sample_rows, profile_cells, counts)
    extra = {}
    if "detected" in values and PROPS_LAYER not in values:
        extra[PROPS_LAYER] = _props(values["detected"], profile_cells)
    adata = ad.AnnData(
        X=values.pop(layer),
        obs=obs,
        var=writable(tables["features"]),
        layers={**values, **extra},
    )
    adata.uns[RECORD_KEY] = make_record(cube, tables, layer, cells)
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
    ``layers["sum"]``; cell numbers in ``obs["n_obs_aggregated"]`` from scanpy 1.12 on, found
    by themselves; scanpy 1.11 records none: add them to ``obs`` and name the column with
    ``cells_key``) and decoupler's pseudobulk output (sums in ``X``, cell numbers in
    ``obs["psbulk_cells"]`` as floats). Profiles absent from ``obs`` are empty.

    When ``uns["cytepool"]`` describes ``adata`` (every profile that had cells is there,
    with the same number of cells) the cube is rebuilt exactly: ``from_pseudobulk(
    to_anndata(cube))`` has the fingerprint of ``cube``, also after ``write_h5ad`` /
    ``write_zarr`` and reading back. The sample and group tables, layer dtypes,
    normalization, metadata and provenance come from the record then; observations
    removed since keep only the samples and groups still present. Features always come
    from ``var`` (columns added to it are kept).

    Without a record, the layer is ``"counts"``: integer dtypes are kept, floats that are
    all whole numbers become int64, other floats float64. decoupler's ``psbulk_props``
    layer (the fraction of cells detecting each feature) becomes the layer ``"detected"``,
    ``psbulk_props x cells`` rounded to whole numbers (a value more than 0.01 from one is an
    error). Sample and group covariates are found as in :func:`from_anndata`; the columns
    of cell numbers and ``psbulk_counts`` are never covariates.

    Parameters
    ----------
    adata
        The pseudobulk AnnData; never modified.
    sample_key, group_key
        The ``obs`` columns holding each profile's sample and group.
    layer
        Where the sums are: a key of ``layers``, or None for ``X``. With the record, every
        layer is read where :func:`to_anndata` put it, so ``layer=`` naming a layer the
        record lists gives the same cube (the layer of ``X`` is read from ``layers[layer]``
        when ``adata`` holds it there); naming another layer is an error.
    cells_key
        The ``obs`` column holding cell numbers: whole numbers from 0 to 2**63 - 1, of an
        integer or float dtype (integers are read exactly; strings and booleans are refused).
        None looks for ``n_cells``, then ``psbulk_cells``, then ``n_obs_aggregated``.
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
        a cell number is past int64 or the cell numbers' dtype is not of numbers, var names
        are not unique, ``layer`` names a layer the record does not list, or the record
        ``uns['cytepool']`` is damaged (a field of another type or shape than
        :func:`to_anndata` writes: an :class:`~cytepool.errors.InputError` naming it).

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
    check_names(samples, "samples")  # a string is refused, the record used or not
    check_names(groups, "groups")
    record = read_record(adata.uns, where)
    if record is not None:
        sums = _recorded_sums(adata, record, layer, where)
    else:
        sums = {None: _pseudobulk_matrix(adata, layer, where)}
        if PROPS_LAYER in adata.layers and layer != PROPS_LAYER:
            sums[PROPS_LAYER] = _pseudobulk_matrix(adata, PROPS_LAYER, where)
    return _from_profiles(
        as_pandas_frame(adata.obs),
        sums,
        as_pandas_frame(adata.var),
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


def _recorded_sums(
    adata: anndata.AnnData, record: dict[str, Any], layer: str | None, where: str
) -> dict[str | None, np.ndarray]:
    """The sums of every layer the record lists that ``adata`` holds, each read where
    :func:`to_anndata` put it (key None: the layer of ``X``, read from ``layers[layer]`` when
    ``layer=`` names it and ``adata`` has it there). ``layer=`` naming another layer is an
    error: reading it as the layer of ``X`` would put one layer's values under another's name."""
    main = record["layer"]
    if layer is not None and layer not in record["layers"]:
        _check_layer(adata, layer, where)
        msg = (
            f"{where}: layer={layer!r} is not a layer of the cube uns[{RECORD_KEY!r}] records "
            f"(X holds {main!r}; its layers are {record['layers']}): omit layer= to rebuild "
            f"that cube, or delete uns[{RECORD_KEY!r}] to read layers[{layer!r}] as the "
            f"counts of any pseudobulk AnnData"
        )
        raise InputError(msg)
    moved = layer == main and layer in adata.layers
    sums: dict[str | None, np.ndarray] = {
        None: _pseudobulk_matrix(adata, layer if moved else None, where)
    }
    if moved:  # checked here, where it is known to come from layers[layer], not X
        dtype = record["dtypes"]["layers"][main]
        sums[None] = _as_dtype(sums[None], dtype, f"{where}.layers[{layer!r}]")
    for name in record["layers"]:
        if name != main and name in adata.layers:
            sums[name] = _pseudobulk_matrix(adata, name, where)
    return sums


def to_mudata(cube: Cube, *, layer: str = "counts") -> mudata.MuData:
    """Make a MuData with one modality per group.

    Each modality has one observation per sample (all samples, ``n_cells`` 0 for empty
    profiles) with the sample covariates and ``n_cells`` in ``obs``, the feature table as
    ``var``, the layer as ``X`` and the other layers in ``.layers``; the modalities share
    both axes (MuData ``axis=-1``). The global ``obs`` is the sample table, the global
    ``var`` the feature table; ``uns["cytepool"]`` is the record :func:`from_mudata` rebuilds the
    cube from (with the group table and the modality name of each group).

    A group's modality name is its id when ``.h5mu`` and ``.zarr`` files can hold that name,
    else one they can, unique and always the same for the same cube: each ``/``, ``\\`` and
    control character (NUL...) becomes ``_``; a name that is empty, only dots or the name of
    a Zarr metadata file (``zarr.json``, ``.zattrs``...) gets a leading ``_`` (``"."``:
    ``"_."``); a name past 128 bytes of UTF-8 is cut and ends in ``~`` and 8 hex digits of a
    digest of the id; a name an earlier group took gets ``_`` appended (``"T/NK"`` and
    ``"T_NK"``: ``"T_NK"`` and ``"T_NK_"``). :func:`from_mudata` gives each group its id
    back from the record. An id holding a NUL goes to ``.zarr`` only: HDF5 strings
    (``.h5mu``, ``.h5ad``) cannot hold one, and h5py refuses to write it.

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
    tables = cube_tables(cube)
    cells = np.asarray(cube.cells, dtype=np.int64)
    modalities = modality_names(tables["groups"].index)
    samples = writable(tables["samples"])
    samples.index.name = None
    features = writable(tables["features"])
    mods = {}
    for g, name in enumerate(modalities):
        obs = samples.copy()
        obs[free_name("n_cells", obs.columns, "")] = cells[g]
        values = {key: np.asarray(cube.profiles(g, layer=key)) for key in names}
        mods[name] = ad.AnnData(values.pop(layer), obs=obs, var=features, layers=values)
    with mudata_defaults(md):
        mdata = md.MuData(mods, axis=-1)  # every modality has the same obs and var
    record = make_record(cube, tables, layer, cells)
    record["modalities"] = modalities
    if mods:
        mdata.obs = samples
        mdata.var = features
    else:  # no groups (no cells were pooled, say): no modality holds the features
        record["features"] = writable(tables["features"])
    mdata.uns[RECORD_KEY] = record
    return mdata


def from_mudata(mdata: mudata.MuData, *, cells_key: str | None = None) -> Cube:
    """Make a cube from a MuData with one modality per group, the inverse of :func:`to_mudata`.

    Each modality holds one observation per sample (``obs_names`` are the sample ids) and
    the cell numbers in ``obs`` (``cells_key``, or ``n_cells`` / ``psbulk_cells`` /
    ``n_obs_aggregated``); every modality must have the same features. With the record of
    :func:`to_mudata` the cube is rebuilt exactly (see :func:`from_pseudobulk`), the cell
    numbers read (without ``cells_key``) from the column :func:`to_mudata` wrote them to
    (``n_cells``, or ``n_cells_`` when a sample covariate is named ``n_cells``), which must
    hold the numbers the record holds, or taken from the record if that column is gone;
    without the record, the groups are the modality names and the layer ``"counts"`` holds
    each modality's ``X``.

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
        As :func:`from_pseudobulk`, and if the modalities' features differ or, with the
        record, the cell numbers differ from the record's.

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

    record = read_record(mdata.uns, "mdata")
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
        group = group_of.get(name, name)
        frames.append(
            pd.DataFrame(
                {
                    "sample_id": obs.index.to_numpy(),
                    "group_id": group,
                    "n_cells": _modality_cells(obs, cells_key, record, group, where),
                },
            )
        )
        for layer in layers:
            sums.setdefault(layer, []).append(_pseudobulk_matrix(modality, layer, where))
    obs = concat_frames(frames)
    stacked = {layer: np.concatenate(blocks) for layer, blocks in sums.items()}
    return _from_modality_rows(obs, stacked, var, record, cells_key)


def _modality_cells(
    obs: pd.DataFrame,
    cells_key: str | None,
    record: dict[str, Any] | None,
    group: str,
    where: str,
) -> np.ndarray:
    """The cell numbers of a modality's samples: its column ``cells_key``, or without it
    ``n_cells`` / ``psbulk_cells`` / ``n_obs_aggregated``. With the record and no
    ``cells_key``, the column :func:`to_mudata` wrote them to (``n_cells``, or ``n_cells_``
    when a sample covariate is named ``n_cells``), which must hold the recorded numbers; the
    recorded numbers if that column is gone."""
    if cells_key is not None or record is None:
        return _whole_numbers(obs[_cells_column(obs, cells_key, where)], where)
    samples = record["samples"]
    key = free_name("n_cells", samples.columns, "")
    positions = samples.index.get_indexer(obs.index.astype(str))
    known = positions >= 0
    recorded = np.zeros(len(obs), dtype=np.int64)
    if group in record["groups"].index:  # unknown ids: an error of _recorded_parts
        recorded[known] = record["cells"][record["groups"].index.get_loc(group), positions[known]]
    if key not in obs.columns:
        return recorded
    here = _whole_numbers(obs[key], where)
    differ = np.flatnonzero(known & (here != recorded))
    if differ.size:
        i = int(differ[0])
        msg = (
            f"{where}: obs column {key!r}, where to_mudata wrote the cell numbers, holds "
            f"{here[i]} for sample {obs.index[i]!r}, but uns[{RECORD_KEY!r}] records "
            f"{recorded[i]}: pass cells_key= naming the column of cell numbers, or delete "
            f"uns[{RECORD_KEY!r}] to read the modalities without the record"
        )
        raise InputError(msg)
    return here


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
    obs = pd.DataFrame({"sample_id": [], "group_id": []}, dtype=object)
    obs["n_cells"] = np.zeros(0, dtype=np.int64)
    sums: dict[str | None, np.ndarray] = {
        None if name == record["layer"] else name: np.zeros((0, len(features)))
        for name in record["layers"]
    }
    return _from_modality_rows(obs, sums, features, record, None)


def mudata_defaults(md: Any) -> contextlib.AbstractContextManager[Any]:
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
    sample_codes, sample_ids = label_codes(obs, keys[0], "sample_key", f"{where}.obs")
    group_codes, group_ids = label_codes(obs, keys[1], "group_key", f"{where}.obs")
    cells = _whole_numbers(obs[_cells_column(obs, cells_key, where)], where)
    _check_unique_profiles(sample_codes, group_codes, sample_ids, group_ids, where)
    features = features_table(var, None, f"{where}.var")
    if record is None:
        tables = axis_tables(
            obs,
            keys,
            (sample_codes, group_codes),
            (sample_ids, group_ids),
            covariates,
            f"{where}.obs",
            exclude=(_cells_column(obs, cells_key, where), *_CELLS_COLUMNS, _COUNTS_COLUMN),
        )
        layers = {"counts": _foreign_layer(sums[None], where)}
        if PROPS_LAYER in sums:
            layers["detected"] = _detected(sums[PROPS_LAYER], cells, where)
        parts = _Parts(tables[0], tables[1], layers, None, {}, None)
    else:
        parts = _recorded_parts(record, sums, sample_ids, group_ids, cells, where)
        parts.samples, parts.groups, keep = _kept_axes(
            record, parts, (sample_codes, group_codes), (sample_ids, group_ids), cells
        )
        parts.normalization = _kept_normalization(parts, keep)
        features = restore(features, record["dtypes"], "features")
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
    samples = restore(record["samples"], dtypes, "samples")
    groups = restore(record["groups"], dtypes, "groups")
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
            layers[name] = _as_dtype(sums[key], dtype, _matrix_label(where, key))
    return _Parts(
        samples,
        groups,
        layers,
        record.get("normalization"),
        record["metadata"],
        record["provenance"],
    )


def _matrix_label(where: str, key: str | None) -> str:
    """The matrix the sums ``sums[key]`` of :func:`_recorded_parts` were read from: ``X``
    for key None (whatever the layer's name in the cube), else ``layers[key]``; of every
    modality for a MuData."""
    matrix = "X" if key is None else f"layers[{key!r}]"
    return f"{where}: the modalities' {matrix}" if where == "mdata" else f"{where}.{matrix}"


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
    return stamped(cube, parts.provenance or (), *stamp)


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


def _totals(rows: np.ndarray) -> np.ndarray:
    """Each profile's total in float64: decoupler's ``psbulk_counts``, as in filter_profiles."""
    return np.asarray(rows, dtype=np.float64).sum(axis=1)


def _props(detected: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """``detected / cells`` per profile row, float64; 0 for a profile of 0 cells (decoupler's)."""
    n = np.asarray(cells, dtype=np.float64)[:, None]
    out = np.zeros(detected.shape, dtype=np.float64)
    np.divide(detected, n, out=out, where=n > 0, casting="unsafe")
    return out


def _detected(props: np.ndarray, cells: np.ndarray, where: str) -> np.ndarray:
    """The numbers of detecting cells from decoupler's ``psbulk_props``, exactly, or InputError."""
    values = np.asarray(props, dtype=np.float64) * cells.astype(np.float64)[:, None]
    whole = np.rint(values)
    off = np.abs(values - whole) > _WHOLE
    if off.any():
        row, column = (int(k) for k in np.argwhere(off)[0])
        msg = (
            f"{where}.layers[{PROPS_LAYER!r}] x cells is not a number of cells (row {row}, "
            f"column {column}: {props[row, column]!r} x {cells[row]} = {values[row, column]}); "
            f"expected decoupler's fractions of cells: delete the layer to read the rest"
        )
        raise InputError(msg)
    return whole.astype(np.int64)


def _whole_numbers(column: pd.Series, where: str) -> np.ndarray:
    """Cell numbers: non-null whole numbers from 0 to the int64 maximum, of a numeric column,
    as int64, exactly: integers are read as integers (never through float64, which rounds
    those past 2**53), floats must be whole and in range."""
    import pandas as pd

    dtype = column.dtype
    if pd.api.types.is_integer_dtype(dtype):
        values = column.to_numpy(dtype=getattr(dtype, "numpy_dtype", dtype), na_value=0)
        bad = column.isna().to_numpy() | (values < 0) | (values > _INT64_MAX)
    elif pd.api.types.is_float_dtype(dtype):
        values = column.to_numpy(dtype=np.float64, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(values) | (values < 0) | (values >= 2.0**63)
            bad |= np.mod(values, 1) != 0
    else:
        raise _not_numbers(column, where)
    if bad.any():
        row = int(np.argmax(bad))
        value = column.iloc[row]
        value = value.item() if isinstance(value, np.generic) else value
        msg = (
            f"{where}: obs column {column.name!r} must hold cell numbers (whole numbers from 0 "
            f"to {_INT64_MAX}) but holds {value!r} in row {column.index[row]!r}: "
            f"correct it (or, if it is not the column of cell numbers, pass cells_key= naming "
            f"that column)"
        )
        raise InputError(msg)
    return values.astype(np.int64)


def _not_numbers(column: pd.Series, where: str) -> InputError:
    """The error for a column of cell numbers whose dtype is not of numbers (strings,
    booleans, categories, times), which were taken as numbers (True as 1 cell)."""
    first = column.iloc[0] if len(column) else None
    first = first.item() if isinstance(first, np.generic) else first
    example = f" (e.g. {first!r} in row {column.index[0]!r})" if len(column) else ""
    msg = (
        f"{where}: obs column {column.name!r} must hold cell numbers, of an integer or float "
        f"dtype, but is of dtype {column.dtype}{example}: convert it (obs[{column.name!r}]"
        f".astype('int64')) or, if it is not the column of cell numbers, pass cells_key= "
        f"naming that column"
    )
    return InputError(msg)


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
        f"{where}: obs has no cell numbers (looked for {', '.join(map(repr, _CELLS_COLUMNS))}): "
        f"pass cells_key= naming the obs column that holds the number of cells of each "
        f"profile (sc.get.aggregate records them as 'n_obs_aggregated' from scanpy 1.12 on, "
        f"not before; count the cells per profile and add them to obs)"
    )
    raise InputError(msg)


def _check_layer(adata: anndata.AnnData, layer: str | None, where: str) -> None:
    """UnknownIdError if ``adata`` has no layer ``layer`` (None: ``X``, always there)."""
    if layer is not None and layer not in adata.layers:
        msg = f"{where} has no layer {layer!r}; its layers are {layer_keys(adata)}"
        raise UnknownIdError(msg, unknown=layer, known=layer_keys(adata))


def _pseudobulk_matrix(adata: anndata.AnnData, layer: str | None, where: str) -> np.ndarray:
    """The dense sums of a pseudobulk AnnData (``X`` or a layer), checked."""
    _check_layer(adata, layer, where)
    values: Any = adata.X if layer is None else adata.layers[layer]
    label = f"{where}.X" if layer is None else f"{where}.layers[{layer!r}]"
    if values is None:
        hint = f" pass layer= naming one of {layer_keys(adata)}" if layer_keys(adata) else ""
        msg = f"{label} is empty: there are no sums to read;{hint}"
        raise InputError(msg)
    if hasattr(values, "compute"):  # dask, from a lazily opened AnnData
        values = values.compute()
    if is_sparse_dataset(values):  # a backed AnnData's sparse matrix, on disk
        values = values.to_memory()
    if hasattr(values, "toarray"):
        values = values.toarray()
    values = np.asarray(values)
    check_values(values, label)
    return values
