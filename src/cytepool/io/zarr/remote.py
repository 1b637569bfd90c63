"""Remote stores: Zarr hierarchies read over HTTP(S), S3, Google Cloud Storage and Azure.

:class:`RemoteStore` is the :class:`~cytepool.io.zarr.store.Store` of a URL
(``http://``, ``https://``, ``s3://``, ``gs://``, ``az://``). Its objects are fetched with
`obstore <https://developmentseed.org/obstore/>`_ (the optional extra ``cytepool[remote]``),
imported only when a URL is opened. obstore was chosen over fsspec because it is one
dependency-free wheel for every scheme, retries 5xx answers, resets and timeouts with backoff,
resumes a truncated body with a range checked against the first answer's ETag (it never returns
a short or mixed body), supports conditional requests, and keeps credentials out of its reprs;
zarr-python's ``ObjectStore`` uses it too.

Requests run on one private event loop thread (so reads work inside Jupyter's running loop),
at most ``max_in_flight`` of a handle at a time (:data:`DEFAULT_IN_FLIGHT`, 32, by default); a
request's coroutine is made only once it holds a slot, so one cancelled while it waits (a read
failed) leaves none behind. A handle fetches ahead the chunks a read will ask for
(:meth:`RemoteHandle.prefetch`), keeping at most twice that many fetched and not yet decoded,
so memory is the result plus a bounded number of chunks; each is refused from the length the
server announces, before its body is read, beyond the bound its reader gives (the most bytes a
valid encoding of the chunk takes). :meth:`RemoteHandle.gather` fetches small objects
(metadata documents) together, in one round, and keeps them for the read.
:meth:`RemoteHandle.guess` fetches objects whose keys are guessed before their arrays'
documents arrive (a first chunk), at most ``max_in_flight`` at a time and each within a
bound; :meth:`RemoteHandle.confirm` keeps those the documents confirm and drops the others
(a dropped guess in flight keeps its slot until answered), so a guess found absent is a chunk
that is absent only when it is the chunk's key. Reads never list: :meth:`RemoteHandle.list`
is there for the :class:`~cytepool.io.zarr.store.StoreHandle` protocol only.

A handle made with ``expected`` (the version of the root ``zarr.json`` a reader trusts) sends
``HEAD zarr.json`` with ``If-Match`` (without it for a weak ETag, which never matches there:
the ETag the HEAD returns is compared instead) when it opens, alongside the read's other
requests, and
:meth:`RemoteHandle.verify` raises :class:`~cytepool.errors.StoreChangedError` if the answer
says the document changed; after a failed read it asks again (``verify(again=True)``), since
that answer may predate a replacement; a server that refuses HEAD requests (405) is asked with
GET requests, whose bodies are not read. Faults become errors: a missing object (404) reads as
absent (a chunk is then the fill value; a missing metadata document or table part is a
FormatError raised by the reader), a request refused with 405 (which obstore reports as a
missing object) is a :class:`MethodRefusedError`, a short body is a FormatError, a server
that keeps failing beyond the retries is a :class:`~cytepool.errors.RemoteStoreError`. A
server that answers a Range request with the whole object (Python's ``http.server``) raises
:class:`~cytepool.io.zarr.store.RangesRefusedError`, and the handle sends it no more range
requests: the shard reader then fetches each shard whole, within a bound. Credentials
(``storage_options`` and any ``user:password@`` of a URL) never appear in messages or reprs.
"""

from __future__ import annotations

import base64
import builtins
import dataclasses
import functools
import os
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from cytepool.errors import (
    FormatError,
    InputError,
    RemoteStoreError,
    StoreChangedError,
    UnsupportedFeatureError,
)
from cytepool.io.zarr._remote_options import DEFAULT_IN_FLIGHT, split_options
from cytepool.io.zarr._url_lengths import (
    MAX_URL_LENGTH,
    abridged,
    longest_url,
    too_long_why,
    url_length,
)
from cytepool.io.zarr.fetching import Range, Span, Window
from cytepool.io.zarr.store import (
    Blob,
    Part,
    RangesRefusedError,
    TooLargeError,
    is_url,
    shown_url,
)

if TYPE_CHECKING:  # asyncio is imported when a URL is first read: local stores never need it
    import asyncio

__all__ = [
    "DEFAULT_IN_FLIGHT",
    "MAX_URL_LENGTH",
    "SCHEMES",
    "ETag",
    "MethodRefusedError",
    "RemoteHandle",
    "RemoteStore",
]

SCHEMES = ("http", "https", "s3", "gs", "az")
"""The URL schemes of remote stores."""

_INSTALL = "install the extra with: pip install 'cytepool[remote]'"

T = TypeVar("T")


