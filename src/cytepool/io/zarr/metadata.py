"""Zarr v3 metadata documents (zarr.json) as frozen records, parsed strictly.

Each JSON object of an array or group document has one frozen record here, with the field names
of the specification and a ``from_json`` / ``to_json`` pair. Parsing checks every field: a
document with repeated keys, NaN or Infinity tokens, a wrong type or value anywhere, or a field
the specification does not define (unless its value is an object with ``"must_understand":
false``) raises a :class:`~cytepool.errors.FormatError` (a ``ValueError``) naming the file and
the field. Features that are valid Zarr but not implemented raise
:class:`~cytepool.errors.UnsupportedFeatureError` (also a ``ValueError``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from cytepool._utf8 import is_unicode
from cytepool.errors import InputError, InputTypeError, check_string_keys
from cytepool.io.zarr import indexing
from cytepool.io.zarr.data_types import (
    DATA_TYPES,
    DataType,
    fill_value_from_json,
    fill_value_to_json,
)
from cytepool.io.zarr.fields import (
    MAX_DIMENSION,
    MAX_METADATA_BYTES,
    METADATA_FILE,
    as_object,
    check_config_keys,
    check_extra_fields,
    dumps,
    fail,
    is_int,
    loads,
    named_configuration,
    unsupported,
)

if TYPE_CHECKING:
    from cytepool.io.zarr.codecs import CodecChain

__all__ = [
    "DATA_TYPES",
    "MAX_METADATA_BYTES",
    "METADATA_FILE",
    "ArrayMetadata",
    "ChunkKeyEncoding",
    "DataType",
    "GroupMetadata",
    "RegularChunkGrid",
    "dumps",
    "fill_value_from_json",
    "fill_value_to_json",
    "loads",
    "parse_document",
]

# ---------------------------------------------------------------------------------------------
# Chunk grid and chunk key encoding


@dataclass(frozen=True)
class RegularChunkGrid:
    """The ``regular`` chunk grid.

    Examples
    --------
    >>> RegularChunkGrid((2, 3)).to_json()
    {'name': 'regular', 'configuration': {'chunk_shape': [2, 3]}}
    """

    chunk_shape: tuple[int, ...]

    @classmethod
    def from_json(cls, value: Any, ndim: int, where: str) -> RegularChunkGrid:
        """Parse the ``chunk_grid`` field of an array with ``ndim`` dimensions."""
        name, config = named_configuration(value, where, "chunk_grid")
        if name != "regular":
            raise unsupported(where, f"the chunk grid {name!r} (only 'regular' is supported)")
        config = check_config_keys(config, ["chunk_shape"], [], where, "the regular chunk grid")
        chunks = config["chunk_shape"]
        if not isinstance(chunks, list) or len(chunks) != ndim:
            problem = f"chunk_shape must be a list of {ndim} positive integers, not {chunks!r}"
            raise fail(where, problem)
        if not all(is_int(c) and 1 <= c <= MAX_DIMENSION for c in chunks):
            raise fail(where, f"chunk_shape must hold positive integers, not {chunks!r}")
        return cls(tuple(chunks))

    def to_json(self) -> dict[str, Any]:
        """The ``chunk_grid`` field."""
        return {"name": "regular", "configuration": {"chunk_shape": list(self.chunk_shape)}}


@dataclass(frozen=True)
class ChunkKeyEncoding:
    """The ``default`` or ``v2`` chunk key encoding with its separator.

    Examples
    --------
    >>> ChunkKeyEncoding("default", "/").encode((1, 0))
    'c/1/0'
    >>> ChunkKeyEncoding("v2", ".").encode(())
    '0'
    """

    name: Literal["default", "v2"] = "default"
    separator: Literal["/", "."] = "/"

    @classmethod
    def from_json(cls, value: Any, where: str) -> ChunkKeyEncoding:
        """Parse the ``chunk_key_encoding`` field."""
        name, config = named_configuration(value, where, "chunk_key_encoding")
        if name not in ("default", "v2"):
            problem = f"the chunk key encoding {name!r} (supported: 'default', 'v2')"
            raise unsupported(where, problem)
        what = f"the {name} chunk key encoding"
        config = check_config_keys(config, [], ["separator"], where, what)
        separator = config.get("separator", "/" if name == "default" else ".")
        if separator not in ("/", "."):
            raise fail(where, f"the separator of {what} must be '/' or '.', not {separator!r}")
        return cls(cast("Literal['default', 'v2']", name), separator)

    def to_json(self) -> dict[str, Any]:
        """The ``chunk_key_encoding`` field."""
        return {"name": self.name, "configuration": {"separator": self.separator}}

    def encode(self, coords: Sequence[int]) -> str:
        """The key (a relative path) of the chunk at ``coords`` of the chunk grid."""
        return indexing.chunk_key(coords, self.name, self.separator)


# ---------------------------------------------------------------------------------------------
# Documents


_ARRAY_FIELDS = {
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "attributes",
    "storage_transformers",
    "dimension_names",
}
_GROUP_FIELDS = {"zarr_format", "node_type", "attributes"}


@dataclass(frozen=True)
class ArrayMetadata:
    """The metadata document of a Zarr v3 array.

    Examples
    --------
    >>> doc = {
    ...     "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "int16",
    ...     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
    ...     "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
    ...     "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
    ... }
    >>> meta = ArrayMetadata.from_json(doc, "zarr.json")
    >>> meta.shape, meta.chunk_grid.chunk_shape, meta.codecs.array_bytes.endian
    ((4,), (2,), 'big')
    """

    shape: tuple[int, ...]
    data_type: DataType
    chunk_grid: RegularChunkGrid
    chunk_key_encoding: ChunkKeyEncoding
    fill_value: Any
    codecs: CodecChain
    attributes: dict[str, Any] = field(default_factory=dict)
    dimension_names: tuple[str | None, ...] | None = None

    @classmethod
    def from_json(cls, doc: Any, where: str) -> ArrayMetadata:
        """Parse and check an array document."""
        from cytepool.io.zarr.codecs import parse_codecs

        doc = _check_header(doc, "array", where)
        check_extra_fields(doc, _ARRAY_FIELDS, where, "the array metadata")
        for key in sorted(_ARRAY_FIELDS - {"attributes", "storage_transformers"}):
            if key not in doc and key != "dimension_names":
                raise fail(where, f"the array metadata lacks the required field {key!r}")
        _check_storage_transformers(doc, where)
        shape = _parse_shape(doc["shape"], where)
        data_type = DataType.from_json(doc["data_type"], where)
        grid = RegularChunkGrid.from_json(doc["chunk_grid"], len(shape), where)
        return cls(
            shape=shape,
            data_type=data_type,
            chunk_grid=grid,
            chunk_key_encoding=ChunkKeyEncoding.from_json(doc["chunk_key_encoding"], where),
            fill_value=fill_value_from_json(doc["fill_value"], data_type, where),
            codecs=parse_codecs(doc["codecs"], data_type, grid.chunk_shape, where),
            attributes=_parse_attributes(doc, where),
            dimension_names=_parse_dimension_names(doc, len(shape), where),
        )

    def to_json(self) -> dict[str, Any]:
        """The document, with keys in zarr-python's order."""
        doc: dict[str, Any] = {
            "shape": list(self.shape),
            "data_type": self.data_type.to_json(),
            "chunk_grid": self.chunk_grid.to_json(),
            "chunk_key_encoding": self.chunk_key_encoding.to_json(),
            "fill_value": fill_value_to_json(self.fill_value, self.data_type),
            "codecs": self.codecs.to_json(),
            "attributes": self.attributes,
            "zarr_format": 3,
            "node_type": "array",
            "storage_transformers": [],
        }
        if self.dimension_names is not None:
            doc["dimension_names"] = list(self.dimension_names)
        return doc

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)


