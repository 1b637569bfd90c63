"""The Cube model: construction checks, reading, select, sums, provenance, building from parts."""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from typing import Any

import numpy as np
import pandas as pd
import pytest

import cytepool
from cytepool import Cube, Normalization, Provenance
from cytepool._assemble import from_parts, parts_of, provenance_record, with_provenance
from cytepool.errors import ConstraintError, FormatError, InputError
from cytepool.fingerprint import Digests
from cytepool.layers import LazyLayer
from factories import counts, frame, make_cube

pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")

GROUPS = ["B", "T", "NK"]
SAMPLES = ["s1", "s2", "s3", "s4"]
FEATURES = ["CD3E", "CD19", "MS4A1", "NKG7", "GNLY"]


def ids_of(table: Any, column: str) -> list[str]:
    """The ids of a table the cube returned, whatever its backend."""
    if isinstance(table, pd.DataFrame):
        assert table.index.name == column
        return list(table.index)
    names = table.column_names if isinstance(table, pa.Table) else table.columns
    assert names[0] == column
    column_values = table[column]
    items = column_values.to_pylist() if isinstance(table, pa.Table) else column_values.to_list()
    return [str(v) for v in items]


def counts_array(dtype: str = "int64") -> np.ndarray[Any, Any]:
    return counts(dtype=dtype)


PBMC: dict[str, Any] = {
    "ids": {"groups": GROUPS, "samples": SAMPLES, "features": FEATURES},
    "samples": {"donor": ["d1", "d2", "d1", "d2"], "batch": [1, 1, 2, 2]},
    "groups": {"lineage": ["lymph", "lymph", "lymph"]},
    "features": {"symbol": [f.lower() for f in FEATURES]},
    "cells": np.full((3, 4), 7),
}
"""The ids, covariates and cells of most cubes here."""


def pbmc_cube(backend: str = "pandas", *, layers: Any = None, **kwargs: Any) -> Cube:
    """:func:`factories.make_cube` with :data:`PBMC`, overridden by ``kwargs``."""
    return make_cube(layers, backend=backend, **{**PBMC, **kwargs})


class CountingArray:
    """An array that records every read (to prove nothing is read)."""

    def __init__(self, data: np.ndarray[Any, Any]):
        self.data = data
        self.shape = data.shape
        self.dtype = data.dtype
        self.reads: list[Any] = []

    def __getitem__(self, key: Any) -> Any:
        self.reads.append(key)
        return self.data[key]

    @property
    def oindex(self) -> Any:
        outer = self

        class _O:
            def __getitem__(self, key: Any) -> Any:
                outer.reads.append(key)
                g, s, f = key
                block = outer.data[g]
                return block[s][:, f]

        return _O()


# --------------------------------------------------------------------------- construction


def test_cube_basics(backend: str) -> None:
    cube = pbmc_cube(backend)
    assert cube.shape == (3, 4, 5)
    assert ids_of(cube.samples, "sample_id") == SAMPLES
    assert ids_of(cube.groups, "group_id") == GROUPS
    assert ids_of(cube.features, "feature_id") == FEATURES
    native = {"pandas": pd.DataFrame, "polars": pl.DataFrame, "pyarrow": pa.Table}[backend]
    assert isinstance(cube.samples, native)
    assert cube.cells.dtype == np.int64
    assert cube.normalization is None
    assert cube.metadata == {}
    assert [p.operation for p in cube.provenance] == ["Cube"]
    np.testing.assert_array_equal(cube.to_numpy("counts"), counts_array())


def test_pandas_ids_in_index_or_column() -> None:
    cube = pbmc_cube()
    indexed = pd.DataFrame({"donor": ["d1", "d2", "d1", "d2"], "batch": [1, 1, 2, 2]})
    indexed.index = pd.Index(SAMPLES, name="sample_id")
    other = pbmc_cube(samples=indexed)
    assert other.fingerprint == cube.fingerprint
    pd.testing.assert_frame_equal(other.samples, cube.samples)
    # a column in the middle comes first; an unnamed index is dropped
    moved = pd.DataFrame(
        {"donor": ["d1", "d2", "d1", "d2"], "sample_id": SAMPLES, "batch": [1, 1, 2, 2]},
        index=[9, 8, 7, 6],
    )
    assert pbmc_cube(samples=moved).fingerprint == cube.fingerprint


def test_tables_are_copies() -> None:
    samples = pd.DataFrame({"sample_id": SAMPLES, "donor": ["d1", "d2", "d1", "d2"]})
    cube = pbmc_cube(samples=samples)
    samples.loc[0, "donor"] = "changed"
    out = cube.samples
    out.loc["s1", "donor"] = "changed again"
    assert cube.samples.loc["s1", "donor"] == "d1"


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"samples": {"sample_id": SAMPLES}}, TypeError, "samples: expected a table"),
        ({"groups": "B,T,NK"}, TypeError, "groups: expected a table"),
    ],
)
def test_tables_must_be_frames(change: dict[str, Any], error: type, match: str) -> None:
    tables = {a: frame("pandas", {f"{a[:-1]}_id": ids}) for a, ids in PBMC["ids"].items()}
    with pytest.raises(error, match=match):
        Cube({"counts": counts_array()}, **{**tables, **change}, cells=PBMC["cells"])


def test_table_errors(backend: str) -> None:
    with pytest.raises(ValueError, match="samples: expected an id column 'sample_id'"):
        pbmc_cube(backend, samples=frame(backend, {"id": SAMPLES}))
    with pytest.raises(TypeError, match="groups: the ids in 'group_id' must be strings"):
        pbmc_cube(backend, groups=frame(backend, {"group_id": [1, 2, 3]}))
    with pytest.raises(
        ValueError, match=r"features: 1 ids in 'feature_id' are missing \(rows \[2\]"
    ):
        pbmc_cube(backend, features=frame(backend, {"feature_id": ["a", "b", None, "d", "e"]}))
    with pytest.raises(ValueError, match=r"samples: the ids must be unique; .* \['s1'\]"):
        pbmc_cube(backend, samples=frame(backend, {"sample_id": ["s1", "s2", "s1", "s4"]}))
    with pytest.raises(ValueError, match=r"cells: expected shape .* = \(3, 3\), found \(3, 4\)"):
        pbmc_cube(backend, samples=frame(backend, {"sample_id": ["s1", "s2", "s3"]}))


def test_table_column_types(backend: str) -> None:
    nested = {"feature_id": FEATURES, "x": [[1], [2], [3], [4], [5]]}
    if backend == "pandas":
        with pytest.raises(TypeError, match="column 'x'"):
            pbmc_cube(backend, features=frame(backend, nested))
    else:
        with pytest.raises(TypeError, match=r"table column 'x': data type List"):
            pbmc_cube(backend, features=frame(backend, nested))


@pytest.mark.parametrize(
    ("column", "error", "match"),
    [
        ({"_index": [1, 2, 3, 4]}, ValueError, r"samples: '_index' is a reserved name"),
        ({"a/b": [1, 2, 3, 4]}, ValueError, r"samples: column name 'a/b' cannot name a Zarr"),
        ({"__x": [1, 2, 3, 4]}, ValueError, r"column name '__x' cannot name a Zarr node"),
        (
            {"h": pa.array(np.ones(4, np.float16), mask=np.array([0, 1, 0, 0], bool))},
            TypeError,
            r"samples: column 'h': floats with missing values must be float32 or float64",
        ),
    ],
)
def test_a_table_no_cube_file_can_hold_is_refused(column: Any, error: type, match: str) -> None:
    """Cube() took them, and write_cube refused the cube: every cube can be written."""
    with pytest.raises(error, match=match):
        make_cube(backend="pyarrow", samples=column)


def test_pandas_table_errors() -> None:
    named = pd.DataFrame({"donor": ["a", "b", "c", "d"]}, index=pd.Index(SAMPLES, name="x"))
    with pytest.raises(ValueError, match="samples: the index is named 'x'"):
        pbmc_cube(samples=named)
    both = pd.DataFrame({"sample_id": SAMPLES}, index=pd.Index(SAMPLES, name="sample_id"))
    with pytest.raises(ValueError, match="both the index and a column are named 'sample_id'"):
        pbmc_cube(samples=both)
    multi = pd.DataFrame(
        {"v": [1, 2, 3, 4]}, index=pd.MultiIndex.from_tuples([(s, 1) for s in SAMPLES])
    )
    with pytest.raises(ValueError, match="MultiIndex"):
        pbmc_cube(samples=multi)
    dup = pd.DataFrame([[s, 1, 2] for s in SAMPLES], columns=["sample_id", "a", "a"])
    with pytest.raises(ValueError, match=r"samples: .*unique column names"):
        pbmc_cube(samples=dup)
    with pytest.raises(TypeError, match="column names must be strings"):
        pbmc_cube(samples=pd.DataFrame({"sample_id": SAMPLES, 3: [1, 2, 3, 4]}))
    mixed = pd.DataFrame({"sample_id": SAMPLES, "m": [1, "a", 2.5, None]})
    with pytest.raises(TypeError, match=r"table column 'm'.*Object holding"):
        pbmc_cube(samples=mixed)


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint16", "float16", "bool", "complex64"])
def test_layer_dtypes_rejected(dtype: str) -> None:
    with pytest.raises(TypeError, match=r"layer 'counts': expected a data type among int32"):
        pbmc_cube(layers={"counts": counts_array().astype(dtype)})


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint32", "uint64", "float32", "float64"])
def test_layer_dtypes_accepted(dtype: str) -> None:
    cube = pbmc_cube(layers={"counts": counts_array(dtype)})
    assert cube.layers["counts"].dtype == np.dtype(dtype)
    assert cube.profiles("T").dtype == np.dtype(dtype)


