"""Exceptions raised by cytepool.

Every exception cytepool raises on purpose derives from :class:`CytepoolError`, and also from
the builtin it refines, so ``except ValueError`` (or ``TypeError``, ``KeyError``,
``RuntimeError``) keeps working for callers that do not know cytepool's own types:

- :class:`InputError` (a ``ValueError``) and :class:`InputTypeError` (a ``TypeError``): an
  argument has a bad value or the wrong type;
- :class:`InputIndexError` (an ``IndexError``): a position out of range or a mask of the wrong
  length;
- :class:`UnknownIdError` (a ``KeyError``): an id, a layer or a column that is not there; its
  message prints without the quotes of a plain ``KeyError`` and ends with a "did you mean"
  hint when a known name is close;
- :class:`FormatError` (a ``ValueError``) and its subclasses: a file or store that is invalid,
  corrupt or uses a feature cytepool does not implement;
- :class:`ConstraintError` (a ``ValueError``): a value breaks a constraint of the cube, and
  :class:`SumOverflowError` (an ``OverflowError``): a sum does not fit its data type;
- :class:`StoreChangedError` (a ``RuntimeError``): a store replaced while it was being read;
- :class:`RemoteStoreError` (an ``OSError``): a remote store that could not be read (the
  server kept failing beyond the retries, timed out or could not be reached).

Operating-system conditions keep the builtin ``OSError`` family (``FileNotFoundError``,
``FileExistsError``, ``NotADirectoryError``, with their ``errno`` and path), and a missing
optional package raises ``ImportError`` naming it: these are not cytepool's to refine.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ConstraintError",
    "CytepoolError",
    "FormatError",
    "InputError",
    "InputIndexError",
    "InputTypeError",
    "NotCountsWarning",
    "RemoteStoreError",
    "StoreChangedError",
    "StoredTypeError",
    "SumOverflowError",
    "UnknownIdError",
    "UnsupportedFeatureError",
]


class CytepoolError(Exception):
    """Base class of every exception cytepool raises on purpose."""


class InputError(CytepoolError, ValueError):
    """An argument has a value cytepool cannot use (out of range, empty, repeated, ...)."""


class InputTypeError(CytepoolError, TypeError):
    """An argument has a type cytepool does not accept."""


class InputIndexError(CytepoolError, IndexError):
    """A position is out of range, or a boolean mask has the wrong length."""


class SumOverflowError(CytepoolError, OverflowError):
    """A sum does not fit the layer's data type: pooled (:func:`cytepool.from_cells`), or of a
    derived lazy layer."""


class UnknownIdError(CytepoolError, KeyError):
    """An id, layer, column or group asked for is not there.

    A ``KeyError`` whose message prints as written (a plain ``KeyError`` prints the repr of
    its message, inside quotes). With ``unknown`` and ``known``, the message ends with
    "did you mean ...?" naming the closest known names, if any is close.

    Parameters
    ----------
    message
        What was asked for and what is there.
    unknown
        The name that was not found.
    known
        The names that are there.

    Examples
    --------
    >>> from cytepool.errors import CytepoolError, UnknownIdError
    >>> error = UnknownIdError("no layer 'count'", unknown="count", known=["counts", "umis"])
    >>> print(error)
    no layer 'count'; did you mean 'counts'?
    >>> isinstance(error, KeyError) and isinstance(error, CytepoolError)
    True
    """

    def __init__(self, message: str, *, unknown: object = None, known: Iterable[Any] = ()):
        super().__init__(message + _did_you_mean(unknown, known))

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _did_you_mean(unknown: object, known: Iterable[Any]) -> str:
    """ "; did you mean 'x'?" for the known names closest to ``unknown``, or ""."""
    if not isinstance(unknown, str):
        return ""
    names = [str(name) for name in known]
    close = difflib.get_close_matches(unknown, names, n=3, cutoff=0.6)
    if not close:
        return ""
    return f"; did you mean {' or '.join(map(repr, close))}?"


class FormatError(CytepoolError, ValueError):
    """A file or store is invalid, corrupt or not what it claims to be."""


class UnsupportedFeatureError(FormatError):
    """A store uses a valid feature that cytepool does not implement."""


class StoredTypeError(FormatError, TypeError):
    """A store holds a value of a type the reader does not accept (a float16 layer, say).

    It is a FormatError, as every error about a file's content, and a TypeError, as the
    documentation of the readers promises.
    """


class StoreChangedError(CytepoolError, RuntimeError):
    """A store was replaced on disk while it was being read."""


class RemoteStoreError(CytepoolError, OSError):
    """A remote store could not be read: the server kept failing beyond the retries, timed out
    or could not be reached."""


class ConstraintError(CytepoolError, ValueError):
    """A value breaks a constraint of the cube (negative, non-finite, ...)."""


class NotCountsWarning(UserWarning):
    """Values pooled as counts are not whole numbers: the layer ``"counts"`` holds float sums.

    Log-normalized or scaled data pooled by mistake, most often. The message names the
    matrix, one value and where it is, and how to pick the raw counts instead; pass
    ``allow_float=True`` (``--allow-float`` on the command line) when such values are meant.
    """


def check_keys(what: str, data: Any, keys: set[str]) -> None:
    """Raise :class:`FormatError` unless ``data`` is a mapping with exactly ``keys``."""
    if not isinstance(data, Mapping) or set(data) != keys:
        found = sorted(data) if isinstance(data, Mapping) else type(data).__name__
        msg = f"{what}: expected an object with keys {sorted(keys)}, found {found}"
        raise FormatError(msg)


def check_string_keys(value: Any, root: str, what: str) -> None:
    """Raise :class:`InputTypeError` unless every mapping key in ``value``, at any depth (in
    mappings, lists and tuples), is a string, as the keys of a JSON object are.

    ``json.dumps`` would turn other keys into strings silently (``1`` and ``True`` into
    ``"1"`` and ``"true"``, dropping all but one of the values whose keys collide), so the
    JSON written would not be what was given. ``root`` names ``value`` in the key path of the
    message, ``what`` the keys.

    Examples
    --------
    >>> check_string_keys({"b": [{"c": 1}]}, "a", "keys")
    >>> check_string_keys({"b": [{1: "x"}]}, "a", "keys")
    Traceback (most recent call last):
    ...
    cytepool.errors.InputTypeError: keys must be strings, found 1 (int) at a['b'][0][1]; ...
    """
    stack: list[tuple[Any, str]] = [(value, root)]
    seen: set[int] = set()  # a container reached twice (or a cycle) is walked once
    while stack:
        item, where = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Mapping):
            _check_keys_of(item, where, what)
            children: Any = item.items()
        elif isinstance(item, list | tuple):
            children = enumerate(item)
        else:
            continue
        inner = [  # only containers: a long list of numbers costs one pass, and no paths
            (child, f"{where}[{key!r}]")
            for key, child in children
            if not isinstance(child, _SCALARS) and isinstance(child, Mapping | list | tuple)
        ]
        stack.extend(reversed(inner))  # the first in order is met first


_SCALARS = (str, int, float, type(None))  # told apart at once (a Mapping check is slow)


def _check_keys_of(mapping: Mapping[Any, Any], where: str, what: str) -> None:
    for key in mapping:
        if not isinstance(key, str):
            msg = (
                f"{what} must be strings, found {key!r} ({type(key).__name__}) at "
                f"{where}[{key!r}]; turn the key into a string (JSON object keys are strings)"
            )
            raise InputTypeError(msg)
