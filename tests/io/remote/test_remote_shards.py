"""Sharded arrays written by zarr-python, read by URL: the index of each shard touched in one
round, then only the inner chunks needed, neighbours coalesced (counted on the real servers)."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("obstore")

from remote_servers import round_trips

from cytepool.io.zarr import open_array
from cytepool.io.zarr.fetching import COALESCE_GAP, Range, coalesce

LATENCY = 0.15  # seconds per request: requests sent together overlap on the server's clock


def _write_sharded(path: Path, values: np.ndarray[Any, Any], chunks: Any, shards: Any) -> None:
    import zarr

    array = zarr.create_array(
        str(path), shape=values.shape, dtype=values.dtype, chunks=chunks, shards=shards,
        compressors=None, zarr_format=3,
    )  # fmt: skip
    array[...] = values


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray[Any, Any]]:
    """8 x 4000 int32 in shards of 4 x 2000, inner chunks of 1 x 100 (400 bytes each)."""
    values = np.arange(8 * 4000, dtype=np.int32).reshape(8, 4000) + 1
    values[6] = 0  # row 6 is the fill value: zarr-python stores none of its inner chunks
    path = tmp_path_factory.mktemp("shards") / "small"
    _write_sharded(path, values, (1, 100), (4, 2000))
    return path, values


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray[Any, Any]]:
    """1 x 98304 float64 in one shard, inner chunks of 1 x 8192 (64 KiB each, uncompressed)."""
    values = np.random.default_rng(3).random((1, 12 * 8192))
    path = tmp_path_factory.mktemp("shards") / "wide"
    _write_sharded(path, values, (1, 8192), (1, 12 * 8192))
    return path, values


def _served(kind: str, directory: Path, serve_http: Any, serve_s3: Any) -> tuple[Any, dict]:
    served = serve_http(directory) if kind == "http" else serve_s3(directory)
    return served, getattr(served, "storage_options", {})


@pytest.mark.parametrize("kind", ["http", "s3"])
def test_index_round_then_coalesced_inner_chunks(
    small: tuple[Path, np.ndarray[Any, Any]], serve_http: Any, serve_s3: Any, kind: str
) -> None:
    path, values = small
    served, options = _served(kind, path, serve_http, serve_s3)
    array = open_array(served.url, storage_options=options)
    served.fault("*", latency=LATENCY)
    served.clear()
    rows, columns = [1, 5, 6], np.arange(150, 3950, 7)  # 2 x 2 shards, row 6 not stored
    got = array.oindex[rows, columns]
    assert np.array_equal(got, values[np.ix_(rows, columns)])
    log = served.requests()
    shards = [r for r in log if "/c/" in r.path]
    indexes = [r for r in shards if r.range is not None and r.range.startswith("bytes=-")]
    inner = [r for r in shards if r not in indexes]
    assert len(indexes) == 4  # one suffix request per shard touched
    assert len({r.path for r in indexes}) == 4
    assert len(inner) == 4  # each shard's chunks of rows 1 and 5: one coalesced request
    assert round_trips([r for r in log if r.method == "GET"]) == 2


def test_ranges_further_apart_than_the_gap_are_separate_requests(
    wide: tuple[Path, np.ndarray[Any, Any]], serve_http: Any
) -> None:
    path, values = wide
    served = serve_http(path)
    array = open_array(served.url)
    served.clear()
    columns = [5, 8192 + 5, 4 * 8192 + 1, 11 * 8192]  # chunks 0, 1 (neighbours), 4, 11
    assert np.array_equal(array.oindex[0, columns], values[0, columns])
    inner = [r for r in served.requests() if "/c/" in r.path and not r.range.startswith("bytes=-")]
    assert len(inner) == 3
    assert sum(r.sent for r in inner) == 4 * 8 * 8192  # no gap read: they are > 64 KiB apart


def test_whole_sharded_array_equals_zarr_python(
    small: tuple[Path, np.ndarray[Any, Any]], serve_http: Any
) -> None:
    import zarr

    path, values = small
    served = serve_http(path)
    assert np.array_equal(open_array(served.url)[...], zarr.open_array(str(path))[...])
    assert np.array_equal(open_array(served.url)[...], values)


def test_coalesce_keeps_order_and_bounds() -> None:
    ranges = [Range("b", 0, 8), Range("a", 100, 4), Range("a", 0, 4), Range("a", -16, 16)]
    spans = coalesce(ranges, gap=200, most=1000)
    assert [(s.key, s.start, s.stop) for s in spans] == [("b", 0, 8), ("a", 0, 104), ("a", -16, 0)]
    apart = coalesce([Range("a", 0, 4), Range("a", 4 + COALESCE_GAP + 1, 4)])
    assert len(apart) == 2
    capped = coalesce([Range("a", 0, 600), Range("a", 600, 600)], gap=10, most=1000)
    assert [(s.start, s.stop) for s in capped] == [(0, 600), (600, 1200)]


def test_missing_and_corrupt_shards_over_http(
    small: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path, serve_http: Any
) -> None:
    import shutil

    from cytepool.errors import FormatError

    path, values = small
    copy = tmp_path / "small"
    shutil.copytree(path, copy)
    (copy / "c" / "0" / "1").unlink()  # rows 0-3, columns 2000-3999: the fill value
    shard = copy / "c" / "1" / "0"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # the index checksum no longer matches
    shard.write_bytes(bytes(data))
    array = open_array(serve_http(copy).url)
    expected = values[:4].copy()
    expected[:, 2000:] = 0
    assert np.array_equal(array[:4], expected)
    with pytest.raises(FormatError, match=r"corrupt shard .*c/1/0.*CRC-32C"):
        array[4:]


@pytest.mark.parametrize("kind", ["http", "s3"])
def test_an_empty_shard_is_corrupt_as_it_is_locally(
    small: tuple[Path, np.ndarray[Any, Any]],
    tmp_path: Path,
    serve_http: Any,
    serve_s3: Any,
    kind: str,
) -> None:
    """Both servers answer 416 to the suffix range of the index of an empty object."""
    import shutil

    from cytepool.errors import FormatError

    path, _ = small
    copy = tmp_path / "small"
    shutil.copytree(path, copy)
    (copy / "c" / "1" / "0").write_bytes(b"")  # a failed upload, say
    served, options = _served(kind, copy, serve_http, serve_s3)
    problem = r"corrupt shard {}/c/1/0: the file has 0 bytes, fewer than its index of \d+ bytes"
    with pytest.raises(FormatError, match=problem.format(re.escape(str(copy)))):
        open_array(copy)[4:]
    with pytest.raises(FormatError, match=problem.format(re.escape(served.url))):
        open_array(served.url, storage_options=options)[4:]


def test_a_shard_shorter_than_its_index_answered_416_is_corrupt(
    small: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path, serve_http: Any
) -> None:
    """A server may answer 416 to a suffix longer than the object (S3 does for an empty one):
    the object is then read whole, as a local file gives it."""
    import shutil

    from cytepool.errors import FormatError

    path, _ = small
    copy = tmp_path / "small"
    shutil.copytree(path, copy)
    (copy / "c" / "1" / "0").write_bytes(b"short")
    served = serve_http(copy)
    array = open_array(served.url)
    served.fault("c/1/0", methods=["GET"], errors=1, status=416)
    with pytest.raises(FormatError, match=r"c/1/0: the file has 5 bytes, fewer than its index"):
        array[4:]


def test_a_range_answered_with_a_longer_body_is_refused_before_it_is_read(
    small: tuple[Path, np.ndarray[Any, Any]], serve_http: Any
) -> None:
    """A 206 whose Content-Range is the range asked for but whose body is 8 MiB: refused as too
    long once more bytes than the range came, not read whole and then called short."""
    from cytepool.errors import FormatError

    path, _ = small
    served = serve_http(path)
    array = open_array(served.url)
    served.fault("c/*", methods=["GET"], extra=8 << 20)
    problem = r"c/1/0 came back too long: more than the 1284 bytes of the range"
    with pytest.raises(FormatError, match=problem):
        array[4, 150:160]


def _gapped(shard: Path, gap: int) -> None:
    """Put ``gap`` bytes between the inner chunks of a shard and its index (at its end)."""
    data = shard.read_bytes()
    index = 16 * 20 * 4 + 4  # the small array's shards: 4 x 20 inner chunks, a CRC-32C
    shard.write_bytes(data[:-index] + bytes(gap) + data[-index:])


def test_shards_of_a_server_without_ranges_are_fetched_whole(
    small: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path, serve_http: Any
) -> None:
    """Python's http.server answers a Range request with the whole object (200)."""
    import shutil

    path, values = small
    copy = tmp_path / "small"
    shutil.copytree(path, copy)
    _gapped(copy / "c" / "1" / "0", 1000)  # within the bound: row 6 has no inner chunks
    served = serve_http(copy)
    served.fault("c/*", ignore_range=True)
    array = open_array(served.url)
    served.clear()
    assert np.array_equal(array[...], values)
    assert np.array_equal(array.oindex[[1, 5, 6], 150:3950:7], values[[1, 5, 6], 150:3950:7])
    shards = [r for r in served.requests() if "/c/" in r.path]
    assert {r.status for r in shards} == {200}
    per_shard = collections.Counter(r.path for r in shards)
    assert len(per_shard) == 4  # every shard stored (row 6 of shard (1, 0) is the fill value)
    assert max(per_shard.values()) <= 4  # for each read: a whole fetch, at most one refusal


