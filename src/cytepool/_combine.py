"""Cubes joined along an axis (:func:`cytepool.concat`) or added up (:func:`cytepool.add`), lazily.

The functions take the :class:`~cytepool._parts.CubeParts` of cubes already known to be
cubes, align the other axes by id to the first cube's order, and return the parts of the
new cube, whose layers are lazy joins or sums.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cytepool import fingerprint as _fp
from cytepool._parts import CubeParts
from cytepool._records import AXES, Normalization, Provenance, stamp
from cytepool._table import AxisTable
from cytepool.errors import InputError, InputTypeError
from cytepool.layers import Accumulator, ConcatLayer, Index, LazyLayer, SelectLayer, SumLayer

__all__ = ["add", "concat"]


def _check_layers(cubes: Sequence[CubeParts], operation: str) -> None:
    """InputError/InputTypeError unless the cubes have the same layers and data types."""
    first = cubes[0]
    for i, c in enumerate(cubes[1:], start=1):
        mine = {n: layer.dtype.name for n, layer in first.layers.items()}
        theirs = {n: layer.dtype.name for n, layer in c.layers.items()}
        if sorted(mine) != sorted(theirs):
            msg = (
                f"{operation}: cube {i} has layers {sorted(theirs)}, cube 0 has {sorted(mine)}; "
                "the cubes must have the same layers"
            )
            raise InputError(msg)
        for name in mine:
            if mine[name] != theirs[name]:
                msg = (
                    f"{operation}: layer {name!r} is {theirs[name]} in cube {i} and "
                    f"{mine[name]} in cube 0; the data types must match"
                )
                raise InputTypeError(msg)


def _align(first: AxisTable, other: AxisTable, axis: str, operation: str, i: int) -> Index | None:
    """Positions in ``other`` of ``first``'s ids (None if already in the same order)."""
    if first.ids == other.ids:
        return None
    if set(first.ids) != set(other.ids):
        extra = sorted(set(other.ids) - set(first.ids))[:5]
        missing = sorted(set(first.ids) - set(other.ids))[:5]
        msg = (
            f"{operation}: cube {i} does not hold the same {axis} as cube 0 "
            f"(not in cube 0: {extra}; missing: {missing})"
        )
        raise InputError(msg)
    return other.locate(first.ids)


def _aligned(cube: CubeParts, perms: Mapping[str, Index | None]) -> dict[str, LazyLayer]:
    if all(p is None for p in perms.values()):
        return dict(cube.layers)
    return {
        name: SelectLayer(layer, perms.get("groups"), perms.get("samples"), perms.get("features"))
        for name, layer in cube.layers.items()
    }


def _aligned_2d(array: np.ndarray[Any, Any], perms: Mapping[str, Index | None]) -> Any:
    g, s = perms.get("groups"), perms.get("samples")
    out = array if g is None else array[g]
    return out if s is None else out[:, s]


def _merged_provenance(cubes: Sequence[CubeParts]) -> tuple[Provenance, ...]:
    records: list[Provenance] = []
    for cube in cubes:
        for record in cube.provenance:
            if record not in records:
                records.append(record)
    return tuple(records)


def _shared_metadata(cubes: Sequence[CubeParts]) -> dict[str, Any]:
    first = cubes[0].metadata
    return first if all(c.metadata == first for c in cubes) else {}


def _shared_algorithm(cubes: Sequence[CubeParts]) -> str:
    """The digest algorithm of cubes that all have one (SHA-256 of old files), else BLAKE3."""
    algorithms = {c.algorithm for c in cubes}
    return algorithms.pop() if len(algorithms) == 1 else _fp.BLAKE3


def _concat_normalization(
    cubes: Sequence[CubeParts], perms: Sequence[Mapping[str, Index | None]], axis: str
) -> Normalization | None:
    norms = [c.normalization for c in cubes]
    if all(n is None for n in norms):
        return None
    methods = {None if n is None else n.method for n in norms}
    if len(methods) != 1:
        msg = (
            f"concat: the cubes have different normalizations {sorted(map(str, methods))}; "
            "build them with the same normalization method, or without one"
        )
        raise InputError(msg)
    factors = [_aligned_2d(n.factors, p) for n, p in zip(norms, perms, strict=True) if n]
    method = norms[0].method if norms[0] else ""
    if axis == "features":
        if not all(np.array_equal(f, factors[0]) for f in factors):
            msg = "concat: the cubes' normalization factors differ; along features they must match"
            raise InputError(msg)
        return norms[0]
    return Normalization(method, np.concatenate(factors, axis=AXES.index(axis)))


