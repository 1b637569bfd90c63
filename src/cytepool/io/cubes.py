"""Cube files: a cube saved as a Zarr v3 group that any Zarr v3 reader can open.

A cube file is a directory, by convention named ``*.cube.zarr``::

    example.cube.zarr/
        zarr.json          group: format, format_version, shape, layers, digests,
                           fingerprint, metadata, provenance
        samples/           the sample table (anndata dataframe, index "sample_id")
        groups/            the group table (index "group_id")
        features/          the feature table (index "feature_id")
        cells              int array (n_groups, n_samples)
        normalization      float64 array (n_groups, n_samples), attribute "method" (optional)
        layers/
            <name>         array (n_groups, n_samples, n_features), chunks (1, s, f)

:func:`write_cube` builds the store in a temporary sibling directory and moves it into
place in one step; :func:`read_cube` reads the attributes, tables, cell numbers and
normalization now, checks them against the stored digests, and leaves the layers on disk
as :class:`~cytepool.io.zarr.ZarrArray` objects. The layout, every attribute, the
versioning rule and the crash behaviour are described in "Cube files and provenance
records" in the documentation.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from cytepool.errors import FormatError, StoreChangedError
from cytepool.io.zarr import (
    DATA_TYPES,
    METADATA_FILE,
    check_compression,
    open_array,
    read_group_attributes,
    write_array,
    write_group,
)

if TYPE_CHECKING:
    from cytepool.cube import Cube
    from cytepool.fingerprint import Digests
    from cytepool.io.zarr import ZarrArray

__all__ = ["FORMAT", "FORMAT_VERSION", "read_cube", "write_cube"]

FORMAT = "cytepool.cube"
"""The value of the ``format`` attribute of every cube file."""

FORMAT_VERSION = "1.0"
"""The format version this module writes: ``"<major>.<minor>"``."""

_MAJOR, _MINOR = (int(part) for part in FORMAT_VERSION.split("."))
_REQUIRED_ATTRIBUTES = (
    "format",
    "format_version",
    "shape",
    "layers",
    "digests",
    "fingerprint",
    "metadata",
    "provenance",
)
_TABLES = (("samples", "sample_id"), ("groups", "group_id"), ("features", "feature_id"))
_LAYER_DTYPES = frozenset({"int32", "int64", "uint32", "uint64", "float32", "float64"})
_CHUNK_BYTES = 1 << 20  # the decoded size a layer chunk aims at
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_BACKENDS = ("pandas", "polars", "pyarrow")
_PROFILE_AXES: dict[str, Any] = {"dimension_names": ("groups", "samples")}

# ---------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------


def write_cube(
    cube: Cube,
    path: str | os.PathLike[str],
    *,
    compression: str | None = "gzip",
    level: int | None = None,
    overwrite: bool = False,
) -> None:
    """Save a cube as a cube file, a Zarr v3 group (see the module documentation).

    The store appears at ``path`` only once it is complete, so a write that fails leaves
    no store there; with ``overwrite=True`` it leaves the old store as it was. Lazy layers
    are read, and their values checked, one group at a time. Each group is hashed as it is
    written, and the digests are stored with the file, so the fingerprint of the saved cube
    needs no further pass over its values.

    Parameters
    ----------
    cube
        The cube to save.
    path
        The directory to create, by convention ending in ``.cube.zarr``. Its parent must
        exist.
    compression
        ``"gzip"`` (the default), ``"zstd"`` (Python 3.14 or newer, or the
        ``backports.zstd`` package cytepool depends on for older Pythons) or None for no
        compression.
    level
        The compression level: 0 to 9 for gzip (default 4), -131072 to 22 for zstd
        (default 3); None without compression.
    overwrite
        Replace what is at ``path``, the whole directory, if it is a cube file (a Zarr
        group whose format is ``"cytepool.cube"``) or an empty directory. Nothing else is
        ever replaced, nor the working directory or one that holds it.

    Raises
    ------
    TypeError
        If ``cube`` is not a Cube, or an argument has the wrong type.
    ValueError
        If ``compression`` or ``level`` is invalid, ``path`` is a URL, or a lazy layer
        gives a value that breaks a constraint. Also if a layer name cannot name a Zarr
        node on every file system: empty, ``.`` or ``..``, starting with ``__``, holding
        one of ``/ \\ : * ? " < > |``, or differing from another only in case.
    OverflowError
        If a sum of a derived lazy layer does not fit (see "Sums" in Cube).
    FileExistsError
        If ``path`` exists and ``overwrite`` is False, or it is not something
        ``overwrite`` replaces.
    FileNotFoundError
        If the parent directory of ``path`` does not exist.

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool import Cube
    >>> from cytepool.io import read_cube, write_cube
    >>> cube = Cube(
    ...     {"counts": np.array([[[3, 0, 1], [2, 5, 0]]], dtype=np.int32)},
    ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
    ...     groups=pd.DataFrame({"group_id": ["B cells"]}),
    ...     features=pd.DataFrame({"feature_id": ["CD19", "MS4A1", "CD3E"]}),
    ...     cells=np.array([[4, 6]]),
    ... )
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_cube(cube, f"{tmp}/pbmc.cube.zarr")
    ...     read_cube(f"{tmp}/pbmc.cube.zarr").fingerprint == cube.fingerprint
    True
    """
    from cytepool.cube import Cube

    if not isinstance(cube, Cube):
        message = f"write_cube expects a cytepool.Cube, got {type(cube).__name__}"
        raise TypeError(message)
    target = _local_target(path)
    level = check_compression(compression, level)
    if not isinstance(overwrite, bool):
        message = f"overwrite must be True or False, got {overwrite!r}"
        raise TypeError(message)
    _check_layer_names(list(cube.layers))
    _recover_and_clean(target)
    expected = _check_replaceable(target, overwrite=overwrite)
    temporary = _make_sibling(target, "tmp")
    try:
        with _locked(temporary):
            _build(cube, temporary, compression=compression, level=level)
            _install(temporary, target, expected)
    finally:
        # After a successful exchange the temporary name holds the old store.
        if os.path.lexists(temporary):
            shutil.rmtree(temporary, ignore_errors=True)


def read_cube(path: str | os.PathLike[str], *, backend: str = "pandas") -> Cube:
    """Open a cube file.

    The metadata and the sample, group and feature tables are read now. The layers stay on
    disk: when a method needs a group of a layer, the cube reads the chunks that hold the
    samples and features it needs, and checks those values then (see "Lazy layers" in
    Cube). Opening a cube therefore takes little memory, whatever its size, and a cube
    derived with ``select()`` reads only the chunks that hold the selected features of the
    selected groups.

    The digests stored with the file give the cube's fingerprint without reading the
    layers. The tables, cell numbers and normalization are checked against theirs now, and
    each group of a layer whenever a read covers all of it.

    Parameters
    ----------
    path
        The cube file's directory.
    backend
        The frame library of the tables: ``"pandas"`` (the default), ``"polars"`` or
        ``"pyarrow"``.

    Returns
    -------
    Cube
        A cube whose layers are :class:`~cytepool.io.zarr.ZarrArray` objects.

    Raises
    ------
    FileNotFoundError
        If there is no store at ``path``.
    ValueError
        If the store is not a cube file, has another format version, is corrupt, uses a
        Zarr feature this reader does not support, or holds tables, cell numbers or a
        normalization that do not match its stored digests.
    TypeError
        If a stored value has a type the cube does not accept.
    RuntimeError
        If the store was replaced while it was being read.

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool import Cube
    >>> from cytepool.io import read_cube, write_cube
    >>> cube = Cube(
    ...     {"counts": np.array([[[3, 0, 1], [2, 5, 0]]], dtype=np.int32)},
    ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
    ...     groups=pd.DataFrame({"group_id": ["B cells"]}),
    ...     features=pd.DataFrame({"feature_id": ["CD19", "MS4A1", "CD3E"]}),
    ...     cells=np.array([[4, 6]]),
    ... )
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_cube(cube, f"{tmp}/pbmc.cube.zarr")
    ...     opened = read_cube(f"{tmp}/pbmc.cube.zarr")
    ...     type(opened.layers["counts"]).__name__, opened.profiles("B cells").tolist()
    ('ZarrArray', [[3, 0, 1], [2, 5, 0]])
    """
    root = _local_path(path)
    if not isinstance(backend, str):
        message = f"backend must be a string, got {type(backend).__name__}"
        raise TypeError(message)
    if backend not in _BACKENDS:
        message = f"backend must be one of {', '.join(map(repr, _BACKENDS))}, got {backend!r}"
        raise ValueError(message)
    if not root.exists():
        message = f"there is no cube file at {root}"
        raise FileNotFoundError(errno.ENOENT, message, str(root))
    if not root.is_dir():
        message = f"{root} is not a cube file: it is not a directory"
        raise FormatError(message)
    stamp = _stamp(root)
    try:
        cube = _read(root, backend)
    except Exception as error:
        if _stamp(root) != stamp:
            raise _store_changed(root) from error
        raise
    if _stamp(root) != stamp:
        raise _store_changed(root)
    return cube


# ---------------------------------------------------------------------------------------------
# Paths and arguments
# ---------------------------------------------------------------------------------------------


def _local_path(path: object) -> Path:
    """Return ``path`` as a Path, refusing URLs and anything that is not a path."""
    if not isinstance(path, str | os.PathLike):
        message = f"path must be a str or os.PathLike, got {type(path).__name__}"
        raise TypeError(message)
    text = os.fspath(path)
    if not isinstance(text, str):
        message = f"path must be a text path, got {type(text).__name__}"
        raise TypeError(message)
    if _URL.match(text):
        message = f"cube files are local directories; got the URL {text!r}"
        raise ValueError(message)
    return Path(text)


def _local_target(path: object) -> Path:
    """The real parent directory of ``path`` joined with its last component.

    The last component is kept as given (not resolved), so that a symbolic link there
    can be seen and refused.
    """
    given = _local_path(path)
    name = given.name
    if name in ("", ".."):  # ".", "..", "/" or "a/..": name the directory itself
        resolved = Path(os.path.realpath(given))
        parent, name = resolved.parent, resolved.name
    else:
        parent = given.parent
    if not parent.is_dir():
        message = f"the parent directory of {os.fspath(given)!r} does not exist: {parent}"
        raise FileNotFoundError(errno.ENOENT, message, str(parent))
    return Path(os.path.realpath(parent)) / name


def _check_layer_names(names: list[str]) -> None:
    """Refuse layer names that cannot be Zarr node names on every file system."""
    seen: dict[str, str] = {}
    for name in names:
        invalid = (
            not isinstance(name, str)
            or name in ("", ".", "..")
            or name.startswith("__")
            or any(character in name for character in '/\\:*?"<>|\0')
        )
        if invalid:
            message = (
                f"layer name {name!r} cannot be stored in a cube file: a name must be a "
                "non-empty string without / \\ : * ? \" < > |, not '.' or '..' and not "
                "starting with '__'"
            )
            raise ValueError(message)
        other = seen.setdefault(name.casefold(), name)
        if other != name:
            message = (
                f"layer names {other!r} and {name!r} differ only in case, so they would "
                "share a directory on case-insensitive file systems"
            )
            raise ValueError(message)


# ---------------------------------------------------------------------------------------------
# Atomic replacement
# ---------------------------------------------------------------------------------------------

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "arm64": 276, "riscv64": 276, "ppc64le": 357}


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


def _rename_noreplace(source: Path, destination: Path) -> None:
    """Rename ``source`` to ``destination``, which must not exist."""
    try:
        if _renameat2(source, destination, _RENAME_NOREPLACE):
            return
    except FileExistsError:
        pass
    else:
        # Without renameat2 a rename replaces an empty directory, so look first.
        if not os.path.lexists(destination):
            os.rename(source, destination)
            return
    message = f"{destination} appeared while the cube was being written; it was left as it is"
    raise FileExistsError(errno.EEXIST, message, str(destination))


def _sibling_pattern(target: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(target.name)}\.cytepool-(tmp|old)-[0-9a-f]{{16}}")


def _make_sibling(target: Path, kind: str) -> Path:
    """Create an empty sibling directory ``.{name}.cytepool-{kind}-<random>``."""
    while True:
        sibling = target.with_name(f".{target.name}.cytepool-{kind}-{secrets.token_hex(8)}")
        try:
            sibling.mkdir()
        except FileExistsError:  # pragma: no cover - 64 random bits collided
            continue
        return sibling


def _leftovers(target: Path) -> list[tuple[str, Path]]:
    """The leftover temporary directories of earlier writes to ``target``, as (kind, path)."""
    pattern = _sibling_pattern(target)
    found = []
    with os.scandir(target.parent) as entries:
        for entry in entries:
            match = pattern.fullmatch(entry.name)
            if match and entry.is_dir(follow_symlinks=False):
                found.append((match.group(1), Path(entry.path)))
    return sorted(found, key=lambda item: item[1].name)


@contextlib.contextmanager
def _locked(directory: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold an advisory lock on a directory; yield whether it was acquired.

    A writer holds the lock on its temporary directory until it is done, so another
    writer's clean-up leaves a live write alone. Where there is no ``fcntl`` (Windows)
    every lock is acquired.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield True
        return
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(directory, flags)
    except OSError:
        yield False
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        acquired = True
    except BlockingIOError:
        acquired = False
    try:
        yield acquired
    finally:
        os.close(descriptor)


def _recover_and_clean(target: Path) -> None:
    """Finish what an interrupted write to ``target`` left behind.

    Where directories cannot be swapped in one step, a replacement moves the old store
    aside (``-old-``) before moving the new one in. If the writer was stopped in between,
    ``target`` is missing and the old store is put back. Every other leftover is removed,
    except those a live writer holds locked.
    """
    leftovers = _leftovers(target)
    if not os.path.lexists(target):
        for kind, leftover in reversed(leftovers):
            if kind == "old" and _is_cube_file(leftover):
                with _locked(leftover, wait=False) as free:
                    if free and not os.path.lexists(target):
                        with contextlib.suppress(OSError):
                            _rename_noreplace(leftover, target)
                break
    for _, leftover in leftovers:
        with _locked(leftover, wait=False) as free:
            if free and os.path.lexists(leftover):
                shutil.rmtree(leftover, ignore_errors=True)


def _is_cube_file(path: Path) -> bool:
    try:
        attributes = read_group_attributes(path)
    except (OSError, ValueError):
        return False
    return attributes.get("format") == FORMAT


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


def _check_replaceable(target: Path, *, overwrite: bool) -> tuple[int, int] | None:
    """Check that ``target`` may be written; return the (device, inode) to be replaced."""
    try:
        status = os.lstat(target)
    except FileNotFoundError:
        return None
    if not overwrite:
        message = (
            f"{target} exists; pass overwrite=True to replace a cube file or an empty directory"
        )
        raise FileExistsError(errno.EEXIST, message, str(target))
    reason = None
    if stat.S_ISLNK(status.st_mode):
        reason = "is a symbolic link (write_cube never replaces one; write to its target)"
    elif not stat.S_ISDIR(status.st_mode):
        reason = "is not a directory"
    elif _holds_working_directory(target):
        reason = "is the working directory or holds it"
    elif not (_is_cube_file(target) or _is_empty_directory(target)):
        reason = "is neither a cube file nor an empty directory"
    if reason is not None:
        message = (
            f"{target} {reason}; overwrite=True replaces only a cube file or an empty directory"
        )
        raise FileExistsError(errno.EEXIST, message, str(target))
    return (status.st_dev, status.st_ino)


def _install(temporary: Path, target: Path, expected: tuple[int, int] | None) -> None:
    """Move the complete store at ``temporary`` to ``target``.

    On return the old store, if any, is at ``temporary`` (for the caller to remove).
    """
    if expected is None:
        _rename_noreplace(temporary, target)
        return
    with _locked(target, wait=False):
        _check_replaceable(target, overwrite=True)
        if _exchange(temporary, target):
            if _identity(temporary) != expected:
                _exchange(temporary, target)
                _raise_changed_during_write(target)
            return
        _replace_in_two_steps(temporary, target, expected)


def _replace_in_two_steps(temporary: Path, target: Path, expected: tuple[int, int]) -> None:
    """Replace ``target`` by two renames, where one-step exchange is not supported.

    Between the renames ``target`` does not exist; the old store waits at an ``-old-``
    sibling, which the next write to ``target`` puts back if this process is stopped.
    """
    aside = target.with_name(f".{target.name}.cytepool-old-{secrets.token_hex(8)}")
    os.rename(target, aside)
    if _identity(aside) != expected:
        os.rename(aside, target)
        _raise_changed_during_write(target)
    try:
        _rename_noreplace(temporary, target)
    except BaseException:
        os.rename(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _identity(path: Path) -> tuple[int, int]:
    status = os.lstat(path)
    return (status.st_dev, status.st_ino)


def _raise_changed_during_write(target: Path) -> None:
    message = f"{target} was replaced while the cube was being written; it was left as it is"
    raise FileExistsError(errno.EEXIST, message, str(target))


# ---------------------------------------------------------------------------------------------
# Writing the store
# ---------------------------------------------------------------------------------------------


def _build(cube: Cube, root: Path, *, compression: str | None, level: int | None) -> None:
    """Write every node of the cube file into the empty directory ``root``, zarr.json last."""
    from cytepool.fingerprint import Digests
    from cytepool.io.tables import write_table

    known = cube._digests(compute=False)
    options: dict[str, Any] = {"compression": compression, "level": level}
    for axis, index in _TABLES:
        write_table(getattr(cube, axis), root / axis, index=index, **options)
    cells = np.asarray(cube.cells)
    write_array(root / "cells", cells, chunks=_small_chunks(cells), **_PROFILE_AXES, **options)
    if cube.normalization is not None:
        factors = np.asarray(cube.normalization.factors)
        write_array(
            root / "normalization",
            factors,
            chunks=_small_chunks(factors),
            attributes={"method": cube.normalization.method},
            **_PROFILE_AXES,
            **options,
        )
    write_group(root / "layers")
    layers: dict[str, tuple[str | None, ...]] = {}
    for name in cube.layers:
        layers[name] = _write_layer(cube, name, root / "layers" / name, **options)
    digests = Digests(
        tables=dict(known.tables),
        cells=known.cells,
        normalization=known.normalization,
        layers=layers,
        dtypes={name: np.dtype(cube.layers[name].dtype).name for name in cube.layers},
    )
    write_group(root, attributes=_attributes(cube, digests))


def _small_chunks(array: np.ndarray) -> tuple[int, ...]:
    """One chunk for a small 2-D array (cells, normalization), split along groups if large."""
    n_groups, n_samples = array.shape
    rows = max(1, min(n_groups, _CHUNK_BYTES // max(1, n_samples * array.dtype.itemsize)))
    return (rows, max(1, n_samples))


def _layer_chunks(shape: tuple[int, int, int], itemsize: int) -> tuple[int, int, int]:
    """Chunks (1, s, f) of about ``_CHUNK_BYTES``: a group is a set of whole chunks."""
    _, n_samples, n_features = shape
    samples = min(n_samples, max(1, _CHUNK_BYTES // (itemsize * max(1, min(n_features, 1024)))))
    features = min(n_features, max(1, _CHUNK_BYTES // (itemsize * max(1, samples))))
    return (1, max(1, samples), max(1, features))


class _GroupSource:
    """A layer as ``write_array`` reads it: ``source[start:stop]`` reads those groups.

    Each group is read whole through the cube, which checks its values and verifies its
    known digest or computes and keeps it, as the group passes.
    """

    def __init__(self, cube: Cube, name: str) -> None:
        self._cube = cube
        self._name = name
        layer = cube.layers[name]
        self.shape = tuple(int(size) for size in layer.shape)
        self.dtype = np.dtype(layer.dtype)

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, step = key.indices(self.shape[0])
        blocks = [self._cube._read(self._name, group) for group in range(start, stop, step)]
        if len(blocks) == 1:
            return blocks[0][np.newaxis]
        return np.stack(blocks) if blocks else np.empty((0, *self.shape[1:]), self.dtype)


def _write_layer(
    cube: Cube, name: str, path: Path, *, compression: str | None, level: int | None
) -> tuple[str, ...]:
    """Write one layer group by group; return the digest of each group."""
    from cytepool.fingerprint import group_digest

    source = _GroupSource(cube, name)
    n_groups, n_samples, n_features = source.shape
    chunks = _layer_chunks((n_groups, n_samples, n_features), source.dtype.itemsize)
    write_array(
        path,
        source,
        chunks=chunks,
        compression=compression,
        level=level,
        dimension_names=("groups", "samples", "features"),
    )
    # The cube kept the digest of every group read whole; hash again only what it did not.
    known = cube._digests(compute=False).layers[name]
    return tuple(
        digest or group_digest(source.dtype, cube._read(name, group))
        for group, digest in enumerate(known)
    )


def _attributes(cube: Cube, digests: Digests) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "shape": [int(size) for size in cube.shape],
        "layers": dict(digests.dtypes),
        "digests": digests.to_json(),
        "fingerprint": digests.fingerprint(),
        "metadata": dict(cube.metadata),
        "provenance": [record.to_json() for record in cube.provenance],
    }


# ---------------------------------------------------------------------------------------------
# Reading the store
# ---------------------------------------------------------------------------------------------


def _stamp(root: Path) -> tuple[int, ...] | None:
    """Identify the root zarr.json as a file, to see whether the store was replaced."""
    try:
        status = os.stat(root / METADATA_FILE)
    except OSError:
        return None
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


def _store_changed(root: Path) -> StoreChangedError:
    message = f"the cube file {root} was replaced while it was being read; open it again"
    return StoreChangedError(message)


@dataclass(frozen=True)
class _Header:
    """The attributes of a cube file's root group, checked."""

    shape: tuple[int, int, int]
    layers: dict[str, str]
    digests: Digests
    metadata: dict[str, Any]
    provenance: tuple[Any, ...]