def test_layer_byte_order_and_layout() -> None:
    swapped = counts_array("int32").astype(">i4")
    cube = pbmc_cube(layers={"counts": swapped})
    assert cube.layers["counts"].dtype == np.dtype("int32")
    fortran = pbmc_cube(layers={"counts": np.asfortranarray(counts_array("int32"))})
    assert cube.fingerprint == fortran.fingerprint


def test_layer_errors() -> None:
    with pytest.raises(TypeError, match="layers: expected a mapping"):
        pbmc_cube(layers=[counts_array()])
    with pytest.raises(TypeError, match="layers: names must be strings"):
        pbmc_cube(layers={1: counts_array()})
    for bad in ["", "a/b", ".."]:
        with pytest.raises(ValueError, match="is not a valid layer name"):
            pbmc_cube(layers={bad: counts_array()})
    with pytest.raises(ValueError, match=r"layer 'counts': expected shape .* found \(3, 5, 4\)"):
        pbmc_cube(layers={"counts": np.zeros((3, 5, 4), dtype="int32")})
    with pytest.raises(ValueError, match="layer 'counts': expected shape"):
        pbmc_cube(layers={"counts": np.zeros((3, 4), dtype="int32")})


@pytest.mark.parametrize("column", ["sample_id", "donor"])
@pytest.mark.parametrize("dtype", ["object", "string[python]"])
def test_a_string_that_is_not_unicode_is_an_error_naming_it(column: str, dtype: str) -> None:
    samples = pd.DataFrame({"sample_id": SAMPLES, "donor": list("abcd")}, dtype=dtype)
    samples.loc[3, column] = "x\udcff"  # as os.fsdecode makes of a name that is not UTF-8
    with pytest.raises(
        ValueError,
        match=rf"^samples: column '{column}': row 3 holds 'x\\udcff', which is not valid "
        r"Unicode \(it holds a lone surrogate\); expected valid Unicode strings",
    ):
        pbmc_cube(samples=samples)


def test_categories_that_are_not_unicode_are_an_error_naming_the_column() -> None:
    """pandas 2 hashes a categorical's categories when the table's types are read, which raised
    a bare UnicodeEncodeError; pandas 3 meets the string when the column is digested."""
    samples = pd.DataFrame({"sample_id": SAMPLES})
    samples["file"] = pd.Categorical(pd.Index(["a", "b", "c", "x\udcff"], dtype=object))
    with pytest.raises(InputError, match=r"^samples: column 'file'.* lone surrogate"):
        pbmc_cube(samples=samples)


def test_ragged_lists_are_an_error_naming_the_argument() -> None:
    ragged = r"expected an array \(nested lists of equal lengths\), found nested sequences of "
    ragged += "different lengths"
    with pytest.raises(ValueError, match=f"^cells: {ragged}"):
        pbmc_cube(cells=[[1] * 5, [1] * 5, [1] * 4])
    layer = counts_array().tolist()
    layer[2][1] = layer[2][1][:3]
    with pytest.raises(ValueError, match=f"^layer 'counts': {ragged}"):
        pbmc_cube(layers={"counts": layer})


def test_masked_arrays_are_refused() -> None:
    mask = np.zeros((3, 5, 4), dtype=bool)
    mask[1, 2, 3] = True
    masked = np.ma.masked_array(counts_array(), mask=mask)
    hint = r"expected an array without a mask, found a numpy masked array \(1 value masked\); "
    hint += r"fill the masked values \(.filled\(value\)\) or drop them first"
    with pytest.raises(TypeError, match=f"layer 'counts': {hint}"):
        pbmc_cube(layers={"counts": masked})
    cells = np.ma.masked_array(np.ones((3, 5), dtype=np.int64), mask=mask[:, :, 3])
    with pytest.raises(TypeError, match=f"cells: {hint}"):
        pbmc_cube(cells=cells)
    with pytest.raises(TypeError, match=f"normalization: factors: {hint}"):
        Normalization("size_factors", cells)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (-1, "is negative"),
        (np.nan, "is not finite"),
        (np.inf, "is not finite"),
        (-np.inf, "is not finite"),
    ],
)
def test_layer_value_errors(value: float, match: str) -> None:
    counts = counts_array("float64")
    counts[1, 2, 3] = value
    pattern = rf"layer 'counts', group 'T', sample 's3': value .* at feature 'NKG7' {match}"
    with pytest.raises(ConstraintError, match=pattern):
        pbmc_cube(layers={"counts": counts})
    with pytest.raises(ValueError, match=pattern):
        pbmc_cube(layers={"counts": counts})


def test_layer_negative_integer() -> None:
    counts = counts_array("int32")
    counts[2, 0, 0] = -5
    with pytest.raises(ConstraintError, match="layer 'counts', group 'NK', sample 's1': value -5"):
        pbmc_cube(layers={"counts": counts})


def test_empty_profiles_must_hold_zeros() -> None:
    cells = np.full((3, 4), 7)
    cells[0, 1] = 0
    with pytest.raises(
        ConstraintError, match="layer 'counts', group 'B', sample 's2': the profile pools 0 cells"
    ):
        pbmc_cube(cells=cells)
    counts = counts_array()
    counts[0, 1] = 0
    assert pbmc_cube(cells=cells, layers={"counts": counts}).cells[0, 1] == 0


def test_cells_errors() -> None:
    with pytest.raises(TypeError, match="cells: expected integers, found data type float64"):
        pbmc_cube(cells=np.full((3, 4), 7.0))
    with pytest.raises(ValueError, match=r"cells: expected shape \(n_groups, n_samples\)"):
        pbmc_cube(cells=np.full((4, 3), 7))
    cells = np.full((3, 4), 7)
    cells[2, 3] = -1
    with pytest.raises(ConstraintError, match="cells: group 'NK', sample 's4': -1 cells"):
        pbmc_cube(cells=cells)
    huge = np.full((3, 4), 2**63, dtype=np.uint64)
    with pytest.raises(ValueError, match="does not fit int64"):
        pbmc_cube(cells=huge)
    assert pbmc_cube(cells=np.full((3, 4), 7, dtype=np.uint8)).cells.dtype == np.int64


def test_normalization() -> None:
    factors = np.linspace(0.5, 2, 12).reshape(3, 4)
    n = Normalization("size_factors", factors)
    cube = pbmc_cube(normalization=n)
    assert cube.normalization == n
    assert not cube.normalization.factors.flags.writeable
    assert n != Normalization("cpm", factors)
    assert n != "size_factors"
    assert hash(n) == hash(Normalization("size_factors", factors.copy()))
    assert "size_factors" in repr(n)
    with pytest.raises(TypeError, match="normalization: expected a Normalization or None"):
        pbmc_cube(normalization=factors)
    with pytest.raises(ValueError, match=r"normalization: expected factors of shape .* \(3, 4\)"):
        pbmc_cube(normalization=Normalization("x", np.ones((4, 3))))