def import_obstore() -> Any:
    """obstore, or ImportError naming the extra that installs it."""
    try:
        import obstore
    except ImportError as error:
        msg = f"reading a store by URL needs obstore: {_INSTALL}"
        raise ImportError(msg) from error
    return obstore


# ---------------------------------------------------------------------------------------------
# The event loop thread


_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _event_loop() -> asyncio.AbstractEventLoop:
    """The private event loop of remote requests, on a daemon thread started when first used."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            import asyncio

            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="cytepool-remote", daemon=True)
            thread.start()
            _loop = loop
        return _loop


_used_obstore = False
"""Whether this process made an obstore client (obstore's runtime then runs in it)."""
_forked_after_use = False
"""Whether this process was forked after it, or a parent, made an obstore client."""


def _forget_loop() -> None:
    """A forked child has no loop thread: start a new one when needed. If the parent had used
    obstore, the child cannot: obstore's runtime does not survive a fork (its requests, even
    those of a store made in the child, would never be answered)."""
    global _loop, _loop_lock, _clients_lock, _forked_after_use
    _loop, _loop_lock, _clients_lock = None, threading.Lock(), threading.Lock()
    _forked_after_use = _forked_after_use or _used_obstore


os.register_at_fork(after_in_child=_forget_loop)


def _forked_error(url: str | None) -> RemoteStoreError:
    """The error of a remote read in a process forked after obstore was used."""
    what = url or "a store read by URL"
    msg = (
        f"{what} cannot be read in this process: it was forked (os.fork, or multiprocessing's "
        "'fork' start method, the default on Linux before Python 3.14) after its parent had "
        "read by URL, and obstore cannot be used in a process forked after its parent used it "
        "(its requests would never be answered); start worker processes with the 'spawn' or "
        "'forkserver' method: multiprocessing.get_context('spawn'), or "
        "ProcessPoolExecutor(mp_context=multiprocessing.get_context('spawn'))"
    )
    return RemoteStoreError(msg)


def _submit(coroutine: Awaitable[T]) -> Future[T]:
    import asyncio

    if _forked_after_use:
        close = getattr(coroutine, "close", None)
        if close is not None:
            close()  # never awaited: no warning
        raise _forked_error(None)
    return asyncio.run_coroutine_threadsafe(coroutine, _event_loop())  # type: ignore[arg-type]


def _run(coroutine: Awaitable[T]) -> T:
    return _submit(coroutine).result()


# ---------------------------------------------------------------------------------------------
# URLs (the options are checked in _remote_options)


def _strip_userinfo(url: str) -> tuple[str, str | None]:
    """The URL without ``user:password@``, and a basic Authorization header made of them."""
    try:
        parts = urlsplit(url)
        port = parts.port  # checked: a port past 65535 or not a number raises ValueError
    except ValueError as error:  # "http://[::1/x": Invalid IPv6 URL
        problem = _url_problem(error)
        msg = f"{shown_url(url)!r} is not a valid URL ({problem}); check its host and port"
        raise InputError(msg) from None
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    token = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    header = "Basic " + base64.b64encode(token.encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=netloc)), header


def _url_problem(error: ValueError) -> str:
    """What urllib found wrong with a URL, without the text it quotes from it (which may be
    part of a password holding ``/``, ``?`` or ``#``)."""
    return re.sub(r" as '.*'$", "", str(error), flags=re.DOTALL)


# ---------------------------------------------------------------------------------------------
# Versions


@dataclass(frozen=True)
class ETag:
    """The version of a remote object: its ETag if the server sends one, else its size and
    Last-Modified time.

    Examples
    --------
    >>> ETag('"a"', 3, None).matches(ETag('"a"', 3, None))
    True
    >>> ETag(None, 3, "t1").matches(ETag(None, 3, "t2"))
    False
    """

    e_tag: str | None
    size: int
    last_modified: Any

    def matches(self, other: Any) -> bool:
        """Same ETag, or without ETags the same size and Last-Modified time."""
        if not isinstance(other, ETag):
            return False
        if self.e_tag is not None or other.e_tag is not None:
            return self.e_tag == other.e_tag
        return (self.size, self.last_modified) == (other.size, other.last_modified)

    @property
    def strong(self) -> bool:
        """Whether the ETag is strong, and so may be sent in ``If-Match``: a server compares
        the tags of If-Match strongly (RFC 9110, section 13.1.1), so a weak one (``W/"..."``)
        never matches, even the object's own. A weak ETag is compared with the one a HEAD
        returns instead.

        Examples
        --------
        >>> ETag('"a"', 3, None).strong, ETag('W/"a"', 3, None).strong, ETag(None, 3, "t").strong
        (True, False, False)
        """
        return self.e_tag is not None and not self.e_tag.startswith("W/")

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> ETag:
        """The version in obstore's object metadata."""
        return cls(meta.get("e_tag"), int(meta["size"]), meta.get("last_modified"))


