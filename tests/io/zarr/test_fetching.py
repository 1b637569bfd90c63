"""The fetch-ahead window: bounded, in order, and nothing left behind when a read overtakes it."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from cytepool.io.zarr.fetching import Range, Span, Window


class _Sent:
    """Requests "sent" by a window: each is a Future completed at once with its name."""

    def __init__(self) -> None:
        self.names: list[Any] = []

    def future(self, name: Any) -> Future[Any]:
        self.names.append(name)
        done: Future[Any] = Future()
        done.set_result(name)
        return done

    def object(self, key: str, limit: int) -> Future[Any]:
        return self.future(key)

    def span(self, span: Span) -> Future[Any]:
        return self.future((span.key, span.start, span.stop))


def _window(size: int) -> tuple[Window, _Sent]:
    sent = _Sent()
    return Window(size, sent.object, sent.span), sent


def test_objects_are_sent_in_order_within_the_bound() -> None:
    window, sent = _window(2)
    window.objects(["a", "b", "c", "d"], limit=10)
    assert sent.names == ["a", "b"]
    assert window.take_object("a").result() == "a"  # type: ignore[union-attr]
    assert sent.names == ["a", "b", "c"]
    window.objects(["c", "e"], limit=10)  # c is in flight: not sent twice
    assert sent.names == ["a", "b", "c"]


def test_an_object_asked_for_before_its_turn_is_not_fetched_later() -> None:
    window, sent = _window(1)
    window.objects(["a"], limit=10)
    window.ranges([Range("x", 0, 4)])  # queued ahead of the next objects
    window.objects(["b", "c"], limit=10)
    assert window.take_object("c") is None  # the caller fetches it itself
    assert window.take_object("a") is not None
    assert window.take_range(Range("x", 0, 4)) is not None
    assert window.take_object("b") is not None
    assert sent.names == ["a", ("x", 0, 4), "b"]  # c was dropped from the queue, never sent


def test_ranges_coalesce_and_free_their_slot_when_all_are_taken() -> None:
    window, sent = _window(1)
    first, second = Range("k", 0, 4), Range("k", 10, 4)
    window.ranges([first, second, Range("other", 0, 4)])
    assert sent.names == [("k", 0, 14)]
    assert window.take_range(first) is not None
    assert sent.names == [("k", 0, 14)]  # one range of the span still to be taken
    assert window.take_range(second) is not None
    assert sent.names == [("k", 0, 14), ("other", 0, 4)]


def test_a_range_asked_for_before_its_turn_is_not_fetched_later() -> None:
    window, sent = _window(1)
    window.ranges([Range("a", 0, 4), Range("b", 0, 4)])
    assert window.take_range(Range("b", 0, 4)) is None
    assert window.take_range(Range("a", 0, 4)) is not None
    assert sent.names == [("a", 0, 4)]


def test_ranges_sent_now_leave_the_window_free() -> None:
    window, sent = _window(1)
    index = Range("shard", -16, 16)
    window.ranges([index], now=True)
    window.objects(["chunk"], limit=10)
    assert sent.names == [("shard", -16, 0), "chunk"]
    assert window.peek_range(index) is not None
    assert window.take_range(index) is not None
    assert window.take_range(index) is None  # taken once
