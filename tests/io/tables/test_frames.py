"""Round trips of write_table / read_table: one table of cases, read with every backend."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tables_helpers import (
    assert_frames_equal,
    inferred_strings_encoding,
    library_of,
    python_values,
)

from cytepool.io import read_table, write_table

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")

UTC = dt.UTC
INDEX = pd.Index(["r0", "r1", "r2", "r3", "r4", "r5", "r6"], name=None)
UNICODE = ["α", "", "日本語", "😀", "a/b", "plain", "é€"]


def _pandas_numpy() -> Any:
    data: dict[str, Any] = {
        name: np.array([0, 1, -1, 2, 3, 100, 7], dtype=name)
        for name in ("int8", "int16", "int32", "int64")
    }
    data.update(
        {name: np.array([0, 1, 2, 255 % 120, 3, 4, 5], dtype=name) for name in ("uint8", "uint16")}
    )
    data["uint32"] = np.array([0, 1, 2, 3, 4, 5, 2**32 - 1], dtype="uint32")
    data["uint64"] = np.array([0, 1, 2, 3, 4, 5, 2**64 - 1], dtype="uint64")
    data["float32"] = np.array([0.5, np.nan, -1, np.inf, 0, 1e30, -0.0], dtype="float32")
    data["float64"] = np.array([0.5, np.nan, -1, -np.inf, 0, 1e300, 2.5], dtype="float64")
    data["bool"] = np.array([True, False, True, True, False, False, True])
    data["str"] = np.array(UNICODE, dtype=object)
    data["名前 α😀"] = np.arange(7, dtype=np.int16)  # a unicode column name
    return pd.DataFrame(data, index=pd.Index(UNICODE[::-1], name="índice"))


def _pandas_nullable() -> Any:
    data: dict[str, Any] = {
        name: pd.array([1, None, 3, 0, None, 5, 6], dtype=name)
        for name in ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64")
    }
    data["Int64_full"] = pd.array([1, 2, 3, 4, 5, 6, 7], dtype="Int64")
    data["boolean"] = pd.array([True, None, False, True, None, False, True], dtype="boolean")
    floats = pd.array([1.5, None, 0.0, -2.0, None, 3.0, 4.0], dtype="Float64")
    floats[5] = np.nan  # a NaN that is not missing
    data["Float64"] = floats
    data["Float32"] = pd.array([1.5, None, 0.0, -2.0, None, 3.0, 4.0], dtype="Float32")
    return pd.DataFrame(data, index=INDEX)


def _pandas_categorical() -> Any:
    return pd.DataFrame(
        {
            "unordered": pd.Categorical(
                ["b", "a", None, "b", "a", "a", "b"], categories=["b", "a", "unused"]
            ),
            "ordered": pd.Categorical(
                ["lo", "hi", "mid", None, "lo", "lo", "hi"],
                categories=["lo", "mid", "hi"],
                ordered=True,
            ),
            "int_categories": pd.Categorical([3, 1, 3, None, 1, 2, 2]),
            "datetime_categories": pd.Categorical(
                pd.to_datetime(["2020-01-01", "2021-06-30", None, "2020-01-01"] * 2)[:7]
            ),
            "all_missing": pd.Categorical([None] * 7, categories=["x"]),
            "unicode": pd.Categorical(UNICODE),
        },
        index=INDEX,
    )


def _pandas_strings() -> Any:
    return pd.DataFrame(
        {
            "with_missing": pd.array(["a", None, "", "é", None, "z", "😀"], dtype="string"),
            "without_missing": pd.array(UNICODE, dtype="string"),
            "nan_flavoured": pd.array(
                ["a", None, "c", "d", "e", "f", "g"], dtype=pd.StringDtype(na_value=np.nan)
            ),
        },
        index=INDEX,
    )


def _pandas_temporal() -> Any:
    times = pd.to_datetime(
        [
            "2020-01-01 12:00",
            None,
            "1970-01-01 00:00",
            "2038-01-19 03:14",
            None,
            "1900-03-01 00:00",
            "2000-02-29 23:59",
        ]
    )
    return pd.DataFrame(
        {
            "naive_ns": times,
            "naive_us": times.as_unit("us"),
            "naive_s": times.as_unit("s"),
            "zoned": times.tz_localize("Europe/Berlin", nonexistent="shift_forward"),
            "utc": times.tz_localize("UTC").as_unit("ms"),
            "fixed_offset": times.tz_localize("+05:00"),
            "duration": pd.to_timedelta([1, None, -3, 0, 10**6, 5, 6], unit="s"),
        },
        index=INDEX,
    )


def _pandas_indexes(kind: str) -> Callable[[], Any]:
    def make() -> Any:
        values = {"x": np.arange(4, dtype=np.int16)}
        if kind == "named":
            index = pd.Index(["s1", "s2", "s3", "s4"], name="sample_id")
        elif kind == "int":
            index = pd.Index([10, 20, 30, 5], dtype="int64")
        elif kind == "categorical":
            index = pd.CategoricalIndex(["a", "b", "c", "d"], name="cat")
        elif kind == "nullable":
            index = pd.Index(pd.array([1, 2, 3, 4], dtype="Int64"), name="n")
        else:  # shared: the index is also a column
            index = pd.Index(["s1", "s2", "s3", "s4"], name="sample_id")
            values["sample_id"] = np.array(["s1", "s2", "s3", "s4"], dtype=object)
        return pd.DataFrame(values, index=index)

    return make


def _polars_all() -> Any:
    n = [None]
    data = {
        name: pl.Series(name, [1, None, 3, 0, *n, 5, 6], dtype=getattr(pl, name))
        for name in ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64")
    }
    data.update(
        {
            "Float32": pl.Series([1.5, None, float("nan"), 0.0, None, 2.0, 3.0], dtype=pl.Float32),
            "Float64": pl.Series([1.5, None, float("nan"), -0.0, None, 1e300, 3.0]),
            "Boolean": pl.Series([True, None, False, True, None, False, True]),
            "String": pl.Series(["α", None, "", "日本語", None, "😀", "x"]),
            "Categorical": pl.Series(["b", "a", None, "b", "a", "a", "b"], dtype=pl.Categorical),
            "Enum": pl.Series(
                ["lo", None, "hi", "lo", "lo", None, "hi"], dtype=pl.Enum(["lo", "mid", "hi"])
            ),
            "Date": pl.Series([dt.date(2020, 1, 1), None, dt.date(1969, 12, 31)] + [None] * 4),
            "Datetime_us": pl.Series(
                [dt.datetime(2020, 1, 1, 12), None, dt.datetime(1901, 1, 1)] * 2 + [None],
                dtype=pl.Datetime("us"),
            ),
            "Datetime_ns_tz": pl.Series(
                [dt.datetime(2020, 1, 1, 12, tzinfo=UTC), None] * 3 + [None],
                dtype=pl.Datetime("ns", "Asia/Kolkata"),
            ),
            "Duration": pl.Series(
                [dt.timedelta(days=1), None, dt.timedelta(microseconds=-5)] * 2 + [None],
                dtype=pl.Duration("us"),
            ),
        }
    )
    return pl.DataFrame([series.alias(name) for name, series in data.items()])


def _polars_without_nulls() -> Any:
    return pl.DataFrame(
        {
            "i": pl.Series([1, 2, 3], dtype=pl.Int8),
            "u": pl.Series([1, 2, 3], dtype=pl.UInt64),
            "f": [0.5, float("nan"), 1.0],
            "b": [True, False, True],
            "s": ["x", "", "ü"],
            "ünïcode näme": [1, 2, 3],
            "e": pl.Series(["a", "b", "a"], dtype=pl.Enum(["b", "a"])),
        }
    )


def _polars_indexed() -> Any:
    return pl.DataFrame({"feature_id": ["g1", "g2", "g3"], "length": [1, None, 3]})


def _arrow() -> Any:
    return pa.table(
        {
            "int64": pa.array([1, None, 3, 4], pa.int64()),
            "uint8": pa.array([1, 2, 3, 4], pa.uint8()),
            "float64": pa.array([1.5, None, float("nan"), 0.0]),
            "bool": pa.array([True, None, False, True]),
            "string": pa.array(["a", None, "", "é"]),
            "dictionary": pa.array(["x", None, "y", "x"]).dictionary_encode(),
            "ordered": pa.DictionaryArray.from_arrays(
                pa.array([1, 0, None, 1], pa.int32()), pa.array(["lo", "hi"]), ordered=True
            ),
            "timestamp_tz": pa.array([0, None, 10**12, 5], pa.timestamp("ms", "America/New_York")),
            "timestamp": pa.array([0, None, 10**12, 5], pa.timestamp("ns")),
            "date32": pa.array([0, None, 18000, -1], pa.date32()),
            "duration": pa.array([0, None, 10**6, -5], pa.duration("us")),
        }
    )


def _rows(make: Callable[[], Any], stop: int) -> Callable[[], Any]:
    def sliced() -> Any:
        frame = make()
        return frame.iloc[:stop] if library_of(frame) == "pandas" else frame.slice(0, stop)

    return sliced


# Each case: a frame maker, the encoding-type expected for some of its columns.
CASES = [
    pytest.param(
        _pandas_numpy, {"int8": "array", "str": inferred_strings_encoding()}, id="pandas-numpy"
    ),
    pytest.param(
        _pandas_nullable,
        {"Int8": "nullable-integer", "boolean": "nullable-boolean", "Float64": "array"},
        id="pandas-nullable",
    ),
    pytest.param(_pandas_categorical, {"ordered": "categorical"}, id="pandas-categorical"),
    pytest.param(
        _pandas_strings, {"with_missing": "nullable-string-array"}, id="pandas-StringDtype"
    ),
    pytest.param(_pandas_temporal, {"naive_ns": "array", "zoned": "array"}, id="pandas-temporal"),
    *[
        pytest.param(_pandas_indexes(kind), {}, id=f"pandas-index-{kind}")
        for kind in ("named", "int", "categorical", "nullable", "shared")
    ],
    pytest.param(
        _polars_all,
        {"Int8": "nullable-integer", "String": "nullable-string-array", "Enum": "categorical"},
        id="polars-with-nulls",
    ),
    pytest.param(_polars_without_nulls, {"i": "array", "s": "string-array"}, id="polars-no-nulls"),
    pytest.param(_arrow, {"dictionary": "categorical"}, id="pyarrow"),
    *[
        pytest.param(_rows(make, stop), {}, id=f"{name}-{stop}-rows")
        for name, make in (
            ("pandas-numpy", _pandas_numpy),
            ("pandas-categorical", _pandas_categorical),
            ("pandas-nullable", _pandas_nullable),
            ("polars", _polars_all),
            ("pyarrow", _arrow),
        )
        for stop in (0, 1)
    ],
]


def _encoding(path: Path) -> str:
    document = json.loads((path / "zarr.json").read_text())
    return document["attributes"]["encoding-type"]


@pytest.mark.parametrize("chunks", [None, 3])
@pytest.mark.parametrize(("make", "encodings"), CASES)
def test_round_trip(
    make: Callable[[], Any],
    encodings: dict[str, str],
    chunks: int | None,
    backend: str,
    tmp_path: Path,
) -> None:
    frame = make()
    write_table(frame, tmp_path / "table", chunks=chunks)
    assert _encoding(tmp_path / "table") == "dataframe"
    for name, encoding in encodings.items():
        assert _encoding(tmp_path / "table" / name) == encoding, name
    result = read_table(tmp_path / "table", backend=backend)
    if library_of(frame) == backend:
        assert_frames_equal(result, frame)
    else:
        expected = python_values(frame)
        got = python_values(result)
        for name in expected.keys() & got.keys():
            assert got[name] == expected[name], name


def test_columns_are_read_in_the_order_given(backend: str, tmp_path: Path) -> None:
    write_table(_pandas_numpy(), tmp_path / "t")
    result = read_table(tmp_path / "t", backend=backend, columns=["str", "int8"])
    if backend == "pandas":
        assert list(result.columns) == ["str", "int8"]
        assert result.index.name == "índice"
    else:  # the named index comes first
        names = result.column_names if backend == "pyarrow" else result.columns
        assert list(names) == ["índice", "str", "int8"]


def test_only_selected_columns_are_read(tmp_path: Path) -> None:
    write_table(_pandas_numpy(), tmp_path / "t")
    for chunk in (tmp_path / "t" / "float64").rglob("c/*"):
        chunk.write_bytes(b"corrupt")  # would fail if it were read
    result = read_table(tmp_path / "t", columns=["int8"])
    assert list(result.columns) == ["int8"]


def test_range_index_becomes_row_number_strings(tmp_path: Path) -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0]})
    write_table(frame, tmp_path / "t")
    result = read_table(tmp_path / "t")
    assert list(result.index) == ["0", "1", "2"]
    assert result.index.name is None
    assert read_table(tmp_path / "t", backend="polars").columns == ["x"]
    stepped = pd.DataFrame({"x": [1, 2, 3, 4, 5]}, index=pd.RangeIndex(10, 0, -2))
    write_table(stepped, tmp_path / "u", chunks=2)
    assert list(read_table(tmp_path / "u").index) == ["10", "8", "6", "4", "2"]


def test_a_named_range_index_is_stored_as_its_integers(tmp_path: Path, backend: str) -> None:
    # it was stored as row numbers that are strings; anndata writes its integers
    frame = pd.DataFrame({"x": [1.0, 2.0]}, index=pd.RangeIndex(3, 7, 2, name="r"))
    write_table(frame, tmp_path / "t")
    result = read_table(tmp_path / "t", backend=backend)
    if backend == "pandas":
        pd.testing.assert_index_equal(result.index, pd.Index([3, 5], name="r"))
    else:
        assert python_values(result) == {"r": [3, 5], "x": [1.0, 2.0]}
    shared = pd.DataFrame({"k": [0, 1]}, index=pd.RangeIndex(2, name="k"))
    write_table(shared, tmp_path / "u")
    assert json.loads((tmp_path / "u" / "zarr.json").read_text())["attributes"]["_index"] == "k"
    assert python_values(read_table(tmp_path / "u", backend=backend)) == {"k": [0, 1]}


def test_index_column_of_polars_comes_first(backend: str, tmp_path: Path) -> None:
    frame = pl.DataFrame({"length": [1, None, 3], "feature_id": ["g1", "g2", "g3"]})
    write_table(frame, tmp_path / "t", index="feature_id")
    result = read_table(tmp_path / "t", backend=backend)
    if backend == "pandas":
        assert result.index.name == "feature_id"
        assert list(result.columns) == ["length"]
        assert result["length"].dtype == pd.Int64Dtype()
    else:
        assert python_values(result) == {"feature_id": ["g1", "g2", "g3"], "length": [1, None, 3]}


def test_pandas_index_named_by_index_argument(tmp_path: Path) -> None:
    frame = pd.DataFrame({"n": [1, 2]}, index=pd.Index(["a", "b"], name="sample_id"))
    write_table(frame, tmp_path / "t", index="sample_id")
    assert_frames_equal(read_table(tmp_path / "t"), frame)
    column_frame = frame.reset_index()
    write_table(column_frame, tmp_path / "u", index="sample_id")
    assert_frames_equal(read_table(tmp_path / "u"), frame)


def test_polars_round_trip_with_index(tmp_path: Path) -> None:
    frame = _polars_indexed()
    write_table(frame, tmp_path / "t", index="feature_id")
    assert_frames_equal(read_table(tmp_path / "t", backend="polars"), frame)


def test_object_strings_with_missing_values_become_nullable_strings(tmp_path: Path) -> None:
    frame = pd.DataFrame(  # a Series: pandas 3 makes an object array of strings str
        {"s": pd.Series(["a", None, np.nan, "d"], dtype=object, index=list("wxyz"))}
    )
    write_table(frame, tmp_path / "t")
    assert _encoding(tmp_path / "t" / "s") == "nullable-string-array"
    result = read_table(tmp_path / "t")
    assert result["s"].dtype == pd.StringDtype()
    assert result["s"].isna().tolist() == [False, True, True, False]


@pytest.mark.parametrize("na_value", [pd.NA, np.nan])
def test_nullable_strings_read_as_pandas_would_build_them_from_str(
    tmp_path: Path, na_value: Any
) -> None:
    """Where pandas keeps strings in pyarrow, a nullable string column is made from its UTF-8
    buffers: the same array pandas makes from the ``str`` (and elsewhere, made from them)."""
    values = ["a", None, "", "é€😀", "x" * 300, None, "CD4"] * 50
    dtype = pd.StringDtype(na_value=na_value)
    frame = pd.DataFrame({"s": pd.array(values, dtype=dtype)}, index=[f"c{i}" for i in range(350)])
    write_table(frame, tmp_path / "t")
    result = read_table(tmp_path / "t")["s"]
    expected = pd.array([na_value if v is None else v for v in values], dtype=dtype)
    assert result.dtype == dtype
    pd.testing.assert_extension_array_equal(result.array, expected)
    if dtype.storage == "pyarrow":
        assert result.array.__arrow_array__().type == expected.__arrow_array__().type


def test_nullable_strings_alone_can_be_read_as_buffers(tmp_path: Path) -> None:
    """pandas 3 gets nullable strings as UTF-8 buffers (made into its pyarrow strings) and a
    ``string-array`` as ``str`` objects (an object column, as anndata reads it)."""
    from cytepool.io.tables import registry
    from cytepool.io.tables.strings import Utf8Strings
    from cytepool.io.zarr._store import open_local
    from cytepool.io.zarr.store import StorePath

    frame = pd.DataFrame(
        {
            "plain": pd.Series(["a", "bc"], dtype=object),
            "nullable": pd.array(["a", None], dtype=pd.StringDtype()),
        }
    )
    write_table(frame, tmp_path / "t")
    root = StorePath(open_local(tmp_path / "t"))
    plain = registry.read_element(root / "plain", objects=True, nullable_objects=False)
    nullable = registry.read_element(root / "nullable", objects=True, nullable_objects=False)
    if plain.kind == "string":  # pandas 2 stores an object column of str as a string-array
        assert plain.values.dtype == object
    assert nullable.kind == "nullable-string"
    assert isinstance(nullable.values, Utf8Strings)
    both = registry.read_element(root / "nullable", objects=True)
    assert both.values.dtype == object


def test_narwhals_frame_is_accepted(tmp_path: Path) -> None:
    import narwhals as nw

    frame = _polars_without_nulls()
    write_table(nw.from_native(frame, eager_only=True), tmp_path / "t")
    assert_frames_equal(read_table(tmp_path / "t", backend="polars"), frame)


def test_zero_columns(backend: str, tmp_path: Path) -> None:
    write_table(pd.DataFrame(index=pd.Index(["a", "b"], name="id")), tmp_path / "t")
    result = read_table(tmp_path / "t", backend=backend)
    if backend == "pandas":
        assert result.shape == (2, 0)
        assert list(result.index) == ["a", "b"]
    else:
        assert python_values(result) == {"id": ["a", "b"]}
    write_table(pl.DataFrame(), tmp_path / "u")
    assert read_table(tmp_path / "u", backend=backend).shape[0] == 0


def test_compression_options(tmp_path: Path) -> None:
    frame = _pandas_categorical()
    for i, (compression, level) in enumerate([(None, None), ("gzip", 9), ("gzip", None)]):
        write_table(frame, tmp_path / f"t{i}", compression=compression, level=level)
        assert_frames_equal(read_table(tmp_path / f"t{i}"), frame)


def test_default_chunks_aim_at_about_one_mebibyte(tmp_path: Path) -> None:
    n = 300_000
    frame = pl.DataFrame({"i8": np.zeros(n, dtype=np.int8), "f64": np.arange(n, dtype=np.float64)})
    write_table(frame, tmp_path / "t")
    chunk = {
        name: json.loads((tmp_path / "t" / name / "zarr.json").read_text())["chunk_grid"][
            "configuration"
        ]["chunk_shape"][0]
        for name in ("i8", "f64")
    }
    assert chunk == {"i8": n, "f64": 2**20 // 8}


def test_unnamed_index_is_not_read_for_polars_and_pyarrow(tmp_path: Path) -> None:
    write_table(_polars_without_nulls(), tmp_path / "t")
    for chunk in (tmp_path / "t" / "_index").rglob("c/*"):
        chunk.write_bytes(b"corrupt")  # would fail if it were read
    assert_frames_equal(read_table(tmp_path / "t", backend="polars"), _polars_without_nulls())
    assert read_table(tmp_path / "t", backend="pyarrow").num_rows == 3


@st.composite
def _polars_frames(draw: st.DrawFn) -> Any:
    n = draw(st.integers(0, 12))
    ints = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
    floats = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
    texts = st.one_of(st.none(), st.text(max_size=6))
    return pl.DataFrame(
        {
            "i": pl.Series(draw(st.lists(ints, min_size=n, max_size=n)), dtype=pl.Int64),
            "f": pl.Series(draw(st.lists(floats, min_size=n, max_size=n)), dtype=pl.Float64),
            "s": pl.Series(draw(st.lists(texts, min_size=n, max_size=n)), dtype=pl.String),
            "b": pl.Series(
                draw(st.lists(st.one_of(st.none(), st.booleans()), min_size=n, max_size=n)),
                dtype=pl.Boolean,
            ),
        }
    )


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frame=_polars_frames(), chunks=st.integers(1, 5))
def test_round_trip_property(
    frame: Any, chunks: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("t") / "t"
    write_table(frame, path, chunks=chunks)
    assert_frames_equal(read_table(path, backend="polars"), frame)


def _na_real(dtype: str) -> Any:
    """A NaN with the bits of R's NA_real_ (payload 1954), the marker of a missing float."""
    bits = {"float64": np.array([0x7FF8_0000_0000_07A2], np.uint64)}
    bits["float32"] = np.array([0x7FC0_07A2], np.uint32)
    return bits[dtype].view(dtype)[0]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("missing", [[False, False, False, True], [False, False, False, False]])