@pytest.mark.parametrize(
    ("method", "factors", "error", "match"),
    [
        (3, np.ones((1, 1)), TypeError, "method must be a string"),
        ("", np.ones((1, 1)), ValueError, "method must not be empty"),
        ("m", np.ones(3), ValueError, "factors must be 2-D"),
        ("m", np.array([["a"]]), TypeError, "factors must be real numbers"),
        ("m", np.array([[1.0, 0.0]]), ValueError, r"factor 0.0 at group #0, sample #1"),
        ("m", np.array([[-1.0]]), ValueError, "not positive and finite"),
        ("m", np.array([[np.nan]]), ValueError, "not positive and finite"),
        ("m", np.array([[np.inf]]), ValueError, "not positive and finite"),
        (
            "m",
            [[1.0, 2.0], [1.0]],
            ValueError,
            r"^normalization: factors: expected an array \(nested lists of equal lengths\), "
            "found nested sequences of different lengths",
        ),
    ],
)
def test_normalization_errors(method: Any, factors: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Normalization(method, factors)


def test_metadata() -> None:
    meta = {"study": "x", "n": [1, 2]}
    cube = pbmc_cube(metadata=meta)
    meta["study"] = "changed"
    assert cube.metadata == {"study": "x", "n": [1, 2]}
    cube.metadata["n"].append(3)
    assert cube.metadata["n"] == [1, 2]
    assert cube.fingerprint == pbmc_cube().fingerprint  # metadata is not content
    with pytest.raises(TypeError, match="metadata: expected a mapping"):
        pbmc_cube(metadata=[1])
    with pytest.raises(TypeError, match="metadata: keys must be strings"):
        pbmc_cube(metadata={1: 2})
    # nested keys too: JSON made them strings silently, {1: "x", "1": "y"} became {"1": "y"}
    match = r"metadata: keys must be strings, found 1 \(int\) at metadata\['a'\]\[0\]\[1\]"
    with pytest.raises(TypeError, match=match):
        pbmc_cube(metadata={"a": [{1: "x", "1": "y"}]})
    with pytest.raises(TypeError, match="metadata: expected JSON-serialisable"):
        pbmc_cube(metadata={"a": {1, 2}})
    with pytest.raises(ValueError, match="metadata: expected JSON-serialisable"):
        pbmc_cube(metadata={"a": float("nan")})


def test_metadata_nested_deeply() -> None:
    """Python 3.11's JSON encoder cannot write metadata nested 3,000 deep: a bare
    RecursionError, now InputError; later Pythons keep it whole."""
    deep: list[Any] = []
    for _ in range(3000):
        deep = [deep]
    if sys.version_info < (3, 12):
        with pytest.raises(InputError, match="metadata: nested too deeply to be written as JSON"):
            pbmc_cube(metadata={"a": deep})
        return
    assert pbmc_cube(metadata={"a": deep}).metadata == {"a": deep}


# --------------------------------------------------------------------------- reading


def test_reading(backend: str) -> None:
    cube = pbmc_cube(backend)
    counts = counts_array()
    np.testing.assert_array_equal(cube.profiles("T"), counts[1])
    np.testing.assert_array_equal(cube.profiles(2), counts[2])
    np.testing.assert_array_equal(cube.profiles(-1), counts[2])
    np.testing.assert_array_equal(cube.profiles(np.int64(0)), counts[0])
    with pytest.raises(KeyError, match=r"groups: unknown ids \['X'\]"):
        cube.profiles("X")
    with pytest.raises(IndexError, match="group position 3 is out of range for 3 groups"):
        cube.profiles(3)
    with pytest.raises(TypeError, match="group: expected an id"):
        cube.profiles(True)
    with pytest.raises(KeyError, match=r"no layer 'umis'; the cube has layers \['counts'\]"):
        cube.profiles("T", layer="umis")
    with pytest.raises(KeyError, match="no layer"):
        cube.to_numpy("umis")


def test_read_only() -> None:
    cube = pbmc_cube()
    with pytest.raises(TypeError):
        cube.layers["other"] = counts_array()  # type: ignore[index]
    with pytest.raises(ValueError, match="read-only"):
        cube.layers["counts"][0, 0, 0] = 1
    with pytest.raises(ValueError, match="read-only"):
        cube.cells[0, 0] = 1
    with pytest.raises(ValueError, match="read-only"):
        cube.to_numpy("counts")[0, 0, 0] = 1
    with pytest.raises(AttributeError):
        cube.shape = (1, 1, 1)  # type: ignore[misc]


def test_repr() -> None:
    cube = pbmc_cube(normalization=Normalization("cpm", np.ones((3, 4))))
    assert repr(cube) == (
        "<Cube 3 groups x 4 samples x 5 features; layers: counts int64 (memory); "
        "normalization: cpm>"
    )
    lazy = cube.select(groups=["T"])
    assert "counts int64 (lazy)" in repr(lazy)
    assert "layers: none" in repr(pbmc_cube(layers={}))


def test_lazy_array_layers_checked_when_read() -> None:
    counts = counts_array()
    counts[1, 3, 4] = -2
    array = CountingArray(counts)
    cube = pbmc_cube(layers={"counts": array})
    assert array.reads == []
    assert cube.layers["counts"] is array
    np.testing.assert_array_equal(cube.profiles("B"), counts[0])
    with pytest.raises(ConstraintError, match="layer 'counts', group 'T', sample 's4': value -2"):
        cube.profiles("T")
    with pytest.raises(ConstraintError, match="group 'T'"):
        parts_of(cube).read("counts", 1, samples=[3], features=[4])
    np.testing.assert_array_equal(
        parts_of(cube).read("counts", 1, samples=[0], features=[4]), [[counts[1, 0, 4]]]
    )


def test_lazy_zero_cells_checked_when_read() -> None:
    cells = np.full((3, 4), 7)
    cells[2, 0] = 0
    counts = counts_array()
    counts[2, 0, 0] = 5
    counts[2, 0, 1:] = 0
    cube = pbmc_cube(layers={"counts": CountingArray(counts)}, cells=cells)
    with pytest.raises(ConstraintError, match="group 'NK', sample 's1': the profile pools 0 cells"):
        cube.profiles("NK")
    np.testing.assert_array_equal(
        parts_of(cube).read("counts", 2, features=[2, 3]), counts[2][:, [2, 3]]
    )


def test_lazy_layer_in_new_cube_checked_against_new_cells() -> None:
    base = pbmc_cube()
    lazy = base.select(groups=["T"]).layers["counts"]
    assert isinstance(lazy, LazyLayer)
    cells = np.full((1, 4), 3)
    cells[0, 2] = 0
    cube = Cube(
        {"counts": lazy},
        samples=pd.DataFrame({"sample_id": SAMPLES}),
        groups=pd.DataFrame({"group_id": ["T"]}),
        features=pd.DataFrame({"feature_id": FEATURES}),
        cells=cells,
    )
    with pytest.raises(ConstraintError, match="group 'T', sample 's3': the profile pools 0 cells"):
        cube.profiles("T")


# --------------------------------------------------------------------------- select


def test_select(backend: str) -> None:
    cube = pbmc_cube(backend, normalization=Normalization("n", np.arange(1, 13).reshape(3, 4)))
    sub = cube.select(samples=["s3", "s1"], groups="T", features=[4, 0])
    assert sub.shape == (1, 2, 2)
    assert ids_of(sub.samples, "sample_id") == ["s3", "s1"]
    assert ids_of(sub.groups, "group_id") == ["T"]
    assert ids_of(sub.features, "feature_id") == ["GNLY", "CD3E"]
    np.testing.assert_array_equal(sub.profiles("T"), counts_array()[1][np.ix_([2, 0], [4, 0])])
    np.testing.assert_array_equal(sub.cells, [[7, 7]])
    assert sub.normalization is not None
    np.testing.assert_array_equal(sub.normalization.factors, [[7.0, 5.0]])
    mask = sub.select(features=np.array([False, True]))
    assert ids_of(mask.features, "feature_id") == ["CD3E"]
    native = {"pandas": pd.DataFrame, "polars": pl.DataFrame, "pyarrow": pa.Table}[backend]
    assert isinstance(sub.samples, native)


def test_select_variants() -> None:
    cube = pbmc_cube()
    assert cube.select().fingerprint == cube.fingerprint
    assert cube.select(groups=slice(0, 2)).shape == (2, 4, 5)
    assert cube.select(groups=1).shape == (1, 4, 5)
    assert cube.select(groups=[]).shape == (0, 4, 5)
    assert cube.select(samples=pd.Series(["s2"])).shape == (3, 1, 5)
    assert cube.select(samples=np.array(["s2", "s4"])).shape == (3, 2, 5)
    assert cube.select(samples=[-1]).shape == (3, 1, 5)


def test_select_errors() -> None:
    cube = pbmc_cube()
    with pytest.raises(KeyError, match=r"samples: unknown ids \['x', 'y'\]"):
        cube.select(samples=["s1", "x", "y"])
    with pytest.raises(KeyError, match=r"features: unknown ids \['nope'\]"):
        cube.select(features="nope")
    with pytest.raises(ValueError, match=r"groups: the ids must be unique; it selects \['T'\]"):
        cube.select(groups=["T", "T"])
    with pytest.raises(IndexError, match="samples: position 4 is out of range for length 4"):
        cube.select(samples=[4])
    with pytest.raises(IndexError, match="a boolean mask needs 4 values, found 2"):
        cube.select(samples=[True, False])
    with pytest.raises(TypeError, match="expected ids"):
        cube.select(samples=[1.5])
    with pytest.raises(TypeError, match="expected ids"):
        cube.select(samples=["s1", 2])
    with pytest.raises(TypeError, match="expected ids, positions or a mask"):
        cube.select(samples=[[0]])


@pytest.mark.parametrize("kind", ["array", "chunked"])
def test_select_and_merge_groups_take_pyarrow_ids(kind: str) -> None:
    """A pyarrow Array or ChunkedArray of ids was refused ("found object values") by select,
    and merge_groups named its items unknown ids (pyarrow scalars)."""
    make = {"array": pa.array, "chunked": lambda v: pa.chunked_array([v[:1], v[1:]])}[kind]
    cube = pbmc_cube("pyarrow")
    sub = cube.select(samples=make(["s3", "s1"]), features=make([4, 0]))
    assert ids_of(sub.samples, "sample_id") == ["s3", "s1"]
    assert ids_of(sub.features, "feature_id") == ["GNLY", "CD3E"]
    assert cube.select(features=cube.features["feature_id"]).fingerprint == cube.fingerprint
    merged = cube.merge_groups({"L": make(["NK", "B"])})
    assert merged.fingerprint == cube.merge_groups({"L": ["NK", "B"]}).fingerprint


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        ({"s1", "s2"}, "found a set, which has no order; give a list"),
        ({"s1": 1}.keys(), "found a dict_keys, which has no order; give a list"),
        ({"s1": 1}, "found a dict, which has no order; give a list"),
        (["s1", 0], r"found ids \(strings\) mixed with 0 \(int\); give every id as a string"),
        ([0, "s1"], r"found ids \(strings\) mixed with 0 \(int\)"),
    ],
)
def test_select_says_what_is_wrong_with_a_selection(selection: Any, message: str) -> None:
    """A set or dict keys said "found shape ()", and ids mixed with an integer "found <U21
    values"."""
    with pytest.raises(TypeError, match=rf"^samples: expected ids.*{message}"):
        pbmc_cube().select(samples=selection)