# ---------------------------------------------------------------------------------------------
# The store


@dataclass(frozen=True)
class RemoteStore:
    """A store at a URL, read with obstore (see the module documentation).

    ``storage_options`` go to obstore: its configuration keys for the scheme (``endpoint``,
    ``region``, ``access_key_id``, ``secret_access_key``, ... for S3; ``service_account_key``,
    ... for GCS; ``account_name``, ``sas_key``, ... for Azure), its client options
    (``allow_http``, ``timeout``, ``connect_timeout``, ``default_headers``, ...), and
    cytepool's own: ``anonymous`` (unsigned requests), ``max_retries`` (4), ``retry_timeout``
    (30 seconds) and ``max_in_flight`` (32). Durations (``timeout``, ``connect_timeout``,
    ``pool_idle_timeout``, ``retry_timeout``) are duration strings (``"30s"``, ``"2min"``),
    numbers of seconds or :class:`datetime.timedelta`. An unknown key, or a value of the
    wrong type or range, raises :class:`~cytepool.errors.InputError` (a ValueError) naming it.

    obstore cannot be used in a process forked after its parent used it: there every read
    raises :class:`~cytepool.errors.RemoteStoreError` at once (start processes with the
    ``"spawn"`` or ``"forkserver"`` method). The clients of the 8 stores (URL and options)
    most recently read are kept, with their connections, for the next reads.

    Examples
    --------
    >>> store = RemoteStore("s3://bucket/x.cube.zarr", {"secret_access_key": "hidden"})
    >>> store.where("zarr.json"), "hidden" in repr(store)
    ('s3://bucket/x.cube.zarr/zarr.json', False)
    """

    url: str
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    expected: ETag | None = field(default=None, repr=False)
    """The version of the root zarr.json a handle checks (with a HEAD sent as it opens)."""

    def __post_init__(self) -> None:
        if not is_url(self.url):
            msg = f"a remote store needs a URL such as s3://bucket/path, found {self.url!r}"
            raise InputError(msg)
        scheme = self.url.split("://", 1)[0].lower()
        if scheme not in SCHEMES:
            msg = f"URLs with the scheme {scheme}:// are not supported; use one of " + ", ".join(
                f"{name}://" for name in SCHEMES
            )
            raise InputError(msg)
        url, authorization = _strip_userinfo(self.url.rstrip("/"))
        options = dict(self.storage_options)
        if authorization is not None and isinstance(options.get("default_headers"), Mapping | None):
            headers = dict(options.get("default_headers") or {})
            headers.setdefault("Authorization", authorization)
            options["default_headers"] = headers
        split_options(scheme, options, shown_url(url))  # checked now, before any request
        if url_length(url, "zarr.json") > longest_url(url):
            msg = (
                f"the URL {abridged(shown_url(url))!r} is too long: "
                f"{too_long_why(url, 'zarr.json', 'the URL of its zarr.json')}; use a shorter URL, "
                "or read a local copy"
            )
            raise InputError(msg)
        object.__setattr__(self, "url", url)
        object.__setattr__(self, "storage_options", options)

    @property
    def scheme(self) -> str:
        """The URL's scheme, in lower case."""
        return self.url.split("://", 1)[0].lower()

    def __repr__(self) -> str:
        return f"RemoteStore(url={shown_url(self.url)!r})"

    def where(self, key: str) -> str:
        """The URL of ``key``, for messages: the key before the URL's query, whose value is
        not shown (see :func:`~cytepool.io.zarr.store.shown_url`).

        Examples
        --------
        >>> RemoteStore("https://example.org/x.zarr?sig=secret").where("c/0")
        'https://example.org/x.zarr/c/0?…'
        """
        base, query = self._shown
        return (f"{base}/{key}" if key else base) + query

    @functools.cached_property
    def _shown(self) -> tuple[str, str]:
        """The URL as messages show it, without its query, and ``"?…"`` if it has one."""
        base, question, _ = self.url.partition("?")
        return shown_url(base), "?…" if question else ""

    @functools.cached_property
    def _room(self) -> int:
        """The characters a key may take in a request's URL (counted as :func:`url_length`)."""
        return longest_url(self.url) - url_length(self.url, "")

    def too_long(self, key: str) -> str | None:
        """Why the URL of ``key`` would be too long for a request, or None (it is not): a key
        of a few characters is not counted, a character taking at most 12 percent-encoded."""
        if 12 * len(key) <= self._room or len(quote(key, safe="/:")) <= self._room:
            return None
        return too_long_why(self.url, key)

    def expecting(self, version: ETag | None) -> RemoteStore:
        """This store, whose handles check that the root zarr.json still has ``version``."""
        return RemoteStore(self.url, self.storage_options, version)

    def open(self) -> RemoteHandle:
        """A handle for one read (ImportError without obstore)."""
        return RemoteHandle(self)

    def client(self) -> tuple[Any, int]:
        """obstore's store for this URL, and the most requests in flight."""
        return _client(self.url, _freeze(self.storage_options))


