"""Table digests computed from stored values (UTF-8 buffers, numbers) at read_cube.

They must equal :func:`cytepool.fingerprint.table_digest` of the frame read, for every backend,
and an edited table must still fail at ``read_cube``.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.errors import FormatError
from cytepool.fingerprint import table_digest
from cytepool.io import read_cube, read_table, write_cube, write_table
from cytepool.io._cube_tables import stored_digest
from cytepool.io.tables.frames import read_stored_table_at
from cytepool.io.zarr.store import LocalStore, StorePath, reading
from factories import BACKENDS, make_cube, string_values

pd = pytest.importorskip("pandas")
zarr = pytest.importorskip("zarr")

COVERED: dict[str, list[Any]] = {
    "donor": ["d1", None, "é✓", ""],
    "tissue": ["lung", "gut", "", "ü" * 40],
    "n": [1, -2, 3, 2**40],
    "u8": np.array([0, 255, 7, 1], dtype=np.uint8),
    "f32": np.array([1.5, np.nan, -0.0, 3.0], dtype=np.float32),
    "f64": [0.25, float("nan"), -0.0, 1e300],
    "flag": [True, False, True, False],
    # digested from their stored values too (issue 24): codes, masks, UTF-8, int64 times
    "category": pd.Categorical(["a", "b", None, "a"]),
    "ordered": pd.Categorical(["lo", "hi", "hi", "é"], categories=["lo", "hi", "é"], ordered=True),
    "no-categories": pd.Categorical([None] * 4, categories=pd.Index([], dtype=object)),
    "when": pd.to_datetime(["2020-01-01", None, "2021-06-01", "2022-01-01"]),
    "zoned": pd.to_datetime(
        ["2020-01-01 10:00", None, "2021-06-01 00:00", "2022-01-01 23:59"]
    ).tz_localize("Europe/Paris"),
    "ms": pd.to_datetime(["2020-01-01", "1960-01-01", None, "2022-01-01"]).as_unit("ms"),
    "took": pd.to_timedelta([1, None, -3, 4], unit="s"),
    "count": pd.array([1, None, 3, 4], dtype="Int64"),
    "small": pd.array([None, -2, 3, 4], dtype="Int8"),
    "unsigned": pd.array([1, None, 3, 2**40], dtype="UInt64"),
    "yes": pd.array([True, None, False, True], dtype="boolean"),
    "ratio": pd.array([0.5, None, -0.0, 2.0], dtype="Float64"),
}
NOT_COVERED: dict[str, Any] = {
    "numbers": pd.Categorical([1, 2, None, 1]),  # categories of numbers: polars has none
    "seconds": pd.to_datetime(["2020-01-01", None, "2021-06-01", "2022-01-01"]).as_unit("s"),
}


def _written(tmp_path: Path, columns: dict[str, Any]) -> Path:
    ids = pd.Index(["s1", "s2", "s3", "s4"], name="sample_id")
    write_table(pd.DataFrame(columns, index=ids), tmp_path / "samples")
    return tmp_path / "samples"


def _digested(path: Path, backend: str) -> tuple[Any, str | None]:
    with reading(LocalStore(path).open()) as handle:
        stored = read_stored_table_at(StorePath(handle), rows=4)
        return stored.frame(backend), stored_digest(stored)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", [None, *COVERED])
def test_stored_digest_is_the_frame_digest(tmp_path: Path, backend: str, name: str | None) -> None:
    path = _written(tmp_path, COVERED if name is None else {name: COVERED[name]})
    frame, digest = _digested(path, backend)
    assert digest is not None
    assert digest == table_digest(frame) == table_digest(read_table(path, backend=backend))


@pytest.mark.parametrize("name", NOT_COVERED)
def test_other_kinds_leave_the_digest_to_the_frame(tmp_path: Path, name: str) -> None:
    frame, digest = _digested(
        _written(tmp_path, {"donor": COVERED["donor"], name: NOT_COVERED[name]}), "pandas"
    )
    assert digest is None
    assert name in frame.columns


@pytest.mark.parametrize("backend", BACKENDS)
def test_read_cube_keeps_the_fingerprint(tmp_path: Path, backend: str) -> None:
    samples = {"donor": ["d1", None, "", "é"], "age": [30.5, float("nan"), -0.0, 1.0]}
    features = {"symbol": ["A", "é", "C", "", "E"]}
    ids = {"features": ["f1", "f22", "f3", "f444", "f5"]}  # samples, groups: one length
    cube = make_cube(ids=ids, samples=samples, features=features)
    write_cube(cube, tmp_path / "c.cube.zarr")
    read = read_cube(tmp_path / "c.cube.zarr", backend=backend)
    assert read.fingerprint == cube.fingerprint
    assert table_digest(read.samples) == table_digest(cube.samples)


@pytest.mark.parametrize(("column", "value"), [("donor", "d9"), ("n", 7), ("symbol", "Z")])
def test_an_edited_table_column_fails_at_read_cube(tmp_path: Path, column: str, value: Any) -> None:
    """Format 1.2: every column is read, and verified against its own digest, when the cube
    is opened (from its stored values: no frame is built then)."""
    samples = {"donor": ["d1", "d2", "d3", "d4"], "n": [1, 2, 3, 4]}
    cube = make_cube(samples=samples, features={"symbol": ["A", "B", "C", "D", "E"]})
    path = tmp_path / "c.cube.zarr"
    write_cube(cube, path)
    axis = "features" if column == "symbol" else "samples"
    array = zarr.open_array(string_values(path / axis / column), mode="r+")
    array[0] = value
    pattern = f"corrupt or was edited: {axis}: column '{column}' does not match its stored digest"
    with pytest.raises(FormatError, match=pattern):
        read_cube(path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_column_only_its_frame_digests_is_verified_when_the_frame_is_made(
    tmp_path: Path, backend: str
) -> None:
    """A column whose canonical form the stored values do not give (categories of numbers) is
    read at open, and verified against its digest when the frame is made; the others at open."""
    samples = {"numbers": NOT_COVERED["numbers"], "donor": ["d1", "d2", "d3", "d4"]}
    cube = make_cube(samples=samples)
    path = tmp_path / "c.cube.zarr"
    write_cube(cube, path)
    pd.testing.assert_frame_equal(read_cube(path).samples, cube.samples)
    codes = zarr.open_array(path / "samples" / "numbers" / "codes", mode="r+")
    codes[0] = 1  # category 2 for 1: a valid value, another table
    read = read_cube(path, backend=backend)
    assert read.fingerprint == cube.fingerprint  # from the stored digests
    pattern = "corrupt or was edited: samples: column 'numbers' does not match its stored digest"
    with pytest.raises(FormatError, match=pattern):
        _ = read.samples
    with pytest.raises(FormatError, match=pattern):  # asked again: refused again
        _ = read.samples


@pytest.mark.parametrize("axis", ["samples", "features"])
def test_edited_ids_fail_at_read_cube(tmp_path: Path, axis: str) -> None:
    cube = make_cube()
    path = tmp_path / "c.cube.zarr"
    write_cube(cube, path)
    column = {"samples": "sample_id", "features": "feature_id"}[axis]
    array = zarr.open_array(string_values(path / axis / column), mode="r+")
    array[1] = "edited"
    with pytest.raises(FormatError, match=f"{axis}: the ids \\('{column}'\\) do not match"):
        read_cube(path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_deferred_tables_know_their_schema_and_selections(tmp_path: Path, backend: str) -> None:
    from cytepool._assemble import parts_of
    from cytepool._table import AxisTable

    columns = {name: values for name, values in COVERED.items() if name not in ("u8", "f32")}
    cube = make_cube(samples=columns)
    write_cube(cube, tmp_path / "c.cube.zarr")
    read = read_cube(tmp_path / "c.cube.zarr", backend=backend)
    selected = read.select(samples=["s3", "s1"])
    known = {
        "read": parts_of(read).tables["samples"].schema(),
        "selected": parts_of(selected).tables["samples"].schema(),
    }
    for name, built in (("read", read), ("selected", selected)):
        frame = AxisTable.from_user(built.samples, "samples").frame
        assert known[name] == {str(n): str(d) for n, d in frame.schema.items()}
    assert selected.fingerprint == cube.select(samples=["s3", "s1"]).fingerprint
    assert AxisTable.from_user(selected.samples, "samples").ids == ["s3", "s1"]


def test_a_missing_backend_fails_at_read_cube(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_cube(make_cube(samples={"donor": ["a", "b", "c", "d"]}), tmp_path / "c.cube.zarr")
    monkeypatch.setitem(sys.modules, "polars", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"needs the package 'polars'.*pip install polars"):
        read_cube(tmp_path / "c.cube.zarr", backend="polars")


def test_a_string_column_only_verified_at_open_is_hashed_as_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Format 1.2 hashes a string column's items as a vlen-utf8 chunk holds them, so opening a
    cube verifies a column other than the ids without parsing or joining it: that waits for
    its frame. Ids of several lengths are parsed (their lookup needs the lengths), ids of one
    length not even that (their length fields are checked in place); none are joined
    (ASCII)."""
    from cytepool.io.zarr import _vlen

    calls: list[tuple[str, str]] = []
    for name in ("_Parsing", "_Joining"):
        kind = getattr(_vlen, name)

        def counted(self: Any, *args: Any, _call: Any = kind.__call__, _name: str = name) -> Any:
            calls.append((_name, self.where.split(".cube.zarr/")[1]))
            return _call(self, *args)

        monkeypatch.setattr(kind, "__call__", counted)
    samples = {"donor": ["d1", None, "é", "d4"]}
    features = {"symbol": ["A", "é", "C", "", "E"]}
    ids = {"features": ["f1", "f22", "f3", "f444", "f5"]}  # samples, groups: one length
    cube = make_cube(ids=ids, samples=samples, features=features)
    path = tmp_path / "c.cube.zarr"
    write_cube(cube, path)
    calls.clear()
    read = read_cube(path)

    def chunk(column: str) -> str:  # values/ of a nullable string column (pandas 3), or not
        return string_values(path / column).relative_to(path).as_posix() + "/c/0"

    # parsed: the ids of several lengths and a column missing a value (its item must be empty)
    parsed = [chunk("features/feature_id"), chunk("samples/donor")]
    assert sorted(calls) == sorted(("_Parsing", where) for where in parsed)
    calls.clear()
    pd.testing.assert_frame_equal(read.features, cube.features)
    ids, symbol = chunk("features/feature_id"), chunk("features/symbol")
    assert sorted(calls) == [("_Joining", ids), ("_Joining", symbol), ("_Parsing", symbol)]