def test_a_shard_beyond_the_bound_of_a_server_without_ranges_is_refused(
    small: tuple[Path, np.ndarray[Any, Any]], tmp_path: Path, serve_http: Any
) -> None:
    import shutil

    from cytepool.errors import RemoteStoreError

    path, values = small
    copy = tmp_path / "small"
    shutil.copytree(path, copy)
    _gapped(copy / "c" / "0" / "1", 40_000)  # more than a packed shard can take (33,284 bytes)
    served = serve_http(copy)
    assert np.array_equal(open_array(copy)[...], values)
    assert np.array_equal(open_array(served.url)[...], values)  # ranges: only what is needed
    served.fault("c/*", ignore_range=True)
    array = open_array(served.url)
    assert np.array_equal(array[:, :2000], values[:, :2000])
    problem = r"c/0/1 cannot be read: its server does not serve byte ranges, which sharded"
    with pytest.raises(RemoteStoreError, match=problem):
        array[...]


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
@pytest.mark.filterwarnings("ignore:This setting will be removed in 0.14:DeprecationWarning")
def test_anndata_auto_sharded_store_over_http(tmp_path: Path, serve_http: Any) -> None:
    """anndata's sharded Zarr v3 layout (``auto_shard_zarr_v3``, shards of 1000 x 300 with
    inner chunks of 500 x 150 here): X read by URL in one index request and one coalesced
    range request per shard touched."""
    import anndata as ad
    import pandas as pd

    from cytepool.io import read_table

    x = np.arange(2000 * 300, dtype=np.float32).reshape(2000, 300)
    obs = pd.DataFrame({"kind": ["a", "b"] * 1000}, index=[f"cell{i}" for i in range(2000)])
    with ad.settings.override(zarr_write_format=3, auto_shard_zarr_v3=True):
        ad.AnnData(x, obs=obs).write_zarr(tmp_path / "a.zarr")
    served = serve_http(tmp_path / "a.zarr")
    array = open_array(served.url + "/X")
    assert array.metadata.codecs.array_bytes.__class__.__name__ == "ShardingCodec"
    served.fault("*", latency=LATENCY)
    served.clear()
    assert np.array_equal(array[100:700], x[100:700])  # shard 0, its 4 inner chunks
    chunks = [r for r in served.requests() if "/X/c/" in r.path]
    assert [r.range.startswith("bytes=-") for r in chunks].count(True) == 1
    # anndata versions lay shards out differently (0.12.16: 1920 x 300 in 32 x 5 chunks, in
    # the order written): one request per run of the needed inner chunks, read from the index
    assert len(chunks) == 1 + _coalesced_runs(tmp_path / "a.zarr" / "X", rows=range(100, 700))
    assert round_trips(chunks) == 2
    table = read_table(served.url + "/obs")
    assert list(table.index) == list(obs.index)
    assert list(table["kind"]) == list(obs["kind"])


def _coalesced_runs(array: Path, rows: range) -> int:
    """The spans (runs at most COALESCE_GAP apart) holding the inner chunks of ``rows`` (every
    column) in shard 0 of a 2-D sharded array, from the shard index stored at its end."""
    meta = json.loads((array / "zarr.json").read_text())
    shard_rows, shard_cols = meta["chunk_grid"]["configuration"]["chunk_shape"]
    inner_rows, inner_cols = meta["codecs"][0]["configuration"]["chunk_shape"]
    grid = (shard_rows // inner_rows, shard_cols // inner_cols)
    data = (array / "c" / "0" / "0").read_bytes()
    index = np.frombuffer(data[-(16 * grid[0] * grid[1] + 4) : -4], dtype="<u8").reshape(*grid, 2)
    needed = index[rows.start // inner_rows : (rows.stop - 1) // inner_rows + 1].reshape(-1, 2)
    spans, end = 0, None
    for offset, size in sorted(map(tuple, needed)):
        if end is None or offset - end > COALESCE_GAP:
            spans += 1
        end = max(end or 0, offset + size)
    return spans
