"""Strict JSON and the generic checks of Zarr metadata fields, below the codecs and the records.

:func:`loads` and :func:`dumps` read and write metadata documents (no repeated keys, no NaN or
Infinity tokens, at most MAX_METADATA_BYTES); :func:`fail` and :func:`unsupported` make the
errors every parser raises, and :func:`named_configuration` / :func:`check_config_keys` check
the ``{"name": ..., "configuration": {...}}`` objects of codecs, chunk grids and key encodings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from cytepool.errors import FormatError, InputError, UnsupportedFeatureError

__all__ = [
    "MAX_DIMENSION",
    "MAX_METADATA_BYTES",
    "METADATA_FILE",
    "as_object",
    "check_config_keys",
    "check_extra_fields",
    "dumps",
    "fail",
    "is_int",
    "loads",
    "named_configuration",
    "unsupported",
]

METADATA_FILE = "zarr.json"
MAX_METADATA_BYTES = 64 * 2**20
"""The largest metadata document (zarr.json) a reader accepts, in bytes: 64 MiB."""
MAX_DIMENSION = 2**63 - 1

# ---------------------------------------------------------------------------------------------
# Strict JSON


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            msg = f"repeated key {key!r} in a JSON object"
            raise InputError(msg)
        result[key] = value
    return result


def _no_constants(token: str) -> Any:
    msg = f"the JSON token {token} is not valid JSON (RFC 8259)"
    raise InputError(msg)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        msg = f"the JSON number {text} does not fit a 64-bit float"
        raise InputError(msg)
    return value


def loads(text: str | bytes | bytearray, where: str) -> Any:
    """Parse strict JSON: no repeated keys, no NaN/Infinity tokens, finite numbers only.

    Parameters
    ----------
    text
        The JSON text (bytes are decoded as UTF-8, without a byte order mark).
    where
        The file the text came from, for error messages.

    Returns
    -------
    The parsed value.

    Raises
    ------
    FormatError
        If the text is not strict JSON.

    Examples
    --------
    >>> loads('{"a": [1, 2.5]}', "x.json")
    {'a': [1, 2.5]}
    >>> loads('{"a": 1, "a": 2}', "x.json")
    Traceback (most recent call last):
    ...
    cytepool.errors.FormatError: x.json is not valid JSON: repeated key 'a' in a JSON object
    """
    try:
        if not isinstance(text, str):
            text = text.decode("utf-8")
        return json.loads(
            text,
            object_pairs_hook=_no_repeated_keys,
            parse_constant=_no_constants,
            parse_float=_finite_float,
        )
    except (ValueError, RecursionError) as error:
        msg = f"{where} is not valid JSON: {error}"
        raise FormatError(msg) from error


def dumps(document: Mapping[str, Any]) -> str:
    """Serialise a metadata document as zarr-python does (2-space indent, ASCII).

    Parameters
    ----------
    document
        A JSON-serialisable mapping.

    Returns
    -------
    The JSON text.

    Raises
    ------
    ValueError
        If the document holds a non-finite float.
    TypeError
        If the document holds something JSON cannot represent.

    Examples
    --------
    >>> print(dumps({"zarr_format": 3, "node_type": "group"}))
    {
      "zarr_format": 3,
      "node_type": "group"
    }
    """
    return json.dumps(document, indent=2, ensure_ascii=True, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# Field checks


def fail(where: str, problem: str) -> FormatError:
    return FormatError(f"invalid Zarr metadata {where}: {problem}")


def unsupported(where: str, problem: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(f"unsupported Zarr feature in {where}: {problem}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_object(value: Any, where: str, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(where, f"{name} must be a JSON object, not {value!r}")
    return value


def check_extra_fields(doc: Mapping[str, Any], known: set[str], where: str, name: str) -> None:
    for key, value in doc.items():
        if key in known:
            continue
        if isinstance(value, dict) and value.get("must_understand") is False:
            continue
        problem = (
            f"{name} has the field {key!r}, which the Zarr v3 specification does not define"
            ' (an extension field needs an object value with "must_understand": false)'
        )
        raise fail(where, problem)


def named_configuration(value: Any, where: str, name: str) -> tuple[str, dict[str, Any] | None]:
    """Split a ``{"name": ..., "configuration": {...}}`` object, checking its fields.

    Parameters
    ----------
    value
        The JSON value.
    where
        The file, for error messages.
    name
        The field holding the value, for error messages.

    Returns
    -------
    The name and the configuration (None when absent).

    Raises
    ------
    FormatError
        If the object is malformed.

    Examples
    --------
    >>> named_configuration({"name": "gzip", "configuration": {"level": 1}}, "zarr.json", "codec")
    ('gzip', {'level': 1})
    """
    doc = as_object(value, where, name)
    if not isinstance(doc.get("name"), str):
        raise fail(where, f'{name} needs a string "name", found {doc!r}')
    for key in doc:
        if key not in ("name", "configuration", "must_understand"):
            raise fail(where, f"{name} {doc['name']!r} has the unknown field {key!r}")
    if "must_understand" in doc and not isinstance(doc["must_understand"], bool):
        raise fail(where, f'{name} {doc["name"]!r} has a non-boolean "must_understand"')
    config = doc.get("configuration")
    if "configuration" in doc:
        config = as_object(config, where, f"the configuration of {name} {doc['name']!r}")
    return doc["name"], config


def check_config_keys(
    config: Mapping[str, Any] | None,
    required: Sequence[str],
    optional: Sequence[str],
    where: str,
    name: str,
) -> dict[str, Any]:
    """Check that a configuration has the required keys and no others; return it as a dict.

    Parameters
    ----------
    config
        The configuration (None when absent).
    required, optional
        The keys it must and may have.
    where
        The file, for error messages.
    name
        What the configuration belongs to, for error messages.

    Returns
    -------
    The configuration, ``{}`` when absent.

    Raises
    ------
    FormatError
        If a key is missing or unknown.

    Examples
    --------
    >>> check_config_keys({"level": 1}, ["level"], [], "zarr.json", "gzip")
    {'level': 1}
    """
    config = dict(config or {})
    for key in required:
        if key not in config:
            raise fail(where, f"the configuration of {name} lacks {key!r}")
    for key in config:
        if key not in required and key not in optional:
            raise fail(where, f"the configuration of {name} has the unknown field {key!r}")
    return config


def json_copy(value: Any) -> Any:
    """A copy of parsed JSON (dicts and lists copied, other values shared: they are immutable),
    however deep it nests: a document the parser took (a few thousand levels) is copied
    without recursion when it nests deeper than Python's recursion limit allows.

    Examples
    --------
    >>> deep = []
    >>> for _ in range(5000):
    ...     deep = [deep]
    >>> copied = json_copy({"x": deep})
    >>> inner, depth = copied["x"], 0
    >>> while inner:  # (comparing with ``==`` would recurse)
    ...     inner, depth = inner[0], depth + 1
    >>> depth, copied["x"] is not deep
    (5000, True)
    """
    try:
        return _copied(value)
    except RecursionError:
        return _copied_deep(value)


def _copied(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copied(item) for item in value]
    return value


def _copied_deep(value: Any) -> Any:
    """:func:`json_copy` with a stack of its own instead of recursion."""
    if not isinstance(value, dict | list):
        return value
    top: dict[Any, Any] | list[Any] = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, top)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in items:
            if isinstance(item, dict | list):
                child: Any = {} if isinstance(item, dict) else []
                stack.append((item, child))  # filled later, already in its place
                item = child
            if isinstance(target, dict):
                target[key] = item
            else:
                target.append(item)
    return top
