"""The direct HDF5 chunk reader (cytepool.io.anndata._hdf5): the same values as h5py for every
layout it decodes, None where it does not, and a FormatError for every corrupt file."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from special_files import SPECIAL_FILES, make_special, without_blocking

from cytepool.errors import FormatError, InputError, InputIndexError
from cytepool.io.anndata._hdf5 import DirectDataset, check_regular, read_together

FILTERS = {
    "raw": {},
    "gzip": {"compression": "gzip"},
    "gzip-shuffle": {"compression": "gzip", "compression_opts": 9, "shuffle": True},
    "gzip-shuffle-fletcher32": {"compression": "gzip", "shuffle": True, "fletcher32": True},
    "lzf": {"compression": "lzf"},
    "lzf-shuffle": {"compression": "lzf", "shuffle": True},
    "shuffle": {"shuffle": True},
    "fletcher32": {"fletcher32": True},
}
DTYPES = ["<f4", "<f8", "<i4", "<i8", "<u2", "<u8", "|u1", "|i1", ">f4", ">f8", ">i4", ">u8"]


def _values(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Counts-like values (runs of zeros, small numbers) and a few of the type's largest."""
    rng = np.random.default_rng(seed)
    values = rng.negative_binomial(1, 0.4, size=shape) * (rng.random(shape) < 0.6)
    kind = np.dtype(dtype).newbyteorder("=")
    largest = np.iinfo(kind).max if kind.kind in "iu" else np.finfo(kind).max
    values = values.astype(dtype)
    values.flat[:: max(1, values.size // 7)] = largest
    return values


def _write(path: Path, name: str, data: np.ndarray, **options: Any) -> Path:
    with h5py.File(path, "a") as file:
        file.create_dataset(name, data=data, **options)
    return path


def _h5py(path: Path, name: str) -> np.ndarray:
    with h5py.File(path, "r") as file:
        return file[name][()]


def _direct(path: Path, name: str = "x") -> DirectDataset:
    found = DirectDataset.open_or_reason(path, name)
    assert isinstance(found, DirectDataset), found
    return found


def _assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype.newbyteorder("=")
    assert got.dtype.isnative
    np.testing.assert_array_equal(got, want, strict=False)
    assert got.shape == want.shape


# --- the same values as h5py -----------------------------------------------------------------


@pytest.mark.parametrize("filters", list(FILTERS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_filter_and_type_reads_as_h5py(
    tmp_path: Path, filters: str, dtype: str, inflate: str
) -> None:
    data = _values((10_007,), dtype)
    path = _write(tmp_path / "x.h5", "x", data, chunks=(1000,), **FILTERS[filters])
    with _direct(path) as dataset:
        assert dataset.filters == tuple(
            name
            for name, on in (
                ("shuffle", "shuffle" in filters),
                ("deflate", "gzip" in filters),
                ("lzf", "lzf" in filters),
                ("fletcher32", "fletcher32" in filters),
            )
            if on
        )
        _assert_same(dataset.read(0, 10_007), _h5py(path, "x"))
        _assert_same(dataset.read(999, 2001), data[999:2001])
        _assert_same(dataset.read(10_006, 10_007), data[10_006:])


@pytest.mark.parametrize("dtype", ["<f4", ">f8", ">i4", "<i8"])
@pytest.mark.parametrize("shape", [(0,), (1,), (12_345,), (301, 57), (5, 0)])
def test_contiguous_datasets_are_read_in_place(tmp_path: Path, dtype: str, shape: Any) -> None:
    data = _values(shape, dtype)
    path = _write(tmp_path / "x.h5", "x", data)
    with _direct(path) as dataset:
        assert dataset.chunks is None
        assert dataset.dtype == np.dtype(dtype).newbyteorder("=")
        _assert_same(dataset.read(0, shape[0]), data)
        if shape[0] > 3:
            _assert_same(dataset.read(1, shape[0] - 2), data[1:-2])


@pytest.mark.parametrize(
    "chunks",
    [(20, 10), (7, 57), (301, 1), (1, 57), (64, 64), (13, 20)],
    ids=["both-axes", "whole-rows", "columns", "rows", "wider-than-data", "uneven"],
)
@pytest.mark.parametrize("filters", ["raw", "gzip-shuffle", "lzf", "fletcher32"])
def test_two_dimensional_chunks(tmp_path: Path, chunks: Any, filters: str) -> None:
    data = _values((301, 57), ">f4")
    resizable = {"maxshape": (None, None)}  # chunks may then be wider than the data
    path = _write(tmp_path / "x.h5", "x", data, chunks=chunks, **resizable, **FILTERS[filters])
    with _direct(path) as dataset:
        _assert_same(dataset.read(0, 301), data)
        for start, stop in [(0, 1), (6, 8), (19, 41), (300, 301), (100, 100)]:
            _assert_same(dataset.read(start, stop), data[start:stop])


def _partly_written(path: Path, **options: Any) -> np.ndarray:
    with h5py.File(path, "w") as file:
        dataset = file.create_dataset("x", shape=(10_000,), dtype="<i4", chunks=(100,), **options)
        dataset[250:510] = 5
        dataset[9_990:] = 9
        return dataset[()]


@pytest.mark.parametrize(
    "options", [{}, {"fillvalue": -3}, {"fillvalue": 7, "compression": "gzip"}]
)
def test_chunks_never_written_read_as_the_fill_value(tmp_path: Path, options: Any) -> None:
    want = _partly_written(tmp_path / "x.h5", **options)
    with _direct(tmp_path / "x.h5") as dataset:
        _assert_same(dataset.read(0, 10_000), want)
        _assert_same(dataset.read(120, 260), want[120:260])


def test_a_dataset_never_written_reads_as_the_fill_value(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "x.h5", "w") as file:
        file.create_dataset("x", shape=(1000,), dtype=">f8", fillvalue=2.5)
        file.create_dataset("y", shape=(1000, 3), dtype="<i2", chunks=(10, 2), fillvalue=-1)
    with _direct(tmp_path / "x.h5") as dataset:
        _assert_same(dataset.read(0, 1000), np.full(1000, 2.5))
    with _direct(tmp_path / "x.h5", "y") as dataset:
        _assert_same(dataset.read(3, 17), np.full((14, 3), -1, "<i2"))


@pytest.mark.parametrize("options", [{}, {"compression": "gzip"}])
def test_chunks_never_written_with_fill_time_never_read_as_h5py(
    tmp_path: Path, options: Any
) -> None:
    """libhdf5 leaves values it never wrote untouched when the fill time is "never": h5py (and
    anndata) read zeros there, not the fill value."""
    want = _partly_written(tmp_path / "x.h5", fillvalue=7, fill_time="never", **options)
    assert want[0] == 0
    assert want[250] == 5
    with _direct(tmp_path / "x.h5") as dataset:
        _assert_same(dataset.read(0, 10_000), want)
        _assert_same(dataset.read(120, 260), want[120:260])


def test_a_dataset_never_written_with_fill_time_never_reads_as_h5py(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "x.h5", "w") as file:
        file.create_dataset("x", shape=(1000,), dtype=">f8", fillvalue=2.5, fill_time="never")
    want = _h5py(tmp_path / "x.h5", "x")
    np.testing.assert_array_equal(want, np.zeros(1000))
    with _direct(tmp_path / "x.h5") as dataset:
        _assert_same(dataset.read(0, 1000), want)


def test_a_chunk_that_skips_a_filter_is_read_without_it(tmp_path: Path) -> None:
    """h5py's LZF filter is optional: a chunk it cannot shrink is stored raw, its mask bit set.
    A deflate chunk written raw with its mask bit set reads the same way."""
    rng = np.random.default_rng(1)
    data = np.concatenate([np.zeros(2000, "<u4"), rng.integers(0, 2**32, 1000, "<u4")])
    path = _write(tmp_path / "x.h5", "x", data, chunks=(1000,), compression="lzf")
    with h5py.File(path, "a") as file:
        masks = [file["x"].id.get_chunk_info(k).filter_mask for k in range(3)]
        assert masks == [0, 0, 1]
        file.create_dataset("y", data=data, chunks=(1000,), compression="gzip", shuffle=True)
        file["y"].id.write_direct_chunk((1000,), np.arange(1000, dtype="<u4").tobytes(), 3)
        want = file["y"][()]
    with _direct(path) as dataset:
        _assert_same(dataset.read(0, 3000), data)
    with _direct(path, "y") as dataset:
        _assert_same(dataset.read(0, 3000), want)
        assert dataset.read(1000, 1003).tolist() == [0, 1, 2]


def _ranges(length: int) -> Any:
    return st.tuples(st.integers(0, length), st.integers(0, length)).map(sorted)


@pytest.fixture(scope="module")
def ranges_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ranges") / "x.h5"
    _write(path, "gzip", _values((4321,), ">i8"), chunks=(100,), compression="gzip", shuffle=True)
    _write(path, "raw", _values((4321,), "<f4"), chunks=(64,))
    _write(path, "dense", _values((433, 21), "<f8"), chunks=(10, 8), compression="lzf")
    with h5py.File(path, "a") as file:  # chunks never written among the others
        file.create_dataset("sparse", shape=(4321,), dtype="<u2", chunks=(50,), fillvalue=3)
        file["sparse"][700:1300] = 11
    return path


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
@pytest.mark.parametrize("name", ["gzip", "raw", "dense", "sparse"])
def test_any_range_reads_as_h5py(ranges_file: Path, name: str, data: st.DataObject) -> None:
    want = _h5py(ranges_file, name)
    start, stop = data.draw(_ranges(want.shape[0]))
    with _direct(ranges_file, name) as dataset:
        _assert_same(dataset.read(start, stop), want[start:stop])


def test_read_into_out_and_read_together(tmp_path: Path) -> None:
    data, wide = _values((5000,), "<f4"), _values((5000,), ">i8")
    path = _write(tmp_path / "x.h5", "x", data, chunks=(300,), compression="gzip")
    _write(path, "y", wide, chunks=(700,))
    with _direct(path) as x, _direct(path, "y") as y:
        out = np.full(1000, -1, "<f4")
        assert x.read(100, 1100, out=out) is out
        _assert_same(out, data[100:1100])
        got = read_together([(x, 0, 5000), (y, 20, 4000), (x, 7, 7)])
        _assert_same(got[0], data)
        _assert_same(got[1], wide[20:4000])
        assert got[2].shape == (0,)
        with pytest.raises(InputError, match="out must be a writable C-contiguous float32"):
            x.read(0, 10, out=np.zeros(10, "<f8"))
        with pytest.raises(InputError, match=r"of shape \(10,\), found float32 \(9,\)"):
            x.read(0, 10, out=np.zeros(9, "<f4"))
        with pytest.raises(
            InputIndexError, match=r"range \[10, 5001\) is outside .*'x' of length 5000"
        ):
            x.read(10, 5001)
        with pytest.raises(InputIndexError, match="range"):
            x.read(10, 9)
        with pytest.raises(InputError, match="2 outputs for 1 requests"):
            read_together([(x, 0, 1)], outs=[None, None])


def test_close_and_repr(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.h5", "x", np.arange(10), chunks=(5,), compression="gzip")
    dataset = _direct(path)
    assert repr(dataset) == (
        f"<DirectDataset 'x' of {path}: shape (10,), int64, chunks (5,), deflate>"
    )
    dataset.close()
    dataset.close()
    with pytest.raises(InputError, match=r"x\.h5: dataset .x. was closed: open it again"):
        dataset.read(0, 10)


# --- what is left to h5py ---------------------------------------------------------------------


def _fallbacks(path: Path) -> dict[str, str]:
    with h5py.File(path, "w") as file:
        file.create_dataset("scaleoffset", data=np.arange(100), chunks=(10,), scaleoffset=0)
        file.create_dataset("strings", data=np.array([b"a", b"bc"]))
        file.create_dataset("three", data=np.zeros((2, 2, 2)))
        file.create_dataset("scalar", data=1.0)
        file.create_dataset("bool", data=np.array([True, False]))
        file.create_dataset("complex", data=np.array([1j]))
        space = h5py.h5s.create_simple((10,))
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(file.id, b"compact", h5py.h5t.STD_I32LE, space, plist)
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_chunk((5,))
        plist.set_filter(h5py.h5z.FILTER_NBIT, 0, ())
        h5py.h5d.create(file.id, b"nbit", h5py.h5t.STD_I32LE, space, plist)
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        plist.set_chunk((5,))
        plist.set_filter(32001, h5py.h5z.FLAG_OPTIONAL, (2, 2, 4, 40))
        h5py.h5d.create(file.id, b"blosc", h5py.h5t.STD_I32LE, space, plist)
        odd = h5py.h5t.STD_I32LE.copy()
        odd.set_precision(20)
        h5py.h5d.create(file.id, b"padded", odd, space)
    return {
        "scaleoffset": "scaleoffset (HDF5 filter 6) is not decoded",
        "strings": "values of type |S2",
        "three": "3-dimensional",
        "scalar": "0-dimensional",
        "bool": "values of type bool",
        "complex": "values of type complex128",
        "compact": "compact and virtual",
        "nbit": "nbit (HDF5 filter 5)",
        "blosc": "blosc (HDF5 filter 32001)",
        "padded": "unusual HDF5 int32 type",
    }


def test_what_is_not_decoded_is_left_to_h5py(tmp_path: Path) -> None:
    reasons = _fallbacks(tmp_path / "x.h5")
    for name, reason in reasons.items():
        found = DirectDataset.open_or_reason(tmp_path / "x.h5", name)
        assert isinstance(found, str), name
        assert reason in found, (name, found)
        assert DirectDataset.open(tmp_path / "x.h5", name) is None


def _behind_a_user_block(path: Path, data: np.ndarray, **options: Any) -> Path:
    """``data`` as dataset ``x`` of a file with a user block of 512 bytes (as MuData's .h5mu
    has), from whose end libhdf5 counts the file's addresses."""
    with h5py.File(path, "w", userblock_size=512) as file:
        file.create_dataset("x", data=data, **options)
    return path


@pytest.mark.parametrize(
    "options",
    [{"chunks": (500,)}, {"chunks": (500,), "compression": "gzip"}, {}],
    ids=["raw", "gzip", "contiguous"],
)
def test_a_file_with_a_user_block_is_read_directly(tmp_path: Path, options: Any) -> None:
    """h5py's byte offsets count from the file's start (HDF5 1.14.4 and 2.0): checked, then
    used (MuData's .h5mu files were read through h5py)."""
    data = _values((2_345,), "<i4")
    path = _behind_a_user_block(tmp_path / "x.h5", data, **options)
    with _direct(path) as dataset:
        _assert_same(dataset.read(0, len(data)), _h5py(path, "x"))


def test_offsets_that_may_count_from_a_user_block_are_left_to_h5py(tmp_path: Path) -> None:
    """Offsets found not to count from the file's start (as some HDF5 versions gave them:
    counted from the user block's end, or anything else) leave the dataset to h5py."""
    import dataclasses

    from cytepool.io.anndata import _hdf5

    data = _values((2_345,), "<i4")
    path = _behind_a_user_block(tmp_path / "x.h5", data, chunks=(500,), compression="gzip")
    fd = os.open(path, os.O_RDONLY)
    try:
        layout = _hdf5._read_layout(path, "x", fd)
        assert isinstance(layout, _hdf5._Layout)  # the file's own offsets: trusted
        with h5py.File(path, "r") as opened:
            assert _hdf5._past_user_block(opened["x"], layout, fd, 512) is None
            for shift in (-512, 8):
                index = dataclasses.replace(layout.index, offsets=layout.index.offsets + shift)
                moved = dataclasses.replace(layout, index=index)
                found = _hdf5._past_user_block(opened["x"], moved, fd, 512)
                assert "user block" in str(found), shift
    finally:
        os.close(fd)


# --- files written by anndata -----------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "gzip", "lzf"])
@pytest.mark.parametrize("layout", ["csr", "csc", "dense"])
def test_files_written_by_anndata(tmp_path: Path, compression: Any, layout: str) -> None:
    ad = pytest.importorskip("anndata")
    scipy_sparse = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(2)
    counts = (rng.negative_binomial(1, 0.5, (400, 300)) * (rng.random((400, 300)) < 0.1)).astype(
        "f4"
    )
    x = {"csr": scipy_sparse.csr_matrix, "csc": scipy_sparse.csc_matrix, "dense": np.asarray}[
        layout
    ](counts)
    path = tmp_path / "cells.h5ad"
    ad.AnnData(x).write_h5ad(path, compression=compression)
    want = ad.read_h5ad(path).X
    if layout == "dense":
        with _direct(path, "X") as dataset:
            _assert_same(dataset.read(0, 400), want)
        return
    parts = {}
    for part in ("data", "indices", "indptr"):
        with _direct(path, f"X/{part}") as dataset:
            parts[part] = dataset.read(0, dataset.shape[0])
            _assert_same(parts[part], getattr(want, part))
    rebuilt = type(want)((parts["data"], parts["indices"], parts["indptr"]), shape=want.shape)
    assert (rebuilt != want).nnz == 0


# --- corrupt and hostile files -----------------------------------------------------------------


def test_a_special_file_is_refused_without_blocking(tmp_path: Path, special: str) -> None:
    path = tmp_path / "cells.h5ad"
    make_special(path, special)
    problem = f"is not a regular file: it is {SPECIAL_FILES[special]}"
    with pytest.raises(FormatError, match=problem):
        without_blocking(lambda: DirectDataset.open(path, "X/data"), path)
    with pytest.raises(FormatError, match=problem):
        check_regular(path)


def test_files_that_are_not_hdf5_or_lack_the_dataset(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        DirectDataset.open(tmp_path / "missing.h5ad", "X")
    (tmp_path / "text.h5ad").write_text("not HDF5")
    with pytest.raises(FormatError, match=r"text.h5ad: not a readable HDF5 file \(.*signature"):
        DirectDataset.open(tmp_path / "text.h5ad", "X")
    path = _write(tmp_path / "x.h5", "group/x", np.arange(3))
    with pytest.raises(FormatError, match=r"x\.h5: expected a dataset at .X., found nothing"):
        DirectDataset.open(path, "X")
    with pytest.raises(FormatError, match="expected a dataset at 'group', found group"):
        DirectDataset.open(path, "group")


def _chunk_key(path: Path, name: str, k: int) -> int:
    """Where the v1 B-tree key of chunk ``k`` of a 1-D dataset starts in the file: its stored
    size (4 bytes), filter mask (4), element offset (8), a zero (8), then the chunk's address
    (8)."""
    with h5py.File(path, "r") as file:
        info = file[name].id.get_chunk_info(k)
    key = struct.pack(
        "<IIQQQ", info.size, info.filter_mask, info.chunk_offset[0], 0, info.byte_offset
    )
    raw = path.read_bytes()
    assert raw.count(key) == 1
    return raw.find(key)


def _patch(path: Path, at: int, fmt: str, value: int) -> None:
    with open(path, "r+b") as file:
        file.seek(at)
        file.write(struct.pack(fmt, value))


CHUNK_INDEX_LIES = {
    "address-past-the-end": (
        24,
        "<Q",
        10**15,
        r"chunk at \(300,\): 400 bytes at byte 10{15} go past the end of the file",
    ),
    "size-past-the-end": (
        0,
        "<I",
        10**6,
        r"chunk at \(300,\): 1000000 bytes at byte \d+ go past the end",
    ),
    "size-short": (
        0,
        "<I",
        100,
        r"chunk at \(300,\): 100 bytes stored, expected 400 for a chunk of 400 bytes through "
        "no filters",
    ),
    "off-the-grid": (
        8,
        "<Q",
        2000,
        r"a chunk at \(2000,\), off the grid of \(100,\) chunks in \(1000,\)",
    ),
    "listed-twice": (8, "<Q", 400, r"the chunk at \(400,\) is listed twice"),
    "filter-mask": (
        4,
        "<I",
        2,
        r"chunk at \(300,\): filter mask 0x2 skips filters the dataset does not have",
    ),
    "misaligned": (8, "<Q", 150, r"its layout or chunk index cannot be read"),
}


@pytest.mark.parametrize("lie", list(CHUNK_INDEX_LIES))
def test_a_chunk_index_that_lies_is_refused_when_opening(tmp_path: Path, lie: str) -> None:
    path = _write(tmp_path / "x.h5", "x", np.arange(1000, dtype="<f4"), chunks=(100,))
    at, fmt, value, problem = CHUNK_INDEX_LIES[lie]
    _patch(path, _chunk_key(path, "x", 3) + at, fmt, value)
    with pytest.raises(FormatError, match=f"x.h5: dataset 'x'.*{problem}"):
        DirectDataset.open(path, "x")


def test_a_compressed_chunk_larger_than_its_filters_can_make_is_refused(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "x.h5",
        "x",
        np.zeros(1000, "<f4"),
        chunks=(100,),
        compression="lzf",
        shuffle=True,
    )
    with h5py.File(path, "a") as file:
        file["x"].id.write_direct_chunk((300,), bytes(500), 0)
    problem = (
        r"chunk at \(300,\): 500 bytes stored, expected 1 to 428 for a chunk of 400 bytes "
        "through shuffle, lzf"
    )
    with pytest.raises(FormatError, match=problem):
        DirectDataset.open(path, "x")


def _with_chunk(tmp_path: Path, stored: bytes, mask: int = 0, **options: Any) -> DirectDataset:
    """A dataset of 1000 float32 in chunks of 100 whose chunk at 300 stores ``stored``."""
    path = _write(tmp_path / "x.h5", "x", np.arange(1000, dtype="<f4"), chunks=(100,), **options)
    with h5py.File(path, "a") as file:
        file["x"].id.write_direct_chunk((300,), stored, mask)
    return _direct(path)


CHUNK = np.arange(300, 400, dtype="<f4").tobytes()
CORRUPT_CHUNKS = {
    "deflate-garbage": (
        {"compression": "gzip"},
        b"\x78\x9c" + bytes(range(200)),
        "corrupt deflate stream",
    ),
    "deflate-cut-short": (
        {"compression": "gzip"},
        zlib.compress(CHUNK)[:-9],
        r"the deflate stream is cut short",
    ),
    "deflate-too-short": (
        {"compression": "gzip"},
        zlib.compress(CHUNK[:-4]),
        "decodes to 396 bytes, expected 400",
    ),
    "deflate-too-long": (
        {"compression": "gzip"},
        zlib.compress(CHUNK + b"abcd"),
        "decodes to more than the 400 bytes",
    ),
    "deflate-trailing-bytes": (
        {"compression": "gzip"},
        zlib.compress(CHUNK) + b"\0\0",
        "2 bytes after the end of the deflate stream",
    ),
    "deflate-bad-checksum": (
        {"compression": "gzip"},
        zlib.compress(CHUNK)[:-1] + b"?",
        "corrupt deflate stream",
    ),
    "lzf-bad-reference": (
        {"compression": "lzf"},
        b"\x20\x05" + bytes(10),
        "an LZF back-reference points before the start",
    ),
    "lzf-too-long": (
        {"compression": "lzf"},
        b"\x1f" + bytes(32) + bytes([0xE0, 0xFF, 0]) * 2,
        "decodes to more than the 400 bytes",
    ),
    "lzf-cut-inside": (
        {"compression": "lzf"},
        b"\x1f" + bytes(20),
        "the LZF stream is cut short inside an instruction",
    ),
    "lzf-short": (
        {"compression": "lzf"},
        b"\x1f" + bytes(32),
        "the LZF stream decodes to 32 bytes, expected 400",
    ),
    "fletcher32-mismatch": (
        {"fletcher32": True},
        CHUNK + b"\0\0\0\1",
        "Fletcher-32 checksum mismatch",
    ),
}


@pytest.mark.parametrize("case", list(CORRUPT_CHUNKS))
def test_a_corrupt_chunk_is_a_format_error(tmp_path: Path, case: str, inflate: str) -> None:
    options, stored, problem = CORRUPT_CHUNKS[case]
    with _with_chunk(tmp_path, stored, **options) as dataset:
        _assert_same(dataset.read(0, 300), np.arange(300, dtype="<f4"))  # the others are fine
        with pytest.raises(FormatError, match=rf"x.h5: dataset 'x', chunk at \(300,\): {problem}"):
            dataset.read(0, 1000)


def test_an_lzf_chunk_cut_short_anywhere_is_a_format_error(tmp_path: Path) -> None:
    """h5py's own LZF filter returns a short chunk when the stream stops between instructions,
    and the rest of the chunk is left as it was: plausible wrong values, no error."""
    data = np.repeat(np.arange(250, dtype="<i4"), 4)
    path = _write(tmp_path / "x.h5", "x", data, chunks=(1000,), compression="lzf")
    with h5py.File(path, "r") as file:
        stored = file["x"].id.read_direct_chunk((0,))[1]
    for cut in range(1, len(stored)):
        with h5py.File(path, "a") as file:
            file["x"].id.write_direct_chunk((0,), stored[:cut], 0)
        with _direct(path) as dataset, pytest.raises(FormatError, match=r"chunk at \(0,\)"):
            dataset.read(0, 1000)


def test_a_fletcher32_checksum_in_either_byte_order_is_accepted(tmp_path: Path) -> None:
    """Before HDF5 1.6.3 the checksum was stored with the bytes of each half swapped."""
    path = _write(
        tmp_path / "x.h5", "x", np.arange(1000, dtype="<f4"), chunks=(100,), fletcher32=True
    )
    with h5py.File(path, "r") as file:
        stored = file["x"].id.read_direct_chunk((300,))[1]
    body, checksum = stored[:-4], stored[-4:]
    swapped = bytes([checksum[1], checksum[0], checksum[3], checksum[2]])
    with h5py.File(path, "a") as file:
        file["x"].id.write_direct_chunk((300,), body + swapped, 0)
    with _direct(path) as dataset:
        _assert_same(dataset.read(0, 1000), np.arange(1000, dtype="<f4"))


@pytest.mark.parametrize("chunks", [(100,), None])
def test_a_file_cut_short_after_opening_is_a_format_error(tmp_path: Path, chunks: Any) -> None:
    path = _write(tmp_path / "x.h5", "x", np.arange(1000, dtype="<f4"), chunks=chunks)
    with _direct(path) as dataset:
        os.truncate(path, path.stat().st_size - 3000)
        with pytest.raises(FormatError, match=r"x\.h5: dataset .x.*the file ends at byte"):
            dataset.read(0, 1000)


def test_a_truncated_file_is_refused_when_opening(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.h5", "x", np.arange(1000, dtype="<f4"))
    _write(path, "y", np.arange(10))  # written after x: the file's metadata stays readable
    with h5py.File(path, "r") as file:
        end = file["x"].id.get_offset() + 2000
    raw = path.read_bytes()
    cut = tmp_path / "cut.h5"
    cut.write_bytes(raw[:end])
    with pytest.raises(FormatError):
        DirectDataset.open(cut, "x")


@pytest.fixture(scope="module")
def stored_chunks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """A file of one chunked dataset per filter pipeline, and the stored bytes of its chunk 1."""
    path = tmp_path_factory.mktemp("mutations") / "x.h5"
    chunks = {}
    for name in ("gzip", "gzip-shuffle-fletcher32", "fletcher32", "lzf-shuffle"):
        _write(path, name, _values((3000,), "<i4"), chunks=(1000,), **FILTERS[name])
        with h5py.File(path, "r") as file:
            chunks[name] = file[name].id.read_direct_chunk((1000,))[1]
    return path, chunks


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
@pytest.mark.parametrize("name", ["gzip", "gzip-shuffle-fletcher32", "fletcher32"])
def test_a_mutated_checked_chunk_reads_as_h5py_or_fails(
    tmp_path: Path, stored_chunks: tuple[Path, dict[str, bytes]], name: str, data: st.DataObject
) -> None:
    """Bytes of a deflate or Fletcher-32 chunk changed: h5py either reads it (a stream that is
    still valid) and the direct read gives the same values, or it fails, and so does the
    direct read, with a FormatError naming the chunk."""
    source, chunks = stored_chunks
    stored = bytearray(chunks[name])
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(stored) - 1))
        stored[at] = data.draw(st.integers(0, 255))
    path = tmp_path / "x.h5"
    path.write_bytes(source.read_bytes())
    with h5py.File(path, "a") as file:
        file[name].id.write_direct_chunk((1000,), bytes(stored), 0)
        try:
            want = file[name][()]
        except OSError:
            want = None
    with _direct(path, name) as dataset:
        if want is None:
            with pytest.raises(FormatError, match=rf"'{name}', chunk at \(1000,\): "):
                dataset.read(0, 3000)
        else:
            _assert_same(dataset.read(0, 3000), want)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_mutated_lzf_chunk_decodes_exactly_or_fails(
    stored_chunks: tuple[Path, dict[str, bytes]], data: st.DataObject
) -> None:
    """Changed, cut or lengthened LZF streams: the kernel writes only inside its buffer and
    returns exactly the size written, or a negative code; never more than the buffer holds."""
    from cytepool.io.anndata._hdf5_kernels import lzf_decode

    stored = bytearray(stored_chunks[1]["lzf-shuffle"])
    for _ in range(data.draw(st.integers(0, 3))):
        stored[data.draw(st.integers(0, len(stored) - 1))] = data.draw(st.integers(0, 255))
    stored = stored[: data.draw(st.integers(0, len(stored)))] + bytes(data.draw(st.binary()))
    guard = np.full(4100, 0xAB, np.uint8)
    written = lzf_decode(np.frombuffer(bytes(stored), np.uint8), guard[:4000])
    assert -3 <= written <= 4000
    assert (guard[4000:] == 0xAB).all()


def test_a_file_replaced_after_opening_is_still_the_one_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.h5", "x", np.arange(1000, dtype="<f4"), chunks=(100,))
    other = _write(tmp_path / "other.h5", "x", np.zeros(1000, dtype="<f4"), chunks=(100,))
    with _direct(path) as dataset:
        os.replace(other, path)
        _assert_same(dataset.read(0, 1000), np.arange(1000, dtype="<f4"))


@pytest.mark.parametrize(
    "options",
    [
        {"chunks": (10_000,)},  # one chunk (the "single chunk" index of newer files)
        {"chunks": (700,)},  # fixed array index
        {"chunks": (700,), "maxshape": (None,)},  # extensible array index
        {"chunks": (700,), "maxshape": (None,), "compression": "gzip"},
        {"chunks": (70, 3), "maxshape": (None, None)},  # version 2 B-tree index
    ],
    ids=["single-chunk", "fixed-array", "extensible-array", "extensible-gzip", "v2-btree"],
)
@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_every_kind_of_chunk_index(tmp_path: Path, options: Any, libver: str) -> None:
    shape = (10_000,) if len(options["chunks"]) == 1 else (1000, 10)
    data = _values(shape, "<f8")
    with h5py.File(tmp_path / "x.h5", "w", libver=libver) as file:
        file.create_dataset("x", data=data, **options)
    with _direct(tmp_path / "x.h5") as dataset:
        _assert_same(dataset.read(0, shape[0]), data)
        _assert_same(dataset.read(333, 777), data[333:777])


def test_chunks_allocated_early_read_as_written(tmp_path: Path) -> None:
    """Allocated when the dataset is made (the "implicit" index of newer files): chunks
    never written hold the fill value, written when they were allocated."""
    with h5py.File(tmp_path / "x.h5", "w", libver="latest") as file:
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_chunk((100,))
        plist.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        plist.set_fill_value(np.array([4], "<i2"))
        space = h5py.h5s.create_simple((1000,))
        h5py.h5d.create(file.id, b"x", h5py.h5t.STD_I16LE, space, plist)
        file["x"][120:450] = 9
        want = file["x"][()]
    with _direct(tmp_path / "x.h5") as dataset:
        _assert_same(dataset.read(0, 1000), want)
