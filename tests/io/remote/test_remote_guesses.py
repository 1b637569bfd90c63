"""The first chunks of encoded columns' parts, fetched on a guess of their keys with their
documents (cytepool.io.tables.gather), read by URL from the real HTTP test server."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from remote_servers import peak_in_flight, round_trips

from cytepool.errors import FormatError, RemoteStoreError
from cytepool.io import read_table, write_table
from cytepool.io.tables import gather, registry

pytest.importorskip("obstore")
pd = pytest.importorskip("pandas")

LATENCY = 0.15  # seconds per request: requests sent together overlap on the server's clock


def _table(path: Path) -> Path:
    """A table with an index, a nullable integer column with a null (values and mask stored)
    and one without (its mask is all false: no chunk stored)."""
    frame = pd.DataFrame(
        {
            "full": pd.array([1, 2, 3], dtype="Int64"),
            "holed": pd.array([1, None, 3], dtype="Int64"),
        },
        index=pd.Index([10, 20, 30], name="id"),
    )
    write_table(frame, path)
    return path


def _read(served, path: Path) -> list:
    served.fault("*", latency=LATENCY)
    served.clear()
    pd.testing.assert_frame_equal(read_table(served.url), read_table(path))
    return served.requests()


def _keys(served, log: list, status: int | None = None) -> list[str]:
    root = served.root + "/"
    return [r.path.removeprefix(root) for r in log if status is None or r.status == status]


def _separator(path: Path, node: str, separator: str) -> None:
    """Rewrite the array at ``node`` to the ``default`` encoding with ``separator``."""
    document = json.loads((path / node / "zarr.json").read_text())
    document["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": separator}}
    (path / node / "zarr.json").write_text(json.dumps(document))
    (path / node / "c/0").rename(path / node / f"c{separator}0")
    (path / node / "c").rmdir()


def test_a_guessed_chunk_found_absent_is_the_fill_value(tmp_path: Path, serve_http) -> None:
    """The guess of ``full/mask/c/0`` finds nothing: the mask's document confirms it is its
    chunk, so it reads as all false (not asked again), in three rounds."""
    path = _table(tmp_path / "t")
    assert not (path / "full/mask/c/0").exists()
    http = serve_http(path)
    log = _read(http, path)
    assert _keys(http, log, 404) == ["full/mask/c/0"]
    assert len(log) == len(set(_keys(http, log)))  # each object once
    assert round_trips(log) == 3


def test_a_guess_under_another_key_is_ignored(tmp_path: Path, serve_http) -> None:
    """A part whose chunk key uses another separator (``c.0``) while its column's neighbours
    use ``c/0``: the guess ``c/0`` (a stray object here) is not its chunk and is not used;
    the chunk is fetched by its reader, one round later."""
    path = _table(tmp_path / "t")
    _separator(path, "holed/values", ".")
    (path / "holed/values/c").mkdir()
    (path / "holed/values/c/0").write_bytes(b"not this array's chunk")
    http = serve_http(path)
    log = _read(http, path)
    keys = _keys(http, log)
    assert keys.count("holed/values/c/0") == 1  # the guess
    assert keys.count("holed/values/c.0") == 1  # the chunk
    assert len(log) == len(set(keys))
    assert round_trips(log) == 4


def test_the_guess_follows_the_convention_of_the_columns_beside(tmp_path: Path, serve_http) -> None:
    """Every array of the table keys its chunks ``c.0``: the parts' first chunks are guessed
    so, and the table is read in three rounds with no request for an absent object but the
    mask of ``full`` (no chunk stored)."""
    path = _table(tmp_path / "t")
    for node in ("id", "full/values", "holed/values", "holed/mask"):
        _separator(path, node, ".")
    document = json.loads((path / "full/mask/zarr.json").read_text())
    document["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": "."}}
    (path / "full/mask/zarr.json").write_text(json.dumps(document))
    http = serve_http(path)
    log = _read(http, path)
    assert _keys(http, log, 404) == ["full/mask/c.0"]
    assert len(log) == len(set(_keys(http, log)))
    assert round_trips(log) == 3


def test_a_guess_larger_than_its_bound_is_fetched_again_by_its_reader(
    tmp_path: Path, serve_http, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first chunk larger than GUESS_LIMIT is refused from its announced length (its body
    is not kept) and fetched again by its reader, with its array's bound."""
    monkeypatch.setattr(gather, "GUESS_LIMIT", 4)
    path = _table(tmp_path / "t")
    http = serve_http(path)
    log = _read(http, path)
    keys = _keys(http, log)
    parts = ["full/values/c/0", "holed/values/c/0", "holed/mask/c/0"]
    assert [keys.count(key) for key in parts] == [2, 2, 2]
    assert keys.count("full/mask/c/0") == 1  # absent: confirmed as absent, not asked again
    assert round_trips(log) == 4


