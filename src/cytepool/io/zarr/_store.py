"""The store seam, and metadata documents: reading zarr.json through a store handle, and
writing it locally.

:func:`locate` is the one place that chooses between a local and a remote store: a URL gives a
:class:`~cytepool.io.zarr.remote.RemoteStore`, and only then is the remote module (and with it
obstore and asyncio, when a read first needs them) imported, so local reads never load it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cytepool.errors import FormatError, InputError, InputTypeError
from cytepool.io.zarr.fields import MAX_METADATA_BYTES, METADATA_FILE, dumps, loads
from cytepool.io.zarr.store import (
    LocalStore,
    Store,
    StoreHandle,
    StorePath,
    TooLargeError,
    Version,
    is_url,
    join,
    reading,
)

__all__ = [
    "as_path",
    "locate",
    "open_local",
    "open_store",
    "read_document",
    "text_path",
    "write_document",
]

_V2_FILES = (".zarray", ".zgroup", ".zattrs")


def as_path(path: Any, name: str = "path") -> Path:
    """``path`` as a Path (TypeError if it is not a str or os.PathLike)."""
    if not isinstance(path, str | os.PathLike):
        msg = f"{name} must be a str or os.PathLike, not {type(path).__name__}"
        raise InputTypeError(msg)
    return Path(path)


def locate(path: Any, storage_options: Mapping[str, Any] | None = None) -> Store:
    """The store at ``path``: a :class:`~cytepool.io.zarr.remote.RemoteStore` for a URL
    (``storage_options`` go to its client), else a :class:`~cytepool.io.zarr.store.LocalStore`.

    The remote module is imported for a URL only. Raises InputTypeError if ``path`` is neither
    a str nor an os.PathLike of text, and InputError for ``storage_options`` with a local path
    (or, for a URL, an unsupported scheme or an unknown option).

    Examples
    --------
    >>> locate("s3://bucket/x.cube.zarr"), locate("x.cube.zarr")
    (RemoteStore(url='s3://bucket/x.cube.zarr'), LocalStore(path=PosixPath('x.cube.zarr')))
    """
    if is_url(path):
        from cytepool.io.zarr.remote import RemoteStore

        return RemoteStore(path, storage_options or {})
    if storage_options:
        msg = f"storage_options apply to URLs only; {path!r} is a local path"
        raise InputError(msg)
    return LocalStore(text_path(path))


def text_path(path: Any) -> Path:
    """``path`` as a Path: InputTypeError unless it is a str or an os.PathLike of text.

    Examples
    --------
    >>> text_path("x.cube.zarr")
    PosixPath('x.cube.zarr')
    >>> text_path(b"x.cube.zarr")
    Traceback (most recent call last):
    ...
    cytepool.errors.InputTypeError: path must be a str or os.PathLike, not bytes
    """
    if not isinstance(path, str | os.PathLike):
        msg = f"path must be a str or os.PathLike, not {type(path).__name__}"
        raise InputTypeError(msg)
    text = os.fspath(path)
    if not isinstance(text, str):
        msg = f"path must be a text path, not {type(text).__name__}"
        raise InputTypeError(msg)
    return Path(text)


def open_store(path: Any, storage_options: Mapping[str, Any] | None = None) -> StoreHandle:
    """Open the store at ``path`` (a URL or a local directory) for one read."""
    store = locate(path, storage_options)
    if isinstance(store, LocalStore):
        return open_local(store.path)
    return store.open()


def open_local(directory: Path) -> StoreHandle:
    """Open the local store at ``directory`` (FileNotFoundError if there is no directory,
    FormatError if its path is a symbolic link loop)."""
    try:
        return LocalStore(directory).open()
    except (FileNotFoundError, NotADirectoryError) as error:
        msg = f"no Zarr v3 metadata at {directory}: {directory / METADATA_FILE} does not exist"
        raise FileNotFoundError(msg) from error


def read_document(
    path: str | os.PathLike[str] | StorePath,
    storage_options: Mapping[str, Any] | None = None,
    *,
    shared: bool = False,
) -> tuple[Any, Version, str]:
    """Read and parse the zarr.json of a node strictly.

    ``path`` is a node of an open store, or a local directory or URL (opened for this read
    only; ``storage_options`` go to a URL's client). With ``shared``, a consolidated handle's
    parsed document is handed over without a copy: for a caller that only parses it, never
    changes it and keeps no part of it that it hands on.

    Returns
    -------
    The parsed JSON, the document's version, and its path as a string (for messages).

    Raises
    ------
    FileNotFoundError
        If there is no zarr.json (and no Zarr v2 metadata).
    FormatError
        If the file is not strict JSON, is larger than MAX_METADATA_BYTES or not a regular
        file, or the node is Zarr v2.
    """
    if isinstance(path, StorePath):
        return _read(path, shared)
    with reading(open_store(path, storage_options)) as handle:
        return _read(StorePath(handle), shared)


def _read(node: StorePath, shared: bool) -> tuple[Any, Version, str]:
    key = join(node.key, METADATA_FILE)
    where = node.handle.where(key)
    method = "shared_document" if shared else "document"
    parsed = getattr(node.handle, method, None)  # a consolidated handle: parsed already
    found = None if parsed is None else parsed(key)
    if found is not None:
        return found[0], found[1], where
    try:
        blob = node.handle.get(key, limit=MAX_METADATA_BYTES)
    except TooLargeError as error:
        msg = (
            f"{where} has {error.size} bytes, more than the {MAX_METADATA_BYTES} a metadata "
            "document may hold (MAX_METADATA_BYTES)"
        )
        raise FormatError(msg) from None
    if blob is None:
        _check_not_v2(node)
        msg = f"no Zarr v3 metadata at {node}: {where} does not exist"
        raise FileNotFoundError(msg)
    return loads(blob.data, where), blob.version, where


def _check_not_v2(node: StorePath) -> None:
    """FormatError if ``node`` holds Zarr v2 metadata.

    Its files are asked for by name (a ``stat`` each; a remote store fetches them together, in
    one round), never by listing the node, which most web servers refuse.
    """
    keys = [join(node.key, name) for name in _V2_FILES]
    gather = getattr(node.handle, "gather", None)
    if gather is not None:
        gather(keys, limit=MAX_METADATA_BYTES)
    for name, key in zip(_V2_FILES, keys, strict=True):
        if node.handle.version(key) is not None:
            msg = (
                f"{node} is a Zarr v2 node ({name}); only Zarr v3 (zarr.json) is supported:"
                " convert it with zarr-python"
            )
            raise FormatError(msg)


def write_document(directory: Path, document: dict[str, Any]) -> None:
    """Write ``directory/zarr.json`` (FileExistsError if it exists)."""
    text = dumps(document)
    with open(directory / METADATA_FILE, "x", encoding="ascii") as file:
        file.write(text)
