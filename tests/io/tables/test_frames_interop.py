"""Interop with anndata and zarr-python, both directions.

anndata writes (``anndata.io.write_elem`` into a zarr-python v3 group) and read_table must give
what anndata's own ``read_elem`` gives; write_table writes and anndata and zarr-python must read
the same values and dtypes. They run on both stacks of ``scripts/test.sh``: anndata 0.12 with
pandas 2, and anndata 0.13 (Zarr v3 output sharded by default) with pandas 3.
"""

from __future__ import annotations

import datetime as dt
import json
import warnings
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tables_helpers import python_values

from cytepool.errors import UnsupportedFeatureError
from cytepool.io import read_table, write_table
from cytepool.io import zarr as cz

pd = pytest.importorskip("pandas")
ad = pytest.importorskip("anndata")
zarr = pytest.importorskip("zarr")

pytestmark = pytest.mark.interop

ANNDATA_013 = tuple(int(part) for part in version("anndata").split(".")[:2]) >= (0, 13)


def anndata_write(frame: Any, path: Path, **dataset_kwargs: Any) -> Path:
    """Write ``frame`` with anndata into a new zarr-python v3 group; return the table's path."""
    group = zarr.open_group(path, mode="w", zarr_format=3)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"(?i).*auto.?shard", category=UserWarning)
        with ad.settings.override(allow_write_nullable_strings=True):
            ad.io.write_elem(group, "df", frame, dataset_kwargs=dataset_kwargs)
    return path / "df"


def anndata_read(path: Path) -> Any:
    """Read the table at ``path`` with anndata."""
    return ad.io.read_elem(zarr.open_group(path, mode="r"))


def _index(values: list[Any], name: str | None = None) -> Any:
    return pd.Index(np.array(values, dtype=object), name=name)


def _anndata_frames() -> Iterator[Any]:
    index = _index(["c1", "c2", "c3", "c4", "c5"])
    yield pytest.param(
        pd.DataFrame(
            {
                "i8": np.array([1, -2, 3, 4, 5], dtype=np.int8),
                "u64": np.array([0, 1, 2, 3, 2**64 - 1], dtype=np.uint64),
                "f32": np.array([0.5, np.nan, 1, 2, 3], dtype=np.float32),
                "f64": [0.5, np.nan, np.inf, -0.0, 1e300],
                "b": [True, False, True, True, False],
                "s": ["α", "", "日本", "😀", "x"],
                "zeros": np.zeros(5, dtype=np.int64),
                "empty_strings": [""] * 5,
            },
            index=index,
        ),
        id="numeric-and-strings",
    )
    yield pytest.param(
        pd.DataFrame(
            {
                "cat": pd.Categorical(["a", "b", None, "a", "b"], categories=["b", "a", "unused"]),
                "ordered": pd.Categorical(["x", "y", "x", "x", None], ordered=True),
                "one_category": pd.Categorical(["only"] * 5),
                "all_missing": pd.Categorical([None] * 5, categories=["z"]),
                "int_cats": pd.Categorical([3, 1, 3, None, 2]),
                "float_cats": pd.Categorical([0.5, 1.5, 0.5, 0.5, None]),
                "bool_cats": pd.Categorical([True, False, True, True, False]),
                "datetime_cats": pd.Categorical(
                    pd.to_datetime(["2020-01-01", "2021-01-01", None, "2020-01-01", "2022-02-02"])
                ),
                "string_dtype_cats": pd.Categorical(
                    pd.array(["u", "v", "u", "u", "v"], dtype="string")
                ),
                "many": pd.Categorical(
                    [f"c{i}" for i in range(5)], categories=[f"c{i}" for i in range(200)]
                ),
            },
            index=index,
        ),
        id="categoricals",
    )
    yield pytest.param(
        pd.DataFrame(
            {
                "Int8": pd.array([1, None, 3, 4, 5], dtype="Int8"),
                "UInt32": pd.array([1, 2, 3, 4, 5], dtype="UInt32"),
                "Int64": pd.array([None] * 5, dtype="Int64"),
                "boolean": pd.array([True, None, False, True, True], dtype="boolean"),
                "string": pd.array(["a", None, "", "é", "z"], dtype="string"),
                "string_full": pd.array(["a", "b", "", "é", "z"], dtype="string"),
            },
            index=index,
        ),
        id="nullables",
    )
    yield pytest.param(
        pd.DataFrame({"x": [1, 2, 3]}, index=_index(["a", "b", "c"], "cell_id")), id="named-index"
    )
    yield pytest.param(pd.DataFrame({"x": [1.0, 2.0, 3.0]}), id="range-index")
    yield pytest.param(  # written as anndata writes it: its name and its integers
        pd.DataFrame({"x": [1.0, 2.0, 3.0]}, index=pd.RangeIndex(4, 10, 2, name="r")),
        id="named-range-index",
    )
    yield pytest.param(
        pd.DataFrame({"k": [0, 1, 2], "x": [1, 2, 3]}, index=pd.RangeIndex(3, name="k")),
        id="named-range-index-shared-with-column",
    )
    yield pytest.param(
        pd.DataFrame({"x": [1, 2, 3]}, index=pd.Index([5, 3, 9], dtype=np.int64)), id="int-index"
    )
    yield pytest.param(
        pd.DataFrame({"x": [1, 2, 3]}, index=pd.CategoricalIndex(["p", "q", "r"], name="k")),
        id="categorical-index-group",
    )
    yield pytest.param(
        pd.DataFrame({"x": [1, 2, 3]}, index=pd.Index(pd.array([1, 2, 3], dtype="Int64"))),
        id="nullable-index-group",
    )
    yield pytest.param(
        pd.DataFrame(
            {"sample_id": ["a", "b", "c"], "x": [1, 2, 3]},
            index=_index(["a", "b", "c"], "sample_id"),
        ),
        id="index-shared-with-column",
    )
    yield pytest.param(
        pd.DataFrame(
            {
                "i": np.array([], dtype=np.int32),
                "s": np.array([], dtype=object),
                "c": pd.Categorical([], categories=["a"]),
                "n": pd.array([], dtype="Int16"),
            },
            index=_index([]),
        ),
        id="zero-rows",
    )
    yield pytest.param(pd.DataFrame(index=_index(["a", "b"])), id="zero-columns")
    yield pytest.param(pd.DataFrame(), id="empty-DataFrame")


