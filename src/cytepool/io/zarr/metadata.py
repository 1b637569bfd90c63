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
import math
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from cytepool.errors import FormatError, InputError, InputTypeError, UnsupportedFeatureError
from cytepool.io.zarr import indexing

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

METADATA_FILE = "zarr.json"
MAX_METADATA_BYTES = 64 * 2**20
"""The largest metadata document (zarr.json) a reader accepts, in bytes: 64 MiB."""

_CORE_NAMES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
DATA_TYPES: Mapping[str, np.dtype[Any]] = types.MappingProxyType(
    {name: np.dtype(name) for name in _CORE_NAMES}
)

STRING = "string"
DATETIME = "numpy.datetime64"
TIMEDELTA = "numpy.timedelta64"
TIME_UNITS = (
    "Y",
    "M",
    "W",
    "D",
    "h",
    "m",
    "s",
    "ms",
    "us",
    "μs",
    "ns",
    "ps",
    "fs",
    "as",
    "generic",
)
_MAX_SCALE_FACTOR = 2**31 - 1
_MAX_DIMENSION = 2**63 - 1
_HEX_DIGITS = re.compile(r"[0-9a-fA-F]+")
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


# ---------------------------------------------------------------------------------------------
# Strict JSON


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            msg = f"repeated key {key!r} in a JSON object"
            raise InputError(msg)
        result[key] = value
    return result


def _no_constants(token: str) -> Any:
    msg = f"the JSON token {token} is not valid JSON (RFC 8259)"
    raise InputError(msg)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        msg = f"the JSON number {text} does not fit a 64-bit float"
        raise InputError(msg)
    return value


def loads(text: str | bytes | bytearray, where: str) -> Any:
    """Parse strict JSON: no repeated keys, no NaN/Infinity tokens, finite numbers only.

    Parameters
    ----------
    text
        The JSON text (bytes are decoded as UTF-8, without a byte order mark).
    where
        The file the text came from, for error messages.

    Returns
    -------
    The parsed value.

    Raises
    ------
    FormatError
        If the text is not strict JSON.

    Examples
    --------
    >>> loads('{"a": [1, 2.5]}', "x.json")
    {'a': [1, 2.5]}
    >>> loads('{"a": 1, "a": 2}', "x.json")
    Traceback (most recent call last):
    ...
    cytepool.errors.FormatError: x.json is not valid JSON: repeated key 'a' in a JSON object
    """
    try:
        if not isinstance(text, str):
            text = text.decode("utf-8")
        return json.loads(
            text,
            object_pairs_hook=_no_repeated_keys,
            parse_constant=_no_constants,
            parse_float=_finite_float,
        )
    except (ValueError, RecursionError) as error:
        msg = f"{where} is not valid JSON: {error}"
        raise FormatError(msg) from error


