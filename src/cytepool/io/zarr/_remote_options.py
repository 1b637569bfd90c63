"""The ``storage_options`` of a remote store, checked and sorted before obstore sees any.

Every value is checked up front, for its type and its range, so that a wrong one is an
:class:`~cytepool.errors.InputError` naming the option, what was found and what is expected,
before any client is made or any request is sent (obstore would raise a TypeError, an
OverflowError or its own GenericError, none naming the option, or panic). Durations
(``timeout``, ``connect_timeout``, ``pool_idle_timeout``, ``retry_timeout``) may be given as
obstore's duration strings (``"30s"``, ``"2min 30s"``, ``"500ms"``), as a number of seconds or
as a :class:`datetime.timedelta`; each is converted exactly (to the nanosecond) to the form
obstore takes. The values of credentials never appear in messages.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cytepool.errors import InputError, InputTypeError

__all__ = ["DEFAULT_IN_FLIGHT", "Options", "split_options"]

DEFAULT_IN_FLIGHT = 32
"""Requests of one read in flight at a time, unless ``storage_options["max_in_flight"]``.

32 lets every golden cube file (formats 1.0 to 1.2) open without consolidated metadata in at
most four rounds (up to six with 16) and a whole layer of a cube stream in fewer rounds;
zarr-python's default is 10 (``async.concurrency``), fsspec gathers 128 at a time, and object
stores serve thousands of requests a second per prefix. Memory: a read keeps at most
``2 * max_in_flight`` chunks fetched and not yet decoded, each refused beyond the most bytes a
valid encoding of it takes (about 1 MiB for a cube's chunks, so about 64 MiB; 64 times the
chunk bound of an array of larger chunks: lower ``max_in_flight`` for those), plus, while a
file without consolidated metadata is opened, ``max_in_flight`` guesses of at most 1 MiB each.
"""

_MOST_IN_FLIGHT = 1024
_MOST_RETRIES = 2**31 - 1
_NANOS = 1_000_000_000


def _timedelta_nanos(value: datetime.timedelta) -> int:
    """A timedelta in nanoseconds, exactly."""
    return (value.days * 86_400 + value.seconds) * _NANOS + value.microseconds * 1_000


_MOST_NANOS = _timedelta_nanos(datetime.timedelta.max)
"""The longest duration: datetime.timedelta.max, in nanoseconds."""
_CONFIG = {
    "s3": frozenset(
        {
            "endpoint",
            "region",
            "access_key_id",
            "secret_access_key",
            "session_token",
            "virtual_hosted_style_request",
            "request_payer",
            "skip_signature",
            "unsigned_payload",
            "checksum_algorithm",
        }
    ),
    "gs": frozenset(
        {
            "service_account",
            "service_account_key",
            "application_credentials",
            "bearer_token",
            "base_url",
            "skip_signature",
        }
    ),
    "az": frozenset(
        {
            "account_name",
            "account_key",
            "sas_key",
            "token",
            "client_id",
            "client_secret",
            "tenant_id",
            "use_emulator",
            "endpoint",
            "container_name",
            "skip_signature",
            "use_fabric_endpoint",
        }
    ),
}
_PREFIXES = {"s3": "aws_", "gs": "google_", "az": "azure_"}
_FLAGS = frozenset({"allow_http", "allow_invalid_certificates", "http1_only", "http2_only"})
_TEXTS = frozenset({"default_content_type", "user_agent"})
_SECRET_TEXTS = frozenset({"proxy_url"})  # may hold a password: never shown
_DURATIONS = {"connect_timeout": False, "timeout": False, "pool_idle_timeout": True}
"""The client options that are durations, and whether zero is allowed."""
_CLIENT = (
    _FLAGS
    | _TEXTS
    | _SECRET_TEXTS
    | set(_DURATIONS)
    | {
        "default_headers",
        "pool_max_idle_per_host",
    }
)
_OWN = frozenset({"max_in_flight", "max_retries", "retry_timeout", "anonymous"})
_CLIENT_DEFAULTS = {"connect_timeout": "5s", "timeout": "120s"}
_DEFAULT_RETRIES = 4
_DEFAULT_RETRY_SECONDS = 30
_UNITS = {
    **dict.fromkeys(("nsec", "ns", "nanos", "nanosecond", "nanoseconds"), 1),
    **dict.fromkeys(("usec", "us", "µs", "micros", "microsecond", "microseconds"), 1_000),
    **dict.fromkeys(("msec", "ms", "millis", "millisecond", "milliseconds"), 1_000_000),
    **dict.fromkeys(("seconds", "second", "secs", "sec", "s"), _NANOS),
    **dict.fromkeys(("minutes", "minute", "mins", "min", "m"), 60 * _NANOS),
    **dict.fromkeys(("hours", "hour", "hrs", "hr", "h"), 3_600 * _NANOS),
    **dict.fromkeys(("days", "day", "d"), 86_400 * _NANOS),
    **dict.fromkeys(("weeks", "week", "w"), 604_800 * _NANOS),
    **dict.fromkeys(("months", "month", "M"), 2_630_016 * _NANOS),  # 30.44 days
    **dict.fromkeys(("years", "year", "y"), 31_557_600 * _NANOS),  # 365.25 days
}
_SPAN = re.compile(r"\s*(\d+)\s*([^\d\s]+)")
_DURATION_FORMS = (
    'a duration string such as "30s", "2min 30s" or "500ms", a number of seconds or a '
    "datetime.timedelta"
)


@dataclass(frozen=True)
class Options:
    """``storage_options`` split into obstore's config, client options and retries."""

    config: dict[str, Any]
    client: dict[str, Any]
    retry: dict[str, Any]
    max_in_flight: int