@pytest.mark.parametrize(
    ("selection", "at"),
    [
        (pa.array(["s1", None]), 1),
        ([None], 0),
        (["s1", np.nan], 1),
        (pd.array([True, None, False, True], dtype="boolean"), 1),
        (pd.Series([True, False, None, True], dtype="boolean"), 2),
        (pl.Series([True, None, False, True]), 1),
        (pa.array([None, True, False, True]), 0),
        (pl.Series([1, None]), 1),
        (pd.array([1, None], dtype="Int64"), 1),
        (np.array([1.0, np.nan]), 1),
    ],
)
def test_a_selection_holding_a_missing_value_says_where(selection: Any, at: int) -> None:
    """A mask with a null said "expected ids, positions or a boolean mask, found True"."""
    with pytest.raises(
        TypeError,
        match=rf"^samples: the selection holds a missing value \(null/NA\) at position {at}; "
        "expected ids, positions or a boolean mask without missing values",
    ):
        pbmc_cube().select(samples=selection)


@pytest.mark.parametrize("selection", [[1, True, 0], [np.True_, 2], (0, False)])
def test_a_selection_mixing_booleans_and_integers_is_refused(selection: Any) -> None:
    """[1, True, 0] was taken as positions [1, 1, 0] and said "it selects ['s2'] more than
    once"."""
    with pytest.raises(
        TypeError,
        match=r"^samples: expected positions \(integers\) or a boolean mask, found "
        r"integers mixed with booleans \((np\.)?(True|False)_? at position \d\); give either",
    ):
        pbmc_cube().select(samples=selection)


def test_select_reads_nothing() -> None:
    array = CountingArray(counts_array())
    cube = pbmc_cube(layers={"counts": array})
    sub = cube.select(samples=["s2"], groups=["NK"], features=["GNLY", "CD19"])
    again = sub.select(features=["CD19"])
    assert array.reads == []
    assert [p.operation for p in again.provenance] == ["Cube", "select", "select"]
    assert again.provenance[1].inputs == (None,)  # not known without reading
    np.testing.assert_array_equal(again.profiles(0), [[counts_array()[2, 1, 1]]])
    assert len(array.reads) == 1
    g, s, f = array.reads[0]
    assert g == 2
    assert s == slice(1, 2)
    assert f == slice(1, 2)


# --------------------------------------------------------------------------- sums


def test_merge_groups(backend: str) -> None:
    cube = pbmc_cube(backend)
    merged = cube.merge_groups({"lymphoid": ["NK", "B"]})
    assert ids_of(merged.groups, "group_id") == ["lymphoid", "T"]
    counts = counts_array()
    np.testing.assert_array_equal(merged.profiles("lymphoid"), counts[0] + counts[2])
    np.testing.assert_array_equal(merged.profiles("T"), counts[1])
    np.testing.assert_array_equal(merged.cells, [[14] * 4, [7] * 4])
    assert merged.normalization is None
    assert "lineage" in (
        list(merged.groups.columns)
        if backend == "pandas"
        else list(merged.groups.columns if backend == "polars" else merged.groups.column_names)
    )
    assert merged.provenance[-1].parameters == {"groups": {"lymphoid": ["NK", "B"]}}


def test_nan_among_the_categories_of_a_pyarrow_column_is_an_input_error() -> None:
    """A cube file (and anndata) holds no NaN category: refused when the cube is made, not
    first when it is written."""
    pa = pytest.importorskip("pyarrow")
    nan = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), [1.5, float("nan")])
    groups = pa.table({"group_id": GROUPS, "score": nan})
    with pytest.raises(InputError, match=r"^groups: column 'score': its categories hold NaN"):
        pbmc_cube(groups=groups)


def test_a_merged_group_id_that_is_not_unicode_is_an_input_error(backend: str) -> None:
    """Checked before the table's backend meets it (pandas 3, polars and pyarrow raised a bare
    UnicodeEncodeError naming nothing)."""
    with pytest.raises(InputError, match=r"^groups: column 'group_id': row 0 holds 'T\\udcff'"):
        pbmc_cube(backend).merge_groups({"T\udcff": ["NK", "B"]})


def test_merge_groups_may_take_the_id_of_a_member() -> None:
    counts = counts_array()
    merged = pbmc_cube().merge_groups({"NK": ["T", "NK"]})
    assert ids_of(merged.groups, "group_id") == ["B", "NK"]
    np.testing.assert_array_equal(merged.profiles("NK"), counts[1] + counts[2])


def test_merge_groups_drops_varying_covariates() -> None:
    groups = pd.DataFrame({"group_id": GROUPS, "lineage": ["b", "t", "nk"], "kind": ["x"] * 3})
    merged = pbmc_cube(groups=groups).merge_groups({"L": ["B", "NK"]})
    assert list(merged.groups.columns) == ["kind"]
    kept = pbmc_cube(groups=groups).merge_groups({"L": ["B"]})
    assert list(kept.groups.columns) == ["lineage", "kind"]


def test_merge_groups_errors() -> None:
    cube = pbmc_cube()
    with pytest.raises(KeyError, match=r"groups: unknown ids \['X'\]"):
        cube.merge_groups({"L": ["B", "X"]})
    with pytest.raises(ValueError, match="'L' merges no groups"):
        cube.merge_groups({"L": []})
    with pytest.raises(ValueError, match=r"group 'B' is merged twice \(into 'L' and 'M'\)"):
        cube.merge_groups({"L": ["B", "T"], "M": ["B"]})
    with pytest.raises(ValueError, match="group 'B' is listed twice in the members of 'L'"):
        cube.merge_groups({"L": ["B", "T", "B"]})  # said "merged twice (into 'L' and 'L')"
    for new, merged in [("T", ["B", "NK"]), ("B", ["T", "NK"])]:  # kept after, and before
        with pytest.raises(ValueError, match=rf"the new ids \['{new}'\] are ids of groups that"):
            cube.merge_groups({new: merged})
    with pytest.raises(TypeError, match="must map to a list of group ids"):
        cube.merge_groups({"L": "B"})
    with pytest.raises(TypeError, match="new group ids must be strings"):
        cube.merge_groups({1: ["B"]})
    with pytest.raises(TypeError, match="expected a mapping"):
        cube.merge_groups([("L", ["B"])])  # type: ignore[arg-type]


def test_merge_groups_reads_nothing_and_keeps_digests() -> None:
    array = CountingArray(counts_array())
    cube = pbmc_cube(layers={"counts": array})
    merged = cube.merge_groups({"L": ["B", "NK"]})
    assert array.reads == []
    np.testing.assert_array_equal(merged.profiles("L"), counts_array()[[0, 2]].sum(axis=0))


def test_pool_samples(backend: str) -> None:
    cube = pbmc_cube(backend, normalization=Normalization("n", np.ones((3, 4))))
    pooled = cube.pool_samples(by="donor")
    assert ids_of(pooled.samples, "sample_id") == ["d1", "d2"]
    counts = counts_array()
    np.testing.assert_array_equal(
        pooled.profiles("T"),
        counts[1][[0, 2]].sum(0, keepdims=True).tolist()
        + counts[1][[1, 3]].sum(0, keepdims=True).tolist(),
    )
    np.testing.assert_array_equal(pooled.cells, np.full((3, 2), 14))
    assert pooled.normalization is None
    by_batch = cube.pool_samples(by="batch")
    assert ids_of(by_batch.samples, "sample_id") == ["1", "2"]
    if backend == "pandas":
        assert list(by_batch.samples.columns) == ["batch"]


