"""Test servers on 127.0.0.1 for remote reads: a directory over HTTP, and S3 (moto).

Each server is a process of its own, started by :class:`ServerProcess` (the fixtures of
``conftest.py`` beside this file start one of each kind per pytest worker):

- ``python remote_servers.py http ROOT`` serves the directory ROOT: GET and HEAD of files with
  single byte ranges (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``; 206, or 416 with
  ``Content-Range: bytes */SIZE``; a multi-range or malformed Range is ignored, as RFC 9110
  allows), strong ETags (inode, size and mtime, so a replaced file has a new one),
  Last-Modified, the conditional requests of RFC 9110 section 13 (If-Match,
  If-Unmodified-Since, If-None-Match, If-Modified-Since, If-Range), 404 for what is absent,
  an HTML index for ``GET dir/`` (what fsspec's HTTPFileSystem lists) and WebDAV ``PROPFIND``
  (what obstore's HTTPStore lists);
- ``python remote_servers.py s3`` runs moto's S3 (its own werkzeug server, on another port of
  127.0.0.1) behind the same front server, which passes every request on unchanged.

The front server logs every request (method, path, Range, conditional headers, status, bytes
sent, start and end on the server's monotonic clock, client port) and injects faults by
:class:`Rule`: latency, N error statuses, N connection resets, N truncated bodies, slow bodies,
Range headers ignored (the whole object, as servers without ranges send it), bodies longer than
they should be (``extra`` bytes), weak ETags, and replacing an object after N requests for it.
Its control API, under ``/_control/`` (a path no S3 bucket can have), is neither logged nor
faulted: ``GET|DELETE /_control/log``, ``GET|PUT|DELETE /_control/faults`` and
``PUT /_control/object/PATH`` (put an object; S3: an unsigned PUT to moto, which also creates a
bucket).

Bounds: the server binds 127.0.0.1 only, on a port the system picks; it stops when its
standard input closes (the test process stopped it, or died), after ``--lifetime`` seconds or
after ``--max-requests`` requests; idle connections close after 30 seconds; injected delays are
capped. This module imports only the standard library (moto is imported in the s3 process).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import email.message
import email.utils
import fnmatch
import heapq
import html
import http.client
import itertools
import json
import os
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import parse_qs, quote, unquote, urlencode

CONTROL = "/_control/"
CONDITIONS = ("If-Match", "If-None-Match", "If-Range", "If-Modified-Since", "If-Unmodified-Since")
IDLE_TIMEOUT = 30.0  # seconds an idle keep-alive connection stays open
MAX_DELAY = 30.0  # seconds of injected delay one response may take at most
MAX_BODY = 1 << 30  # bytes a request body may have
HOP_BY_HOP = frozenset(
    ["connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"]
)
UPSTREAM_ONLY = HOP_BY_HOP | {"server", "date"}  # the front server sends its own

# ---------------------------------------------------------------------------------------------
# Faults


@dataclass
class Rule:
    """Faults for the requests whose path matches ``match`` (an fnmatch pattern, e.g. ``*/c/*``).

    Counts are consumed by matching requests in order: a request takes at most one action,
    from the first matching rule that still has one (within a rule a reset comes before an
    error, an error before a truncation); latency adds up over all matching rules, and a
    slow body comes from the first matching rule that has one. Every field is JSON.
    """

    match: str = "*"
    methods: list[str] | None = None  # None: every method
    latency: float = 0.0  # seconds before each matching response
    errors: int = 0  # the next N matching requests are answered with `status`
    status: int = 503
    resets: int = 0  # the next N matching requests: the connection is reset, no response
    truncate: int = 0  # the next N: the full Content-Length, half the body, then close
    slow: float = 0.0  # seconds between pieces of `piece` bytes of each matching body
    piece: int = 65536
    replace_after: int = 0  # after the Nth matching request, the object at its path...
    replace_with: str | None = None  # ...gets this local file's bytes (before its last byte)
    ignore_range: bool = False  # answer as if without Range: 200, the whole object (http.server)
    extra: int = 0  # bytes of zeros sent after each matching body, in its Content-Length too
    weak_etag: bool = False  # the ETag sent weak (W/"..."); If-Match still compares strongly
    tag: str | None = None  # a name to remove the rule by

    def applies(self, method: str, path: str) -> bool:
        """Whether the rule is for this request."""
        if self.methods is not None and method not in self.methods:
            return False
        return fnmatch.fnmatchcase(path, self.match)


@dataclass
class Plan:
    """What the faults do to one request."""

    latency: float = 0.0
    action: str | None = None  # "reset", "error" or "truncate"
    status: int = 0
    slow: tuple[float, int] | None = None
    replace_with: str | None = None
    ignore_range: bool = False
    extra: int = 0
    weak_etag: bool = False


class Faults:
    """The rules in force, consumed by requests under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []

    def set(self, rules: Iterable[Mapping[str, Any]]) -> None:
        """Replace the rules (TypeError for an unknown field)."""
        parsed = [Rule(**rule) for rule in rules]
        with self._lock:
            self._rules = parsed

    def add(self, rules: Iterable[Mapping[str, Any]]) -> None:
        """Add rules after those in force."""
        parsed = [Rule(**rule) for rule in rules]
        with self._lock:
            self._rules += parsed

    def remove(self, tag: str | None) -> None:
        """Remove the rules of a tag (every rule for None)."""
        with self._lock:
            self._rules = [r for r in self._rules if tag is not None and r.tag != tag]

    def get(self) -> list[dict[str, Any]]:
        """The rules with what remains of their counts."""
        with self._lock:
            return [dataclasses.asdict(rule) for rule in self._rules]

    def plan(self, method: str, path: str) -> Plan:
        """What the rules do to a request, consuming their counts."""
        plan = Plan()
        with self._lock:
            for rule in self._rules:
                if rule.applies(method, path):
                    _consume(rule, plan)
        return plan


def _consume(rule: Rule, plan: Plan) -> None:
    plan.latency += rule.latency
    if plan.action is None:
        for action in ("resets", "errors", "truncate"):
            if getattr(rule, action) > 0:
                setattr(rule, action, getattr(rule, action) - 1)
                plan.action, plan.status = action.rstrip("s"), rule.status
                break
    if rule.slow and plan.slow is None:
        plan.slow = (rule.slow, max(1, rule.piece))
    plan.ignore_range = plan.ignore_range or rule.ignore_range
    plan.extra = plan.extra or rule.extra
    plan.weak_etag = plan.weak_etag or rule.weak_etag
    if rule.replace_after > 0:
        rule.replace_after -= 1
        if rule.replace_after == 0:
            plan.replace_with = rule.replace_with


# ---------------------------------------------------------------------------------------------
# Backends: what answers a request when no fault does


Headers = Mapping[str, str] | email.message.Message  # a request's headers (.get, .items)


@dataclass
class Response:
    """A response: status, headers (without Content-Length unless for HEAD) and body."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


class Backend(Protocol):
    def respond(self, method: str, target: str, headers: Headers, body: bytes) -> Response:
        """Answer a request (``target`` is the path with its query, still quoted)."""

    def error(self, status: int) -> Response:
        """An injected error response."""

    def put(self, path: str, data: bytes, acl: str | None = None) -> None:
        """Put (or replace) the object at ``path`` (unquoted, from the root)."""

    def close(self) -> None:
        """Release what the backend holds."""


def _text(status: int, message: str, *headers: tuple[str, str]) -> Response:
    return Response(status, [("Content-Type", "text/plain"), *headers], message.encode())


class DirectoryBackend:
    """Files of a local directory (see the module documentation)."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    def respond(self, method: str, target: str, headers: Headers, body: bytes) -> Response:
        path = unquote(target.partition("?")[0])
        local = self._local(path)
        if method == "PROPFIND":
            return self._propfind(path, local, headers.get("Depth", "infinity"))
        if method not in ("GET", "HEAD"):
            return _text(405, "method not allowed\n", ("Allow", "GET, HEAD, PROPFIND"))
        if local is not None and local.is_dir() and path.endswith("/"):
            return _index(path, local)
        if local is None or not local.is_file():
            return _text(404, f"{path} not found\n")
        return _file(method, local, headers)

    def error(self, status: int) -> Response:
        return _text(status, f"injected fault: {status}\n", ("Retry-After", "0"))

    def put(self, path: str, data: bytes, acl: str | None = None) -> None:
        local = self._local(path)
        if local is None:
            raise ValueError(f"cannot put {path!r}: not a path under the served directory")
        local.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=local.parent, prefix=".put-")
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temporary, local)  # a new inode, so a new ETag

    def close(self) -> None:
        pass

    def _local(self, path: str) -> Path | None:
        parts = [part for part in path.split("/") if part]
        if any(part in (".", "..") or "\0" in part for part in parts):
            return None
        return self.root.joinpath(*parts)

    def _propfind(self, path: str, local: Path | None, depth: str) -> Response:
        if local is None or not local.exists():
            return _text(404, f"{path} not found\n")
        entries = [local]
        if local.is_dir() and depth != "0":
            pattern = "**/*" if depth == "infinity" else "*"
            entries += sorted(local.glob(pattern))
        body = _multistatus(self.root, entries)
        return Response(207, [("Content-Type", 'application/xml; charset="utf-8"')], body)


def _validators(info: os.stat_result) -> tuple[str, str]:
    """The strong ETag and Last-Modified of a file."""
    etag = f'"{info.st_ino:x}-{info.st_size:x}-{info.st_mtime_ns:x}"'
    return etag, email.utils.formatdate(info.st_mtime, usegmt=True)


def _file(method: str, local: Path, headers: Headers) -> Response:
    with open(local, "rb") as file:  # one open file: validators and bytes of one version
        info = os.fstat(file.fileno())
        etag, modified = _validators(info)
        common = [("ETag", etag), ("Last-Modified", modified), ("Accept-Ranges", "bytes")]
        refused = _precondition(method, headers, etag, int(info.st_mtime))
        if refused is not None:
            return Response(refused, common if refused == 304 else [])
        size = info.st_size
        wanted = headers.get("Range") if method == "GET" else None
        if wanted is not None and not _if_range(headers.get("If-Range"), etag, modified):
            wanted = None
        span = _range(wanted, size)
        if isinstance(span, str):  # unsatisfiable
            return Response(416, [("Content-Range", f"bytes */{size}")])
        start, stop = span if span is not None else (0, size)
        data = os.pread(file.fileno(), stop - start, start) if method == "GET" else b""
    common.append(("Content-Type", "application/octet-stream"))
    if span is None:
        if method == "HEAD":
            common.append(("Content-Length", str(size)))
        return Response(200, common, data)
    return Response(206, [*common, ("Content-Range", f"bytes {start}-{stop - 1}/{size}")], data)


def _range(value: str | None, size: int) -> tuple[int, int] | str | None:
    """The half-open span of a single byte range; None to ignore it; or "unsatisfiable"."""
    if value is None:
        return None
    unit, _, spec = value.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash or not (first.isdigit() or last.isdigit()):
        return None
    if not first:  # suffix: the last N bytes
        count = int(last)
        return (max(0, size - count), size) if count > 0 and size > 0 else "unsatisfiable"
    start = int(first)
    if last and not last.isdigit():
        return None
    if last and int(last) < start:
        return None
    if start >= size:
        return "unsatisfiable"
    return (start, min(size, int(last) + 1) if last else size)


def _tags(value: str) -> list[str]:
    return [tag.strip() for tag in value.split(",") if tag.strip()]


def _strong(tag: str, etag: str) -> bool:
    return tag == "*" or (not tag.startswith("W/") and tag == etag)


def _weak(tag: str, etag: str) -> bool:
    return tag == "*" or tag.removeprefix("W/") == etag


def _date(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return int(parsed.timestamp())


def _precondition(method: str, headers: Headers, etag: str, mtime: int) -> int | None:
    """412 or 304 where a conditional header says so (RFC 9110 section 13.2.2), else None."""
    if (match := headers.get("If-Match")) is not None:
        if not any(_strong(tag, etag) for tag in _tags(match)):
            return 412
    elif (since := _date(headers.get("If-Unmodified-Since"))) is not None and mtime > since:
        return 412
    if (none_match := headers.get("If-None-Match")) is not None:
        if any(_weak(tag, etag) for tag in _tags(none_match)):
            return 304 if method in ("GET", "HEAD") else 412
    elif (modified := _date(headers.get("If-Modified-Since"))) is not None and mtime <= modified:
        return 304 if method in ("GET", "HEAD") else None
    return None


def _if_range(value: str | None, etag: str, modified: str) -> bool:
    """Whether a Range applies: no If-Range, or one naming this version (strongly)."""
    if value is None:
        return True
    value = value.strip()
    if value.startswith(('"', "W/")):
        return _strong(value, etag)
    return _date(value) is not None and _date(value) == _date(modified)


def _index(path: str, local: Path) -> Response:
    links = []
    for entry in sorted(local.iterdir()):
        name = entry.name + ("/" if entry.is_dir() else "")
        links.append(f'<a href="{quote(name)}">{html.escape(name)}</a><br>')
    body = f"<html><body>\n{chr(10).join(links)}\n</body></html>\n".encode()
    return Response(200, [("Content-Type", "text/html; charset=utf-8")], body)


def _multistatus(root: Path, entries: list[Path]) -> bytes:
    parts = ['<?xml version="1.0" encoding="utf-8"?>\n<D:multistatus xmlns:D="DAV:">']
    for entry in entries:
        info = entry.stat()
        is_dir = entry.is_dir()
        href = "/" + quote(entry.relative_to(root).as_posix()) if entry != root else "/"
        href += "/" if is_dir and href != "/" else ""
        etag, modified = _validators(info)
        props = [f"<D:getlastmodified>{modified}</D:getlastmodified>"]
        if is_dir:
            props.append("<D:resourcetype><D:collection/></D:resourcetype>")
        else:
            props.append(f"<D:getcontentlength>{info.st_size}</D:getcontentlength>")
            props += ["<D:resourcetype/>", f"<D:getetag>{html.escape(etag)}</D:getetag>"]
        parts.append(
            f"<D:response><D:href>{href}</D:href><D:propstat><D:prop>{''.join(props)}</D:prop>"
            "<D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>"
        )
    parts.append("</D:multistatus>\n")
    return "\n".join(parts).encode()


# moto checks no signature, but an unsigned request may not overwrite a private object
_AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=test/20250101/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=0"
)


class ProxyBackend:
    """Requests passed on unchanged (Host included) to an upstream server on 127.0.0.1."""

    def __init__(self, port: int, close: Any = None):
        self.port = port
        self._local = threading.local()
        self._close = close

    def respond(self, method: str, target: str, headers: Headers, body: bytes) -> Response:
        try:
            return self._forward(method, target, headers, body)
        except (ConnectionError, http.client.HTTPException):  # a closed keep-alive connection
            self._local.connection = None
            return self._forward(method, target, headers, body)

    def error(self, status: int) -> Response:
        code = "SlowDown" if status == 503 else "InternalError"
        body = f"<Error><Code>{code}</Code><Message>injected fault</Message></Error>"
        return Response(status, [("Content-Type", "application/xml")], body.encode())

    def put(self, path: str, data: bytes, acl: str | None = None) -> None:
        headers = {"Host": f"127.0.0.1:{self.port}", "Authorization": _AUTHORIZATION}
        if acl is not None:
            headers["x-amz-acl"] = acl  # "public-read": anonymous clients may read it
        response = self.respond("PUT", quote(path), headers, data)
        if response.status >= 300:
            raise ValueError(f"PUT {path} failed: {response.status} {response.body[:200]!r}")

    def close(self) -> None:
        if self._close is not None:
            self._close()

    def _forward(self, method: str, target: str, headers: Headers, body: bytes) -> Response:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            self._local.connection = connection
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            if name.lower() not in HOP_BY_HOP:
                connection.putheader(name, value)
        if body or method in ("PUT", "POST"):
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body or None)
        reply = connection.getresponse()
        data = reply.read()
        kept = [(k, v) for k, v in reply.getheaders() if k.lower() not in UPSTREAM_ONLY]
        if method == "HEAD" and reply.getheader("Content-Length") is not None:
            kept.append(("Content-Length", reply.getheader("Content-Length", "0")))
        return Response(reply.status, kept, data)