def split_options(scheme: str, options: Mapping[str, Any], url: str) -> Options:
    """Check ``storage_options`` and sort them, before obstore sees any (a client option
    given to obstore as a config key makes it panic).

    Parameters
    ----------
    scheme : str
        The scheme of the store's URL, in lower case (``"https"``, ``"s3"``, ...).
    options : Mapping
        The ``storage_options`` given.
    url : str
        The store's URL, without any password, for messages.

    Returns
    -------
    Options
        What obstore's store takes: its ``config``, ``client_options`` and ``retry_config``,
        and the most requests a handle has in flight.

    Raises
    ------
    InputTypeError
        If ``options`` is not a mapping, or a key is not a string.
    InputError
        If a key is unknown for the scheme, or a value has a type or a value obstore cannot
        use (the message names the option, what was found and what is expected).

    Examples
    --------
    >>> split_options("https", {"timeout": 90}, "https://example.org/x").client["timeout"]
    '90s'
    >>> split_options("s3", {"retry_timeout": "1min"}, "s3://b/x").retry["retry_timeout"]
    datetime.timedelta(seconds=60)
    """
    if not isinstance(options, Mapping):
        msg = f"storage_options must be a mapping, not {type(options).__name__}"
        raise InputTypeError(msg)
    config: dict[str, Any] = {}
    client: dict[str, Any] = dict(_CLIENT_DEFAULTS)
    if scheme == "http":  # the URL asks for plain HTTP
        client["allow_http"] = True
    known = _CONFIG.get(scheme, frozenset())
    for key, value in options.items():
        if not isinstance(key, str):
            msg = f"storage_options keys must be strings, found {key!r}"
            raise InputTypeError(msg)
        if key in _CLIENT:
            client[key] = _client_value(key, value, url)
        elif key in known or (scheme in _PREFIXES and key.startswith(_PREFIXES[scheme])):
            config[key] = _config_value(key, value, url)
        elif key not in _OWN:
            allowed = sorted(known | _CLIENT | _OWN)
            msg = (
                f"storage_options has the unknown key {key!r} for a {scheme}:// store {url}; "
                f"the keys known are {', '.join(allowed)}"
            )
            raise InputError(msg)
    if _anonymous(options, url):
        if scheme not in _CONFIG:
            msg = f"storage_options 'anonymous' applies to s3, gs and az stores, not {url}"
            raise InputError(msg)
        config["skip_signature"] = True
    return Options(config, client, _retry(options, url), _in_flight(options, url))


def _wrong(key: str, url: str, expected: str, found: str) -> InputError:
    """The error of a value of ``storage_options[key]`` that cannot be used."""
    msg = (
        f"storage_options[{key!r}] for {url} must be {expected}, found {found}: change it, or "
        "leave it out for the default"
    )
    return InputError(msg)


def _kind(value: Any) -> str:
    """What a value is, without showing it (it may be a credential)."""
    return "None" if value is None else f"a value of type {type(value).__name__}"


def _config_value(key: str, value: Any, url: str) -> str | bool:
    """A value of obstore's configuration for the scheme: a string, or True or False."""
    if isinstance(value, str | bool):
        return value
    raise _wrong(key, url, "a string (or True or False for a flag)", _kind(value))


