"""The first chunks of encoded columns' parts, fetched on a guess of their keys with their
documents (cytepool.io.tables.gather), read by URL from the real HTTP test server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from remote_servers import round_trips

from cytepool.io import read_table, write_table
from cytepool.io.tables import gather

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
