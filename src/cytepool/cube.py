"""The cube: pooled profiles with additive layers, exact lazy sums and a content fingerprint.

A :class:`Cube` holds, for every group (cell type) x sample x feature (gene), additive layers
of sums over pooled cells, the number of cells of every profile, an optional
:class:`Normalization`, three id-keyed tables and :class:`Provenance` records. The layers may
be numpy arrays, arrays on disk (:class:`cytepool.io.zarr.ZarrArray`) or lazy layers
(:mod:`cytepool.layers`); a cube reads a layer only when a method needs its values, one group
at a time, and then only the samples and features it needs.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import numbers
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from cytepool import fingerprint as _fp
from cytepool.errors import ConstraintError, FormatError, _check_keys
from cytepool.layers import (
    ArrayLayer,
    ConcatLayer,
    GroupSumLayer,
    Index,
    LazyLayer,
    SampleSumLayer,
    SelectLayer,
    SumLayer,
    _Accumulator,
    _is_full,
    check_block,
    positions,
)

if TYPE_CHECKING:
    import narwhals.stable.v2 as nw

__all__ = ["Cube", "Normalization", "Provenance", "add", "concat"]

AXES = ("groups", "samples", "features")
ID_COLUMNS = MappingProxyType(
    {"samples": "sample_id", "groups": "group_id", "features": "feature_id"}
)
_IDS_IN_PROVENANCE = 1000

Axis = Literal["samples", "groups", "features"]


# --------------------------------------------------------------------------- small records


@dataclass(frozen=True, eq=False)
class Normalization:
    """How a cube's profiles are normalized: a method name and one factor per profile.

    Parameters
    ----------
    method
        The method's name, such as ``"size_factors"`` or ``"cpm"``.
    factors
        Positive, finite factors, shape ``(n_groups, n_samples)``; kept as a read-only
        float64 copy.

    Raises
    ------
    TypeError
        If ``method`` is not a string or the factors are not real numbers.
    ValueError
        If ``method`` is empty, or the factors are not 2-D, positive and finite.

    Examples
    --------
    >>> import numpy as np
    >>> from cytepool import Normalization
    >>> n = Normalization("size_factors", [[1.0, 0.5]])
    >>> n.factors.shape
    (1, 2)
    >>> n == Normalization("size_factors", np.array([[1.0, 0.5]]))
    True
    """

    method: str
    factors: np.ndarray[Any, np.dtype[np.float64]]

    def __post_init__(self) -> None:
        if not isinstance(self.method, str):
            msg = f"normalization: method must be a string, found {type(self.method).__name__}"
            raise TypeError(msg)
        if not self.method:
            msg = "normalization: method must not be empty"
            raise ValueError(msg)
        raw = np.asarray(self.factors)
        if raw.dtype.kind not in "iuf":
            msg = f"normalization: factors must be real numbers, found data type {raw.dtype}"
            raise TypeError(msg)
        if raw.ndim != 2:
            msg = f"normalization: factors must be 2-D (groups, samples), found shape {raw.shape}"
            raise ValueError(msg)
        factors = np.array(raw, dtype=np.float64)
        bad = ~(np.isfinite(factors) & (factors > 0))
        if bad.any():
            g, s = np.argwhere(bad)[0]
            msg = (
                f"normalization: factor {factors[g, s]} at group #{g}, sample #{s} is not "
                "positive and finite"
            )
            raise ValueError(msg)
        factors.flags.writeable = False
        object.__setattr__(self, "factors", factors)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Normalization):
            return NotImplemented
        return self.method == other.method and bool(np.array_equal(self.factors, other.factors))

    def __hash__(self) -> int:
        return hash((self.method, self.factors.shape, self.factors.tobytes()))

    def __repr__(self) -> str:
        shape = " x ".join(map(str, self.factors.shape))
        return f"Normalization(method={self.method!r}, factors=<{shape} float64>)"


def _json_copy(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as err:
        msg = f"{what}: expected JSON-serialisable values (no NaN or infinity): {err}"
        raise type(err)(msg) from err


@dataclass(frozen=True)
class Provenance:
    """One step in a cube's history.

    Parameters
    ----------
    operation
        What made the cube: ``"Cube"``, ``"select"``, ``"merge_groups"``, ``"concat"``, ...
    parameters
        The operation's parameters, JSON-serialisable.
    version
        The cytepool version that ran it.
    time
        When, as an ISO 8601 UTC time.
    inputs
        The fingerprints of the input cubes, ``None`` where not known then (a lazy layer is
        never read to learn it).

    Examples
    --------
    >>> from cytepool import Provenance
    >>> p = Provenance("select", {"groups": ["T"]}, "0.1.0", "2025-01-01T00:00:00+00:00")
    >>> Provenance.from_json(p.to_json()) == p
    True
    """

    operation: str
    parameters: dict[str, Any]
    version: str
    time: str
    inputs: tuple[str | None, ...] = ()

    def __post_init__(self) -> None:
        for key in ("operation", "version", "time"):
            if not isinstance(getattr(self, key), str):
                found = type(getattr(self, key)).__name__
                msg = f"provenance: {key} must be a string, found {found}"
                raise TypeError(msg)
        if not isinstance(self.parameters, Mapping):
            found = type(self.parameters).__name__
            msg = f"provenance: parameters must be a mapping, found {found}"
            raise TypeError(msg)
        params = _json_copy(dict(self.parameters), "provenance parameters")
        inputs = tuple(self.inputs)
        for value in inputs:
            if value is not None and not _fp._HEX.fullmatch(str(value)):
                msg = f"provenance: inputs must be fingerprints or None, found {value!r}"
                raise ValueError(msg)
        object.__setattr__(self, "parameters", params)
        object.__setattr__(self, "inputs", inputs)

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-serialisable dict."""
        return {
            "operation": self.operation,
            "parameters": _json_copy(self.parameters, "provenance parameters"),
            "version": self.version,
            "time": self.time,
            "inputs": list(self.inputs),
        }

    @classmethod
    def from_json(cls, data: Any) -> Provenance:
        """A record from the dict :meth:`to_json` gives.

        Raises
        ------
        FormatError
            If ``data`` is not such a dict (a ValueError).
        """
        _check_keys("provenance", data, {"operation", "parameters", "version", "time", "inputs"})
        if not isinstance(data["inputs"], list):
            msg = f"provenance: inputs must be a list, found {data['inputs']!r}"
            raise FormatError(msg)
        try:
            return cls(
                data["operation"],
                data["parameters"],
                data["version"],
                data["time"],
                tuple(data["inputs"]),
            )
        except (TypeError, ValueError) as err:
            raise FormatError(str(err)) from err


# --------------------------------------------------------------------------- tables


def _reset(frame: Any) -> Any:
    """Give a pandas-like frame a fresh default index (narwhals keeps index labels)."""
    import narwhals.stable.v2 as nw

    if frame.implementation.is_pandas_like():
        return nw.from_native(frame.to_native().reset_index(drop=True), eager_only=True)
    return frame