def _freeze(options: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((key, _hashable(value)) for key, value in options.items()))


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return ("mapping", _freeze(value))
    return value


_MOST_CLIENTS = 8
"""obstore clients kept for reuse, the most recently used (each holds its own connections)."""
_clients: dict[tuple[str, Any], tuple[Any, int]] = {}  # in order of use, the last most recent
_clients_lock = threading.Lock()


def _client(url: str, frozen: tuple[tuple[str, Any], ...]) -> tuple[Any, int]:
    """An obstore store for ``url`` and its options, and the most requests in flight.

    The :data:`_MOST_CLIENTS` most recently used are kept, so that reads of one store reuse
    its connections; the others are dropped, with their connections, once no open handle
    holds them. RemoteStoreError in a process forked after obstore was used.
    """
    if _forked_after_use:
        raise _forked_error(shown_url(url))
    key = (url, frozen)
    with _clients_lock:
        made = _clients.pop(key, None)
        if made is not None:
            _clients[key] = made  # now the most recently used
            return made
    made = _make_client(url, {name: _thaw(value) for name, value in frozen})
    with _clients_lock:
        made = _clients.setdefault(key, made)
        dropped = [_clients.pop(old) for old in list(_clients)[:-_MOST_CLIENTS]]
    del dropped  # dropped outside the lock: closing their connections takes a moment
    return made


def _make_client(url: str, options: Mapping[str, Any]) -> tuple[Any, int]:
    """A new obstore store for ``url``; RemoteStoreError naming it if obstore cannot make one."""
    global _used_obstore
    import_obstore()
    from obstore.exceptions import BaseError
    from obstore.store import HTTPStore, from_url

    scheme = url.split("://", 1)[0].lower()
    split = split_options(scheme, options, shown_url(url))
    _used_obstore = True
    try:
        if scheme in ("http", "https"):
            made: Any = HTTPStore.from_url(
                url,
                client_options=split.client,  # type: ignore[arg-type]
                retry_config=split.retry,  # type: ignore[arg-type]
            )
        else:
            made = from_url(  # type: ignore[call-overload]
                url, config=split.config, client_options=split.client, retry_config=split.retry
            )
    except (BaseError, ValueError, OSError) as error:
        msg = (
            f"no client could be made for {shown_url(url)}: {_first_line(error)}; check the URL "
            "and storage_options, and that this process may open more files (ulimit -n)"
        )
        raise RemoteStoreError(msg) from None
    return made, split.max_in_flight


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "mapping":
        return {key: _thaw(item) for key, item in value[1]}
    return value


# ---------------------------------------------------------------------------------------------
# Errors


_URLS = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://\S+")


def _first_line(error: BaseException) -> str:
    """The first line of an obstore message (the rest is a debug dump with server text), the
    URLs in it shown as :func:`~cytepool.io.zarr.store.shown_url` shows them (without a query's
    value)."""
    text = str(error).strip().splitlines()
    line = text[0][:500] if text else type(error).__name__
    return _URLS.sub(lambda found: shown_url(found.group()), line)


_STATUS = re.compile(r"(?:non-2xx status code|with status):? (\d{3})\b")
"""The HTTP status in the first line of an obstore message (one version's words or the other's)."""


def _status(error: BaseException) -> int | None:
    """The HTTP status an obstore error reports, if it names one."""
    found = _STATUS.search(_first_line(error))
    return None if found is None else int(found.group(1))


class MethodRefusedError(RemoteStoreError):
    """A request the server refused with a status obstore reports as a missing object (405
    Method Not Allowed): a RemoteStoreError, never an absent object, since the object may well
    be there. A handle whose HEAD request is refused so asks with GET requests instead."""


def _refused(error: BaseException, status: int, where: str) -> MethodRefusedError:
    msg = (
        f"{where} could not be read: the server refused the request with status {status} "
        f"({_first_line(error)}), which does not say the object is absent (404); check the "
        "URL, and that the server answers GET and HEAD requests"
    )
    return MethodRefusedError(msg)


def _changed(error: BaseException) -> bool:
    from obstore.exceptions import PreconditionError

    return isinstance(error, PreconditionError) or "precondition" in str(error).lower()