def concat(cubes: Sequence[CubeParts], axis: str) -> CubeParts:
    """The parts of :func:`cytepool.concat` (``axis`` already checked)."""
    _check_layers(cubes, "concat")
    first = cubes[0]
    others = [a for a in AXES if a != axis]
    perms = [dict.fromkeys(others)] + [
        {a: _align(first.tables[a], c.tables[a], a, "concat", i) for a in others}
        for i, c in enumerate(cubes[1:], start=1)
    ]
    tables = dict(first.tables)
    tables[axis] = AxisTable.joined([c.tables[axis] for c in cubes], axis)
    cells_parts = [_aligned_2d(c.cells, p) for c, p in zip(cubes, perms, strict=True)]
    if axis == "features":
        for i, part in enumerate(cells_parts[1:], start=1):
            if not np.array_equal(part, cells_parts[0]):
                g, s = np.argwhere(part != cells_parts[0])[0]
                msg = (
                    f"concat: along features the cells must match; cube {i} has {part[g, s]} "
                    f"cells at group {tables['groups'].ids[g]!r}, sample "
                    f"{tables['samples'].ids[s]!r}, cube 0 has {cells_parts[0][g, s]}"
                )
                raise InputError(msg)
        cells = cells_parts[0]
    else:
        cells = np.concatenate(cells_parts, axis=AXES.index(axis))
    norm = _concat_normalization(cubes, perms, axis)
    aligned = [_aligned(c, p) for c, p in zip(cubes, perms, strict=True)]
    layers: dict[str, tuple[LazyLayer, Any]] = {}
    digests: dict[str, list[str | None]] = {}
    algorithms = {c.algorithm for c in cubes}
    for name in first.layers:
        lazy = ConcatLayer([a[name] for a in aligned], AXES.index(axis))
        layers[name] = (lazy, lazy)
        if axis == "groups" and len(algorithms) == 1:  # digests of one algorithm carried over
            digests[name] = [
                v
                for c, p in zip(cubes, perms, strict=True)
                for v in (
                    c.group_digests[name]
                    if all(x is None for x in p.values())
                    else [None] * c.shape[0]
                )
            ]
    record = stamp(
        "concat", {"axis": axis, "n": len(cubes)}, [c.known_fingerprint() for c in cubes]
    )
    return CubeParts.derived(
        tables=tables,
        layers=layers,
        cells=cells,
        normalization=norm,
        metadata=_shared_metadata(cubes),
        provenance=(*_merged_provenance(cubes), record),
        group_digests=digests,
        algorithm=_shared_algorithm(cubes),
    )


def add(cubes: Sequence[CubeParts]) -> CubeParts:
    """The parts of :func:`cytepool.add`."""
    _check_layers(cubes, "add")
    first = cubes[0]
    perms = [dict.fromkeys(AXES)] + [
        {a: _align(first.tables[a], c.tables[a], a, "add", i) for a in AXES}
        for i, c in enumerate(cubes[1:], start=1)
    ]
    cells_parts = [_aligned_2d(c.cells, p) for c, p in zip(cubes, perms, strict=True)]
    acc = Accumulator(np.dtype(np.int64), first.cells.shape, where="cells")
    for part in cells_parts:
        acc.add(part)
    aligned = [_aligned(c, p) for c, p in zip(cubes, perms, strict=True)]
    layers: dict[str, tuple[LazyLayer, Any]] = {}
    for name in first.layers:
        lazy = SumLayer([a[name] for a in aligned], name=name, group_ids=first.tables["groups"].ids)
        layers[name] = (lazy, lazy)
    record = stamp("add", {"n": len(cubes)}, [c.known_fingerprint() for c in cubes])
    return CubeParts.derived(
        tables=dict(first.tables),
        layers=layers,
        cells=acc.result(),
        normalization=None,
        metadata=_shared_metadata(cubes),
        provenance=(*_merged_provenance(cubes), record),
        algorithm=_shared_algorithm(cubes),
    )
