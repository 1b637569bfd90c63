"""The filters every pseudobulk analysis starts with, on the cube: profiles, then features.

``filter_profiles`` empties the profiles with too few cells or counts (decoupler's
``pp.filter_samples``); ``filter_features`` (edgeR's ``filterByExpr``, decoupler's
``pp.filter_by_expr``) and ``filter_by_prop`` (decoupler's ``pp.filter_by_prop``) decide per
group, over the group's non-empty profiles, and keep the features that pass in at least one
group. Each reads one group at a time and returns the parts of a new cube.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from cytepool import _derive
from cytepool import fingerprint as _fp
from cytepool._parts import CubeParts
from cytepool._records import stamp
from cytepool.errors import InputError, InputTypeError, UnknownIdError
from cytepool.layers import Index, LazyLayer

__all__ = ["EmptiedLayer", "filter_by_prop", "filter_features", "filter_profiles", "totals"]

_TOLERANCE = 1e-14  # edgeR's and decoupler's tolerance on the sample-size and total cut-offs


class EmptiedLayer(LazyLayer):
    """``base`` with the profiles where ``empty`` is True set to 0 (``Cube.filter_profiles``)."""

    def __init__(self, base: LazyLayer, empty: np.ndarray[Any, np.dtype[np.bool_]]):
        self.base = base
        self.empty = empty
        self.name = base.name
        self.dtype = base.dtype
        self.shape = base.shape

    def read(
        self, group: int, samples: Index | None = None, features: Index | None = None
    ) -> np.ndarray[Any, Any]:
        """Read one group's block from the base layer, with the emptied profiles 0."""
        block = self.base.read(group, samples, features)
        row = self.empty[group] if samples is None else self.empty[group][samples]
        if not row.any():
            return block
        block = np.array(block)  # the base may give a read-only view
        block[row] = 0
        return block


