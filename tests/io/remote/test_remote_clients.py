"""What remote reads (issue 15) may rely on in obstore, pinned against the test servers.

Each behaviour here is one the research note (remote-research.md) reports and a remote store
will build on: ranges, validators, errors by kind, retries that never hand back short or mixed
bytes, conditional requests, credentials kept out of messages, and concurrent reads from
synchronous code inside a running event loop. Skipped without obstore (for now).
"""

from __future__ import annotations

import asyncio
import datetime
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from remote_servers import SAMPLE as DATA
from remote_servers import (
    TEST_SECRET,
    Served,
    ServedHTTP,
    ServedS3,
    peak_in_flight,
    round_trips,
)

obs = pytest.importorskip("obstore", reason="remote reads use obstore (cytepool[remote])")
from obstore.exceptions import (  # noqa: E402
    GenericError,
    NotModifiedError,
    PermissionDeniedError,
    PreconditionError,
)
from obstore.store import HTTPStore, from_url  # noqa: E402

RETRY = {
    "max_retries": 2,
    "backoff": {
        "init_backoff": datetime.timedelta(milliseconds=5),
        "max_backoff": datetime.timedelta(milliseconds=20),
    },
    "retry_timeout": datetime.timedelta(seconds=10),
}


def open_store(served: Served, **client: Any) -> Any:
    """An obstore store of a served copy, retrying quickly."""
    if isinstance(served, ServedS3):
        options = served.obstore_options
        options["client_options"] |= client
        return from_url(served.url, **options, retry_config=RETRY)
    return HTTPStore.from_url(
        served.url, client_options={"allow_http": True, **client}, retry_config=RETRY
    )


@pytest.fixture(params=["http", "s3"])
def served(request: pytest.FixtureRequest, source: Path) -> Served:
    serve = request.getfixturevalue(f"serve_{request.param}")
    return serve(source)


def test_reads_and_metadata(served: Served) -> None:
    store = open_store(served)
    whole = obs.get(store, "a.bin")
    assert bytes(whole.bytes()) == DATA
    meta = obs.head(store, "a.bin")
    assert (meta["size"], meta["e_tag"]) == (1024, whole.meta["e_tag"])
    assert meta["last_modified"].tzinfo is not None
    assert bytes(obs.get_range(store, "a.bin", start=10, length=5)) == DATA[10:15]
    suffix = obs.get(store, "a.bin", options={"range": {"suffix": 4}})
    assert (bytes(suffix.bytes()), suffix.range) == (DATA[-4:], (1020, 1024))
    parts = obs.get_ranges(store, "a.bin", starts=[0, 500], lengths=[2, 3])
    assert [bytes(p) for p in parts] == [DATA[0:2], DATA[500:503]]
    assert bytes(obs.get(store, "empty").bytes()) == b""


def test_get_ranges_coalesces_near_ranges_into_one_request(served: Served) -> None:
    store = open_store(served)
    served.clear()
    obs.get_ranges(store, "a.bin", starts=[0, 100, 900], lengths=[2, 2, 2])
    assert [r.range for r in served.requests()] == ["bytes=0-901"]
    served.clear()
    obs.get_ranges(store, "a.bin", starts=[0, 100, 900], lengths=[2, 2, 2], coalesce=0)
    assert sorted(r.range or "" for r in served.requests()) == [
        "bytes=0-1",
        "bytes=100-101",
        "bytes=900-901",
    ]


def test_list_gives_keys_with_the_url_path_before_them_on_http(served: Served) -> None:
    store = open_store(served)
    paths = sorted(entry["path"] for entry in obs.list(store).collect())
    # HTTPStore (WebDAV PROPFIND) gives paths from the server's root, S3Store from the prefix
    prefix = served.root.lstrip("/") + "/" if isinstance(served, ServedHTTP) else ""
    assert paths == [prefix + key for key in served.keys]
    listed = obs.list_with_delimiter(store, "sub")
    assert [o["path"] for o in listed["objects"]] == [prefix + "sub/x"]


def test_missing_object_is_file_not_found(served: Served) -> None:
    store = open_store(served)
    with pytest.raises(FileNotFoundError, match="missing"):
        obs.get(store, "missing")
    with pytest.raises(FileNotFoundError):
        obs.head(store, "missing")


def test_server_errors_are_retried_then_succeed(served: Served) -> None:
    store = open_store(served)
    served.fault("a.bin", errors=2)
    served.fault("zarr.json", resets=2)
    assert bytes(obs.get_range(store, "a.bin", start=0, length=4)) == DATA[:4]
    assert bytes(obs.get(store, "zarr.json").bytes()) == b'{"zarr_format": 3}'
    faults = [r.fault for r in served.requests()]
    assert faults == ["error 503", "error 503", None, "reset", "reset", None]


