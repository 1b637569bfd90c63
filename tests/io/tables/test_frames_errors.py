"""What write_table and read_table refuse, and how they fail."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.errors import FormatError, InputError, UnsupportedFeatureError
from cytepool.io import read_table, write_table
from cytepool.io.tables import registry

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        pytest.param(
            pl.DataFrame({"l": [[1], [2, 3]]}), r"column 'l' has dtype List\(Int64\)", id="list"
        ),
        pytest.param(
            pl.DataFrame({"s": [{"a": 1}, {"a": 2}]}), r"column 's' has dtype Struct", id="struct"
        ),
        pytest.param(
            pa.table({"l": pa.array([[1], None])}), r"column 'l' has dtype List", id="arrow-list"
        ),
        pytest.param(
            pd.DataFrame({"m": np.array([1, "a", None], dtype=object)}),
            r"column 'm' has dtype Object \(mixed-object\)",
            id="mixed-object",
        ),
        pytest.param(
            pd.DataFrame({"b": np.array([b"x", b"y"], dtype=object)}), r"column 'b'", id="bytes"
        ),
        pytest.param(
            pd.DataFrame({"p": pd.period_range("2020-01", periods=2, freq="M")}),
            r"column 'p' has dtype",
            id="period",
        ),
        pytest.param(
            pd.DataFrame({"iv": pd.arrays.IntervalArray.from_breaks([0, 1, 2])}),
            r"column 'iv' has dtype",
            id="interval",
        ),
        pytest.param(pl.DataFrame({"t": [dt.time(1)]}), r"column 't' has dtype Time", id="time"),
        pytest.param(pl.DataFrame({"b": [b"x"]}), r"column 'b' has dtype Binary", id="binary"),
        pytest.param(
            pl.DataFrame({"d": [decimal.Decimal("1.5")]}),
            r"column 'd' has dtype Decimal",
            id="decimal",
        ),
        pytest.param(
            pd.DataFrame({"c": pd.Categorical([pd.Interval(0, 1)])}),
            r"column 'c' has dtype interval",
            id="interval-categories",
        ),
        pytest.param(  # narwhals calls these Unknown: the message names the native type
            pd.DataFrame({"z": np.array([1 + 2j, 3j])}),
            r"column 'z' has dtype complex128, which a table cannot store",
            id="complex",
        ),
        pytest.param(
            pa.table({"d": pa.array([dt.date(2020, 1, 1)], pa.date64())}),
            r"column 'd' has dtype date64\[ms\], which",
            id="date64",
        ),
        pytest.param(
            pa.table({"n": pa.nulls(2)}), r"column 'n' has dtype null, which", id="arrow-null"
        ),
        pytest.param(
            pl.DataFrame({"n": [None, None]}), r"column 'n' has dtype Null, which", id="polars-null"
        ),
        pytest.param(  # pyarrow 18 cannot even fill the missing value (ArrowTypeError)
            pa.table({"h": pa.array(np.array([1.5, 2.5], "float16"), mask=np.array([0, 1], bool))}),
            r"column 'h': floats with missing values must be float32 or float64, found float16",
            id="float16-with-nulls",
        ),
    ],
)
def test_refused_dtypes(frame: Any, match: str, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=match):
        write_table(frame, tmp_path / "t")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        pytest.param(pd.DataFrame({"_index": [1]}), r"'_index' is a reserved name", id="_index"),
        pytest.param(
            pd.DataFrame([[1, 2]], columns=["a", "a"]), r"repeated names \['a'\]", id="duplicate"
        ),
        pytest.param(
            pd.DataFrame({5: [1]}), r"column names must be strings, found 5", id="int-name"
        ),
        pytest.param(pd.DataFrame({"a/b": [1]}), r"'a/b' cannot name a Zarr node", id="slash"),
        pytest.param(pl.DataFrame({"": [1]}), r"'' cannot name a Zarr node", id="empty"),
        pytest.param(pl.DataFrame({"..": [1]}), r"'\.\.' cannot name", id="periods"),
        pytest.param(pl.DataFrame({"zarr.json": [1]}), r"'zarr.json' cannot name", id="zarr.json"),
        pytest.param(pl.DataFrame({"__x": [1]}), r"'__x' cannot name", id="reserved-prefix"),
        pytest.param(
            pd.DataFrame({"a": [1]}, index=pd.Index(["x"], name=3)),
            r"index name must be a string or None, found 3",
            id="index-name-int",
        ),
        pytest.param(
            pd.DataFrame({"a": [1]}, index=pd.Index(["x"], name="a/b")),
            r"index name 'a/b' cannot name",
            id="index-name-slash",
        ),
        pytest.param(
            pd.DataFrame({"id": ["x", "y"]}, index=pd.Index(["x", "z"], name="id")),
            r"index name 'id' is also used by a column whose values are different",
            id="shared-index-differs",
        ),
    ],
)
def test_refused_names(frame: Any, match: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=match):
        write_table(frame, tmp_path / "t")
    assert list(tmp_path.iterdir()) == []


def test_index_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"index 'nope' is not a column of the frame"):
        write_table(pl.DataFrame({"a": [1]}), tmp_path / "t", index="nope")
    frame = pd.DataFrame({"a": [1], "b": [2]}, index=pd.Index(["x"], name="own"))
    with pytest.raises(ValueError, match=r"also has its own index 'own' that would be lost"):
        write_table(frame, tmp_path / "t", index="a")
    with pytest.raises(TypeError, match=r"index must be a column name \(str\) or None"):
        write_table(frame, tmp_path / "t", index=1)  # type: ignore[arg-type]


def test_argument_errors(tmp_path: Path) -> None:
    frame = pl.DataFrame({"a": [1]})
    with pytest.raises(TypeError, match=r"frame must be a pandas, polars or pyarrow table"):
        write_table({"a": [1]}, tmp_path / "t")
    with pytest.raises(ValueError, match=r"chunks must be at least 1 row, found 0"):
        write_table(frame, tmp_path / "t", chunks=0)
    with pytest.raises(TypeError, match=r"chunks must be a number of rows"):
        write_table(frame, tmp_path / "t", chunks=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"brotli"):
        write_table(frame, tmp_path / "t", compression="brotli")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "frame", [pd.Series([1, 2], name="a"), pd.Index(["x", "y"])], ids=["series", "index"]
)
def test_a_pandas_series_or_index_is_a_type_error(frame: Any, tmp_path: Path) -> None:
    # it used to be an AttributeError ('Series' object has no attribute 'columns')
    name = type(frame).__name__
    match = rf"frame must be a pandas, polars or pyarrow table.*found {name}; .*\.to_frame\(\)"
    with pytest.raises(TypeError, match=match):
        write_table(frame, tmp_path / "t")
    assert list(tmp_path.iterdir()) == []


def test_path_must_be_new_with_existing_parent(tmp_path: Path) -> None:
    frame = pl.DataFrame({"a": [1]})
    (tmp_path / "exists").mkdir()
    with pytest.raises(FileExistsError, match=r"exists"):
        write_table(frame, tmp_path / "exists")
    with pytest.raises(FileNotFoundError, match=r"parent directory does not exist"):
        write_table(frame, tmp_path / "missing" / "t")


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = registry._zarr.write_array

    def failing(path: Path, data: Any, **kwargs: Any) -> None:
        calls.append(path)
        if path.name == "codes":
            message = "disk full"
            raise OSError(message)
        original(path, data, **kwargs)

    monkeypatch.setattr(registry._zarr, "write_array", failing)
    frame = pd.DataFrame({"a": [1, 2], "c": pd.Categorical(["x", "y"])})
    with pytest.raises(OSError, match="disk full") as info:
        write_table(frame, tmp_path / "t")
    assert list(tmp_path.iterdir()) == []
    notes = info.value.__notes__
    assert len(notes) == 1
    assert notes[0] == f"Error raised while writing the table element at {tmp_path / 't'}/c/codes"


@pytest.mark.parametrize("where", ["column", "index", "categories"])
def test_strings_with_a_lone_surrogate_are_refused(tmp_path: Path, where: str) -> None:
    """A string holding a lone surrogate raised a bare UnicodeEncodeError; it is an InputError
    (a ValueError) saying strings must be valid Unicode, noted with the table element."""
    bad = pd.Index(["x", "a\ud800"], dtype=object)
    good = pd.Index(["r0", "r1"], dtype=object)
    frame = pd.DataFrame(
        {"s": pd.Categorical(bad) if where == "categories" else pd.Series(bad, index=good)},
        index=bad if where == "index" else good,
    )
    element = {"column": "s", "index": "_index", "categories": "s/categories"}[where]
    match = r"lone surrogate .*strings must be valid Unicode \(no lone surrogates\)"
    with pytest.raises(ValueError, match=match) as info:
        write_table(frame, tmp_path / "t")
    assert isinstance(info.value, InputError)
    notes = getattr(info.value, "__notes__", [])
    if notes:  # found as the element is written
        assert notes[-1].endswith(f"the table element at {tmp_path / 't'}/{element}")
        index = 0 if where == "categories" else 1  # the categories are sorted
        assert f"the string at index {index} holds" in str(info.value)
        # the table's path, not the hidden directory it is built in
        assert f"cannot write the string array {tmp_path / 't'}/{element}" in str(info.value)
        assert "cytepool-tmp" not in str(info.value)
    else:  # pandas 2 hashes the categories first, when the frame is checked
        assert where == "categories"
        assert str(info.value).startswith("column 's' holds a string with a lone surrogate")
    assert list(tmp_path.iterdir()) == []


def _written(tmp_path: Path) -> Path:
    index = pd.Index(["r1", "r2", "r3"], dtype=object)  # a string array whatever the pandas
    frame = pd.DataFrame({"a": [1, 2, 3], "c": pd.Categorical(["x", "y", None])}, index=index)
    write_table(frame, tmp_path / "t")
    return tmp_path / "t"


def _edit(path: Path, **attributes: Any) -> None:
    document = json.loads((path / "zarr.json").read_text())
    for key, value in attributes.items():
        key = key.replace("_", "-") if key != "_index" else key
        if value is None:
            document["attributes"].pop(key, None)
        else:
            document["attributes"][key] = value
    (path / "zarr.json").write_text(json.dumps(document))


def test_read_argument_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _written(tmp_path)
    with pytest.raises(ValueError, match=r"backend must be one of 'pandas', 'polars', 'pyarrow'"):
        read_table(path, backend="dask")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match=r"no columns named \['zz'\]"):
        read_table(path, columns=["a", "zz"])
    with pytest.raises(TypeError, match=r"columns must be a sequence of column names"):
        read_table(path, columns="a")
    with pytest.raises(ValueError, match=r"columns must not repeat a name, found \['a', 'a'\]"):
        read_table(path, columns=["a", "a"])
    with pytest.raises(FileNotFoundError):
        read_table(tmp_path / "nothing")
    monkeypatch.setitem(sys.modules, "polars", None)
    with pytest.raises(ImportError, match=r"needs the package 'polars'.*pip install polars"):
        read_table(path, backend="polars")


@pytest.mark.parametrize(
    ("node", "attributes", "error", "match"),
    [
        pytest.param(
            "", {"encoding_type": "anndata"}, FormatError, r"expected a table", id="not-a-table"
        ),
        pytest.param(
            "",
            {"encoding_version": "0.3.0"},
            UnsupportedFeatureError,
            r"version '0.3.0'",
            id="version",
        ),
        pytest.param(
            "", {"column_order": "a"}, FormatError, r"'column-order' must be a list", id="order"
        ),
        pytest.param("", {"_index": None}, FormatError, r"'_index' must be a string", id="index"),
        pytest.param("", {"_index": "../x"}, FormatError, r"cannot name a node", id="index-path"),
        pytest.param(
            "a",
            {"encoding_type": "awkward-array", "encoding_version": "0.1.0"},
            UnsupportedFeatureError,
            r"awkward-array",
            id="unknown-column-encoding",
        ),
        pytest.param(
            "c", {"ordered": None}, FormatError, r"boolean attribute 'ordered'", id="ordered"
        ),
        pytest.param("c", {"ordered": "yes"}, FormatError, r"found 'yes'", id="ordered-type"),
        pytest.param(
            "a",
            {"cytepool_dtype": {"type": "date"}},
            FormatError,
            r"cytepool-dtype",
            id="extra-dtype",
        ),
    ],
)
def test_invalid_stores(
    tmp_path: Path, node: str, attributes: dict[str, Any], error: type[Exception], match: str
) -> None:
    path = _written(tmp_path)
    _edit(path / node if node else path, **attributes)
    if node == "a" and "cytepool_dtype" in attributes:
        write_table(pl.DataFrame({"f": [1.0]}), tmp_path / "f")
        path = tmp_path / "f"
        _edit(path / "f", **{"cytepool_dtype": {"type": "date"}})
    with pytest.raises(error, match=match) as info:
        read_table(path)
    assert any(str(path) in note for note in info.value.__notes__)


def test_codes_out_of_range_and_length_mismatch(tmp_path: Path) -> None:
    path = _written(tmp_path)
    write_table(pd.DataFrame({"codes": np.array([0, 5, -1], dtype=np.int8)}), tmp_path / "other")
    (path / "c" / "codes").rename(tmp_path / "old")
    (tmp_path / "other" / "codes").rename(path / "c" / "codes")
    with pytest.raises(FormatError, match=r"codes must lie in \[-1, 2\) for 2 categories"):
        read_table(path)
    write_table(pd.DataFrame({"a": [1, 2]}), tmp_path / "short")
    (path / "a").rename(tmp_path / "old_a")
    (tmp_path / "short" / "a").rename(path / "a")
    with pytest.raises(FormatError, match=r"column 'a' has 2 rows but the index has 3"):
        read_table(path, columns=["a"])


def test_multiindex_is_refused(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": [1, 2]}, index=pd.MultiIndex.from_tuples([("x", 1), ("y", 2)]))
    with pytest.raises(TypeError, match=r"a pandas MultiIndex cannot be stored"):
        write_table(frame, tmp_path / "t")


# --------------------------------------------------------------------------------------------
# One rule for names, and content errors that are FormatErrors


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        pytest.param("a\\b", r"contains '\\\\'", id="backslash"),
        pytest.param("a\0b", r"contains '\\x00'", id="nul"),
        pytest.param("x" * 256, r"takes 256 bytes of UTF-8, more than 255", id="long"),
        pytest.param("é" * 128, r"takes 256 bytes of UTF-8, more than 255", id="long-utf8"),
        pytest.param("\udc80", r"lone surrogate", id="surrogate"),
    ],
)
def test_a_name_writers_refuse_is_refused_by_readers(
    tmp_path: Path, name: str, problem: str
) -> None:
    frame = pd.DataFrame([[1]], columns=pd.Index([name], dtype=object))  # pandas 3.1's str
    with pytest.raises(ValueError, match=problem):  # labels refuse lone surrogates themselves
        write_table(frame, tmp_path / "t")
    assert list(tmp_path.iterdir()) == []
    write_table(pd.DataFrame({"a": [1]}), tmp_path / "t")
    (tmp_path / "t" / "a").rename(tmp_path / "t" / "b")  # a stored name that the edit points at
    _edit(tmp_path / "t", column_order=[name])
    with pytest.raises(FormatError, match=rf"cannot name a node of the table: .*{problem}"):
        read_table(tmp_path / "t")


@pytest.mark.parametrize("name", ["a:b", "é" * 127, "tab\there", "what?", "..."])
def test_names_readers_accept_round_trip(tmp_path: Path, name: str) -> None:
    if name == "...":  # writers refuse names of only periods; anndata writes them
        with pytest.raises(ValueError, match="consists only of periods"):
            write_table(pd.DataFrame({name: [1]}), tmp_path / "t")
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "t")
        (tmp_path / "t" / "a").rename(tmp_path / "t" / name)
        _edit(tmp_path / "t", column_order=[name])
    else:
        write_table(pd.DataFrame({name: [1]}), tmp_path / "t")
    assert read_table(tmp_path / "t").columns.tolist() == [name]


def test_reserved_names_that_anndata_writes_are_read(tmp_path: Path) -> None:
    write_table(pd.DataFrame({"a": [1, 2]}), tmp_path / "t")
    (tmp_path / "t" / "a").rename(tmp_path / "t" / "__a")
    _edit(tmp_path / "t", column_order=["__a"])
    assert read_table(tmp_path / "t")["__a"].tolist() == [1, 2]


def test_a_deleted_categories_chunk_is_a_format_error(tmp_path: Path, backend: str) -> None:
    path = _written(tmp_path)
    (path / "c" / "categories" / "c" / "0").unlink()  # the categories read as "", ""
    with pytest.raises(FormatError, match=r"categories must be unique"):
        read_table(path, backend=backend)


def _edit_array(path: Path, **changes: Any) -> None:
    document = json.loads((path / "zarr.json").read_text())
    document.update(changes)
    (path / "zarr.json").write_text(json.dumps(document))


@pytest.mark.parametrize("shape", [2**31, 2**40, 4])
@pytest.mark.parametrize("node", ["a", "_index", "c/codes", "c/categories"])
def test_an_edited_length_is_refused_before_reading(tmp_path: Path, node: str, shape: int) -> None:
    # it used to be read: a MemoryError for 2**31 rows
    path = _written(tmp_path)
    _edit_array(path / node, shape=[shape])
    problem = "rows"
    if node == "c/categories":  # int8 codes address at most 128 categories
        problem = "more than codes of data type int8 can address" if shape > 128 else "unique"
    with pytest.raises(FormatError, match=problem):
        read_table(path)


def test_an_edited_scale_factor_reads_or_is_refused(tmp_path: Path, backend: str) -> None:
    times = pd.to_datetime(["1970-01-01 00:00:01", "1970-01-01 00:00:02"]).as_unit("s")
    write_table(pd.DataFrame({"t": times}), tmp_path / "t")
    data_type = {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 7}}
    _edit_array(tmp_path / "t" / "t", data_type=data_type)
    read = read_table(tmp_path / "t", backend=backend, columns=["t"])
    seconds = pd.Series(pd.DataFrame(read.to_pandas() if backend != "pandas" else read)["t"])
    assert (seconds - pd.Timestamp(0)).dt.total_seconds().tolist() == [7.0, 14.0]
    in_ns = pd.to_datetime(["2020-01-01"]).as_unit("ns")  # pandas 3.1 would infer seconds
    write_table(pd.DataFrame({"t": in_ns}), tmp_path / "u")
    data_type = {"name": "numpy.datetime64", "configuration": {"unit": "ns", "scale_factor": 7}}
    _edit_array(tmp_path / "u" / "t", data_type=data_type)
    with pytest.raises(FormatError, match=r"do not fit in datetime64\[ns\]"):
        read_table(tmp_path / "u", backend=backend)


@pytest.mark.parametrize("backend", ["pandas", "polars", "pyarrow"])
def test_a_repeated_name_in_column_order_is_a_format_error(tmp_path: Path, backend: str) -> None:
    # it used to be read as one column, where anndata reads two
    path = _written(tmp_path)
    _edit(path, column_order=["a", "c", "a"])
    with pytest.raises(FormatError, match=r"'column-order' repeats the column 'a'") as info:
        read_table(path, backend=backend)  # type: ignore[arg-type]
    assert any(str(path) in note for note in info.value.__notes__)


def _zoned(tmp_path: Path, zone: str) -> Path:
    """A table of one datetime column whose stored ``time_zone`` is edited to ``zone``."""
    times = pd.to_datetime(["2020-01-01 13:00", None]).tz_localize("UTC")
    write_table(pd.DataFrame({"t": times}), tmp_path / "t")
    _edit(tmp_path / "t" / "t", cytepool_dtype={"type": "datetime", "time_zone": zone})
    return tmp_path / "t"


def test_a_stored_time_zone_that_is_empty_is_a_format_error(tmp_path: Path, backend: str) -> None:
    # it was an IndexError with pandas, and read as UTC or naive times with polars and pyarrow
    path = _zoned(tmp_path, "")
    match = r"t/t: time_zone in cytepool-dtype must name a zone .* found ''"
    with pytest.raises(FormatError, match=match) as info:
        read_table(path, backend=backend)  # type: ignore[arg-type]
    assert any(str(path) in note for note in info.value.__notes__)


@pytest.mark.parametrize("zone", ["+05:30", "-23:59", "+00:00"])
@pytest.mark.parametrize("backend", ["pandas", "pyarrow"])  # polars holds no fixed offsets
def test_the_fixed_offsets_write_table_writes_are_read(
    tmp_path: Path, backend: str, zone: str
) -> None:
    read = read_table(_zoned(tmp_path, zone), backend=backend)  # type: ignore[arg-type]
    stored = read["t"].dt.tz if backend == "pandas" else read.schema.field("t").type.tz
    assert str(stored).removeprefix("UTC") in (zone, "")  # pandas names +00:00 UTC


def test_a_nan_category_is_a_format_error(tmp_path: Path, backend: str) -> None:
    # polars and pyarrow read it, pandas raised its own ValueError
    path = _written(tmp_path)
    write_table(pd.DataFrame({"categories": [1.0, np.nan]}), tmp_path / "other")
    (path / "c" / "categories").rename(tmp_path / "old")
    (tmp_path / "other" / "categories").rename(path / "c" / "categories")
    match = r"c/categories: expected categories without missing values, found a missing value"
    with pytest.raises(FormatError, match=match) as info:
        read_table(path, backend=backend)  # type: ignore[arg-type]
    assert any(str(path) in note for note in info.value.__notes__)


def test_a_pyarrow_dictionary_of_nan_is_refused_when_written(tmp_path: Path) -> None:
    dictionary = pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int8()), [1.0, float("nan")])
    with pytest.raises(TypeError, match=r"column 'c': categories must be plain values .* NaN"):
        write_table(pa.table({"c": dictionary}), tmp_path / "t")
    assert list(tmp_path.iterdir()) == []
