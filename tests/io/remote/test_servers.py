"""The test servers themselves, through the standard library's HTTP client.

Ranges, validators and conditional requests as RFC 9110 has them, the request log, each kind
of fault, the bounds of a server process, and the S3 server (moto) behind the same front.
"""

from __future__ import annotations

import concurrent.futures
import email.utils
import hashlib
import http.client
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from remote_servers import SAMPLE as DATA
from remote_servers import (
    Served,
    ServedHTTP,
    ServedS3,
    ServerProcess,
    peak_in_flight,
    round_trips,
)


@pytest.fixture
def served(serve_http: Callable[..., ServedHTTP], source: Path) -> ServedHTTP:
    return serve_http(source)


class Reply:
    def __init__(self, response: http.client.HTTPResponse, body: bytes):
        self.status = response.status
        self.headers = response.headers
        self.body = body


def fetch(served: Served, key: str, method: str = "GET", **headers: str) -> Reply:
    """One request on a new connection (header names with ``_`` for ``-``)."""
    names = {name.replace("_", "-"): value for name, value in headers.items()}
    return request(served.server, method, quote(f"{served.root}/{key}"), names)


def request(
    server: ServerProcess, method: str, target: str, headers: dict[str, str] | None = None
) -> Reply:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    try:
        connection.request(method, target, headers=headers or {})
        response = connection.getresponse()
        return Reply(response, response.read())
    finally:
        connection.close()


def test_whole_file_with_validators(served: ServedHTTP) -> None:
    reply = fetch(served, "a.bin")
    assert (reply.status, reply.body) == (200, DATA)
    assert reply.headers["Content-Length"] == "1024"
    assert reply.headers["Accept-Ranges"] == "bytes"
    assert reply.headers["ETag"].startswith('"')
    modified = email.utils.parsedate_to_datetime(reply.headers["Last-Modified"])
    assert modified.timestamp() == pytest.approx((served.path / "a.bin").stat().st_mtime, abs=1)


@pytest.mark.parametrize(
    ("spec", "status", "span"),
    [
        ("bytes=10-19", 206, (10, 20)),
        ("bytes=1000-", 206, (1000, 1024)),
        ("bytes=-5", 206, (1019, 1024)),
        ("bytes=-5000", 206, (0, 1024)),  # a suffix longer than the file: all of it
        ("bytes=1020-5000", 206, (1020, 1024)),  # an end past the file: up to its end
        ("bytes=0-0", 206, (0, 1)),
        ("bytes=1024-", 416, None),
        ("bytes=2000-3000", 416, None),
        ("bytes=-0", 416, None),
        ("bytes=5-1", 200, (0, 1024)),  # invalid: ignored
        ("bytes=0-1,5-6", 200, (0, 1024)),  # several ranges: ignored (RFC 9110 allows it)
        ("items=0-1", 200, (0, 1024)),
        ("bytes=a-b", 200, (0, 1024)),
    ],
)
def test_ranges(served: ServedHTTP, spec: str, status: int, span: tuple[int, int] | None) -> None:
    reply = fetch(served, "a.bin", Range=spec)
    assert reply.status == status
    if span is None:
        assert reply.headers["Content-Range"] == "bytes */1024"
        assert reply.body == b""
        return
    assert reply.body == DATA[span[0] : span[1]]
    if status == 206:
        assert reply.headers["Content-Range"] == f"bytes {span[0]}-{span[1] - 1}/1024"
    else:
        assert "Content-Range" not in reply.headers


def test_any_range_of_an_empty_file_is_unsatisfiable(served: ServedHTTP) -> None:
    assert fetch(served, "empty").status == 200
    for spec in ("bytes=0-", "bytes=-1"):
        reply = fetch(served, "empty", Range=spec)
        assert (reply.status, reply.headers["Content-Range"]) == (416, "bytes */0")


def test_a_rule_ignores_ranges_as_servers_without_them_do(served: ServedHTTP) -> None:
    served.fault("a.bin", ignore_range=True)
    reply = fetch(served, "a.bin", Range="bytes=10-19", If_Match="*")
    assert (reply.status, reply.body) == (200, DATA)  # the other headers still count:
    assert fetch(served, "a.bin", If_Match='"other"').status == 412
    assert fetch(served, "empty", Range="bytes=-1").status == 416  # other keys keep ranges
    assert [r.range for r in served.requests()][:1] == ["bytes=10-19"]  # logged as sent


def test_head_has_the_headers_of_get_and_no_body(served: ServedHTTP) -> None:
    got, head = fetch(served, "a.bin"), fetch(served, "a.bin", "HEAD", Range="bytes=0-1")
    assert (head.status, head.body) == (200, b"")  # a Range applies to GET only
    for name in ("Content-Length", "ETag", "Last-Modified", "Accept-Ranges"):
        assert head.headers[name] == got.headers[name]


