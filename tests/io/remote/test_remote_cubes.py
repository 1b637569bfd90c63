"""Cube files, tables and arrays read by URL from the real HTTP and S3 test servers."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("obstore")

from remote_servers import TEST_SECRET, peak_in_flight, round_trips

from cytepool import Cube
from cytepool.errors import (
    FormatError,
    RemoteStoreError,
    StoreChangedError,
)
from cytepool.io import read_cube, read_table, write_cube, write_table
from cytepool.io.zarr import open_array, read_group_attributes
from cytepool.io.zarr.remote import RemoteStore
from cytepool.io.zarr.store import shown_url
from factories import make_cube, string_values

pd = pytest.importorskip("pandas")

N_GROUPS, N_SAMPLES, N_FEATURES = 4, 6, 3000
LATENCY = 0.15  # seconds per request: requests sent together overlap on the server's clock


def _cube() -> Cube:
    rng = np.random.default_rng(7)
    cells = rng.integers(1, 9, size=(N_GROUPS, N_SAMPLES))
    counts = rng.integers(0, 40, size=(N_GROUPS, N_SAMPLES, N_FEATURES)).astype(np.int32)
    return make_cube(
        {"counts": counts},
        ids={
            "samples": [f"s{i}" for i in range(N_SAMPLES)],
            "groups": [f"type {i}" for i in range(N_GROUPS)],
            "features": [f"ENSG{i:05d}" for i in range(N_FEATURES)],
        },
        samples={"donor": [f"d{i % 3}" for i in range(N_SAMPLES)]},
        features={"symbol": [f"G{i}" for i in range(N_FEATURES)]},
        cells=cells,
    )


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cube file whose layer has several chunks per group (chunks of 6 × 1024 features)."""
    import cytepool.io.cubes as cubes

    path = tmp_path_factory.mktemp("remote") / "x.cube.zarr"
    saved = cubes._CHUNK_BYTES
    cubes._CHUNK_BYTES = N_SAMPLES * 1024 * 4
    try:
        write_cube(_cube(), path)
    finally:
        cubes._CHUNK_BYTES = saved
    return path


def _same(remote: Cube, local: Path) -> None:
    expected = read_cube(local)
    assert remote.fingerprint == expected.fingerprint
    assert np.array_equal(remote.to_numpy("counts"), expected.to_numpy("counts"))
    assert remote.samples.equals(expected.samples)
    assert remote.features.equals(expected.features)


def test_read_cube_over_http_and_s3_equals_local(local: Path, serve_http, serve_s3) -> None:
    http = serve_http(local)
    _same(read_cube(http.url), local)
    s3 = serve_s3(local)
    _same(read_cube(s3.url, storage_options=s3.storage_options), local)


def test_anonymous_s3_reads_a_public_bucket(local: Path, serve_s3) -> None:
    s3 = serve_s3(local, public=True)
    options = {k: v for k, v in s3.storage_options.items() if "key" not in k}
    _same(read_cube(s3.url, storage_options={**options, "anonymous": True}), local)


def test_round_trips_and_requests(local: Path, serve_http) -> None:
    http = serve_http(local)
    http.fault("*", latency=LATENCY)
    cube = read_cube(http.url)
    opened = http.requests()
    assert round_trips(opened) <= 3
    assert len(opened) == len({(r.path, r.range, r.method) for r in opened})  # nothing twice
    http.clear()
    features = [f"ENSG{i:05d}" for i in range(0, N_FEATURES, 60)]  # 50 genes over 3 chunks
    block = cube.select(groups=["type 2"], features=features).to_numpy("counts")
    selected = http.requests()
    assert round_trips(selected) == 1
    chunks = [r for r in selected if "/layers/counts/c/" in r.path]
    assert sorted(r.path.rsplit("/", 1)[1] for r in chunks) == ["0", "1", "2"]
    assert all("/c/2/" in r.path for r in chunks)  # only the group's chunks
    expected = read_cube(local).select(groups=["type 2"], features=features).to_numpy("counts")
    assert np.array_equal(block, expected)


@pytest.mark.parametrize(("limit", "expected"), [(None, 32), (3, 3)])
def test_requests_in_flight_are_bounded(
    tmp_path: Path, serve_http, limit: int | None, expected: int
) -> None:
    values = np.arange(40 * 8, dtype=np.int64).reshape(40, 8)
    from cytepool.io.zarr import write_array

    write_array(tmp_path / "a", values, chunks=(1, 8), compression=None)
    http = serve_http(tmp_path / "a")
    http.fault("*", latency=LATENCY)
    options = {} if limit is None else {"max_in_flight": limit}
    array = open_array(http.url, storage_options=options)
    http.clear()
    assert np.array_equal(array[...], values)
    chunks = [r for r in http.requests() if "/c/" in r.path]
    assert len(chunks) == 40
    assert peak_in_flight(chunks) == expected


