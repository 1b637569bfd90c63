"""The table of encodings, and the dispatcher that writes and reads elements with it.

An element's encoding is an :class:`IOSpec`, the pair of its ``encoding-type`` and
``encoding-version`` attributes. :data:`READERS` maps each spec cytepool reads to a reader;
:data:`WRITERS` maps each column kind to the spec it is written as and its writer. The dispatcher
(:func:`write_element`, :func:`read_element`) is the only place that touches the store, stamps
the encoding attributes, recurses into the children of groups, and adds a note naming the
element's path to any error raised on the way (once, by the innermost element).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from cytepool.errors import FormatError, UnsupportedFeatureError
from cytepool.io import zarr as _zarr
from cytepool.io.tables import columns as _c
from cytepool.io.tables import strings as _s
from cytepool.io.zarr.store import StorePath

__all__ = [
    "DATAFRAME",
    "READERS",
    "WRITERS",
    "IOSpec",
    "WriteOptions",
    "add_path_note",
    "check_lengths",
    "element_children",
    "read_element",
    "read_node",
    "write_element",
    "write_plan",
]

_NOTE_PREFIX = "Error raised while "
TARGET_CHUNK_BYTES = 1 << 20
"""Default chunks aim at about this many bytes per chunk of a column."""
_STRING_ITEM_BYTES = 16


@dataclass(frozen=True, slots=True)
class IOSpec:
    """The encoding of an element: its ``encoding-type`` and ``encoding-version``."""

    encoding_type: str
    encoding_version: str

    def to_attributes(self) -> dict[str, str]:
        """Return the two attributes that record this encoding."""
        return {"encoding-type": self.encoding_type, "encoding-version": self.encoding_version}

    @classmethod
    def from_attributes(cls, attributes: Mapping[str, Any]) -> IOSpec:
        """Return the encoding recorded in ``attributes`` (empty strings if there is none)."""
        kind = attributes.get("encoding-type", "")
        version = attributes.get("encoding-version", "")
        if not isinstance(kind, str) or not isinstance(version, str):
            msg = f"encoding-type and encoding-version must be strings, found {kind!r}, {version!r}"
            raise FormatError(msg)
        return cls(kind, version)


DATAFRAME = IOSpec("dataframe", "0.2.0")
_ARRAY = IOSpec("array", "0.2.0")

Reader = Callable[[_c.Node, _c.Read], _c.Column]
Writer = Callable[[_c.Column], _c.ArrayPlan | _c.GroupPlan]

READERS: Mapping[IOSpec, Reader] = MappingProxyType(
    {
        _ARRAY: _c.read_array,
        IOSpec("string-array", "0.2.0"): _c.read_array,
        IOSpec("", ""): _c.read_array,  # an array without encoding attributes
        IOSpec("categorical", "0.2.0"): _c.read_categorical,
        IOSpec("nullable-integer", "0.1.0"): _c.read_nullable_integer,
        IOSpec("nullable-boolean", "0.1.0"): _c.read_nullable_boolean,
        IOSpec("nullable-string-array", "0.1.0"): _c.read_nullable_string,
    }
)
"""Reader of each encoding; the dataframe itself (:data:`DATAFRAME`) is read by frames.py."""

WRITERS: Mapping[_c.Kind, tuple[IOSpec, Writer]] = MappingProxyType(
    {
        "array": (_ARRAY, _c.write_array),
        "string": (IOSpec("string-array", "0.2.0"), _c.write_array),
        "categorical": (IOSpec("categorical", "0.2.0"), _c.write_categorical),
        "nullable-integer": (IOSpec("nullable-integer", "0.1.0"), _c.write_nullable),
        "nullable-boolean": (IOSpec("nullable-boolean", "0.1.0"), _c.write_nullable),
        "nullable-string": (IOSpec("nullable-string-array", "0.1.0"), _c.write_nullable),
        # cytepool's extensions: arrays that anndata reads, see columns.py
        "nullable-float": (_ARRAY, _c.write_nullable_float),
        "datetime": (_ARRAY, _c.write_datetime),
        "date": (_ARRAY, _c.write_date),
        "duration": (_ARRAY, _c.write_array),
    }
)
"""Encoding and writer of each column kind."""


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """How arrays are stored: rows per chunk (None: about 1 MiB per chunk) and compression."""

    chunks: int | None
    compression: str | None
    level: int | None

    def chunk_rows(self, data: np.ndarray | _c.LazyRows | _s.StringRows) -> int:
        """Return the rows per chunk for ``data``."""
        if self.chunks is not None:
            return self.chunks
        if len(data) == 0:
            return 1
        item = _STRING_ITEM_BYTES if data.dtype.kind in "OTU" else data.dtype.itemsize
        return max(1, min(len(data), TARGET_CHUNK_BYTES // item))


def write_element(path: Path, column: _c.Column, options: WriteOptions, shown: str) -> None:
    """Write a column at ``path`` in the encoding :data:`WRITERS` gives its kind.

    ``shown`` is the path the error notes name (the final path of a table built elsewhere).
    """
    try:
        spec, writer = WRITERS[_c.kind_of(column)]
        plan = writer(column)
    except Exception as error:
        add_path_note(error, "writing", shown)
        raise
    write_plan(path, spec, plan, options, shown)


def write_plan(
    path: Path,
    spec: IOSpec,
    plan: _c.ArrayPlan | _c.GroupPlan,
    options: WriteOptions,
    shown: str,
) -> None:
    """Store a plan at ``path``, stamping the encoding of ``spec`` after its own attributes."""
    attributes = {**plan.attributes, **spec.to_attributes()}
    try:
        if isinstance(plan, _c.ArrayPlan) and _is_strings(plan.data):
            _s.write_strings(
                path,
                plan.data,
                chunks=options.chunk_rows(plan.data),
                compression=options.compression,
                level=options.level,
                attributes=attributes,
            )
            return
        if isinstance(plan, _c.ArrayPlan):
            _zarr.write_array(
                path,
                plan.data,
                chunks=(options.chunk_rows(plan.data),),
                compression=options.compression,
                level=options.level,
                attributes=attributes,
            )
            return
        _zarr.write_group(path, attributes)
    except Exception as error:
        add_path_note(error, "writing", shown)
        raise
    for name, child in plan.children.items():  # one at a time: each is made only now
        _write_child(path, name, child, options, shown)


def _is_strings(data: np.ndarray | _c.LazyRows | _s.StringRows) -> bool:
    """Whether ``data`` is a 1-D string column (written by :func:`strings.write_strings`)."""
    return data.ndim == 1 and data.dtype.kind in "OTU"


def _write_child(
    path: Path,
    name: str,
    child: _c.Column | Callable[[], _c.Column],
    options: WriteOptions,
    shown: str,
) -> None:
    try:
        column = child() if callable(child) else child
    except Exception as error:
        add_path_note(error, "writing", f"{shown}/{name}")
        raise
    write_element(path / name, column, options, f"{shown}/{name}")


def read_node(path: StorePath, *, objects: bool = True) -> _c.Node:
    """Open the element at ``path``: its attributes, and the array if it is one."""
    kind = _zarr.node_type(path)
    if kind == "array":
        array = _zarr.open_array(path)
        return _c.Node(path, array.attributes, array, objects)
    return _c.Node(path, _zarr.read_group_attributes(path), None, objects)


def read_element(
    path: StorePath, *, objects: bool = True, nullable_objects: bool | None = None
) -> _c.Column:
    """Read the column stored at ``path`` with the reader of its encoding.

    ``objects`` reads strings as object arrays of ``str``, else as UTF-8 buffers;
    ``nullable_objects`` (None: ``objects``) does so for the values of a
    ``nullable-string-array`` (pandas 3 keeps those in pyarrow, made from the buffers).
    """
    try:
        node = read_node(path, objects=objects)
        spec = IOSpec.from_attributes(node.attributes)
        reader = READERS.get(spec)
        if reader is None:
            known = ", ".join(
                f"{s.encoding_type} {s.encoding_version}" for s in READERS if s.encoding_type
            )
            msg = (
                f"{path}: encoding-type {spec.encoding_type!r} version {spec.encoding_version!r} "
                f"is not a table column encoding cytepool reads (it reads {known})"
            )
            raise UnsupportedFeatureError(msg)
        if spec.encoding_type == "" and node.array is None:
            msg = f"{path}: a group without encoding attributes is not a table column"
            raise FormatError(msg)
        if spec.encoding_type == "nullable-string-array" and nullable_objects is not None:
            objects = nullable_objects
        return reader(node, partial(read_element, objects=objects))
    except Exception as error:
        add_path_note(error, "reading", str(path))
        raise


def element_children(document: Any) -> list[str]:
    """The names of the elements a table element's zarr.json says it holds: a dataframe's index
    and columns, a categorical's codes and categories, a nullable array's values and mask.

    For fetching ahead only, so it never raises: an array, an encoding cytepool does not read or
    a malformed document gives what can be told from it (its reader reports the problem).

    Examples
    --------
    >>> element_children({"node_type": "group", "attributes": {"encoding-type": "dataframe",
    ...     "encoding-version": "0.2.0", "_index": "id", "column-order": ["a", "b"]}})
    ['id', 'a', 'b']
    >>> element_children({"node_type": "group", "attributes": {"encoding-type": "categorical"}})
    ['codes', 'categories']
    """
    if not isinstance(document, dict) or document.get("node_type") != "group":
        return []
    attributes = document.get("attributes")
    if not isinstance(attributes, dict):
        return []
    kind = attributes.get("encoding-type")
    if kind == DATAFRAME.encoding_type:
        order = attributes.get("column-order")
        names = [attributes.get("_index"), *(order if isinstance(order, list) else [])]
        return [name for name in dict.fromkeys(names) if isinstance(name, str)]
    if kind == "categorical":
        return ["codes", "categories"]
    if isinstance(kind, str) and kind.startswith("nullable-"):
        return ["values", "mask"]
    return []


def add_path_note(error: BaseException, action: str, shown: str) -> None:
    """Add a note naming the element's path to ``error``, unless an inner element did."""
    notes = getattr(error, "__notes__", ())
    if not any(note.startswith(_NOTE_PREFIX) for note in notes):
        error.add_note(f"{_NOTE_PREFIX}{action} the table element at {shown}")


