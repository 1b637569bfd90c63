"""New cubes from one cube, lazily: selections, merged groups, pooled samples.

Each function takes the :class:`~cytepool._parts.CubeParts` of a cube and returns those of
the new cube, with the input's metadata and provenance and one more record; layers become
lazy (:mod:`cytepool.layers`), so nothing is read until a method needs values.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from cytepool import fingerprint as _fp
from cytepool._parts import CubeParts
from cytepool._records import Normalization, stamp
from cytepool._table import as_items, check_unique
from cytepool._value_texts import value_text
from cytepool.errors import InputError, InputTypeError, UnknownIdError
from cytepool.layers import (
    Accumulator,
    GroupSumLayer,
    Index,
    LazyLayer,
    SampleSumLayer,
    SelectLayer,
    is_full,
)

__all__ = ["ids_parameter", "merge_groups", "pool_samples", "select", "sum_cells"]

IDS_IN_PROVENANCE = 1000


def _successor(
    parts: CubeParts, operation: str, parameters: Mapping[str, Any], **new: Any
) -> CubeParts:
    """Parts made from ``parts`` alone by ``operation``: ``new`` (tables, layers, cells,
    normalization, group digests) with the input's metadata and provenance, plus a record."""
    record = stamp(operation, parameters, (parts.known_fingerprint(),))
    provenance = (*parts.provenance, record)
    return CubeParts.derived(
        **new, metadata=parts.metadata, provenance=provenance, algorithm=parts.algorithm
    )


def ids_parameter(ids: Sequence[str] | None) -> Any:
    """Selected ids for a provenance record: the list, or its count and digest when long."""
    if ids is None:
        return None
    if len(ids) <= IDS_IN_PROVENANCE:
        return list(ids)
    h = hashlib.sha256()
    for i in ids:
        h.update(_fp.prefixed_text(i))
    return {"count": len(ids), "sha256": h.hexdigest()}


def select(parts: CubeParts, *, samples: Any, groups: Any, features: Any) -> CubeParts:
    """The parts of ``Cube.select``."""
    t = parts.tables
    gi = t["groups"].resolve(groups)
    si = t["samples"].resolve(samples)
    fi = t["features"].resolve(features)
    tables = {
        "groups": t["groups"].take(gi),
        "samples": t["samples"].take(si),
        "features": t["features"].take(fi),
    }
    cells = parts.cells if gi is None else parts.cells[gi]
    cells = cells if si is None else cells[:, si]
    norm = parts.normalization
    if norm is not None:
        factors = norm.factors if gi is None else norm.factors[gi]
        norm = Normalization(norm.method, factors if si is None else factors[:, si])
    layers: dict[str, tuple[LazyLayer, Any]] = {}
    digests: dict[str, list[str | None]] = {}
    keep = is_full(si, parts.shape[1]) and is_full(fi, parts.shape[2])
    for name, layer in parts.layers.items():
        checked = cells if layer.checked_against(parts.cells) else None  # read checked
        lazy = SelectLayer(layer, gi, si, fi, cells=checked)
        layers[name] = (lazy, lazy)
        if keep:
            known = parts.group_digests[name]
            digests[name] = list(known) if gi is None else [known[g] for g in gi.tolist()]
    params = {
        "samples": ids_parameter(None if si is None else tables["samples"].ids),
        "groups": ids_parameter(None if gi is None else tables["groups"].ids),
        "features": ids_parameter(None if fi is None else tables["features"].ids),
    }
    made = {"tables": tables, "layers": layers, "cells": cells, "normalization": norm}
    return _successor(parts, "select", params, **made, group_digests=digests)


def merge_groups(parts: CubeParts, groups: Mapping[str, Sequence[str]]) -> CubeParts:
    """The parts of ``Cube.merge_groups``."""
    if not isinstance(groups, Mapping):
        msg = f"merge_groups: expected a mapping of new id to group ids, found {groups!r}"
        raise InputTypeError(msg)
    table = parts.tables["groups"]
    owner: dict[int, str] = {}
    members_of: dict[str, Index] = {}
    for new, old in groups.items():
        if not isinstance(new, str):
            msg = f"merge_groups: new group ids must be strings, found {new!r}"
            raise InputTypeError(msg)
        if isinstance(old, str) or not isinstance(old, Iterable):
            msg = f"merge_groups: {new!r} must map to a list of group ids, found {old!r}"
            raise InputTypeError(msg)
        idx = table.locate(list(as_items(old)))
        if idx.size == 0:
            msg = f"merge_groups: {new!r} merges no groups"
            raise InputError(msg)
        _check_listed_once(table.ids, idx, new)
        for i in idx.tolist():
            if i in owner:
                msg = (
                    f"merge_groups: group {table.ids[i]!r} is merged twice "
                    f"(into {owner[i]!r} and {new!r})"
                )
                raise InputError(msg)
            owner[i] = new
        members_of[new] = idx
    _check_not_kept(table.ids, owner, members_of)
    members: list[Index] = []
    new_ids: list[str] = []
    placed: set[str] = set()  # the new ids placed (a kept id may equal one: an error below)
    for i, gid in enumerate(table.ids):
        if i not in owner:
            members.append(np.array([i], dtype=np.intp))
            new_ids.append(gid)
        elif owner[i] not in placed:
            placed.add(owner[i])
            members.append(members_of[owner[i]])
            new_ids.append(owner[i])
    check_unique(new_ids, "groups", "would hold")
    tables = dict(parts.tables, groups=table.pooled(members, new_ids))
    cells = sum_cells(
        [parts.cells[m] for m in members],
        axis=0,
        ids=new_ids,
        what="group",
        parts_shape=parts.cells.shape,
    )
    layers: dict[str, tuple[LazyLayer, Any]] = {}
    digests: dict[str, list[str | None]] = {}
    for name, layer in parts.layers.items():
        lazy = GroupSumLayer(layer, members, name=name, group_ids=new_ids)
        layers[name] = (lazy, lazy)
        known = parts.group_digests[name]
        digests[name] = [known[m[0]] if len(m) == 1 else None for m in members]
    params = {"groups": {k: [table.ids[i] for i in v.tolist()] for k, v in members_of.items()}}
    made = {"tables": tables, "layers": layers, "cells": cells, "normalization": None}
    return _successor(parts, "merge_groups", params, **made, group_digests=digests)