def _moto_backend() -> ProxyBackend:
    """moto's S3 on its own werkzeug server (127.0.0.1, a free port), behind a proxy."""
    import logging

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = DomainDispatcherApplication(create_backend_app)
    upstream = make_server("127.0.0.1", 0, app, True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=upstream.serve_forever, daemon=True, name="moto")
    thread.start()

    def close() -> None:
        upstream.shutdown()
        upstream.server_close()

    return ProxyBackend(upstream.server_address[1], close)


# ---------------------------------------------------------------------------------------------
# The front server


class Server(ThreadingHTTPServer):
    """The front server: the log, the faults and the bounds; a backend answers."""

    daemon_threads = True
    request_queue_size = 256  # many concurrent connects must not overflow the backlog

    def __init__(self, backend: Backend, *, max_requests: int):
        super().__init__(("127.0.0.1", 0), Handler)
        self.backend = backend
        self.faults = Faults()
        self.max_requests = max_requests
        self.served = 0
        self.lock = threading.Lock()
        self.log: list[dict[str, Any]] = []
        self._connections: set[socket.socket] = set()

    def record(self, entry: dict[str, Any]) -> bool:
        """Log a request; False once the server has served its maximum."""
        with self.lock:
            self.served += 1
            self.log.append(entry)
            return self.served <= self.max_requests

    def take_log(self, clear: bool) -> list[dict[str, Any]]:
        with self.lock:
            entries = list(self.log)
            if clear:
                self.log.clear()
        return entries

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """End every open connection (handler threads then finish)."""
        with self.lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def stop_soon(self) -> None:
        """Stop serving, from any thread but the serving one."""
        threading.Thread(target=self.shutdown, daemon=True).start()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT
    # TCP_NODELAY, as nginx and object stores send: without it the body, written after the
    # headers, waits for the client's delayed ACK of them (40 ms on Linux) on a kept-alive
    # connection, and every request of a benchmark takes 40 ms more than its latency
    disable_nagle_algorithm = True
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request log is the server's own

    def do_GET(self) -> None:
        try:
            self._handle()
        except (ConnectionError, TimeoutError, OSError):
            self.close_connection = True

    do_HEAD = do_PUT = do_POST = do_DELETE = do_PROPFIND = do_GET

    def _handle(self) -> None:
        body = self._body()
        if body is None:
            return
        path = unquote(self.path.partition("?")[0])
        if path.startswith(CONTROL):
            self._control(path[len(CONTROL) :], self.path.partition("?")[2], body)
            return
        self._serve(path, body)

    def _serve(self, path: str, body: bytes) -> None:
        plan = self.server.faults.plan(self.command, path)
        entry = self._entry(path)
        if not self.server.record(entry):
            self._reply(_text(503, "this test server served its maximum of requests\n"), entry)
            self.server.stop_soon()
            return
        if plan.latency:
            time.sleep(min(plan.latency, MAX_DELAY))
        if plan.action == "reset":
            entry.update(status=0, fault="reset", end=time.monotonic())
            self._reset()
            return
        if plan.action == "error":
            response = self.server.backend.error(plan.status)
            entry["fault"] = f"error {plan.status}"
        else:
            headers = _without_range(self.headers) if plan.ignore_range else self.headers
            response = _altered(
                self.server.backend.respond(self.command, self.path, headers, body), plan
            )
        if plan.replace_with is not None:
            data = Path(plan.replace_with).read_bytes()
            entry["replaced"] = True
            self._reply(response, entry, plan, lambda: self.server.backend.put(path, data))
        else:
            self._reply(response, entry, plan)

    def _entry(self, path: str) -> dict[str, Any]:
        conditions = {name: self.headers[name] for name in CONDITIONS if name in self.headers}
        return {
            "method": self.command,
            "path": path,
            "query": self.path.partition("?")[2],
            "range": self.headers.get("Range"),
            "conditions": conditions,
            "status": None,
            "sent": 0,
            "start": time.monotonic(),
            "end": None,
            "fault": None,
            "connection": self.client_address[1],
        }

    def _body(self) -> bytes | None:
        """The request's body (Content-Length or chunked); None after answering 413."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            self._reply(_text(413, "request body too large\n"), {})
            return None
        return self.rfile.read(length) if length else b""

    def _chunked(self) -> bytes:
        pieces = []
        total = 0
        while True:
            size = int(self.rfile.readline(100).split(b";")[0].strip() or b"0", 16)
            if size == 0 or total + size > MAX_BODY:
                break
            pieces.append(self.rfile.read(size))
            total += size
            self.rfile.readline(10)
        while self.rfile.readline(1000) not in (b"\r\n", b"\n", b""):
            pass  # trailers
        return b"".join(pieces)

    def _reply(
        self,
        response: Response,
        entry: dict[str, Any],
        plan: Plan | None = None,
        before_last: Any = None,
    ) -> None:
        """Send a response; the log entry and ``before_last`` are done before its last byte."""
        body = response.body if self.command != "HEAD" else b""
        declared = len(body)
        self.send_response(response.status)
        for name, value in response.headers:
            self.send_header(name, value)
        if not any(name.lower() == "content-length" for name, _ in response.headers):
            self.send_header("Content-Length", str(declared))
        truncate = plan is not None and plan.action == "truncate"
        if truncate:
            body = body[: len(body) // 2]
            entry["fault"] = "truncate"
            self.send_header("Connection", "close")
            self.close_connection = True
        pieces = _pieces(body, plan.slow if plan is not None else None)
        entry.update(status=response.status, sent=len(body))
        if not pieces:
            entry["end"] = time.monotonic()
            if before_last is not None:
                before_last()
            self.end_headers()
            return
        self.end_headers()
        self._write(pieces, plan, entry, before_last)

    def _write(
        self, pieces: list[bytes], plan: Plan | None, entry: dict[str, Any], before_last: Any
    ) -> None:
        delay = 0.0
        if plan is not None and plan.slow is not None:
            delay = min(plan.slow[0], MAX_DELAY / max(1, len(pieces)))
        for index, piece in enumerate(pieces):
            if index:
                time.sleep(delay)
            if index == len(pieces) - 1:
                entry["end"] = time.monotonic()
                if before_last is not None:
                    before_last()
            self.wfile.write(piece)

    def _reset(self) -> None:
        """Reset the connection (RST, not FIN): SO_LINGER 0, then close its descriptor."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            os.close(self.connection.detach())

    def _control(self, what: str, query: str, body: bytes) -> None:
        try:
            response = self._controlled(what, parse_qs(query), body)
        except (TypeError, ValueError, KeyError) as error:
            response = _text(400, f"{type(error).__name__}: {error}\n")
        self._reply(response, {})

    def _controlled(self, what: str, query: dict[str, list[str]], body: bytes) -> Response:
        method = self.command
        if what == "log" and method in ("GET", "DELETE"):
            entries = self.server.take_log(clear=method == "DELETE")
            return _json(entries if method == "GET" else [])
        if what == "faults" and method == "GET":
            return _json(self.server.faults.get())
        if what == "faults" and method in ("PUT", "POST"):
            rules = json.loads(body or b"[]")
            (self.server.faults.set if method == "PUT" else self.server.faults.add)(rules)
            return _json(self.server.faults.get())
        if what == "faults" and method == "DELETE":
            self.server.faults.remove(query.get("tag", [None])[0])
            return _json(self.server.faults.get())
        if what.startswith("object/") and method == "PUT":
            acl = self.headers.get("x-amz-acl")
            self.server.backend.put("/" + what.removeprefix("object/"), body, acl)
            return _json({"put": len(body)})
        return _text(404, f"no control {method} {what!r}\n")