@dataclass(frozen=True)
class GroupMetadata:
    """The metadata document of a Zarr v3 group (consolidated metadata is ignored).

    Examples
    --------
    >>> GroupMetadata.from_json({"zarr_format": 3, "node_type": "group"}, "zarr.json")
    GroupMetadata(attributes={})
    """

    attributes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: Any, where: str) -> GroupMetadata:
        """Parse and check a group document."""
        doc = _check_header(doc, "group", where)
        check_extra_fields(doc, _GROUP_FIELDS, where, "the group metadata")
        return cls(_parse_attributes(doc, where))

    def to_json(self) -> dict[str, Any]:
        """The document, with keys in zarr-python's order."""
        return {"attributes": self.attributes, "zarr_format": 3, "node_type": "group"}


def parse_document(doc: Any, where: str) -> ArrayMetadata | GroupMetadata:
    """Parse an array or group document according to its ``node_type``.

    Parameters
    ----------
    doc
        The parsed JSON document.
    where
        The file, for error messages.

    Returns
    -------
    The array or group record.

    Raises
    ------
    FormatError
        If the document is invalid.
    UnsupportedFeatureError
        If it uses a feature this module does not implement.

    Examples
    --------
    >>> parse_document({"zarr_format": 3, "node_type": "group", "attributes": {"a": 1}}, "z")
    GroupMetadata(attributes={'a': 1})
    """
    doc = as_object(doc, where, "the document")
    if doc.get("node_type") == "array":
        return ArrayMetadata.from_json(doc, where)
    return GroupMetadata.from_json(doc, where)