def _failure(error: BaseException, where: str) -> Exception:
    """The cytepool error of an obstore failure at ``where``."""
    from obstore.exceptions import NotSupportedError, PermissionDeniedError, UnauthenticatedError

    if isinstance(error, NotSupportedError) and "range" in str(error).lower():
        return _ranges_refused(where)
    if _changed(error):
        msg = f"{where} changed while it was being read; open it again"
        return StoreChangedError(msg)
    if isinstance(error, PermissionDeniedError | UnauthenticatedError):
        return _denied(error, where)
    msg = (
        f"{where} could not be read: {_first_line(error)}; check the URL and the network, or "
        "raise storage_options max_retries/retry_timeout/timeout"
    )
    return RemoteStoreError(msg)


def _denied(error: BaseException, where: str) -> PermissionError:
    """The error of a read the server refused (401, 403): a PermissionError, as for a local
    file this process may not read, saying how to give credentials for the URL's scheme."""
    if where.split("://", 1)[0].lower() in ("http", "https"):
        fix = (
            "give credentials as user:password@ in the URL, or as an Authorization header in "
            "storage_options['default_headers']"
        )
    else:
        fix = (
            "give credentials in storage_options (or in the environment, such as "
            "AWS_ACCESS_KEY_ID), or storage_options['anonymous']=True for a public bucket"
        )
    msg = f"{where} cannot be read: access denied ({_first_line(error)}); {fix}"
    return PermissionError(msg)


def _unaddressable(key: str, url: str, why: str | None = None) -> UnsupportedFeatureError:
    """The error of a key obstore makes no path of: one with a node name holding a control
    character (which the Zarr specification allows, and a local store reads), or whose URL
    would be too long (``why`` says so)."""
    why = why or "obstore makes no path of it (a node name with a control character, such as a tab)"
    msg = (
        f"the key {abridged(key)!r} of {abridged(url)} cannot be read by URL: {why}; read a "
        "local copy of the store"
    )
    return UnsupportedFeatureError(msg)


def _ranges_refused(where: str) -> RangesRefusedError:
    msg = (
        f"{where} could not be read: the server does not serve byte ranges (it answers a Range "
        "request with the whole object)"
    )
    return RangesRefusedError(msg)


# ---------------------------------------------------------------------------------------------
# The handle


_Got = tuple[bytes, ETag] | None
"""A whole object fetched, with its version (None: absent)."""


def _beyond(start: int, size: int) -> bool:
    """Whether a range from ``start`` (the last ``-start`` bytes if negative) asks for bytes an
    object of ``size`` bytes does not have: a start at or past its end, or more bytes from the
    end than it holds."""
    return start >= size if start >= 0 else -start > size


async def _next_piece(stream: Any) -> bytes | None:
    """The next piece of a body obstore streams, or None at its end."""
    try:
        return bytes(await stream.__anext__())
    except StopAsyncIteration:
        return None


def _member(span: Span, item: Range, whole: Part | None) -> Part | None:
    """The range ``item`` out of what its span's request gave."""
    if whole is None:
        return None
    offset = item.start - span.start
    return Part(whole.data[offset : offset + item.length], whole.size)


