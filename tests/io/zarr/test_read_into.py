"""ZarrArray.read_into: a whole read into the caller's array, rows handed over as they arrive."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.errors import FormatError, InputTypeError
from cytepool.io.zarr import open_array, write_array
from cytepool.io.zarr._threads import ENV_THREADS


def _collect(array: Any, out: np.ndarray) -> list[tuple[int, int, bool]]:
    """The row ranges handed over, and whether each was complete when handed over."""
    expected = np.asarray(array)
    seen: list[tuple[int, int, bool]] = []
    lock = threading.Lock()

    def on_rows(start: int, stop: int) -> None:
        complete = bool(np.array_equal(out[start:stop], expected[start:stop]))
        with lock:
            seen.append((start, stop, complete))

    array.read_into(out, on_rows=on_rows)
    np.testing.assert_array_equal(out, expected)
    return sorted(seen)


@pytest.mark.parametrize("threads", ["1", "3"])
@pytest.mark.parametrize(
    ("shape", "chunks", "compression"),
    [
        ((5, 6, 7), (1, 6, 3), "zstd"),
        ((5, 6, 7), (2, 4, 3), "gzip"),  # partial edge chunks on every axis
        ((4,), (3,), None),
        ((3, 0), (1, 2), "zstd"),  # no chunks at all
    ],
)
def test_every_row_is_handed_over_once_when_complete(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    threads: str,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    compression: str | None,
) -> None:
    monkeypatch.setenv(ENV_THREADS, threads)
    data = np.arange(int(np.prod(shape)), dtype="float32").reshape(shape)
    write_array(tmp_path / "a", data, chunks=chunks, compression=compression)
    out = np.full(shape, -1, dtype="float32")
    seen = _collect(open_array(tmp_path / "a"), out)
    step = chunks[0]
    expected = [(a, min(a + step, shape[0]), True) for a in range(0, shape[0], step)]
    assert seen == (expected if all(shape) else [(0, shape[0], True)])


def test_rows_of_a_sharded_array_written_by_zarr_python(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    data = np.arange(6 * 8, dtype="int32").reshape(6, 8)
    z = zarr.create_array(tmp_path / "s", shape=(6, 8), dtype="int32", shards=(2, 4), chunks=(1, 2))
    z[...] = data
    z[4:] = 0  # rows 4:6 hold only the fill value: zarr-python stores no shard for them
    out = np.empty((6, 8), dtype="int32")
    seen = _collect(open_array(tmp_path / "s"), out)
    assert seen == [(0, 2, True), (2, 4, True), (4, 6, True)]


def test_a_failure_on_rows_stops_the_read(tmp_path: Path) -> None:
    write_array(tmp_path / "a", np.zeros((8, 4), "int64"), chunks=(1, 4), compression="zstd")

    def on_rows(start: int, stop: int) -> None:
        if start == 2:
            raise FormatError("row 2 is wrong")

    with pytest.raises(FormatError, match="row 2 is wrong"):
        open_array(tmp_path / "a").read_into(np.empty((8, 4), "int64"), on_rows=on_rows)


@pytest.mark.parametrize(
    "out",
    [
        np.empty((3, 4), "int32"),  # another data type
        np.empty((4, 3), "int64"),  # another shape
        np.empty((4, 3), "int64").T,  # not C-contiguous
        np.empty((3, 4), ">i8"),  # not native
        np.zeros((3, 4), "int64").tolist(),  # not an array
    ],
)
def test_read_into_refuses_an_unfit_result(tmp_path: Path, out: Any) -> None:
    write_array(tmp_path / "a", np.zeros((3, 4), "int64"), chunks=(2, 2))
    with pytest.raises(InputTypeError, match=r"read_into: expected a writeable C-contiguous"):
        open_array(tmp_path / "a").read_into(out)


def test_read_into_refuses_a_read_only_result_and_0d_arrays(tmp_path: Path) -> None:
    write_array(tmp_path / "a", np.zeros((3, 4), "int64"), chunks=(2, 2))
    out = np.zeros((3, 4), "int64")
    out.flags.writeable = False
    with pytest.raises(InputTypeError, match="read_into"):
        open_array(tmp_path / "a").read_into(out)
    write_array(tmp_path / "s", np.array(5, "int64"), chunks=())
    with pytest.raises(InputTypeError, match="not 0-d"):
        open_array(tmp_path / "s").read_into(np.zeros((), "int64"))
