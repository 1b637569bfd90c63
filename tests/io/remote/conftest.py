"""Fixtures: an HTTP and an S3 test server on 127.0.0.1, and copies of directories served by them.

One server of each kind per pytest process (so per xdist worker), started when a test first
asks for it and stopped at the end of the session; each is a process of its own (see
remote_servers.py). ``serve_http(directory)`` / ``serve_s3(directory)`` copy a local directory
to the server and give a :class:`~remote_servers.Served` (its ``url``, its ``requests()``,
``fault(...)`` and ``replace(...)``); faults and the log are cleared after each test.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from remote_servers import ServedHTTP, ServedS3, ServerProcess, sample_tree


@pytest.fixture(scope="session")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The HTTP server of this test process, serving a temporary directory."""
    root = tmp_path_factory.mktemp("http-served")
    with ServerProcess("http", root, root.with_name(root.name + ".log")) as server:
        yield server


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The S3 server (moto) of this test process; skipped without moto[server]."""
    pytest.importorskip("moto", reason="the S3 test server needs moto[server]")
    pytest.importorskip("flask_cors", reason="the S3 test server needs moto[server]")
    log = tmp_path_factory.mktemp("s3-server") / "server.log"
    with ServerProcess("s3", None, log) as server:
        yield server


@pytest.fixture
def serve_http(http_server: ServerProcess) -> Iterator[Callable[..., ServedHTTP]]:
    """``serve_http(directory, name=None)``: a copy of ``directory`` served over HTTP."""

    def serve(directory: Path, name: str | None = None) -> ServedHTTP:
        return ServedHTTP(http_server, directory, name)

    yield serve
    _reset(http_server)


@pytest.fixture
def serve_s3(s3_server: ServerProcess) -> Iterator[Callable[..., ServedS3]]:
    """``serve_s3(directory, name=None, public=False)``: a copy of ``directory`` in a new bucket."""

    def serve(directory: Path, name: str | None = None, *, public: bool = False) -> ServedS3:
        return ServedS3(s3_server, directory, name, public=public)

    yield serve
    _reset(s3_server)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A small tree to serve (see :func:`remote_servers.sample_tree`)."""
    return sample_tree(tmp_path / "x.cube.zarr")


@pytest.fixture
def unawaited() -> Iterator[Callable[[], list[str]]]:
    """``unawaited()``: the "never awaited" warnings of coroutines finalised so far, on any
    thread (the remote event loop's included)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")

        def found() -> list[str]:
            gc.collect()
            return [str(w.message) for w in seen if "never awaited" in str(w.message)]

        yield found


def _reset(server: ServerProcess) -> None:
    if server.running:
        server.set_faults([])
        server.clear()