class _Table:
    """A validated table: the id column first, then covariates; pandas with a default index."""

    def __init__(self, axis: str, frame: nw.DataFrame[Any], ids: list[str]):
        self.axis = axis
        self.id_column = ID_COLUMNS[axis]
        self.frame = frame
        self.ids = ids
        self._position: dict[str, int] | None = None
        self.digest = _fp.table_digest(frame)

    @classmethod
    def from_user(cls, data: Any, axis: str) -> _Table:
        import narwhals.stable.v2 as nw

        id_column = ID_COLUMNS[axis]
        try:
            df = nw.from_native(data, eager_only=True)
        except TypeError as err:
            msg = (
                f"{axis}: expected a table (a pandas, polars or pyarrow frame), "
                f"found {type(data).__name__}"
            )
            raise TypeError(msg) from err
        except ValueError as err:  # such as duplicate column names
            msg = f"{axis}: {err}"
            raise ValueError(msg) from err
        if df.implementation.is_pandas_like():
            df = cls._from_pandas(df, axis)
        names = list(df.columns)
        for name in names:
            if not isinstance(name, str):
                msg = f"{axis}: column names must be strings, found {name!r}"
                raise TypeError(msg)
        if id_column not in names:
            msg = f"{axis}: expected an id column {id_column!r}, found columns {names}"
            raise ValueError(msg)
        df = df.select([id_column, *(n for n in names if n != id_column)])
        if len(df) == 0 and df.schema[id_column] != nw.String:
            df = df.with_columns(nw.col(id_column).cast(nw.String()))
        return cls(axis, df, _check_ids(df, axis))

    @staticmethod
    def _from_pandas(df: Any, axis: str) -> Any:
        import narwhals.stable.v2 as nw

        id_column = ID_COLUMNS[axis]
        native = df.to_native()
        index = native.index
        if index.nlevels != 1:
            msg = f"{axis}: a MultiIndex is not supported; reset it into columns"
            raise ValueError(msg)
        if index.name == id_column:
            if id_column in native.columns:
                msg = f"{axis}: both the index and a column are named {id_column!r}"
                raise ValueError(msg)
            native = native.reset_index()
        elif index.name is not None:
            msg = (
                f"{axis}: the index is named {index.name!r}; expected the ids in an index or "
                f"column named {id_column!r} (reset the index to keep it as a column)"
            )
            raise ValueError(msg)
        else:
            native = native.reset_index(drop=True)
        return nw.from_native(native, eager_only=True)

    def native(self) -> Any:
        """The table in its backend; pandas indexed by the ids."""
        native = self.frame.to_native()
        if self.frame.implementation.is_pandas_like():
            return native.set_index(self.id_column)
        return native

    @property
    def position(self) -> dict[str, int]:
        if self._position is None:
            self._position = {k: i for i, k in enumerate(self.ids)}
        return self._position

    def locate(self, ids: Sequence[str]) -> Index:
        pos = self.position
        unknown = [i for i in ids if i not in pos]
        if unknown:
            more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
            msg = f"{self.axis}: unknown ids {unknown[:10]}{more}"
            raise KeyError(msg)
        return np.array([pos[i] for i in ids], dtype=np.intp)

    def resolve(self, selection: Any) -> Index | None:
        """Positions selected by ids, positions or a boolean mask (None: all)."""
        if selection is None:
            return None
        n = len(self.ids)
        if isinstance(selection, str):
            return self.locate([selection])
        if isinstance(selection, slice | int | np.integer) and not isinstance(selection, bool):
            return positions(selection, n, what=self.axis)
        items = selection.to_list() if hasattr(selection, "to_list") else selection
        arr = np.asarray(items)
        if arr.ndim != 1:
            msg = f"{self.axis}: expected ids, positions or a mask, found shape {arr.shape}"
            raise TypeError(msg)
        idx: Index
        if arr.size == 0:
            idx = np.zeros(0, dtype=np.intp)
        elif arr.dtype.kind in "biu":
            idx = positions(arr, n, what=self.axis)  # type: ignore[assignment]
        elif arr.dtype.kind in "UOT" and all(isinstance(i, str) for i in items):
            idx = self.locate(list(items))
        else:
            msg = (
                f"{self.axis}: expected ids (strings), positions (integers) or a boolean mask, "
                f"found {arr.dtype} values"
            )
            raise TypeError(msg)
        _check_unique([self.ids[i] for i in idx.tolist()], self.axis, "selects")
        return idx

    def take(self, idx: Index | None) -> _Table:
        if idx is None:
            return self
        frame = _reset(self.frame[idx, :])
        return _Table(self.axis, frame, [self.ids[i] for i in idx.tolist()])

    def pooled(self, members: Sequence[Index], new_ids: list[str]) -> _Table:
        """One row per pool: the new ids and the covariates constant within every pool."""
        import narwhals.stable.v2 as nw

        keep = [self.id_column]
        for column in _fp.canonical_table(self.frame)[1:]:
            keys = column.row_keys()
            if all(all(keys[i] == keys[m[0]] for i in m.tolist()) for m in members):
                keep.append(column.name)
        first = np.array([m[0] for m in members], dtype=np.intp)
        frame = _reset(self.frame.select(keep)[first, :])
        backend = frame.implementation
        ids = nw.new_series(self.id_column, new_ids, nw.String(), backend=backend)
        frame = frame.with_columns(ids)
        return _Table(self.axis, frame, list(new_ids))

    @staticmethod
    def joined(tables: Sequence[_Table], axis: str) -> _Table:
        import narwhals.stable.v2 as nw

        frames = [t.frame for t in tables]
        impl = frames[0].implementation
        frames = [
            f if f.implementation == impl else nw.from_arrow(f.to_arrow(), backend=impl)
            for f in frames
        ]
        same = all(f.columns == frames[0].columns for f in frames)
        try:
            frame = nw.concat(frames, how="vertical" if same else "diagonal")
        except Exception as err:
            msg = f"{axis}: the tables cannot be joined ({type(err).__name__}: {err})"
            raise ValueError(msg) from err
        frame = _reset(frame)
        ids = [i for t in tables for i in t.ids]
        _check_unique(ids, axis, "would hold")
        return _Table(axis, frame, ids)


def _check_unique(ids: Sequence[str], axis: str, verb: str) -> None:
    if len(set(ids)) != len(ids):
        dup = sorted(i for i, count in Counter(ids).items() if count > 1)
        msg = f"{axis}: the ids must be unique; it {verb} {dup[:10]} more than once"
        raise ValueError(msg)


def _check_ids(df: Any, axis: str) -> list[str]:
    import narwhals.stable.v2 as nw

    id_column = ID_COLUMNS[axis]
    column = df.get_column(id_column)
    if column.dtype != nw.String:
        msg = f"{axis}: the ids in {id_column!r} must be strings, found data type {column.dtype}"
        raise TypeError(msg)
    missing = np.flatnonzero(np.asarray(column.is_null().to_numpy(), dtype=bool))
    if missing.size:
        msg = (
            f"{axis}: {missing.size} ids in {id_column!r} are missing (rows "
            f"{missing[:5].tolist()}); expected a non-null string id on every row"
        )
        raise ValueError(msg)
    ids = column.to_list()
    for i in ids:
        if not isinstance(i, str):
            msg = f"{axis}: the ids in {id_column!r} must be strings, found {i!r}"
            raise TypeError(msg)
    _check_unique(ids, axis, "holds")
    return list(ids)