class RemoteHandle:
    """A remote store opened for one read (see the module documentation)."""

    def __init__(self, store: RemoteStore):
        self._store = store
        self._client, self._in_flight = store.client()
        self._semaphore: asyncio.Semaphore | None = None
        self._closed = False
        self._window = Window(2 * self._in_flight, self._send_object, self._send_span)
        self._check: Future[ETag | None] | None = None
        self._kept: dict[str, tuple[bytes, ETag] | None] = {}  # what gather() fetched
        self._guessed: dict[str, tuple[Future[_Got], threading.Event]] = {}  # unconfirmed
        self._confirmed: dict[str, Future[_Got]] = {}  # guesses confirmed, for get() to take
        self._dropped: list[Future[_Got]] = []  # guesses dropped, left to finish until close
        self._no_ranges = False  # the server answered a Range request with the whole object
        self._no_head = False  # the server refused a HEAD request (405): GET instead
        if store.expected is not None:
            self.watch(store.expected)

    def __repr__(self) -> str:
        return f"<RemoteHandle {shown_url(self._store.url)!r}>"

    @property
    def store(self) -> RemoteStore:
        """The store this handle opened."""
        return self._store

    @property
    def closed(self) -> bool:
        """Whether the handle was closed."""
        return self._closed

    @property
    def max_in_flight(self) -> int:
        """The most requests this handle has in flight at a time."""
        return self._in_flight

    def where(self, key: str) -> str:
        """The URL of ``key``, for messages."""
        return self._store.where(key)

    async def _limited(self, make: Callable[[], Awaitable[T]]) -> T:
        """Await ``make()`` within the bound of requests in flight.

        The coroutine is made only once a slot is free: a request cancelled while it waits for
        one (a read that failed, closing its handle) leaves no coroutine behind unawaited.
        """
        if self._semaphore is None:
            import asyncio

            self._semaphore = asyncio.Semaphore(self._in_flight)
        async with self._semaphore:
            return await make()

    async def _call(self, key: str, make: Callable[[], Awaitable[T]]) -> T | None:
        """Await an obstore call; None if the object is absent, cytepool errors otherwise."""
        from obstore.exceptions import BaseError

        too_long = self._store.too_long(key)
        if too_long is not None:
            raise _unaddressable(key, self.where(""), too_long)
        try:
            return await make()
        except FileNotFoundError as error:  # obstore's HTTP store says so of a 405 too
            status = _status(error)
            if status in (None, 404):
                return None
            raise _refused(error, status, self.where(key)) from None
        except BaseError as error:
            raise _failure(error, self.where(key)) from None
        except ValueError:  # obstore cannot make a path of the key
            raise _unaddressable(key, self.where("")) from None

    async def _get(self, key: str, limit: int) -> tuple[bytes, ETag] | None:
        import obstore

        result = await self._call(key, lambda: obstore.get_async(self._client, key))
        if result is None:
            return None
        version = ETag.from_meta(result.meta)
        if version.size > limit:
            raise TooLargeError(self.where(key), version.size, limit)
        body = await self._call(key, result.bytes_async)
        data = bytes(body) if body is not None else b""
        if len(data) != version.size:
            msg = (
                f"{self.where(key)} came back short: {len(data)} bytes of the {version.size} "
                "the server announced (a truncated answer); read it again"
            )
            raise FormatError(msg)
        return data, version

    async def _head(self, key: str, expected: ETag | None = None) -> ETag | None:
        import obstore

        options: dict[str, Any] = {} if self._no_head else {"head": True}
        if expected is not None and expected.strong:  # a weak tag never matches If-Match
            options["if_match"] = expected.e_tag
        try:
            result = await self._call(
                key,
                lambda: obstore.get_async(self._client, key, options=options),  # type: ignore[arg-type]
            )
        except MethodRefusedError:
            if self._no_head:
                raise
            self._no_head = True  # a GET whose body is not read tells the same
            return await self._head(key, expected)
        return None if result is None else ETag.from_meta(result.meta)

    def get(self, key: str, *, limit: int) -> Blob | None:
        """The whole object at ``key`` (None if absent); TooLargeError beyond ``limit``."""
        if key in self._kept:
            kept = self._kept[key]
            if kept is not None and len(kept[0]) > limit:
                raise TooLargeError(self.where(key), len(kept[0]), limit)
            return None if kept is None else Blob(*kept)
        future = self._confirmed.pop(key, None) or self._window.take_object(key)
        if future is None:
            got = _run(self._limited(lambda: self._get(key, limit)))
        else:
            got = future.result()
            if got is not None and len(got[0]) > limit:
                raise TooLargeError(self.where(key), len(got[0]), limit)
        return None if got is None else Blob(got[0], got[1])

    def get_range(self, key: str, start: int, length: int) -> Part | None:
        """``length`` bytes from ``start`` (the last ``-start`` if negative); None if absent."""
        item = Range(key, start, length)
        taken = self._window.take_range(item)
        if taken is None:
            return _run(self._limited(lambda: self._get_range(key, start, length)))
        return _member(taken[0], item, taken[1].result())

    def peek_range(self, item: Range) -> Part | None:
        """The range ``item`` fetched ahead, left for ``get_range`` to take; None if it was not
        fetched ahead, is absent or could not be had (``get_range`` then reports why)."""
        sent = self._window.peek_range(item)
        if sent is None:
            return None
        try:
            return _member(sent[0], item, sent[1].result())
        except Exception:  # get_range raises it, where the read reports its errors
            return None

    async def _get_range(self, key: str, start: int, length: int) -> Part | None:
        import obstore

        if length <= 0:
            meta = await self._head(key)
            return None if meta is None else Part(b"", meta.size)
        if self._no_ranges:  # no request: the server would send the whole object again
            raise _ranges_refused(self.where(key))
        rng: Any = {"suffix": -start} if start < 0 else (start, start + length)
        try:
            result = await self._call(
                key, lambda: obstore.get_async(self._client, key, options={"range": rng})
            )
        except RangesRefusedError:
            self._no_ranges = True
            raise
        except RemoteStoreError:
            meta = await self._head(key)  # a range the object does not have is answered 416
            if meta is None or not _beyond(start, meta.size):
                raise
            return await self._unsatisfiable(key, start, meta)
        if result is None:
            return None
        return Part(await self._range_body(key, result), int(result.meta["size"]))

    async def _range_body(self, key: str, result: Any) -> bytes:
        """The body of a range answer, read piece by piece: a FormatError as soon as it holds
        more bytes than the range its Content-Range names (the rest is never read), or if it
        holds fewer."""
        first, end = result.range
        expected = end - first
        stream = result.stream(min_chunk_size=max(1, expected))
        pieces: builtins.list[bytes] = []
        total = 0
        while (piece := await self._call(key, lambda: _next_piece(stream))) is not None:
            total += len(piece)
            if total > expected:
                msg = (
                    f"{self.where(key)} came back too long: more than the {expected} bytes of "
                    f"the range {first}-{end - 1} asked for (the server sent a longer body than "
                    "its Content-Range announces); the rest of it was not read"
                )
                raise FormatError(msg)
            pieces.append(piece)
        data = b"".join(pieces)
        if len(data) != expected:
            msg = f"{self.where(key)} came back short: {len(data)} bytes of {expected}"
            raise FormatError(msg)
        return data

    async def _unsatisfiable(self, key: str, start: int, meta: ETag) -> Part | None:
        """What a range the object at ``key`` (of version ``meta``) does not have gives, once
        the server answered it 416, as a local file gives it: nothing for a start past the
        end, the whole object for more bytes from the end than it holds (S3 answers 416 to
        any range of an empty object)."""
        if start >= 0 or meta.size == 0:
            return Part(b"", meta.size)
        got = await self._get(key, -start)
        return None if got is None else Part(got[0], len(got[0]))

    def list(self, prefix: str) -> list[str]:
        """The names directly under ``prefix``; [] where the server cannot list (plain HTTP).

        No read calls it (reads by URL never list); it completes the StoreHandle protocol.
        """
        try:
            return _run(self._limited(lambda: self._list(prefix)))
        except RemoteStoreError:
            return []

    async def _list(self, prefix: str) -> builtins.list[str]:
        import obstore

        listed = await self._call(
            prefix, lambda: obstore.list_with_delimiter_async(self._client, prefix or None)
        )
        if listed is None:
            return []
        names = [entry["path"] for entry in listed["objects"]] + list(listed["common_prefixes"])
        return sorted({name.rstrip("/").rpartition("/")[2] for name in names})

    def version(self, key: str) -> ETag | None:
        """The version of the object at ``key`` (one HEAD, unless :meth:`gather` kept it), or
        None if it is absent."""
        if key in self._kept:
            kept = self._kept[key]
            return None if kept is None else kept[1]
        return _run(self._limited(lambda: self._head(key)))

    def gather(
        self, keys: Iterable[str], *, limit: int, then: Callable[[], object] | None = None
    ) -> dict[str, Blob | None]:
        """Fetch the small objects at ``keys`` (metadata documents) concurrently, in one round,
        and keep them for the rest of this read: ``get`` and ``version`` of a key kept are
        answered without a request, with what this read saw. ``then`` is called once their
        requests are sent, before their answers are awaited (to send the round's other
        requests behind them).

        Returns what was had, by key: the object, or None if it is absent. An object that could
        not be had (larger than ``limit``, or a failure) is left out: ``get`` meets the problem
        again and reports it where the read reports its errors.
        """
        wanted = [key for key in dict.fromkeys(keys) if key not in self._kept]
        sent = [
            (key, _submit(self._limited(functools.partial(self._get, key, limit))))
            for key in wanted
        ]
        if then is not None:
            then()
        for key, future in sent:
            try:
                self._kept[key] = future.result()
            except Exception:  # get() fetches it again and raises the error
                continue
        got = {key: self._kept[key] for key in dict.fromkeys(keys) if key in self._kept}
        return {key: None if kept is None else Blob(*kept) for key, kept in got.items()}

    def prefetch(self, keys: Iterable[str], *, limit: int) -> None:
        """Start fetching the objects at ``keys``, in order, for ``get`` to take.

        At most ``2 * max_in_flight`` requests are sent ahead and not yet taken; each ``get``
        of one of them sends the next. Objects larger than ``limit`` fail when taken. A guess
        confirmed (:meth:`confirm`) is not asked for again.
        """
        self._window.objects((key for key in keys if key not in self._confirmed), limit)

    def guess(self, keys: Iterable[str], *, limit: int) -> None:
        """Start fetching objects that may be chunks of arrays whose documents are on their way
        (the first chunk of an array, under the key it most likely has), at most
        ``max_in_flight`` guesses at a time, each refused beyond ``limit`` bytes from the
        length the server announces. Their requests wait for a slot as any other.

        A guess is kept for ``get`` only once :meth:`confirm` says its key is a chunk the read
        takes (one found absent is then a chunk that is absent: the fill value); the others
        are dropped.
        """
        for key in dict.fromkeys(keys):
            if len(self._guessed) >= self._in_flight:
                break
            if key not in self._guessed and key not in self._confirmed and key not in self._kept:
                dropped = threading.Event()
                self._guessed[key] = (self._send_guess(key, limit, dropped), dropped)

    def _send_guess(self, key: str, limit: int, dropped: threading.Event) -> Future[_Got]:
        async def fetch() -> _Got:
            return None if dropped.is_set() else await self._get(key, limit)

        return _submit(self._limited(fetch))

    def confirm(self, keys: Iterable[str]) -> None:
        """Keep for ``get`` the guesses at ``keys`` (each the key of a chunk the read takes, as
        its array's document says) once they are answered, and drop every other guess.

        A dropped guess not yet sent is never sent; one in flight is left to finish (or until
        the handle closes), its answer discarded, so it keeps its slot while the server
        answers it (cancelling it would free the slot while the server still answers it, and
        the read's next requests would put more than ``max_in_flight`` in flight). A guess
        that failed (larger than its bound, an error) is not kept: its chunk is fetched as
        any other, with its array's bound, and any error is reported then.
        """
        wanted = [key for key in dict.fromkeys(keys) if key in self._guessed]
        kept = {key: self._guessed.pop(key)[0] for key in wanted}
        self._drop_guesses()  # not cancelled: see above
        for key, future in kept.items():
            try:
                future.result()
            except Exception:  # fetched again by its reader, who reports any error
                continue
            self._confirmed[key] = future

    def _drop_guesses(self) -> None:
        """Drop the guesses not confirmed: those not yet sent are never sent, those in flight
        are left to finish (until the handle closes)."""
        self._dropped = [future for future in self._dropped if not future.done()]
        for future, dropped in self._guessed.values():
            dropped.set()
            self._dropped.append(future)
        self._guessed.clear()

    def _forget_guesses(self) -> None:
        """Cancel every guess, confirmed, dropped or not (the read takes nothing more)."""
        self._drop_guesses()
        futures = [*self._dropped, *self._confirmed.values()]
        self._dropped, self._confirmed = [], {}
        for future in futures:
            future.cancel()

    def prefetch_ranges(self, ranges: Iterable[Range], *, now: bool = False) -> None:
        """Start fetching byte ranges, in order, for ``get_range`` to take: ranges of one
        object at most :data:`~cytepool.io.zarr.fetching.COALESCE_GAP` bytes apart in one
        request; within the window of ``prefetch``, or all at once with ``now``."""
        self._window.ranges(ranges, now=now)

    def _send_object(self, key: str, limit: int) -> Future[tuple[bytes, ETag] | None]:
        return _submit(self._limited(lambda: self._get(key, limit)))

    def _send_span(self, span: Span) -> Future[Part | None]:
        return _submit(self._limited(lambda: self._get_range(span.key, span.start, span.length)))

    def watch(self, version: ETag) -> None:
        """Check the root zarr.json against ``version`` now (a HEAD with If-Match sent at
        once, alongside later requests); :meth:`verify` waits for the answer."""
        self._store = self._store.expecting(version)
        self._check = _submit(self._limited(lambda: self._head("zarr.json", version)))

    def verify(self, *, again: bool = False) -> None:
        """Raise StoreChangedError if the root zarr.json is no longer the expected version.

        The answer to the check sent when the handle opened (or :meth:`watch` was called) is
        used, unless ``again``: then the root is asked now, since that answer may predate a
        replacement (a read that failed asks again, so that values of a new store are never
        reported as a corrupt store). What was fetched ahead is cancelled first: the read
        takes nothing more.
        """
        expected = self._store.expected
        if expected is None:
            return
        check, self._check = self._check, None
        if again:
            self._window.cancel()
            self._forget_guesses()
            if check is not None:
                check.cancel()
            check = None
        if check is None:
            check = _submit(self._limited(lambda: self._head("zarr.json", expected)))
        try:
            current = check.result()
        except StoreChangedError:  # If-Match failed
            current = dataclasses.replace(expected, e_tag=None)
        if current is None or not expected.matches(current):
            state = "is gone" if current is None else "is another version"
            msg = f"{self.where('zarr.json')} {state}: the store changed since it was opened"
            raise StoreChangedError(msg)

    def close(self) -> None:
        """Cancel what was fetched ahead and not taken; forget what was gathered."""
        self._window.cancel()
        self._forget_guesses()
        self._kept.clear()
        if self._check is not None:
            self._check.cancel()
            self._check = None
        self._closed = True