def _parse_header(attributes: Mapping[str, Any], root: Path) -> _Header:
    """Check the root attributes; I/O-free, so every rule is testable without files."""
    if attributes.get("format") != FORMAT:
        message = (
            f"{root} is not a cube file: its format attribute is "
            f"{attributes.get('format')!r}, expected {FORMAT!r}"
        )
        raise FormatError(message)
    newer = _check_version(attributes.get("format_version"), root)
    missing = [key for key in _REQUIRED_ATTRIBUTES if key not in attributes]
    unknown = [key for key in attributes if key not in _REQUIRED_ATTRIBUTES]
    if missing or (unknown and not newer):
        problem = f"lacks {missing}" if missing else f"has unknown attributes {unknown}"
        message = f"the cube file {root} is corrupt: its root group {problem}"
        raise FormatError(message)
    shape = _parse_shape(attributes["shape"], root)
    layers = _parse_layers(attributes["layers"], root)
    digests = _parse_digests(attributes, layers, shape[0], root)
    metadata = attributes["metadata"]
    if not isinstance(metadata, dict):
        _corrupt(root, f"metadata must be an object, found {type(metadata).__name__}")
    return _Header(shape, layers, digests, metadata, _parse_provenance(attributes, root))


def _corrupt(root: Path, problem: str) -> NoReturn:
    message = f"the cube file {root} is corrupt: {problem}"
    raise FormatError(message)


