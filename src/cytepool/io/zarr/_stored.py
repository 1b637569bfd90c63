"""Which chunks a local read finds stored, from one listing of the chunk directory.

A chunk that is not stored reads as the fill value, and finding that out costs a failed lookup
per chunk: about 20 µs, so 20 s for an array of a million chunks of which none are stored. A
read that needs at least :data:`LIST_FROM` chunks (shards, for a sharded array) therefore first
lists the directories that hold them, through the same open handle as every other lookup of
the read (for a local store, relative to the descriptor of the directory it opened), and stops
listing as soon as it meets more entries than the chunks it needs; then it reads the chunks it
found and fills the rest of the result at once, without a lookup each. A chunk listed but gone
when it is opened reads as the fill value, as one found absent by its own lookup does, and the
read still ends by verifying the store (:func:`cytepool.io.zarr.store.reading`), so a store
replaced during the read still raises StoreChangedError. Only keys in the canonical form of
the array's chunk key encoding count: exactly the keys a lookup per chunk would open. Remote
stores are never listed.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np

from cytepool.io.zarr.metadata import ArrayMetadata
from cytepool.io.zarr.store import StoreHandle, join

__all__ = ["LIST_FROM", "coordinates", "stored_chunks"]

LIST_FROM = 64
"""A read that needs fewer chunks than this looks each of them up."""


def stored_chunks(
    handle: StoreHandle, key: str, meta: ArrayMetadata, grid: tuple[int, ...], needed: int
) -> np.ndarray[Any, Any] | None:
    """The stored chunks (shards) of the array at ``key``, as their positions in the C order of
    the chunk grid (sorted int64), from one listing, if the directories that hold them have at
    most ``needed`` entries (the chunks the read needs) and ``needed`` is at least
    :data:`LIST_FROM`; else None.

    ``grid`` is the number of chunks along each axis (keys beyond it are left out). The listing
    keeps 8 bytes per chunk found, no key.
    """
    if needed < LIST_FROM or not grid or math.prod(grid) >= 2**63:
        return None
    inner = getattr(handle, "inner", handle)  # a consolidated handle's own
    keys_under = getattr(inner, "keys_under", None)
    if keys_under is None:  # a remote store: never listed
        return None
    encoding = meta.chunk_key_encoding
    nested = encoding.separator == "/"
    prefix = join(key, "c") if encoding.name == "default" and nested else key
    skip = len(key) + 1 if key else 0
    strides = [math.prod(grid[axis + 1 :]) for axis in range(len(grid))]
    found = array("q")

    def take(name: str) -> None:
        coords = _coords(name[skip:], meta, grid)
        if coords is not None:
            found.append(sum(c * s for c, s in zip(coords, strides, strict=True)))

    if not keys_under(prefix, len(grid) if nested else 1, needed, take):
        return None
    return np.sort(np.array(found, dtype=np.int64))


def coordinates(
    positions: np.ndarray[Any, Any], grid: tuple[int, ...]
) -> Iterator[tuple[int, ...]]:
    """The grid coordinates of chunk ``positions`` (C order of a grid of shape ``grid``)."""
    for start in range(0, len(positions), 4096):  # a few Python integers at a time
        yield from _unravel(positions[start : start + 4096].tolist(), grid)


def _unravel(positions: list[int], grid: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    for position in positions:
        coords = []
        for n in reversed(grid):
            rest, c = divmod(position, n)
            coords.append(c)
            position = rest
        yield tuple(reversed(coords))


def _coords(name: str, meta: ArrayMetadata, grid: tuple[int, ...]) -> Any:
    """The grid coordinates whose chunk key is ``name``, or None if no chunk of the grid has
    that key."""
    encoding = meta.chunk_key_encoding
    parts = name.split(encoding.separator)
    if encoding.name == "default":
        if parts[0] != "c":
            return None
        parts = parts[1:]
    if len(parts) != len(grid) or not all(part.isascii() and part.isdigit() for part in parts):
        return None  # not decimal digits: int() would fail ("²") or read "٣" as 3
    coords = tuple(int(part) for part in parts)
    if encoding.encode(coords) != name:  # not canonical ("01"): no chunk's key
        return None
    return coords if all(c < n for c, n in zip(coords, grid, strict=True)) else None