ANNDATA_FRAMES = list(_anndata_frames())
LONG = pd.DataFrame(
    {
        "i": np.arange(1003, dtype=np.int64),
        "s": [f"s{i}" for i in range(1003)],
        "c": pd.Categorical([f"k{i % 7}" for i in range(1003)]),
        "n": pd.array([None if i % 10 == 0 else i for i in range(1003)], dtype="Int32"),
        "z": np.zeros(1003),
    },
    index=_index([f"r{i}" for i in range(1003)]),
)


def _check_read(path: Path, expected: Any) -> None:
    result = read_table(path)
    pd.testing.assert_frame_equal(result, expected, check_exact=True)
    pytest.importorskip("polars")
    for backend in ("polars", "pyarrow"):
        pytest.importorskip(backend)
        values = python_values(read_table(path, backend=backend))
        wanted = python_values(expected)
        for name in wanted.keys() & values.keys():
            assert values[name] == wanted[name], (backend, name)


@pytest.mark.parametrize("frame", ANNDATA_FRAMES)
def test_read_what_anndata_writes(frame: Any, tmp_path: Path) -> None:
    path = anndata_write(frame, tmp_path / "store")
    _check_read(path, anndata_read(path))


@pytest.mark.parametrize(
    "dataset_kwargs",
    [
        pytest.param({}, id="anndata-default"),
        pytest.param({"chunks": (100,)}, id="chunks-100"),
        pytest.param({"chunks": (64,), "shards": (256,)}, id="shards"),
        pytest.param({"compressors": "gzip-placeholder"}, id="gzip"),
    ],
)
def test_read_chunked_and_sharded(dataset_kwargs: dict[str, Any], tmp_path: Path) -> None:
    if dataset_kwargs.get("compressors") == "gzip-placeholder":
        dataset_kwargs = {"compressors": zarr.codecs.GzipCodec(level=5)}
    path = anndata_write(LONG, tmp_path / "store", **dataset_kwargs)
    if "shards" in dataset_kwargs:
        document = json.loads((path / "i" / "zarr.json").read_text())
        assert document["codecs"][0]["name"] == "sharding_indexed"
    _check_read(path, anndata_read(path))


# zarr 3.1.4 calls the shard shapes anndata asks it to choose experimental
@pytest.mark.filterwarnings("ignore:Automatic shard shape inference is experimental:UserWarning")
def test_read_auto_sharded(tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "store", mode="w", zarr_format=3)
    with ad.settings.override(auto_shard_zarr_v3=True):
        ad.io.write_elem(group, "df", LONG)
    path = tmp_path / "store" / "df"
    document = json.loads((path / "i" / "zarr.json").read_text())
    assert document["codecs"][0]["name"] == "sharding_indexed"
    _check_read(path, anndata_read(path))