def test_a_nan_with_the_bits_of_the_missing_marker_stays_a_nan(
    dtype: str, missing: list[bool], tmp_path: Path
) -> None:
    """A NaN that is not missing reads back as NaN even with the bits of NA_real_."""
    values = np.array([1.0, np.nan, _na_real(dtype), 0.0], dtype=dtype)
    mask = np.array(missing)
    frame = pd.DataFrame({"F": pd.arrays.FloatingArray(values, mask)}, index=list("abcd"))
    write_table(frame, tmp_path / "pandas")
    back = read_table(tmp_path / "pandas")["F"].array
    assert back.isna().tolist() == missing
    assert (np.isnan(back._data) & ~back._mask).tolist() == [False, True, True, False]
    assert back.dtype == frame["F"].dtype
    table = pa.table({"F": pa.array(values, mask=mask)})
    write_table(table, tmp_path / "pyarrow")
    arrow = read_table(tmp_path / "pyarrow", backend="pyarrow")["F"]
    polars = read_table(tmp_path / "pyarrow", backend="polars")["F"]
    for nulls, items in [
        (arrow.is_null().to_pylist(), arrow.to_pylist()),
        (polars.is_null().to_list(), polars.to_list()),
    ]:
        assert nulls == missing
        assert [item is not None and np.isnan(item) for item in items] == [0, 1, 1, 0]


@pytest.mark.parametrize("ordered", [False, True])
def test_a_dictionary_that_repeats_a_value_is_written_with_unique_categories(
    tmp_path: Path, ordered: bool
) -> None:
    """write_table wrote a pyarrow dictionary that repeats a value as it was, and read_table
    (and anndata) refused what it wrote: categories must be unique."""
    indices = pa.array([2, 0, 1, None, 3], pa.int8())
    column = pa.DictionaryArray.from_arrays(
        indices, pa.array(["b", "a", "b", "c"]), ordered=ordered
    )
    table = pa.table({"c": column})
    for frame in (table, table.to_pandas(types_mapper=pd.ArrowDtype)):
        path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.zarr"
        write_table(frame, path)
        back = read_table(path)["c"]
        assert list(back.cat.categories) == ["b", "a", "c"]
        assert back.cat.ordered == ordered
        assert back.tolist()[:3] == ["b", "b", "a"]
        assert pd.isna(back.iloc[3])
        assert back.iloc[4] == "c"