@pytest.mark.parametrize("method", ["GET", "HEAD", "PROPFIND"])
@pytest.mark.parametrize("key", ["missing", "sub/missing", "a.bin/x", "../x.cube.zarr/a.bin"])
def test_missing_is_404(served: ServedHTTP, method: str, key: str) -> None:
    assert fetch(served, key, method).status == 404


def test_other_methods_are_refused(served: ServedHTTP) -> None:
    reply = fetch(served, "a.bin", "DELETE")
    assert (reply.status, reply.headers["Allow"]) == (405, "GET, HEAD, PROPFIND")
    assert (served.path / "a.bin").read_bytes() == DATA


def _conditions(etag: str, modified: str) -> list[tuple[dict[str, str], int]]:
    past, future = "Mon, 01 Jan 2001 00:00:00 GMT", "Fri, 01 Jan 2100 00:00:00 GMT"
    return [
        ({"If-Match": etag}, 200),
        ({"If-Match": f'"other", {etag}'}, 200),
        ({"If-Match": "*"}, 200),
        ({"If-Match": '"other"'}, 412),
        ({"If-Match": f"W/{etag}"}, 412),  # If-Match compares strongly
        ({"If-Unmodified-Since": future}, 200),
        ({"If-Unmodified-Since": past}, 412),
        ({"If-Match": etag, "If-Unmodified-Since": past}, 200),  # If-Match wins
        ({"If-None-Match": etag}, 304),
        ({"If-None-Match": f"W/{etag}"}, 304),  # If-None-Match compares weakly
        ({"If-None-Match": "*"}, 304),
        ({"If-None-Match": '"other"'}, 200),
        ({"If-Modified-Since": modified}, 304),
        ({"If-Modified-Since": past}, 200),
        ({"If-None-Match": '"other"', "If-Modified-Since": modified}, 200),  # INM wins
        ({"Range": "bytes=0-9", "If-Range": etag}, 206),
        ({"Range": "bytes=0-9", "If-Range": modified}, 206),
        ({"Range": "bytes=0-9", "If-Range": '"other"'}, 200),  # another version: all of it
        ({"Range": "bytes=0-9", "If-Range": f"W/{etag}"}, 200),  # If-Range compares strongly
        ({"Range": "bytes=0-9", "If-Range": past}, 200),
        ({"Range": "bytes=0-9", "If-Match": '"other"'}, 412),
    ]


@pytest.mark.parametrize("case", range(len(_conditions("", ""))))
def test_conditional_requests(served: ServedHTTP, case: int) -> None:
    first = fetch(served, "a.bin")
    headers, status = _conditions(first.headers["ETag"], first.headers["Last-Modified"])[case]
    reply = fetch(served, "a.bin", **headers)
    assert reply.status == status, headers
    expected = {200: DATA, 206: DATA[:10], 304: b"", 412: b""}[status]
    assert reply.body == expected
    if status == 304:
        assert reply.headers["ETag"] == first.headers["ETag"]


def test_replaced_file_has_a_new_etag(served: ServedHTTP) -> None:
    before = fetch(served, "a.bin").headers["ETag"]
    served.replace("a.bin", DATA)  # the same bytes: a new version all the same
    after = fetch(served, "a.bin")
    assert after.headers["ETag"] != before
    assert after.body == DATA
    assert fetch(served, "a.bin", If_Match=before).status == 412
    assert fetch(served, "a.bin", Range="bytes=0-9", If_Range=before).status == 200
    served.replace("new/key", b"added")
    assert fetch(served, "new/key").body == b"added"


def test_directory_index_lists_names_with_slashes_for_directories(served: ServedHTTP) -> None:
    reply = fetch(served, "")
    assert reply.status == 200
    for name in ("a.bin", "empty", "sub/", "zarr.json"):
        assert f'href="{name}"'.encode() in reply.body
    assert fetch(served, "sub").status == 404  # no index without the slash, as objects go


@pytest.mark.parametrize(
    ("depth", "hrefs"),
    [
        ("0", ["/"]),
        ("1", ["/", "/a.bin", "/empty", "/sub/", "/zarr.json"]),
        ("infinity", ["/", "/a.bin", "/empty", "/sub/", "/sub/x", "/zarr.json"]),
    ],
)
def test_propfind_lists_to_a_depth(served: ServedHTTP, depth: str, hrefs: list[str]) -> None:
    reply = fetch(served, "", "PROPFIND", Depth=depth)
    assert reply.status == 207
    found = [h.split("</D:href>")[0] for h in reply.body.decode().split("<D:href>")[1:]]
    assert found == [served.root + href for href in hrefs]
    assert b"<D:getcontentlength>1024</D:getcontentlength>" in reply.body or depth == "0"


