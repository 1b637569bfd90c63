"""Stores: where the bytes of a Zarr hierarchy come from, opened once for each read.

A :class:`Store` names a store and holds nothing open, so it can be pickled. ``store.open()``
gives a :class:`StoreHandle`, the store as one read sees it, and every object the read needs
is fetched through that handle by a key (``"zarr.json"``, ``"layers/counts/c/0/0/0"``):

- ``get(key, limit=...)`` gives a whole object with its :class:`Version` (None if absent),
  refusing one of more than ``limit`` bytes unread;
- ``get_range(key, start, length)`` gives a byte range and the object's size (``start < 0``
  asks for the last ``-start`` bytes), or raises :class:`RangesRefusedError` where the store
  serves no ranges (a web server that answers with the whole object);
- ``list(prefix)`` gives the names under a prefix;
- ``version(key)`` identifies an object's content without reading it, so that an array can
  tell whether its ``zarr.json`` is still the one it was opened with;
- ``verify()`` raises :class:`~cytepool.errors.StoreChangedError` unless the store the handle
  opened is still the one at the store's location.

A :class:`LocalHandle` also reads a whole file straight into the caller's buffers
(``read_into``, one ``preadv``), and lists the keys a few directory levels under a prefix
without a lookup per key (``keys_under``); readers use them where a handle has them (a remote
one has neither).

:func:`reading` wraps one read: it verifies the store when the read ends, and turns any error
raised while the store was being replaced into StoreChangedError, so a read returns values
wholly from the store it opened, or raises StoreChangedError; never a mix of two stores, and
never a FormatError caused by a replacement.

:class:`LocalStore` is a directory. Its handle is a file descriptor of the directory, opened
once; every object is opened relative to it (``openat``), never by resolving the store's path
again, so a read sees one directory even while another process exchanges the path for a new
store (as :func:`cytepool.io.write_cube` does) and removes the old one. An object that is not a
regular file (a FIFO, socket, device or directory) is refused with FormatError without being
opened for reading (it is examined with ``stat`` first, and opened non-blocking), so a read
never blocks on one. :class:`StorePath` names a node of an open store, for the functions of
:mod:`cytepool.io.zarr` and :mod:`cytepool.io.tables` that read many nodes through one handle.

:func:`is_url` tells a URL from a local path (:func:`cytepool.io.zarr._store.locate` makes the
store of either).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from cytepool.errors import FormatError, InputError, RemoteStoreError, StoreChangedError
from cytepool.io.zarr.names import node_name_problem

__all__ = [
    "Blob",
    "LocalStore",
    "Part",
    "RangesRefusedError",
    "Stamp",
    "Store",
    "StoreHandle",
    "StorePath",
    "TooLargeError",
    "Version",
    "is_url",
    "join",
    "reading",
    "refuse_url",
    "shown",
    "shown_url",
]

_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows
_READ = os.O_RDONLY | _O_BINARY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NONBLOCK", 0)
_AT_SUPPORTED = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


@runtime_checkable
class Version(Protocol):
    """What identifies the content of an object (a file's stamp, an HTTP ETag)."""

    def matches(self, other: Any) -> bool:
        """Whether ``other`` identifies the same content."""


class Blob(NamedTuple):
    """A whole object and the version it had when it was read."""

    data: bytes
    version: Version


class Part(NamedTuple):
    """A byte range of an object and the object's size in bytes."""

    data: bytes
    size: int


class TooLargeError(FormatError):
    """An object holds more bytes than the reader asked for (``get(key, limit=...)``)."""

    def __init__(self, where: str, size: int, limit: int):
        super().__init__(f"{where} has {size} bytes, more than the {limit} it may hold")
        self.where, self.size, self.limit = where, size, limit


class RangesRefusedError(RemoteStoreError):
    """A store serves no byte ranges: its server answers a Range request with the whole object
    (Python's ``http.server`` does). ``get_range`` raises it; a reader that needs ranges of an
    object (a shard) then reads the whole object with ``get``, within a bound."""


class StoreHandle(Protocol):
    """A store opened for one read (see the module documentation)."""

    @property
    def store(self) -> Store:
        """The store this handle opened."""

    @property
    def closed(self) -> bool:
        """Whether the handle was closed."""

    def where(self, key: str) -> str:
        """The object at ``key`` as messages show it."""

    def get(self, key: str, *, limit: int) -> Blob | None:
        """The whole object at ``key`` (None if absent); TooLargeError beyond ``limit``."""

    def get_range(self, key: str, start: int, length: int) -> Part | None:
        """``length`` bytes from ``start`` (the last ``-start`` if negative); None if absent.

        Fewer bytes come back where the object ends first. A store that serves no byte ranges
        raises :class:`RangesRefusedError`.
        """

    def list(self, prefix: str) -> list[str]:
        """The names directly under ``prefix`` ("" for the root), sorted."""

    def version(self, key: str) -> Version | None:
        """The version of the object at ``key``, or None if it is absent."""

    def verify(self, *, again: bool = False) -> None:
        """Raise StoreChangedError unless the opened store is still at its location.

        ``again``: ask the store now, even where the answer to an earlier question is at hand
        (a remote handle's check sent when it opened); :func:`reading` asks again after an
        error.
        """

    def close(self) -> None:
        """Release what the handle holds."""


@runtime_checkable
class Store(Protocol):
    """Where a store is; it holds nothing open, and ``open()`` gives a read's handle."""

    def open(self) -> StoreHandle:
        """Open the store for one read."""

    def where(self, key: str) -> str:
        """The object at ``key`` as messages show it."""


def join(key: str, name: str) -> str:
    """The key of ``name`` under ``key`` (``""`` being the root).

    Examples
    --------
    >>> join("", "zarr.json"), join("layers/counts", "c/0")
    ('zarr.json', 'layers/counts/c/0')
    """
    return f"{key}/{name}" if key else name


def _check_key(key: str) -> None:
    parts = key.split("/")
    if not all(parts) or "." in parts or ".." in parts or "\0" in key:
        msg = f"invalid store key {key!r}: it must be names joined by '/', without '.' or '..'"
        raise FormatError(msg)


@dataclass(frozen=True)
class Stamp:
    """The version of a local file: device, inode, size and modification time.

    On the same device the inode must match too; through another mount, where inode numbers
    can differ, the size and modification time. (The status change time is not compared: a
    ``chmod`` or a new hard link, as backups make, changes it without changing the file.)

    Examples
    --------
    >>> a = Stamp(device=1, inode=2, size=3, mtime_ns=4)
    >>> a.matches(Stamp(device=1, inode=9, size=3, mtime_ns=4))
    False
    >>> a.matches(Stamp(device=5, inode=9, size=3, mtime_ns=4))  # another mount
    True
    """

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def from_stat(cls, result: os.stat_result) -> Stamp:
        """The stamp of a ``stat`` result."""
        return cls(result.st_dev, result.st_ino, result.st_size, result.st_mtime_ns)

    def matches(self, other: Any) -> bool:
        """Same size and mtime, and the same inode when on the same device."""
        if not isinstance(other, Stamp):
            return False
        same = (self.size, self.mtime_ns) == (other.size, other.mtime_ns)
        if self.device == other.device:
            return same and self.inode == other.inode
        return same


@dataclass(frozen=True)
class LocalStore:
    """A store in a local directory.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "zarr.json").write_text("{}")
    >>> with reading(LocalStore(root).open()) as handle:
    ...     bytes(handle.get("zarr.json", limit=10).data), handle.list("")
    (b'{}', ['zarr.json'])
    """

    path: Path
    absolute: Path = field(init=False, repr=False)
    """The path made absolute when the store was made: every open goes through it, so a later
    change of the working directory does not change the store (``path`` is for messages)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        object.__setattr__(self, "absolute", self.path.absolute())

    def open(self) -> LocalHandle:
        """Open the directory (FileNotFoundError, NotADirectoryError if it is none; FormatError
        if its path is a symbolic link loop)."""
        return LocalHandle(self)

    def where(self, key: str) -> str:
        """The path of ``key``, for messages."""
        return os.path.join(os.fspath(self.path), key) if key else os.fspath(self.path)


class LocalHandle:
    """A local store opened for one read: a file descriptor of its directory."""

    def __init__(self, store: LocalStore):
        self._store = store
        self._fd: int | None = None
        try:
            info = self._open_directory(store)
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise
            msg = (
                f"{store.path} cannot be opened as a store: a symbolic link loop "
                f"({error.strerror}); point the link at the store's directory"
            )
            raise FormatError(msg) from error
        self._identity = (info.st_dev, info.st_ino)

    def _open_directory(self, store: LocalStore) -> os.stat_result:
        if _AT_SUPPORTED:
            self._fd = os.open(store.absolute, _DIRECTORY)
            info = os.fstat(self._fd)
            if not stat.S_ISDIR(info.st_mode):  # pragma: no cover - O_DIRECTORY refuses first
                os.close(self._fd)
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(store.path))
        else:  # pragma: no cover - Windows: paths are joined, and verify() compares identities
            info = os.stat(store.absolute)
            if not stat.S_ISDIR(info.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(store.path))
        return info

    @property
    def store(self) -> LocalStore:
        """The store this handle opened."""
        return self._store

    @property
    def closed(self) -> bool:
        """Whether the handle was closed."""
        return self._identity is None

    def where(self, key: str) -> str:
        """The path of ``key``, for messages."""
        return self._store.where(key)

    def _path(self, key: str) -> str:
        _check_key(key)
        if self._fd is not None:
            return key
        return os.path.join(self._store.absolute, *key.split("/"))  # pragma: no cover - Windows

    def _stat(self, key: str) -> os.stat_result | None:
        """``stat`` of ``key`` (following links); None if absent, FormatError if unusable."""
        try:
            return os.stat(self._path(key), dir_fd=self._fd)
        except FileNotFoundError:
            return None
        except NotADirectoryError as error:
            msg = f"{self.where(key)} cannot be read: a part of its path is not a directory"
            raise FormatError(msg) from error
        except OSError as error:
            if error.errno in (errno.EACCES, errno.EPERM):
                raise
            problem = str(error.strerror)
            if error.errno == errno.ELOOP:
                problem = f"a symbolic link loop ({problem})"
            msg = f"{self.where(key)} cannot be read: {problem}"
            raise FormatError(msg) from error

    def _regular(self, key: str, info: os.stat_result) -> None:
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            msg = f"{self.where(key)} is not a regular file: it is {kind}"
            raise FormatError(msg)

    def _open(self, key: str) -> tuple[int, os.stat_result] | None:
        """Open a regular file for reading without blocking; None if absent."""
        info = self._stat(key)
        if info is None:
            return None
        self._regular(key, info)
        try:
            fd = os.open(self._path(key), _READ, dir_fd=self._fd)
        except FileNotFoundError:
            return None
        info = os.fstat(fd)
        try:
            self._regular(key, info)  # it may have been replaced since the stat
        except FormatError:
            os.close(fd)
            raise
        return fd, info

    def get(self, key: str, *, limit: int) -> Blob | None:
        """The whole file at ``key`` (None if absent); TooLargeError beyond ``limit`` bytes."""
        opened = self._open(key)
        if opened is None:
            return None
        fd, info = opened
        try:
            if info.st_size > limit:
                raise TooLargeError(self.where(key), info.st_size, limit)
            data = _read(fd, 0, info.st_size)
        finally:
            os.close(fd)
        return Blob(data, Stamp.from_stat(info))

    def get_range(self, key: str, start: int, length: int) -> Part | None:
        """``length`` bytes of the file at ``key`` from ``start`` (from its end if negative)."""
        opened = self._open(key)
        if opened is None:
            return None
        fd, info = opened
        size = info.st_size
        position = max(0, size + start) if start < 0 else start
        try:
            data = _read(fd, position, max(0, min(length, size - position)))
        finally:
            os.close(fd)
        return Part(data, size)

    def read_into(self, key: str, buffers: Sequence[memoryview]) -> int | None:
        """Read the file at ``key`` straight into ``buffers`` (writable, in order) if it holds
        exactly as many bytes as they do.

        Returns None if the file is absent, else its size: nothing is read unless that is the
        buffers' size. FormatError if the file ends before the buffers are full (it shrank
        while it was read).
        """
        opened = self._open(key)
        if opened is None:
            return None
        fd, info = opened
        try:
            if info.st_size == sum(buffer.nbytes for buffer in buffers):
                _read_into(fd, buffers, self.where(key))
        finally:
            os.close(fd)
        return info.st_size

    def keys_under(self, prefix: str, depth: int, most: int, take: Callable[[str], object]) -> bool:
        """Call ``take(key)`` for each entry ``depth`` directory levels under ``prefix`` (""
        for the root), of any kind, as the listing goes: one listing of each directory on the
        way instead of a lookup per key, and no list of the keys.

        Returns True once every key was given (none if ``prefix`` is absent), or False, to say
        "look each key up instead", as soon as more than ``most`` entries are met on the way,
        an entry above ``depth`` is not a directory (looking a key up under it is an error the
        caller should meet as usual), or a directory cannot be listed.
        """
        try:
            return self._walk(prefix, depth, [most], take)
        except OSError:
            return False

    def _walk(
        self, prefix: str, depth: int, left: list[int], take: Callable[[str], object]
    ) -> bool:
        """:meth:`keys_under`, ``left[0]`` counting down the entries it may still meet."""
        if prefix:
            _check_key(prefix)
        directories: list[str] = []
        with self._entries(prefix) as entries:
            for entry in entries:
                left[0] -= 1
                if left[0] < 0:
                    return False
                if depth == 1:
                    take(join(prefix, entry.name))
                elif not entry.is_dir():
                    return False
                else:
                    directories.append(entry.name)
        return all(self._walk(join(prefix, name), depth - 1, left, take) for name in directories)

    @contextlib.contextmanager
    def _entries(self, prefix: str) -> Iterator[Iterator[os.DirEntry[str]]]:
        """The entries of the directory ``prefix`` (none if it is absent; NotADirectoryError if
        it is no directory), listed relative to the store's directory."""
        if self._fd is None:  # pragma: no cover - Windows
            path = os.path.join(self._store.absolute, *prefix.split("/"))
            if not os.path.exists(path):
                yield iter(())
                return
            with os.scandir(path) as listing:
                yield listing
            return
        try:
            fd = os.open(prefix or ".", _DIRECTORY, dir_fd=self._fd)
        except FileNotFoundError:
            yield iter(())
            return
        try:
            with os.scandir(fd) as entries:
                yield entries
        finally:
            os.close(fd)

    def list(self, prefix: str) -> list[str]:
        """The names in the directory ``prefix`` ("" for the root), sorted."""
        if not prefix:
            if self._fd is None:  # pragma: no cover - Windows
                return sorted(os.listdir(self._store.absolute))
            return sorted(os.listdir(self._fd))
        try:
            fd = os.open(self._path(prefix), _DIRECTORY, dir_fd=self._fd)
        except (FileNotFoundError, NotADirectoryError):
            return []
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def version(self, key: str) -> Stamp | None:
        """The stamp of the file at ``key``, or None if it is absent."""
        info = self._stat(key)
        if info is None:
            return None
        self._regular(key, info)
        return Stamp.from_stat(info)

    def verify(self, *, again: bool = False) -> None:
        """Raise StoreChangedError unless the directory is still at the store's path (asked
        now, ``again`` or not)."""
        try:
            info = os.stat(self._store.absolute)
        except OSError:
            identity = None
        else:
            identity = (info.st_dev, info.st_ino)
        if identity != self._identity:
            gone = " (it is gone)" if identity is None else ""
            msg = f"{self._store.path} was replaced while it was being read{gone}; open it again"
            raise StoreChangedError(msg)

    def close(self) -> None:
        """Close the directory's descriptor."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._identity = None  # type: ignore[assignment]


def _read(fd: int, position: int, size: int) -> bytes:
    """Up to ``size`` bytes from ``position`` (fewer where the file ends first).

    One read makes one bytes object, with no copy and no zeroing, for any size a read can
    return at once (about 2 GiB on Linux).
    """
    if position:
        os.lseek(fd, position, os.SEEK_SET)
    data = os.read(fd, size) if size else b""
    if len(data) == size or not data:
        return data
    pieces = [data]
    size -= len(data)
    while size > 0 and (piece := os.read(fd, size)):
        pieces.append(piece)
        size -= len(piece)
    return b"".join(pieces)


def _iov_max() -> int:
    """The most buffers one ``preadv`` takes (1024 on Linux)."""
    try:
        return max(1, os.sysconf("SC_IOV_MAX"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - no such limit known
        return 16


_IOV_MAX = _iov_max()


def _ended_early(where: str) -> FormatError:
    return FormatError(f"{where} ended early: was it truncated while it was read?")


def _read_into(fd: int, buffers: Sequence[memoryview], where: str) -> None:
    """Fill ``buffers`` from the start of the file, with as few reads as the system allows."""
    if not hasattr(os, "preadv"):  # pragma: no cover - Windows
        position = 0
        for buffer in buffers:
            data = _read(fd, position, buffer.nbytes)
            if len(data) < buffer.nbytes:
                raise _ended_early(where)
            buffer[:] = data
            position += buffer.nbytes
        return
    pending, position = [buffer for buffer in buffers if buffer.nbytes], 0
    while pending:
        group = pending[:_IOV_MAX]
        got = os.preadv(fd, group, position)
        if got == 0:
            raise _ended_early(where)
        position += got
        done = 0
        while got and got >= pending[done].nbytes:  # whole buffers filled
            got -= pending[done].nbytes
            done += 1
        pending = pending[done:]
        if got:  # a buffer filled in part: read the rest of it next
            pending[0] = pending[0][got:]


_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def is_url(path: object) -> bool:
    """Whether ``path`` is a string that starts with a URL scheme (``s3://...``).

    Examples
    --------
    >>> is_url("s3://bucket/x.cube.zarr"), is_url("x.cube.zarr"), is_url(3)
    (True, False, False)
    """
    return isinstance(path, str) and _URL.match(path) is not None


def shown_url(url: str) -> str:
    """``url`` as messages and reprs show it: without the ``user:password@`` before its host,
    and with its query (an access token, often) shown as ``?…``.

    A URL that cannot be parsed (a password holding ``/``, ``?`` or ``#`` makes its start look
    like a host and port) is shown from its last ``@`` on, whatever precedes it possibly a
    password.

    Examples
    --------
    >>> shown_url("https://alice:hunter2@example.org/x.zarr?sig=secret")
    'https://example.org/x.zarr?…'
    >>> shown_url("https://alice:pa/ss@example.org/x.zarr"), shown_url("s3://b/me@x.org/y.zarr")
    ('https://example.org/x.zarr', 's3://b/me@x.org/y.zarr')
    """
    base, question, _ = _without_userinfo(url).partition("?")
    return base + "?…" if question else base


def _without_userinfo(url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number to 65535
    except ValueError:
        scheme, separator, rest = url.partition("://")
        return scheme + separator + rest.rpartition("@")[2] if separator else url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def shown(path: object) -> str:
    """``path`` as messages show it: a URL by :func:`shown_url`, anything else by ``str``."""
    return shown_url(path) if isinstance(path, str) and is_url(path) else str(path)


def refuse_url(path: object, what: str) -> None:
    """InputError if ``path`` is a URL: cytepool writes local directories only.

    Examples
    --------
    >>> refuse_url("s3://bucket/x.cube.zarr", "a cube file")
    Traceback (most recent call last):
    ...
    cytepool.errors.InputError: cannot write a cube file to the URL 's3://bucket/x.cube.zarr': ...
    """
    if is_url(path):
        msg = (
            f"cannot write {what} to the URL {shown(path)!r}: cytepool writes local directories"
            " only; write it locally, then upload the directory with a sync tool (aws s3 sync,"
            " gcloud storage rsync, azcopy sync, rclone) and read it back by URL"
        )
        raise InputError(msg)


@contextlib.contextmanager
def reading(handle: StoreHandle) -> Iterator[StoreHandle]:
    """Use an open handle for one read, then verify the store and close the handle.

    An error raised inside becomes :class:`~cytepool.errors.StoreChangedError` (with the error
    as its cause) if the store was replaced meanwhile, since it may come from the replacement:
    the store is then asked again (``verify(again=True)``), not judged by an answer that may
    predate the replacement.
    """
    try:
        yield handle
        handle.verify()
    except StoreChangedError:
        raise
    except Exception as error:
        try:
            handle.verify(again=True)
        except StoreChangedError as changed:
            raise changed from error
        raise
    finally:
        handle.close()


@dataclass(frozen=True)
class StorePath:
    """A node of an open store: the handle and the node's key (``""`` for the root).

    ``path / name`` names a child; an invalid name (see
    :func:`cytepool.io.zarr.names.node_name_problem`) raises FormatError, since names come
    from the store's own metadata.
    """

    handle: StoreHandle
    key: str = ""

    def __truediv__(self, name: str) -> StorePath:
        problem = node_name_problem(name)
        if problem is not None:
            msg = f"{self}: {name!r} cannot name a node: {problem}"
            raise FormatError(msg)
        return StorePath(self.handle, join(self.key, name))

    @property
    def name(self) -> str:
        """The node's name (the last part of its key)."""
        return self.key.rpartition("/")[2]

    def __str__(self) -> str:
        return self.handle.where(self.key)