def _check_listed_once(ids: Sequence[str], idx: Index, new: str) -> None:
    """InputError if a group is listed more than once in the members ``idx`` of ``new``."""
    seen: set[int] = set()
    for i in idx.tolist():
        if i in seen:
            msg = (
                f"merge_groups: group {ids[i]!r} is listed twice in the members of {new!r}; "
                "list each group once"
            )
            raise InputError(msg)
        seen.add(i)


def _check_not_kept(ids: Sequence[str], owner: Mapping[int, str], merges: Iterable[str]) -> None:
    """InputError if a new id of a merge is the id of a group that is kept."""
    kept = {gid for i, gid in enumerate(ids) if i not in owner}
    clash = [new for new in merges if new in kept]
    if clash:
        msg = (
            f"merge_groups: the new ids {clash} are ids of groups that are kept; give the "
            "merge another id, or merge that group too"
        )
        raise InputError(msg)


def pool_samples(parts: CubeParts, by: str) -> CubeParts:
    """The parts of ``Cube.pool_samples``."""
    table = parts.tables["samples"]
    if not isinstance(by, str):
        msg = f"pool_samples: by must be a column name, found {by!r}"
        raise InputTypeError(msg)
    if by not in table.frame.columns:
        msg = f"pool_samples: no column {by!r} in the samples table; found {table.frame.columns}"
        raise UnknownIdError(msg, unknown=by, known=table.frame.columns)
    series = table.frame.get_column(by)
    canonical = _fp.canonical_column(series, by)
    keys = canonical.row_keys()
    missing = [table.ids[i] for i, k in enumerate(keys) if k is None]
    if missing:
        msg = (
            f"pool_samples: {len(missing)} samples have no value in {by!r} "
            f"(such as {missing[:5]}); give every sample a value or select the others"
        )
        raise InputError(msg)
    decoded = canonical.tag.startswith("categorical[")  # named by the keys: no values asked
    raw = keys if decoded else series.to_list()
    order: dict[Any, list[int]] = {}
    names: dict[Any, str] = {}
    for i, key in enumerate(keys):
        order.setdefault(key, []).append(i)
        if key not in names:  # as Python writes the value, whatever the backend
            names[key] = value_text(canonical.tag, key, raw[i])
    members = [np.array(v, dtype=np.intp) for v in order.values()]
    new_ids = list(names.values())
    check_unique(new_ids, "samples", "would hold")
    tables = dict(parts.tables, samples=table.pooled(members, new_ids))
    cells = sum_cells(
        [parts.cells[:, m] for m in members],
        axis=1,
        ids=new_ids,
        what="sample",
        parts_shape=parts.cells.shape,
    )
    layers: dict[str, tuple[LazyLayer, Any]] = {}
    for name, layer in parts.layers.items():
        lazy = SampleSumLayer(layer, members, name=name, group_ids=parts.tables["groups"].ids)
        layers[name] = (lazy, lazy)
    made = {"tables": tables, "layers": layers, "cells": cells, "normalization": None}
    return _successor(parts, "pool_samples", {"by": by}, **made)


def sum_cells(
    parts: Sequence[np.ndarray[Any, Any]],
    *,
    axis: int,
    ids: Sequence[str],
    what: str,
    parts_shape: tuple[int, ...],
) -> np.ndarray[Any, Any]:
    """Sum each part along ``axis`` exactly, as int64; stack the sums along ``axis``."""
    sums = []
    for part, pid in zip(parts, ids, strict=True):
        moved = np.moveaxis(part, axis, 0)
        acc = Accumulator(np.dtype(np.int64), moved.shape[1:], where=f"cells, {what} {pid!r}")
        for row in moved:
            acc.add(row)
        sums.append(acc.result())
    if not sums:
        shape = list(parts_shape)
        shape[axis] = 0
        return np.zeros(shape, dtype=np.int64)
    return np.stack(sums, axis=axis)