def _altered(response: Response, plan: Plan) -> Response:
    """The response as the plan's ``extra`` bytes and ``weak_etag`` change it."""
    headers = response.headers
    if plan.weak_etag:
        headers = [
            (n, f"W/{v}" if n == "ETag" and not v.startswith("W/") else v) for n, v in headers
        ]
    body = response.body + bytes(plan.extra) if plan.extra and response.body else response.body
    return Response(response.status, headers, body)


def _json(value: Any) -> Response:
    return Response(200, [("Content-Type", "application/json")], json.dumps(value).encode())


def _without_range(headers: Headers) -> email.message.Message:
    """The headers of a request but its Range (a server that serves no ranges ignores it)."""
    kept = email.message.Message()
    for name, value in headers.items():
        if name.lower() != "range":
            kept[name] = value
    return kept


def _pieces(body: bytes, slow: tuple[float, int] | None) -> list[bytes]:
    if not body:
        return []
    if slow is None:
        return [body]
    size = slow[1]
    return [body[start : start + size] for start in range(0, len(body), size)]


def _watch_stdin(server: Server) -> None:
    """Stop the server when standard input closes (the test process stopped it, or died)."""
    with contextlib.suppress(OSError):
        while os.read(0, 1024):  # unbuffered: no lock left held at the interpreter's exit
            pass
    server.stop_soon()


