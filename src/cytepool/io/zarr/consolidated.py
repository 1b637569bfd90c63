"""Consolidated metadata: a hierarchy's metadata documents in its root zarr.json.

zarr-python 3 stores, in the root group's document, ``"consolidated_metadata": {"kind":
"inline", "must_understand": false, "metadata": {path: document}}`` with a copy of every other
node's document (a group's copy carries an empty ``consolidated_metadata`` of its own).
:func:`write_consolidated_group` writes that layout for a hierarchy built on disk, as its last
step; since ``must_understand`` is false, every Zarr v3 reader still opens each node by its own
document, and zarr-python's ``open_consolidated`` opens the whole hierarchy from the root alone.

:class:`ConsolidatedStore` is a store read through that copy: its handles answer every
``zarr.json`` from the copy, without reading the documents, and fetch everything else from the
store under it. A node absent from the copy is absent. The version of every document is the
version of the root document, so an array opened through the copy is checked against the root
document at each read (locally a ``stat``; remotely a conditional HEAD sent with the read's
requests, see :mod:`cytepool.io.zarr.remote`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cytepool.errors import FormatError
from cytepool.io.zarr._reading import Reader
from cytepool.io.zarr.fields import METADATA_FILE, dumps, json_copy, loads
from cytepool.io.zarr.metadata import ArrayMetadata, GroupMetadata, check_attributes
from cytepool.io.zarr.store import Blob, Part, Store, StoreHandle, TooLargeError, Version

__all__ = [
    "CONSOLIDATED",
    "ConsolidatedHandle",
    "ConsolidatedStore",
    "chunk_keys",
    "chunk_requests",
    "consolidated_documents",
    "fetch_ahead",
    "read_through",
    "write_consolidated_group",
]

CONSOLIDATED = "consolidated_metadata"
"""The key of the root document that holds the hierarchy's metadata."""


def _entry(documents: Mapping[str, Any]) -> dict[str, Any]:
    return {"kind": "inline", "must_understand": False, "metadata": dict(documents)}


def write_consolidated_group(directory: Path, attributes: Mapping[str, Any]) -> None:
    """Write the root group's zarr.json of the hierarchy at ``directory``, with a copy of
    every other node's document (FileExistsError if the root has one).

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> from cytepool.io.zarr import write_group
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> write_group(tmp / "t")
    >>> write_consolidated_group(tmp, {"a": 1})
    >>> document = json.loads((tmp / "zarr.json").read_text())
    >>> list(document), list(document["consolidated_metadata"]["metadata"])
    (['attributes', 'zarr_format', 'consolidated_metadata', 'node_type'], ['t'])
    """
    documents = {key: _copy(document) for key, document in sorted(_documents(directory))}
    root = {
        "attributes": check_attributes(attributes),
        "zarr_format": 3,
        CONSOLIDATED: _entry(documents),
        "node_type": "group",
    }
    with open(directory / METADATA_FILE, "x", encoding="ascii") as file:
        file.write(dumps(root))


def _documents(directory: Path) -> Iterator[tuple[str, Any]]:
    """(key, parsed document) of every node under ``directory`` but the root."""
    for parent, names, files in os.walk(directory):
        names.sort()
        here = Path(parent)
        if here != directory and METADATA_FILE in files:
            key = here.relative_to(directory).as_posix()
            where = os.fspath(here / METADATA_FILE)
            yield key, loads((here / METADATA_FILE).read_bytes(), where)


def _copy(document: Any) -> Any:
    """A node's document as the root holds it (zarr-python's layout: groups get an empty
    consolidated entry of their own)."""
    if isinstance(document, dict) and document.get("node_type") == "group":
        copy = {key: value for key, value in document.items() if key != "node_type"}
        copy[CONSOLIDATED] = _entry({})
        copy["node_type"] = "group"
        return copy
    return document


def consolidated_documents(root: Any, where: str) -> dict[str, Any] | None:
    """The documents a root document holds (by key), None if it holds none; FormatError if
    the entry is malformed.

    Examples
    --------
    >>> consolidated_documents({"zarr_format": 3, "node_type": "group"}, "zarr.json") is None
    True
    >>> entry = {"kind": "inline", "must_understand": False, "metadata": {"a": {}}}
    >>> consolidated_documents({"consolidated_metadata": entry}, "zarr.json")
    {'a': {}}
    """
    if not isinstance(root, dict) or root.get(CONSOLIDATED) is None:
        return None
    entry = root[CONSOLIDATED]
    if not isinstance(entry, dict) or entry.get("kind") != "inline":
        msg = f"{where}: {CONSOLIDATED} must be an object of kind 'inline', found {entry!r:.200}"
        raise FormatError(msg)
    documents = entry.get("metadata")
    if not isinstance(documents, dict) or not all(
        isinstance(key, str) and key and isinstance(value, dict) for key, value in documents.items()
    ):
        msg = f"{where}: {CONSOLIDATED}.metadata must map node paths to documents"
        raise FormatError(msg)
    return documents


