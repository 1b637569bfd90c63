"""The parts of a cube, checked, and what reads them: the state a :class:`cytepool.Cube` wraps.

:class:`CubeParts` holds the tables, layers, cells, normalization, metadata, provenance and
the digests known so far. :meth:`CubeParts.checked` builds them from what a user (or a file,
or a converter) gives, checking everything that is in memory; :meth:`CubeParts.derived` from
parts already checked (selections, sums, joins). Reads go group by group through
:meth:`CubeParts.read`, which checks values and keeps the digest of a group read whole.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from cytepool import fingerprint as _fp
from cytepool._arrays import as_array, refuse_masked
from cytepool._records import AXES, Normalization, Provenance, json_copy
from cytepool._table import AxisTable, TableIds
from cytepool.errors import (
    ConstraintError,
    FormatError,
    InputError,
    InputIndexError,
    InputTypeError,
    UnknownIdError,
)
from cytepool.layers import (
    ArrayLayer,
    CheckedLayer,
    LazyLayer,
    check_block,
    is_full,
    layer_source,
    positions,
    values_fine,
)

__all__ = ["CubeParts", "check_provenance"]


def check_provenance(provenance: Iterable[Any]) -> tuple[Provenance, ...]:
    """The records as a tuple; InputTypeError unless each is a :class:`Provenance`."""
    records = tuple(provenance)
    for record in records:
        if not isinstance(record, Provenance):
            msg = f"provenance: expected Provenance records, found {type(record).__name__}"
            raise InputTypeError(msg)
    return records


class CubeParts:
    """The checked parts of a cube and the digests known so far (filled in as groups are read)."""

    tables: dict[str, AxisTable]
    layers: dict[str, LazyLayer]
    exposed: dict[str, Any]
    cells: np.ndarray[Any, Any]
    normalization: Normalization | None
    metadata: dict[str, Any]
    provenance: tuple[Provenance, ...]
    group_digests: dict[str, list[str | None]]
    cells_digest: str | None
    normalization_digest: str | None
    algorithm: str  # of every digest known (SHA-256 only for cubes of files of format 1.0, 1.1)
    # once every digest is known, the fingerprint: digests are only ever filled in, never changed
    _fingerprint: str | None = None

    @classmethod
    def checked(
        cls,
        layers: Any,
        *,
        samples: Any,
        groups: Any,
        features: Any,
        cells: Any,
        normalization: Any = None,
        metadata: Any = None,
        provenance: Iterable[Any] = (),
        digests: _fp.Digests | None = None,
    ) -> CubeParts:
        """Parts from what a user, a file or a converter gives, checked as the constructor does.

        With ``digests``, the table, cell and normalization digests are compared with the
        parts now (FormatError naming the part), and each layer group digest is verified
        whenever that group is read whole; the fingerprint is then known without reading.
        The parts keep the digests' algorithm: a cube read from a file of format 1.0 or 1.1
        keeps its SHA-256 digests, and its fingerprint is the one the file stores.
        """
        if digests is not None and not isinstance(digests, _fp.Digests):
            msg = f"digests: expected a fingerprint.Digests, found {type(digests).__name__}"
            raise InputTypeError(msg)
        records = check_provenance(provenance)
        tables = {
            "samples": AxisTable.from_user(samples, "samples"),
            "groups": AxisTable.from_user(groups, "groups"),
            "features": AxisTable.from_user(features, "features"),
        }
        shape = (len(tables["groups"]), len(tables["samples"]), len(tables["features"]))
        cells_arr = _check_cells(cells, tables)
        norm = _check_normalization(normalization, shape)
        meta = _check_metadata(metadata)
        if not isinstance(layers, Mapping):
            msg = f"layers: expected a mapping of name to array, found {type(layers).__name__}"
            raise InputTypeError(msg)
        algorithm = _fp.BLAKE3 if digests is None else digests.algorithm
        built: dict[str, tuple[LazyLayer, Any]] = {}
        for name, value in layers.items():
            known = None if digests is None else digests.layers.get(name)
            built[_check_name(name)] = _build_layer(
                name, value, shape, tables, cells_arr, known, algorithm
            )
        parts = cls.derived(
            tables=tables,
            layers=built,
            cells=cells_arr,
            normalization=norm,
            metadata=meta,
            provenance=records,
            algorithm=algorithm,
        )
        if digests is not None:
            parts.adopt(digests)
        return parts

    @classmethod
    def derived(
        cls,
        *,
        tables: dict[str, AxisTable],
        layers: dict[str, tuple[LazyLayer, Any]],
        cells: np.ndarray[Any, Any],
        normalization: Normalization | None,
        metadata: dict[str, Any],
        provenance: tuple[Provenance, ...],
        group_digests: dict[str, list[str | None]] | None = None,
        algorithm: str = _fp.BLAKE3,
    ) -> CubeParts:
        """Parts from parts already checked; ``layers`` maps a name to (layer, exposed).

        ``group_digests`` are known group digests made with ``algorithm``.
        """
        parts = cls()
        parts.algorithm = algorithm
        parts.tables = tables
        parts.layers = {name: pair[0] for name, pair in layers.items()}
        parts.exposed = {name: pair[1] for name, pair in layers.items()}
        cells = np.asarray(cells, dtype=np.int64)
        cells.flags.writeable = False
        parts.cells = cells
        parts.normalization = normalization
        parts.metadata = metadata
        parts.provenance = provenance
        n_groups = len(tables["groups"])
        known = group_digests or {}
        parts.group_digests = {name: list(known.get(name, [None] * n_groups)) for name in layers}
        parts.cells_digest = None
        parts.normalization_digest = None
        return parts

    def adopt(self, digests: _fp.Digests) -> None:
        """Compare known digests with the parts and take the layer digests."""
        found = self.digests(compute=False)
        for name in _fp.TABLE_NAMES:
            if digests.tables[name] != found.tables[name]:
                msg = f"{name}: the table does not match its stored digest"
                raise FormatError(msg)
        if digests.cells != found.cells:
            msg = "cells: the cell numbers do not match their stored digest"
            raise FormatError(msg)
        if digests.normalization != found.normalization:
            msg = "normalization: the normalization does not match its stored digest"
            raise FormatError(msg)
        if sorted(digests.layers) != sorted(self.layers):
            msg = f"digests: expected layers {sorted(self.layers)}, found {sorted(digests.layers)}"
            raise FormatError(msg)
        for name, layer in self.layers.items():
            _check_layer_digests(name, layer, digests, self.shape[0])
            self.group_digests[name] = list(digests.layers[name])
        if digests.complete:  # the parts' digests are these now: so is the fingerprint
            self._fingerprint = digests.fingerprint()

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(n_groups, n_samples, n_features)``."""
        t = self.tables
        return (len(t["groups"]), len(t["samples"]), len(t["features"]))

    def layer(self, layer: str) -> LazyLayer:
        """The layer named ``layer``; UnknownIdError naming the layers there are."""
        try:
            return self.layers[layer]
        except (KeyError, TypeError):
            msg = f"no layer {layer!r}; the cube has layers {list(self.layers)}"
            raise UnknownIdError(msg, unknown=layer, known=self.layers) from None

    def group_position(self, group: Any) -> int:
        """The position of a group given by id or position."""
        if isinstance(group, str):
            return int(self.tables["groups"].locate([group])[0])
        if isinstance(group, numbers.Integral) and not isinstance(group, bool | np.bool_):
            n = self.shape[0]
            if not -n <= int(group) < n:
                msg = f"group position {group} is out of range for {n} groups"
                raise InputIndexError(msg)
            return int(group) % n
        msg = f"group: expected an id (str) or a position (int), found {type(group).__name__}"
        raise InputTypeError(msg)

    def read(
        self, layer: str, group: Any, samples: Any = None, features: Any = None
    ) -> np.ndarray[Any, Any]:
        """Read one group's block ``(n_selected_samples, n_selected_features)``.

        ``samples`` and ``features`` are positions, boolean masks, slices or None (all).
        Only the needed chunks are read; values are checked (ConstraintError naming layer,
        group and sample); sums raise OverflowError when they do not fit; a group read
        whole is verified against its known digest (FormatError naming layer and group),
        and otherwise its digest is computed and kept.
        """
        lay = self.layer(layer)
        g = self.group_position(group)
        _, n_s, n_f = self.shape
        s = positions(samples, n_s, what="samples")
        f = positions(features, n_f, what="features")
        s = None if is_full(s, n_s) else s
        f = None if is_full(f, n_f) else f
        block = lay.read(g, s, f)
        if not lay.checked_against(self.cells):
            row = self.cells[g]
            check_block(
                block,
                layer=layer,
                group=self.tables["groups"].ids[g],
                sample_ids=TableIds(self.tables["samples"]),
                feature_ids=TableIds(self.tables["features"]),
                samples=s,
                features=f,
                cells=row if s is None else row[s],
                source=layer_source(lay),
            )
        known = self.group_digests[layer]
        if s is None and f is None and known[g] is None:
            known[g] = _fp.group_digest(lay.dtype, block, self.algorithm)
        return block

    def to_numpy(self, layer: str) -> np.ndarray[Any, Any]:
        """A layer as numpy: an in-memory layer as it is, any other read group by group."""
        lay = self.layer(layer)
        if isinstance(lay, ArrayLayer) and lay.eager:
            return lay.array
        out = np.empty(self.shape, dtype=lay.dtype)
        if isinstance(lay, ArrayLayer) and lay.cells is self.cells:
            found = lay.read_all(out)  # verified on the decoding threads
            if found is not None and lay.algorithm == self.algorithm:
                known = self.group_digests[layer]
                for g, digest in enumerate(found):
                    known[g] = known[g] or digest
                return out
        with lay.reading(range(self.shape[0])):  # a remote store fetches every group's chunks
            for g in range(self.shape[0]):
                out[g] = self.read(layer, g)
        return out

    def digests(self, compute: bool = True) -> _fp.Digests:
        """The known part digests; with ``compute``, the missing group digests too."""
        if compute:
            for name, known in self.group_digests.items():
                for g, value in enumerate(known):
                    if value is None:
                        self.read(name, g)
        if self.cells_digest is None:
            self.cells_digest = _fp.cells_digest(self.cells, self.algorithm)
        if self.normalization_digest is None:
            self.normalization_digest = _fp.normalization_digest(self.normalization, self.algorithm)
        return _fp.Digests(
            tables={name: self.tables[name].digest(self.algorithm) for name in _fp.TABLE_NAMES},
            cells=self.cells_digest,
            normalization=self.normalization_digest,
            layers={name: tuple(v) for name, v in self.group_digests.items()},
            dtypes={name: layer.dtype.name for name, layer in self.layers.items()},
            algorithm=self.algorithm,
        )

    def fingerprint(self) -> str:
        """The fingerprint, computing the digests not known yet (reading lazy layers)."""
        if self._fingerprint is None:
            self._fingerprint = self.digests(compute=True).fingerprint()
        return self._fingerprint

    def known_fingerprint(self) -> str | None:
        """The fingerprint if known without reading a lazy layer (in-memory layers hashed)."""
        if self._fingerprint is not None:
            return self._fingerprint
        for name, layer in self.layers.items():
            if layer.eager and None in self.group_digests[name]:
                for g, value in enumerate(self.group_digests[name]):
                    if value is None:
                        self.read(name, g)
        digests = self.digests(compute=False)
        if digests.complete:
            self._fingerprint = digests.fingerprint()
        return self._fingerprint

    def with_provenance(self, provenance: Iterable[Any]) -> CubeParts:
        """The same parts (shared) with other provenance records."""
        parts = CubeParts.derived(
            tables=self.tables,
            layers={n: (self.layers[n], self.exposed[n]) for n in self.layers},
            cells=self.cells,
            normalization=self.normalization,
            metadata=self.metadata,
            provenance=check_provenance(provenance),
            group_digests=self.group_digests,
            algorithm=self.algorithm,
        )
        parts.cells_digest = self.cells_digest
        parts.normalization_digest = self.normalization_digest
        return parts