# --------------------------------------------------------------------------- checks


def _check_cells(cells: Any, tables: Mapping[str, _Table]) -> np.ndarray[Any, Any]:
    arr = np.asarray(cells)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        msg = f"cells: expected integers, found data type {arr.dtype}"
        raise TypeError(msg)
    shape = (len(tables["groups"].ids), len(tables["samples"].ids))
    if arr.shape != shape:
        msg = f"cells: expected shape (n_groups, n_samples) = {shape}, found {arr.shape}"
        raise ValueError(msg)
    if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
        g, s = np.argwhere(arr > np.iinfo(np.int64).max)[0]
        msg = f"cells: group {tables['groups'].ids[g]!r}, sample {tables['samples'].ids[s]!r}: "
        msg += f"{arr[g, s]} does not fit int64"
        raise ValueError(msg)
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
        raise TypeError(msg)
    if normalization.factors.shape != shape[:2]:
        msg = (
            f"normalization: expected factors of shape (n_groups, n_samples) = {shape[:2]}, "
            f"found {normalization.factors.shape}"
        )
        raise ValueError(msg)
    return normalization


def _check_metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        msg = f"metadata: expected a mapping, found {type(metadata).__name__}"
        raise TypeError(msg)
    for key in metadata:
        if not isinstance(key, str):
            msg = f"metadata: keys must be strings, found {key!r}"
            raise TypeError(msg)
    return dict(_json_copy(dict(metadata), "metadata"))


def _check_name(name: Any) -> str:
    if not isinstance(name, str):
        msg = f"layers: names must be strings, found {name!r}"
        raise TypeError(msg)
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        msg = f"layers: {name!r} is not a valid layer name (non-empty, without '/')"
        raise ValueError(msg)
    return name


def _check_eager(arr: np.ndarray[Any, Any], name: str, tables: Mapping[str, _Table], cells: Any):
    """Check every value of an in-memory layer; fast path first, then locate the problem."""
    ok = True
    if arr.size:  # reductions: no temporary the size of the layer
        low, high = arr.min(), arr.max()
        ok = bool(np.isfinite(low) and np.isfinite(high) and low >= 0)
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
    tables: Mapping[str, _Table],
    cells: np.ndarray[Any, Any],
    digests: Sequence[str | None] | None,
) -> tuple[LazyLayer, Any]:
    """Check a layer and wrap it: (the layer read through, the object ``cube.layers`` gives)."""
    if isinstance(value, LazyLayer) and digests is None:
        layer: LazyLayer = value
        exposed = value
    else:
        if not (hasattr(value, "shape") and hasattr(value, "dtype")):
            value = np.asarray(value)
        _fp.layer_dtype(value.dtype, what=f"layer {name!r}")
        if not hasattr(value, "__getitem__"):
            msg = f"layer {name!r}: expected an array, found {type(value).__name__}"
            raise TypeError(msg)
        eager = isinstance(value, np.ndarray)
        if eager:
            value = value.view()
            if value.ndim == 3 and not value.dtype.isnative:
                value = value.astype(value.dtype.newbyteorder("="))
        exposed = value
        ids = {a: tables[a].ids for a in AXES}
        layer = ArrayLayer(
            value,
            name=name,
            group_ids=ids["groups"],
            sample_ids=ids["samples"],
            feature_ids=ids["features"],
            cells=cells,
            digests=digests,
            checked=eager,
        )
    if tuple(layer.shape) != shape:
        msg = f"layer {name!r}: expected shape (n_groups, n_samples, n_features) = {shape}, "
        msg += f"found {tuple(layer.shape)}"
        raise ValueError(msg)
    if isinstance(layer, ArrayLayer) and layer.eager:
        _check_eager(layer.array, name, tables, cells)
        layer.array.flags.writeable = False
    return layer, exposed


def _utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds")


def _ids_parameter(ids: Sequence[str] | None) -> Any:
    """Selected ids for a provenance record: the list, or its count and digest when long."""
    if ids is None:
        return None
    if len(ids) <= _IDS_IN_PROVENANCE:
        return list(ids)
    h = hashlib.sha256()
    for i in ids:
        h.update(_fp._text(i))
    return {"count": len(ids), "sha256": h.hexdigest()}


# --------------------------------------------------------------------------- the cube