def check_lengths(root: StorePath, names: list[str], rows: int | None) -> int:
    """The number of rows of the elements ``names`` of a table, from their metadata alone.

    Every element must declare the same number (and ``rows``, if given), and a categorical's
    categories must be no more than its codes can address; FormatError otherwise, before any
    value is read, so an edited shape never makes a reader allocate what it describes.
    """
    expected = rows
    for position, name in enumerate(dict.fromkeys(names)):
        found = _declared_length(root / name)
        if found is None:  # an encoding cytepool does not read: its reader says so
            continue
        if expected is None:
            expected = found
        elif found != expected:
            what = "the index" if position == 0 else f"column {name!r}"
            basis = "the index has" if rows is None else "the shape of its cube says"
            msg = f"{root}: {what} has {found} rows but {basis} {expected}"
            raise FormatError(msg)
    if expected is None:
        msg = f"{root}: the table's index has an encoding cytepool does not read"
        raise UnsupportedFeatureError(msg)
    return expected


def _declared_length(path: StorePath) -> int | None:
    """The length an element's metadata declares, or None for an unknown encoding."""
    if _zarr.node_type(path) == "array":
        return len(_column_array(path))
    spec = IOSpec.from_attributes(_zarr.read_group_attributes(path))
    if spec.encoding_type == "categorical":
        codes = _column_array(path / "codes")
        n_categories = _declared_length(path / "categories")
        if codes.dtype.kind == "i" and n_categories is not None:
            most = int(np.iinfo(codes.dtype).max) + 1
            if n_categories > most:
                msg = (
                    f"{path}: {n_categories} categories are more than codes of data type "
                    f"{codes.dtype} can address ({most})"
                )
                raise FormatError(msg)
        return len(codes)
    if spec.encoding_type.startswith("nullable-"):
        values, mask = _column_array(path / "values"), _column_array(path / "mask")
        if len(values) != len(mask):
            msg = f"{path}: values has {len(values)} elements but mask has {len(mask)}"
            raise FormatError(msg)
        return len(values)
    return None


def _column_array(path: StorePath) -> _zarr.ZarrArray:
    """The 1-D array at ``path`` (its metadata; no value is read)."""
    if _zarr.node_type(path) != "array":
        msg = f"{path}: expected an array, found a group"
        raise FormatError(msg)
    array = _zarr.open_array(path)
    if array.ndim != 1:
        msg = f"{path}: a table column must be 1-D, found shape {array.shape}"
        raise FormatError(msg)
    return array