def test_log_records_requests_but_not_control_calls(served: ServedHTTP) -> None:
    fetch(served, "a.bin", Range="bytes=-4", If_Match="*")
    fetch(served, "missing", "HEAD")
    served.server.faults()  # a control call
    first, second = served.requests()
    assert (first.method, first.path, first.range, first.status, first.sent) == (
        "GET",
        f"{served.root}/a.bin",
        "bytes=-4",
        206,
        4,
    )
    assert first.conditions == {"If-Match": "*"}
    assert first.end is not None
    assert first.start <= first.end <= second.start
    assert (second.method, second.status, second.sent, second.fault) == ("HEAD", 404, 0, None)
    served.clear()
    assert served.requests() == []


def test_copies_are_separate(serve_http: Callable[..., ServedHTTP], source: Path) -> None:
    one, two = serve_http(source), serve_http(source, "other.zarr")
    assert two.url.endswith("/other.zarr")
    assert one.url != two.url
    one.fault("a.bin", errors=1)
    two.fault("a.bin", latency=0.01)
    assert fetch(two, "a.bin").status == 200
    assert fetch(one, "a.bin").status == 503
    assert [r.path for r in one.requests()] == [f"{one.root}/a.bin"]
    two.clear_faults()
    assert [r.tag for r in one.server.faults()] == [one.root]


def test_errors_then_success(served: ServedHTTP) -> None:
    served.fault("a.bin", errors=2)
    served.fault("zarr.json", errors=1, status=500)
    statuses = [fetch(served, "a.bin").status for _ in range(3)]
    assert statuses == [503, 503, 200]
    assert fetch(served, "zarr.json").status == 500
    assert [r.fault for r in served.requests()] == ["error 503", "error 503", None, "error 500"]
    assert [r.errors for r in served.server.faults()] == [0, 0]


def test_reset_closes_the_connection_without_a_response(served: ServedHTTP) -> None:
    served.fault("a.bin", resets=1)
    with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
        fetch(served, "a.bin")
    assert fetch(served, "a.bin").body == DATA
    assert [(r.status, r.fault) for r in served.requests()] == [(0, "reset"), (200, None)]


def test_truncated_body_says_more_than_it_sends(served: ServedHTTP) -> None:
    served.fault("a.bin", truncate=1)
    with pytest.raises(http.client.IncompleteRead) as caught:
        fetch(served, "a.bin")
    assert (len(caught.value.partial), caught.value.expected) == (512, 512)
    assert fetch(served, "a.bin").body == DATA
    logged = served.requests()[0]
    assert (logged.status, logged.sent, logged.fault) == (200, 512, "truncate")


def test_latency_and_slow_bodies_delay_but_keep_the_bytes(served: ServedHTTP) -> None:
    served.fault("a.bin", latency=0.05, slow=0.01, piece=100)
    assert fetch(served, "a.bin").body == DATA
    (logged,) = served.requests()
    assert logged.end is not None
    assert logged.end - logged.start >= 0.05 + 10 * 0.01  # 11 pieces, 10 pauses between


def test_replace_after_n_requests_changes_the_object_before_the_nth_ends(
    served: ServedHTTP, tmp_path: Path
) -> None:
    (tmp_path / "new").write_bytes(b"the new version")
    served.fault("a.bin", replace_after=2, replace_with=str(tmp_path / "new"))
    first, second = fetch(served, "a.bin"), fetch(served, "a.bin")
    assert first.body == second.body == DATA
    assert first.headers["ETag"] == second.headers["ETag"]
    third = fetch(served, "a.bin")
    assert third.body == b"the new version"
    assert third.headers["ETag"] != second.headers["ETag"]
    assert [r.replaced for r in served.requests()] == [False, True, False]


def test_rules_select_methods_and_patterns(served: ServedHTTP) -> None:
    served.fault("sub/*", methods=["HEAD"], errors=5)
    assert fetch(served, "sub/x").status == 200
    assert fetch(served, "sub/x", "HEAD").status == 503
    assert fetch(served, "a.bin", "HEAD").status == 200
    with pytest.raises(RuntimeError, match="TypeError"):
        served.server.control("POST", "faults", b'[{"nonsense": 1}]')


def test_round_trips_and_peak_of_concurrent_and_sequential_requests(served: ServedHTTP) -> None:
    served.fault("*", latency=0.3)  # long enough for the 8 to be in flight together
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        bodies = list(pool.map(lambda _: fetch(served, "a.bin").body, range(8)))
    assert bodies == [DATA] * 8
    together = served.requests()
    assert (len(together), round_trips(together), peak_in_flight(together)) == (8, 1, 8)
    served.clear()
    served.clear_faults()  # one after another, they are apart without latency
    for _ in range(3):
        fetch(served, "zarr.json")
    apart = served.requests()
    assert (round_trips(apart), peak_in_flight(apart)) == (3, 1)
    assert round_trips(together + apart) == 4