def _check_layer_digests(name: str, layer: LazyLayer, digests: _fp.Digests, n_groups: int) -> None:
    if digests.dtypes[name] != layer.dtype.name:
        msg = (
            f"layer {name!r}: the stored data type is {digests.dtypes[name]}, "
            f"the array's is {layer.dtype.name}"
        )
        raise FormatError(msg)
    if len(digests.layers[name]) != n_groups:
        msg = (
            f"layer {name!r}: expected {n_groups} group digests, found {len(digests.layers[name])}"
        )
        raise FormatError(msg)


# --------------------------------------------------------------------------- checks


def _check_cells(cells: Any, tables: Mapping[str, AxisTable]) -> np.ndarray[Any, Any]:
    arr = as_array(cells, "cells")
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        msg = f"cells: expected integers, found data type {arr.dtype}"
        raise InputTypeError(msg)
    shape = (len(tables["groups"]), len(tables["samples"]))
    if arr.shape != shape:
        msg = f"cells: expected shape (n_groups, n_samples) = {shape}, found {arr.shape}"
        raise InputError(msg)
    if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
        g, s = np.argwhere(arr > np.iinfo(np.int64).max)[0]
        msg = f"cells: group {tables['groups'].ids[g]!r}, sample {tables['samples'].ids[s]!r}: "
        msg += f"{arr[g, s]} does not fit int64"
        raise InputError(msg)
    out = np.array(arr, dtype=np.int64)
    if (out < 0).any():
        g, s = np.argwhere(out < 0)[0]
        msg = (
            f"cells: group {tables['groups'].ids[g]!r}, sample {tables['samples'].ids[s]!r}: "
            f"{out[g, s]} cells; expected a count >= 0"
        )
        raise ConstraintError(msg)
    out.flags.writeable = False
    return out


