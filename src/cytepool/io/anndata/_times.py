"""Times written as ISO texts (anndata writes no datetimes), parsed back into their unit.

:func:`cytepool.io.anndata.to_anndata` writes datetimes and durations as the texts of
``Timestamp.isoformat`` and ``Timedelta.isoformat`` and records each column's dtype, unit and
zone. They are parsed here straight into that unit, with numpy and Python integers, never
through pandas' nanoseconds, which hold only the years 1677 to 2262 and durations under 292
years: a ``datetime64[s]`` of the year 1000 or a ``timedelta64[s]`` of 300 years comes back.

Examples
--------
>>> datetimes_from_texts(["1000-01-01T00:00:00", None, "2020-01-01T01:00:00+01:00"], "s")
array(['1000-01-01T00:00:00',                 'NaT', '2020-01-01T00:00:00'],
      dtype='datetime64[s]')
>>> durations_from_texts(["P109500DT0H0M0S", "P-1DT23H59M59.5S"], "ms")
array([9460800000000,          -500], dtype='timedelta64[ms]')
>>> recorded_zone("tzfile('/usr/share/zoneinfo/Europe/Berlin')"), recorded_zone("UTC+05:30")
('Europe/Berlin', '+05:30')
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from cytepool.errors import InputError
from cytepool.io.tables.zones import zone_name

__all__ = ["datetimes_from_texts", "durations_from_texts", "recorded_zone"]

_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_OFFSET = re.compile(r"(.+?)(?:([+-])(\d\d):(\d\d)(?::(\d\d)(?:\.(\d{6}))?)?|Z)?")
_DURATION = re.compile(r"(-)?P(-?\d+)DT(\d+)H(\d+)M(\d+)(?:\.(\d+))?S")
_TZFILE = re.compile(r"tzfile\('(?:.*/zoneinfo/)?([^']+)'\)")
_FIXED_OFFSET = re.compile(r"pytz\.FixedOffset\((-?\d+)\)")
_NAT = np.iinfo(np.int64).min


def datetimes_from_texts(texts: Iterable[Any], unit: str, column: str = "") -> np.ndarray:
    """ISO datetimes (with or without an offset such as ``+01:00``, or ``+00:19:32`` of a
    zone's local mean time) as ``datetime64[unit]``, UTC where a text has an offset; missing
    values (None, NaN) are NaT. InputError, naming the column ``column``, for a text that is
    no ISO datetime (of ``unit``)."""
    texts = list(texts)
    local: list[str] = []
    offsets: list[int] = []
    for text in texts:
        if _missing(text):
            local.append("NaT")
            offsets.append(0)
            continue
        match = _OFFSET.fullmatch(str(text))
        if match is None:
            raise _not_iso(text, "datetime", column)
        local.append(match.group(1))
        offsets.append(_offset_microseconds(match))
    fine = unit if unit in ("us", "ns") or not any(o % 10**6 for o in offsets) else "us"
    try:
        values = np.array(local, dtype=f"datetime64[{fine}]")
    except ValueError as error:
        raise _not_iso(_first_not_datetime(local, fine), "datetime", column) from error
    shifts = np.array(offsets, dtype="timedelta64[us]").astype(f"timedelta64[{fine}]")
    return _in_unit(values - shifts, unit, texts, column)


def _offset_microseconds(match: re.Match[str]) -> int:
    """The UTC offset of a text :data:`_OFFSET` matched, in microseconds (0 without one):
    ``±HH:MM``, or ``±HH:MM:SS[.ffffff]`` as ``isoformat`` writes an offset of seconds."""
    sign, hours, minutes, seconds, micros = match.group(2, 3, 4, 5, 6)
    if sign is None:
        return 0
    total = (int(hours) * 3600 + int(minutes) * 60 + int(seconds or 0)) * 10**6
    total += int(micros or 0)
    return -total if sign == "-" else total


def _in_unit(values: np.ndarray, unit: str, texts: list[Any], column: str) -> np.ndarray:
    """``values`` as ``datetime64[unit]``, exactly: InputError naming the first text whose
    time (after its offset) is not one of ``unit``, which to_anndata writes no such text of."""
    exact = values.astype(f"datetime64[{unit}]")
    lost = exact.astype(values.dtype).view(np.int64) != values.view(np.int64)
    if lost.any():
        raise _not_iso(texts[int(np.argmax(lost))], "datetime", column)
    return exact


def durations_from_texts(texts: Iterable[Any], unit: str, column: str = "") -> np.ndarray:
    """ISO durations of ``Timedelta.isoformat`` (``P-1DT23H59M59.5S``) as
    ``timedelta64[unit]``; missing values (None, NaN) are NaT. InputError, naming the column
    ``column``, for a text that is no such duration."""
    per_second = _PER_SECOND[unit]
    numbers: list[int] = []
    for text in texts:
        if _missing(text):
            numbers.append(_NAT)
            continue
        match = _DURATION.fullmatch(str(text))
        if match is None:
            raise _not_iso(text, "duration", column)
        negative, days, hours, mins, secs, fraction = match.groups()
        seconds = int(days) * 86400 + int(hours) * 3600 + int(mins) * 60 + int(secs)
        nanoseconds = int((fraction or "").ljust(9, "0")[:9])
        number = seconds * per_second + nanoseconds * per_second // 10**9
        numbers.append(-number if negative else number)
    return np.array(numbers, dtype=np.int64).view(f"timedelta64[{unit}]")


def recorded_zone(text: str) -> str:
    """The zone name of a recorded dtype's zone: a tz database name or ``+HH:MM``, also from
    the names cytepool recorded before it named zones so (``tzfile('.../Europe/Berlin')``,
    ``pytz.FixedOffset(330)``, ``UTC+05:30``)."""
    tzfile = _TZFILE.fullmatch(text)
    if tzfile is not None:
        return tzfile.group(1)
    fixed = _FIXED_OFFSET.fullmatch(text)
    if fixed is not None:
        return zone_name(dt.timezone(dt.timedelta(minutes=int(fixed.group(1)))))
    return zone_name(text)


def _first_not_datetime(texts: list[str], unit: str) -> str | None:
    """The first of ``texts`` numpy parses no datetime of ``unit`` from."""
    for text in texts:
        try:
            np.array([text], dtype=f"datetime64[{unit}]")
        except ValueError:
            return text
    return None  # pragma: no cover - called when one did not parse


def _missing(value: Any) -> bool:
    import pandas as pd

    return value is None or (not isinstance(value, str) and bool(pd.isna(value)))


def _not_iso(found: Any, kind: str, column: str) -> InputError:
    expected = "'2020-01-01T00:00:00+01:00'" if kind == "datetime" else "'P1DT2H3M4S'"
    msg = (
        f"uns['cytepool'] records the column {column!r} as {kind}s, but it holds {found!r}, "
        f"not an ISO {kind} such as {expected} as to_anndata writes: restore the texts "
        f"to_anndata wrote, or delete uns['cytepool'] to read the AnnData without the record"
    )
    return InputError(msg)