def main(argv: list[str] | None = None) -> None:
    """Run a server until standard input closes; print ``{"port": N}`` once it listens."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["http", "s3"])
    parser.add_argument("root", nargs="?", type=Path, help="the directory (http)")
    parser.add_argument("--lifetime", type=float, default=1800.0, help="seconds, at most")
    parser.add_argument("--max-requests", type=int, default=200_000)
    args = parser.parse_args(argv)
    if args.kind == "http" and args.root is None:
        parser.error("http needs the directory to serve")
    backend = DirectoryBackend(args.root) if args.kind == "http" else _moto_backend()
    server = Server(backend, max_requests=args.max_requests)
    threading.Thread(target=_watch_stdin, args=(server,), daemon=True).start()
    timer = threading.Timer(args.lifetime, server.shutdown)
    timer.daemon = True
    timer.start()
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        timer.cancel()
        server.close_connections()
        server.server_close()
        backend.close()


# ---------------------------------------------------------------------------------------------
# The test side


@dataclass(frozen=True)
class Request:
    """One logged request (times on the server's monotonic clock)."""

    method: str
    path: str
    query: str
    range: str | None
    conditions: dict[str, str]
    status: int | None
    sent: int
    start: float
    end: float | None
    fault: str | None
    connection: int
    replaced: bool = False


def round_trips(requests: Iterable[Request]) -> int:
    """The longest chain of requests each of which started after the one before it ended.

    That is how many round trips one after another the client needed: requests in flight
    together count once. Measure it with latency injected (a Rule with ``latency``), so that
    requests sent together are in flight together on the server too.

    Examples
    --------
    >>> def r(start, end):
    ...     return Request("GET", "/k", "", None, {}, 200, 1, start, end, None, 1)
    >>> round_trips([r(0, 1), r(0.1, 1.1), r(1.2, 2), r(2.5, 3)])
    3
    """
    done = sorted((r for r in requests if r.end is not None), key=lambda r: r.start)
    open_: list[tuple[float, int]] = []  # heap of (end, chain length ending there)
    ended = 0  # the longest chain among requests that ended before the current start
    best = 0
    for request in done:
        while open_ and open_[0][0] <= request.start:
            ended = max(ended, heapq.heappop(open_)[1])
        heapq.heappush(open_, (cast(float, request.end), ended + 1))
        best = max(best, ended + 1)
    return best


def peak_in_flight(requests: Iterable[Request]) -> int:
    """The most requests the server was answering at once.

    Examples
    --------
    >>> def r(start, end):
    ...     return Request("GET", "/k", "", None, {}, 200, 1, start, end, None, 1)
    >>> peak_in_flight([r(0, 1), r(0.5, 2), r(1.5, 3), r(3, 4)])
    2
    """
    events = []
    for request in requests:
        if request.end is not None:
            events += [(request.start, 1), (request.end, -1)]
    peak = current = 0
    for _, step in sorted(events):  # an end sorts before a start at the same time
        current += step
        peak = max(peak, current)
    return peak


class ServerProcess:
    """A server process (``http`` of a directory, or ``s3``), used as a context manager.

    ``stderr`` of the process goes to ``log``; a server that does not say its port within
    ``timeout`` seconds is killed and its log shown in the error.
    """

    def __init__(
        self,
        kind: str,
        root: Path | None,
        log: Path,
        *options: str,
        timeout: float = 60.0,
    ):
        self.kind = kind
        self.root = root
        self._log = log
        command = [sys.executable, "-u", __file__, kind, *([str(root)] if root else []), *options]
        with open(log, "wb") as stderr:
            self._process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
            )
        try:
            self.port = self._port(timeout)
        except BaseException:
            self.stop()
            raise
        self._control_lock = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None

    def _port(self, timeout: float) -> int:
        assert self._process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                raise RuntimeError(
                    f"{self.kind} server said no port in {timeout} s: {self._tail()}"
                )
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.kind} server ended at start: {self._tail()}")
        return int(json.loads(line)["port"])

    def _tail(self) -> str:
        return self._log.read_text(errors="replace")[-2000:]

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Close its standard input, then terminate or kill it if it has not stopped."""
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        for signal_it in (None, self._process.terminate, self._process.kill):
            if signal_it is not None:
                signal_it()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
                break
        if self._process.stdout is not None:
            self._process.stdout.close()
        connection, self._connection = getattr(self, "_connection", None), None
        if connection is not None:
            connection.close()

    @property
    def running(self) -> bool:
        return self._process.poll() is None

    def control(
        self,
        method: str,
        what: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> Any:
        """Call the control API (``what`` under ``/_control/``); its JSON answer."""
        target = CONTROL + quote(what) + (f"?{urlencode(query)}" if query else "")
        with self._control_lock:
            for attempt in (0, 1):
                if self._connection is None:
                    self._connection = http.client.HTTPConnection(
                        "127.0.0.1", self.port, timeout=30
                    )
                try:
                    self._connection.request(method, target, body, dict(headers or {}))
                    reply = self._connection.getresponse()
                    data = reply.read()
                    break
                except (ConnectionError, http.client.HTTPException):
                    self._connection.close()
                    self._connection = None
                    if attempt:
                        raise
        if reply.status != 200:
            raise RuntimeError(f"control {method} {what}: {reply.status} {data.decode()}")
        return json.loads(data)

    def requests(self) -> list[Request]:
        """The requests logged since the log was last cleared."""
        return [Request(**entry) for entry in self.control("GET", "log")]

    def take_requests(self) -> list[Request]:
        """The requests logged, clearing the log."""
        entries = self.control("GET", "log")
        self.control("DELETE", "log")
        return [Request(**entry) for entry in entries]

    def clear(self) -> None:
        """Clear the log."""
        self.control("DELETE", "log")

    def set_faults(self, rules: Iterable[Rule]) -> None:
        """Replace the fault rules."""
        body = json.dumps([dataclasses.asdict(rule) for rule in rules]).encode()
        self.control("PUT", "faults", body)

    def add_faults(self, rules: Iterable[Rule]) -> None:
        """Add fault rules after those in force."""
        body = json.dumps([dataclasses.asdict(rule) for rule in rules]).encode()
        self.control("POST", "faults", body)

    def remove_faults(self, tag: str | None = None) -> None:
        """Remove the fault rules of a tag, or all."""
        self.control("DELETE", "faults", query={"tag": tag} if tag else None)

    def faults(self) -> list[Rule]:
        """The rules in force, with what remains of their counts."""
        return [Rule(**rule) for rule in self.control("GET", "faults")]

    def put(self, path: str, data: bytes, *, public: bool = False) -> None:
        """Put or replace the object at ``path`` (from the root, e.g. ``bucket/key``).

        ``public``: S3 only, anyone may read it (``x-amz-acl: public-read``).
        """
        headers = {"x-amz-acl": "public-read"} if public else {}
        self.control("PUT", "object/" + path.lstrip("/"), data, headers)


_names = itertools.count(1)

TEST_REGION = "us-east-1"
TEST_ACCESS_KEY = "cytepool-test-key-id"
TEST_SECRET = "cytepool-test-secret-never-shown"  # tests can check messages never show it


class Served:
    """A copy of a local directory on a test server.

    ``root`` is the copy's path on the server (``/s1/x.cube.zarr``, ``/bucket-1/x.cube.zarr``);
    fault patterns (``fault("*/c/*", ...)``) and ``replace`` keys are relative to it, unless
    a pattern starts with ``/``. ``requests()`` are those of this copy (for S3, of its bucket,
    so bucket listings count too).
    """

    def __init__(self, server: ServerProcess, root: str, scope: str, url: str, keys: list[str]):
        self.server = server
        self.root = root
        self.url = url
        self.keys = keys
        self._scope = scope

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def requests(self) -> list[Request]:
        """This copy's requests since the log was last cleared, in the order they started."""
        scope = self._scope
        mine = [
            r for r in self.server.requests() if r.path == scope or r.path.startswith(scope + "/")
        ]
        return sorted(mine, key=lambda r: r.start)

    def clear(self) -> None:
        """Clear the log (of the whole server: tests of one worker run one at a time)."""
        self.server.clear()

    def fault(self, match: str = "*", **fields: Any) -> Rule:
        """Add a fault rule (fields of :class:`Rule`) for the keys matching ``match``."""
        pattern = match if match.startswith("/") else f"{self.root}/{match}"
        rule = Rule(match=pattern, tag=self.root, **fields)
        self.server.add_faults([rule])
        return rule

    def clear_faults(self) -> None:
        """Remove this copy's fault rules."""
        self.server.remove_faults(self.root)

    public = False

    def replace(self, key: str, data: bytes) -> None:
        """Replace (or add) the object at ``key`` atomically: it gets a new ETag."""
        self.server.put(f"{self.root}/{key}", data, public=self.public)


