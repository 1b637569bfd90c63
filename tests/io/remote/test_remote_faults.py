"""Remote reads under hostile servers and failures (issue 22): bounds taken from the length a
server announces, digest failures told apart from replaced stores, no coroutine left behind by
a failed read, and no listing request for a missing root. All against the real test servers."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("obstore")

from remote_servers import ServedHTTP, round_trips

from cytepool.errors import (
    FormatError,
    RemoteStoreError,
    StoreChangedError,
    UnsupportedFeatureError,
)
from cytepool.io import read_cube, write_cube
from cytepool.io.zarr import open_array, read_group_attributes, write_array
from cytepool.io.zarr.remote import RemoteStore
from factories import make_cube, string_values

LATENCY = 0.4  # seconds per request: what was fetched ahead waits for a slot when a read fails


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cube file with an int64 sample column (``n``) and a layer of 4 groups."""
    rng = np.random.default_rng(5)
    cube = make_cube(
        {"counts": rng.integers(0, 40, size=(4, 6, 50)).astype(np.int32)},
        ids={
            "samples": [f"s{i}" for i in range(6)],
            "groups": [f"type {i}" for i in range(4)],
            "features": [f"g{i}" for i in range(50)],
        },
        samples={"n": np.arange(6, dtype=np.int64)},
        cells=rng.integers(1, 9, size=(4, 6)),
    )
    path = tmp_path_factory.mktemp("faults") / "x.cube.zarr"
    write_cube(cube, path)
    return path


@pytest.fixture
def copy(local: Path, tmp_path: Path) -> Path:
    """A copy of the cube file, to spoil before serving it."""
    target = tmp_path / "x.cube.zarr"
    shutil.copytree(local, target)
    return target


# ---------------------------------------------------------------------------------------------
# Item 3: no coroutine left unawaited after a failed read


def _chunked_array(tmp_path: Path) -> Path:
    values = np.arange(40 * 8, dtype=np.int64).reshape(40, 8)
    write_array(tmp_path / "a", values, chunks=(1, 8), compression=None)
    (tmp_path / "a" / "c" / "0" / "0").write_bytes(b"short")  # the first chunk is corrupt
    return tmp_path / "a"


def test_requests_cancelled_while_waiting_for_a_slot_leave_no_coroutine(
    tmp_path: Path, serve_http: Callable[..., ServedHTTP], unawaited: Callable[[], list[str]]
) -> None:
    """What a failed read does to the chunks it fetched ahead: its handle is closed while they
    wait for a slot (one in flight here), and every one of them is cancelled."""
    http = serve_http(_chunked_array(tmp_path))
    http.fault("*", latency=LATENCY)
    handle = RemoteStore(http.url, {"max_in_flight": 1}).open()
    handle.prefetch([f"c/{row}/0" for row in range(1, 9)], limit=64)
    handle.close()
    handle = RemoteStore(http.url).open()
    assert handle.get("c/1/0", limit=64) is not None  # the loop ran on
    assert unawaited() == []


def test_a_failed_read_leaves_no_coroutine_unawaited(
    tmp_path: Path, serve_http: Callable[..., ServedHTTP], unawaited: Callable[[], list[str]]
) -> None:
    http = serve_http(_chunked_array(tmp_path))
    http.fault("*", latency=LATENCY)
    array = open_array(http.url, storage_options={"max_in_flight": 2})
    with pytest.raises(FormatError, match=r"corrupt chunk .*/a/c/0/0: it has 5 bytes"):
        array[...]  # fails at once: the chunks fetched ahead, queued for a slot, are cancelled
    assert array[1:3, :].tolist() == [list(range(8, 16)), list(range(16, 24))]  # the loop ran
    assert unawaited() == []


def test_a_failed_cube_opening_leaves_no_coroutine_unawaited(
    copy: Path, serve_http: Callable[..., ServedHTTP], unawaited: Callable[[], list[str]]
) -> None:
    http = serve_http(copy)
    ids = string_values(http.path / "samples" / "sample_id") / "c" / "0"
    good = ids.read_bytes()
    ids.write_bytes(b"short")  # read first, while the other tables' chunks wait for a slot
    http.fault("*", latency=LATENCY)
    with pytest.raises(FormatError, match=r"samples/sample_id"):
        read_cube(http.url, storage_options={"max_in_flight": 1})
    ids.write_bytes(good)
    assert read_cube(http.url).shape == (4, 6, 50)  # the loop ran
    assert unawaited() == []


