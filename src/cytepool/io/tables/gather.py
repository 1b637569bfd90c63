"""Metadata documents of a remote store without consolidated metadata, a level at a time.

A table or cube file without consolidated metadata (a table written by
:func:`~cytepool.io.tables.frames.write_table`, a cube written before cytepool stored it, or one
copied by a tool that drops it) has only one zarr.json per node; read one after another by URL,
each is a round trip. Their names are known a level at a time, though: a cube's root attributes
name its tables, cells, normalization and layers; each table's document names its index and
columns (``_index``, ``column-order``); each encoded column's document names its parts (a
nullable column's ``values`` and ``mask``, a categorical's ``codes`` and ``categories``).

:func:`gather_documents` fetches the documents of each level together, in one round, through
a handle that gathers (a remote one), which keeps them for the read: the reader then finds
every document without a request. Given the nodes whose chunks the read takes (``fetch``), it
also fetches them ahead as it goes: with the documents of a level, the chunks of the arrays
whose documents came in the round before (each refused beyond the most bytes a valid encoding
of one of its array's chunks takes), and the first chunk of each part of an encoded column,
whose key is guessed before its document arrives (``c/0``, or the convention of the arrays
beside it; at most :data:`GUESS_LIMIT` bytes): a guess is used only if the part's document
confirms the key is one of its chunks' (its chunk key encoding and separator, shape and chunk
grid give that key; a sharded array's never), so a part of one chunk needs no round of its
own. A confirmed guess is the object any read of that key gets: it is decoded with the
document's codecs and data type, and refused beyond its array's bound, as any chunk; one
found absent is a chunk that is absent (the fill value).

A guess costs at most its request: one refuted is dropped (never sent if it has not been;
left to finish, its answer discarded, if it has, so that requests in flight stay within the
bound), one that fails is fetched again by its reader, with its array's bound.

A cube file of format 1.2 names every table column and its parts (with each column's
encoding) in its ``tables`` attribute, so opening one takes a round for the root, one for
every document it needs and one for their chunks. Opening an older file takes a round for the
root, one for the tables, cells, normalization and layers, one for the columns (with the
chunks of the cells and normalization), and one for the parts of the encoded columns with
every remaining chunk: four rounds, when each round fits in the handle's requests in flight
(``max_in_flight``, 32 by default; the golden file of format 1.1 needs 20 in its last round).
A table read by URL takes three (its document; its columns'; the parts of its encoded
columns with every chunk). A node asked for already is not asked for again below.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cytepool.errors import FormatError
from cytepool.io.tables.registry import element_children
from cytepool.io.zarr.consolidated import chunk_requests
from cytepool.io.zarr.fields import MAX_METADATA_BYTES, METADATA_FILE, loads
from cytepool.io.zarr.metadata import ArrayMetadata
from cytepool.io.zarr.names import node_name_problem
from cytepool.io.zarr.store import StoreHandle, Version, join

__all__ = ["GUESS_LIMIT", "gather_documents"]

_MOST_DOCUMENTS = 8192
"""Documents gathered at most; a reader fetches any other one itself, as it needs it."""

GUESS_LIMIT = 1 << 20
"""The most bytes of a chunk fetched on a guess of its key, before its array's document came
(a larger one is refused from its announced length and fetched by its reader, with its
array's bound)."""

Fetch = Callable[[Mapping[str, Any]], Iterable[str]]
"""The nodes whose chunks a read takes, given the documents gathered so far."""


def gather_documents(
    handle: StoreHandle,
    keys: Iterable[str],
    version: Version | None = None,
    *,
    fetch: Fetch | None = None,
) -> dict[str, Any] | None:
    """The parsed documents of the nodes ``keys`` (``""`` for the store's root) and of every
    table element under them, by key, fetched level by level through ``handle`` and kept by it
    for the read; None if the handle does not gather (a local store, whose documents cost no
    round trip).

    With ``version`` (the root document's), the root is watched as it is for a consolidated
    cube: checked with a request sent now, and again when a read fails. With ``fetch``, the
    chunks of the (unsharded) arrays at or under the nodes it gives are fetched ahead as the
    levels are gathered (see the module docs). A document that is absent, cannot be had or
    does not parse is left out: the reader meets the problem and reports it.
    """
    gather = getattr(handle, "gather", None)
    if gather is None:
        return None
    watch = getattr(handle, "watch", None)
    if watch is not None and version is not None:
        watch(version)
    ahead = _Ahead(handle, fetch)
    documents: dict[str, Any] = {}
    level = list(dict.fromkeys(keys))
    asked: set[str] = set()
    guesses: dict[str, str] = {}  # a node of this level: the key guessed for its first chunk
    while level and len(documents) < _MOST_DOCUMENTS:
        level = level[: _MOST_DOCUMENTS - len(documents)]
        asked.update(level)
        got = gather(
            [join(key, METADATA_FILE) for key in level],
            limit=MAX_METADATA_BYTES,
            then=functools.partial(ahead.send, documents, guesses),
        )
        below: list[str] = []
        for key in level:
            document = _parse(got.get(join(key, METADATA_FILE)), handle.where(key))
            if document is not None:
                documents[key] = document
                below += [join(key, name) for name in element_children(document)]
                ahead.arrived(key, document)
        ahead.confirm(guesses)
        level = [
            key
            for key in dict.fromkeys(below)
            if key not in asked and node_name_problem(key.rpartition("/")[2]) is None
        ]
        guesses = {key: ahead.first_chunk(key, documents) for key in level}
    ahead.send(documents, {})
    return documents


class _Ahead:
    """The chunks fetched ahead while documents are gathered (see the module docs)."""

    def __init__(self, handle: StoreHandle, fetch: Fetch | None):
        self._handle, self._fetch = handle, fetch
        self._prefetch = getattr(handle, "prefetch", None) if fetch is not None else None
        self._guess = getattr(handle, "guess", None)
        self._arrays: dict[str, tuple[list[str], int]] = {}  # arrived, chunks not yet asked
        self._first: dict[str, str] = {}  # a group: the first chunk key of a 1-D array in it

    def send(self, documents: Mapping[str, Any], guesses: Mapping[str, str]) -> None:
        """Fetch the chunks of the arrays that arrived, then the first chunks guessed."""
        if self._prefetch is None or self._fetch is None:
            self._arrays.clear()
            return
        roots = list(self._fetch(documents))
        for key, (chunks, limit) in self._arrays.items():
            if _under(key, roots):
                self._prefetch(chunks, limit=limit)
        self._arrays.clear()
        if self._guess is not None:
            wanted = [guess for key, guess in guesses.items() if guess and _under(key, roots)]
            self._guess(wanted, limit=GUESS_LIMIT)

    def arrived(self, key: str, document: Any) -> None:
        """Note an array's chunks and its chunk key convention (a bad document: nothing)."""
        if document.get("node_type") != "array" or self._prefetch is None:
            return
        try:
            meta = ArrayMetadata.from_json(document, self._handle.where(join(key, METADATA_FILE)))
            chunks = chunk_requests(self._handle, key, meta)
        except FormatError:
            return
        if chunks is not None:
            self._arrays[key] = chunks
        if len(meta.shape) == 1:
            self._first.setdefault(key.rpartition("/")[0], meta.chunk_key_encoding.encode((0,)))

    def confirm(self, guesses: Mapping[str, str]) -> None:
        """Keep each guess that is a chunk of its node's array, as the array's document (which
        came this round) gives its chunk keys: its chunk key encoding and separator, its
        shape and chunk grid, unsharded; drop the others (a node whose document is absent,
        not an array, or keys its chunks otherwise)."""
        confirm = getattr(self._handle, "confirm", None)
        if confirm is None or not any(guesses.values()):
            return
        confirm(
            guess
            for node, guess in guesses.items()
            if guess and guess in self._arrays.get(node, ([], 0))[0]
        )

    def first_chunk(self, key: str, documents: Mapping[str, Any]) -> str:
        """The key guessed for the first chunk of the node ``key``, "" if none is guessed: only
        a part of an encoded column (a categorical's or a nullable array's) is guessed; under
        the convention of a 1-D array beside it or beside its column, else ``c/0``."""
        if self._guess is None or self._prefetch is None:
            return ""
        column = key.rpartition("/")[0]
        parent = documents.get(column, {}).get("attributes")
        kind = parent.get("encoding-type") if isinstance(parent, dict) else None
        if kind != "categorical" and not (isinstance(kind, str) and kind.startswith("nullable-")):
            return ""
        table = column.rpartition("/")[0]
        first = self._first.get(column) or self._first.get(table) or "c/0"
        return join(key, first)


def _under(key: str, roots: Iterable[str]) -> bool:
    return any(not root or key == root or key.startswith(f"{root}/") for root in roots)


def _parse(blob: Any, where: str) -> Any:
    """A document's JSON object, or None (absent, not had, not strict JSON, not an object)."""
    if blob is None:
        return None
    try:
        document = loads(blob.data, where)
    except FormatError:
        return None
    return document if isinstance(document, dict) else None
