"""Property tests of cytepool.io.zarr: every indexing form against numpy, and round trips.

Arrays are written with cytepool's own ``write_array`` (hypothesis draws the shape, including
zero-length and 0-d arrays, the chunk shape, the data type and the compression), then read back
through ``ZarrArray.__getitem__`` and ``ZarrArray.oindex`` and compared with numpy indexing the
same data. The interop tests do the same through zarr-python in both directions.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cytepool.io.zarr import DATA_TYPES, open_array, write_array

# Small arrays and bounded example counts keep this file at a few seconds;
# CYTEPOOL_HYPOTHESIS_EXAMPLES=2000 runs a longer campaign locally.
EXAMPLES = int(os.environ.get("CYTEPOOL_HYPOTHESIS_EXAMPLES", "50"))
FAST = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEWER = settings(FAST, max_examples=max(EXAMPLES // 2, 1))

CORE_NAMES = sorted(DATA_TYPES)
TIME_UNITS = ("Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as")
COMPRESSIONS = st.sampled_from(
    [
        (None, None),
        ("gzip", None),
        ("gzip", 0),
        ("gzip", 1),
        ("gzip", 9),
        ("zstd", None),
        ("zstd", 0),
        ("zstd", 1),
        ("zstd", -3),
        ("zstd", 19),
    ]
)


@contextmanager
def fresh_dir() -> Iterator[Path]:
    """A new empty directory for one hypothesis example (function fixtures do not reset)."""
    with tempfile.TemporaryDirectory(prefix="cytepool-zarr-") as name:
        yield Path(name)


@st.composite
def shapes_and_chunks(draw: st.DrawFn, max_ndim: int = 3, max_side: int = 7) -> Any:
    shape = tuple(draw(st.lists(st.integers(0, max_side), max_size=max_ndim)))
    chunks = tuple(draw(st.integers(1, max(side, 1) + 2)) for side in shape)
    return shape, chunks


@st.composite
def distinct_data(draw: st.DrawFn, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Mostly distinct values (so a wrong position shows) with a box of zeros (unstored chunks)."""
    size = int(np.prod(shape, dtype=np.int64))
    values = np.arange(1, size + 1).reshape(shape)
    if dtype.kind == "b":
        data = (values % 3 != 0).astype(dtype)
    elif dtype.kind == "c":
        data = (values + 1j * (size + 1 - values)).astype(dtype)
    else:
        data = values.astype(dtype)
    data = np.array(data, dtype=dtype)  # ufuncs on 0-d arrays give scalars
    box = []
    for side in shape:
        start = draw(st.integers(0, side))
        box.append(slice(start, draw(st.integers(start, side))))
    data[tuple(box)] = 0
    return data


def assert_identical(actual: Any, expected: Any) -> None:
    """Same kind of result (scalar or array), dtype, shape and bytes (NaN and -0.0 exact)."""
    if isinstance(expected, np.generic):
        assert isinstance(actual, np.generic), f"expected a numpy scalar, got {type(actual)}"
    else:
        assert isinstance(actual, np.ndarray), f"expected an ndarray, got {type(actual)}"
        assert actual.flags.owndata, "a read returns an array that owns its memory"
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.dtype.isnative
    assert np.shape(actual) == np.shape(expected)
    if expected.dtype.kind == "T":
        assert np.asarray(actual).tolist() == np.asarray(expected).tolist()
    else:
        a, e = np.ascontiguousarray(actual), np.ascontiguousarray(expected)
        assert a.tobytes() == e.tobytes(), (actual, expected)


def native(data: np.ndarray) -> np.ndarray:
    return data.astype(data.dtype.newbyteorder("="))


# ---------------------------------------------------------------------------------------------
# Selections


def basic_index(n: int) -> st.SearchStrategy[Any]:
    bound = st.none() | st.integers(-n - 3, n + 3)
    step = st.none() | st.integers(-4, 4).filter(bool)
    slices = st.builds(slice, bound, bound, step)
    if n == 0:
        return slices
    positions = st.integers(-n, n - 1)
    return positions | positions.map(np.int64) | slices  # numpy integers index like ints


