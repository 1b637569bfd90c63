"""Digests and the fingerprint: the documented encodings, invariance and sensitivity."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from blake3 import blake3
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cytepool import Cube, Normalization
from cytepool.errors import FormatError
from cytepool.fingerprint import (
    Digests,
    canonical_column,
    cells_digest,
    group_digest,
    normalization_digest,
    table_digest,
)
from factories import BACKENDS, make_cube

pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")


def u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def text(s: str) -> bytes:
    b = s.encode()
    return u64(len(b)) + b


def strings(values: list[str], algorithm: str) -> bytes:
    """A string column's payload and its size: each value after its byte length, 4 bytes in a
    BLAKE3 column digest (as vlen-utf8 stores it), 8 with SHA-256 (``text``)."""
    width = "<I" if algorithm == "blake3" else "<Q"
    joined = b"".join(struct.pack(width, len(b)) + b for b in (v.encode() for v in values))
    return u64(len(joined)) + joined


# --------------------------------------------------------------------------- documented encodings


# BLAKE3 makes every digest; SHA-256 those of cube files of formats 1.0 and 1.1
HASHES = {"blake3": blake3, "sha256": hashlib.sha256}


def blake3_table(n_rows: int, columns: list[bytes]) -> str:
    """The BLAKE3 table digest of columns given as their canonical bytes (docs/cube.md): the
    hash of the raw BLAKE3 column digests, each of its row count and the column's bytes."""
    digests = [blake3(b"cytepool.column/2\0" + u64(n_rows) + c).digest() for c in columns]
    head = b"cytepool.table/2\0" + u64(n_rows) + u64(len(columns))
    return blake3(head + b"".join(digests)).hexdigest()


def reference_table(algorithm: str, n_rows: int, columns: list[bytes]) -> str:
    if algorithm == "blake3":
        return blake3_table(n_rows, columns)
    head = b"cytepool.table/1\0" + u64(n_rows) + u64(len(columns))
    return HASHES[algorithm](head + b"".join(columns)).hexdigest()


@pytest.mark.parametrize("algorithm", sorted(HASHES))
def test_group_digest_encoding(algorithm: str) -> None:
    block = np.array([[1.5, -0.0, 2.0]], dtype="float32")
    expected = HASHES[algorithm](
        b"cytepool.group/1\0"
        + text("float32")
        + u64(1)
        + u64(3)
        + struct.pack("<3f", 1.5, 0.0, 2.0)
    ).hexdigest()
    assert group_digest("float32", block, algorithm) == expected
    assert group_digest(np.dtype(">f4"), block.astype(">f4"), algorithm) == expected
    ints = np.array([[1, -2], [3, 4]], dtype=">i4")  # hashed in one call when little-endian
    expected = HASHES[algorithm](
        b"cytepool.group/1\0" + text("int32") + u64(2) + u64(2) + struct.pack("<4i", 1, -2, 3, 4)
    ).hexdigest()
    assert group_digest("int32", ints, algorithm) == expected
    assert group_digest("int32", ints.astype("<i4"), algorithm) == expected
    assert group_digest("int32", np.asfortranarray(ints.astype("<i4")), algorithm) == expected


@pytest.mark.parametrize("algorithm", sorted(HASHES))
def test_cells_and_normalization_encoding(algorithm: str) -> None:
    h = HASHES[algorithm]
    cells = np.array([[1, 0, 3]], dtype="uint8")
    expected = h(b"cytepool.cells/1\0" + u64(1) + u64(3) + struct.pack("<3q", 1, 0, 3)).hexdigest()
    assert cells_digest(cells, algorithm) == expected
    assert normalization_digest(None, algorithm) == h(b"cytepool.normalization/1\0\0").hexdigest()
    n = Normalization("cpm", [[0.5, 2.0]])
    expected = h(
        b"cytepool.normalization/1\0\1"
        + text("cpm")
        + u64(1)
        + u64(2)
        + struct.pack("<2d", 0.5, 2.0)
    ).hexdigest()
    assert normalization_digest(n, algorithm) == expected


@pytest.mark.parametrize("algorithm", sorted(HASHES))
def test_table_digest_encoding(algorithm: str) -> None:
    frame = pd.DataFrame(
        {"n": pd.array([7, None], dtype="Int32"), "s": ["é", None]},
        index=pd.Index(["a", "b"], name="sample_id"),
    )
    columns = [
        text("sample_id") + text("string") + b"\x00" + strings(["a", "b"], algorithm),
        text("n") + text("int32") + b"\x02" + u64(8) + struct.pack("<2i", 7, 0),
        text("s") + text("string") + b"\x02" + strings(["é", ""], algorithm),
    ]
    assert table_digest(frame, algorithm) == reference_table(algorithm, 2, columns)


@pytest.mark.parametrize("algorithm", sorted(HASHES))
def test_fingerprint_encoding(algorithm: str) -> None:
    h = [hashlib.sha256(bytes([i])).hexdigest() for i in range(8)]
    digests = Digests(
        algorithm=algorithm,
        tables={"samples": h[0], "groups": h[1], "features": h[2]},
        cells=h[3],
        normalization=h[4],
        layers={"b": (h[5],), "a": (h[6],)},
        dtypes={"b": "int32", "a": "float64"},
    )
    raw = [bytes.fromhex(x) for x in h]
    expected = HASHES[algorithm](
        b"cytepool.fingerprint/1\0"
        + raw[0]
        + raw[1]
        + raw[2]
        + raw[3]
        + raw[4]
        + u64(2)
        + text("a")
        + text("float64")
        + u64(1)
        + raw[6]
        + text("b")
        + text("int32")
        + u64(1)
        + raw[5]
    ).hexdigest()
    prefix = "" if algorithm == "sha256" else "blake3:"  # a bare hex fingerprint is a SHA-256
    assert digests.fingerprint() == prefix + expected
    assert Digests.from_json(digests.to_json()) == digests
    assert ("algorithm" in digests.to_json()) == (algorithm == "blake3")


