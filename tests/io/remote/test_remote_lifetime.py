"""What remote reads leave behind in a process: a bounded number of obstore clients (each with
its connections) however many URLs are read, and processes forked after obstore was used that
fail at once (obstore's runtime does not survive a fork) instead of hanging."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("obstore")

import cytepool
import cytepool.io.zarr.remote as remote
from cytepool.errors import RemoteStoreError
from cytepool.io import read_cube, write_cube
from cytepool.io.zarr.remote import RemoteStore
from factories import make_cube


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("remote-lifetime") / "l.cube.zarr"
    write_cube(make_cube(np.arange(3 * 4 * 10, dtype=np.int32).reshape(3, 4, 10)), path)
    return path


@pytest.fixture
def no_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "_clients", {})


# ---------------------------------------------------------------------------------------------
# Clients


@pytest.mark.usefixtures("no_clients")
def test_many_urls_keep_a_bounded_number_of_clients() -> None:
    for i in range(5 * remote._MOST_CLIENTS):
        RemoteStore(f"https://example.invalid/c{i}.cube.zarr").client()
    assert len(remote._clients) == remote._MOST_CLIENTS


@pytest.mark.usefixtures("no_clients")
def test_the_most_recently_used_clients_are_kept() -> None:
    first = RemoteStore("https://example.invalid/first.cube.zarr")
    made = first.client()[0]
    for i in range(remote._MOST_CLIENTS - 1):
        RemoteStore(f"https://example.invalid/c{i}.cube.zarr").client()
    assert first.client()[0] is made  # used again: now the most recent
    RemoteStore("https://example.invalid/last.cube.zarr").client()
    assert first.client()[0] is made


@pytest.mark.usefixtures("no_clients")
def test_reads_of_many_urls_work_while_their_clients_are_dropped(local: Path, serve_http) -> None:
    expected = read_cube(local).to_numpy("counts")
    served = [serve_http(local, f"u{i}.cube.zarr") for i in range(2 * remote._MOST_CLIENTS)]
    kept = read_cube(served[0].url)
    handle = RemoteStore(served[0].url).open()  # holds its client while others come and go
    for copy in served[1:]:
        np.testing.assert_array_equal(read_cube(copy.url).to_numpy("counts"), expected)
    assert len(remote._clients) <= remote._MOST_CLIENTS
    assert handle.get("zarr.json", limit=1 << 20) is not None
    handle.close()
    np.testing.assert_array_equal(kept.to_numpy("counts"), expected)


def test_a_url_obstore_makes_no_client_of_is_a_remote_store_error() -> None:
    with pytest.raises(RemoteStoreError, match=r"az://account.*storage_options"):
        RemoteStore("az://account").client()


# ---------------------------------------------------------------------------------------------
# Forked processes

FORKED = """
import multiprocessing, sys
from cytepool.io import read_cube


def total(source, queue):
    try:
        cube = read_cube(source) if isinstance(source, str) else source
        queue.put(str(int(cube.to_numpy("counts").sum())))
    except Exception as error:
        queue.put(f"{type(error).__name__}: {error}")


url, used = sys.argv[1], sys.argv[2] == "used"
source = read_cube(url) if used else url
if used:
    source.to_numpy("counts")  # the parent used obstore
context = multiprocessing.get_context("fork")
queue = context.Queue()
child = context.Process(target=total, args=(source, queue))
child.start()
child.join(20)
if child.is_alive():
    child.kill()
    print("hung")
else:
    print(queue.get(timeout=5))
"""


def _in_a_forked_child(url: str, *, used: bool) -> str:
    """What a fork child of a new process read (a sum, or an error), the parent having read by
    URL first if ``used``."""
    source = str(Path(cytepool.__file__).parents[1])
    path = os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", FORKED, url, "used" if used else "unused"],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


needs_fork = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork start method"
)


@needs_fork
def test_a_fork_child_of_a_process_that_used_obstore_fails_at_once(local: Path, serve_http) -> None:
    served = serve_http(local)
    started = time.monotonic()
    said = _in_a_forked_child(served.url, used=True)
    assert said.startswith("RemoteStoreError: ")
    assert served.url in said
    assert "'spawn'" in said
    assert time.monotonic() - started < 20


@needs_fork
def test_a_fork_child_of_a_process_that_never_used_obstore_reads(local: Path, serve_http) -> None:
    served = serve_http(local)
    said = _in_a_forked_child(served.url, used=False)
    assert said == str(int(read_cube(local).to_numpy("counts").sum()))


def test_every_remote_operation_fails_once_forked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "_forked_after_use", True)
    store = RemoteStore("https://example.invalid/x.cube.zarr")
    with pytest.raises(RemoteStoreError, match=r"forked.*'spawn' or 'forkserver'"):
        store.client()
    with pytest.raises(RemoteStoreError, match="forked"):
        read_cube(store.url)