def _check_version(version: object, root: Path) -> bool:
    """Apply the versioning rule; return whether the file's minor version is newer."""
    match = re.fullmatch(r"(\d+)\.(\d+)", version) if isinstance(version, str) else None
    if match is None:
        message = f"the cube file {root} has an invalid format_version {version!r}"
        raise FormatError(message)
    major, minor = int(match.group(1)), int(match.group(2))
    if major > _MAJOR:
        message = (
            f"the cube file {root} has format version {version}, newer than the {FORMAT_VERSION} "
            "this cytepool reads; upgrade cytepool to read it"
        )
        raise FormatError(message)
    if major < _MAJOR:
        message = (
            f"the cube file {root} has format version {version}, which this cytepool "
            f"(format {FORMAT_VERSION}) does not read"
        )
        raise FormatError(message)
    return minor > _MINOR


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_shape(shape: object, root: Path) -> tuple[int, int, int]:
    if not (isinstance(shape, list) and len(shape) == 3 and all(map(_is_count, shape))):
        _corrupt(root, f"shape must be 3 non-negative integers, found {shape!r}")
    n_groups, n_samples, n_features = shape
    return (n_groups, n_samples, n_features)


def _parse_layers(layers: object, root: Path) -> dict[str, str]:
    if not isinstance(layers, dict) or not all(
        isinstance(name, str) and isinstance(dtype, str) for name, dtype in layers.items()
    ):
        _corrupt(root, f"layers must map names to data type names, found {layers!r}")
    try:
        _check_layer_names(list(layers))
    except ValueError as error:
        _corrupt(root, str(error))
    for name, dtype in layers.items():
        if dtype not in DATA_TYPES and dtype != "string":
            _corrupt(root, f"layer {name!r} has the unknown data type {dtype!r}")
        if dtype not in _LAYER_DTYPES:
            message = (
                f"layer {name!r} of the cube file {root} has data type {dtype!r}; a cube "
                f"accepts {', '.join(sorted(_LAYER_DTYPES))}"
            )
            raise TypeError(message)
    return dict(layers)