@pytest.mark.parametrize("frame", ANNDATA_FRAMES)
def test_anndata_reads_what_cytepool_writes(frame: Any, tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    write_table(frame, ours, chunks=2)
    theirs = anndata_write(frame, tmp_path / "theirs")
    expected = anndata_read(theirs)
    row_numbers = isinstance(frame.index, pd.RangeIndex) and frame.index.name is None
    if row_numbers:  # AnnData's row names: strings
        # as pandas infers an index of str objects: object in pandas 2, str in pandas 3
        expected.index = pd.Index(expected.index.astype(str).to_numpy(dtype=object))
    pd.testing.assert_frame_equal(anndata_read(ours), expected, check_exact=True)
    _assert_same_encoding(ours, theirs, range_index=row_numbers)
    _assert_zarr_python_reads_the_same(ours)


def _nodes(root: Path) -> dict[str, dict[str, Any]]:
    return {
        str(p.parent.relative_to(root)): json.loads(p.read_text()) for p in root.rglob("zarr.json")
    }


def _assert_same_encoding(ours: Path, theirs: Path, *, range_index: bool) -> None:
    """Same nodes, node types, attributes and data types as anndata's own write."""
    mine, reference = _nodes(ours), _nodes(theirs)
    assert mine.keys() == reference.keys()
    for key, document in reference.items():
        got = mine[key]
        assert got["node_type"] == document["node_type"], key
        expected_attributes = dict(document["attributes"])
        if "na-value" in got["attributes"] and not ANNDATA_013:
            expected_attributes = {"na-value": got["attributes"]["na-value"], **expected_attributes}
        if range_index and key == "_index":  # anndata writes the RangeIndex as int64 numbers
            assert got["data_type"] == "string"
            continue
        assert got["attributes"] == expected_attributes, key
        assert list(got["attributes"]) == list(expected_attributes), key
        if document["node_type"] == "array":
            assert got["data_type"] == document["data_type"], key
            assert got["shape"] == document["shape"], key


def _assert_zarr_python_reads_the_same(root: Path) -> None:
    for key in _nodes(root):
        path = root / key
        if cz.node_type(path) != "array":
            continue
        theirs = zarr.open_array(path, mode="r")[...]
        ours = np.asarray(cz.open_array(path))
        if ours.dtype.kind in "OTU":
            assert [str(v) for v in theirs] == [str(v) for v in ours], key
        else:
            assert theirs.dtype == ours.dtype, key
            np.testing.assert_array_equal(theirs, ours, strict=True)


def _extension_frames() -> Iterator[Any]:
    pl = pytest.importorskip("polars")
    yield pytest.param(
        pl.DataFrame(
            {
                "i": pl.Series([1, None, 3], dtype=pl.Int32),
                "b": [True, None, False],
                "s": ["a", None, "é"],
                "f": pl.Series([1.5, None, float("nan")], dtype=pl.Float64),
                "f32": pl.Series([1.5, None, 2.0], dtype=pl.Float32),
                "cat": pl.Series(["x", None, "y"], dtype=pl.Categorical),
                "enum": pl.Series(["lo", "hi", None], dtype=pl.Enum(["lo", "hi", "unused"])),
                "date": [dt.date(2020, 1, 2), None, dt.date(1969, 7, 20)],
                "naive": pl.Series(
                    [dt.datetime(2020, 1, 1, 12, 30), None, dt.datetime(1901, 1, 1)],
                    dtype=pl.Datetime("us"),
                ),
                "zoned": pl.Series(
                    [dt.datetime(2020, 1, 1, 12, tzinfo=dt.UTC), None, None],
                    dtype=pl.Datetime("ns", "Europe/Berlin"),
                ),
                "duration": pl.Series([dt.timedelta(seconds=1), None, dt.timedelta(0)]),
            }
        ),
        id="polars-extensions",
    )


def test_what_anndata_sees_of_extension_types(tmp_path: Path) -> None:
    (param,) = list(_extension_frames())
    frame = param.values[0]
    write_table(frame, tmp_path / "t")
    seen = anndata_read(tmp_path / "t")
    assert list(seen.index) == ["0", "1", "2"]
    assert seen["i"].dtype == pd.Int32Dtype()
    assert seen["b"].dtype == pd.BooleanDtype()
    assert seen["s"].dtype == pd.StringDtype()
    assert seen["s"].isna().tolist() == [False, True, False]
    assert seen["f"].dtype == np.float64
    assert np.isnan(seen["f"]).tolist() == [False, True, True]  # null and NaN both NaN
    assert seen["f32"].dtype == np.float32
    assert seen["cat"].dtype == pd.CategoricalDtype(["x", "y"], ordered=False)
    assert seen["enum"].dtype == pd.CategoricalDtype(["lo", "hi", "unused"], ordered=True)
    assert seen["date"].dtype == np.dtype("datetime64[s]")
    assert seen["date"].tolist()[0] == pd.Timestamp("2020-01-02")
    assert seen["naive"].dtype == np.dtype("datetime64[us]")
    assert seen["zoned"].dtype == np.dtype("datetime64[ns]")  # UTC, zone dropped
    assert seen["zoned"].iloc[0] == pd.Timestamp("2020-01-01 12:00")
    assert seen["duration"].dtype == np.dtype("timedelta64[us]")
    assert seen["duration"].isna().tolist() == [False, True, False]
    _assert_zarr_python_reads_the_same(tmp_path / "t")


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: pd.DataFrame(
                {
                    "zoned": pd.to_datetime(["2020-01-01", None]).tz_localize("America/Lima"),
                    "naive": pd.to_datetime(["2020-01-01", None]),
                    "delta": pd.to_timedelta([1, None], unit="h"),
                    "F": pd.array([0.5, None], dtype="Float64"),
                },
                index=_index(["a", "b"]),
            ),
            id="pandas-extensions",
        )
    ],
)
def test_anndata_reads_pandas_extension_types(make: Callable[[], Any], tmp_path: Path) -> None:
    frame = make()
    write_table(frame, tmp_path / "t")
    seen = anndata_read(tmp_path / "t")
    for name in ("zoned", "naive", "delta"):  # in the input's unit: ns in pandas 2, us in 3
        kind = "timedelta64" if name == "delta" else "datetime64"
        assert seen[name].dtype == np.dtype(f"{kind}[{frame[name].dt.unit}]")
    assert seen["zoned"].iloc[0] == pd.Timestamp("2020-01-01 05:00")
    assert seen["F"].dtype == np.float64
    pd.testing.assert_frame_equal(read_table(tmp_path / "t"), frame, check_exact=True)