def test_pool_samples_categorical_and_selection() -> None:
    samples = pd.DataFrame(
        {"sample_id": SAMPLES, "donor": pd.Categorical(["b", "a", "b", "a"]), "sex": list("ffmm")}
    )
    pooled = pbmc_cube(samples=samples).pool_samples(by="donor")
    assert list(pooled.samples.index) == ["b", "a"]
    assert list(pooled.samples.columns) == ["donor"]
    sub = pooled.select(samples=["a"], features=[1])
    np.testing.assert_array_equal(
        sub.profiles("B"), counts_array()[0][[1, 3]][:, [1]].sum(0, keepdims=True)
    )


POOLED_TIMES = {
    "durations": (pd.to_timedelta([1, 2, 1], unit="h").as_unit("us"), ["1:00:00", "2:00:00"]),
    "nanoseconds": (
        pd.to_datetime(["2020-01-01"] * 3).as_unit("ns") + pd.to_timedelta([1, 2, 1], unit="ns"),
        ["2020-01-01 00:00:00.000000001", "2020-01-01 00:00:00.000000002"],
    ),
    "zone": (
        pd.to_datetime(["2020-03-29 12:00", "2020-01-01 00:00", "2020-03-29 12:00"])
        .as_unit("us")
        .tz_localize("Europe/Berlin"),
        ["2020-03-29 12:00:00+02:00", "2020-01-01 00:00:00+01:00"],
    ),
    "categorical durations": (
        pd.Categorical(pd.to_timedelta([30, 30, 90], unit="s").as_unit("us")),
        ["0:00:30", "0:01:30"],
    ),
}


@pytest.mark.parametrize("case", list(POOLED_TIMES))
def test_pool_samples_names_times_alike_in_every_backend(case: str) -> None:
    """pandas wrote a duration '0 days 01:00:00', polars and pyarrow '1:00:00' (another
    fingerprint), and polars' Python values dropped nanoseconds (ids that repeat)."""
    values, names = POOLED_TIMES[case]
    samples = pd.DataFrame({"sample_id": ["s1", "s2", "s3"], "t": values})
    convert = {"pandas": lambda f: f, "polars": pl.from_pandas, "pyarrow": pa.Table.from_pandas}
    cubes = {
        b: make_cube(np.ones((1, 3, 1), int), samples=to(samples)) for b, to in convert.items()
    }
    pooled = {backend: cube.pool_samples("t") for backend, cube in cubes.items()}
    for cube in pooled.values():
        assert parts_of(cube).tables["samples"].ids == names
    # the same when the cubes are (polars holds categories of durations as durations)
    kept = len({cube.fingerprint for cube in cubes.values()})
    assert len({cube.fingerprint for cube in pooled.values()}) == kept


POOLED_CATEGORIES = {
    "floats": (pd.Categorical([1.0, 2.5, 1.0]), ["1.0", "2.5"]),
    "booleans": (pd.Categorical([True, False, True]), ["True", "False"]),
    "float32": (
        pd.Categorical(np.array([0.1, 0.2, 0.1], dtype=np.float32)),
        [str(float(np.float32(0.1))), str(float(np.float32(0.2)))],
    ),
    "small floats": (pd.Categorical([1e-7, 3.0, 1e-7]), ["1e-07", "3.0"]),
    "integers": (pd.Categorical([3, 1, 3]), ["3", "1"]),
    "strings": (pd.Categorical(["b", "a", "b"]), ["b", "a"]),
}


@pytest.mark.parametrize("case", list(POOLED_CATEGORIES))
def test_pool_samples_names_categories_alike_in_every_backend(case: str) -> None:
    """A categorical of numbers or booleans named the pooled samples '1.0' and 'True' in
    pandas, '1' and 'true' in pyarrow (and float32 categories by pandas' own text in pandas
    2): the same cube pooled to another fingerprint in another backend."""
    values, names = POOLED_CATEGORIES[case]
    samples = pd.DataFrame({"sample_id": ["s1", "s2", "s3"], "by": values})
    convert = {"pandas": lambda f: f, "pyarrow": pa.Table.from_pandas}
    cubes = {
        b: make_cube(np.ones((1, 3, 1), int), samples=to(samples)) for b, to in convert.items()
    }
    pooled = {backend: cube.pool_samples("by") for backend, cube in cubes.items()}
    for cube in pooled.values():
        assert parts_of(cube).tables["samples"].ids == names
    assert len({cube.fingerprint for cube in pooled.values()}) == 1


def test_pool_samples_errors() -> None:
    cube = pbmc_cube()
    with pytest.raises(KeyError, match="pool_samples: no column 'site' in the samples table"):
        cube.pool_samples(by="site")
    with pytest.raises(TypeError, match="by must be a column name"):
        cube.pool_samples(by=["donor"])  # type: ignore[arg-type]
    samples = pd.DataFrame({"sample_id": SAMPLES, "donor": ["a", None, "a", None]})
    with pytest.raises(
        ValueError, match=r"2 samples have no value in 'donor' \(such as \['s2', 's4'\]"
    ):
        pbmc_cube(samples=samples).pool_samples(by="donor")


def two_cubes(backend: str = "pandas") -> tuple[Cube, Cube]:
    counts = counts_array()
    a = pbmc_cube(backend)
    b = Cube(
        {"counts": counts[::-1, ::-1] * 2},
        samples=frame(backend, {"sample_id": SAMPLES[::-1], "donor": ["x"] * 4}),
        groups=frame(backend, {"group_id": GROUPS[::-1]}),
        features=frame(backend, {"feature_id": FEATURES}),
        cells=np.full((3, 4), 2),
    )
    return a, b


def test_add(backend: str) -> None:
    a, b = two_cubes(backend)
    total = cytepool.add([a, b])
    np.testing.assert_array_equal(total.to_numpy("counts"), counts_array() * 3)
    np.testing.assert_array_equal(total.cells, np.full((3, 4), 9))
    assert ids_of(total.samples, "sample_id") == SAMPLES
    assert [p.operation for p in total.provenance] == ["Cube", "Cube", "add"]
    assert total.provenance[-1].inputs == (a.fingerprint, b.fingerprint)