def dumps(document: Mapping[str, Any]) -> str:
    """Serialise a metadata document as zarr-python does (2-space indent, ASCII).

    Parameters
    ----------
    document
        A JSON-serialisable mapping.

    Returns
    -------
    The JSON text.

    Raises
    ------
    ValueError
        If the document holds a non-finite float.
    TypeError
        If the document holds something JSON cannot represent.

    Examples
    --------
    >>> print(dumps({"zarr_format": 3, "node_type": "group"}))
    {
      "zarr_format": 3,
      "node_type": "group"
    }
    """
    return json.dumps(document, indent=2, ensure_ascii=True, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# Field checks


def _fail(where: str, problem: str) -> FormatError:
    return FormatError(f"invalid Zarr metadata {where}: {problem}")


def _unsupported(where: str, problem: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(f"unsupported Zarr feature in {where}: {problem}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _object(value: Any, where: str, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"{name} must be a JSON object, not {value!r}")
    return value


def _check_extra_fields(doc: Mapping[str, Any], known: set[str], where: str, name: str) -> None:
    for key, value in doc.items():
        if key in known:
            continue
        if isinstance(value, dict) and value.get("must_understand") is False:
            continue
        problem = (
            f"{name} has the field {key!r}, which the Zarr v3 specification does not define"
            ' (an extension field needs an object value with "must_understand": false)'
        )
        raise _fail(where, problem)


def named_configuration(value: Any, where: str, name: str) -> tuple[str, dict[str, Any] | None]:
    """Split a ``{"name": ..., "configuration": {...}}`` object, checking its fields.

    Parameters
    ----------
    value
        The JSON value.
    where
        The file, for error messages.
    name
        The field holding the value, for error messages.

    Returns
    -------
    The name and the configuration (None when absent).

    Raises
    ------
    FormatError
        If the object is malformed.

    Examples
    --------
    >>> named_configuration({"name": "gzip", "configuration": {"level": 1}}, "zarr.json", "codec")
    ('gzip', {'level': 1})
    """
    doc = _object(value, where, name)
    if not isinstance(doc.get("name"), str):
        raise _fail(where, f'{name} needs a string "name", found {doc!r}')
    for key in doc:
        if key not in ("name", "configuration", "must_understand"):
            raise _fail(where, f"{name} {doc['name']!r} has the unknown field {key!r}")
    if "must_understand" in doc and not isinstance(doc["must_understand"], bool):
        raise _fail(where, f'{name} {doc["name"]!r} has a non-boolean "must_understand"')
    config = doc.get("configuration")
    if "configuration" in doc:
        config = _object(config, where, f"the configuration of {name} {doc['name']!r}")
    return doc["name"], config


def check_config_keys(
    config: Mapping[str, Any] | None,
    required: Sequence[str],
    optional: Sequence[str],
    where: str,
    name: str,
) -> dict[str, Any]:
    """Check that a configuration has the required keys and no others; return it as a dict.

    Parameters
    ----------
    config
        The configuration (None when absent).
    required, optional
        The keys it must and may have.
    where
        The file, for error messages.
    name
        What the configuration belongs to, for error messages.

    Returns
    -------
    The configuration, ``{}`` when absent.

    Raises
    ------
    FormatError
        If a key is missing or unknown.

    Examples
    --------
    >>> check_config_keys({"level": 1}, ["level"], [], "zarr.json", "gzip")
    {'level': 1}
    """
    config = dict(config or {})
    for key in required:
        if key not in config:
            raise _fail(where, f"the configuration of {name} lacks {key!r}")
    for key in config:
        if key not in required and key not in optional:
            raise _fail(where, f"the configuration of {name} has the unknown field {key!r}")
    return config


# ---------------------------------------------------------------------------------------------
# Data types


@dataclass(frozen=True)
class DataType:
    """A Zarr data type and the numpy dtype that reads return (native byte order).

    Examples
    --------
    >>> DataType.from_json("float32", "zarr.json").dtype
    dtype('float32')
    >>> DataType.from_numpy(np.dtype("M8[ms]")).to_json()
    {'name': 'numpy.datetime64', 'configuration': {'unit': 'ms', 'scale_factor': 1}}
    """

    name: str
    dtype: np.dtype[Any]
    unit: str | None = None
    scale_factor: int | None = None

    @property
    def is_string(self) -> bool:
        """Whether this is the variable-length ``string`` type."""
        return self.name == STRING

    @property
    def is_time(self) -> bool:
        """Whether this is ``numpy.datetime64`` or ``numpy.timedelta64``."""
        return self.name in (DATETIME, TIMEDELTA)

    @property
    def itemsize(self) -> int:
        """Bytes per element once decoded (4, the minimal vlen-utf8 item, for strings)."""
        return 4 if self.is_string else self.dtype.itemsize

    @classmethod
    def from_json(cls, value: Any, where: str) -> DataType:
        """Parse the ``data_type`` field."""
        if isinstance(value, str):
            name, config = value, None
        else:
            name, config = named_configuration(value, where, "data_type")
        if name in DATA_TYPES or name == STRING:
            check_config_keys(config, [], [], where, f"data type {name!r}")
            dtype = DATA_TYPES.get(name, np.dtypes.StringDType())
            return cls(name, dtype)
        if name in (DATETIME, TIMEDELTA):
            return cls._time_from_json(name, config, where)
        raise _unsupported(where, f"the data type {name!r} (supported: {_supported_types()})")

    @classmethod
    def _time_from_json(cls, name: str, config: dict[str, Any] | None, where: str) -> DataType:
        if config is None:
            raise _fail(where, f'the data type {name!r} needs a "configuration"')
        config = check_config_keys(config, ["unit", "scale_factor"], [], where, name)
        unit, scale = config["unit"], config["scale_factor"]
        if unit not in TIME_UNITS:
            raise _fail(where, f"the unit of {name!r} must be one of {TIME_UNITS}, not {unit!r}")
        if not _is_int(scale) or not 1 <= scale <= _MAX_SCALE_FACTOR:
            problem = f"the scale_factor of {name!r} must be an integer in 1..2**31-1"
            raise _fail(where, f"{problem}, not {scale!r}")
        if unit == "generic" and scale != 1:
            raise _fail(where, f"the generic unit of {name!r} takes no scale_factor {scale}")
        return cls(name, _time_dtype(name, unit, scale), unit, scale)

    @classmethod
    def from_numpy(cls, dtype: np.dtype[Any]) -> DataType:
        """The data type write_array stores for a numpy dtype (TypeError if there is none)."""
        if dtype.kind in "TU" or dtype == np.dtype(object):
            return cls(STRING, np.dtypes.StringDType())
        if dtype.kind in "mM":
            unit, scale = np.datetime_data(dtype)
            name = DATETIME if dtype.kind == "M" else TIMEDELTA
            return cls(name, _time_dtype(name, unit, scale), unit, scale)
        native = dtype.newbyteorder("=")
        for name, core in DATA_TYPES.items():
            if native == core and dtype.fields is None:
                return cls(name, core)
        msg = f"the data type {dtype} is not one of the Zarr data types {_supported_types()}"
        raise InputTypeError(msg)

    def to_json(self) -> str | dict[str, Any]:
        """The ``data_type`` field."""
        if not self.is_time:
            return self.name
        config = {"unit": self.unit, "scale_factor": self.scale_factor}
        return {"name": self.name, "configuration": config}


def _supported_types() -> str:
    return ", ".join([*DATA_TYPES, STRING, DATETIME, TIMEDELTA])


def _time_dtype(name: str, unit: str, scale: int) -> np.dtype[Any]:
    code = "M8" if name == DATETIME else "m8"
    if unit == "generic":
        return np.dtype(code)
    unit = "us" if unit == "μs" else unit
    return np.dtype(f"{code}[{scale}{unit}]" if scale != 1 else f"{code}[{unit}]")


# ---------------------------------------------------------------------------------------------
# Fill values


def fill_value_from_json(value: Any, data_type: DataType, where: str) -> Any:
    """Parse a ``fill_value`` in any form the Zarr v3 specification permits.

    Parameters
    ----------
    value
        The JSON value.
    data_type
        The array's data type.
    where
        The file, for error messages.

    Returns
    -------
    A numpy scalar of ``data_type.dtype`` (``numpy.str_`` for strings).

    Raises
    ------
    FormatError
        If the value is not a valid fill value of the data type.

    Examples
    --------
    >>> f32 = DataType.from_json("float32", "zarr.json")
    >>> fill_value_from_json("0x7fc00001", f32, "zarr.json").tobytes().hex()
    '0100c07f'
    >>> fill_value_from_json([1.0, "-Infinity"], DataType.from_json("complex64", "z"), "z")
    np.complex64(1-infj)
    """
    dtype = data_type.dtype
    if data_type.is_string:
        return _string_fill(value, where)
    if data_type.is_time:
        return _time_fill(value, dtype, where)
    parser = {"b": _bool_fill, "i": _int_fill, "u": _int_fill, "f": _float_fill}.get(dtype.kind)
    if parser is None:
        return _complex_fill(value, dtype, where)
    return parser(value, dtype, where)


def _bad_fill(where: str, value: Any, dtype: Any, expected: str) -> FormatError:
    return _fail(where, f"the fill_value {value!r} is not valid for {dtype}: expected {expected}")


def _string_fill(value: Any, where: str) -> np.str_:
    if not isinstance(value, str):
        raise _bad_fill(where, value, STRING, "a JSON string")
    return np.str_(value)


def _bool_fill(value: Any, dtype: np.dtype[Any], where: str) -> np.bool_:
    if not isinstance(value, bool):
        raise _bad_fill(where, value, dtype, "true or false")
    return np.bool_(value)


def _int_fill(value: Any, dtype: np.dtype[Any], where: str) -> Any:
    info = np.iinfo(dtype)
    if not _is_int(value) or not info.min <= value <= info.max:
        raise _bad_fill(where, value, dtype, f"an integer from {info.min} to {info.max}")
    return dtype.type(value)


def _float_fill(value: Any, dtype: np.dtype[Any], where: str) -> Any:
    expected = (
        'a number, "NaN", "Infinity", "-Infinity" or "0x" and'
        f" {2 * dtype.itemsize} hex digits of the bit pattern"
    )
    if isinstance(value, str):
        return _float_string_fill(value, dtype, where, expected)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _bad_fill(where, value, dtype, expected)
    try:
        with np.errstate(over="ignore"):
            result = dtype.type(float(value))
    except OverflowError:
        result = dtype.type(math.inf)
    if np.isinf(result):
        raise _bad_fill(where, value, dtype, f"{expected}, within the range of {dtype}")
    return result


def _float_string_fill(value: str, dtype: np.dtype[Any], where: str, expected: str) -> Any:
    if value in _SPECIAL_FLOATS:
        return dtype.type(_SPECIAL_FLOATS[value])
    digits = value[2:]
    n_digits = 2 * dtype.itemsize
    if not value.startswith("0x") or len(digits) != n_digits or not _HEX_DIGITS.fullmatch(digits):
        raise _bad_fill(where, value, dtype, expected)
    return np.frombuffer(bytes.fromhex(digits), dtype=dtype.newbyteorder(">"))[0].astype(dtype)


def _complex_fill(value: Any, dtype: np.dtype[Any], where: str) -> Any:
    part = np.dtype(f"f{dtype.itemsize // 2}")
    if not isinstance(value, list) or len(value) != 2:
        raise _bad_fill(where, value, dtype, "a list [real, imaginary] of two float fill values")
    real, imag = (_float_fill(item, part, where) for item in value)
    result = np.zeros((), dtype=dtype)
    result.real, result.imag = real, imag
    return result[()]


def _time_fill(value: Any, dtype: np.dtype[Any], where: str) -> Any:
    info = np.iinfo(np.int64)
    if value == "NaT":
        value = info.min
    if not _is_int(value) or not info.min <= value <= info.max:
        raise _bad_fill(where, value, dtype, f'"NaT" or an integer from {info.min} to {info.max}')
    return np.array(value, dtype=np.int64).view(dtype)[()]


def fill_value_to_json(value: Any, data_type: DataType) -> Any:
    """Serialise a fill value (the inverse of :func:`fill_value_from_json`).

    Parameters
    ----------
    value
        A numpy scalar of ``data_type.dtype``.
    data_type
        The array's data type.

    Returns
    -------
    The JSON value.

    Examples
    --------
    >>> fill_value_to_json(np.float32("nan"), DataType.from_json("float32", "z"))
    'NaN'
    >>> fill_value_to_json(np.complex64(1 + 2j), DataType.from_json("complex64", "z"))
    [1.0, 2.0]
    """
    kind = data_type.dtype.kind
    if data_type.is_string:
        return str(value)
    if data_type.is_time:
        return int(np.asarray(value).view(np.int64))
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    if kind == "c":
        return [_float_to_json(value.real), _float_to_json(value.imag)]
    return _float_to_json(value)


def _float_to_json(value: Any) -> Any:
    if np.isnan(value):
        canonical = value.dtype.type(math.nan)
        if value.tobytes() == canonical.tobytes():
            return "NaN"
        return "0x" + np.asarray(value).astype(value.dtype.newbyteorder(">")).tobytes().hex()
    if np.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(str(value))  # the shortest text that gives back the same value


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
            raise _unsupported(where, f"the chunk grid {name!r} (only 'regular' is supported)")
        config = check_config_keys(config, ["chunk_shape"], [], where, "the regular chunk grid")
        chunks = config["chunk_shape"]
        if not isinstance(chunks, list) or len(chunks) != ndim:
            problem = f"chunk_shape must be a list of {ndim} positive integers, not {chunks!r}"
            raise _fail(where, problem)
        if not all(_is_int(c) and 1 <= c <= _MAX_DIMENSION for c in chunks):
            raise _fail(where, f"chunk_shape must hold positive integers, not {chunks!r}")
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
            raise _unsupported(where, problem)
        what = f"the {name} chunk key encoding"
        config = check_config_keys(config, [], ["separator"], where, what)
        separator = config.get("separator", "/" if name == "default" else ".")
        if separator not in ("/", "."):
            raise _fail(where, f"the separator of {what} must be '/' or '.', not {separator!r}")
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
        _check_extra_fields(doc, _ARRAY_FIELDS, where, "the array metadata")
        for key in sorted(_ARRAY_FIELDS - {"attributes", "storage_transformers"}):
            if key not in doc and key != "dimension_names":
                raise _fail(where, f"the array metadata lacks the required field {key!r}")
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
        _check_extra_fields(doc, _GROUP_FIELDS, where, "the group metadata")
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
    doc = _object(doc, where, "the document")
    if doc.get("node_type") == "array":
        return ArrayMetadata.from_json(doc, where)
    return GroupMetadata.from_json(doc, where)


def _check_header(doc: Any, node_type: str, where: str) -> dict[str, Any]:
    doc = _object(doc, where, "the document")
    version = doc.get("zarr_format")
    if not _is_int(version) or version != 3:
        raise _fail(where, f"zarr_format must be 3 (Zarr v3), not {version!r}")
    found = doc.get("node_type")
    if found not in ("array", "group"):
        raise _fail(where, f'node_type must be "array" or "group", not {found!r}')
    if found != node_type:
        raise _fail(where, f"expected {node_type} metadata, found node_type {found!r}")
    return doc


def _parse_shape(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        _is_int(n) and 0 <= n <= _MAX_DIMENSION for n in value
    ):
        raise _fail(where, f"shape must be a list of non-negative integers, not {value!r}")
    return tuple(value)


def check_attributes(attributes: Any) -> dict[str, Any]:
    """Attributes to write: a mapping with string keys, as the JSON it is stored as."""
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        msg = f"attributes must be a mapping, not {type(attributes).__name__}"
        raise InputTypeError(msg)
    if not all(isinstance(key, str) for key in attributes):
        msg = "attribute names must be strings"
        raise InputTypeError(msg)
    result: dict[str, Any] = json.loads(json.dumps(dict(attributes), allow_nan=False))
    return result


def _parse_attributes(doc: dict[str, Any], where: str) -> dict[str, Any]:
    return dict(_object(doc.get("attributes", {}), where, "attributes"))


def _parse_dimension_names(
    doc: dict[str, Any], ndim: int, where: str
) -> tuple[str | None, ...] | None:
    names = doc.get("dimension_names")
    if names is None:
        return None
    if not isinstance(names, list) or len(names) != ndim:
        raise _fail(where, f"dimension_names must be a list of {ndim} names, not {names!r}")
    if not all(name is None or isinstance(name, str) for name in names):
        raise _fail(where, f"dimension_names must hold strings or null, not {names!r}")
    return tuple(names)


def _check_storage_transformers(doc: dict[str, Any], where: str) -> None:
    value = doc.get("storage_transformers", [])
    if not isinstance(value, list):
        raise _fail(where, f"storage_transformers must be a list, not {value!r}")
    if value:
        names = [item.get("name") if isinstance(item, dict) else item for item in value]
        raise _unsupported(where, f"storage transformers {names!r}")
