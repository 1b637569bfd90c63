"""Atomic directory replacement: a directory is built aside, then moved into place in one step.

:func:`replace_directory` is how :func:`cytepool.io.write_cube` and
:func:`cytepool.io.write_table` store a directory, so that the path holds nothing, the old
directory or the complete new one, never a part:

1. Leftovers of earlier writes to the same path (``.<name>.cytepool-tmp-<16 hex>`` and
   ``-old-`` siblings; for a name of over 224 bytes, ``<name>`` is its first bytes, ``~`` and a
   hash of the whole) whose writer is gone are removed, and an old store left aside by a writer
   stopped between two renames is put back.
2. The new directory is built in a new sibling ``.<name>.cytepool-tmp-<16 hex>``. Its writer
   holds an advisory lock (``flock``) on it from the moment it exists until the write is over,
   so another writer's clean-up never removes it: the sibling is made and locked under a
   shared lock of the parent directory, and clean-ups look for leftovers under an exclusive
   one, so no clean-up ever sees a sibling that is not locked yet.
3. The complete directory is moved to the path in one step: a rename that replaces nothing
   (``renameat2`` with ``RENAME_NOREPLACE`` on Linux), or, to replace what is there, an
   exchange of the two directories (``renameat2`` with ``RENAME_EXCHANGE``). Right before, the
   path is checked again; after an exchange, what was swapped out is checked once more, and
   swapped back (``FileExistsError``) unless it is something the caller lets be replaced. So two
   writers replacing the same path at the same time both succeed: the last exchange wins, and
   the other writer's complete directory is removed like any old one.

Where directories cannot be exchanged in one step (macOS, Windows, older kernels, some network
file systems), replacing takes two renames: the old directory moves aside to an ``-old-``
sibling, then the new one to the path. Where there is no ``fcntl`` (Windows), there are no
locks, and two processes should not write the same path at once.

:func:`replace_path` does the same for a file or a directory that replaces a file or a
directory (the ``cytepool`` command's AnnData outputs, ``.h5ad`` files or Zarr stores): it is
built at ``<name>`` inside the locked ``-tmp-`` sibling, so an exchange leaves what it replaced
in there, removed with the sibling. A file that replaces a file takes one rename where
directories cannot be exchanged.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

__all__ = ["Refusal", "refusal", "replace_directory", "replace_path"]

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "arm64": 276, "riscv64": 276, "ppc64le": 357}
_ATTEMPTS = 64  # times a writer retries when the path keeps appearing and vanishing


def replace_directory(
    target: Path,
    build: Callable[[Path], None],
    *,
    overwrite: bool,
    replaceable: Callable[[Path], bool],
    what: str,
    hint: str = "",
) -> None:
    """Build a directory with ``build(temporary)`` and move it to ``target`` atomically.

    Parameters
    ----------
    target
        The path; its parent must exist (and should be given with symbolic links resolved).
    build
        Fills the new, empty, locked directory it is given.
    overwrite
        Whether to replace what is at ``target``: an empty directory, or a directory for which
        ``replaceable`` is true; never a symbolic link, a file, or the working directory or a
        directory that holds it.
    replaceable
        Whether a directory may be replaced (besides an empty one).
    what
        What is written, for messages (``"a cube file"``).
    hint
        What to do when ``target`` exists and ``overwrite`` is False, for the message.

    Raises
    ------
    FileExistsError
        If ``target`` exists and ``overwrite`` is False, or holds something that may not be
        replaced (checked first, again right before the move, and after an exchange).
    OSError
        If the temporary directory cannot be made or filled (its parent is not writable, the
        disk is full): the error of the system, naming ``target`` (not the temporary
        directory, a name nobody typed).
    """
    _build_and_replace(target, build, False, overwrite, replaceable, what, hint)


def replace_path(
    target: Path,
    build: Callable[[Path], None],
    *,
    overwrite: bool,
    replaceable: Callable[[Path], bool],
    what: str,
    hint: str = "",
) -> None:
    """Build a file or a directory with ``build(path)`` and move it to ``target`` atomically.

    As :func:`replace_directory`, but what is built, and what is replaced, may be a file: the
    path holds what it held or the complete new file or directory, never a part, and nothing
    it held is removed before the new one is in place.

    Parameters
    ----------
    target
        The path; its parent must exist.
    build
        Makes the file or directory at the path it is given (which does not exist yet), inside
        a new, locked, hidden sibling of ``target``.
    overwrite
        Whether to replace what is at ``target``: an empty directory, or a regular file or a
        directory for which ``replaceable`` is true; never a symbolic link, or the working
        directory or a directory that holds it.
    replaceable
        Whether a regular file or a directory may be replaced (besides an empty directory).
    what
        What is written, for messages (``"an AnnData"``).
    hint
        What to do when ``target`` exists and ``overwrite`` is False, for the message.

    Raises
    ------
    FileExistsError
        As :func:`replace_directory`.
    OSError
        If the temporary sibling cannot be made or ``build`` fails: the error of the system,
        naming ``target`` (as :func:`replace_directory`).
    """
    _build_and_replace(target, build, True, overwrite, replaceable, what, hint)


def _build_and_replace(
    target: Path,
    build: Callable[[Path], None],
    inside: bool,
    overwrite: bool,
    replaceable: Callable[[Path], bool],
    what: str,
    hint: str,
) -> None:
    """:func:`replace_directory` (``inside`` False: ``build`` fills the locked sibling) and
    :func:`replace_path` (True: ``build`` makes ``<name>`` inside it)."""
    target = Path(os.path.realpath(target.parent)) / target.name
    _recover_and_clean(target, replaceable)
    _check_replaceable(target, overwrite=overwrite, replaceable=replaceable, what=what, hint=hint)
    with _naming_target(target):
        temporary, lock = _make_sibling(target, "tmp")
    try:
        built = temporary / target.name if inside else temporary
        with _naming_target(target):
            build(built)
        _install(built, target, overwrite=overwrite, replaceable=replaceable, what=what)
    finally:
        # After an exchange the sibling holds what the path held (at <name> when inside).
        if os.path.lexists(temporary):
            shutil.rmtree(temporary, ignore_errors=True)
        lock.close()


# ---------------------------------------------------------------------------------------------
# renameat2


def _renameat2(source: Path, destination: Path, flags: int) -> bool:
    """Call Linux renameat2; return False where the kernel, libc or file system lacks it."""
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - no C library to load
        return False
    arguments = (
        ctypes.c_int(_AT_FDCWD),
        ctypes.c_char_p(os.fsencode(source)),
        ctypes.c_int(_AT_FDCWD),
        ctypes.c_char_p(os.fsencode(destination)),
        ctypes.c_uint(flags),
    )
    function = getattr(libc, "renameat2", None)
    if function is not None:
        function.restype = ctypes.c_int
        result = function(*arguments)
    else:  # pragma: no cover - glibc before 2.28: call the system call itself
        number = _SYS_RENAMEAT2.get(os.uname().machine)
        if number is None:
            return False
        libc.syscall.restype = ctypes.c_long
        result = libc.syscall(ctypes.c_long(number), *arguments)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(source), None, os.fspath(destination))


def _exchange(first: Path, second: Path) -> bool:
    """Swap two directories in one step; False where that is not supported."""
    return _renameat2(first, second, _RENAME_EXCHANGE)


def _rename_noreplace(source: Path, destination: Path) -> bool:
    """Rename ``source`` to ``destination`` if that does not exist; False if it does."""
    try:
        if _renameat2(source, destination, _RENAME_NOREPLACE):
            return True
    except FileExistsError:
        return False
    # Without renameat2 a rename replaces an empty directory, so look first.
    if os.path.lexists(destination):
        return False
    os.rename(source, destination)
    return True


# ---------------------------------------------------------------------------------------------
# Siblings and locks


_NAME_BYTES = 255  # the longest name (in bytes) Linux, macOS and Windows file systems take
_SIBLING_EXTRA = len(".") + len(".cytepool-tmp-") + 16  # what a sibling adds to the name


def _stem(name: str) -> str:
    """``name`` as its siblings hold it: whole, or, if a sibling's name would be longer than
    :data:`_NAME_BYTES`, its first bytes and a hash of the whole (so a target whose own name
    fits always has siblings that fit, told apart from those of other long names)."""
    raw = os.fsencode(name)
    room = _NAME_BYTES - _SIBLING_EXTRA
    if len(raw) <= room:
        return name
    digest = hashlib.blake2b(raw, digest_size=8).hexdigest()
    head = raw[: room - len(digest) - 1].decode("utf-8", "ignore")  # whole characters only
    return head + "~" + digest


def _sibling_pattern(target: Path) -> re.Pattern[str]:
    stem = re.escape(_stem(target.name))
    return re.compile(rf"\.{stem}\.cytepool-(tmp|old)-[0-9a-f]{{16}}")


def _sibling(target: Path, kind: str) -> Path:
    return target.with_name(f".{_stem(target.name)}.cytepool-{kind}-{secrets.token_hex(8)}")


class _Lock:
    """An advisory lock (``flock``) held through an open descriptor of a directory."""

    def __init__(self, descriptor: int | None):
        self.descriptor = descriptor

    def close(self) -> None:
        if self.descriptor is not None:
            os.close(self.descriptor)
            self.descriptor = None


def _open_to_lock(path: Path) -> int | None:
    """A descriptor of ``path`` to lock, a directory or a file (an -old- file), opened for
    reading, or for writing a file its owner may not read (mode 0200); never blocking, should
    a FIFO have taken the name since; None if it cannot be opened."""
    flags = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        return os.open(path, os.O_RDONLY | flags)
    except PermissionError:
        pass
    except OSError:
        return None
    try:
        return os.open(path, os.O_WRONLY | flags)
    except OSError:
        return None


def _lockable(descriptor: int) -> bool:
    """Whether an open descriptor is a directory or a regular file (what the locks lock)."""
    mode = os.fstat(descriptor).st_mode
    return stat.S_ISDIR(mode) or stat.S_ISREG(mode)


def _lock(directory: Path, *, exclusive: bool = True, wait: bool = True) -> _Lock | None:
    """Lock a directory; None if it is locked (``wait=False``) or cannot be opened.

    Where there is no ``fcntl`` (Windows), or the file system has no locks, every lock is
    acquired (and holds nothing).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return _Lock(None)
    descriptor = _open_to_lock(directory)
    if descriptor is None:
        return None
    if not _lockable(descriptor):
        os.close(descriptor)
        return None
    operation = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
    try:
        fcntl.flock(descriptor, operation)
    except BlockingIOError:
        os.close(descriptor)
        return None
    except OSError:  # pragma: no cover - a file system without locks
        pass
    return _Lock(descriptor)