def _parse_digests(
    attributes: Mapping[str, Any], layers: dict[str, str], n_groups: int, root: Path
) -> Digests:
    from cytepool.fingerprint import Digests

    try:
        digests = Digests.from_json(attributes["digests"])
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        message = f"the cube file {root} is corrupt: invalid digests ({error})"
        raise FormatError(message) from error
    if dict(digests.dtypes) != layers or set(digests.layers) != set(layers):
        _corrupt(root, "the digests do not describe the layers the attributes list")
    if any(len(groups) != n_groups for groups in digests.layers.values()):
        _corrupt(root, f"the digests do not hold one digest per group ({n_groups})")
    if not digests.complete:
        _corrupt(root, "a group digest is missing (null)")
    if attributes["fingerprint"] != digests.fingerprint():
        _corrupt(root, "the stored fingerprint does not match the stored digests")
    return digests


def _parse_provenance(attributes: Mapping[str, Any], root: Path) -> tuple[Any, ...]:
    from cytepool import Provenance

    records = attributes["provenance"]
    if not isinstance(records, list):
        _corrupt(root, f"provenance must be a list, found {type(records).__name__}")
    try:
        return tuple(Provenance.from_json(record) for record in records)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        message = f"the cube file {root} is corrupt: invalid provenance record ({error})"
        raise FormatError(message) from error


