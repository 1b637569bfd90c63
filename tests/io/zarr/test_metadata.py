"""Strict parsing of zarr.json: JSON, data types, fill values, grids, key encodings, documents."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

from cytepool.errors import FormatError, UnsupportedFeatureError
from cytepool.io.zarr import DATA_TYPES
from cytepool.io.zarr.metadata import (
    ArrayMetadata,
    ChunkKeyEncoding,
    DataType,
    GroupMetadata,
    RegularChunkGrid,
    dumps,
    fill_value_from_json,
    fill_value_to_json,
    loads,
    parse_document,
)

WHERE = "/store/a/zarr.json"


def dtype(name: Any) -> DataType:
    return DataType.from_json(name, WHERE)


def array_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "shape": [10, 4],
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3, 4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
        ],
        "attributes": {"a": [1, 2]},
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }
    doc.update(changes)
    return doc


# ---------------------------------------------------------------------------------------------
# JSON


def test_loads_accepts_plain_json() -> None:
    assert loads(b'{"a": [1, 2.5, "x", null, true]}', WHERE) == {"a": [1, 2.5, "x", None, True]}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": 1, "a": 2}', "repeated key 'a'"),
        ('{"b": {"a": 1, "a": 1}}', "repeated key 'a'"),
        ('{"a": NaN}', "NaN is not valid JSON"),
        ('{"a": Infinity}', "Infinity is not valid JSON"),
        ('{"a": -Infinity}', "-Infinity is not valid JSON"),
        ('{"a": 1e400}', "does not fit a 64-bit float"),
        ('{"a": 1', "Expecting"),
        ("[" * 100000 + "]" * 100000, "recursion"),
    ],
)
def test_loads_refuses_non_strict_json(text: str, problem: str) -> None:
    with pytest.raises(FormatError, match=problem) as info:
        loads(text, WHERE)
    assert WHERE in str(info.value)


def test_loads_refuses_invalid_utf8() -> None:
    with pytest.raises(FormatError, match=r"not valid JSON.*utf-8"):
        loads(b'{"a": "\xff"}', WHERE)


def test_dumps_is_indented_ascii_and_refuses_nan() -> None:
    assert dumps({"β": 1}) == '{\n  "\\u03b2": 1\n}'
    with pytest.raises(ValueError, match="not JSON compliant"):
        dumps({"x": math.nan})


# ---------------------------------------------------------------------------------------------
# Data types


@pytest.mark.parametrize("name", sorted(DATA_TYPES))
def test_core_data_types_in_both_forms(name: str) -> None:
    assert dtype(name).dtype == np.dtype(name)
    assert dtype({"name": name}).dtype == np.dtype(name)
    assert dtype({"name": name, "configuration": {}}).to_json() == name


def test_string_data_type() -> None:
    string = dtype("string")
    assert string.is_string
    assert string.dtype == np.dtypes.StringDType()
    assert string.to_json() == "string"


@pytest.mark.parametrize("name", ["numpy.datetime64", "numpy.timedelta64"])
@pytest.mark.parametrize(
    ("unit", "scale", "expected"),
    [("s", 1, "[s]"), ("ns", 1, "[ns]"), ("μs", 1, "[us]"), ("ms", 10, "[10ms]"), ("D", 7, "[7D]")],
)
def test_time_data_types(name: str, unit: str, scale: int, expected: str) -> None:
    data_type = dtype({"name": name, "configuration": {"unit": unit, "scale_factor": scale}})
    code = "M8" if name.endswith("datetime64") else "m8"
    assert data_type.dtype == np.dtype(code + expected)
    assert data_type.is_time
    assert data_type.to_json() == {
        "name": name,
        "configuration": {"unit": unit, "scale_factor": scale},
    }


def test_generic_time_unit() -> None:
    config = {"unit": "generic", "scale_factor": 1}
    assert dtype({"name": "numpy.timedelta64", "configuration": config}).dtype == np.dtype("m8")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"name": "numpy.datetime64"}, 'needs a "configuration"'),
        ({"name": "numpy.datetime64", "configuration": {"unit": "s"}}, "lacks 'scale_factor'"),
        (
            {"name": "numpy.datetime64", "configuration": {"unit": "x", "scale_factor": 1}},
            "unit of 'numpy.datetime64' must be one of",
        ),
        (
            {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 0}},
            "scale_factor",
        ),
        (
            {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 2**31}},
            "scale_factor",
        ),
        (
            {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": True}},
            "scale_factor",
        ),
        (
            {"name": "numpy.datetime64", "configuration": {"unit": "generic", "scale_factor": 2}},
            "generic unit",
        ),
        (
            {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1, "x": 1}},
            "unknown field 'x'",
        ),
        ({"name": "int8", "configuration": {"endian": "little"}}, "unknown field 'endian'"),
        ({"configuration": {}}, 'needs a string "name"'),
        ({"name": "int8", "extra": 1}, "unknown field 'extra'"),
        (3, "must be a JSON object"),
    ],
)
def test_invalid_data_types(value: Any, problem: str) -> None:
    with pytest.raises(FormatError, match=problem) as info:
        dtype(value)
    assert WHERE in str(info.value)


@pytest.mark.parametrize("name", ["float128", "bfloat16", "fixed_length_utf32", "r16", "bytes"])
def test_unsupported_data_types_are_named(name: str) -> None:
    with pytest.raises(UnsupportedFeatureError, match=f"data type '{name}'"):
        dtype(name)


@pytest.mark.parametrize(
    ("numpy_dtype", "name"),
    [
        (np.dtype(">i4"), "int32"),
        (np.dtype("<c16"), "complex128"),
        (np.dtype("?"), "bool"),
        (np.dtype("U3"), "string"),
        (np.dtype(object), "string"),
        (np.dtypes.StringDType(), "string"),
        (np.dtype(">M8[ms]"), "numpy.datetime64"),
        (np.dtype("m8[10s]"), "numpy.timedelta64"),
    ],
)
def test_data_type_from_numpy(numpy_dtype: np.dtype[Any], name: str) -> None:
    assert DataType.from_numpy(numpy_dtype).name == name


@pytest.mark.parametrize("numpy_dtype", ["S4", "V8", "i4,f8", "longdouble"])
def test_data_type_from_numpy_refuses_others(numpy_dtype: str) -> None:
    if np.dtype(numpy_dtype) == np.dtype("f8"):
        pytest.skip("longdouble is float64 here")
    with pytest.raises(TypeError, match="is not one of the Zarr data types"):
        DataType.from_numpy(np.dtype(numpy_dtype))


# ---------------------------------------------------------------------------------------------
# Fill values


def bits(value: Any) -> str:
    return np.asarray(value).tobytes().hex()


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("bool", True, np.True_),
        ("bool", False, np.False_),
        ("int8", -128, np.int8(-128)),
        ("int8", 127, np.int8(127)),
        ("uint8", 255, np.uint8(255)),
        ("int64", -(2**63), np.int64(-(2**63))),
        ("uint64", 2**64 - 1, np.uint64(2**64 - 1)),
        ("float16", 1.5, np.float16(1.5)),
        ("float16", 65504, np.float16(65504)),
        ("float32", 0, np.float32(0)),
        ("float32", -0.0, np.float32(-0.0)),
        ("float64", 1e300, np.float64(1e300)),
        ("float64", "Infinity", np.float64(np.inf)),
        ("float64", "-Infinity", np.float64(-np.inf)),
        ("float32", "NaN", np.float32(np.nan)),
        ("float16", "0x7e00", np.float16(np.nan)),
        ("float32", "0x3fc00000", np.float32(1.5)),
        ("float64", "0x3FF8000000000000", np.float64(1.5)),
        ("float64", "0x8000000000000000", np.float64(-0.0)),
        ("complex64", [1.0, -2.0], np.complex64(1 - 2j)),
        ("complex128", ["NaN", "Infinity"], np.complex128(complex(math.nan, math.inf))),
        ("complex64", ["0x3fc00000", 0], np.complex64(1.5)),
    ],
)
def test_fill_values_in_every_form(name: str, value: Any, expected: Any) -> None:
    result = fill_value_from_json(value, dtype(name), WHERE)
    assert isinstance(result, np.generic)
    assert result.dtype == np.dtype(name)
    assert bits(result) == bits(expected)


def test_hex_fill_keeps_nan_payloads() -> None:
    result = fill_value_from_json("0x7fc00001", dtype("float32"), WHERE)
    assert np.isnan(result)
    assert result.tobytes() == bytes.fromhex("0100c07f")
    assert fill_value_to_json(result, dtype("float32")) == "0x7fc00001"


def test_string_and_time_fill_values() -> None:
    assert fill_value_from_json("", dtype("string"), WHERE) == ""
    assert fill_value_from_json("é", dtype("string"), WHERE) == "é"
    seconds = dtype({"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}})
    assert np.isnat(fill_value_from_json("NaT", seconds, WHERE))
    assert np.isnat(fill_value_from_json(-(2**63), seconds, WHERE))
    assert fill_value_from_json(60, seconds, WHERE) == np.datetime64(60, "s")
    assert fill_value_to_json(np.datetime64("NaT", "s"), seconds) == -(2**63)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("bool", 0, "true or false"),
        ("bool", "false", "true or false"),
        ("int8", 128, "an integer from -128 to 127"),
        ("uint8", -1, "an integer from 0 to 255"),
        ("uint64", 2**64, "an integer from 0"),
        ("int32", 1.0, "an integer"),
        ("int32", True, "an integer"),
        ("int32", "0x00000000", "an integer"),
        ("float32", "nan", '"NaN"'),
        ("float32", "0x3fc0000", "8 hex digits"),
        ("float32", "0x3fc000000", "8 hex digits"),
        ("float32", "0x3fc0000g", "8 hex digits"),
        ("float32", "0x3f c0000", "8 hex digits"),
        ("float32", True, "a number"),
        ("float32", None, "a number"),
        ("float32", [0.0], "a number"),
        ("float16", 1e10, "within the range of float16"),
        ("float32", 10**400, "within the range of float32"),
        ("complex64", 0.0, "a list"),
        ("complex64", [0.0], "a list"),
        ("complex64", [0.0, 0.0, 0.0], "a list"),
        ("complex64", [0.0, "x"], "a number"),
        ("string", 0, "a JSON string"),
        ("string", None, "a JSON string"),
        ("string", "x\ud800", r"valid Unicode \(no lone surrogate\)"),
    ],
)
def test_invalid_fill_values(name: str, value: Any, expected: str) -> None:
    with pytest.raises(FormatError, match=f"fill_value .* expected .*{expected}") as info:
        fill_value_from_json(value, dtype(name), WHERE)
    assert WHERE in str(info.value)


@pytest.mark.parametrize("value", ["nat", 1.5, 2**63, None])
def test_invalid_time_fill_values(value: Any) -> None:
    ns = dtype({"name": "numpy.timedelta64", "configuration": {"unit": "ns", "scale_factor": 1}})
    with pytest.raises(FormatError, match='"NaT" or an integer'):
        fill_value_from_json(value, ns, WHERE)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("bool", True),
        ("int16", -5),
        ("uint64", 2**64 - 1),
        ("float32", 0.1),
        ("float64", "NaN"),
        ("float64", "Infinity"),
        ("float16", "-Infinity"),
        ("float64", "0x7ff8000000000001"),
        ("complex128", [0.5, "NaN"]),
        ("string", "x"),
    ],
)
def test_fill_value_round_trip(name: str, value: Any) -> None:
    data_type = dtype(name)
    parsed = fill_value_from_json(value, data_type, WHERE)
    assert fill_value_to_json(parsed, data_type) == value


# ---------------------------------------------------------------------------------------------
# Chunk grid and chunk key encoding


def test_regular_chunk_grid() -> None:
    grid = RegularChunkGrid.from_json(
        {"name": "regular", "configuration": {"chunk_shape": [2, 5]}}, 2, WHERE
    )
    assert grid.chunk_shape == (2, 5)
    assert RegularChunkGrid.from_json(grid.to_json(), 2, WHERE) == grid


@pytest.mark.parametrize(
    ("value", "error", "problem"),
    [
        ({"name": "rectilinear", "configuration": {}}, UnsupportedFeatureError, "'rectilinear'"),
        ({"name": "regular"}, FormatError, "lacks 'chunk_shape'"),
        ({"name": "regular", "configuration": {"chunk_shape": [2]}}, FormatError, "2 positive"),
        ({"name": "regular", "configuration": {"chunk_shape": [2, 0]}}, FormatError, "positive"),
        ({"name": "regular", "configuration": {"chunk_shape": [2, 1.0]}}, FormatError, "positive"),
        ({"name": "regular", "configuration": {"chunk_shape": [2, True]}}, FormatError, "positive"),
        (
            {"name": "regular", "configuration": {"chunk_shape": [2, 2], "x": 1}},
            FormatError,
            "unknown field 'x'",
        ),
        ("regular", FormatError, "must be a JSON object"),
    ],
)
def test_invalid_chunk_grids(value: Any, error: type[Exception], problem: str) -> None:
    with pytest.raises(error, match=problem):
        RegularChunkGrid.from_json(value, 2, WHERE)


@pytest.mark.parametrize(
    ("value", "expected", "key"),
    [
        ({"name": "default"}, ChunkKeyEncoding("default", "/"), "c/1/20"),
        ({"name": "default", "configuration": {"separator": "."}}, None, "c.1.20"),
        ({"name": "v2"}, ChunkKeyEncoding("v2", "."), "1.20"),
        ({"name": "v2", "configuration": {"separator": "/"}}, None, "1/20"),
    ],
)
def test_chunk_key_encodings(value: Any, expected: Any, key: str) -> None:
    encoding = ChunkKeyEncoding.from_json(value, WHERE)
    if expected is not None:
        assert encoding == expected
    assert encoding.encode((1, 20)) == key
    assert ChunkKeyEncoding.from_json(encoding.to_json(), WHERE) == encoding


@pytest.mark.parametrize(
    ("value", "error", "problem"),
    [
        ({"name": "v3"}, UnsupportedFeatureError, "chunk key encoding 'v3'"),
        ({"name": "default", "configuration": {"separator": "-"}}, FormatError, "'/' or '.'"),
        ({"name": "v2", "configuration": {"sep": "."}}, FormatError, "unknown field 'sep'"),
    ],
)
def test_invalid_chunk_key_encodings(value: Any, error: type[Exception], problem: str) -> None:
    with pytest.raises(error, match=problem):
        ChunkKeyEncoding.from_json(value, WHERE)


# ---------------------------------------------------------------------------------------------
# Documents


def test_array_document_round_trip() -> None:
    meta = ArrayMetadata.from_json(array_doc(dimension_names=["x", None]), WHERE)
    assert meta.shape == (10, 4)
    assert meta.ndim == 2
    assert meta.data_type.dtype == np.float32
    assert meta.attributes == {"a": [1, 2]}
    assert meta.dimension_names == ("x", None)
    assert ArrayMetadata.from_json(meta.to_json(), WHERE) == meta
    assert list(meta.to_json())[:3] == ["shape", "data_type", "chunk_grid"]


def test_minimal_array_document() -> None:
    doc = array_doc()
    del doc["attributes"], doc["storage_transformers"]
    meta = ArrayMetadata.from_json(doc, WHERE)
    assert meta.attributes == {}
    assert meta.dimension_names is None


def test_extension_fields_need_must_understand_false() -> None:
    extension = {"must_understand": False, "anything": [1]}
    assert ArrayMetadata.from_json(array_doc(my_extension=extension), WHERE).shape == (10, 4)
    for value in [{"must_understand": True}, {"x": 1}, 1, "x", None]:
        with pytest.raises(FormatError, match="field 'my_extension'"):
            ArrayMetadata.from_json(array_doc(my_extension=value), WHERE)


def test_group_document_ignores_consolidated_metadata() -> None:
    consolidated = {"kind": "inline", "must_understand": False, "metadata": {"x": {}}}
    doc = {
        "attributes": {"k": "v"},
        "zarr_format": 3,
        "node_type": "group",
        "consolidated_metadata": consolidated,
    }
    group = GroupMetadata.from_json(doc, WHERE)
    assert group.attributes == {"k": "v"}
    assert group.to_json() == {"attributes": {"k": "v"}, "zarr_format": 3, "node_type": "group"}
    assert parse_document(doc, WHERE) == group


@pytest.mark.parametrize(
    ("change", "error", "problem"),
    [
        ({"zarr_format": 2}, FormatError, "zarr_format must be 3"),
        ({"zarr_format": 3.0}, FormatError, "zarr_format must be 3"),
        ({"zarr_format": True}, FormatError, "zarr_format must be 3"),
        ({"node_type": "group"}, FormatError, "expected array metadata"),
        ({"node_type": "dataset"}, FormatError, 'node_type must be "array" or "group"'),
        ({"shape": [3]}, FormatError, "chunk_shape must be a list of 1"),
        ({"shape": [-1, 4]}, FormatError, "shape must be a list of non-negative"),
        ({"shape": [2**63, 4]}, FormatError, "shape must be a list of non-negative"),
        ({"shape": "10"}, FormatError, "shape must be a list"),
        ({"attributes": []}, FormatError, "attributes must be a JSON object"),
        ({"dimension_names": ["x"]}, FormatError, "dimension_names must be a list of 2"),
        ({"dimension_names": ["x", 1]}, FormatError, "strings or null"),
        ({"storage_transformers": {}}, FormatError, "storage_transformers must be a list"),
        (
            {"storage_transformers": [{"name": "sharding"}]},
            UnsupportedFeatureError,
            "storage transformers \\['sharding'\\]",
        ),
        ({"fill_value": None}, FormatError, "fill_value None"),
        ({"codecs": []}, FormatError, "codecs must be a non-empty list"),
    ],
)
def test_invalid_array_documents(
    change: dict[str, Any], error: type[Exception], problem: str
) -> None:
    with pytest.raises(error, match=problem) as info:
        ArrayMetadata.from_json(array_doc(**change), WHERE)
    assert WHERE in str(info.value)


@pytest.mark.parametrize(
    "field",
    [
        "zarr_format",
        "node_type",
        "shape",
        "data_type",
        "chunk_grid",
        "chunk_key_encoding",
        "fill_value",
        "codecs",
    ],
)
def test_required_array_fields(field: str) -> None:
    doc = copy.deepcopy(array_doc())
    del doc[field]
    with pytest.raises(FormatError, match=field):
        ArrayMetadata.from_json(doc, WHERE)


@pytest.mark.parametrize("doc", [[], "x", 3, None])
def test_documents_must_be_objects(doc: Any) -> None:
    with pytest.raises(FormatError, match="must be a JSON object"):
        parse_document(doc, WHERE)


def test_group_document_errors() -> None:
    with pytest.raises(FormatError, match="field 'shape'"):
        GroupMetadata.from_json({"zarr_format": 3, "node_type": "group", "shape": [1]}, WHERE)
    with pytest.raises(FormatError, match="expected group metadata"):
        GroupMetadata.from_json(array_doc(), WHERE)