def test_add_errors() -> None:
    a, _ = two_cubes()
    other = pbmc_cube(samples=pd.DataFrame({"sample_id": ["s1", "s2", "s3", "x"]}))
    with pytest.raises(
        ValueError,
        match=(
            r"add: cube 1 does not hold the same samples as cube 0 "
            r"\(not in cube 0: \['x'\]; missing: \['s4'\]\)"
        ),
    ):
        cytepool.add([a, other])
    with pytest.raises(ValueError, match=r"add: cube 1 has layers \['umis'\]"):
        cytepool.add([a, pbmc_cube(layers={"umis": counts_array()})])
    with pytest.raises(TypeError, match="layer 'counts' is int32 in cube 1 and int64 in cube 0"):
        cytepool.add([a, pbmc_cube(layers={"counts": counts_array("int32")})])
    with pytest.raises(TypeError, match="add: expected a sequence of cubes"):
        cytepool.add(a)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="add: expected cubes, found int"):
        cytepool.add([a, 1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="add: expected at least one cube"):
        cytepool.add([])


@pytest.mark.parametrize("axis", ["samples", "groups", "features"])
def test_concat(axis: str, backend: str) -> None:
    counts = counts_array()
    cube = pbmc_cube(backend)
    index = {"groups": 0, "samples": 1, "features": 2}[axis]
    n = counts.shape[index]
    first = cube.select(**{axis: list(range(n - 1, 1, -1))})
    second = cube.select(**{axis: [0, 1]})
    if axis != "features":  # shuffle the other axes of the second cube: aligned by id
        second = second.select(features=[4, 2, 0, 1, 3])
    joined = cytepool.concat([first, second], axis=axis)
    order = [*range(n - 1, 1, -1), 0, 1]
    np.testing.assert_array_equal(joined.to_numpy("counts"), np.take(counts, order, axis=index))
    ids = {"samples": SAMPLES, "groups": GROUPS, "features": FEATURES}[axis]
    id_column = {"samples": "sample_id", "groups": "group_id", "features": "feature_id"}[axis]
    assert ids_of(getattr(joined, axis), id_column) == [ids[i] for i in order]
    assert joined.provenance[-1].operation == "concat"


def test_concat_tables_with_other_columns() -> None:
    cube = pbmc_cube()
    a = cube.select(samples=["s1"])
    b = Cube(
        {"counts": counts_array()[:, :1]},
        samples=pd.DataFrame({"sample_id": ["x1"], "site": ["north"]}),
        groups=pd.DataFrame({"group_id": GROUPS}),
        features=pd.DataFrame({"feature_id": FEATURES}),
        cells=np.full((3, 1), 7),
    )
    joined = cytepool.concat([a, b], axis="samples")
    assert list(joined.samples.columns) == ["donor", "batch", "site"]
    assert joined.samples["site"].isna().tolist() == [True, False]


TO_BACKEND = {
    "pandas": lambda f: f,
    "polars": pl.from_pandas,
    "pyarrow": lambda f: pa.Table.from_pandas(f, preserve_index=False),
}


JOINED_COLUMNS = {  # a column of the first cube's samples table; the second has none or other
    "int missing": ({"age": [31, 45]}, {}),
    "bool missing": ({"stim": [True, False]}, {}),
    "uint8 missing": ({"n": np.array([1, 2], dtype=np.uint8)}, {}),
    "in the second only": ({}, {"age": [3]}),
    "categories differ": ({"c": pd.Categorical(["x", "x"])}, {"c": pd.Categorical(["y"])}),
    "categorical missing": ({"c": pd.Categorical(["x", "y"])}, {}),
    "dates missing": ({"d": pd.to_datetime(["2020-01-01", "2021-05-06"])}, {}),
    "integers and floats": ({"c": [1, 2]}, {"c": [1.5]}),
    "int8 and int64": ({"c": np.array([1, 2], np.int8)}, {"c": [300]}),
    "float16 missing": ({"x": np.array([1.5, 2], np.float16)}, {}),
    "float16 and int8": ({"x": np.array([1, 2], np.float16)}, {"x": np.array([3], np.int8)}),
    "uint64 beyond 2**53 and float64": ({"x": np.array([2**63, 1], np.uint64)}, {"x": [0.5]}),
    "datetimes in ns and us": (
        {"t": pd.to_datetime(["2020-01-01", "2020-01-02"]).as_unit("ns")},
        {"t": pd.to_datetime(["2020-01-03"]).as_unit("us")},
    ),
    "durations in s and ms": (
        {"t": pd.to_timedelta([1, 2], unit="s").as_unit("s")},
        {"t": pd.to_timedelta([3], unit="ms").as_unit("ms")},
    ),
    "categorical and strings": ({"c": pd.Categorical(["u", "v"])}, {"c": ["w"]}),
    "categorical of integers and integers": ({"c": pd.Categorical([1, 2])}, {"c": [3]}),
}

UNJOINABLE = {
    "time zones": (
        pd.to_datetime(["2020-01-01"] * 2).tz_localize("UTC"),
        pd.to_datetime(["2020-01-03"]).tz_localize("Europe/Berlin"),
    ),
    "booleans and integers": ([True, False], [1]),
    "strings and integers": (["a", "b"], [1]),
    "strings and categories of integers": (["a", "b"], pd.Categorical([1])),  # pyarrow: joined
}


@pytest.mark.parametrize("backend", list(TO_BACKEND))
@pytest.mark.parametrize("case", list(UNJOINABLE))
def test_concat_refuses_columns_that_do_not_join_in_every_backend(case: str, backend: str) -> None:
    """pandas made objects of them (an InputTypeError of the fingerprint, or with pandas 2 a
    column of integers from booleans and integers) where polars and pyarrow refuse them."""
    values = UNJOINABLE[case]
    tables = [
        pd.DataFrame({"sample_id": ids, "x": v})
        for ids, v in zip([["s1", "s2"], ["s3"]], values, strict=True)
    ]
    cubes = [
        make_cube(np.ones((1, len(t), 2), int), samples=TO_BACKEND[backend](t)) for t in tables
    ]
    with pytest.raises(
        ValueError, match=r"(?s)^samples: the tables cannot be joined .*; give the columns"
    ):
        cytepool.concat(cubes, axis="samples")


@pytest.mark.parametrize("second", ["pandas", "pyarrow"])
@pytest.mark.parametrize("first", ["pandas", "pyarrow"])
def test_concat_refuses_categories_that_do_not_join_alike_in_every_backend(
    first: str, second: str
) -> None:
    """Categories of integers and of strings: pandas raised a TypeError of the joined table
    naming neither concat nor the table, pyarrow a ValueError naming no column."""
    tables = [
        pd.DataFrame({"sample_id": ["s1", "s2"], "batch": pd.Categorical([1, 2])}),
        pd.DataFrame({"sample_id": ["s3"], "batch": pd.Categorical(["1"])}),
    ]
    cubes = [
        make_cube(np.ones((1, len(t), 2), int), samples=TO_BACKEND[backend](t))
        for t, backend in zip(tables, [first, second], strict=True)
    ]
    pattern = (
        r"^samples: the tables cannot be joined \(InputTypeError: column 'batch' holds "
        r"categories of types \['number', 'string'\], which do not join\); give the columns"
    )
    with pytest.raises(InputError, match=pattern) as refused:
        cytepool.concat(cubes, axis="samples")
    assert not isinstance(refused.value, TypeError)


@pytest.mark.parametrize("second", ["pandas", "pyarrow"])
@pytest.mark.parametrize("first", ["pandas", "pyarrow"])
@pytest.mark.parametrize(
    ("a", "b", "joined"),
    [
        (np.array([1], np.int8), np.array([2], np.int64), pd.array([1, 2], dtype="int64")),
        (np.array([1.5]), np.array([2]), pd.array([1.5, 2.0], dtype="float64")),
        # beyond a float's precision: rounded as numpy rounds (pyarrow's safe cast refused)
        (np.array([2**63], np.uint64), np.array([-1]), pd.array([2.0**63, -1.0])),
        (np.array([2**53 + 1]), np.array([0.5]), pd.array([2.0**53, 0.5])),
    ],
)
def test_concat_joins_categories_of_numbers_of_other_types_as_numbers(
    first: str, second: str, a: Any, b: Any, joined: Any
) -> None:
    """Categories of numbers of other widths (int8 and int64, an integer and a float) join as
    their values in their common type, as pandas joins them, in every backend: pyarrow raised
    ArrowInvalid, and for a while every backend refused them."""
    tables = [
        pd.DataFrame({"sample_id": ["s1"], "batch": pd.Categorical(a)}),
        pd.DataFrame({"sample_id": ["s2"], "batch": pd.Categorical(b)}),
    ]
    cubes = [
        make_cube(np.ones((1, 1, 2), int), samples=TO_BACKEND[backend](t))
        for t, backend in zip(tables, [first, second], strict=True)
    ]
    expected = pd.DataFrame({"sample_id": ["s1", "s2"], "batch": joined})
    reference = make_cube(np.ones((1, 2, 2), int), samples=expected)
    assert cytepool.concat(cubes, axis="samples").fingerprint == reference.fingerprint


@pytest.mark.parametrize("case", list(JOINED_COLUMNS))
def test_concat_gives_one_table_in_every_backend(case: str) -> None:
    """pandas' own concat made floats of integers and objects of booleans where a column is
    missing, and strings of categoricals of other categories: another table than polars' and
    pyarrow's, and another fingerprint (or an error)."""
    first, second = JOINED_COLUMNS[case]
    tables = (
        pd.DataFrame({"sample_id": ["s1", "s2"], **first}),
        pd.DataFrame({"sample_id": ["s3"], **second}),
    )
    convert = {
        "pandas": lambda f: f,
        "polars": pl.from_pandas,
        "pyarrow": lambda f: pa.Table.from_pandas(f, preserve_index=False),
    }
    joined = {
        backend: cytepool.concat(
            [make_cube(np.ones((1, len(t), 2), int), samples=to(t)) for t in tables],
            axis="samples",
        )
        for backend, to in convert.items()
    }
    assert len({cube.fingerprint for cube in joined.values()}) == 1


def _ordered(values: list[Any], categories: list[Any], ordered: bool = True) -> Any:
    return pd.Categorical(values, categories=categories, ordered=ordered)


ORDERED_COLUMNS = {  # the column of the two cubes' samples tables, and of the joined one
    "ordered, other categories": (
        _ordered(["a", "b"], ["a", "b"]),
        _ordered(["c"], ["c"]),
        ["a", "b", "c"],
    ),
    "ordered, other order": (
        _ordered(["a", "b"], ["a", "b"]),
        _ordered(["a"], ["b", "a"]),
        ["a", "b", "a"],
    ),
    "ordered and unordered": (
        _ordered(["a", None], ["a", "b"]),
        _ordered(["b"], ["a", "b"], ordered=False),
        ["a", None, "b"],
    ),
    "ordered, the same categories": (
        _ordered(["b", None], ["b", "a"]),
        _ordered(["a"], ["b", "a"]),
        _ordered(["b", None, "a"], ["b", "a"]),
    ),
    "ordered, missing in the second": (_ordered(["b", "a"], ["b", "a"]), None, None),
    "ordered integers, other categories": (
        _ordered([2, None], [2]),
        _ordered([1], [1]),
        pd.array([2, None, 1], dtype="Int64"),
    ),
}


def _keeping_order(table: Any, backend: str) -> Any:
    """``table`` in ``backend``; polars with an ordered categorical of strings as an Enum (its
    ordered categorical; ``pl.from_pandas`` makes an unordered one)."""
    native = TO_BACKEND[backend](table)
    if backend != "polars":
        return native
    enums = {
        name: pl.Enum(list(dtype.categories))
        for name, dtype in table.dtypes.items()
        if isinstance(dtype, pd.CategoricalDtype) and dtype.ordered
    }
    return native.with_columns(*(pl.col(name).cast(enum) for name, enum in enums.items()))


@pytest.mark.parametrize(
    ("case", "backend"),
    [  # polars holds categories of strings only
        (case, backend)
        for case in ORDERED_COLUMNS
        for backend in TO_BACKEND
        if not (backend == "polars" and case.startswith("ordered integers"))
    ],
)
def test_concat_joins_ordered_categoricals_as_pandas_in_every_backend(
    case: str, backend: str
) -> None:
    """Ordered categoricals of other categories became strings with pandas but stayed
    categoricals with polars and pyarrow (another fingerprint), and pyarrow refused an ordered
    one joined with an unordered one. As pandas and anndata join them: ordered ones of the
    same categories in the same order stay that categorical, and any other mix of ordered
    categoricals gives their values."""
    first, second, expected = ORDERED_COLUMNS[case]
    tables = [pd.DataFrame({"sample_id": ["s1", "s2"], "c": first})]
    tables.append(pd.DataFrame({"sample_id": ["s3"]}))
    if second is not None:
        tables[1]["c"] = second
    cubes = [
        make_cube(np.ones((1, len(t), 2), int), samples=_keeping_order(t, backend)) for t in tables
    ]
    joined = cytepool.concat(cubes, axis="samples")
    if expected is None:  # as the first's, missing in the second
        expected = pd.Categorical([*first, None], dtype=first.dtype)
    reference = pd.DataFrame({"sample_id": ["s1", "s2", "s3"], "c": expected})
    assert joined.fingerprint == make_cube(np.ones((1, 3, 2), int), samples=reference).fingerprint
    kept = isinstance(expected, pd.Categorical)
    column = parts_of(joined).tables["samples"].frame.to_pandas()["c"]
    assert isinstance(column.dtype, pd.CategoricalDtype) == kept


@pytest.mark.parametrize("backend", list(TO_BACKEND))
def test_concat_fills_float16_as_float32_a_cube_file_stores(backend: str, tmp_path: Any) -> None:
    """A float16 column missing in one cube stayed float16 with missing values: a table that
    Cube(...) and read_cube refuse, which concat made and write_cube wrote."""
    from cytepool.io import read_cube, write_cube

    tables = [
        pd.DataFrame({"sample_id": ["s1"]}),
        pd.DataFrame({"sample_id": ["s2"], "x": np.array([1.5], np.float16)}),
    ]
    to = TO_BACKEND[backend]
    cubes = [make_cube(np.ones((1, 1, 2), int), samples=to(t)) for t in tables]
    joined = cytepool.concat(cubes, axis="samples")
    x = pd.DataFrame(parts_of(joined).tables["samples"].frame.to_pandas())["x"]
    assert str(x.dtype).lower() == "float32"
    assert x.isna().tolist() == [True, False]
    assert x.iloc[1] == 1.5
    rebuilt = Cube(
        {"counts": joined.to_numpy()},
        samples=joined.samples,
        cells=joined.cells,
        groups=joined.groups,
        features=joined.features,
    )
    assert rebuilt.shape == joined.shape
    write_cube(joined, tmp_path / "j.cube.zarr")
    assert read_cube(tmp_path / "j.cube.zarr").fingerprint == joined.fingerprint


@pytest.mark.parametrize("second", list(TO_BACKEND))
def test_concat_joins_categoricals_of_a_pyarrow_and_another_backend(second: str) -> None:
    """A pyarrow categorical (dictionary<int8, string>) followed by a polars one
    (dictionary<uint32, large_string>) could not be joined."""
    tables = [
        pd.DataFrame({"sample_id": ["s1", "s2"], "c": pd.Categorical(["u", "v"])}),
        pd.DataFrame({"sample_id": ["s3"], "c": pd.Categorical(["w"])}),
    ]
    cubes = [make_cube(np.ones((1, 2, 2), int), samples=TO_BACKEND["pyarrow"](tables[0]))]
    cubes.append(make_cube(np.ones((1, 1, 2), int), samples=TO_BACKEND[second](tables[1])))
    joined = cytepool.concat(cubes, axis="samples")
    plain = cytepool.concat(
        [make_cube(np.ones((1, len(t), 2), int), samples=t) for t in tables], axis="samples"
    )
    assert joined.fingerprint == plain.fingerprint


def test_concat_normalization() -> None:
    factors = np.arange(1, 13, dtype=float).reshape(3, 4)
    cube = pbmc_cube(normalization=Normalization("n", factors))
    joined = cytepool.concat(
        [cube.select(samples=[2, 3]), cube.select(samples=[0, 1])], axis="samples"
    )
    assert joined.normalization is not None
    np.testing.assert_array_equal(joined.normalization.factors, factors[:, [2, 3, 0, 1]])
    by_features = cytepool.concat(
        [cube.select(features=[0]), cube.select(features=[1])], axis="features"
    )
    assert by_features.normalization == cube.normalization
    with pytest.raises(ValueError, match="concat: the cubes have different normalizations"):
        cytepool.concat([cube.select(samples=[0]), pbmc_cube().select(samples=[1])], axis="samples")
    other = pbmc_cube(normalization=Normalization("n", factors * 2))
    with pytest.raises(ValueError, match="along features they must match"):
        cytepool.concat([cube.select(features=[0]), other.select(features=[1])], axis="features")
    plain = pbmc_cube()
    assert (
        cytepool.concat(
            [plain.select(groups=[0]), plain.select(groups=[1])], axis="groups"
        ).normalization
        is None
    )


def test_concat_errors() -> None:
    cube = pbmc_cube()
    with pytest.raises(ValueError, match="concat: axis must be one of"):
        cytepool.concat([cube], axis="cells")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"samples: the ids must be unique; it would hold \['s1'\]"
    ):
        cytepool.concat([cube.select(samples=[0, 1]), cube.select(samples=[0])], axis="samples")
    with pytest.raises(ValueError, match="concat: cube 1 does not hold the same groups as cube 0"):
        cytepool.concat(
            [cube.select(samples=[0]), cube.select(samples=[1], groups=[0])], axis="samples"
        )
    cells = np.full((3, 4), 7)
    cells[1, 2] = 8
    with pytest.raises(
        ValueError,
        match="along features the cells must match; cube 1 has 8 cells at group 'T', sample 's3'",
    ):
        cytepool.concat(
            [cube.select(features=[0]), pbmc_cube(cells=cells).select(features=[1])],
            axis="features",
        )
    pl_cube = pbmc_cube("polars").select(samples=["s2"])
    mixed = cytepool.concat([cube.select(samples=["s1"]), pl_cube], axis="samples")
    assert isinstance(mixed.samples, pd.DataFrame)
    bad = Cube(
        {"counts": counts_array()[:, :1]},
        samples=pd.DataFrame({"sample_id": ["x1"], "donor": [3.5]}),
        groups=pd.DataFrame({"group_id": GROUPS}),
        features=pd.DataFrame({"feature_id": FEATURES}),
        cells=np.full((3, 1), 7),
    )
    joined = cytepool.concat(
        [pbmc_cube("polars").select(samples=["s1"]), pbmc_cube("polars").select(samples=["s2"])],
        axis="samples",
    )
    assert joined.shape == (3, 2, 5)
    with pytest.raises(ValueError, match="samples: the tables cannot be joined"):
        cytepool.concat([pbmc_cube("polars").select(samples=["s1"]), bad], axis="samples")