def test_a_named_range_index_is_refused_next_to_other_values_as_anndata_refuses_it(
    tmp_path: Path,
) -> None:
    frame = pd.DataFrame({"k": [5, 6]}, index=pd.RangeIndex(2, name="k"))
    with pytest.raises(ValueError, match=r"index.name \('k'\) is also used by a column"):
        anndata_write(frame, tmp_path / "theirs")
    with pytest.raises(ValueError, match=r"index name 'k' is also used by a column"):
        write_table(frame, tmp_path / "ours")


def _anndata_times(kind: str, unit: str, path: Path) -> Path:
    """A table of one column of numpy ``kind`` (datetime64/timedelta64) in ``unit``, as
    anndata's write_elem writes it (values 1500, 2501, -1, -2501 and NaT of that unit)."""
    numbers = np.array([1500, 2501, -1, -2501, np.iinfo(np.int64).min], dtype=np.int64)
    frame = pd.DataFrame({"i": np.arange(5)}, index=_index(list("abcde")))
    table = anndata_write(frame, path)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"(?i).*auto.?shard", category=UserWarning)
        ad.io.write_elem(zarr.open_group(table), "t", numbers.view(f"{kind}[{unit}]"))
    zarr.open_group(table).attrs["column-order"] = ["i", "t"]
    return table


def _as_integers(frame: Any, backend: str) -> tuple[str, list[int | None]]:
    """Column ``t`` of a frame read with ``backend``: its unit and its numbers (None: NaT)."""
    if backend == "pandas":
        values = frame["t"].to_numpy()
        numbers = values.view(np.int64).tolist()
        missing = np.isnat(values).tolist()
        return np.datetime_data(values.dtype)[0], [
            None if m else n for m, n in zip(missing, numbers, strict=True)
        ]
    column = frame["t"] if backend == "polars" else frame.column("t")
    if backend == "polars":
        return column.dtype.time_unit, column.to_physical().to_list()
    return column.type.unit, column.cast("int64").to_pylist()


