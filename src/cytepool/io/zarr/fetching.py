"""Fetching ahead: the requests a read will make, sent before it makes them.

A remote handle (:class:`~cytepool.io.zarr.remote.RemoteHandle`) keeps a :class:`Window` of
requests sent ahead of a read: whole objects (chunks) and byte ranges (shard indexes, inner
chunks of shards). Ranges of one object whose gap is at most :data:`COALESCE_GAP` bytes are
fetched by one request (a *span*) of at most :data:`MAX_SPAN` bytes, and each range is then a
slice of it. At most ``size`` requests are sent and not yet wholly taken at a time; taking one
sends the next, so memory is the result plus a bounded number of fetched, undecoded bytes.

:func:`shard_ranges` plans the reads of a sharded array: the index of every shard a selection
touches (fetched together, in one round), then the byte ranges of the inner chunks it needs.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cytepool.errors import FormatError
from cytepool.io.zarr.sharding import read_shard_index
from cytepool.io.zarr.store import join

__all__ = ["COALESCE_GAP", "MAX_SPAN", "Range", "Span", "Window", "coalesce", "fetch_shards_ahead"]

COALESCE_GAP = 64 * 1024
"""Ranges of one object at most this many bytes apart are fetched by one request: a request
costs a round trip, 64 KiB cost well under a millisecond on any link that has round trips of a
few milliseconds."""

MAX_SPAN = 16 * 1024 * 1024
"""The most bytes one request of coalesced ranges asks for."""


class Range(NamedTuple):
    """``length`` bytes of the object at ``key`` from ``start`` (the last ``-start`` if
    ``start < 0``)."""

    key: str
    start: int
    length: int


@dataclass(eq=False)
class Span:
    """One request for the ranges ``members`` of one object: bytes ``start`` to ``stop``."""

    key: str
    start: int
    stop: int
    members: list[Range] = field(default_factory=list)
    future: Future[Any] | None = None
    untaken: int = 0
    windowed: bool = False

    @property
    def length(self) -> int:
        """The bytes asked for."""
        return self.stop - self.start


def coalesce(ranges: Iterable[Range], gap: int = COALESCE_GAP, most: int = MAX_SPAN) -> list[Span]:
    """The spans that fetch ``ranges``: neighbours of one object at most ``gap`` bytes apart
    share one, of at most ``most`` bytes (a longer range has one of its own); ranges from
    the end (``start < 0``) each have their own. Spans come in the order of their first range.

    Examples
    --------
    >>> spans = coalesce([Range("a", 0, 10), Range("a", 20, 5), Range("a", 900, 10)], gap=10)
    >>> [(s.key, s.start, s.stop, len(s.members)) for s in spans]
    [('a', 0, 25, 2), ('a', 900, 910, 1)]
    """
    spans: list[Span] = []
    order: dict[Range, int] = {}
    by_key: dict[str, list[Range]] = collections.defaultdict(list)
    for item in ranges:
        if item in order:
            continue
        order[item] = len(order)
        if item.start < 0:
            spans.append(Span(item.key, item.start, item.start + item.length, [item]))
        else:
            by_key[item.key].append(item)
    for key, items in by_key.items():
        current: Span | None = None
        for item in sorted(items, key=lambda r: (r.start, r.length)):
            end = item.start + item.length
            if (
                current is not None
                and item.start - current.stop <= gap
                and max(end, current.stop) - current.start <= most
            ):
                current.stop = max(current.stop, end)
                current.members.append(item)
                continue
            current = Span(key, item.start, end, [item])
            spans.append(current)
    spans.sort(key=lambda span: min(order[m] for m in span.members))
    return spans


class Window:
    """Requests sent ahead of a read, at most ``size`` of them not yet wholly taken.

    ``send_object(key, limit)`` and ``send_span(span)`` send a request and give its future.
    Objects and spans are queued in the order given and sent as the window allows; ranges
    given with ``now=True`` are sent at once, outside the window (shard indexes, which the
    plan of the next requests needs).
    """

    def __init__(
        self,
        size: int,
        send_object: Callable[[str, int], Future[Any]],
        send_span: Callable[[Span], Future[Any]],
    ):
        self._size = size
        self._send_object, self._send_span = send_object, send_span
        self._lock = threading.Lock()
        self._queue: collections.deque[tuple[str, int] | Span] = collections.deque()
        self._objects: dict[str, Future[Any]] = {}
        self._ranges: dict[Range, Span] = {}
        self._queued: set[str] = set()
        self._sent = 0  # requests in the window: sent, not wholly taken

    def objects(self, keys: Iterable[str], limit: int) -> None:
        """Queue whole objects."""
        with self._lock:
            for key in keys:
                if key not in self._objects and key not in self._queued:
                    self._queued.add(key)
                    self._queue.append((key, limit))
            self._fill()

    def ranges(self, ranges: Iterable[Range], *, now: bool = False) -> None:
        """Queue byte ranges, coalesced (sent at once with ``now``)."""
        with self._lock:
            wanted = [item for item in ranges if item not in self._ranges]
            for span in coalesce(wanted):
                span.untaken = len(span.members)
                for member in span.members:
                    self._ranges[member] = span
                if now:
                    span.future = self._send_span(span)
                else:
                    self._queue.append(span)
            self._fill()

    def _fill(self) -> None:
        while self._queue and self._sent < self._size:
            item = self._queue.popleft()
            self._sent += 1
            if isinstance(item, Span):
                item.windowed = True
                item.future = self._send_span(item)
            else:
                self._queued.discard(item[0])
                self._objects[item[0]] = self._send_object(*item)

    def take_object(self, key: str) -> Future[Any] | None:
        """The request of the object at ``key`` if it was sent (the window moves on)."""
        with self._lock:
            future = self._objects.pop(key, None)
            if future is not None:
                self._sent -= 1
                self._fill()
            elif key in self._queued:  # asked for before its turn: the caller fetches it
                self._queued.discard(key)
                self._queue.remove(
                    next(i for i in self._queue if isinstance(i, tuple) and i[0] == key)
                )
        return future

    def take_range(self, item: Range) -> tuple[Span, Future[Any]] | None:
        """The span holding ``item`` and its request, if it was sent (the window moves on once
        all its ranges are taken)."""
        with self._lock:
            span = self._ranges.pop(item, None)
            if span is None:
                return None
            span.untaken -= 1
            if span.future is None:  # asked for before its turn: the caller fetches it
                if span.untaken == 0:
                    self._queue.remove(span)
                return None
            if span.untaken == 0 and span.windowed:
                self._sent -= 1
                self._fill()
        return span, span.future

    def peek_range(self, item: Range) -> tuple[Span, Future[Any]] | None:
        """The span holding ``item`` and its request, if sent, left for a later take."""
        with self._lock:
            span = self._ranges.get(item)
        if span is None or span.future is None:
            return None
        return span, span.future

    def cancel(self) -> None:
        """Forget everything; cancel the requests not taken."""
        with self._lock:
            futures = list(self._objects.values())
            futures += [span.future for span in self._ranges.values() if span.future is not None]
            self._queue.clear()
            self._objects.clear()
            self._ranges.clear()
            self._queued.clear()
            self._sent = 0
        for future in futures:
            future.cancel()


def fetch_shards_ahead(handle: Any, reader: Any, selection: Any) -> None:
    """Fetch ahead what a read of a sharded array needs through ``handle`` (a remote one):
    the index of every shard the selection touches, together (one round), then the byte
    ranges of the inner chunks it reads, coalesced, in the order the read takes them.

    ``reader`` is the read's :class:`~cytepool.io.zarr._reading.Reader`. An index that cannot
    be had or is invalid is skipped here: the read meets the problem and reports it.
    """
    codec = reader.shard
    shard_shape = reader.meta.chunk_grid.chunk_shape
    size = codec.index_nbytes(shard_shape)
    start = -size if codec.index_location == "end" else 0
    encode = reader.meta.chunk_key_encoding.encode
    keys = {
        coords: join(reader.key, encode(coords))
        for coords, _ in selection.shards(shard_shape, reader.chunk_shape)
    }
    indexes = {coords: Range(key, start, size) for coords, key in keys.items()}
    handle.prefetch_ranges(indexes.values(), now=True)
    inner: list[Range] = []
    for coords, items in selection.shards(shard_shape, reader.chunk_shape):
        part = handle.peek_range(indexes[coords])
        if part is None:
            continue
        key = keys[coords]
        try:
            index = read_shard_index(
                part.data, part.size, codec, shard_shape, reader.max_encoded, key
            )
        except FormatError:
            continue
        for flat, _ in items:
            entry = index.entry(flat)
            if entry is not None and entry[1] > 0:
                inner.append(Range(key, entry[0], entry[1]))
    handle.prefetch_ranges(inner)
