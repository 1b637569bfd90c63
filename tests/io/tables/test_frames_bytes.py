"""The bytes write_table puts on disk: pinned, so that speed-ups cannot change the format.

Each case writes a mixed table and hashes every file of the store (paths and contents). The
golden digests were recorded with the implementation before the string fast paths (strings
encoded from Python ``str`` objects, one chunk at a time, by ``cytepool.io.zarr.write_array``).
They use no compression, whose bytes depend on the zstd/zlib library version; compressed
stores are compared with ``write_array``'s own output in the same process instead.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.io import read_table, write_table
from cytepool.io.zarr import open_array, write_array

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")
pa = pytest.importorskip("pyarrow")

WORDS = ["", "ü", "a\0b", "日本語", "🧬 cell", "x" * 40, "plain", "\0", "é€", "tail\0"]


def _strings(n: int, *, empty: range = range(0)) -> list[str]:
    """Strings of varying lengths and scripts; rows in ``empty`` are ""."""
    values = [f"{WORDS[i % len(WORDS)]}{i * 7919 % 1013}" * (i % 3) for i in range(n)]
    for i in empty:
        values[i] = ""
    return values


def _objects(frame: Any, columns: list[str]) -> Any:
    """``columns`` (and a string index) as object columns, which pandas 3 would make ``str``.

    The bytes of ``str`` columns differ (see the case "pandas-inferred-strings"); object columns
    are written the same by every pandas.
    """
    frame = frame.astype(dict.fromkeys(columns, object))
    if not isinstance(frame.index, pd.RangeIndex):
        frame.index = frame.index.astype(object)
    return frame


def _pandas_mixed() -> Any:
    n = 53
    i = np.arange(n)
    nulls = i % 10 == 3
    names = [f"cell-{k}-é" if k % 5 else f"c{k}" for k in range(n)]
    frame = pd.DataFrame(
        {
            "int64": i * 7919 % 1001 - 500,
            "float64": i / 7,
            "bool": i % 3 == 0,
            "string": np.array(_strings(n, empty=range(8, 17)), dtype=object),
            "category": pd.Categorical.from_codes(
                np.where(nulls, -1, i * 13 % 20), [f"type_{k:02d}" for k in range(20)]
            ),
            "nullable": pd.arrays.IntegerArray(i * 31 % 1000, nulls),
            "nullable_string": pd.array(
                [None if m else s for s, m in zip(_strings(n), nulls, strict=True)],
                dtype="string",
            ),
            "objects_with_none": np.array([None if k % 4 == 1 else f"o{k}" for k in range(n)]),
            "nullable_bool": pd.array([None if m else k % 2 == 0 for k, m in enumerate(nulls)]),
            "datetime": pd.to_datetime(i * 86_400 * 1000 + 1_600_000_000_000, unit="ms").as_unit(
                "ns"  # the unit of pandas 2 (pandas 3 keeps "ms")
            ),
            "all_empty": np.array([""] * n, dtype=object),
            "fixed": np.array([f"cell-{k:08d}" for k in range(n)], dtype=object),
        },
        index=pd.Index(names, name="cell"),
    )
    return _objects(frame, ["string", "objects_with_none", "all_empty", "fixed"])


def _pandas_range() -> Any:
    n = 30
    frame = pd.DataFrame(
        {"s": np.array(_strings(n), dtype=object), "x": np.arange(n)},
        index=pd.RangeIndex(-20, -20 + 3 * n, 3),
    )
    return _objects(frame, ["s"])


def _pandas_large() -> Any:
    n = 150_000
    frame = pd.DataFrame(
        {
            "fixed": np.array([f"cell-{k:08d}" for k in range(n)], dtype=object),
            "varying": np.array(_strings(n, empty=range(70_000, 140_000)), dtype=object),
        },
        index=pd.Index(np.array([f"c{k}" for k in range(n)], dtype=object)),
    )
    return _objects(frame, ["fixed", "varying"])


def _pandas_inferred() -> Any:
    """Strings as pandas infers them: object in pandas 2, ``str`` in pandas 3 (other bytes)."""
    values = _strings(21, empty=range(3, 6))
    return pd.DataFrame(
        {"plain": values, "missing": [None if k % 4 == 1 else s for k, s in enumerate(values)]},
        index=pd.Index([f"r{k}" for k in range(21)], name="row"),
    )


def _polars_mixed() -> Any:
    n = 53
    nulls = [k % 10 == 3 for k in range(n)]
    strings = _strings(n, empty=range(8, 17))
    return pl.DataFrame(
        {
            "string": [None if m else s for s, m in zip(strings, nulls, strict=True)],
            "plain": _strings(n),
            "categorical": pl.Series([f"t{k % 7}" for k in range(n)], dtype=pl.Categorical),
            "enum": pl.Series(
                [None if m else ["lo", "mid", "hi"][k % 3] for k, m in enumerate(nulls)],
                dtype=pl.Enum(["lo", "mid", "hi"]),
            ),
            "int": [None if m else k * 31 for k, m in enumerate(nulls)],
            "float": [k / 3 for k in range(n)],
            "bool": [None if m else k % 2 == 0 for k, m in enumerate(nulls)],
            "date": [dt.date(2020, 1, 1) + dt.timedelta(days=k) for k in range(n)],
            "all_empty": [""] * n,
        }
    )


def _polars_large() -> Any:
    n = 150_000
    return pl.DataFrame(
        {
            "fixed": [f"cell-{k:08d}" for k in range(n)],
            "varying": _strings(n, empty=range(70_000, 140_000)),
            "x": np.arange(n),
        }
    )


def _arrow_mixed() -> Any:
    n = 53
    strings = _strings(n, empty=range(8, 17))
    nulls = [k % 10 == 3 for k in range(n)]
    with_nulls = [None if m else s for s, m in zip(strings, nulls, strict=True)]
    return pa.table(
        {
            "id": pa.array([f"id{k}" for k in range(n)]),
            "string": pa.array(with_nulls, type=pa.string()),
            "large": pa.array(strings, type=pa.large_string()),
            "dictionary": pa.array([f"d{k % 4}" for k in range(n)]).dictionary_encode(),
            "int": pa.array([None if m else k for k, m in enumerate(nulls)], type=pa.int32()),
        }
    )


def _arrow_chunked() -> Any:
    strings = _strings(40)
    column = pa.chunked_array([strings[:11], strings[11:12], [], strings[12:]])
    return pa.table({"s": column})


CASES: dict[str, tuple[Callable[[], Any], dict[str, Any]]] = {
    "pandas-mixed": (_pandas_mixed, {"chunks": 8}),
    "pandas-default-chunks": (_pandas_mixed, {}),
    "pandas-range-index": (_pandas_range, {"chunks": 4}),
    "pandas-large": (_pandas_large, {}),
    "pandas-inferred-strings": (_pandas_inferred, {"chunks": 8}),
    "polars-mixed": (_polars_mixed, {"chunks": 8}),
    "polars-mixed-index": (_polars_mixed, {"chunks": 5, "index": "plain"}),
    "polars-large": (_polars_large, {}),
    "pyarrow-mixed": (_arrow_mixed, {"chunks": 8, "index": "id"}),
    "pyarrow-chunked": (_arrow_chunked, {"chunks": 6}),
}

GOLDEN: dict[str, str | dict[int, str]] = {
    "pandas-mixed": "2a1849054dbb254a5341a24c0e66f2aef61ff9d3b928e0e46d1c60812886d82a",
    "pandas-default-chunks": "3aadadb08c3f341fedab82c5b3301f85df6442597f6a03617c74c0243b86c4a3",
    "pandas-range-index": "9ab6d061944deac0333776e5946af8915008f6166e11b475dd8cde54b63a8dfd",
    "pandas-large": "b930bf429844d08ad38620dbccf9f0eac133c041176fa2cac648e0b87d07c1db",
    # pandas 2: object columns (string-array, nullable NA); pandas 3: str (nullable NaN)
    "pandas-inferred-strings": {
        2: "29daee8e29dea28bdced6546dbbde2b207adb073a14b90587062ff0747585bae",
        3: "5e7c8f81ce465e3896afd4bbd92e449d4d4b737f033c55ede45e62de730a0887",
    },
    "polars-mixed": "f9485994384ff477b69d572f548ad25e25d929451bfbf15c76b833a99069a7b0",
    "polars-mixed-index": "fa4d4d4b50f196dfefdc4d2cbc7e4f49109d903ed00929fb14eb15b440faabe1",
    "polars-large": "9951725924816a7329e2a0fcb5d8c6c2a79f10b06065f3288fcf293c26fe3849",
    "pyarrow-mixed": "2420796438cc8925c4bac6aa4ce12625da1f183d21298a742f5c4703451f6439",
    "pyarrow-chunked": "d1875a8aea2e48cb7df90c07000a5c5a08d142974fff443f983d8cb9cb8fd180",
}


def store_files(root: Path) -> dict[str, bytes]:
    """Every file of a store by its path relative to the root ('/'-separated)."""
    files = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def store_digest(root: Path) -> str:
    """A sha256 over the sorted paths and contents of every file of a store."""
    digest = hashlib.sha256()
    for name, content in sorted(store_files(root).items()):
        digest.update(f"{name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def _write(case: str, path: Path, **extra: Any) -> None:
    make, options = CASES[case]
    write_table(make(), path, **{"compression": None, **options, **extra})


@pytest.mark.parametrize("case", list(CASES))
def test_store_bytes_are_unchanged(case: str, tmp_path: Path) -> None:
    _write(case, tmp_path / "t")
    assert store_digest(tmp_path / "t") == golden(case)


def golden(case: str) -> str:
    """The digest of a case, for this pandas where it depends on the pandas version."""
    digest = GOLDEN[case]
    return digest if isinstance(digest, str) else digest[int(pd.__version__.split(".")[0])]


@pytest.mark.parametrize("compression", ["zstd", "gzip"])
@pytest.mark.parametrize("case", ["pandas-mixed", "polars-mixed", "pyarrow-mixed"])
def test_compressed_string_arrays_match_write_array(
    case: str, compression: str, tmp_path: Path
) -> None:
    """Each string array's files are what write_array writes for its values (same process)."""
    _write(case, tmp_path / "t", compression=compression)
    checked = 0
    for meta in sorted((tmp_path / "t").rglob("zarr.json")):
        directory = meta.parent
        try:
            array = open_array(directory)
        except ValueError:  # a group
            continue
        if array.dtype.kind != "T":
            continue
        again = tmp_path / "again" / directory.relative_to(tmp_path / "t")
        again.parent.mkdir(parents=True, exist_ok=True)
        write_array(
            again,
            np.asarray(array, dtype=object),
            chunks=array.chunks,
            compression=compression,
            attributes=array.attributes,
        )
        assert store_files(directory) == store_files(again), directory
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("case", list(CASES))
def test_golden_cases_round_trip(case: str, tmp_path: Path) -> None:
    make, options = CASES[case]
    frame = make()
    _write(case, tmp_path / "t")
    backend = type(frame).__module__.split(".")[0]
    result = read_table(tmp_path / "t", backend=backend)
    if backend == "pandas":
        # an index of strings reads back as anndata reads it: object in pandas 2, str in 3
        frame = frame.set_axis(frame.index.astype(str))
        for name in ("objects_with_none", "missing"):  # object with None: read back nullable
            if name in frame and frame[name].dtype == object:
                frame[name] = frame[name].astype(pd.StringDtype())
        pd.testing.assert_frame_equal(result, frame, check_exact=True)
    elif backend == "polars":
        if "index" in options:
            name = options["index"]
            frame = frame.select(name, pl.exclude(name))
        assert result.dtypes == frame.dtypes
        assert result.to_dicts() == frame.to_dicts()
    else:
        assert result.column_names == frame.column_names
        assert result.to_pylist() == frame.to_pylist()


if __name__ == "__main__":  # print the digests of the current implementation
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        for name in CASES:
            _write(name, Path(directory) / name)
            print(f'    "{name}": "{store_digest(Path(directory) / name)}",')