def _client_value(key: str, value: Any, url: str) -> Any:
    """A client option, in the form obstore takes."""
    if key in _DURATIONS:
        return _duration_text(key, value, url, zero=_DURATIONS[key])
    if key in _FLAGS:
        return _flag(key, value, url)
    if key == "pool_max_idle_per_host":
        return str(_count(key, value, url, most=2**32 - 1, text=True))
    if key == "default_headers":
        return _headers(value, url)
    if not isinstance(value, str):
        shown = _kind(value) if key in _SECRET_TEXTS else repr(value)
        raise _wrong(key, url, "a string", shown)
    return value


def _flag(key: str, value: Any, url: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _wrong(key, url, "True or False", repr(value))


def _headers(value: Any, url: str) -> dict[str, str | bytes]:
    """``default_headers``: header names and values (never shown: they may be credentials)."""
    fits = isinstance(value, Mapping) and all(
        isinstance(name, str) and isinstance(text, str | bytes) for name, text in value.items()
    )
    if not fits:
        key, expected = "default_headers", "a mapping of header names to values, all strings"
        found = "a mapping holding another type" if isinstance(value, Mapping) else _kind(value)
        raise _wrong(key, url, expected + " (values may be bytes)", found)
    return dict(value)


def _count(key: str, value: Any, url: str, *, most: int, least: int = 0, text: bool = False) -> int:
    """An integer from ``least`` to ``most`` (or, with ``text``, a string of its digits)."""
    number = value
    if text and isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int) or not least <= number <= most:
        raise _wrong(key, url, f"an integer from {least} to {most}", repr(value))
    return number


def _anonymous(options: Mapping[str, Any], url: str) -> bool:
    key = "anonymous"
    value = options.get(key, False)
    if not isinstance(value, bool):
        raise _wrong(key, url, "True or False", repr(value))
    return value


def _nanoseconds(key: str, value: Any, url: str, *, zero: bool) -> int:
    """A duration in whole nanoseconds, from any of the forms accepted, checked."""
    if isinstance(value, str):
        nanos = _parse_duration(key, value, url)
    elif isinstance(value, datetime.timedelta):
        nanos = _timedelta_nanos(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            expected = 'a finite number of seconds, a duration string such as "30s" or a timedelta'
            raise _wrong(key, url, expected, repr(value))
        nanos = round(Fraction(value) * _NANOS)  # exact, to the nearest nanosecond
    else:
        raise _wrong(key, url, _DURATION_FORMS, _kind(value))
    if nanos < (0 if zero else 1) or nanos > _MOST_NANOS:
        sign = "non-negative" if zero else "positive"
        expected = f"a {sign} duration of at most datetime.timedelta.max (999999999 days)"
        raise _wrong(key, url, expected, repr(value))
    return nanos


def _parse_duration(key: str, text: str, url: str) -> int:
    """The nanoseconds of a duration string: numbers each followed by a unit."""
    nanos, end = 0, 0
    for match in _SPAN.finditer(text):
        if match.start() != end or match.group(2) not in _UNITS:
            break
        nanos += int(match.group(1)) * _UNITS[match.group(2)]
        end = match.end()
    if end == 0 or text[end:].strip():
        expected = _DURATION_FORMS + " (units: ns, us, ms, s, min, h, d, w)"
        raise _wrong(key, url, expected, repr(text))
    return nanos


def _duration_text(key: str, value: Any, url: str, *, zero: bool) -> str:
    """A duration as the string obstore takes (seconds and nanoseconds: exact)."""
    seconds, nanos = divmod(_nanoseconds(key, value, url, zero=zero), _NANOS)
    return f"{seconds}s" if nanos == 0 else f"{seconds}s {nanos}ns"


def _retry(options: Mapping[str, Any], url: str) -> dict[str, Any]:
    retries = _count(
        "max_retries", options.get("max_retries", _DEFAULT_RETRIES), url, most=_MOST_RETRIES
    )
    given = options.get("retry_timeout", _DEFAULT_RETRY_SECONDS)
    nanos = _nanoseconds("retry_timeout", given, url, zero=True)
    return {
        "max_retries": retries,
        "retry_timeout": datetime.timedelta(microseconds=nanos // 1_000),
        "backoff": {
            "init_backoff": datetime.timedelta(milliseconds=100),
            "max_backoff": datetime.timedelta(seconds=5),
            "base": 2,
        },
    }


def _in_flight(options: Mapping[str, Any], url: str) -> int:
    value = options.get("max_in_flight", DEFAULT_IN_FLIGHT)
    return _count("max_in_flight", value, url, least=1, most=_MOST_IN_FLIGHT)