class ServedHTTP(Served):
    """A directory served over HTTP; ``path`` is the served copy on the local disk."""

    def __init__(self, server: ServerProcess, source: Path, name: str | None = None):
        top = f"s{next(_names)}"
        name = name or Path(source).name
        self.path = Path(server.root or ".") / top / name
        self.path.parent.mkdir()
        keys = copy_tree(Path(source), self.path)
        root = f"/{top}/{quote(name)}"
        super().__init__(server, f"/{top}/{name}", f"/{top}", server.endpoint + root, keys)


class ServedS3(Served):
    """A directory uploaded to a new bucket of the S3 test server, under ``key``.

    ``public``: the bucket and objects are ``public-read``, so anonymous clients (obstore's
    ``skip_signature``, s3fs's ``anon``) can read them; otherwise they get 403.
    ``storage_options`` use obstore's names flat (S3Config keys, and ``allow_http``, which
    obstore takes in ``client_options`` only); ``obstore_options`` are ``from_url``'s keyword
    arguments; ``s3fs_options`` are s3fs's.
    """

    def __init__(
        self, server: ServerProcess, source: Path, name: str | None = None, *, public: bool = False
    ):
        self.bucket = f"cytepool-{next(_names)}"
        self.key = name or Path(source).name
        self.public = public
        server.put(self.bucket, b"", public=public)  # creates the bucket
        keys = []
        for key, path in files(Path(source)):
            server.put(f"{self.bucket}/{self.key}/{key}", path.read_bytes(), public=public)
            keys.append(key)
        self.endpoint = server.endpoint
        root = f"/{self.bucket}/{self.key}"
        super().__init__(server, root, f"/{self.bucket}", f"s3://{self.bucket}/{self.key}", keys)
        server.clear()

    @property
    def storage_options(self) -> dict[str, Any]:
        """What obstore's ``S3Store``/``from_url`` take (``allow_http`` is a client option)."""
        return {
            "endpoint": self.endpoint,
            "region": TEST_REGION,
            "access_key_id": TEST_ACCESS_KEY,
            "secret_access_key": TEST_SECRET,
            "allow_http": True,
        }

    @property
    def obstore_options(self) -> dict[str, Any]:
        """``obstore.store.from_url(served.url, **served.obstore_options)``."""
        config = self.storage_options
        del config["allow_http"]
        return {"config": config, "client_options": {"allow_http": True}}

    @property
    def s3fs_options(self) -> dict[str, Any]:
        """What ``s3fs.S3FileSystem`` (and fsspec's ``storage_options``) take."""
        return {
            "key": TEST_ACCESS_KEY,
            "secret": TEST_SECRET,
            "endpoint_url": self.endpoint,
            "client_kwargs": {"region_name": TEST_REGION},
        }


SAMPLE = bytes(range(256)) * 4  # 1024 bytes, each offset recognisable


def sample_tree(root: Path) -> Path:
    """A small tree at ``root``: ``a.bin`` (SAMPLE), ``zarr.json``, ``empty``, ``sub/x``."""
    (root / "sub").mkdir(parents=True)
    (root / "a.bin").write_bytes(SAMPLE)
    (root / "zarr.json").write_bytes(b'{"zarr_format": 3}')
    (root / "empty").write_bytes(b"")
    (root / "sub" / "x").write_bytes(b"nested")
    return root


def copy_tree(source: Path, target: Path) -> list[str]:
    """Copy a directory tree; the keys (relative POSIX paths) of its files, sorted."""
    shutil.copytree(source, target)
    return [key for key, _ in files(target)]


def files(source: Path) -> Iterator[tuple[str, Path]]:
    """The keys and paths of the files under a directory, sorted by key."""
    found = [(p.relative_to(source).as_posix(), p) for p in source.rglob("*") if p.is_file()]
    return iter(sorted(found))


if __name__ == "__main__":
    main()