def test_a_wrong_item_count_in_a_string_chunk_fails_at_read_cube(tmp_path: Path) -> None:
    """The one field of a vlen-utf8 chunk its column digest does not cover is checked at open."""
    cube = make_cube(features={"symbol": ["A", "B", "C", "D", "E"]})
    path = tmp_path / "c.cube.zarr"
    write_cube(cube, path, compression=None)
    chunk = string_values(path / "features" / "symbol") / "c" / "0"
    data = bytearray(chunk.read_bytes())
    data[0] += 1
    chunk.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"symbol/.*c/0: the vlen-utf8 data holds 6 items, expe"):
        read_cube(path)


def test_int8_codes_of_the_last_of_128_categories_read_at_open(tmp_path: Path) -> None:
    """Codes of int8 address 128 categories (another writer's choice; pandas takes int16
    there): code 127's category is found, one past it not wrapped to -128."""
    labels = [f"c{i}" for i in range(128)]  # of several lengths: measured, not spaced evenly
    label = pd.Categorical([labels[127], labels[0], labels[127], labels[5]], categories=labels)
    cube = make_cube(samples={"label": label})
    path = tmp_path / "c.cube.zarr"
    write_cube(cube, path)
    stored = zarr.open_array(path / "samples" / "label" / "codes", mode="r")
    attributes, codes = dict(stored.attrs), stored[:].astype(np.int8)
    zarr.create_array(
        path / "samples" / "label" / "codes", data=codes, attributes=attributes, overwrite=True
    )
    with warnings.catch_warnings():  # consolidated metadata: not in the v3 specification
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(path)
    read = read_cube(path)
    assert read.fingerprint == cube.fingerprint
    pd.testing.assert_frame_equal(read.samples, cube.samples)