# ---------------------------------------------------------------------------------------------
# A guess is used only when the document confirms it: confirmed, refuted, absent, failed


def _frame() -> pd.DataFrame:
    """Two nullable integer columns of different values (so a chunk of one read as the other's
    is a wrong value, not an error) and a categorical."""
    return pd.DataFrame(
        {
            "a": pd.array([1, 2, 3], dtype="Int64"),
            "b": pd.array([7, None, 9], dtype="Int64"),
            "c": pd.Categorical(["x", "y", "x"]),
        },
        index=pd.Index([10, 20, 30], name="id"),
    )


def _written(path: Path) -> Path:
    write_table(_frame(), path)
    return path


def _encode(path: Path, node: str, name: str, separator: str) -> str:
    """Rewrite the array at ``node`` to the chunk key encoding ``name`` with ``separator``,
    its chunks moved to their keys under it; the key of its first chunk, from the table."""
    document = json.loads((path / node / "zarr.json").read_text())
    document["chunk_key_encoding"] = {"name": name, "configuration": {"separator": separator}}
    (path / node / "zarr.json").write_text(json.dumps(document))
    prefix = "" if name == "v2" else f"c{separator}"
    if (path / node / "c").exists():  # (a mask of no missing value has no chunk)
        for chunk in sorted((path / node / "c").glob("*")):
            chunk.rename(path / node / f"{prefix}{chunk.name}")
        (path / node / "c").rmdir()
    return f"{node}/{prefix}0"


def _read_logged(served, **options) -> tuple[pd.DataFrame, list]:
    served.fault("*", latency=LATENCY)
    served.clear()
    frame = read_table(served.url, storage_options=options)
    return frame, served.requests()


def _answered(served, timeout: float = 10.0) -> list:
    """The log once the server has answered every request in it (a guess dropped in flight
    may still be answered after the read returned, and after its handle cancelled it)."""
    deadline = time.monotonic() + timeout
    log = served.requests()
    while any(r.end is None for r in log) and time.monotonic() < deadline:
        time.sleep(0.1)
        log = served.requests()
    return log


def test_a_confirmed_guess_is_taken_and_not_asked_again(tmp_path: Path, serve_http) -> None:
    """Every part's first chunk is guessed ``c/0`` with the part's document: the documents
    confirm each, so each is fetched once and the table is read in three rounds."""
    path = _written(tmp_path / "t")
    http = serve_http(path)
    frame, log = _read_logged(http)
    pd.testing.assert_frame_equal(frame, _frame())
    keys = _keys(http, log)
    parts = ["b/values/c/0", "b/mask/c/0", "c/codes/c/0", "c/categories/c/0", "a/values/c/0"]
    assert [keys.count(key) for key in parts] == [1] * 5
    assert len(keys) == len(set(keys))
    assert round_trips(log) == 3


@pytest.mark.parametrize(("name", "separator"), [("v2", "."), ("default", ".")])
def test_a_guess_refuted_by_the_document_is_never_used(
    tmp_path: Path, serve_http, name: str, separator: str
) -> None:
    """``b/values`` keys its chunk otherwise (``0`` or ``c.0``) while a valid chunk of other
    values (``a``'s) lies at the guessed ``c/0``: the guess is fetched, the document refutes
    it, and the values come from the document's key."""
    path = _written(tmp_path / "t")
    key = _encode(path, "b/values", name, separator)
    stray = path / "b/values/c/0"
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes((path / "a/values/c/0").read_bytes())
    http = serve_http(path)
    frame, log = _read_logged(http)
    pd.testing.assert_frame_equal(frame, _frame())  # b is 7, NA, 9: not a's 1, 2, 3
    keys = _keys(http, log)
    assert keys.count("b/values/c/0") == 1  # the guess, fetched and ignored
    assert keys.count(key) == 1  # the chunk, fetched by its reader one round later
    assert round_trips(log) == 4


def test_a_guess_of_a_sharded_part_is_never_taken_as_a_chunk(tmp_path: Path, serve_http) -> None:
    """``b/values`` rewritten by zarr-python as one shard of three inner chunks: the guess
    ``c/0`` finds the shard, an object under the right key but not a chunk (a sharded array is
    read by ranges of it); the document refutes the guess, and the values are the inner
    chunks'."""
    zarr = pytest.importorskip("zarr")
    import numpy as np

    path = _written(tmp_path / "t")
    node = path / "b" / "values"
    attributes = json.loads((node / "zarr.json").read_text())["attributes"]
    shutil.rmtree(node)
    array = zarr.create_array(
        store=str(node),
        shape=(3,),
        chunks=(1,),
        shards=(3,),
        dtype="int64",
        fill_value=0,
        attributes=attributes,
    )
    array[:] = np.array([7, 0, 9], dtype=np.int64)
    http = serve_http(path)
    frame, log = _read_logged(http)
    pd.testing.assert_frame_equal(frame, _frame())
    guessed = [r for r in log if r.path.endswith("/b/values/c/0") and r.range is None]
    assert len(guessed) == 1  # the guess; the reads of the shard are ranges
    assert any(r.path.endswith("/b/values/c/0") and r.range is not None for r in log)