def test_a_failed_layer_read_leaves_no_coroutine_unawaited(
    copy: Path,
    serve_http: Callable[..., ServedHTTP],
    unawaited: Callable[[], list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one chunk decoded at a time, in order: the read fails on the first chunk while the
    # third, fetched ahead, still waits for the one slot
    monkeypatch.setenv("CYTEPOOL_ZARR_THREADS", "1")
    http = serve_http(copy)
    cube = read_cube(http.url, storage_options={"max_in_flight": 1})
    (http.path / "layers" / "counts" / "c" / "0" / "0" / "0").write_bytes(b"short")
    http.fault("*", latency=LATENCY)
    with pytest.raises(FormatError, match=r"layers/counts/c/0/0/0"):
        cube.to_numpy("counts")  # the root's check and the chunks fetched ahead are cancelled
    assert cube.select(groups=["type 3"]).to_numpy("counts").shape == (1, 6, 50)
    assert unawaited() == []


# ---------------------------------------------------------------------------------------------
# Item 1: every fetch bounded by the most bytes a valid encoding of its chunk can take

BIG = 32 * 2**20  # an honest body, far larger than any valid encoding of these chunks


@pytest.mark.parametrize("key", ["samples/n/c/0", "cells/c/0/0"])
def test_a_small_chunk_answered_with_a_large_body_is_refused_from_its_length(
    copy: Path, serve_http: Callable[..., ServedHTTP], key: str
) -> None:
    http = serve_http(copy)
    with open(http.path / key, "r+b") as file:
        file.truncate(BIG)
    # the body goes out in pieces: the server sends its last piece only to a client that reads
    http.fault(key, slow=0.001, piece=2**20)
    with pytest.raises(FormatError, match=rf"corrupt chunk .*/{key}: it has {BIG} bytes, more"):
        read_cube(http.url)  # a covariate: every column is fetched at open
    (request,) = [r for r in http.requests() if r.path.endswith(key)]
    assert request.end is None  # the client stopped at the headers: the body was never sent


# ---------------------------------------------------------------------------------------------
# Item 4: reads by URL never list


def _listings(requests: list[Any]) -> list[Any]:
    """Requests that list: WebDAV PROPFIND (HTTP), ListObjects (S3)."""
    return [r for r in requests if r.method == "PROPFIND" or "list-type" in r.query]


@pytest.mark.parametrize("kind", ["http", "s3"])
def test_a_missing_root_is_missing_without_a_listing(
    tmp_path: Path, serve_http: Any, serve_s3: Any, kind: str
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "other").write_text("x")
    served = (serve_http if kind == "http" else serve_s3)(tmp_path / "empty")
    options = getattr(served, "storage_options", {})
    with pytest.raises(FormatError, match="is not a cube file: it has no Zarr group metadata"):
        read_cube(served.url, storage_options=options)
    with pytest.raises(FileNotFoundError, match=r"no Zarr v3 metadata at .*: .*zarr\.json does"):
        read_group_attributes(served.url, storage_options=options)
    with pytest.raises(FileNotFoundError, match=r"no Zarr v3 metadata"):
        open_array(served.url + "/other", storage_options=options)
    requests = served.requests()
    assert requests
    assert _listings(requests) == []
    assert {r.method for r in requests} <= {"GET", "HEAD"}


def test_a_zarr_v2_node_is_recognised_without_a_listing(
    tmp_path: Path, serve_http: Callable[..., ServedHTTP]
) -> None:
    import zarr

    zarr.open_group(str(tmp_path / "v2"), mode="w", zarr_format=2).attrs["a"] = 1
    http = serve_http(tmp_path / "v2")
    http.fault("*", latency=0.1)
    with pytest.raises(FormatError, match=r"is a Zarr v2 node \(\.zgroup\); only Zarr v3"):
        read_group_attributes(http.url)
    requests = http.requests()
    assert _listings(requests) == []
    assert round_trips(requests) == 2  # zarr.json, then the v2 files together


# ---------------------------------------------------------------------------------------------
# Item 2: a digest that fails asks the root again: StoreChangedError if it changed


def _replaced_as_checked(http: ServedHTTP, tmp_path: Path) -> None:
    """Make the served cube change under a read: a chunk of group 1 holds other values (those
    of the new store), and the root zarr.json is replaced just after the read's first check of
    it is answered (as still the version the cube was opened with)."""
    root = json.loads((http.path / "zarr.json").read_text())
    root["attributes"]["metadata"] = {"edited": True}
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(root))
    chunks = http.path / "layers" / "counts" / "c"
    (chunks / "1" / "0" / "0").write_bytes((chunks / "3" / "0" / "0").read_bytes())
    http.fault("zarr.json", methods=["HEAD"], replace_after=1, replace_with=str(newer))
    # The chunks come late, so the read's first check is answered before its values fail
    # (a read faster than that check cancels it, and its one question to the server then
    # comes before the replacement, which follows the first HEAD answered).
    http.fault("layers/counts/c/*", methods=["GET"], latency=0.3)
    http.clear()


READS: dict[str, Callable[[Any], Any]] = {
    "whole layer": lambda cube: cube.to_numpy("counts"),  # verified on the decoding threads
    "one group": lambda cube: cube.profiles("type 1"),  # verified once read
}


@pytest.mark.parametrize("read", list(READS))
def test_values_of_a_replacing_store_raise_store_changed_not_corrupt(
    copy: Path, tmp_path: Path, serve_http: Callable[..., ServedHTTP], read: str
) -> None:
    http = serve_http(copy)
    cube = read_cube(http.url)
    _replaced_as_checked(http, tmp_path)
    with pytest.raises(StoreChangedError, match=r"zarr\.json is another version") as info:
        READS[read](cube)
    assert "do not match their stored digest" in str(info.value.__cause__)
    heads = [r for r in http.requests() if r.method == "HEAD" and r.path.endswith("/zarr.json")]
    assert [r.status for r in heads] == [200, 412]  # the first check, then the question again


@pytest.mark.parametrize("read", list(READS))
def test_values_that_fail_their_digest_in_an_unchanged_store_are_corrupt(
    copy: Path, serve_http: Callable[..., ServedHTTP], read: str
) -> None:
    http = serve_http(copy)
    cube = read_cube(http.url)
    chunks = http.path / "layers" / "counts" / "c"
    (chunks / "1" / "0" / "0").write_bytes((chunks / "3" / "0" / "0").read_bytes())
    with pytest.raises(FormatError, match="group 'type 1': the values do not match"):
        READS[read](cube)


# ---------------------------------------------------------------------------------------------
# Access denied: a PermissionError naming the URL and saying how to give credentials


def test_a_refused_http_read_is_a_permission_error_saying_how_to_sign_in(
    local: Path, serve_http
) -> None:
    served = serve_http(local)
    cube = read_cube(served.url)
    served.fault("layers/*", errors=10, status=403)
    with pytest.raises(PermissionError) as info:
        cube.to_numpy("counts")
    message = str(info.value)
    assert f"{served.url}/layers/counts/" in message
    assert "access denied" in message
    assert "user:password@" in message
    assert "default_headers" in message


def test_a_private_bucket_read_anonymously_is_a_permission_error(local: Path, serve_s3) -> None:
    served = serve_s3(local)
    options = {key: value for key, value in served.storage_options.items() if "key" not in key}
    with pytest.raises(PermissionError) as info:
        open_array(served.url + "/layers/counts", storage_options={**options, "anonymous": True})
    assert served.url in str(info.value)
    assert "credentials" in str(info.value)
    assert "anonymous" in str(info.value)


# ---------------------------------------------------------------------------------------------
# 405 Method Not Allowed: obstore reports it as a missing object, it is not one


def test_a_chunk_refused_with_405_is_an_error_not_the_fill_value(
    tmp_path: Path, serve_http: Callable[..., ServedHTTP]
) -> None:
    write_array(tmp_path / "a", np.arange(1, 1001), chunks=(100,), compression=None)
    http = serve_http(tmp_path / "a")
    array = open_array(http.url)
    http.fault("c/1", methods=["GET"], errors=10, status=405)
    problem = r"/a/c/1 could not be read: the server refused the request with status 405"
    with pytest.raises(RemoteStoreError, match=problem):
        array[95:105]
    assert array[:100].tolist() == list(range(1, 101))  # a chunk not refused reads


def test_a_server_refusing_head_requests_is_checked_with_get_requests(
    local: Path, serve_http: Callable[..., ServedHTTP]
) -> None:
    http = serve_http(local)
    http.fault("*", methods=["HEAD"], errors=1000, status=405)
    cube = read_cube(http.url)
    assert np.array_equal(cube.to_numpy("counts"), read_cube(local).to_numpy("counts"))
    checks = [r for r in http.requests() if r.conditions.get("If-Match")]
    assert {r.method for r in checks} == {"HEAD", "GET"}  # HEAD refused, then GET
    (http.path / "zarr.json").write_bytes((http.path / "zarr.json").read_bytes() + b" ")
    with pytest.raises(StoreChangedError, match="the store changed since it was opened"):
        cube.to_numpy("counts")


def test_a_weak_etag_is_compared_not_sent_in_if_match(
    local: Path, serve_http: Callable[..., ServedHTTP]
) -> None:
    """A server compares If-Match strongly (RFC 9110, 13.1.1): a weak tag never matches, so it
    is not sent; the ETag the HEAD returns is compared with the one read instead."""
    http = serve_http(local)
    http.fault("*", weak_etag=True)
    cube = read_cube(http.url)
    assert np.array_equal(cube.to_numpy("counts"), read_cube(local).to_numpy("counts"))
    heads = [r for r in http.requests() if r.method == "HEAD" and r.path.endswith("/zarr.json")]
    assert heads
    assert all("If-Match" not in r.conditions for r in heads)
    (http.path / "zarr.json").write_bytes((http.path / "zarr.json").read_bytes() + b" ")
    with pytest.raises(StoreChangedError, match="the store changed since it was opened"):
        cube.to_numpy("counts")


def test_a_key_whose_url_is_too_long_to_request_is_refused(
    tmp_path: Path, serve_http: Callable[..., ServedHTTP]
) -> None:
    """obstore panicked on a URL longer than an HTTP request can carry (a key from a document
    may make one): refused before the request, the message abridged."""
    write_array(tmp_path / "a", np.arange(10), chunks=(5,), compression=None)
    http = serve_http(tmp_path / "a")
    handle = RemoteStore(http.url).open()
    try:
        problem = r"the key '(k+)…(k+)' of .*/a cannot be read by URL: its URL would have"
        with pytest.raises(UnsupportedFeatureError, match=problem) as info:
            handle.get("k" * 70_000, limit=64)
        assert len(str(info.value)) < 1000
        assert handle.get("c/0", limit=64) is not None  # the loop ran on
    finally:
        handle.close()