def _read(root: Path, backend: str) -> Cube:
    """Read and check everything but the layers' values; open the layers."""
    from cytepool.cube import Cube

    try:
        attributes = read_group_attributes(root)
    except FileNotFoundError as error:
        message = f"{root} is not a cube file: it has no Zarr group metadata ({METADATA_FILE})"
        raise FormatError(message) from error
    header = _parse_header(attributes, root)
    try:
        tables = {axis: _read_table(root, axis, backend) for axis, _ in _TABLES}
        cells = _read_cells(root, header)
        normalization = _read_normalization(root, header)
        read_group_attributes(root / "layers")
        layers = {
            name: _open_layer(root, name, dtype, header) for name, dtype in header.layers.items()
        }
    except FileNotFoundError as error:
        message = f"the cube file {root} is corrupt: a part is missing ({error})"
        raise FormatError(message) from error
    try:  # compares the tables, cells and normalization with their digests
        return Cube._from_parts(
            layers,
            samples=tables["samples"],
            groups=tables["groups"],
            features=tables["features"],
            cells=cells,
            normalization=normalization,
            metadata=header.metadata,
            provenance=header.provenance,
            digests=header.digests,
        )
    except FormatError as error:
        message = f"the cube file {root} is corrupt or was edited: {error}"
        raise FormatError(message) from error