def test_server_errors_beyond_the_retries_raise(served: Served) -> None:
    store = open_store(served)
    served.fault("a.bin", errors=5)
    with pytest.raises(GenericError, match=r"after 2 retries.*503"):
        obs.get_range(store, "a.bin", start=0, length=4)
    assert len(served.requests()) == 3


def test_truncated_body_is_resumed_with_a_range(served: Served) -> None:
    store = open_store(served)
    served.fault("a.bin", truncate=1)
    assert bytes(obs.get(store, "a.bin").bytes()) == DATA
    first, second = served.requests()
    assert (first.fault, first.sent, second.range) == ("truncate", 512, "bytes=512-1023")


@pytest.mark.parametrize("if_match", [False, True])
def test_truncated_body_of_a_replaced_object_raises_never_mixes(
    served: Served, tmp_path: Path, if_match: bool
) -> None:
    store = open_store(served)
    (tmp_path / "same-size").write_bytes(bytes(1024))
    options = {"if_match": obs.head(store, "a.bin")["e_tag"]} if if_match else {}
    served.fault("a.bin", truncate=1, replace_after=1, replace_with=str(tmp_path / "same-size"))
    # the resumed request names the new version: obstore compares ETags (or sends If-Match)
    with pytest.raises(GenericError, match=r"body error|precondition"):
        obs.get(store, "a.bin", options=options).bytes()


def test_conditional_requests(served: Served) -> None:
    store = open_store(served)
    etag = obs.head(store, "a.bin")["e_tag"]
    assert bytes(obs.get(store, "a.bin", options={"if_match": etag}).bytes()) == DATA
    with pytest.raises(NotModifiedError):
        obs.get(store, "a.bin", options={"if_none_match": etag})
    served.replace("a.bin", DATA[::-1])  # S3's ETag is the MD5: the same bytes keep it
    with pytest.raises(PreconditionError):
        obs.get(store, "a.bin", options={"if_match": etag, "range": (0, 4)})
    assert obs.head(store, "a.bin")["e_tag"] != etag
    sent = [r.conditions for r in served.requests() if r.method == "GET"]
    assert sent[-1] == {"If-Match": etag}


def test_timeout_raises(served: Served) -> None:
    store = open_store(served, timeout="200ms")
    served.fault("a.bin", latency=1.0)
    with pytest.raises(GenericError, match="after 2 retries"):
        obs.get_range(store, "a.bin", start=0, length=4)


def test_s3_credentials_stay_out_of_reprs_and_messages(
    serve_s3: Callable[..., ServedS3], source: Path
) -> None:
    served = serve_s3(source)
    store = open_store(served)
    with pytest.raises(FileNotFoundError) as caught:
        obs.get(store, "missing")
    served.fault("a.bin", errors=5)
    with pytest.raises(GenericError) as failed:
        obs.get(store, "a.bin")
    for text in (repr(store), str(caught.value), str(failed.value)):
        assert TEST_SECRET not in text
    assert TEST_SECRET in str(store.config)  # the config shows it: never put it in a message


def test_s3_anonymous_reads(serve_s3: Callable[..., ServedS3], source: Path) -> None:
    for public in (True, False):
        served = serve_s3(source, public=public)
        anonymous = from_url(
            served.url,
            endpoint=served.endpoint,
            region="us-east-1",
            skip_signature=True,
            client_options={"allow_http": True},
            retry_config=RETRY,
        )
        if public:
            assert bytes(obs.get(anonymous, "a.bin").bytes()) == DATA
        else:
            with pytest.raises(PermissionDeniedError):
                obs.get(anonymous, "a.bin")


class PrivateLoop:
    """An event loop on a thread of its own, so synchronous code can run coroutines."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def test_concurrent_reads_from_synchronous_code_inside_a_running_loop(
    serve_http: Callable[..., ServedHTTP], tmp_path: Path
) -> None:
    source = tmp_path / "many"
    source.mkdir()
    for i in range(8):
        (source / str(i)).write_bytes(bytes([i]) * 100)
    served = serve_http(source)
    store = open_store(served)
    served.fault("*", latency=0.3)  # long enough for the 8 to be in flight together
    private = PrivateLoop()

    def read_all() -> list[bytes]:  # synchronous, as a Store method is
        async def gather() -> list[bytes]:
            parts = [obs.get_range_async(store, str(i), start=0, length=100) for i in range(8)]
            return [bytes(p) for p in await asyncio.gather(*parts)]

        return private.run(gather())

    async def notebook_cell() -> list[bytes]:  # a loop is running here, as in Jupyter
        idle = asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="running event loop"):
            asyncio.run(idle)
        idle.close()
        return read_all()

    try:
        assert asyncio.run(notebook_cell()) == [bytes([i]) * 100 for i in range(8)]
    finally:
        private.close()
    logged = served.requests()
    assert (len(logged), round_trips(logged), peak_in_flight(logged)) == (8, 1, 8)
