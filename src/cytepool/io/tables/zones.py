"""One name for a time zone, whatever the library that made it.

A table stores a datetime column's zone by name (the ``time_zone`` of its ``cytepool-dtype``)
and a digest names it in the column's type, so the name must be one that pandas, polars and
pyarrow all read, and the same for the same zone from any of them: pandas calls the fixed
offset ``datetime.timezone(timedelta(hours=5, minutes=30))`` ``UTC+05:30``, pyarrow
``+05:30``; pytz and dateutil zones print as ``<DstTzInfo 'Europe/Berlin' ...>`` or
``tzfile('/usr/share/zoneinfo/Europe/Berlin')``, which no reader parses. A zone is named by
its tz database name (``Europe/Berlin``, ``UTC``) or, for a fixed offset, ``+HH:MM``; a zone
with no such name is an InputError that says how to give one.

Examples
--------
>>> import datetime as dt, zoneinfo
>>> zone_name(zoneinfo.ZoneInfo("Europe/Berlin")), zone_name(dt.timezone.utc)
('Europe/Berlin', 'UTC')
>>> zone_name(dt.timezone(dt.timedelta(hours=5, minutes=30))), zone_name("UTC-03:00")
('+05:30', '-03:00')
>>> zone_name(dt.timezone(dt.timedelta(minutes=5, seconds=30)))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
cytepool.errors.InputError: the time zone UTC+00:05:30 is an offset of seconds, which ...
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from typing import Any

from cytepool.errors import InputError

__all__ = ["zone_name"]

_UTC_OFFSET = re.compile(r"UTC([+-]\d\d:\d\d)")
_ZONEINFO_PATH = re.compile(r".*/zoneinfo/(.+)")


def zone_name(zone: Any) -> str:
    """The name of the time zone ``zone`` (a name, or a zone object of the standard library,
    pandas, pytz or dateutil) that every backend reads (InputError if it has none)."""
    if isinstance(zone, str):
        offset = _UTC_OFFSET.fullmatch(zone)
        return zone if offset is None else offset.group(1)
    if isinstance(zone, zoneinfo.ZoneInfo):
        return zone.key
    named = getattr(zone, "zone", None)  # pytz: the tz database name (None for an offset)
    if isinstance(named, str):
        return named
    filename = getattr(zone, "_filename", None)  # dateutil's tzfile: the file it was read from
    if isinstance(filename, str) and (path := _ZONEINFO_PATH.fullmatch(filename)):
        return _known(path.group(1), zone)
    if type(zone).__name__ == "tzutc":  # dateutil's UTC
        return "UTC"
    return _offset_name(zone)


def _in_tz_database(name: str) -> bool:
    """Whether the standard library's :mod:`zoneinfo` knows the zone ``name``."""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def _offset_name(zone: Any) -> str:
    """``UTC`` or ``+HH:MM`` for a zone of one fixed offset (InputError for any other)."""
    try:
        fixed = zone.utcoffset(None)
    except (TypeError, ValueError, AttributeError):
        fixed = None
    if not isinstance(fixed, dt.timedelta):
        msg = (
            f"the time zone {zone!r} has no name that pandas, polars and pyarrow share; give "
            "the times a zone of the tz database, such as zoneinfo.ZoneInfo('Europe/Berlin')"
        )
        raise InputError(msg)
    if fixed % dt.timedelta(minutes=1):
        msg = (
            f"the time zone {zone} is an offset of seconds, which pandas, polars and pyarrow "
            "do not hold (their offsets are whole minutes); convert the times to another "
            "zone, such as 'UTC'"
        )
        raise InputError(msg)
    if not fixed and (zone is dt.UTC or str(zone) in ("UTC", "tzutc()")):
        return "UTC"
    minutes = int(fixed.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _known(name: str, zone: Any) -> str:
    """``name`` if the tz database knows it, else the InputError of a zone with no name."""
    return name if _in_tz_database(name) else _offset_name(zone)