def test_table_array_and_group_by_url(tmp_path: Path, serve_http, serve_s3) -> None:
    import pandas as pd

    frame = pd.DataFrame({"n": [1, 2, 3]}, index=pd.Index(["a", "b", "c"], name="id"))
    write_table(frame, tmp_path / "t")
    for served in (serve_http(tmp_path / "t"), serve_s3(tmp_path / "t")):
        options = getattr(served, "storage_options", {})
        pd.testing.assert_frame_equal(read_table(served.url, storage_options=options), frame)
        assert read_group_attributes(served.url, storage_options=options)["_index"] == "id"
        n = open_array(served.url + "/n", storage_options=options)
        assert n[...].tolist() == [1, 2, 3]


def test_retries_then_success_and_bounded_failure(local: Path, serve_http) -> None:
    http = serve_http(local)
    http.fault("zarr.json", errors=2)
    assert read_cube(http.url).shape == (N_GROUPS, N_SAMPLES, N_FEATURES)
    http.fault("zarr.json", errors=50)
    with pytest.raises(RemoteStoreError, match=r"zarr\.json could not be read.*max_retries"):
        read_cube(http.url, storage_options={"max_retries": 1})


def test_truncated_and_reset_answers_never_give_wrong_data(local: Path, serve_http) -> None:
    http = serve_http(local)
    http.fault("layers/*/c/*", truncate=1)
    http.fault("samples/*", resets=1)
    _same(read_cube(http.url), local)


@pytest.mark.parametrize("part", ["samples/donor/c/0", "cells/c/0/0"])
def test_missing_table_part_is_a_format_error(local: Path, tmp_path: Path, serve_http, part: str):
    copy = tmp_path / "x.cube.zarr"
    shutil.copytree(local, copy)
    column, chunk = part.split("/c/")
    (string_values(copy / column) / "c" / chunk).unlink()
    with pytest.raises(FormatError, match="corrupt"):  # every column is read at open
        read_cube(serve_http(copy).url)


def test_missing_root_is_a_format_error(serve_http, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "other").write_text("x")
    with pytest.raises(FormatError, match="no Zarr group metadata"):
        read_cube(serve_http(tmp_path / "empty").url)


def test_replaced_store_raises_store_changed(local: Path, serve_http) -> None:
    http = serve_http(local)
    cube = read_cube(http.url)
    root = json.loads((local / "zarr.json").read_text())
    root["attributes"]["metadata"] = {"edited": True}
    http.replace("zarr.json", json.dumps(root).encode())
    with pytest.raises(StoreChangedError, match=r"zarr\.json is another version"):
        cube.select(groups=["type 1"]).to_numpy("counts")


def test_changed_while_opening_raises_store_changed(local: Path, serve_http, tmp_path) -> None:
    http = serve_http(local)
    newer = tmp_path / "newer.json"
    root = json.loads((local / "zarr.json").read_text())
    root["attributes"]["metadata"] = {"edited": True}
    newer.write_text(json.dumps(root))
    http.fault("zarr.json", replace_after=1, replace_with=str(newer))  # after the first GET
    with pytest.raises(StoreChangedError, match="changed while it was being read"):
        read_cube(http.url)


def test_credentials_never_shown(local: Path, serve_s3) -> None:
    s3 = serve_s3(local)
    options = s3.storage_options
    store = RemoteStore(s3.url, options)
    assert TEST_SECRET not in repr(store)
    assert TEST_SECRET not in repr(store.open())
    refused = {**options, "endpoint": "http://127.0.0.1:9", "max_retries": 0}
    with pytest.raises(RemoteStoreError) as info:
        read_cube(s3.url, storage_options=refused)
    with pytest.raises(FormatError) as missing:
        read_cube(s3.url + "-missing", storage_options=options)
    for error in (info.value, missing.value):
        assert TEST_SECRET not in str(error)
        assert TEST_SECRET not in repr(error)
    cube = read_cube(s3.url, storage_options=options)
    assert TEST_SECRET not in repr(cube.layers["counts"])