def test_log_entry_is_complete_when_the_client_has_the_response(served: ServedHTTP) -> None:
    for _ in range(10):  # the entry is finished before the response's last byte is sent
        fetch(served, "a.bin")
        last = served.requests()[-1]
        assert (last.status, last.sent) == (200, 1024)
        assert last.end is not None


def test_server_process_stops_when_asked(tmp_path: Path) -> None:
    server = ServerProcess("http", tmp_path, tmp_path / "log")
    assert server.running
    server.stop()
    assert not server.running
    assert server._process.returncode == 0  # it stopped itself when its stdin closed


def test_server_stops_by_itself_after_its_lifetime(tmp_path: Path) -> None:
    with ServerProcess("http", tmp_path, tmp_path / "log", "--lifetime", "0.2") as server:
        server._process.wait(timeout=20)
        assert server._process.returncode == 0


def test_server_stops_after_its_maximum_of_requests(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    with ServerProcess("http", tmp_path, tmp_path / "log", "--max-requests", "2") as server:
        assert [request(server, "GET", "/f").status for _ in range(3)] == [200, 200, 503]
        server._process.wait(timeout=20)
        assert server._process.returncode == 0


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"(?s)ended at start.*directory to serve"):
        ServerProcess("http", None, tmp_path / "log")


def test_servers_listen_on_loopback_only_on_ports_of_their_own(
    http_server: ServerProcess, tmp_path: Path
) -> None:
    table = Path("/proc/net/tcp")
    if not table.exists():
        pytest.skip("reads Linux's table of sockets")
    with ServerProcess("http", tmp_path, tmp_path / "log") as other:
        assert other.port != http_server.port
        rows = [line.split() for line in table.read_text().splitlines()[1:]]
        listening = {row[1] for row in rows if row[3] == "0A"}  # local address, LISTEN
        for port in (http_server.port, other.port):
            assert {a for a in listening if a.endswith(f":{port:04X}")} == {f"0100007F:{port:04X}"}


# --- the S3 server ---------------------------------------------------------------------------


@pytest.fixture
def public(serve_s3: Callable[..., ServedS3], source: Path) -> ServedS3:
    return serve_s3(source, public=True)


def test_s3_serves_uploaded_objects_with_ranges_and_etags(public: ServedS3) -> None:
    assert public.keys == ["a.bin", "empty", "sub/x", "zarr.json"]
    assert public.url == f"s3://{public.bucket}/x.cube.zarr"
    whole = fetch(public, "a.bin")
    assert (whole.status, whole.body) == (200, DATA)
    assert whole.headers["ETag"] == f'"{hashlib.md5(DATA).hexdigest()}"'
    part = fetch(public, "a.bin", Range="bytes=-4")
    assert (part.status, part.body, part.headers["Content-Range"]) == (
        206,
        DATA[-4:],
        "bytes 1020-1023/1024",
    )
    assert fetch(public, "missing").status == 404
    assert fetch(public, "a.bin", If_Match='"other"').status == 412
    assert fetch(public, "a.bin", If_None_Match=whole.headers["ETag"]).status == 304


def test_s3_private_objects_refuse_anonymous_reads(
    serve_s3: Callable[..., ServedS3], source: Path
) -> None:
    private = serve_s3(source)
    assert fetch(private, "a.bin").status == 403
    assert private.storage_options["secret_access_key"] not in repr(private)


def test_s3_listing_faults_and_replacement(public: ServedS3) -> None:
    listing = request(public.server, "GET", f"/{public.bucket}?list-type=2&prefix=x.cube.zarr/")
    assert listing.status == 200
    assert listing.body.count(b"<Key>") == 4
    public.fault("a.bin", errors=1)
    public.fault("zarr.json", truncate=1)
    refused = fetch(public, "a.bin")
    assert (refused.status, b"<Code>SlowDown</Code>" in refused.body) == (503, True)
    with pytest.raises(http.client.IncompleteRead):
        fetch(public, "zarr.json")
    before = fetch(public, "a.bin").headers["ETag"]
    public.replace("a.bin", b"changed")
    after = fetch(public, "a.bin")
    assert (after.body, after.headers["ETag"] != before) == (b"changed", True)
    logged = public.requests()
    assert logged[0].path == f"/{public.bucket}"
    assert "list-type=2" in logged[0].query
    assert [r.fault for r in logged[1:3]] == ["error 503", "truncate"]