@pytest.mark.parametrize("kind", ["datetime64", "timedelta64"])
@pytest.mark.parametrize("unit", ["ps", "fs", "as", "m", "h", "D", "W", "M", "Y"])
@pytest.mark.parametrize("backend", ["pandas", "polars", "pyarrow"])
def test_times_in_other_units_read_as_anndata_reads_them(
    kind: str, unit: str, backend: str, tmp_path: Path
) -> None:
    # units finer than ns used to be cut to seconds (pandas, pyarrow) or ms (polars)
    if backend == "polars":
        pytest.importorskip("polars")
    path = _anndata_times(kind, unit, tmp_path / "store")
    if kind == "timedelta64" and unit in ("M", "Y"):  # no fixed length
        match = rf"durations in unit '{unit}' .*months and years have no fixed length"
        with pytest.raises(UnsupportedFeatureError, match=match):
            read_table(path, backend=backend)  # type: ignore[arg-type]
        return
    expected = anndata_read(path)
    result = read_table(path, backend=backend)  # type: ignore[arg-type]
    if backend == "pandas":
        pd.testing.assert_frame_equal(result, expected, check_exact=True)
        return
    wanted_unit, wanted = _as_integers(expected, "pandas")
    got_unit, got = _as_integers(result, backend)
    if backend == "polars" and wanted_unit == "s":  # polars holds no seconds
        wanted_unit, wanted = "ms", [None if n is None else n * 1000 for n in wanted]
    assert (got_unit, got) == (wanted_unit, wanted)
    if unit == "ps":  # floored to whole nanoseconds, as pandas (and anndata) floor them
        assert got == [1, 2, -1, -3, None]


def test_read_absent_chunks(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "zeros": np.zeros(6, dtype=np.int32),
            "empty": [""] * 6,
            "single": pd.Categorical(["only"] * 6),
            "full": pd.array([1, 2, 3, 4, 5, 6], dtype="Int8"),
        },
        index=_index([f"r{i}" for i in range(6)]),
    )
    path = anndata_write(frame, tmp_path / "store", chunks=(4,))
    for node in ("zeros", "empty", "single/codes", "full/mask"):
        assert not list((path / node).rglob("c*")), node  # zarr-python stored no chunk
    _check_read(path, anndata_read(path))


@pytest.mark.parametrize("backend", ["pandas", "polars", "pyarrow"])
def test_read_string_chunks_not_stored_as_the_fill_value(backend: str, tmp_path: Path) -> None:
    """A string column whose chunks that are not stored read as its fill value "NA": the
    pyarrow and polars backends read them as "" (they read the column as buffers)."""
    string_array = {"encoding-type": "string-array", "encoding-version": "0.2.0"}
    table = {"encoding-type": "dataframe", "encoding-version": "0.2.0"}
    root = tmp_path / "t.zarr"
    group = zarr.open_group(root, mode="w", attributes={**table, "column-order": ["s"]})
    group.attrs["_index"] = "_index"
    rows = group.create_array("_index", shape=(6,), dtype=str, attributes=string_array)
    rows[...] = np.array([f"r{i}" for i in range(6)])
    column = group.create_array(
        "s", shape=(6,), dtype=str, chunks=(2,), fill_value="NA", attributes=string_array
    )
    column[0:2] = ["a", "b"]
    read = read_table(root, backend=backend)  # type: ignore[arg-type]
    values = read["s"].to_pylist() if backend == "pyarrow" else list(read["s"])
    assert values == ["a", "b", "NA", "NA", "NA", "NA"]


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("backend", ["pandas", "polars", "pyarrow"])
def test_a_complex_column_anndata_writes_is_refused(
    dtype: str, backend: str, tmp_path: Path
) -> None:
    # it used to be read as complex by pandas, as Object by polars, and to raise pyarrow's
    # ArrowNotImplementedError
    frame = pd.DataFrame({"a": [1, 2], "z": np.array([1 + 2j, 3j], dtype=dtype)}, index=["x", "y"])
    path = anndata_write(frame, tmp_path / "store")
    assert anndata_read(path)["z"].dtype == np.dtype(dtype)
    match = rf"df/z: column 'z' has data type {dtype}, which cytepool tables do not read"
    with pytest.raises(UnsupportedFeatureError, match=match):
        read_table(path, backend=backend)  # type: ignore[arg-type]
    assert len(read_table(path, columns=["a"], backend=backend)) == 2  # the other columns read