@st.composite
def basic_keys(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    parts: list[Any] = [draw(basic_index(n)) for n in shape]
    if draw(st.booleans()):
        i = draw(st.integers(0, len(parts)))
        j = draw(st.integers(i, len(parts)))
        parts = [*parts[:i], Ellipsis, *parts[j:]]
    else:
        parts = parts[: draw(st.integers(0, len(parts)))]
    if len(parts) == 1 and draw(st.booleans()):
        return parts[0]
    return tuple(parts)


def orthogonal_index(n: int) -> st.SearchStrategy[Any]:
    options: list[st.SearchStrategy[Any]] = [
        basic_index(n),
        st.just(np.empty(0, dtype=np.intp)),
        st.lists(st.booleans(), min_size=n, max_size=n),
        st.lists(st.booleans(), min_size=n, max_size=n).map(lambda m: np.array(m, dtype=bool)),
    ]
    if n:
        positions = st.lists(st.integers(-n, n - 1), min_size=1, max_size=6)
        int_dtypes = st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.intp])
        options += [
            positions,
            st.builds(lambda p, t: np.array(p, dtype=t), positions, int_dtypes),
        ]
    return st.one_of(options)


@st.composite
def orthogonal_keys(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    parts: list[Any] = [draw(orthogonal_index(n)) for n in shape]
    if draw(st.booleans()):
        i = draw(st.integers(0, len(parts)))
        j = draw(st.integers(i, len(parts)))
        parts = [*parts[:i], Ellipsis, *parts[j:]]
    else:
        parts = parts[: draw(st.integers(0, len(parts)))]
    if len(parts) == 1 and draw(st.booleans()):
        return parts[0]
    return tuple(parts)


def expand(key: Any, ndim: int) -> list[Any]:
    """One entry per axis: the ellipsis and the missing trailing axes become full slices."""
    parts = list(key) if isinstance(key, tuple) else [key]
    if any(p is Ellipsis for p in parts):
        i = next(k for k, p in enumerate(parts) if p is Ellipsis)
        parts[i : i + 1] = [slice(None)] * (ndim - len(parts) + 1)
    return parts + [slice(None)] * (ndim - len(parts))


def orthogonal(data: np.ndarray, key: Any) -> np.ndarray:
    """Reference orthogonal indexing with numpy: each axis on its own."""
    out = data
    axis = 0
    for part in expand(key, data.ndim):
        if isinstance(part, int | np.integer):
            out = np.take(out, part, axis=axis)
        elif isinstance(part, slice):
            out = out[(slice(None),) * axis + (part,)]
            axis += 1
        else:
            positions = np.asarray(part)
            if positions.dtype == bool:
                positions = np.flatnonzero(positions)
            out = np.take(out, positions.astype(np.intp), axis=axis)
            axis += 1
    return np.asarray(out, dtype=data.dtype)  # keeps StringDType for a 0-d result


INDEX_DTYPES = st.sampled_from(
    [
        "bool",
        "int8",
        "uint16",
        "int32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
    ]
)


@st.composite
def written_arrays(draw: st.DrawFn) -> Any:
    shape, chunks = draw(shapes_and_chunks())
    dtype = np.dtype(draw(INDEX_DTYPES))
    data = draw(distinct_data(shape, dtype))
    compression, level = draw(COMPRESSIONS)
    return data, chunks, compression, level


@FAST
@given(case=written_arrays(), data=st.data())
def test_getitem_matches_numpy(case: Any, data: st.DataObject) -> None:
    values, chunks, compression, level = case
    with fresh_dir() as tmp:
        write_array(tmp / "a", values, chunks=chunks, compression=compression, level=level)
        array = open_array(tmp / "a")
        for _ in range(4):
            key = data.draw(basic_keys(values.shape), label="key")
            assert_identical(array[key], values[key])


@FAST
@given(case=written_arrays(), data=st.data())
def test_oindex_matches_numpy(case: Any, data: st.DataObject) -> None:
    values, chunks, compression, level = case
    with fresh_dir() as tmp:
        write_array(tmp / "a", values, chunks=chunks, compression=compression, level=level)
        array = open_array(tmp / "a")
        for _ in range(4):
            key = data.draw(orthogonal_keys(values.shape), label="key")
            expected = orthogonal(values, key)
            actual = array.oindex[key]
            assert np.asarray(actual).dtype == expected.dtype
            assert np.shape(actual) == expected.shape
            assert np.asarray(actual).tobytes() == expected.tobytes(), (key, actual, expected)


@FEWER
@given(case=written_arrays(), data=st.data())
def test_out_of_range_selections_raise_index_error(case: Any, data: st.DataObject) -> None:
    values, chunks, compression, level = case
    if values.ndim == 0:
        return
    with fresh_dir() as tmp:
        write_array(tmp / "a", values, chunks=chunks, compression=compression, level=level)
        array = open_array(tmp / "a")
        axis = data.draw(st.integers(0, values.ndim - 1), label="axis")
        n = values.shape[axis]
        bad = data.draw(st.integers(n, n + 5) | st.integers(-n - 5, -n - 1), label="bad")
        key = (slice(None),) * axis + (bad,)
        with pytest.raises(IndexError):
            values[key]
        with pytest.raises(IndexError):
            array[key]
        with pytest.raises(IndexError):
            array.oindex[key]
        with pytest.raises(IndexError):
            array.oindex[(slice(None),) * axis + ([0, bad] if n else [bad],)]
        with pytest.raises(IndexError):
            array.oindex[(slice(None),) * axis + (np.ones(n + 1, dtype=bool),)]
        with pytest.raises(IndexError):
            array.oindex[(slice(None),) * axis + (np.zeros((1, 1), dtype=np.intp),)]
        with pytest.raises(IndexError):
            array[(0,) * (values.ndim + 1)]


# ---------------------------------------------------------------------------------------------
# Round trips write_array -> open_array


@st.composite
def core_arrays(draw: st.DrawFn, names: list[str] = CORE_NAMES) -> np.ndarray:
    shape, _ = draw(shapes_and_chunks())
    dtype = np.dtype(draw(st.sampled_from(names)))
    if dtype.itemsize > 1 and draw(st.booleans()):
        dtype = dtype.newbyteorder(">")
    values = draw(hnp.arrays(dtype, shape))
    if values.ndim >= 2 and draw(st.booleans()):
        values = np.asfortranarray(values)
    return values


@pytest.mark.parametrize("name", CORE_NAMES)
@settings(FAST, max_examples=max(EXAMPLES // 5, 1))
@given(
    data=st.data(),
    compression=COMPRESSIONS,
    attributes=st.none() | st.dictionaries(st.text(max_size=4), st.integers() | st.text()),
)
def test_round_trip_core_dtypes(
    name: str, data: st.DataObject, compression: Any, attributes: Any
) -> None:
    values = data.draw(core_arrays([name]), label="values")
    chunks = tuple(data.draw(st.integers(1, max(side, 1) + 2)) for side in values.shape)
    names = data.draw(st.none() | st.tuples(*[st.none() | st.text() for _ in values.shape]))
    with fresh_dir() as tmp:
        write_array(
            tmp / "a",
            values,
            chunks=chunks,
            compression=compression[0],
            level=compression[1],
            attributes=attributes,
            dimension_names=names,
        )
        array = open_array(tmp / "a")
        assert array.shape == values.shape
        assert array.ndim == values.ndim
        assert tuple(array.chunks) == chunks
        assert array.dtype == values.dtype.newbyteorder("=")
        assert array.attributes == (attributes or {})
        if names is None:
            assert array.dimension_names is None
        else:
            assert tuple(array.dimension_names) == tuple(names)
        assert isinstance(array.fill_value, np.generic)
        assert array.fill_value.dtype == array.dtype
        assert array.fill_value.tobytes() == bytes(array.dtype.itemsize)  # zero, not -0.0
        assert_identical(np.asarray(array), native(values))
        again = pickle.loads(pickle.dumps(array))
        assert_identical(again[...], native(values))
        # A ZarrArray is itself a valid source for write_array.
        write_array(tmp / "b", array, chunks=tuple(reversed(chunks)) or (), compression=None)
        assert_identical(np.asarray(open_array(tmp / "b")), native(values))


def test_zero_chunks_are_not_stored() -> None:
    values = np.zeros((6, 4), dtype=np.float32)
    values[4:, 2:] = -0.0  # not all-zero bytes: stored
    values[0, 0] = 1
    with fresh_dir() as tmp:
        write_array(tmp / "a", values, chunks=(2, 2))
        stored = sorted(p.relative_to(tmp / "a").as_posix() for p in (tmp / "a").rglob("*"))
        assert [p for p in stored if p.startswith("c/") and (tmp / "a" / p).is_file()] == [
            "c/0/0",
            "c/2/1",
        ]
        assert_identical(np.asarray(open_array(tmp / "a")), values)


@st.composite
def string_arrays(draw: st.DrawFn, nul: bool = True) -> np.ndarray:
    shape, _ = draw(shapes_and_chunks())
    size = int(np.prod(shape, dtype=np.int64))
    kind = draw(st.sampled_from(["T", "U", "O"]))
    # numpy's fixed-width "U" strings drop trailing NULs; StringDType and str keep them.
    nul = nul and kind != "U"
    alphabet = st.characters(codec="utf-8", exclude_characters="" if nul else "\x00")
    texts = draw(st.lists(st.text(alphabet, max_size=5), min_size=size, max_size=size))
    if nul and texts and draw(st.booleans()):
        texts[0] += "\x00"  # a trailing NUL
    if kind == "T":
        values = np.array(texts, dtype=np.dtypes.StringDType())
    elif kind == "U":
        values = np.array(texts, dtype=str) if texts else np.empty(0, dtype="U1")
    else:
        values = np.array([*texts, None], dtype=object)[:-1]
    return values.reshape(shape)


@FEWER
@given(values=string_arrays(), data=st.data(), compression=COMPRESSIONS)
def test_round_trip_strings(values: np.ndarray, data: st.DataObject, compression: Any) -> None:
    chunks = tuple(data.draw(st.integers(1, max(side, 1) + 2)) for side in values.shape)
    with fresh_dir() as tmp:
        write_array(tmp / "a", values, chunks=chunks, compression=compression[0])
        array = open_array(tmp / "a")
        assert array.dtype == np.dtypes.StringDType()
        assert array.fill_value == ""
        result = np.asarray(array)
        assert result.dtype == np.dtypes.StringDType()
        assert result.shape == values.shape
        assert result.tolist() == values.tolist()
        key = data.draw(orthogonal_keys(values.shape), label="key")
        expected = orthogonal(values.astype(np.dtypes.StringDType()), key)
        actual = array.oindex[key]  # a str for a 0-d result, as numpy gives for StringDType
        assert (actual if isinstance(actual, str) else actual.tolist()) == expected.tolist()


@st.composite
def picking_keys(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    """An orthogonal key of integer arrays or masks on most axes (a slice on the others)."""
    parts: list[Any] = []
    for n in shape:
        positions = st.lists(st.integers(-n, n - 1), min_size=1, max_size=6)
        mask = st.lists(st.booleans(), min_size=n, max_size=n).map(np.array)
        options = [positions, positions, mask] if n else [mask]
        bound = st.none() | st.integers(-n - 3, n + 3)
        step = st.none() | st.integers(-4, 4).filter(bool)
        parts.append(draw(st.one_of([*options, st.builds(slice, bound, bound, step)])))
    return tuple(parts)


@FAST
@given(
    shape=st.lists(st.integers(0, 7), min_size=2, max_size=3).map(tuple),
    data=st.data(),
    compression=COMPRESSIONS,
)
def test_oindex_long_strings_match_numpy(
    shape: tuple[int, ...], data: st.DataObject, compression: Any
) -> None:
    """Strings of over 15 bytes (which numpy 2.1's StringDType keeps out of line) picked by
    integer arrays or masks on two or more axes, a chunk feeding output positions that need
    not be adjacent: the same strings as numpy on an object array."""
    chunks = tuple(data.draw(st.integers(1, max(side, 1) + 2)) for side in shape)
    size = int(np.prod(shape, dtype=np.int64))
    texts = [f"a-long-string-number-{i:04d}" + "é" * (i % 3) for i in range(size)]
    values = np.array([*texts, None], dtype=object)[:-1].reshape(shape)
    with fresh_dir() as tmp:
        write_array(tmp / "a", values, chunks=chunks, compression=compression[0])
        array = open_array(tmp / "a")
        for _ in range(3):
            key = data.draw(picking_keys(values.shape), label="key")
            assert array.oindex[key].tolist() == orthogonal(values, key).tolist()


@st.composite
def time_arrays(draw: st.DrawFn) -> np.ndarray:
    shape, _ = draw(shapes_and_chunks())
    kind = draw(st.sampled_from(["M8", "m8"]))
    dtype = np.dtype(f"{kind}[{draw(st.sampled_from(TIME_UNITS))}]")
    if draw(st.booleans()):
        dtype = dtype.newbyteorder(">")
    ticks = draw(hnp.arrays(np.int64, shape))
    return ticks.astype(ticks.dtype.newbyteorder(dtype.byteorder)).view(dtype)


@FEWER
@given(values=time_arrays(), data=st.data(), compression=COMPRESSIONS)
def test_round_trip_datetime_and_timedelta(
    values: np.ndarray, data: st.DataObject, compression: Any
) -> None:
    chunks = tuple(data.draw(st.integers(1, max(side, 1) + 2)) for side in values.shape)
    with fresh_dir() as tmp:
        write_array(tmp / "a", values, chunks=chunks, compression=compression[0])
        array = open_array(tmp / "a")
        assert array.dtype == values.dtype.newbyteorder("=")
        assert np.isnat(array.fill_value)
        assert_identical(np.asarray(array), native(values))


# ---------------------------------------------------------------------------------------------
# Interop with zarr-python, both directions


@st.composite
def interop_arrays(draw: st.DrawFn) -> np.ndarray:
    kind = draw(st.sampled_from(["core", "core", "core", "string", "time"]))
    if kind == "string":
        # zarr-python 3.1.6 reads a 0-d "\x00" as "" (through a fixed-width numpy str).
        return draw(string_arrays(nul=False)).astype(np.dtypes.StringDType())
    if kind == "time":
        return native(draw(time_arrays()))
    return native(draw(core_arrays()))


@pytest.mark.interop
@FEWER
@given(values=interop_arrays(), data=st.data(), compression=COMPRESSIONS)
def test_zarr_python_reads_what_cytepool_writes(
    values: np.ndarray, data: st.DataObject, compression: Any
) -> None:
    zarr = pytest.importorskip("zarr")
    chunks = tuple(data.draw(st.integers(1, max(side, 1) + 2)) for side in values.shape)
    with fresh_dir() as tmp:
        write_array(tmp / "a", values, chunks=chunks, compression=compression[0])
        theirs = zarr.open_array(tmp / "a", mode="r")
        assert theirs.shape == values.shape
        result = theirs[...]
        if values.dtype.kind == "T":
            assert np.asarray(result).tolist() == values.tolist()
        else:
            assert np.asarray(result).tobytes() == values.tobytes()


@pytest.mark.interop
@FEWER
@given(values=interop_arrays(), data=st.data())
def test_cytepool_reads_what_zarr_python_writes(values: np.ndarray, data: st.DataObject) -> None:
    zarr = pytest.importorskip("zarr")
    codecs = pytest.importorskip("zarr.codecs")
    chunks = tuple(data.draw(st.integers(1, max(side, 1) + 2)) for side in values.shape)
    compressors = data.draw(
        st.sampled_from(
            [
                None,
                codecs.GzipCodec(level=1),
                codecs.ZstdCodec(level=3),
                codecs.ZstdCodec(level=1, checksum=True),
                (codecs.GzipCodec(level=1), codecs.ZstdCodec(level=1)),
            ]
        ),
        label="compressors",
    )
    kwargs: dict[str, Any] = {"chunks": chunks, "compressors": compressors}
    if values.dtype.kind != "T":
        kwargs["serializer"] = codecs.BytesCodec(
            endian=data.draw(st.sampled_from(["little", "big"]), label="endian")
        )
        if values.dtype.kind not in "mM":
            kwargs["fill_value"] = data.draw(hnp.from_dtype(values.dtype), label="fill")
    if values.ndim and data.draw(st.booleans(), label="sharded"):
        kwargs["shards"] = tuple(c * data.draw(st.integers(1, 3)) for c in chunks)
    kwargs["chunk_key_encoding"] = data.draw(
        st.sampled_from(
            [
                {"name": "default", "separator": "/"},
                {"name": "default", "separator": "."},
                {"name": "v2", "separator": "."},
                {"name": "v2", "separator": "/"},
            ]
        ),
        label="chunk_key_encoding",
    )
    with fresh_dir() as tmp:
        zarr.create_array(tmp / "a", data=values, **kwargs)
        expected = zarr.open_array(tmp / "a", mode="r")[...]
        array = open_array(tmp / "a")
        result = np.asarray(array)
        assert result.shape == values.shape
        if values.dtype.kind == "T":
            assert result.tolist() == values.tolist()
            return
        assert result.dtype == values.dtype
        assert result.tobytes() == np.asarray(expected).tobytes()
        np.testing.assert_array_equal(result, values)
        key = data.draw(orthogonal_keys(values.shape), label="key")
        assert np.asarray(array.oindex[key]).tobytes() == orthogonal(result, key).tobytes()