class Cube:
    """Pooled profiles: groups x samples x features, with additive layers.

    Parameters
    ----------
    layers
        A mapping of layer name to an array of shape ``(n_groups, n_samples, n_features)``:
        a numpy array, a :class:`cytepool.io.zarr.ZarrArray` or a lazy layer, of data type
        int32, int64, uint32, uint64, float32 or float64. Values are sums over cells:
        finite, >= 0, and 0 wherever a profile pools 0 cells. numpy layers are checked now
        and kept as read-only views (do not modify them afterwards); other layers are checked
        when read.
    samples, groups, features
        Tables (pandas, polars or pyarrow) with unique, non-null string ids in a column
        ``sample_id`` / ``group_id`` / ``feature_id`` (for pandas the ids may be the index,
        named so). Other columns are covariates. They are returned in the same backend.
    cells
        Integers ``(n_groups, n_samples)``, >= 0: the number of cells of every profile.
    normalization
        None, or a :class:`Normalization` with factors ``(n_groups, n_samples)``.
    metadata
        A JSON-serialisable mapping (not part of the fingerprint).

    Raises
    ------
    TypeError
        For a table, array or value of the wrong type (a layer data type other than int32,
        int64, uint32, uint64, float32 or float64; ids that are not strings, ...).
    ValueError
        For wrong shapes, missing, null or duplicate ids, and -- as
        :class:`cytepool.errors.ConstraintError` -- negative or non-finite layer values,
        non-zero values in profiles of 0 cells, or negative cell numbers; messages name the
        part and, for values, the layer, group and sample.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool import Cube
    >>> cube = Cube(
    ...     {"counts": np.array([[[1, 0, 2], [0, 0, 0]], [[3, 1, 0], [4, 4, 4]]])},
    ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"], "donor": ["d1", "d2"]}),
    ...     groups=pd.DataFrame({"group_id": ["B", "T"]}),
    ...     features=pd.DataFrame({"feature_id": ["CD3E", "CD19", "MS4A1"]}),
    ...     cells=[[2, 0], [5, 6]],
    ... )
    >>> cube
    <Cube 2 groups x 2 samples x 3 features; layers: counts int64 (memory); normalization: none>
    >>> cube.profiles("T")
    array([[3, 1, 0],
           [4, 4, 4]])
    >>> cube.samples
              donor
    sample_id
    s1           d1
    s2           d2
    """

    _tables: dict[str, _Table]
    _layers: dict[str, LazyLayer]
    _exposed: dict[str, Any]
    _cells: np.ndarray[Any, Any]
    _normalization: Normalization | None
    _metadata: dict[str, Any]
    _provenance: tuple[Provenance, ...]
    _group_digests: dict[str, list[str | None]]
    _cells_digest: str | None
    _normalization_digest: str | None

    def __init__(
        self,
        layers: Mapping[str, Any],
        *,
        samples: Any,
        groups: Any,
        features: Any,
        cells: Any,
        normalization: Normalization | None = None,
        metadata: Mapping[str, Any] | None = None,
    ):
        self._setup(layers, samples, groups, features, cells, normalization, metadata, None)
        params = {
            "layers": {name: layer.dtype.name for name, layer in self._layers.items()},
            "shape": list(self.shape),
            "normalization": None if normalization is None else normalization.method,
        }
        self._provenance = (self._provenance_record("Cube", params, ()),)

    def _setup(
        self,
        layers: Any,
        samples: Any,
        groups: Any,
        features: Any,
        cells: Any,
        normalization: Any,
        metadata: Any,
        digests: _fp.Digests | None,
    ) -> None:
        if digests is not None and not isinstance(digests, _fp.Digests):
            msg = f"digests: expected a fingerprint.Digests, found {type(digests).__name__}"
            raise TypeError(msg)
        tables = {
            "samples": _Table.from_user(samples, "samples"),
            "groups": _Table.from_user(groups, "groups"),
            "features": _Table.from_user(features, "features"),
        }
        shape = (len(tables["groups"].ids), len(tables["samples"].ids), len(tables["features"].ids))
        cells_arr = _check_cells(cells, tables)
        norm = _check_normalization(normalization, shape)
        meta = _check_metadata(metadata)
        if not isinstance(layers, Mapping):
            msg = f"layers: expected a mapping of name to array, found {type(layers).__name__}"
            raise TypeError(msg)
        built: dict[str, tuple[LazyLayer, Any]] = {}
        for name, value in layers.items():
            known = None if digests is None else digests.layers.get(name)
            built[_check_name(name)] = _build_layer(name, value, shape, tables, cells_arr, known)
        self._tables = tables
        self._layers = {name: pair[0] for name, pair in built.items()}
        self._exposed = {name: pair[1] for name, pair in built.items()}
        self._cells = cells_arr
        self._normalization = norm
        self._metadata = meta
        self._provenance = ()
        self._group_digests = {name: [None] * shape[0] for name in built}
        self._cells_digest = None
        self._normalization_digest = None
        if digests is not None:
            self._adopt(digests)

    def _adopt(self, digests: _fp.Digests) -> None:
        """Compare known digests with the parts and take the layer digests."""
        found = self._digests(compute=False)
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
        if sorted(digests.layers) != sorted(self._layers):
            msg = f"digests: expected layers {sorted(self._layers)}, found {sorted(digests.layers)}"
            raise FormatError(msg)
        for name, layer in self._layers.items():
            if digests.dtypes[name] != layer.dtype.name:
                msg = (
                    f"layer {name!r}: the stored data type is {digests.dtypes[name]}, "
                    f"the array's is {layer.dtype.name}"
                )
                raise FormatError(msg)
            if len(digests.layers[name]) != self.shape[0]:
                msg = (
                    f"layer {name!r}: expected {self.shape[0]} group digests, "
                    f"found {len(digests.layers[name])}"
                )
                raise FormatError(msg)
            self._group_digests[name] = list(digests.layers[name])

    @classmethod
    def _from_parts(
        cls,
        layers: Mapping[str, Any],
        *,
        samples: Any,
        groups: Any,
        features: Any,
        cells: Any,
        normalization: Normalization | None,
        metadata: Mapping[str, Any] | None,
        provenance: Iterable[Provenance],
        digests: _fp.Digests | None,
    ) -> Cube:
        """A cube from stored parts, appending no provenance record (used by read_cube).

        Tables, cells, normalization and numpy layers are checked as by the constructor;
        other layers are not read. With ``digests``, the table, cell and normalization
        digests are compared with the parts now (FormatError naming the part), and each
        layer group digest is verified whenever that group is read whole (FormatError
        naming the layer and group); the fingerprint is known without reading any layer.
        """
        records = tuple(provenance)
        for record in records:
            if not isinstance(record, Provenance):
                msg = f"provenance: expected Provenance records, found {type(record).__name__}"
                raise TypeError(msg)
        cube = cls.__new__(cls)
        cube._setup(layers, samples, groups, features, cells, normalization, metadata, digests)
        cube._provenance = records
        return cube

    @classmethod
    def _derived(
        cls,
        *,
        tables: dict[str, _Table],
        layers: dict[str, tuple[LazyLayer, Any]],
        cells: np.ndarray[Any, Any],
        normalization: Normalization | None,
        metadata: dict[str, Any],
        provenance: tuple[Provenance, ...],
        group_digests: dict[str, list[str | None]] | None = None,
    ) -> Cube:
        cube = cls.__new__(cls)
        cube._tables = tables
        cube._layers = {name: pair[0] for name, pair in layers.items()}
        cube._exposed = {name: pair[1] for name, pair in layers.items()}
        cells = np.asarray(cells, dtype=np.int64)
        cells.flags.writeable = False
        cube._cells = cells
        cube._normalization = normalization
        cube._metadata = metadata
        cube._provenance = provenance
        n_groups = len(tables["groups"].ids)
        known = group_digests or {}
        cube._group_digests = {name: list(known.get(name, [None] * n_groups)) for name in layers}
        cube._cells_digest = None
        cube._normalization_digest = None
        return cube

    # ----------------------------------------------------------------------- properties

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(n_groups, n_samples, n_features)``."""
        t = self._tables
        return (len(t["groups"].ids), len(t["samples"].ids), len(t["features"].ids))

    @property
    def samples(self) -> Any:
        """The samples table, in the backend it was given (pandas: indexed by ``sample_id``)."""
        return self._tables["samples"].native()

    @property
    def groups(self) -> Any:
        """The groups table, in the backend it was given (pandas: indexed by ``group_id``)."""
        return self._tables["groups"].native()

    @property
    def features(self) -> Any:
        """The features table, in the backend it was given (pandas: indexed by ``feature_id``)."""
        return self._tables["features"].native()

    @property
    def layers(self) -> Mapping[str, Any]:
        """A read-only mapping of layer name to array (numpy, ZarrArray or lazy layer)."""
        return MappingProxyType(self._exposed)

    @property
    def cells(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The number of cells of every profile, read-only int64 ``(n_groups, n_samples)``."""
        return self._cells

    @property
    def normalization(self) -> Normalization | None:
        """The normalization, or None."""
        return self._normalization

    @property
    def metadata(self) -> dict[str, Any]:
        """A copy of the metadata."""
        return dict(_json_copy(self._metadata, "metadata"))

    @property
    def provenance(self) -> tuple[Provenance, ...]:
        """The records of the operations that made this cube, oldest first."""
        return self._provenance

    @property
    def fingerprint(self) -> str:
        """A hex SHA-256 of the content: tables, cells, normalization, layers.

        It does not depend on memory layout, table backend, chunking, compression or
        laziness. Digests not known yet are computed, reading lazy layers group by group.
        """
        return self._digests(compute=True).fingerprint()

    def __repr__(self) -> str:
        g, s, f = self.shape
        parts = [
            f"{name} {layer.dtype.name} ({'memory' if layer.eager else 'lazy'})"
            for name, layer in self._layers.items()
        ]
        norm = "none" if self._normalization is None else self._normalization.method
        return (
            f"<Cube {g} groups x {s} samples x {f} features; "
            f"layers: {', '.join(parts) or 'none'}; normalization: {norm}>"
        )

    # ----------------------------------------------------------------------- reading

    def _layer(self, layer: str) -> LazyLayer:
        try:
            return self._layers[layer]
        except (KeyError, TypeError):
            msg = f"no layer {layer!r}; the cube has layers {list(self._layers)}"
            raise KeyError(msg) from None

    def _group_position(self, group: Any) -> int:
        if isinstance(group, str):
            return int(self._tables["groups"].locate([group])[0])
        if isinstance(group, numbers.Integral) and not isinstance(group, bool | np.bool_):
            n = self.shape[0]
            if not -n <= int(group) < n:
                msg = f"group position {group} is out of range for {n} groups"
                raise IndexError(msg)
            return int(group) % n
        msg = f"group: expected an id (str) or a position (int), found {type(group).__name__}"
        raise TypeError(msg)

    def _read(
        self, layer: str, group: int, samples: Any = None, features: Any = None
    ) -> np.ndarray[Any, Any]:
        """Read one group's block ``(n_selected_samples, n_selected_features)``.

        ``samples`` and ``features`` are positions, boolean masks, slices or None (all).
        Only the needed chunks are read; values are checked (ConstraintError naming layer,
        group and sample); sums raise OverflowError when they do not fit; a group read
        whole is verified against its known digest (FormatError naming layer and group),
        and otherwise its digest is computed and kept.
        """
        lay = self._layer(layer)
        g = self._group_position(group)
        _, n_s, n_f = self.shape
        s = positions(samples, n_s, what="samples")
        f = positions(features, n_f, what="features")
        s = None if _is_full(s, n_s) else s
        f = None if _is_full(f, n_f) else f
        block = lay.read(g, s, f)
        leaf_checked = isinstance(lay, ArrayLayer) and (lay.checked or lay.cells is self._cells)
        if not leaf_checked:
            row = self._cells[g]
            check_block(
                block,
                layer=layer,
                group=self._tables["groups"].ids[g],
                sample_ids=self._tables["samples"].ids,
                feature_ids=self._tables["features"].ids,
                samples=s,
                features=f,
                cells=row if s is None else row[s],
            )
        known = self._group_digests[layer]
        if s is None and f is None and known[g] is None:
            known[g] = _fp.group_digest(lay.dtype, block)
        return block

    def profiles(self, group: str | int, layer: str = "counts") -> np.ndarray[Any, Any]:
        """One group's profiles of a layer: an array ``(n_samples, n_features)``.

        Parameters
        ----------
        group
            The group's id or position.
        layer
            The layer's name.

        Raises
        ------
        KeyError
            For an unknown group id or layer.
        IndexError
            For a position out of range.

        Examples
        --------
        >>> import numpy as np
        >>> import polars as pl
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.arange(12, dtype="int32").reshape(2, 2, 3)},
        ...     samples=pl.DataFrame({"sample_id": ["s1", "s2"]}),
        ...     groups=pl.DataFrame({"group_id": ["B", "T"]}),
        ...     features=pl.DataFrame({"feature_id": ["a", "b", "c"]}),
        ...     cells=[[1, 1], [1, 1]],
        ... )
        >>> cube.profiles("T")
        array([[ 6,  7,  8],
               [ 9, 10, 11]], dtype=int32)
        >>> cube.profiles(0)[1]
        array([3, 4, 5], dtype=int32)
        """
        return self._read(layer, self._group_position(group))

    def to_numpy(self, layer: str = "counts") -> np.ndarray[Any, Any]:
        """A layer as a numpy array ``(n_groups, n_samples, n_features)``.

        A layer held in memory is returned as a read-only view; any other is read group by
        group into a new array.

        Examples
        --------
        >>> import numpy as np
        >>> import pandas as pd
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.ones((1, 2, 2), dtype="int32")},
        ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
        ...     groups=pd.DataFrame({"group_id": ["T"]}),
        ...     features=pd.DataFrame({"feature_id": ["a", "b"]}),
        ...     cells=[[1, 1]],
        ... )
        >>> cube.select(features=["b"]).to_numpy("counts").shape
        (1, 2, 1)
        """
        lay = self._layer(layer)
        if isinstance(lay, ArrayLayer) and lay.eager:
            return lay.array
        out = np.empty(self.shape, dtype=lay.dtype)
        for g in range(self.shape[0]):
            out[g] = self._read(layer, g)
        return out

    def _digests(self, compute: bool = True) -> _fp.Digests:
        """The known part digests; with ``compute``, the missing group digests too."""
        if compute:
            for name, known in self._group_digests.items():
                for g, value in enumerate(known):
                    if value is None:
                        self._read(name, g)
        if self._cells_digest is None:
            self._cells_digest = _fp.cells_digest(self._cells)
        if self._normalization_digest is None:
            self._normalization_digest = _fp.normalization_digest(self._normalization)
        return _fp.Digests(
            tables={name: self._tables[name].digest for name in _fp.TABLE_NAMES},
            cells=self._cells_digest,
            normalization=self._normalization_digest,
            layers={name: tuple(v) for name, v in self._group_digests.items()},
            dtypes={name: layer.dtype.name for name, layer in self._layers.items()},
        )

    def _known_fingerprint(self) -> str | None:
        """The fingerprint if known without reading a lazy layer (in-memory layers hashed)."""
        for name, layer in self._layers.items():
            if layer.eager and None in self._group_digests[name]:
                for g, value in enumerate(self._group_digests[name]):
                    if value is None:
                        self._read(name, g)
        digests = self._digests(compute=False)
        return digests.fingerprint() if digests.complete else None

    @staticmethod
    def _provenance_record(
        operation: str, parameters: Mapping[str, Any], inputs: Iterable[Any] = ()
    ) -> Provenance:
        """A provenance record stamped now; ``inputs`` are cubes, fingerprints or None.

        An input cube's fingerprint is recorded only if it is known without reading a
        lazy layer, else None.
        """
        from cytepool import __version__

        fingerprints = tuple(x._known_fingerprint() if isinstance(x, Cube) else x for x in inputs)
        return Provenance(operation, dict(parameters), __version__, _utc_now(), fingerprints)

    def _successor(self, operation: str, parameters: Mapping[str, Any], **parts: Any) -> Cube:
        """A cube made from this one alone by ``operation``: ``parts`` (tables, layers, cells,
        normalization, group digests) with this cube's metadata and provenance, plus a record."""
        record = self._provenance_record(operation, parameters, (self,))
        provenance = (*self._provenance, record)
        return Cube._derived(**parts, metadata=self._metadata, provenance=provenance)

    def _with_provenance(self, provenance: Iterable[Provenance]) -> Cube:
        """The same cube (sharing its parts) with other provenance records."""
        records = tuple(provenance)
        for record in records:
            if not isinstance(record, Provenance):
                msg = f"provenance: expected Provenance records, found {type(record).__name__}"
                raise TypeError(msg)
        cube = Cube._derived(
            tables=self._tables,
            layers={n: (self._layers[n], self._exposed[n]) for n in self._layers},
            cells=self._cells,
            normalization=self._normalization,
            metadata=self._metadata,
            provenance=records,
            group_digests=self._group_digests,
        )
        cube._cells_digest = self._cells_digest
        cube._normalization_digest = self._normalization_digest
        return cube

    # ----------------------------------------------------------------------- new cubes

    def select(self, samples: Any = None, groups: Any = None, features: Any = None) -> Cube:
        """A cube of some samples, groups and features, in the order given; reads nothing.

        Parameters
        ----------
        samples, groups, features
            None (all), ids (a string or a sequence of strings), positions (integers) or a
            boolean mask, per axis.

        Returns
        -------
        Cube
            A cube whose layers are lazy: later reads touch only the chunks holding the
            selected samples and features of the selected groups.

        Raises
        ------
        KeyError
            Naming ids that are not in the cube.
        IndexError
            For positions out of range or a mask of the wrong length.
        ValueError
            If a selection repeats an id.

        Examples
        --------
        >>> import numpy as np
        >>> import pandas as pd
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.arange(12).reshape(2, 2, 3)},
        ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
        ...     groups=pd.DataFrame({"group_id": ["B", "T"]}),
        ...     features=pd.DataFrame({"feature_id": ["a", "b", "c"]}),
        ...     cells=[[1, 1], [1, 1]],
        ... )
        >>> sub = cube.select(groups=["T"], features=["c", "a"])
        >>> sub.shape
        (1, 2, 2)
        >>> sub.profiles("T")
        array([[ 8,  6],
               [11,  9]])
        """
        t = self._tables
        gi = t["groups"].resolve(groups)
        si = t["samples"].resolve(samples)
        fi = t["features"].resolve(features)
        tables = {
            "groups": t["groups"].take(gi),
            "samples": t["samples"].take(si),
            "features": t["features"].take(fi),
        }
        cells = self._cells if gi is None else self._cells[gi]
        cells = cells if si is None else cells[:, si]
        norm = self._normalization
        if norm is not None:
            factors = norm.factors if gi is None else norm.factors[gi]
            norm = Normalization(norm.method, factors if si is None else factors[:, si])
        layers: dict[str, tuple[LazyLayer, Any]] = {}
        digests: dict[str, list[str | None]] = {}
        keep = _is_full(si, self.shape[1]) and _is_full(fi, self.shape[2])
        for name, layer in self._layers.items():
            lazy = SelectLayer(layer, gi, si, fi)
            layers[name] = (lazy, lazy)
            if keep:
                known = self._group_digests[name]
                digests[name] = list(known) if gi is None else [known[g] for g in gi.tolist()]
        params = {
            "samples": _ids_parameter(None if si is None else tables["samples"].ids),
            "groups": _ids_parameter(None if gi is None else tables["groups"].ids),
            "features": _ids_parameter(None if fi is None else tables["features"].ids),
        }
        parts = {"tables": tables, "layers": layers, "cells": cells, "normalization": norm}
        return self._successor("select", params, **parts, group_digests=digests)

    def merge_groups(self, groups: Mapping[str, Sequence[str]]) -> Cube:
        """Sum groups into new groups, lazily; the other groups are kept as they are.

        Parameters
        ----------
        groups
            A mapping of new group id to the ids of the groups it sums, such as
            ``{"T cells": ["CD4 T", "CD8 T"]}``. A merged group takes the place of its
            first member; a group may be in at most one merge.

        Returns
        -------
        Cube
            A cube whose layers are lazy sums and whose cells are summed. Covariates of the
            groups table constant within every merge are kept, others dropped. The
            normalization is dropped (factors are not additive).

        Raises
        ------
        KeyError
            Naming unknown group ids.
        ValueError
            For an empty merge, a group in two merges, or a new id that is already taken.

        Notes
        -----
        Integer sums are exact; a sum that does not fit the layer's data type raises
        OverflowError naming the layer and group when it is read.

        Examples
        --------
        >>> import numpy as np
        >>> import pandas as pd
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.arange(12).reshape(3, 2, 2)},
        ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
        ...     groups=pd.DataFrame({"group_id": ["CD4 T", "B", "CD8 T"]}),
        ...     features=pd.DataFrame({"feature_id": ["a", "b"]}),
        ...     cells=[[1, 1], [1, 1], [2, 2]],
        ... )
        >>> merged = cube.merge_groups({"T": ["CD4 T", "CD8 T"]})
        >>> list(merged.groups.index)
        ['T', 'B']
        >>> merged.profiles("T")
        array([[ 8, 10],
               [12, 14]])
        >>> merged.cells.tolist()
        [[3, 3], [1, 1]]
        """
        if not isinstance(groups, Mapping):
            msg = f"merge_groups: expected a mapping of new id to group ids, found {groups!r}"
            raise TypeError(msg)
        table = self._tables["groups"]
        owner: dict[int, str] = {}
        members_of: dict[str, Index] = {}
        for new, old in groups.items():
            if not isinstance(new, str):
                msg = f"merge_groups: new group ids must be strings, found {new!r}"
                raise TypeError(msg)
            if isinstance(old, str) or not isinstance(old, Iterable):
                msg = f"merge_groups: {new!r} must map to a list of group ids, found {old!r}"
                raise TypeError(msg)
            idx = table.locate(list(old))
            if idx.size == 0:
                msg = f"merge_groups: {new!r} merges no groups"
                raise ValueError(msg)
            for i in idx.tolist():
                if i in owner:
                    msg = (
                        f"merge_groups: group {table.ids[i]!r} is merged twice "
                        f"(into {owner[i]!r} and {new!r})"
                    )
                    raise ValueError(msg)
                owner[i] = new
            members_of[new] = idx
        members: list[Index] = []
        new_ids: list[str] = []
        for i, gid in enumerate(table.ids):
            if i not in owner:
                members.append(np.array([i], dtype=np.intp))
                new_ids.append(gid)
            elif owner[i] not in new_ids:
                members.append(members_of[owner[i]])
                new_ids.append(owner[i])
        _check_unique(new_ids, "groups", "would hold")
        tables = dict(self._tables, groups=table.pooled(members, new_ids))
        cells = _sum_cells(
            [self._cells[m] for m in members],
            axis=0,
            ids=new_ids,
            what="group",
            parts_shape=self._cells.shape,
        )
        layers: dict[str, tuple[LazyLayer, Any]] = {}
        digests: dict[str, list[str | None]] = {}
        for name, layer in self._layers.items():
            lazy = GroupSumLayer(layer, members, name=name, group_ids=new_ids)
            layers[name] = (lazy, lazy)
            known = self._group_digests[name]
            digests[name] = [known[m[0]] if len(m) == 1 else None for m in members]
        params = {"groups": {k: [table.ids[i] for i in v.tolist()] for k, v in members_of.items()}}
        parts = {"tables": tables, "layers": layers, "cells": cells, "normalization": None}
        return self._successor("merge_groups", params, **parts, group_digests=digests)

    def pool_samples(self, by: str) -> Cube:
        """Sum the samples that share a value of a sample covariate, lazily.

        Parameters
        ----------
        by
            A column of the samples table, such as ``"donor"``. The new samples are named
            by the ``str`` of its values, in the order they first appear.

        Returns
        -------
        Cube
            A cube whose layers are lazy sums and whose cells are summed. Covariates
            constant within every pool are kept, others dropped; the normalization is
            dropped (factors are not additive).

        Raises
        ------
        KeyError
            If ``by`` is not a column of the samples table.
        ValueError
            If a sample has no value in ``by``.

        Examples
        --------
        >>> import numpy as np
        >>> import pandas as pd
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.arange(6).reshape(1, 3, 2)},
        ...     samples=pd.DataFrame(
        ...         {"sample_id": ["a1", "b1", "a2"], "donor": ["A", "B", "A"], "run": [1, 1, 2]}
        ...     ),
        ...     groups=pd.DataFrame({"group_id": ["T"]}),
        ...     features=pd.DataFrame({"feature_id": ["x", "y"]}),
        ...     cells=[[1, 1, 1]],
        ... )
        >>> pooled = cube.pool_samples(by="donor")
        >>> pooled.samples
                  donor
        sample_id
        A             A
        B             B
        >>> pooled.profiles("T")
        array([[4, 6],
               [2, 3]])
        """
        import narwhals.stable.v2 as nw

        table = self._tables["samples"]
        if not isinstance(by, str):
            msg = f"pool_samples: by must be a column name, found {by!r}"
            raise TypeError(msg)
        if by not in table.frame.columns:
            msg = (
                f"pool_samples: no column {by!r} in the samples table; found {table.frame.columns}"
            )
            raise KeyError(msg)
        series = table.frame.get_column(by)
        keys = _fp.canonical_column(series, by).row_keys()
        missing = [table.ids[i] for i, k in enumerate(keys) if k is None]
        if missing:
            msg = (
                f"pool_samples: {len(missing)} samples have no value in {by!r} "
                f"(such as {missing[:5]}); give every sample a value or select the others"
            )
            raise ValueError(msg)
        values = series.cast(nw.String()).to_list() if series.dtype == nw.Categorical else None
        raw = values if values is not None else series.to_list()
        order: dict[Any, list[int]] = {}
        names: dict[Any, str] = {}
        for i, key in enumerate(keys):
            order.setdefault(key, []).append(i)
            names.setdefault(key, str(raw[i]))
        members = [np.array(v, dtype=np.intp) for v in order.values()]
        new_ids = list(names.values())
        _check_unique(new_ids, "samples", "would hold")
        tables = dict(self._tables, samples=table.pooled(members, new_ids))
        cells = _sum_cells(
            [self._cells[:, m] for m in members],
            axis=1,
            ids=new_ids,
            what="sample",
            parts_shape=self._cells.shape,
        )
        layers: dict[str, tuple[LazyLayer, Any]] = {}
        for name, layer in self._layers.items():
            lazy = SampleSumLayer(layer, members, name=name, group_ids=self._tables["groups"].ids)
            layers[name] = (lazy, lazy)
        parts = {"tables": tables, "layers": layers, "cells": cells, "normalization": None}
        return self._successor("pool_samples", {"by": by}, **parts)