@contextlib.contextmanager
def _locked(directory: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on a directory; yield whether it was acquired."""
    lock = _lock(directory, wait=wait)
    try:
        yield lock is not None
    finally:
        if lock is not None:
            lock.close()


@contextlib.contextmanager
def _parent_locked(target: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold a lock on the parent of ``target`` (shared: writers; exclusive: clean-ups)."""
    lock = _lock(target.parent, exclusive=exclusive)
    try:
        yield
    finally:
        if lock is not None:
            lock.close()


def _make_sibling(target: Path, kind: str) -> tuple[Path, _Lock]:
    """Create and lock an empty sibling ``.{name}.cytepool-{kind}-<random>``.

    It is made and locked under a shared lock of the parent, so a clean-up, which looks for
    leftovers under an exclusive one, never finds it unlocked.
    """
    with _parent_locked(target, exclusive=False):
        while True:
            sibling = _sibling(target, kind)
            try:
                sibling.mkdir()
            except FileExistsError:  # pragma: no cover - 64 random bits collided
                continue
            lock = _lock(sibling, wait=False)
            if lock is None:  # pragma: no cover - only a foreign program could hold it
                shutil.rmtree(sibling, ignore_errors=True)
                continue
            return sibling, lock


def _leftovers(target: Path) -> list[tuple[str, Path]]:
    """The leftover temporary directories (and files moved aside) of earlier writes to
    ``target``, as (kind, path)."""
    pattern = _sibling_pattern(target)
    found = []
    with os.scandir(target.parent) as entries:
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match is None:
                continue
            # A file is a leftover only as what replace_path moved aside (-old-).
            old_file = match.group(1) == "old" and entry.is_file(follow_symlinks=False)
            if entry.is_dir(follow_symlinks=False) or old_file:
                found.append((match.group(1), Path(entry.path)))
    return sorted(found, key=lambda item: item[1].name)


def _recover_and_clean(target: Path, replaceable: Callable[[Path], bool]) -> None:
    """Finish what an interrupted write to ``target`` left behind.

    Where directories cannot be swapped in one step, a replacement moves the old directory
    aside (``-old-``) before moving the new one in. If the writer was stopped in between,
    ``target`` is missing and the old directory is put back. Every other leftover is removed,
    except those a live writer holds locked.
    """
    claimed: list[tuple[Path, _Lock]] = []
    try:
        with _parent_locked(target, exclusive=True):
            leftovers = _leftovers(target)
            if not os.path.lexists(target):
                _put_back(target, leftovers, replaceable)
            for _, leftover in leftovers:
                lock = _lock(leftover, wait=False)
                if lock is not None:
                    claimed.append((leftover, lock))
        for leftover, _ in claimed:  # locked by this clean-up, so no other one removes it
            _remove(leftover)
    finally:
        for _, lock in claimed:
            lock.close()


def _put_back(
    target: Path, leftovers: list[tuple[str, Path]], replaceable: Callable[[Path], bool]
) -> None:
    for kind, leftover in reversed(leftovers):
        if kind == "old" and replaceable(leftover):
            with _locked(leftover, wait=False) as free:
                if free and not os.path.lexists(target):
                    with contextlib.suppress(OSError):
                        _rename_noreplace(leftover, target)
            return


def _remove(path: Path) -> None:
    """Remove a file or a directory tree, if it is there, as far as it can be removed."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            os.unlink(path)


@contextlib.contextmanager
def _naming_target(target: Path) -> Iterator[None]:
    """An OSError about a temporary sibling of ``target`` (a name nobody typed) becomes one
    about ``target``, of the same kind (its error number); another error whose message names
    a path in the sibling (a value refused while it was written) names it in ``target``."""
    try:
        yield
    except OSError as error:
        prefix = os.fspath(target.with_name(f".{_stem(target.name)}.cytepool-"))
        names = (error.filename, error.filename2)
        if error.errno is None or not any(
            isinstance(name, str) and name.startswith(prefix) for name in names
        ):
            raise
        raise OSError(error.errno, error.strerror, os.fspath(target)) from error
    except Exception as error:
        _rename_in_message(error, target)
        raise


def _rename_in_message(error: Exception, target: Path) -> None:
    """Name ``target`` where the message of ``error`` names a temporary sibling of it."""
    message = error.args[0] if error.args else None
    if not isinstance(message, str):
        return
    sibling = re.escape(os.fspath(target.with_name(f".{_stem(target.name)}.cytepool-")))
    inside = re.escape(os.sep + target.name)  # what replace_path builds in the sibling
    renamed = re.sub(
        rf"{sibling}(?:tmp|old)-[0-9a-f]{{16}}(?:{inside})?", os.fspath(target), message
    )
    if renamed != message:
        error.args = (renamed, *error.args[1:])


# ---------------------------------------------------------------------------------------------
# Checks


def _is_empty_directory(path: Path) -> bool:
    with os.scandir(path) as entries:
        return next(entries, None) is None


def _holds_working_directory(path: Path) -> bool:
    try:
        working = os.path.realpath(os.getcwd())
    except OSError:  # the working directory was removed
        return False
    real = os.path.realpath(path)
    return working == real or working.startswith(real.rstrip(os.sep) + os.sep)


Refusal = Literal["symbolic link", "not a directory", "working directory", "not replaceable"]
"""Why a directory write with ``overwrite=True`` may not replace what is at a path."""


def refusal(path: Path, replaceable: Callable[[Path], bool]) -> Refusal | None:
    """Why :func:`replace_directory` with ``overwrite=True`` would not replace what is at
    ``path`` (which must exist), or None if it would: the rules it follows, for callers that
    check them ahead and say why in their own words (the ``cytepool`` command).

    Parameters
    ----------
    path
        What is there; only its last component is looked at (a symbolic link is not followed).
    replaceable
        Whether a directory may be replaced (besides an empty one); for
        :func:`replace_path`, also whether a regular file may be.

    Returns
    -------
    str or None
        ``"symbolic link"`` (never replaced), ``"not a directory"`` (neither a directory nor
        a regular file ``replaceable`` accepts), ``"working directory"`` (the working
        directory or one that holds it), ``"not replaceable"`` (neither an empty directory
        nor one ``replaceable`` accepts), or None.
    """
    status = os.lstat(path)
    if stat.S_ISLNK(status.st_mode):
        return "symbolic link"
    if not stat.S_ISDIR(status.st_mode):
        accepted = stat.S_ISREG(status.st_mode) and replaceable(path)
        return None if accepted else "not a directory"
    if _holds_working_directory(path):
        return "working directory"
    if not (replaceable(path) or _is_empty_directory(path)):
        return "not replaceable"
    return None


def _why_not_replaceable(path: Path, replaceable: Callable[[Path], bool], what: str) -> str | None:
    """Why ``overwrite=True`` may not replace what is at ``path`` (None if it may)."""
    reasons: dict[Refusal, str] = {
        "symbolic link": "is a symbolic link (a write never replaces one; write to its target)",
        "not a directory": "is not a directory",
        "working directory": "is the working directory or holds it",
        "not replaceable": f"is neither {what} nor an empty directory",
    }
    found = refusal(path, replaceable)
    return None if found is None else reasons[found]


def _check_replaceable(
    target: Path,
    *,
    overwrite: bool,
    replaceable: Callable[[Path], bool],
    what: str,
    hint: str = "",
) -> bool:
    """Check that ``target`` may be written; return whether something is there to replace."""
    if not os.path.lexists(target):
        return False
    if not overwrite:
        message = f"{target} exists" + (f"; {hint}" if hint else "")
        raise FileExistsError(errno.EEXIST, message, str(target))
    reason = _why_not_replaceable(target, replaceable, what)
    if reason is not None:
        message = f"{target} {reason}; overwrite=True replaces only {what} or an empty directory"
        raise FileExistsError(errno.EEXIST, message, str(target))
    return True


def _raise_changed_during_write(target: Path, what: str) -> None:
    message = f"{target} was replaced while {what} was being written; it was left as it is"
    raise FileExistsError(errno.EEXIST, message, str(target))


# ---------------------------------------------------------------------------------------------
# Moving into place


def _install(
    temporary: Path,
    target: Path,
    *,
    overwrite: bool,
    replaceable: Callable[[Path], bool],
    what: str,
) -> None:
    """Move the complete directory at ``temporary`` to ``target``.

    On return what ``target`` held, if anything, is at ``temporary`` (for the caller to remove).
    """
    for _ in range(_ATTEMPTS):
        if not os.path.lexists(target) and _rename_noreplace(temporary, target):
            return
        if not overwrite:
            message = f"{target} appeared while {what} was being written; it was left as it is"
            raise FileExistsError(errno.EEXIST, message, str(target))
        try:
            if not _check_replaceable(target, overwrite=True, replaceable=replaceable, what=what):
                continue  # it vanished: try a plain rename again
        except FileNotFoundError:
            continue
        if _replace(temporary, target, replaceable, what):
            return
    _raise_changed_during_write(target, what)


def _replace(temporary: Path, target: Path, replaceable: Callable[[Path], bool], what: str) -> bool:
    """Replace what is at ``target``; False if it vanished meanwhile (to try again)."""
    try:
        exchanged = _exchange(temporary, target)
    except FileNotFoundError:
        return False
    if not exchanged:
        if not (os.path.isdir(temporary) or os.path.isdir(target)):
            os.replace(temporary, target)  # a file by a file: one step everywhere
            return True
        return _replace_in_two_steps(temporary, target, replaceable, what)
    try:
        swapped_out = _why_not_replaceable(temporary, replaceable, what)
    except FileNotFoundError:  # pragma: no cover - removed at once by someone else
        swapped_out = None
    if swapped_out is not None:  # something else was put there since the check
        _exchange(temporary, target)
        _raise_changed_during_write(target, what)
    return True


def _replace_in_two_steps(
    temporary: Path, target: Path, replaceable: Callable[[Path], bool], what: str
) -> bool:
    """Replace ``target`` by two renames, where one-step exchange is not supported.

    Between the renames ``target`` does not exist; the old directory waits at an ``-old-``
    sibling, which the next write to ``target`` puts back if this process is stopped.
    """
    aside = _sibling(target, "old")
    try:
        os.rename(target, aside)
    except FileNotFoundError:
        return False
    if _why_not_replaceable(aside, replaceable, what) is not None:
        os.rename(aside, target)
        _raise_changed_during_write(target, what)
    try:
        renamed = _rename_noreplace(temporary, target)
    except BaseException:
        os.rename(aside, target)
        raise
    _remove(aside)  # replaced, or (not renamed) replaced by another
    return renamed