def _check_normalization(normalization: Any, shape: tuple[int, int, int]) -> Normalization | None:
    if normalization is None:
        return None
    if not isinstance(normalization, Normalization):
        msg = (
            f"normalization: expected a Normalization or None, found {type(normalization).__name__}"
        )
        raise InputTypeError(msg)
    if normalization.factors.shape != shape[:2]:
        msg = (
            f"normalization: expected factors of shape (n_groups, n_samples) = {shape[:2]}, "
            f"found {normalization.factors.shape}"
        )
        raise InputError(msg)
    return normalization


def _check_metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        msg = f"metadata: expected a mapping, found {type(metadata).__name__}"
        raise InputTypeError(msg)
    return dict(json_copy(dict(metadata), "metadata"))  # keys checked at any depth


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        msg = f"layers: names must be strings, found {name!r}"
        raise InputTypeError(msg)
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        msg = f"layers: {name!r} is not a valid layer name (non-empty, without '/')"
        raise InputError(msg)
    return name


def _check_eager(arr: np.ndarray[Any, Any], name: str, tables: Mapping[str, AxisTable], cells: Any):
    """Check every value of an in-memory layer; fast path first, then locate the problem."""
    ok = values_fine(arr)  # reductions: no temporary the size of the layer
    if ok and arr.size:
        empty = cells == 0
        ok = not (empty.any() and arr[empty].any())
    if ok:
        return
    for g in range(arr.shape[0]):
        check_block(
            arr[g],
            layer=name,
            group=tables["groups"].ids[g],
            sample_ids=tables["samples"].ids,
            feature_ids=tables["features"].ids,
            samples=None,
            features=None,
            cells=cells[g],
        )