def _read_table(root: Path, axis: str, backend: str) -> Any:
    from cytepool.io.tables import read_table

    return read_table(root / axis, backend=backend)  # type: ignore[arg-type]


def _open_small(root: Path, name: str, header: _Header, kinds: str, what: str) -> ZarrArray:
    array = open_array(root / name)
    if array.dtype.kind not in kinds:
        message = f"the {what} of the cube file {root} have data type {array.dtype}, expected " + (
            "integers" if kinds == "iu" else "floating-point numbers"
        )
        raise TypeError(message)
    if array.shape != header.shape[:2]:
        _corrupt(root, f"{name} has shape {array.shape}, expected {header.shape[:2]}")
    return array


def _read_cells(root: Path, header: _Header) -> np.ndarray:
    return np.asarray(_open_small(root, "cells", header, "iu", "cell numbers"))


def _read_normalization(root: Path, header: _Header) -> Any:
    from cytepool import Normalization

    if not (root / "normalization" / METADATA_FILE).exists():
        return None
    array = _open_small(root, "normalization", header, "f", "normalization factors")
    method = array.attributes.get("method")
    if not isinstance(method, str):
        message = (
            f"the normalization of the cube file {root} has method {method!r}, expected a string"
        )
        raise TypeError(message)
    return Normalization(method, np.asarray(array))


def _open_layer(root: Path, name: str, dtype: str, header: _Header) -> ZarrArray:
    array = open_array(root / "layers" / name)
    if array.shape != header.shape:
        _corrupt(root, f"layer {name!r} has shape {array.shape}, expected {header.shape}")
    if array.dtype != np.dtype(dtype):
        _corrupt(root, f"layer {name!r} is stored as {array.dtype}, its attributes say {dtype}")
    return array