def totals(block: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The total of every profile (row) of a block, in float64 (decoupler's ``psbulk_counts``)."""
    return np.asarray(block, dtype=np.float64).sum(axis=1)


def _number(value: Any, name: str, operation: str, *, upper: float | None = None) -> float:
    """A finite real number >= 0 (and <= ``upper``), else InputTypeError / InputError."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool | np.bool_):
        msg = f"{operation}: {name} must be a number, found {value!r}"
        raise InputTypeError(msg)
    try:
        number = float(value)
    except OverflowError:  # an integer past the largest float
        number = math.inf
    if not math.isfinite(number) or number < 0 or (upper is not None and number > upper):
        bound = f">= 0 and <= {upper}" if upper is not None else ">= 0"
        found = reprlib.repr(value)  # a huge integer shortened
        msg = f"{operation}: {name} must be a finite number {bound}, found {found}"
        raise InputError(msg)
    return number


def _plain(value: Any) -> Any:
    """A parameter as provenance records it: numpy scalars as Python ones, and real numbers
    other than int and float (such as a ``fractions.Fraction``) as the float they were used as."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, numbers.Real) and not isinstance(value, int | float):
        return float(value)
    return value


def _restamp(parts: CubeParts, new: CubeParts, operation: str, params: Mapping[str, Any]):
    """``new`` with the provenance of ``parts`` and one record of ``operation``."""
    plain = {k: _plain(v) for k, v in params.items()}
    record = stamp(operation, plain, (parts.known_fingerprint(),))
    return new.with_provenance((*parts.provenance, record))


# --------------------------------------------------------------------------- profiles


def filter_profiles(parts: CubeParts, min_cells: Any, min_counts: Any, layer: str) -> CubeParts:
    """The parts of ``Cube.filter_profiles``: failing profiles emptied (0 cells, 0 values)."""
    low_cells = _number(min_cells, "min_cells", "filter_profiles")
    low_counts = _number(min_counts, "min_counts", "filter_profiles")
    parts.layer(layer)
    keep = parts.cells >= low_cells
    for g in range(parts.shape[0]):
        if low_counts > 0 and keep[g].any():
            rows = np.flatnonzero(keep[g])
            keep[g, rows] = totals(parts.read(layer, g, rows)) >= low_counts
    empty = ~keep & (parts.cells > 0)
    cells = np.where(empty, 0, parts.cells)
    layers: dict[str, tuple[LazyLayer, Any]] = {}
    digests: dict[str, list[str | None]] = {}
    for name, base in parts.layers.items():
        lazy = EmptiedLayer(base, empty)
        layers[name] = (lazy, lazy)
        known = parts.group_digests[name]
        digests[name] = [None if empty[g].any() else d for g, d in enumerate(known)]
    new = CubeParts.derived(
        tables=parts.tables,
        layers=layers,
        cells=cells,
        normalization=parts.normalization,
        metadata=parts.metadata,
        provenance=parts.provenance,
        group_digests=digests,
        algorithm=parts.algorithm,
    )
    params = {"min_cells": min_cells, "min_counts": min_counts, "layer": layer}
    return _restamp(parts, new, "filter_profiles", params)


# --------------------------------------------------------------------------- features


def _design(parts: CubeParts, group: Any) -> np.ndarray[Any, Any] | None:
    """The codes of the samples' values in the samples-table column ``group`` (or None)."""
    if group is None:
        return None
    table = parts.tables["samples"]
    if not isinstance(group, str):
        msg = f"filter_features: group must be a column name or None, found {group!r}"
        raise InputTypeError(msg)
    if group not in table.frame.columns:
        columns = table.frame.columns
        msg = f"filter_features: no column {group!r} in the samples table; found {columns}"
        raise UnknownIdError(msg, unknown=group, known=table.frame.columns)
    # the canonical keys of the fingerprint: None for every kind of missing value (None,
    # NaN, NaT, pandas' <NA> of nullable columns, polars' and arrow's nulls)
    keys = _fp.canonical_column(table.frame.get_column(group), group).row_keys()
    missing = [table.ids[i] for i, k in enumerate(keys) if k is None]
    if missing:
        msg = (
            f"filter_features: {len(missing)} samples have no value in {group!r} (such as "
            f"{missing[:5]}); give every sample a value or select the others"
        )
        raise InputError(msg)
    codes: dict[Any, int] = {}
    return np.array([codes.setdefault(k, len(codes)) for k in keys], dtype=np.intp)


def _min_sample_size(design: np.ndarray[Any, Any] | None, n: int, large_n: float, prop: float):
    """edgeR's minimum number of samples: the smallest design group, eased when large."""
    size = float(n if design is None else np.bincount(design)[np.unique(design)].min())
    return large_n + (size - large_n) * prop if size > large_n else size


def _expressed(values: np.ndarray[Any, Any], min_size: float, min_count: float, total: float):
    """filterByExpr on one group's profiles ``(n_profiles, n_features)`` as decoupler does it."""
    x = np.asarray(values, dtype=np.float64)
    lib_size = x.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cutoff = float(min_count / np.median(lib_size) * 1e6)
        cpm = x / lib_size.reshape(-1, 1) * 1e6
    sample_size = np.round(np.sum(cpm >= cutoff, axis=0))
    return (sample_size >= min_size - _TOLERANCE) & (x.sum(axis=0) >= total - _TOLERANCE)


def filter_features(
    parts: CubeParts,
    *,
    min_count: Any,
    min_total_count: Any,
    large_n: Any,
    min_prop: Any,
    group: Any,
    layer: str,
) -> CubeParts:
    """The parts of ``Cube.filter_features``: the features filterByExpr keeps in any group."""
    operation = "filter_features"
    count = _number(min_count, "min_count", operation)
    total = _number(min_total_count, "min_total_count", operation)
    large = _number(large_n, "large_n", operation)
    prop = _number(min_prop, "min_prop", operation, upper=1.0)
    design = _design(parts, group)
    parts.layer(layer)
    keep = np.zeros(parts.shape[2], dtype=bool)
    for g in range(parts.shape[0]):
        rows = np.flatnonzero(parts.cells[g] > 0)
        if rows.size:
            codes = None if design is None else design[rows]
            size = _min_sample_size(codes, rows.size, large, prop)
            keep |= _expressed(parts.read(layer, g, rows), size, count, total)
    params = {
        "min_count": min_count,
        "min_total_count": min_total_count,
        "large_n": large_n,
        "min_prop": min_prop,
        "group": group,
        "layer": layer,
    }
    return _select_features(parts, keep, operation, params)


def filter_by_prop(parts: CubeParts, min_prop: Any, min_samples: Any) -> CubeParts:
    """The parts of ``Cube.filter_by_prop``: features detected in enough cells and profiles."""
    operation = "filter_by_prop"
    prop = _number(min_prop, "min_prop", operation, upper=1.0)
    least = _number(min_samples, "min_samples", operation)
    if "detected" not in parts.layers:
        msg = (
            f"filter_by_prop needs the layer 'detected', but the cube has layers "
            f"{list(parts.layers)}; pool with layers=(..., 'detected')"
        )
        raise UnknownIdError(msg, unknown="detected", known=parts.layers)
    keep = np.zeros(parts.shape[2], dtype=bool)
    for g in range(parts.shape[0]):
        rows = np.flatnonzero(parts.cells[g] > 0)
        if rows.size:
            detected = np.asarray(parts.read("detected", g, rows), dtype=np.float64)
            fractions = detected / parts.cells[g, rows].astype(np.float64)[:, None]
            keep |= np.sum(fractions >= prop, axis=0) >= least
    params = {"min_prop": min_prop, "min_samples": min_samples}
    return _select_features(parts, keep, operation, params)


def _select_features(
    parts: CubeParts, keep: np.ndarray[Any, Any], operation: str, params: Mapping[str, Any]
) -> CubeParts:
    new = _derive.select(parts, samples=None, groups=None, features=keep)
    return _restamp(parts, new, operation, params)