# --------------------------------------------------------------------------- part digests


def test_group_digest_layout_and_sensitivity() -> None:
    block = np.arange(12, dtype="int64").reshape(3, 4)
    d = group_digest("int64", block)
    assert group_digest("int64", np.asfortranarray(block)) == d
    assert group_digest("int64", np.arange(24).reshape(3, 8)[:, ::2] // 2) == d
    assert group_digest("int64", block.astype(">i8")) == d
    assert group_digest("int32", block.astype("int32")) != d
    assert group_digest("int64", block.reshape(4, 3)) != d
    changed = block.copy()
    changed[2, 3] += 1
    assert group_digest("int64", changed) != d


@pytest.mark.parametrize("dtype", ["int32", "uint64", "float32", "float64"])
@pytest.mark.parametrize("layout", ["C", "F", ">", "strided", "empty"])
def test_group_digest_hands_over_each_band_it_hashed(dtype: str, layout: str) -> None:
    rows = 3 * (2**20 // (4096 * np.dtype(dtype).itemsize)) + 5  # three bands and a part
    block = np.random.default_rng(3).integers(0, 9, (rows, 4096)).astype(dtype)
    block[0, 0] = -0.0 if dtype.startswith("float") else block[0, 0]
    given = {
        "C": block,
        "F": np.asfortranarray(block),
        ">": block.astype(np.dtype(dtype).newbyteorder(">")),
        "strided": np.repeat(block, 2, axis=1)[:, ::2],
        "empty": block[:0],
    }[layout]
    bands: list[np.ndarray[Any, Any]] = []
    digest = group_digest(dtype, given, each=bands.append)
    assert digest == group_digest(dtype, given)
    assert sum(len(band) for band in bands) == len(given)
    if len(given):
        assert max(band.nbytes for band in bands) <= 2**20
        np.testing.assert_array_equal(np.concatenate(bands), given)


def test_group_digest_errors() -> None:
    with pytest.raises(TypeError, match="expected a data type among int32"):
        group_digest("int16", np.zeros((1, 1), dtype="int16"))
    with pytest.raises(TypeError, match="expected a data type among"):
        group_digest("nonsense", np.zeros((1, 1)))
    with pytest.raises(TypeError, match="group block: expected data type int32, found int64"):
        group_digest("int32", np.zeros((1, 1), dtype="int64"))
    with pytest.raises(ValueError, match=r"expected a 2-D \(samples, features\) array"):
        group_digest("int64", np.zeros(3, dtype="int64"))


def test_cells_digest() -> None:
    cells = np.array([[1, 2], [3, 4]])
    assert cells_digest(cells.astype("int32")) == cells_digest(cells.astype("uint16"))
    assert cells_digest(cells) != cells_digest(cells.T)
    with pytest.raises(TypeError, match="cells: expected an integer array"):
        cells_digest(cells.astype(float))
    with pytest.raises(ValueError, match="cells: expected a 2-D"):
        cells_digest(np.array([1]))
    with pytest.raises(ValueError, match="does not fit int64"):
        cells_digest(np.array([[2**63]], dtype="uint64"))


def test_normalization_digest() -> None:
    n = Normalization("cpm", np.ones((2, 2)))
    assert normalization_digest(n) == normalization_digest(
        Normalization("cpm", np.ones((2, 2), int))
    )
    assert normalization_digest(n) != normalization_digest(Normalization("tmm", np.ones((2, 2))))
    assert normalization_digest(n) != normalization_digest(Normalization("cpm", np.ones((1, 4))))
    assert normalization_digest(n) != normalization_digest(None)


# --------------------------------------------------------------------------- tables across backends


def _arrow_dictionary(values: list[Any]) -> pd.Series:
    """A pandas column of a pyarrow dictionary (``pd.ArrowDtype``), int32 indices."""
    encoded = pa.array(values).dictionary_encode()
    typed = encoded.cast(pa.dictionary(pa.int32(), encoded.type.value_type))
    return pd.Series(typed.to_pandas(types_mapper=pd.ArrowDtype))


def variants(kind: str) -> list[Any]:
    """The same logical column ``x`` (with a missing value) in several backends and dtypes."""
    ts = [dt.datetime(2020, 1, 1, 12), None, dt.datetime(1969, 12, 31)]
    if kind == "int16":
        return [
            pd.DataFrame({"x": pd.array([1, None, -3], dtype="Int16")}),
            pl.DataFrame({"x": pl.Series([1, None, -3], dtype=pl.Int16)}),
            pa.table({"x": pa.array([1, None, -3], type=pa.int16())}),
        ]
    if kind == "uint64":
        return [
            pd.DataFrame({"x": np.array([1, 2**64 - 1, 0], dtype="uint64")}),
            pl.DataFrame({"x": pl.Series([1, 2**64 - 1, 0], dtype=pl.UInt64)}),
            pa.table({"x": pa.array([1, 2**64 - 1, 0], type=pa.uint64())}),
        ]
    if kind == "float64":
        return [
            pd.DataFrame({"x": [1.5, np.nan, -0.0]}),
            pd.DataFrame({"x": pd.array([1.5, None, 0.0], dtype="Float64")}),
            pl.DataFrame({"x": [1.5, None, 0.0]}),
            pl.DataFrame({"x": [1.5, float("nan"), 0.0]}),
            pa.table({"x": pa.array([1.5, None, 0.0])}),
        ]
    if kind == "float32":
        return [
            pd.DataFrame({"x": np.array([1.5, np.nan, 2], dtype="float32")}),
            pl.DataFrame({"x": pl.Series([1.5, None, 2], dtype=pl.Float32)}),
            pa.table({"x": pa.array([1.5, None, 2], type=pa.float32())}),
        ]
    if kind == "float16":  # pyarrow 18 cannot fill its missing value with a float16 0
        values16 = np.array([1.5, np.nan, -0.0], dtype="float16")
        return [
            pd.DataFrame({"x": values16}),
            pa.table({"x": pa.array(values16, mask=np.isnan(values16))}),
        ]
    if kind == "bool":
        return [
            pd.DataFrame({"x": pd.array([True, None, False], dtype="boolean")}),
            pl.DataFrame({"x": [True, None, False]}),
            pa.table({"x": pa.array([True, None, False])}),
        ]
    if kind == "string":
        values = ["é€😀", None, ""]
        return [
            pd.DataFrame({"x": values}),
            pd.DataFrame({"x": pd.array(values, dtype="string")}),
            pd.DataFrame({"x": pd.array(values, dtype="string[pyarrow]")}),
            pl.DataFrame({"x": values}),
            pa.table({"x": pa.array(values)}),
            pa.table({"x": pa.array(values, type=pa.large_string())}),
        ]
    if kind == "categorical":
        values = ["CD4 T", None, "B cells"]
        return [
            pd.DataFrame({"x": pd.Categorical(values, categories=["CD4 T", "B cells", "NK"])}),
            pd.DataFrame({"x": pd.Categorical(values, ordered=True)}),
            pl.DataFrame({"x": pl.Series(values, dtype=pl.Categorical)}),
            pl.DataFrame({"x": pl.Series(values, dtype=pl.Enum(["B cells", "CD4 T", "NK"]))}),
            pa.table({"x": pa.array(values).dictionary_encode()}),
            pd.DataFrame({"x": _arrow_dictionary(values)}),
        ]
    if kind == "categorical_int":
        return [
            pd.DataFrame({"x": pd.Categorical([3, None, 1])}),
            pa.table({"x": pa.array([3, None, 1]).dictionary_encode()}),
            pd.DataFrame({"x": _arrow_dictionary([3, None, 1])}),
        ]
    if kind == "datetime_tz":
        return [
            pd.DataFrame(
                {
                    "x": pd.to_datetime(ts)
                    .tz_localize("UTC")
                    .tz_convert("Europe/Berlin")
                    .as_unit("us")
                }
            ),
            pl.DataFrame({"x": pl.Series(ts, dtype=pl.Datetime("us", "UTC"))}).with_columns(
                pl.col("x").dt.convert_time_zone("Europe/Berlin")
            ),
            pa.table({"x": pa.array(ts, type=pa.timestamp("us", tz="UTC"))}).cast(
                pa.schema([("x", pa.timestamp("us", tz="Europe/Berlin"))])
            ),
        ]
    if kind == "datetime_zone_name":  # narwhals calls pandas' type Unknown for such a name
        utc = pd.to_datetime(ts).tz_localize("UTC").as_unit("us")
        return [
            pd.DataFrame({"x": utc.tz_convert("America/Port-au-Prince")}),
            pl.DataFrame({"x": pl.Series(ts, dtype=pl.Datetime("us", "UTC"))}).with_columns(
                pl.col("x").dt.convert_time_zone("America/Port-au-Prince")
            ),
            pa.table({"x": pa.array(ts, type=pa.timestamp("us", tz="America/Port-au-Prince"))}),
        ]
    if kind == "datetime":
        return [
            pd.DataFrame({"x": pd.to_datetime(ts).as_unit("ns")}),  # pandas 3 infers "us"
            pl.DataFrame({"x": pl.Series(ts, dtype=pl.Datetime("ns"))}),
            pa.table({"x": pa.array(ts, type=pa.timestamp("ns"))}),
        ]
    if kind == "date":
        days = [dt.date(2020, 2, 29), None, dt.date(1900, 1, 1)]
        return [
            pd.DataFrame({"x": days}),
            pd.DataFrame({"x": pd.array(days, dtype=pd.ArrowDtype(pa.date32()))}),
            pl.DataFrame({"x": days}),
            pa.table({"x": pa.array(days)}),
        ]
    if kind == "duration":
        deltas = [dt.timedelta(seconds=1.5), None, dt.timedelta(days=-2)]
        return [
            pd.DataFrame({"x": pd.to_timedelta(deltas).as_unit("us")}),
            pl.DataFrame({"x": pl.Series(deltas, dtype=pl.Duration("us"))}),
            pa.table({"x": pa.array(deltas, type=pa.duration("us"))}),
        ]
    raise AssertionError(kind)  # pragma: no cover


KINDS = [
    "int16",
    "uint64",
    "float64",
    "float32",
    "float16",
    "bool",
    "string",
    "categorical",
    "categorical_int",
    "datetime_tz",
    "datetime_zone_name",
    "datetime",
    "date",
    "duration",
]


@pytest.mark.parametrize("kind", KINDS)
def test_table_digest_backend_invariance(kind: str) -> None:
    digests = {table_digest(frame) for frame in variants(kind)}
    assert len(digests) == 1


@pytest.mark.parametrize("algorithm", sorted(HASHES))
def test_table_digest_of_categorical_encoding(algorithm: str) -> None:
    frame = pd.DataFrame({"x": pd.Categorical(["CD4 T", None])})
    column = text("x") + text("categorical[string]") + b"\x02" + strings(["CD4 T", ""], algorithm)
    assert table_digest(frame, algorithm) == reference_table(algorithm, 2, [column])


def test_table_digest_is_stable_across_processes() -> None:
    import subprocess
    import sys

    code = (
        "import pandas as pd; from cytepool.fingerprint import table_digest; "
        "print(table_digest(pd.DataFrame({'c': pd.Categorical(['lymphoid', 'myeloid']), "
        "'s': ['alpha', 'beta'], 'n': [1, 2]})))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    here = table_digest(
        pd.DataFrame(
            {"c": pd.Categorical(["lymphoid", "myeloid"]), "s": ["alpha", "beta"], "n": [1, 2]}
        )
    )
    assert other == here


def test_table_digest_of_categoricals_without_categories() -> None:
    frames = [
        pd.DataFrame({"x": pd.Categorical([None, None])}),
        pl.DataFrame({"x": pl.Series([None, None], dtype=pl.Categorical)}),
        pa.table({"x": pa.array([None, None], type=pa.string()).dictionary_encode()}),
    ]
    assert len({table_digest(f) for f in frames}) == 1


def test_table_digests_differ_between_kinds() -> None:
    digests = [table_digest(variants(kind)[0]) for kind in KINDS]
    assert len(set(digests)) == len(KINDS)


def test_table_digest_sensitivity() -> None:
    base = pl.DataFrame({"sample_id": ["a", "b"], "n": [1, 2], "s": ["x", "y"]})
    d = table_digest(base)
    changes = [
        base.with_columns(pl.Series("n", [1, 3])),
        base.with_columns(pl.Series("n", [1, None])),
        base.rename({"n": "m"}),
        base.select(["sample_id", "s", "n"]),
        base.reverse(),
        base.with_columns(pl.col("n").cast(pl.Int32)),
        base.with_columns(pl.col("s").cast(pl.Categorical)),
        base.with_columns(pl.Series("sample_id", ["a", "c"])),
        base.with_columns(pl.lit(1).alias("extra")),
        base.head(1),
        base.with_columns(pl.Series("s", ["x", ""])),
        base.with_columns(pl.Series("s", ["x", None])),
    ]
    found = [table_digest(c) for c in changes]
    assert d not in found
    assert len(set(found)) == len(found)
    tz = pl.DataFrame({"x": pl.Series([dt.datetime(2020, 1, 1)], dtype=pl.Datetime("us", "UTC"))})
    assert table_digest(tz) != table_digest(
        tz.with_columns(pl.col("x").dt.convert_time_zone("Asia/Tokyo"))
    )
    assert table_digest(tz) != table_digest(tz.with_columns(pl.col("x").dt.cast_time_unit("ns")))


def test_table_digest_pandas_index() -> None:
    indexed = pd.DataFrame({"v": [1, 2]}, index=pd.Index(["a", "b"], name="sample_id"))
    column = pd.DataFrame({"sample_id": ["a", "b"], "v": [1, 2]}, index=[5, 6])
    assert table_digest(indexed) == table_digest(column)
    assert table_digest(indexed) == table_digest(
        pl.DataFrame({"sample_id": ["a", "b"], "v": [1, 2]})
    )
    assert table_digest(pd.DataFrame({"v": [1, 2]})) == table_digest(pl.DataFrame({"v": [1, 2]}))
    with pytest.raises(TypeError, match="MultiIndex"):
        table_digest(pd.DataFrame({"v": [1]}, index=pd.MultiIndex.from_tuples([(1, 2)])))
    with pytest.raises(TypeError, match="column names must be strings, found index name 3"):
        table_digest(pd.DataFrame({"v": [1]}, index=pd.Index(["a"], name=3)))
    with pytest.raises(TypeError, match="column names must be strings"):
        table_digest(pd.DataFrame({4: [1]}))


def test_table_digest_unsupported_columns() -> None:
    with pytest.raises(TypeError, match="table column 'l': data type List"):
        table_digest(pl.DataFrame({"l": [[1], [2]]}))
    with pytest.raises(TypeError, match="table column 'b': data type Binary"):
        table_digest(pl.DataFrame({"b": [b"x"]}))
    with pytest.raises(TypeError, match=r"table column 'o': .*Object holding int, str"):
        table_digest(pd.DataFrame({"o": ["a", 1]}))
    with pytest.raises(
        TypeError, match="table column 'd': data type Object holding date, datetime"
    ):
        table_digest(
            pd.DataFrame(
                {"d": pd.Series([dt.date(2020, 1, 1), dt.datetime(2020, 1, 1)], dtype=object)}
            )
        )
    assert table_digest(pd.DataFrame({"o": pd.Series([None, None], dtype=object)}))


def roundtrip_table(backend: str) -> Any:
    data = {
        "sample_id": ["s1", "s2", "s3"],
        "donor": ["d1", None, "d2"],
        "n": [1, None, 3],
        "f": [0.5, None, 2.0],
        "flag": [True, False, None],
        "cat": ["u", None, "v"],
        "when": [dt.datetime(2020, 1, 1), None, dt.datetime(2021, 6, 1)],
    }
    frame = pl.DataFrame(data).with_columns(
        pl.col("cat").cast(pl.Categorical),
        pl.col("when").dt.replace_time_zone("UTC"),
    )
    if backend == "polars":
        return frame
    if backend == "pyarrow":
        return frame.to_arrow()
    return pd.DataFrame(
        {
            "donor": data["donor"],
            "n": pd.array(data["n"], dtype="Int64"),
            "f": [0.5, np.nan, 2.0],
            "flag": pd.array(data["flag"], dtype="boolean"),
            "cat": pd.Categorical(data["cat"]),
            "when": pd.to_datetime(data["when"]).tz_localize("UTC"),
        },
        index=pd.Index(data["sample_id"], name="sample_id"),
    )


@pytest.mark.parametrize("source", BACKENDS)
def test_table_digest_after_write_table(tmp_path: Path, source: str) -> None:
    from cytepool.io import read_table, write_table

    table = roundtrip_table(source)
    write_table(table, tmp_path / "samples", index="sample_id")
    expected = table_digest(table)
    for backend in BACKENDS:
        assert table_digest(read_table(tmp_path / "samples", backend=backend)) == expected, backend


# --------------------------------------------------------------------------- golden digests

# Digests pinned as literal hex strings, recorded with the first (per-row Python) implementation:
# any change of the canonical table encoding makes these fail. Each case lists several backends
# and storages of the same logical table, all of which must give the pinned digest.

GOLDEN_STRINGS = ["é€😀", None, "", "CD4 T", "中文字符", "tab\tnl\n", None, "ß", "a" * 70, "🧬"]


def golden_long_strings() -> tuple[list[str], list[str | None]]:
    """70,000 ids of one width and symbols of varying widths (ASCII and not, some missing)."""
    ids = [f"ENSG{i:011d}" for i in range(70_000)]
    symbols = [
        None if i % 13 == 5 else ("" if i % 17 == 3 else f"G{i * 7919 % 100_003}" + "é" * (i % 3))
        for i in range(70_000)
    ]
    return ids, symbols


def golden_table(backend: str) -> Any:
    """A samples table with a column of each kind (strings, numbers, dates, categoricals)."""
    days = [dt.date(2020, 2, 29), None, dt.date(1900, 1, 1)]
    frame = roundtrip_table("polars").with_columns(pl.Series("day", days))
    if backend == "polars":
        return frame
    if backend == "pyarrow":
        return frame.to_arrow()
    table = roundtrip_table("pandas").assign(day=pd.Series(days, dtype=object).to_numpy())
    return table.assign(when=table["when"].dt.as_unit("us"))


def golden_frames(case: str) -> list[Any]:
    """The tables of one golden case, in several backends and storages."""
    values = GOLDEN_STRINGS
    if case == "strings":
        whole = pa.array(["x", *values, "y"])
        return [
            pd.DataFrame({"x": pd.Series(values, dtype=object)}),
            pd.DataFrame({"x": pd.array(values, dtype="string[python]")}),
            pd.DataFrame({"x": pd.array(values, dtype="string[pyarrow]")}),
            pd.DataFrame({"x": pd.Series(values, dtype=pd.StringDtype("python", na_value=np.nan))}),
            pd.DataFrame({"x": pd.Series(values, dtype=pd.ArrowDtype(pa.large_string()))}),
            pl.DataFrame({"x": pl.Series(values, dtype=pl.String)}),
            pl.DataFrame({"x": values[:4]}).vstack(pl.DataFrame({"x": values[4:]})),
            pa.table({"x": pa.array(values)}),
            pa.table({"x": pa.array(values, type=pa.string_view())}),
            pa.table(
                {"x": pa.chunked_array([whole.slice(1, 3), whole.slice(4, 0), whole.slice(4, 7)])}
            ),
        ]
    if case == "categorical":
        cats = sorted({v for v in values if v is not None})
        return [
            pd.DataFrame({"x": pd.Categorical(values)}),
            pd.DataFrame({"x": pd.Categorical(values, categories=["unused", *cats], ordered=True)}),
            pl.DataFrame({"x": pl.Series(values, dtype=pl.Categorical)}),
            pl.DataFrame({"x": pl.Series(values, dtype=pl.Enum(cats))}),
            pa.table({"x": pa.array(values).dictionary_encode()}),
        ]
    if case == "missing":
        return [
            pd.DataFrame({"x": pd.Series([None, np.nan, None], dtype=object)}),
            pd.DataFrame({"x": pd.array([None] * 3, dtype="string")}),
            pl.DataFrame({"x": pl.Series([None] * 3, dtype=pl.String)}),
            pa.table({"x": pa.array([None] * 3, type=pa.string())}),
        ]
    if case == "empty":
        return [
            pd.DataFrame({"x": pd.Series([], dtype=object), "n": pd.Series([], dtype="int64")}),
            pl.DataFrame({"x": pl.Series([], dtype=pl.String), "n": pl.Series([], dtype=pl.Int64)}),
            pa.table({"x": pa.array([], type=pa.string()), "n": pa.array([], type=pa.int64())}),
        ]
    if case == "table":
        return [golden_table(backend) for backend in BACKENDS]
    if case == "long":
        ids, symbols = golden_long_strings()
        return [
            pd.DataFrame({"symbol": symbols}, index=pd.Index(ids, name="feature_id")),
            pl.DataFrame({"feature_id": ids, "symbol": symbols}),
            pa.table({"feature_id": ids, "symbol": pa.array(symbols, type=pa.large_string())}),
        ]
    raise AssertionError(case)  # pragma: no cover


GOLDEN = {  # BLAKE3 (format 1.2): the digest of the column digests (strings: 4-byte lengths)
    "strings": "d73cdd282ab2b90905984de8415f2f6ba169d2f2f95eabcf1b9de39c8cb94494",
    "categorical": "f07541a2e8bfb4498cd8d56f332c1a9e737f129937aeb297e5383d6ad85834ba",
    "missing": "9ecba41181581368ad2362d29853b01b2ccfe7014814bf9129a158fe0066dd97",
    "empty": "90ae23435be63ef14d868aa9758379cca984236639d23cfa5485a6dbfffe08af",
    "table": "6ccfd8dc3b5602c7cf6f73364a40d9409d5f3da7ea8c5bd769e90b2f1a0fc6e9",
    "long": "524f8ce0beb941ee52e27c1b14c35fad9af29297c7fcaf557ee08f546d79f9fb",
}
GOLDEN_SHA256 = {  # formats 1.0 and 1.1: the values of the same tables, unchanged
    "strings": "73bddb4d5cf3fe4379b579550b2821cd90e582df663ac71ab0f88c4c50ea35d2",
    "categorical": "b609cacde4e91c704d10576fb9ba257441cc2c309d622165aca806de81982b03",
    "missing": "bdd70e365a33ff87ad5aa7657ef85892c8216756df4c184af32f2d29f06c743a",
    "empty": "22b8a8441f9fab3aad472db265dd27d315ff66fc15c0684c3ee9f88c8a3976ef",
    "table": "1de3f832d703d5420284637dd8c6dd9ccdb4aad91b6546f3c73a74fcd5c49336",
    "long": "1467e69a8a52afa9d41e4fd713686cab419fcefa391a0cad99ded479f9bc5986",
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_table_digest_golden(case: str) -> None:
    found = [table_digest(frame) for frame in golden_frames(case)]
    assert found == [GOLDEN[case]] * len(found)
    found = [table_digest(frame, "sha256") for frame in golden_frames(case)]
    assert found == [GOLDEN_SHA256[case]] * len(found)


def reference_string_digest(name: str, values: list[str | None]) -> str:
    """The digest of a one-column string table, built row by row as docs/cube.md says."""
    mask = np.array([v is None for v in values], dtype=np.uint8)
    bits = np.packbits(mask, bitorder="little").tobytes()
    column = text(name) + text("string") + bits + strings([v or "" for v in values], "blake3")
    return blake3_table(len(values), [column])


def string_storages(values: list[str | None]) -> list[Any]:
    """A string column ``x`` in the storages whose values are read in different ways."""
    padded = pa.array(["pad", *values, "pad"], type=pa.large_string())
    return [
        pd.DataFrame({"x": pd.Series(values, dtype=object)}),
        pd.DataFrame({"x": pd.array(values, dtype="string[pyarrow]")}),
        pl.DataFrame({"x": pl.Series(values, dtype=pl.String)}),
        pa.table({"x": pa.array(values, type=pa.string_view())}),
        pa.table({"x": padded.slice(1, len(values))}),
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.none() | st.text(max_size=12), max_size=40))
@example(["\0", None, "a\0b", ""])  # a NUL inside a value
@example(["abc", "déf", "ghi"])  # values of one size in bytes
@example([None, None])
@example([])
def test_table_digest_of_strings_matches_the_documented_encoding(
    values: list[str | None],
) -> None:
    expected = reference_string_digest("x", values)
    for frame in string_storages(values):
        assert table_digest(frame) == expected, type(frame)
    keys = canonical_column(pd.Series(values, dtype=object), "x").row_keys()
    assert keys == [None if v is None else v.encode() for v in values]


def test_table_digest_of_a_lone_surrogate() -> None:
    """It raised a bare UnicodeEncodeError, naming neither column nor row."""
    with pytest.raises(
        ValueError,
        match=r"^column 'o': row 1 holds 'b\\ud800', which is not valid Unicode \(it holds a "
        r"lone surrogate\)",
    ):
        table_digest(pd.DataFrame({"o": pd.Series(["a", "b\ud800"], dtype=object)}))


# --------------------------------------------------------------------------- Digests


def make_digests() -> Digests:
    h = hashlib.sha256(b"x").hexdigest()
    return Digests(
        tables={"samples": h, "groups": h, "features": h},
        cells=h,
        normalization=h,
        layers={"counts": (h, None)},
        dtypes={"counts": "int32"},
    )


def test_digests_json_round_trip() -> None:
    d = make_digests()
    assert not d.complete
    assert Digests.from_json(d.to_json()) == d
    with pytest.raises(
        ValueError,
        match=r"the fingerprint needs every group digest; missing \[\"'counts' group 1\"\]",
    ):
        d.fingerprint()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda j: [], "expected an object with keys"),
        (lambda j: {**j, "extra": 1}, "expected an object with keys"),
        (lambda j: {**j, "cells": "abc"}, "cells must be 64 lowercase hex digits"),
        (lambda j: {**j, "cells": "A" * 64}, "cells must be 64 lowercase hex digits"),
        (lambda j: {**j, "tables": {"samples": j["cells"]}}, "expected tables"),
        (lambda j: {**j, "tables": "x"}, "'tables' must be an object"),
        (lambda j: {**j, "layers": {"counts": "ab"}}, "layer 'counts' must be a list"),
        (lambda j: {**j, "layers": {"counts": [1]}}, "layer 'counts' group 0 must be 64"),
        (lambda j: {**j, "dtypes": {}}, "the layers .* and the layers with a data type"),
        (lambda j: {**j, "dtypes": {"counts": "int16"}}, "not a layer type"),
        (
            lambda j: {
                **j,
                "layers": {"a": [j["cells"]], "b": []},
                "dtypes": {"a": "int32", "b": "int32"},
            },
            "different numbers of groups",
        ),
    ],
)
def test_digests_from_json_errors(edit: Any, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        Digests.from_json(edit(make_digests().to_json()))


# --------------------------------------------------------------------------- cube fingerprints


def cube_of(values: np.ndarray[Any, Any], backend: str = "pandas", **kwargs: Any) -> Cube:
    n_g, n_s, n_f = values.shape

    def table(data: dict[str, list[Any]]) -> Any:
        return {"pandas": pd.DataFrame, "polars": pl.DataFrame, "pyarrow": pa.table}[backend](data)

    args: dict[str, Any] = {
        "samples": table({"sample_id": [f"s{i}" for i in range(n_s)], "donor": ["d"] * n_s}),
        "groups": table({"group_id": [f"g{i}" for i in range(n_g)]}),
        "features": table({"feature_id": [f"f{i}" for i in range(n_f)]}),
        "cells": np.ones((n_g, n_s), dtype=int),
    }
    args.update(kwargs)
    layers = args.pop("layers", {"counts": values})
    return Cube(layers, **args)


VALUES = np.random.default_rng(5).integers(0, 100, (3, 4, 6)).astype("int32")


def test_fingerprint_invariance_layout_backend() -> None:
    base = cube_of(VALUES).fingerprint
    assert cube_of(np.asfortranarray(VALUES)).fingerprint == base
    wide = np.zeros((3, 4, 12), dtype="int32")
    wide[:, :, ::2] = VALUES
    assert cube_of(wide[:, :, ::2]).fingerprint == base
    assert cube_of(VALUES.astype(">i4")).fingerprint == base
    for backend in BACKENDS:
        assert cube_of(VALUES, backend).fingerprint == base
    assert cube_of(VALUES, metadata={"x": 1}).fingerprint == base
    assert cube_of(VALUES.copy()).fingerprint == base  # the same input pooled twice


@pytest.mark.parametrize(
    ("compression", "chunks"), [("gzip", (1, 2, 3)), (None, (3, 4, 6)), ("gzip", (2, 3, 5))]
)
def test_fingerprint_invariance_laziness(tmp_path: Path, compression: Any, chunks: Any) -> None:
    from cytepool.io.zarr import open_array, write_array

    write_array(tmp_path / "counts", VALUES, chunks=chunks, compression=compression)
    lazy = cube_of(VALUES, layers={"counts": open_array(tmp_path / "counts")})
    base = cube_of(VALUES)
    assert lazy.fingerprint == base.fingerprint
    assert lazy.select().fingerprint == base.fingerprint
    assert lazy.select(features=list(range(6))).fingerprint == base.fingerprint
    assert lazy.select(groups=[2, 0]).fingerprint == base.select(groups=[2, 0]).fingerprint
    merged = lazy.merge_groups({"g0": ["g0"]})
    assert merged.fingerprint == base.fingerprint


@settings(max_examples=40, deadline=None)
@given(
    g=st.integers(0, 2),
    s=st.integers(0, 3),
    f=st.integers(0, 5),
    delta=st.integers(1, 5),
)
def test_fingerprint_sees_every_value(g: int, s: int, f: int, delta: int) -> None:
    changed = VALUES.copy()
    changed[g, s, f] += delta
    assert cube_of(changed).fingerprint != cube_of(VALUES).fingerprint


def test_fingerprint_sensitivity() -> None:
    base = cube_of(VALUES)
    samples = pd.DataFrame({"sample_id": ["s0", "s1", "s2", "s3"], "donor": ["d"] * 4})
    others = [
        cube_of(VALUES.astype("int64")),
        cube_of(VALUES.astype("float32")),
        cube_of(VALUES, layers={"umis": VALUES}),
        cube_of(VALUES, layers={"counts": VALUES, "detected": VALUES}),
        cube_of(VALUES, samples=samples.assign(sample_id=["s0", "s1", "s2", "x"])),
        cube_of(VALUES, samples=samples.assign(donor=["d", "d", "d", "e"])),
        cube_of(VALUES, samples=samples.assign(age=[1, 2, 3, 4])),
        cube_of(VALUES, samples=samples.drop(columns="donor")),
        cube_of(VALUES, groups=pd.DataFrame({"group_id": ["g0", "g1", "g2"], "x": [1, 1, 1]})),
        cube_of(VALUES, features=pd.DataFrame({"feature_id": [f"f{i}" for i in range(5)] + ["z"]})),
        cube_of(VALUES, cells=np.full((3, 4), 2)),
        cube_of(VALUES, normalization=Normalization("n", np.ones((3, 4)))),
        cube_of(VALUES, normalization=Normalization("n", np.full((3, 4), 2.0))),
        base.select(samples=[1, 0, 2, 3]),
    ]
    prints = [c.fingerprint for c in others]
    assert base.fingerprint not in prints
    assert len(set(prints)) == len(prints)


def test_fingerprint_of_empty_cube() -> None:
    empty = cube_of(np.zeros((0, 2, 3), dtype="int32"), cells=np.zeros((0, 2), dtype=int))
    assert re.fullmatch("blake3:[0-9a-f]{64}", empty.fingerprint)
    assert (
        empty.fingerprint
        != cube_of(
            np.zeros((0, 2, 3), dtype="int64"), cells=np.zeros((0, 2), dtype=int)
        ).fingerprint
    )


def pandas_strings_cube() -> Cube:
    """Tables of Python strings: object columns in pandas 2, ``str`` columns in pandas 3."""
    return Cube(
        {"counts": np.arange(12, dtype=np.int64).reshape(2, 3, 2)},
        samples=pd.DataFrame({"sample_id": ["s1", "s2", "s3"], "donor": ["a", None, "b"]}),
        groups=pd.DataFrame({"group_id": ["B", "T"], "lineage": ["lymphoid", "lymphoid"]}),
        features=pd.DataFrame({"feature_id": ["g1", "g2"], "symbol": ["CD19", "CD3E"]}),
        cells=np.ones((2, 3), dtype=np.int64),
    )


def test_fingerprint_is_the_same_under_pandas_2_and_3(tmp_path: Path) -> None:
    """The golden value holds on both stacks CI runs (pandas 2 and pandas 3), after a file too."""
    from cytepool.io import read_cube, write_cube

    cube = pandas_strings_cube()
    assert cube.fingerprint == (
        "blake3:dcdec5a6ec2706bbf93beaac7ebfce81d5bcd36e616c9efa019829706c7aedb9"
    )
    write_cube(cube, tmp_path / "strings.cube.zarr")
    again = read_cube(tmp_path / "strings.cube.zarr")
    assert again.fingerprint == cube.fingerprint
    for name in ("samples", "groups", "features"):
        read, made = getattr(again, name), getattr(cube, name)
        pd.testing.assert_frame_equal(read.astype("string"), made.astype("string"))
        if int(pd.__version__.split(".")[0]) >= 3:  # pandas 2 reads object with None as string
            assert dict(read.dtypes) == dict(made.dtypes)  # str stays str


@pytest.mark.parametrize("kind", ["one size", "runs", "mixed"])
@pytest.mark.parametrize("n", [0, 1, 63, 64, 1000])
def test_string_columns_encode_each_row_as_its_size_then_its_bytes(kind: str, n: int) -> None:
    """Rows in runs of one size are copied run by run, others with a mask: the same bytes."""
    from cytepool._utf8 import Utf8Buffer
    from cytepool.fingerprint import CanonicalColumn

    rng = np.random.default_rng(n)
    sizes = {
        "one size": np.full(n, 5),
        "runs": np.sort(rng.integers(0, 6, n)),
        "mixed": rng.integers(0, 6, n),
    }[kind]
    values = ["".join(rng.choice(["a", "é", "\0"], int(k))) for k in sizes]
    column = CanonicalColumn("c", "string", np.zeros(n, dtype=bool), Utf8Buffer.from_str(values))
    rows = b"".join(struct.pack("<Q", len(v.encode())) + v.encode() for v in values)
    assert column.encode().endswith(struct.pack("<Q", len(rows)) + rows)


@pytest.mark.parametrize("n_sizes", [1, 3, 12, 40])  # runs, sizes a few at a time, a mask
@pytest.mark.parametrize("sorted_sizes", [False, True])
@pytest.mark.parametrize("gap", [0, 4])  # rows back to back; rows after vlen-utf8 length fields
def test_length_prefixed_rows_are_each_size_then_bytes(
    n_sizes: int, sorted_sizes: bool, gap: int
) -> None:
    from cytepool.fingerprint import _length_prefixed

    rng = np.random.default_rng(n_sizes)
    sizes = rng.integers(0, n_sizes, 5000)
    if sorted_sizes:
        sizes.sort()
    source = rng.integers(0, 256, 3 + int(sizes.sum()) + gap * len(sizes), dtype=np.uint8)
    starts = 3 + np.cumsum(sizes + gap) - sizes  # 3 bytes before the first row's gap
    expected = b"".join(
        int(size).to_bytes(8, "little") + source[start : start + size].tobytes()
        for size, start in zip(sizes.tolist(), starts.tolist(), strict=True)
    )
    assert _length_prefixed(source, starts, sizes, gap).tobytes() == expected


SIGNALLING = {  # NaNs a damaged or hostile file may hold: numpy warns when it adds to them
    "float32": np.array([0x7F800001], dtype=np.uint32).view(np.float32),
    "float64": np.array([0x7FF0000000000001], dtype=np.uint64).view(np.float64),
}


@pytest.mark.parametrize("dtype", list(SIGNALLING))
def test_a_signalling_nan_is_digested_without_a_warning(dtype: str) -> None:
    """Found by the store fuzz: a float layer chunk holding a signalling NaN made
    group_digest raise numpy's "invalid value encountered in add" (an error under -W error)
    before the value check refused the NaN."""
    from cytepool.fingerprint import canonical_column, group_digest

    nan = SIGNALLING[dtype]
    block = np.concatenate([nan, np.array([-0.0, 1.0], dtype=dtype)]).reshape(1, 3)
    assert re.fullmatch(r"[0-9a-f]{64}", group_digest(dtype, block))
    nw = pytest.importorskip("narwhals.stable.v2")
    pd = pytest.importorskip("pandas")
    column = canonical_column(nw.from_native(pd.Series(block[0]), series_only=True), "x")
    assert column.mask.tolist() == [True, False, False]


def test_the_fingerprint_follows_digests_changed_after_it_was_made() -> None:
    """Digests make their fingerprint once for what they hold: a dict changed afterwards (the
    dataclass is frozen, its dicts are not) gives the fingerprint of the new digests."""
    from cytepool._assemble import parts_of

    digests = parts_of(make_cube()).digests()
    before = digests.fingerprint()
    assert digests.fingerprint() == before
    digests.layers["counts"] = ("0" * 64,) * len(digests.layers["counts"])
    after = digests.fingerprint()
    assert after != before
    assert after == Digests.from_json(digests.to_json()).fingerprint()