def test_concat_reads_only_needed_parts() -> None:
    arrays = [CountingArray(counts_array()), CountingArray(counts_array() + 1)]
    a = pbmc_cube(layers={"counts": arrays[0]})
    b = Cube(
        {"counts": arrays[1]},
        samples=pd.DataFrame({"sample_id": [s + "b" for s in SAMPLES]}),
        groups=pd.DataFrame({"group_id": GROUPS}),
        features=pd.DataFrame({"feature_id": FEATURES}),
        cells=np.full((3, 4), 7),
    )
    joined = cytepool.concat([a, b], axis="samples")
    assert arrays[0].reads == arrays[1].reads == []
    sub = joined.select(samples=["s2b", "s1b"])
    np.testing.assert_array_equal(sub.profiles("T"), (counts_array() + 1)[1][[1, 0]])
    assert arrays[0].reads == []
    assert len(arrays[1].reads) == 1


# --------------------------------------------------------------------------- provenance


def test_provenance_records() -> None:
    cube = pbmc_cube()
    record = cube.provenance[0]
    assert record.operation == "Cube"
    assert record.parameters == {
        "layers": {"counts": "int64"},
        "shape": [3, 4, 5],
        "normalization": None,
    }
    assert record.version == cytepool.__version__
    when = dt.datetime.fromisoformat(record.time)
    assert when.utcoffset() == dt.timedelta(0)
    assert record.inputs == ()
    derived = cube.select(groups=["T"]).merge_groups({"X": ["T"]}).pool_samples(by="donor")
    assert [r.operation for r in derived.provenance] == [
        "Cube",
        "select",
        "merge_groups",
        "pool_samples",
    ]
    assert derived.provenance[1].inputs == (cube.fingerprint,)
    assert derived.provenance[1].parameters == {"samples": None, "groups": ["T"], "features": None}
    json.dumps([r.to_json() for r in derived.provenance])
    for r in derived.provenance:
        assert Provenance.from_json(r.to_json()) == r


