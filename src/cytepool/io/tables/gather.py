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
every document without a request. A cube file of format 1.2 names every table column and its
parts (with each column's encoding) in its ``tables`` attribute, so opening one takes a round
for the root, one for every document it needs and one for their chunks. Opening an older file
takes a round for the root, one for each level (the parts; the columns; the parts of encoded
columns, if any) and one for every chunk of the tables, cells and normalization: four rounds for
tables of plain columns, five when a column is encoded as a group (pandas 3 stores strings as
nullable string arrays). A node asked for already is not asked for again below.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cytepool.errors import FormatError
from cytepool.io.tables.registry import element_children
from cytepool.io.zarr.fields import MAX_METADATA_BYTES, METADATA_FILE, loads
from cytepool.io.zarr.names import node_name_problem
from cytepool.io.zarr.store import StoreHandle, Version, join

__all__ = ["gather_documents"]

_MOST_DOCUMENTS = 8192
"""Documents gathered at most; a reader fetches any other one itself, as it needs it."""


def gather_documents(
    handle: StoreHandle, keys: Iterable[str], version: Version | None = None
) -> dict[str, Any] | None:
    """The parsed documents of the nodes ``keys`` (``""`` for the store's root) and of every
    table element under them, by key, fetched level by level through ``handle`` and kept by it
    for the read; None if the handle does not gather (a local store, whose documents cost no
    round trip).

    With ``version`` (the root document's), the root is watched as it is for a consolidated
    cube: checked with a request sent now, and again when a read fails. A document that is
    absent, cannot be had or does not parse is left out: the reader meets the problem and
    reports it.
    """
    gather = getattr(handle, "gather", None)
    if gather is None:
        return None
    watch = getattr(handle, "watch", None)
    if watch is not None and version is not None:
        watch(version)
    documents: dict[str, Any] = {}
    level = list(dict.fromkeys(keys))
    asked: set[str] = set()
    while level and len(documents) < _MOST_DOCUMENTS:
        level = level[: _MOST_DOCUMENTS - len(documents)]
        asked.update(level)
        got = gather([join(key, METADATA_FILE) for key in level], limit=MAX_METADATA_BYTES)
        below: list[str] = []
        for key in level:
            document = _parse(got.get(join(key, METADATA_FILE)), handle.where(key))
            if document is not None:
                documents[key] = document
                below += [join(key, name) for name in element_children(document)]
        level = [
            key
            for key in dict.fromkeys(below)
            if key not in asked and node_name_problem(key.rpartition("/")[2]) is None
        ]
    return documents


def _parse(blob: Any, where: str) -> Any:
    """A document's JSON object, or None (absent, not had, not strict JSON, not an object)."""
    if blob is None:
        return None
    try:
        document = loads(blob.data, where)
    except FormatError:
        return None
    return document if isinstance(document, dict) else None