def test_password_in_an_http_url_becomes_a_header(local: Path, serve_http) -> None:
    http = serve_http(local)
    url = http.url.replace("http://", "http://user:hunter2@")
    store = RemoteStore(url)
    assert "hunter2" not in repr(store)
    assert "hunter2" not in store.where("zarr.json")
    assert read_cube(url).shape == (N_GROUPS, N_SAMPLES, N_FEATURES)


def test_the_password_of_a_url_appears_in_no_message(local: Path, serve_http) -> None:
    http = serve_http(local)
    url = http.url.replace("http://", "http://alice:hunter2@")
    calls = {
        r"'http://127\.0\.0\.1:99999/x' is not a valid URL": lambda: read_cube(
            "http://alice:hunter2@127.0.0.1:99999/x"
        ),
        r"'http://\[::1/x' is not a valid URL": lambda: open_array("http://alice:hunter2@[::1/x"),
        r"layers/counts is a Zarr array, not a group": lambda: read_group_attributes(
            url + "/layers/counts"
        ),
        r"URL 'https://example\.org/t\.zarr': cytepool writes": lambda: write_table(
            pd.DataFrame({"a": [1]}), "https://alice:hunter2@example.org/t.zarr"
        ),
        r"URL 'https://example\.org/x\.cube\.zarr': cytepool": lambda: write_cube(
            read_cube(local), "https://alice:hunter2@example.org/x.cube.zarr"
        ),
    }
    for problem, call in calls.items():
        with pytest.raises(ValueError, match=problem) as info:
            call()
        assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("password", ["hunter/2", "hunter?2", "hunter#2"])
def test_a_password_that_breaks_the_url_appears_in_no_message(password: str) -> None:
    """A ``/``, ``?`` or ``#`` in a password makes its start look like a host and port: the
    URL is refused, shown from its last ``@`` on, and urllib's quote of the port is left out."""
    url = f"https://alice:{password}@example.org/x.cube.zarr"
    with pytest.raises(
        ValueError, match=r"'https://example\.org/x\.cube\.zarr' is not a valid URL"
    ) as info:
        read_cube(url)
    assert "hunter" not in str(info.value)
    assert shown_url("s3://bucket/me@example.org/x.zarr") == "s3://bucket/me@example.org/x.zarr"


