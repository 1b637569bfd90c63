"""The text of a table value, the same whatever the frame library that holds it.

A sample made by ``Cube.pool_samples`` is named by the ``str`` of a column's value, and the
name is part of the cube's fingerprint, which must not depend on the backend. Numbers,
booleans and strings read the same from every backend; times do not: pandas writes a
duration ``0 days 01:00:00`` where Python (polars, pyarrow) writes ``1:00:00``, and polars and
pyarrow give Python values, which stop at microseconds. So times are written from their
canonical values (:class:`cytepool.fingerprint.CanonicalColumn`) as Python writes its own
``datetime``, ``date`` and ``timedelta``, with nanoseconds after the microseconds where a
value has them (as pandas writes a ``Timestamp``).

Examples
--------
>>> import numpy as np
>>> durations = np.array([3_600_000_000, 1_500])
>>> [time_text("duration[us]", int(v)) for v in durations]
['1:00:00', '0:00:00.001500']
>>> time_text("duration[ns]", 1), time_text("datetime[ns]", 1_577_836_800_000_000_001)
('0:00:00.000000001', '2020-01-01 00:00:00.000000001')
>>> time_text("datetime[us,Europe/Berlin]", 1_585_476_000_000_000)
'2020-03-29 12:00:00+02:00'
>>> time_text("datetime[ns,-05:00]", 1), time_text("duration[ns]", -1)
('1969-12-31 19:00:00.000000001-05:00', '-1 day, 23:59:59.999999999')
>>> time_text("date", 18262), time_text("int64", 3) is None
('2020-01-01', True)
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from typing import Any

__all__ = ["time_text", "value_text"]

_NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_TAG = re.compile(r"(?:categorical\[)?(datetime|duration)\[(s|ms|us|ns)(?:,(.+?))?\]\]?")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_OFFSET = re.compile(r"([+-])(\d\d):(\d\d)")


def time_text(tag: str, value: int) -> str | None:
    """The text of ``value`` (an integer in the unit of the canonical type ``tag``) if the
    tag is a time's (a categorical's of times too), else None; None too for a time beyond
    Python's years 1-9999 (then the backend's own text is used)."""
    if tag in ("date", "categorical[date]"):
        return _date_text(value)
    found = _TAG.fullmatch(tag)
    if found is None:
        return None
    kind, unit, zone = found.groups()
    micro, nano = divmod(value * _NS_PER[unit], 1000)
    try:
        if kind == "duration":
            return _with_nanoseconds(str(dt.timedelta(microseconds=micro)), micro, nano)
        moment = _EPOCH + dt.timedelta(microseconds=micro)
    except OverflowError:
        return None
    shown = moment if zone is None else moment.astimezone(_zone(zone))
    local = str(shown.replace(tzinfo=None))
    offset = "" if zone is None else str(shown)[len(local) :]  # such as +02:00
    return _with_nanoseconds(local, micro, nano) + offset


def value_text(tag: str, key: Any, value: Any) -> str:
    """The text of a table value, the same in every backend.

    Parameters
    ----------
    tag
        The canonical type of the column (:class:`cytepool.fingerprint.CanonicalColumn`).
    key
        The value's canonical key (:meth:`~cytepool.fingerprint.CanonicalColumn.row_keys`).
    value
        The value as the backend gives it (Python's own for numbers, booleans, strings).

    Returns
    -------
    str
        A time as :func:`time_text` writes it; a category as Python writes its decoded value
        (``True``, ``1.0``, ``1e-07``: the backends' own texts of categories differ, pyarrow
        writes ``true``, ``1``, ``1e-7``); another value as ``str(value)``.
    """
    text = time_text(tag, key)
    if text is not None:
        return text
    if not tag.startswith("categorical["):
        return str(value)
    if isinstance(key, bytes):  # a category of strings: its UTF-8
        return key.decode("utf-8")
    return str(bool(key)) if tag == "categorical[bool]" else str(key)


def _date_text(days: int) -> str | None:
    try:
        return str(dt.date(1970, 1, 1) + dt.timedelta(days=days))
    except OverflowError:
        return None


def _with_nanoseconds(text: str, micro: int, nano: int) -> str:
    """``text`` (Python's, which writes microseconds only when there are some) with the
    nanoseconds ``nano`` after them."""
    if not nano:
        return text
    fraction = "" if micro % 10**6 else ".000000"  # Python writes none for 0 microseconds
    return f"{text}{fraction}{nano:03d}"


def _zone(name: str) -> dt.tzinfo:
    """The zone a canonical type names: a tz database name or an offset such as ``+05:30``."""
    offset = _OFFSET.fullmatch(name)
    if offset is None:
        return zoneinfo.ZoneInfo(name)
    sign, hours, minutes = offset.groups()
    delta = dt.timedelta(hours=int(hours), minutes=int(minutes))
    return dt.timezone(-delta if sign == "-" else delta)