def chunk_keys(prefix: str, document: Any, where: str) -> list[str]:
    """The keys of every chunk (or shard) of the array whose document is ``document``.

    Examples
    --------
    >>> from cytepool.io.zarr.metadata import ArrayMetadata
    >>> doc = {"zarr_format": 3, "node_type": "array", "shape": [3], "data_type": "int8",
    ...     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
    ...     "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
    ...     "codecs": [{"name": "bytes"}]}
    >>> chunk_keys("a", doc, "a/zarr.json")
    ['a/c/0', 'a/c/1']
    """
    return _chunk_keys(prefix, ArrayMetadata.from_json(document, where))


def _chunk_keys(prefix: str, meta: ArrayMetadata) -> list[str]:
    grid = [
        -(-size // chunk)
        for size, chunk in zip(meta.shape, meta.chunk_grid.chunk_shape, strict=True)
    ]
    encode = meta.chunk_key_encoding.encode
    return [f"{prefix}/{encode(tuple(int(c) for c in coords))}" for coords in np.ndindex(*grid)]


@dataclass(frozen=True)
class ConsolidatedStore:
    """A store read through the metadata its root document holds (see the module docs)."""

    inner: Store
    root: dict[str, Any] = field(repr=False)
    documents: dict[str, Any] = field(repr=False)
    version: Version = field(repr=False)
    trust: bool = field(default=False, repr=False)
    """Whether handles take the root's version as current without asking the inner store
    (the inner handle then checks it itself, as a remote handle does)."""

    def open(self) -> ConsolidatedHandle:
        """Open the inner store, read through the documents."""
        return ConsolidatedHandle(self, self.inner.open())

    def where(self, key: str) -> str:
        """The inner store's name of ``key``."""
        return self.inner.where(key)


class ConsolidatedHandle:
    """A handle answering zarr.json from the root document's copy (see the module docs)."""

    def __init__(self, store: ConsolidatedStore, inner: StoreHandle):
        self._store, self._inner = store, inner
        self._texts: dict[str, bytes] = {}
        # what readers made of a node's document (which never changes here), by node: an
        # opened array's metadata and version, so that opening it again parses nothing
        self.parsed: dict[str, Any] = {}
        self.parsed_groups: dict[str, GroupMetadata] = {}  # a group's metadata, by node

    @property
    def store(self) -> ConsolidatedStore:
        """The consolidated store."""
        return self._store

    @property
    def inner(self) -> StoreHandle:
        """The handle of the store under it."""
        return self._inner

    @property
    def closed(self) -> bool:
        """Whether the handle was closed."""
        return self._inner.closed

    def where(self, key: str) -> str:
        """The inner store's name of ``key``."""
        return self._inner.where(key)

    def stamped_where(self, key: str) -> str:
        """The name of the file whose version :meth:`version` gives for ``key``: for a document
        the copy holds, the root document, which holds it (consolidated)."""
        node = self._node(key)
        if node is None or node == "" or node not in self._store.documents:
            return self.where(key)
        return f"{self.where(METADATA_FILE)} (the consolidated metadata, which holds {key})"

    def _node(self, key: str) -> str | None:
        """The node whose document ``key`` is, or None if ``key`` is no metadata document."""
        if key == METADATA_FILE:
            return ""
        head, _, tail = key.rpartition("/")
        return head if tail == METADATA_FILE else None

    def document(self, key: str) -> tuple[Any, Version] | None:
        """A metadata document of the copy, parsed (a copy of its own) with its version; None
        if ``key`` is no document the copy holds.

        The root document was parsed strictly as a whole, so the documents it holds need not be
        written out and parsed again, as ``get`` does for readers that ask for bytes.
        """
        found = self.shared_document(key)
        return None if found is None else (json_copy(found[0]), found[1])

    def shared_document(self, key: str) -> tuple[Any, Version] | None:
        """:meth:`document` without the copy, for a reader that only parses it (and never
        changes it or hands it on): opening a cube parses dozens of documents."""
        node = self._node(key)
        if node is None:
            return None
        document = self._store.root if node == "" else self._store.documents.get(node)
        return None if document is None else (document, self._store.version)

    def _text(self, node: str) -> bytes | None:
        """The document of ``node`` as JSON, made once per handle (reads ask again and again)."""
        text = self._texts.get(node)
        if text is None:
            document = self._store.root if node == "" else self._store.documents.get(node)
            if document is None:
                return None
            text = self._texts[node] = dumps(document).encode("ascii")
        return text

    def get(self, key: str, *, limit: int) -> Blob | None:
        """A document from the copy, anything else from the store under it."""
        node = self._node(key)
        if node is None:
            return self._inner.get(key, limit=limit)
        text = self._text(node)
        if text is None:
            return None
        if len(text) > limit:
            raise TooLargeError(self.where(key), len(text), limit)
        return Blob(text, self._store.version)

    def get_range(self, key: str, start: int, length: int) -> Part | None:
        """A byte range from the store under it."""
        return self._inner.get_range(key, start, length)

    def list(self, prefix: str) -> list[str]:
        """The names under ``prefix`` in the store under it."""
        return self._inner.list(prefix)

    def version(self, key: str) -> Version | None:
        """A document's version is the root document's current version."""
        node = self._node(key)
        if node is None:
            return self._inner.version(key)
        if node and node not in self._store.documents:
            return None
        if self._store.trust:
            return self._store.version
        return self._inner.version(METADATA_FILE)

    def gather(
        self, keys: Iterable[str], *, limit: int, then: Callable[[], object] | None = None
    ) -> dict[str, Blob | None]:
        """Objects fetched together by the store under it, if it can (a remote one)."""
        gather = getattr(self._inner, "gather", None)
        if gather is None:
            if then is not None:
                then()
            return {}
        result: dict[str, Blob | None] = gather(keys, limit=limit, then=then)
        return result

    def prefetch(self, keys: Iterable[str], *, limit: int) -> None:
        """Fetch ahead through the store under it, if it fetches ahead."""
        prefetch = getattr(self._inner, "prefetch", None)
        if prefetch is not None:
            prefetch(keys, limit=limit)

    def prefetch_ranges(self, ranges: Iterable[Any], *, now: bool = False) -> None:
        """Fetch byte ranges ahead through the store under it (a remote one)."""
        self._inner.prefetch_ranges(ranges, now=now)  # type: ignore[attr-defined]

    def peek_range(self, item: Any) -> Part | None:
        """A byte range fetched ahead by the store under it (a remote one)."""
        result: Part | None = self._inner.peek_range(item)  # type: ignore[attr-defined]
        return result

    def verify(self, *, again: bool = False) -> None:
        """Verify the store under it."""
        self._inner.verify(again=again)

    def close(self) -> None:
        """Close the handle under it."""
        self._inner.close()


def read_through(
    handle: StoreHandle, document: dict[str, Any], documents: dict[str, Any], version: Version
) -> ConsolidatedHandle:
    """``handle`` (whose root document, of ``version``, is ``document``) read through the
    documents it holds; a handle that can watch the root (a remote one) checks its version
    with a request sent now, alongside the next ones."""
    watch = getattr(handle, "watch", None)
    if watch is not None:
        watch(version)
    store = ConsolidatedStore(handle.store, document, documents, version, trust=watch is not None)
    return ConsolidatedHandle(store, handle)


def fetch_ahead(handle: StoreHandle, documents: Mapping[str, Any], nodes: Iterable[str]) -> None:
    """Ask a handle that fetches ahead (a remote one) for every chunk of the arrays at or
    under ``nodes`` (``""``: the whole store), in the order of ``nodes``; each is refused from
    its length beyond the most bytes a valid encoding of one of its array's chunks can take (as
    its reader refuses it).

    Sharded arrays are left to their reads, which fetch the ranges they need.
    """
    prefetch = getattr(handle, "prefetch", None)
    if prefetch is None or getattr(getattr(handle, "inner", handle), "prefetch", None) is None:
        return  # a consolidated handle over a local store: nothing to fetch ahead
    for root in nodes:
        for key, document in documents.items():
            under = not root or key == root or key.startswith(f"{root}/")
            if not under or document.get("node_type") != "array":
                continue
            meta = ArrayMetadata.from_json(document, handle.where(f"{key}/{METADATA_FILE}"))
            chunks = chunk_requests(handle, key, meta)
            if chunks is not None:
                prefetch(chunks[0], limit=chunks[1])


def chunk_requests(
    handle: StoreHandle, key: str, meta: ArrayMetadata
) -> tuple[list[str], int] | None:
    """The keys of every chunk of the array at ``key`` whose metadata is ``meta``, and the most
    bytes a valid encoding of one can take; None for a sharded array (its reads fetch the
    ranges they need)."""
    reader = Reader(handle, key, meta)
    return None if reader.shard is not None else (_chunk_keys(key, meta), reader.chunk_limit)