def test_the_query_of_a_url_follows_the_key_and_its_value_is_not_shown(
    tmp_path: Path, serve_http
) -> None:
    from cytepool.io.zarr import write_array

    write_array(tmp_path / "a", np.arange(10), chunks=(5,), compression=None)
    (tmp_path / "a" / "c" / "1").write_bytes(b"short")  # a corrupt chunk
    http = serve_http(tmp_path / "a")
    array = open_array(http.url + "?sig=SECRET-TOKEN")
    assert repr(array).startswith(f"<ZarrArray '{http.url}?…' shape=(10,)")
    assert "SECRET" not in repr(RemoteStore(http.url + "?sig=SECRET-TOKEN"))
    assert array[:3].tolist() == [0, 1, 2]
    with pytest.raises(FormatError, match=r"/a/c/1\?…: it has 5 bytes") as info:
        array[...]
    assert "SECRET" not in str(info.value)
    http.fault("c/0", methods=["GET"], errors=10, status=405)
    with pytest.raises(RemoteStoreError, match=r"/a/c/0\?… could not be read") as info:
        array[:3]
    assert "SECRET" not in str(info.value)  # obstore's own words name the URL too
    assert {r.query for r in http.requests()} == {"sig=SECRET-TOKEN"}  # sent with every key


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"allow_http": True, "nonsense": 1}, "unknown key 'nonsense'"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_retries": -1}, "max_retries"),
        ({"anonymous": True}, "anonymous"),
    ],
)
def test_storage_options_checked(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        read_cube("https://example.invalid/x.cube.zarr", storage_options=options)


def test_storage_options_refused_for_local_paths(local: Path) -> None:
    with pytest.raises(ValueError, match="storage_options apply to URLs only"):
        read_cube(local, storage_options={"region": "x"})


def test_without_obstore_a_url_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import cytepool.io.zarr.remote as remote

    monkeypatch.setitem(sys.modules, "obstore", None)  # as if it were not installed
    monkeypatch.setattr(remote, "_clients", {})
    with pytest.raises(ImportError, match=r"cytepool\[remote\]"):
        read_cube("https://example.invalid/x.cube.zarr")


def test_zarr_python_opens_the_consolidated_cube(local: Path) -> None:
    import zarr

    root = json.loads((local / "zarr.json").read_text())
    entry = root["consolidated_metadata"]
    assert list(root) == ["attributes", "zarr_format", "consolidated_metadata", "node_type"]
    assert entry["kind"] == "inline"
    assert entry["must_understand"] is False
    for key, document in entry["metadata"].items():  # copies of the nodes' own documents
        own = json.loads((local / key / "zarr.json").read_text())
        if own["node_type"] == "group":
            assert document.pop("consolidated_metadata")["metadata"] == {}
        assert document == own
    group = zarr.open_consolidated(local, zarr_format=3)
    assert group.metadata.consolidated_metadata is not None
    counts = group["layers/counts"]
    expected = read_cube(local).to_numpy("counts")
    assert np.array_equal(counts[...], expected)
    assert dict(group.attrs) == root["attributes"]
    plain = zarr.open_group(local, mode="r", use_consolidated=False)
    assert np.array_equal(plain["layers/counts"][...], expected)


def test_consolidated_entry_changes_no_digest(local: Path, tmp_path: Path) -> None:
    """The copy is metadata about metadata: fingerprint and attributes are those of a cube
    without it, which still reads."""
    with_copy = read_cube(local)
    copy = tmp_path / "old.cube.zarr"
    shutil.copytree(local, copy)
    root = json.loads((copy / "zarr.json").read_text())
    root.pop("consolidated_metadata", None)  # (a file of format 1.0 has none)
    (copy / "zarr.json").write_text(json.dumps(root))
    without = read_cube(copy)
    assert without.fingerprint == with_copy.fingerprint == _cube().fingerprint
    assert np.array_equal(without.to_numpy("counts"), with_copy.to_numpy("counts"))


def test_anndata_reads_the_tables_of_a_consolidated_cube(local: Path) -> None:
    import anndata
    import zarr

    group = zarr.open_group(local, mode="r")
    samples = anndata.io.read_elem(group["samples"])
    assert list(samples.index) == [f"s{i}" for i in range(N_SAMPLES)]


@pytest.mark.parametrize("kind", ["http", "s3"])
def test_urls_are_kept_as_given_in_paths_reprs_and_messages(
    local: Path, serve_http, serve_s3, kind: str
) -> None:
    served = serve_http(local) if kind == "http" else serve_s3(local)
    options = getattr(served, "storage_options", {})
    url = served.url + "/cells"
    array = open_array(url, storage_options=options)
    assert array.path == url
    assert repr(array).startswith(f"<ZarrArray {url!r}")
    document = json.loads((local / "cells" / "zarr.json").read_text())
    document["attributes"] = {"edited": True}
    served.replace("cells/zarr.json", json.dumps(document).encode())
    with pytest.raises(StoreChangedError, match=f"the Zarr array {url} changed"):
        array[...]


def test_a_node_name_with_a_control_character_is_read_locally_only(
    tmp_path: Path, serve_http
) -> None:
    """Zarr allows such names (zarr-python writes them); obstore makes no URL path of them."""
    from cytepool.errors import UnsupportedFeatureError
    from cytepool.io.zarr import write_array, write_group
    from cytepool.io.zarr.store import LocalStore, StorePath, reading

    write_group(tmp_path / "g")
    write_array(tmp_path / "g" / "tab\tx", np.arange(3), chunks=(3,))
    with reading(LocalStore(tmp_path / "g").open()) as handle:
        assert open_array(StorePath(handle) / "tab\tx")[...].tolist() == [0, 1, 2]
    served = serve_http(tmp_path / "g")
    problem = rf"the key 'tab\\tx/zarr.json' of {served.url} cannot be read by URL: obstore"
    with reading(RemoteStore(served.url).open()) as handle:
        with pytest.raises(UnsupportedFeatureError, match=problem):
            open_array(StorePath(handle) / "tab\tx")
        assert read_group_attributes(StorePath(handle)) == {}  # the handle still reads


def test_local_array_paths_stay_paths(local: Path) -> None:
    array = open_array(local / "cells")
    assert array.path == local / "cells"
    assert isinstance(array.path, Path)


def _chunk_requests(log: list[Any]) -> list[Any]:
    return [r for r in log if "/layers/counts/c/" in r.path]


@pytest.mark.parametrize(
    "select",
    [
        None,  # the cube's own layer: read whole (ZarrArray.read_into)
        {},
        {"groups": ["type 3", "type 0", "type 2"]},
        {"groups": ["type 1", "type 2"], "features": [f"ENSG{i:05d}" for i in range(0, 3000, 90)]},
    ],
)
def test_many_groups_are_one_round(local: Path, serve_http, select: dict[str, Any] | None):
    http = serve_http(local)
    cube = read_cube(http.url)
    expected = read_cube(local).select(**(select or {})).to_numpy("counts")
    http.fault("*", latency=LATENCY)
    http.clear()
    chosen = cube if select is None else cube.select(**select)
    assert np.array_equal(chosen.to_numpy("counts"), expected)
    log = http.requests()
    n_groups = len((select or {}).get("groups", range(N_GROUPS)))
    assert len(_chunk_requests(log)) == n_groups * 3  # 3 chunks per group, each once
    assert round_trips(log) == 1  # <= 12 chunks and a HEAD: all in flight at once


def test_many_groups_stream_within_the_bound(local: Path, serve_http) -> None:
    http = serve_http(local)
    cube = read_cube(http.url, storage_options={"max_in_flight": 3})
    http.fault("*", latency=LATENCY)
    http.clear()
    assert np.array_equal(cube.to_numpy("counts"), read_cube(local).to_numpy("counts"))
    log = http.requests()
    assert peak_in_flight(log) <= 3
    assert len(_chunk_requests(log)) == N_GROUPS * 3
    assert round_trips(log) <= 5  # 13 requests, 3 at a time: not one round per group read


def test_groups_read_in_one_round_are_still_verified(local: Path, tmp_path: Path, serve_http):
    copy = tmp_path / "x.cube.zarr"
    shutil.copytree(local, copy)
    first, other = copy / "layers/counts/c/1/0/0", copy / "layers/counts/c/3/0/0"
    first_bytes = first.read_bytes()
    first.write_bytes(other.read_bytes())  # valid chunk, values of another group
    other.write_bytes(first_bytes)
    http = serve_http(copy)
    cube = read_cube(http.url)
    with pytest.raises(FormatError, match="group 'type 1': the values do not match"):
        cube.to_numpy("counts")


def _without_consolidated_metadata(local: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "old.cube.zarr"
    shutil.copytree(local, copy)
    root = json.loads((copy / "zarr.json").read_text())
    root.pop("consolidated_metadata", None)  # (a file of format 1.0 has none)
    (copy / "zarr.json").write_text(json.dumps(root))
    return copy


@pytest.mark.parametrize("kind", ["http", "s3"])
def test_a_cube_without_consolidated_metadata_opens_in_three_rounds(
    local: Path, tmp_path: Path, serve_http, serve_s3, kind: str
) -> None:
    """Issue 22, item 5 (67 round trips one after another before): the root; the documents of
    the tables, every column with its parts (which the ``tables`` attribute of format 1.2
    names with their encodings; pandas 3 stores strings as a group of values and mask), the
    cells, normalization and layers, together; their chunks. Each once: a table's frame,
    made later, fetches nothing (its columns were read, and verified, at open). The 22
    documents (pandas 3) are one round within the default ``max_in_flight`` (32; two rounds
    with the 16 it was)."""
    copy = _without_consolidated_metadata(local, tmp_path)
    served = serve_http(copy) if kind == "http" else serve_s3(copy)
    options = getattr(served, "storage_options", {})
    served.fault("*", latency=LATENCY)
    served.clear()
    cube = read_cube(served.url, storage_options=options)
    log = served.requests()
    assert len(log) == len({(r.method, r.path) for r in log})  # nothing twice
    documents = {p.relative_to(copy).as_posix() for p in copy.rglob("zarr.json")}
    asked = {r.path.removeprefix(served.root + "/") for r in log if r.path.endswith("zarr.json")}
    assert asked == documents | {"normalization/zarr.json"}  # the absent one too
    chunks = {
        p.relative_to(copy).as_posix()
        for p in copy.rglob("*")
        if p.is_file() and p.name != "zarr.json" and p.parts[len(copy.parts)] != "layers"
    }
    fetched = {r.path.removeprefix(served.root + "/") for r in log}
    assert chunks <= fetched  # every chunk of the tables and cells
    assert round_trips(log) == 3  # <= 4 (issue 22), on both stacks
    served.clear()
    expected = read_cube(copy)
    pd.testing.assert_frame_equal(cube.features, expected.features)
    pd.testing.assert_frame_equal(cube.samples, expected.samples)
    assert served.requests() == []
    _same(cube, copy)


GOLDEN = Path(__file__).parents[2] / "data" / "cube-files"


@pytest.mark.parametrize(
    ("name", "in_flight", "rounds"),
    [
        ("format-1.0.cube.zarr", None, 4),
        ("format-1.1.cube.zarr", None, 4),
        ("format-1.2.cube.zarr", None, 3),
        ("format-1.2-pandas3.cube.zarr", None, 4),
        ("format-1.1.cube.zarr", 16, 5),
    ],
)
def test_a_golden_cube_without_consolidated_metadata_opens_in_at_most_four_rounds(
    tmp_path: Path, serve_http, name: str, in_flight: int | None, rounds: int
) -> None:
    """Issue 22, item 5, for every format, at the default ``max_in_flight`` (32): the exact
    number of round trips (one after another on the server's clock) opening takes.

    A file of format 1.0 or 1.1 (no ``tables`` attribute) is gathered a level per round, each
    round fetching the chunks of the arrays whose documents came in the round before: the
    root; the tables, cells, normalization and layers; the columns with the chunks of the
    cells and normalization; the parts of the columns stored as groups (a categorical, two
    nullable columns) with their first chunks (guessed: ``c/0``) and the other columns'
    chunks. That last round is 20 requests: with the 16 the default was, a fifth round (it
    took 5 before requests were pipelined, whatever the bound). A file of format 1.2 takes the
    root, the documents, the chunks: 3 rounds, or 4 when its 36 documents (pandas 3 stores
    every string column as a group of values and mask) are more than fit in one. Each object
    once; every stored object opening reads, and no other but absent chunks."""
    copy = _without_consolidated_metadata(GOLDEN / name, tmp_path)
    http = serve_http(copy)
    http.fault("*", latency=LATENCY)
    http.clear()
    options = {} if in_flight is None else {"max_in_flight": in_flight}
    cube = read_cube(http.url, storage_options=options)
    log = http.requests()
    assert round_trips(log) == rounds
    assert peak_in_flight(log) <= (in_flight or 32)
    assert len(log) == len({(r.method, r.path) for r in log})  # nothing twice
    stored = {p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()}
    opened = {key for key in stored if not key.startswith("layers/") or key.endswith("zarr.json")}
    fetched = {r.path.removeprefix(http.root + "/"): r.status for r in log}
    assert opened <= fetched.keys()
    assert all(fetched[key] == 404 and "/c/" in key for key in fetched.keys() - opened)
    expected = read_cube(GOLDEN / name)
    assert cube.fingerprint == expected.fingerprint
    pd.testing.assert_frame_equal(cube.samples, expected.samples)
    pd.testing.assert_frame_equal(cube.features, expected.features)
    pd.testing.assert_frame_equal(cube.groups, expected.groups)
    assert np.array_equal(cube.cells, expected.cells)
    assert np.array_equal(cube.to_numpy("counts"), expected.to_numpy("counts"))


def test_read_table_by_url_takes_a_round_per_level(tmp_path: Path, serve_http) -> None:
    """A table (write_table stores no consolidated metadata) is read a level per round, each
    object once: its document; its columns'; the parts of its encoded columns with their
    first chunks (guessed, ``c/0``) and the chunks of the plain columns."""
    import pandas as pd

    frame = pd.DataFrame(
        {"n": [1, 2, 3], "s": ["a", None, "c"], "c": pd.Categorical(["x", "y", "x"])},
        index=pd.Index(["a", "b", "c"], name="id"),
    )
    write_table(frame, tmp_path / "t")
    http = serve_http(tmp_path / "t")
    http.fault("*", latency=LATENCY)
    http.clear()
    pd.testing.assert_frame_equal(read_table(http.url), read_table(tmp_path / "t"))
    log = http.requests()
    assert len(log) == len({r.path for r in log})  # each object once
    assert round_trips(log) == 3
    http.clear()
    selected = read_table(http.url, columns=["c"])
    pd.testing.assert_frame_equal(selected, read_table(tmp_path / "t", columns=["c"]))
    log = http.requests()
    chunks = {r.path.removeprefix(http.root + "/") for r in log if not r.path.endswith(".json")}
    stored = {
        p.relative_to(tmp_path / "t").as_posix()
        for p in (tmp_path / "t").rglob("*")
        if p.is_file() and p.name != "zarr.json"
    }
    assert {key for key in stored if key.split("/")[0] in ("id", "c")} <= chunks
    assert {key.split("/")[0] for key in chunks} == {"id", "c"}  # no chunk of another column
    assert round_trips(log) == 3