def test_provenance_long_id_lists() -> None:
    features = pd.DataFrame({"feature_id": [f"g{i}" for i in range(1001)]})
    cube = Cube(
        {"counts": np.zeros((1, 1, 1001), dtype="int32")},
        samples=pd.DataFrame({"sample_id": ["s"]}),
        groups=pd.DataFrame({"group_id": ["g"]}),
        features=features,
        cells=[[1]],
    )
    param = cube.select(features=list(range(1001))[::-1]).provenance[-1].parameters["features"]
    assert param["count"] == 1001
    assert re.fullmatch("[0-9a-f]{64}", param["sha256"])


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([], "expected an object with keys"),
        ({"operation": "x"}, "expected an object with keys"),
        (
            {"operation": 1, "parameters": {}, "version": "v", "time": "t", "inputs": []},
            "operation must be a string",
        ),
        (
            {"operation": "x", "parameters": [], "version": "v", "time": "t", "inputs": []},
            "parameters must be a mapping",
        ),
        (
            {"operation": "x", "parameters": {}, "version": "v", "time": "t", "inputs": "ab"},
            "inputs must be a list",
        ),
        (
            {"operation": "x", "parameters": {}, "version": "v", "time": "t", "inputs": ["ab"]},
            "inputs must be fingerprints or None",
        ),
    ],
)
def test_provenance_from_json_errors(data: Any, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        Provenance.from_json(data)


def test_provenance_record_helper() -> None:
    cube = pbmc_cube()
    lazy = pbmc_cube(layers={"counts": CountingArray(counts_array())})
    record = provenance_record("from_cells", {"layers": ["counts"]}, (cube, lazy, None, "a" * 64))
    assert record.inputs == (cube.fingerprint, None, None, "a" * 64)
    renamed = with_provenance(cube, (record,))
    assert renamed.provenance == (record,)
    assert renamed.fingerprint == cube.fingerprint
    with pytest.raises(TypeError, match="expected Provenance records"):
        with_provenance(cube, ("x",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="parameters must be a mapping"):
        Provenance("x", [], "v", "t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"parameters: keys must be strings, found None"):
        Provenance("x", {"a": {None: 1, "null": 2}}, "v", "t")


# --------------------------------------------------------------------------- _from_parts


def parts(cube: Cube, layers: dict[str, Any] | None = None, **change: Any) -> dict[str, Any]:
    args = {
        "samples": cube.samples,
        "groups": cube.groups,
        "features": cube.features,
        "cells": cube.cells,
        "normalization": cube.normalization,
        "metadata": cube.metadata,
        "provenance": cube.provenance,
        "digests": parts_of(cube).digests(),
    }
    args.update(change)
    return {"layers": dict(cube.layers) if layers is None else layers, **args}


def test_from_parts_knows_fingerprint_without_reading(backend: str) -> None:
    cube = pbmc_cube(backend, metadata={"a": 1})
    array = CountingArray(counts_array())
    stored = from_parts(**parts(cube, {"counts": array}))
    assert stored.fingerprint == cube.fingerprint
    assert stored.provenance == cube.provenance
    assert stored.metadata == {"a": 1}
    assert array.reads == []
    assert (
        stored.select(groups=["NK", "B"]).fingerprint == cube.select(groups=["NK", "B"]).fingerprint
    )
    assert array.reads == []
    np.testing.assert_array_equal(stored.profiles("T"), counts_array()[1])


def test_from_parts_verifies_whole_groups() -> None:
    cube = pbmc_cube()
    counts = counts_array()
    counts[1, 0, 0] += 1
    stored = from_parts(**parts(cube, {"counts": CountingArray(counts)}))
    np.testing.assert_array_equal(stored.profiles("B"), counts[0])
    np.testing.assert_array_equal(
        parts_of(stored).read("counts", 1, features=[0]), counts[1][:, [0]]
    )
    pattern = "layer 'counts', group 'T': the values do not match their stored digest"
    with pytest.raises(FormatError, match=pattern):
        stored.profiles("T")
    with pytest.raises(FormatError, match=pattern):
        stored.select(groups=["T"]).to_numpy("counts")
    with pytest.raises(FormatError, match=pattern):
        stored.merge_groups({"X": ["T", "B"]}).profiles("X")
    assert stored.fingerprint == cube.fingerprint  # the stored digests, not re-read


def test_from_parts_digest_mismatches() -> None:
    cube = pbmc_cube(normalization=Normalization("n", np.ones((3, 4))))
    digests = parts_of(cube).digests().to_json()
    other = pbmc_cube(samples=pd.DataFrame({"sample_id": SAMPLES, "donor": list("abcd")}))
    with pytest.raises(FormatError, match="samples: the table does not match its stored digest"):
        from_parts(**parts(other, digests=Digests.from_json(digests)))
    with pytest.raises(FormatError, match="cells: the cell numbers do not match"):
        from_parts(**parts(cube, cells=np.full((3, 4), 8)))
    with pytest.raises(FormatError, match="normalization: the normalization does not match"):
        from_parts(**parts(cube, normalization=None))
    with pytest.raises(FormatError, match=r"digests: expected layers \['counts', 'umis'\]"):
        from_parts(**parts(cube, {"counts": counts_array(), "umis": counts_array()}))
    with pytest.raises(FormatError, match="the stored data type is int64, the array's is int32"):
        from_parts(**parts(cube, {"counts": counts_array("int32")}))
    short = dict(digests, layers={"counts": digests["layers"]["counts"][:2]})
    with pytest.raises(FormatError, match="expected 3 group digests, found 2"):
        from_parts(**parts(cube, digests=Digests.from_json(short)))
    with pytest.raises(TypeError, match="expected Provenance records"):
        from_parts(**parts(cube, provenance=[{"operation": "x"}]))
    with pytest.raises(TypeError, match=r"expected a fingerprint\.Digests"):
        from_parts(**parts(cube, digests=digests))


def test_from_parts_without_digests_and_values_checked() -> None:
    cube = pbmc_cube()
    counts = counts_array()
    counts[0, 0, 0] = -1
    with pytest.raises(ConstraintError, match="layer 'counts', group 'B', sample 's1'"):
        from_parts(**parts(cube, {"counts": counts}, digests=None))
    lazy = from_parts(**parts(cube, {"counts": CountingArray(counts)}, digests=None))
    assert parts_of(lazy).digests(compute=False).complete is False
    assert lazy.provenance == cube.provenance
    with pytest.raises(ConstraintError, match="layer 'counts', group 'B', sample 's1'"):
        lazy.profiles("B")


def test_read_caches_group_digest() -> None:
    cube = pbmc_cube()
    lazy = pbmc_cube(layers={"counts": CountingArray(counts_array())})
    assert parts_of(lazy).digests(compute=False).layers["counts"] == (None, None, None)
    lazy.profiles("T")
    parts_of(lazy).read("counts", 0, features=[1])
    known = parts_of(lazy).digests(compute=False).layers["counts"]
    assert known[0] is None
    assert known[1] == parts_of(cube).digests().layers["counts"][1]
    assert lazy.fingerprint == cube.fingerprint


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda cube: cube.select(["s1"]), id="select"),
        pytest.param(lambda cube: cytepool.concat([cube], "samples"), id="concat"),
    ],
)
def test_selection_and_axis_arguments_are_keyword_only(call) -> None:
    with pytest.raises(TypeError, match="positional argument"):
        call(pbmc_cube())


@pytest.mark.parametrize("values", [["b", None, "a", "b"], [3, 1, None, 3]])
def test_a_pandas_column_of_a_pyarrow_dictionary_is_a_categorical(
    tmp_path: Any, values: list[Any]
) -> None:
    """pd.ArrowDtype(pa.dictionary(...)): Cube() raised AttributeError ("Can only use .cat
    accessor with a 'category' dtype"). It is the categorical of its values: the fingerprint
    of pandas' Categorical, kept by write_cube and read_cube."""
    from cytepool.io import read_cube, write_cube

    encoded = pa.array(values).dictionary_encode()
    encoded = encoded.cast(pa.dictionary(pa.int32(), encoded.type.value_type))
    column = pd.Series(encoded.to_pandas(types_mapper=pd.ArrowDtype)).array
    cube = make_cube(samples={"c": column})
    assert cube.fingerprint == make_cube(samples={"c": pd.Categorical(values)}).fingerprint
    write_cube(cube, tmp_path / "c.cube.zarr")
    back = read_cube(tmp_path / "c.cube.zarr")
    assert back.fingerprint == cube.fingerprint
    assert [None if pd.isna(v) else v for v in back.samples["c"]] == values