def _check_header(doc: Any, node_type: str, where: str) -> dict[str, Any]:
    doc = as_object(doc, where, "the document")
    version = doc.get("zarr_format")
    if not is_int(version) or version != 3:
        raise fail(where, f"zarr_format must be 3 (Zarr v3), not {version!r}")
    found = doc.get("node_type")
    if found not in ("array", "group"):
        raise fail(where, f'node_type must be "array" or "group", not {found!r}')
    if found != node_type:
        raise fail(where, f"expected {node_type} metadata, found node_type {found!r}")
    return doc


def _parse_shape(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(is_int(n) and 0 <= n <= MAX_DIMENSION for n in value):
        raise fail(where, f"shape must be a list of non-negative integers, not {value!r}")
    return tuple(value)


def check_attributes(attributes: Any) -> dict[str, Any]:
    """Attributes to write: a mapping with string keys at any depth, as the JSON it is stored
    as (InputTypeError naming the key path for another key, which JSON would make a string)."""
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        msg = f"attributes must be a mapping, not {type(attributes).__name__}"
        raise InputTypeError(msg)
    check_string_keys(attributes, "attributes", "attribute names")  # at any depth
    try:
        text = json.dumps(dict(attributes), allow_nan=False, ensure_ascii=False)
        if not is_unicode(text):  # a lone surrogate: JSON that readers such as tensorstore refuse
            found = _lone_surrogate(attributes, "attributes")
            msg = f"attributes: {found} holds a lone surrogate"
            raise InputError(msg + " (not Unicode, which a Zarr document must be); remove it")
        result: dict[str, Any] = json.loads(text)
    except RecursionError as error:  # Python's JSON encoder or decoder recurses per level
        msg = f"attributes nest too deeply to be written as JSON ({error}); flatten them"
        raise InputError(msg) from None
    return result


def _lone_surrogate(value: Any, where: str) -> str | None:
    """Where in the JSON value ``value`` (at ``where``) a key or string holds a lone
    surrogate: the first one found, or None."""
    if isinstance(value, str):
        return None if is_unicode(value) else f"{where} ({value!r})"
    items: Iterable[tuple[Any, Any]] = ()
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    for key, item in items:
        if isinstance(key, str) and not is_unicode(key):
            return f"the key {key!r} of {where}"
        found = _lone_surrogate(item, f"{where}[{key!r}]")
        if found is not None:
            return found
    return None


def _parse_attributes(doc: dict[str, Any], where: str) -> dict[str, Any]:
    return dict(as_object(doc.get("attributes", {}), where, "attributes"))


def _parse_dimension_names(
    doc: dict[str, Any], ndim: int, where: str
) -> tuple[str | None, ...] | None:
    names = doc.get("dimension_names")
    if names is None:
        return None
    if not isinstance(names, list) or len(names) != ndim:
        raise fail(where, f"dimension_names must be a list of {ndim} names, not {names!r}")
    if not all(name is None or isinstance(name, str) for name in names):
        raise fail(where, f"dimension_names must hold strings or null, not {names!r}")
    return tuple(names)


def _check_storage_transformers(doc: dict[str, Any], where: str) -> None:
    value = doc.get("storage_transformers", [])
    if not isinstance(value, list):
        raise fail(where, f"storage_transformers must be a list, not {value!r}")
    if value:
        names = [item.get("name") if isinstance(item, dict) else item for item in value]
        raise unsupported(where, f"storage transformers {names!r}")