def test_a_guess_found_absent_but_refuted_is_not_the_fill_value(tmp_path: Path, serve_http) -> None:
    """The guess ``b/values/c/0`` finds nothing (404), but the chunk is at ``c.0``: the values
    are the chunk's, not the fill value an absent chunk would read as."""
    path = _written(tmp_path / "t")
    key = _encode(path, "b/values", "default", ".")
    http = serve_http(path)
    frame, log = _read_logged(http)
    pd.testing.assert_frame_equal(frame, _frame())
    assert sorted(_keys(http, log, 404)) == ["a/mask/c/0", "b/values/c/0"]
    assert _keys(http, log).count(key) == 1


@pytest.mark.parametrize("fault", [{"errors": 1, "status": 500}, {"resets": 1}])
def test_a_guess_the_server_fails_is_fetched_again_by_its_reader(
    tmp_path: Path, serve_http, unawaited, caplog: pytest.LogCaptureFixture, fault: dict
) -> None:
    """The server fails the guessed request (without retries: an error, or a reset
    connection): the guess is dropped and the reader fetches the chunk itself, within its
    array's bound, and gets the right values; nothing is left behind."""
    path = _written(tmp_path / "t")
    http = serve_http(path)
    http.fault("b/values/c/0", **fault)
    frame, log = _read_logged(http, max_retries=0)
    pd.testing.assert_frame_equal(frame, _frame())
    assert _keys(http, log).count("b/values/c/0") == 2
    assert unawaited() == []
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def test_a_chunk_the_server_keeps_failing_is_an_error(
    tmp_path: Path, serve_http, unawaited, caplog: pytest.LogCaptureFixture
) -> None:
    """Both the guess and the reader's own request fail: RemoteStoreError naming the chunk,
    never a value (not the fill value of a chunk found absent)."""
    path = _written(tmp_path / "t")
    http = serve_http(path)
    http.fault("b/values/c/0", errors=10, status=500)
    with pytest.raises(RemoteStoreError, match=r"b/values/c/0 could not be read"):
        _read_logged(http, max_retries=0)
    assert unawaited() == []
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


@pytest.mark.parametrize("bound", [2, 15])
def test_refuted_guesses_keep_requests_in_flight_within_the_bound(
    tmp_path: Path, serve_http, monkeypatch: pytest.MonkeyPatch, bound: int, unawaited
) -> None:
    """Every part keys its chunks ``c.0`` to ``c.2`` and the guesses (``c/0``) answer slowly:
    the documents refute them while they are in flight (with a bound of 15, all six: the six
    documents, the index's three chunks and the six guesses fit). A refuted guess is dropped,
    not cancelled: the server would still be answering it while the parts' chunks go out.
    So the server never answers more than ``max_in_flight`` requests at once, the parts'
    chunks are not held up by the guesses' slow answers, and the values are the chunks'."""
    monkeypatch.setattr(registry, "TARGET_CHUNK_BYTES", 8)  # one value per chunk
    path = _written(tmp_path / "t")
    parts = ("a/values", "a/mask", "b/values", "b/mask", "c/codes", "c/categories")
    for node in parts:
        _encode(path, node, "default", ".")
    http = serve_http(path)
    http.fault("*/c/0", latency=1.0)
    frame, _ = _read_logged(http, max_in_flight=bound)
    pd.testing.assert_frame_equal(frame, _frame())
    log = _answered(http)
    assert peak_in_flight(log) <= bound
    guesses = [r for r in log if r.path.endswith("/c/0") and not r.path.endswith("/id/c/0")]
    if bound == 15:
        assert len(guesses) == 6
        chunks = [r for r in log if "/c." in r.path]
        assert min(r.start for r in chunks) < min(r.end for r in guesses)  # not held up
    assert unawaited() == []


def test_a_confirmed_guess_beyond_its_arrays_bound_is_refused(tmp_path: Path, serve_http) -> None:
    """The guess of ``b/values/c/0`` (within GUESS_LIMIT) is confirmed, but its 4 KiB are
    more than any valid encoding of a chunk of three int64 values takes: a FormatError naming
    the chunk, as without a guess (and as a local read), never values."""
    path = _written(tmp_path / "t")
    (path / "b/values/c/0").write_bytes(bytes(4096))
    http = serve_http(path)
    with pytest.raises(FormatError, match=r"b/values/c/0"):
        _read_logged(http)
    assert _keys(http, http.requests()).count("b/values/c/0") == 1  # the guess, kept
    with pytest.raises(FormatError, match=r"b/values/c/0"):
        read_table(path)