# --------------------------------------------------------------------------- several cubes


def _sum_cells(
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
        acc = _Accumulator(np.dtype(np.int64), moved.shape[1:], where=f"cells, {what} {pid!r}")
        for row in moved:
            acc.add(row)
        sums.append(acc.result())
    if not sums:
        shape = list(parts_shape)
        shape[axis] = 0
        return np.zeros(shape, dtype=np.int64)
    return np.stack(sums, axis=axis)


def _check_cubes(cubes: Any, operation: str) -> list[Cube]:
    if isinstance(cubes, Cube) or not isinstance(cubes, Iterable):
        msg = f"{operation}: expected a sequence of cubes, found {type(cubes).__name__}"
        raise TypeError(msg)
    out = list(cubes)
    if not out:
        msg = f"{operation}: expected at least one cube"
        raise ValueError(msg)
    for c in out:
        if not isinstance(c, Cube):
            msg = f"{operation}: expected cubes, found {type(c).__name__}"
            raise TypeError(msg)
    first = out[0]
    for i, c in enumerate(out[1:], start=1):
        mine = {n: layer.dtype.name for n, layer in first._layers.items()}
        theirs = {n: layer.dtype.name for n, layer in c._layers.items()}
        if sorted(mine) != sorted(theirs):
            msg = (
                f"{operation}: cube {i} has layers {sorted(theirs)}, cube 0 has {sorted(mine)}; "
                "the cubes must have the same layers"
            )
            raise ValueError(msg)
        for name in mine:
            if mine[name] != theirs[name]:
                msg = (
                    f"{operation}: layer {name!r} is {theirs[name]} in cube {i} and "
                    f"{mine[name]} in cube 0; the data types must match"
                )
                raise TypeError(msg)
    return out


def _align(first: _Table, other: _Table, axis: str, operation: str, i: int) -> Index | None:
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
        raise ValueError(msg)
    return other.locate(first.ids)


def _aligned(cube: Cube, perms: Mapping[str, Index | None]) -> dict[str, LazyLayer]:
    if all(p is None for p in perms.values()):
        return dict(cube._layers)
    return {
        name: SelectLayer(layer, perms.get("groups"), perms.get("samples"), perms.get("features"))
        for name, layer in cube._layers.items()
    }


def _aligned_2d(array: np.ndarray[Any, Any], perms: Mapping[str, Index | None]) -> Any:
    g, s = perms.get("groups"), perms.get("samples")
    out = array if g is None else array[g]
    return out if s is None else out[:, s]


def _merged_provenance(cubes: Sequence[Cube]) -> tuple[Provenance, ...]:
    records: list[Provenance] = []
    for cube in cubes:
        for record in cube._provenance:
            if record not in records:
                records.append(record)
    return tuple(records)


def _shared_metadata(cubes: Sequence[Cube]) -> dict[str, Any]:
    first = cubes[0]._metadata
    return first if all(c._metadata == first for c in cubes) else {}


def _concat_normalization(
    cubes: Sequence[Cube], perms: Sequence[Mapping[str, Index | None]], axis: str
) -> Normalization | None:
    norms = [c._normalization for c in cubes]
    if all(n is None for n in norms):
        return None
    methods = {None if n is None else n.method for n in norms}
    if len(methods) != 1:
        msg = (
            f"concat: the cubes have different normalizations {sorted(map(str, methods))}; "
            "build them with the same normalization method, or without one"
        )
        raise ValueError(msg)
    factors = [_aligned_2d(n.factors, p) for n, p in zip(norms, perms, strict=True) if n]
    method = norms[0].method if norms[0] else ""
    if axis == "features":
        if not all(np.array_equal(f, factors[0]) for f in factors):
            msg = "concat: the cubes' normalization factors differ; along features they must match"
            raise ValueError(msg)
        return norms[0]
    return Normalization(method, np.concatenate(factors, axis=AXES.index(axis)))


def concat(cubes: Iterable[Cube], axis: Axis) -> Cube:
    """Join cubes along one axis, lazily.

    Parameters
    ----------
    cubes
        The cubes, with the same layers and data types.
    axis
        ``"samples"``, ``"groups"`` or ``"features"``. The ids along it must be unique over
        all the cubes; the other two axes must hold the same ids in every cube, and are
        aligned by id to the first cube's order (whose tables they keep).

    Returns
    -------
    Cube
        A cube whose layers are lazy. Cells are joined the same way (along ``"features"``
        they must be equal). The normalization is kept if every cube has the same method
        (along ``"features"``: the same factors).

    Raises
    ------
    TypeError
        If an input is not a cube, or a layer's data type differs between cubes.
    ValueError
        For an unknown axis, different layers or ids on the other axes, repeated ids along
        ``axis``, or normalizations that cannot be joined.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> import cytepool
    >>> def tiny(samples, value):
    ...     return cytepool.Cube(
    ...         {"counts": np.full((1, len(samples), 2), value)},
    ...         samples=pd.DataFrame({"sample_id": samples}),
    ...         groups=pd.DataFrame({"group_id": ["T"]}),
    ...         features=pd.DataFrame({"feature_id": ["a", "b"]}),
    ...         cells=[[1] * len(samples)],
    ...     )
    >>> both = cytepool.concat([tiny(["s1"], 1), tiny(["s2", "s3"], 2)], axis="samples")
    >>> both.profiles("T")
    array([[1, 1],
           [2, 2],
           [2, 2]])
    """
    if axis not in AXES:
        msg = f"concat: axis must be one of {list(AXES)}, found {axis!r}"
        raise ValueError(msg)
    cubes = _check_cubes(cubes, "concat")
    first = cubes[0]
    others = [a for a in AXES if a != axis]
    perms = [dict.fromkeys(others)] + [
        {a: _align(first._tables[a], c._tables[a], a, "concat", i) for a in others}
        for i, c in enumerate(cubes[1:], start=1)
    ]
    tables = dict(first._tables)
    tables[axis] = _Table.joined([c._tables[axis] for c in cubes], axis)
    cells_parts = [_aligned_2d(c._cells, p) for c, p in zip(cubes, perms, strict=True)]
    if axis == "features":
        for i, part in enumerate(cells_parts[1:], start=1):
            if not np.array_equal(part, cells_parts[0]):
                g, s = np.argwhere(part != cells_parts[0])[0]
                msg = (
                    f"concat: along features the cells must match; cube {i} has {part[g, s]} "
                    f"cells at group {tables['groups'].ids[g]!r}, sample "
                    f"{tables['samples'].ids[s]!r}, cube 0 has {cells_parts[0][g, s]}"
                )
                raise ValueError(msg)
        cells = cells_parts[0]
    else:
        cells = np.concatenate(cells_parts, axis=AXES.index(axis))
    norm = _concat_normalization(cubes, perms, axis)
    aligned = [_aligned(c, p) for c, p in zip(cubes, perms, strict=True)]
    layers: dict[str, tuple[LazyLayer, Any]] = {}
    digests: dict[str, list[str | None]] = {}
    for name in first._layers:
        lazy = ConcatLayer([a[name] for a in aligned], AXES.index(axis))
        layers[name] = (lazy, lazy)
        if axis == "groups":
            digests[name] = [
                v
                for c, p in zip(cubes, perms, strict=True)
                for v in (
                    c._group_digests[name]
                    if all(x is None for x in p.values())
                    else [None] * c.shape[0]
                )
            ]
    record = Cube._provenance_record("concat", {"axis": axis, "n": len(cubes)}, cubes)
    return Cube._derived(
        tables=tables,
        layers=layers,
        cells=cells,
        normalization=norm,
        metadata=_shared_metadata(cubes),
        provenance=(*_merged_provenance(cubes), record),
        group_digests=digests,
    )


def add(cubes: Iterable[Cube]) -> Cube:
    """Add cubes that share all three axes (two runs of the same libraries), lazily.

    Parameters
    ----------
    cubes
        The cubes, with the same layers and data types and the same sample, group and
        feature ids (aligned by id to the first cube's order, whose tables are kept).

    Returns
    -------
    Cube
        A cube whose layers are lazy exact sums and whose cells are summed. The
        normalization is dropped (factors are not additive).

    Raises
    ------
    TypeError
        If an input is not a cube, or a layer's data type differs between cubes.
    ValueError
        For different layers or ids.

    Notes
    -----
    A sum that does not fit the layer's data type raises OverflowError naming the layer and
    group when it is read.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> import cytepool
    >>> run = cytepool.Cube(
    ...     {"counts": np.array([[[1, 2]]], dtype="int32")},
    ...     samples=pd.DataFrame({"sample_id": ["s1"]}),
    ...     groups=pd.DataFrame({"group_id": ["T"]}),
    ...     features=pd.DataFrame({"feature_id": ["a", "b"]}),
    ...     cells=[[3]],
    ... )
    >>> total = cytepool.add([run, run])
    >>> total.profiles("T"), total.cells
    (array([[2, 4]], dtype=int32), array([[6]]))
    """
    cubes = _check_cubes(cubes, "add")
    first = cubes[0]
    perms = [dict.fromkeys(AXES)] + [
        {a: _align(first._tables[a], c._tables[a], a, "add", i) for a in AXES}
        for i, c in enumerate(cubes[1:], start=1)
    ]
    cells_parts = [_aligned_2d(c._cells, p) for c, p in zip(cubes, perms, strict=True)]
    acc = _Accumulator(np.dtype(np.int64), first._cells.shape, where="cells")
    for part in cells_parts:
        acc.add(part)
    aligned = [_aligned(c, p) for c, p in zip(cubes, perms, strict=True)]
    layers: dict[str, tuple[LazyLayer, Any]] = {}
    for name in first._layers:
        lazy = SumLayer(
            [a[name] for a in aligned], name=name, group_ids=first._tables["groups"].ids
        )
        layers[name] = (lazy, lazy)
    record = Cube._provenance_record("add", {"n": len(cubes)}, cubes)
    return Cube._derived(
        tables=dict(first._tables),
        layers=layers,
        cells=acc.result(),
        normalization=None,
        metadata=_shared_metadata(cubes),
        provenance=(*_merged_provenance(cubes), record),
    )
