"""Exceptions raised by cytepool.

Every exception also subclasses the builtin it refines, so ``except ValueError`` keeps
working for callers that do not know cytepool's own types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ConstraintError",
    "CytepoolError",
    "FormatError",
    "NotCountsWarning",
    "StoreChangedError",
    "StoredTypeError",
    "UnsupportedFeatureError",
]


class CytepoolError(Exception):
    """Base class of every exception cytepool raises on purpose."""


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


class ConstraintError(CytepoolError, ValueError):
    """A value breaks a constraint of the cube (negative, non-finite, ...)."""


class NotCountsWarning(UserWarning):
    """Values pooled as counts are not whole numbers: the layer ``"counts"`` holds float sums.

    Log-normalized or scaled data pooled by mistake, most often. The message names the
    matrix, one value and where it is, and how to pick the raw counts instead; pass
    ``allow_float=True`` (``--allow-float`` on the command line) when such values are meant.
    """


def _check_keys(what: str, data: Any, keys: set[str]) -> None:
    """Raise :class:`FormatError` unless ``data`` is a mapping with exactly ``keys``."""
    if not isinstance(data, Mapping) or set(data) != keys:
        found = sorted(data) if isinstance(data, Mapping) else type(data).__name__
        msg = f"{what}: expected an object with keys {sorted(keys)}, found {found}"
        raise FormatError(msg)