def _build_layer(
    name: str,
    value: Any,
    shape: tuple[int, int, int],
    tables: Mapping[str, AxisTable],
    cells: np.ndarray[Any, Any],
    digests: Sequence[str | None] | None,
    algorithm: str,
) -> tuple[LazyLayer, Any]:
    """Check a layer and wrap it: (the layer read through, the object ``cube.layers`` gives)."""
    ids = {f"{a[:-1]}_ids": TableIds(tables[a]) for a in AXES}  # for messages: no list now
    if isinstance(value, LazyLayer) and digests is None:
        layer: LazyLayer = CheckedLayer(value, name=name, cells=cells, **ids)
        exposed = value
    else:
        refuse_masked(value, f"layer {name!r}")
        if not (hasattr(value, "shape") and hasattr(value, "dtype")):
            value = as_array(value, f"layer {name!r}")
        _fp.layer_dtype(value.dtype, what=f"layer {name!r}")
        if not hasattr(value, "__getitem__"):
            msg = f"layer {name!r}: expected an array, found {type(value).__name__}"
            raise InputTypeError(msg)
        eager = isinstance(value, np.ndarray)
        if eager:
            value = value.view()
            if value.ndim == 3 and not value.dtype.isnative:
                value = value.astype(value.dtype.newbyteorder("="))
        exposed = value
        layer = ArrayLayer(
            value,
            name=name,
            cells=cells,
            digests=digests,
            checked=eager,
            algorithm=algorithm,
            **ids,
        )
    if tuple(layer.shape) != shape:
        msg = f"layer {name!r}: expected shape (n_groups, n_samples, n_features) = {shape}, "
        msg += f"found {tuple(layer.shape)}"
        raise InputError(msg)
    if isinstance(layer, ArrayLayer) and layer.eager:
        _check_eager(layer.array, name, tables, cells)
        layer.array.flags.writeable = False
    return layer, exposed
