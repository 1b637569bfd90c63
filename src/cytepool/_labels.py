"""Labels to ids: the one rule :func:`cytepool.from_cells` and :mod:`cytepool.io.anndata` share.

An id is the text (``str``) of its labels, so the labels of a column and their texts must
correspond one to one: two labels that differ but read the same (``1`` and ``"1"``), or that
are equal but read differently (``1`` and ``1.0``, ``0.0`` and ``-0.0``), are an error rather
than a silent merge or split. Ids are sorted by code point, whatever the order of the cells.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from cytepool.errors import InputError

__all__ = ["factorize"]

# pandas' inferred types of object arrays whose equal values always read the same
_UNAMBIGUOUS = frozenset({"string", "integer", "boolean", "empty"})


def factorize(labels: Any, what: str) -> tuple[np.ndarray[Any, Any], list[str]]:
    """Codes (int64, one per cell) into the sorted ids of the labels that occur.

    ``what`` names the labels in messages (``"sample_labels"``, ``"obs column 'donor'"``).
    Raises ValueError for a missing label or labels that do not match their texts one to one.
    """
    codes, values = _raw_codes(labels, what)
    if (codes < 0).any():
        n = int(np.count_nonzero(codes < 0))
        msg = (
            f"{what}: {n} of {codes.size} cells have a missing label (None, NaN or NA); "
            f"expected a label for every cell (drop those cells first)"
        )
        raise InputError(msg)
    used = np.bincount(codes, minlength=len(values)) > 0
    values = [value for value, keep in zip(values, used, strict=True) if keep]
    codes = (np.cumsum(used) - 1)[codes]
    names = np.array(_texts(values, what), dtype=object)
    order = np.argsort(names, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[codes], [str(name) for name in names[order]]


def _texts(values: Sequence[Any], what: str) -> list[str]:
    """The text of each distinct label, checked to be one to one with the labels."""
    texts = [str(value) for value in values]
    by_text: dict[str, Any] = {}
    by_value: dict[Any, tuple[Any, str]] = {}  # -0.0 is 0.0 here, as 1.0 is 1 and True
    for value, text in zip(values, texts, strict=True):
        other = by_text.setdefault(text, value)
        if other is not value and not _equal(other, value):
            msg = (
                f"{what}: the labels {other!r} ({type(other).__name__}) and {value!r} "
                f"({type(value).__name__}) differ but read the same, {text!r}; an id is the "
                f"text of its labels: make them one type first (e.g. .astype(str))"
            )
            raise InputError(msg)
        try:
            other, other_text = by_value.setdefault(value, (value, text))
        except TypeError:  # unhashable: equal only to itself here
            continue
        if other_text != text:
            raise _read_differently(what, (other, value), (other_text, text))
    return texts


def _read_differently(what: str, values: tuple[Any, Any], texts: tuple[str, str]) -> ValueError:
    msg = (
        f"{what}: the labels {values[0]!r} and {values[1]!r} are equal but read differently "
        f"({texts[0]!r} and {texts[1]!r}); an id is the text of its labels: make them one "
        f"type first (e.g. .astype(int) or .astype(str))"
    )
    return InputError(msg)


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _raw_codes(labels: Any, what: str) -> tuple[np.ndarray[Any, Any], list[Any]]:
    """Codes (-1: missing) into the distinct labels, from a Categorical or any array-like."""
    # asked of the type: a pandas Series would look the names up in its index (slow)
    if hasattr(type(labels), "compute") and hasattr(type(labels), "dask"):
        labels = labels.compute()
    categorical = _categorical(labels)
    if categorical is not None:
        return np.asarray(categorical.codes, dtype=np.int64), list(categorical.categories)
    # a list or tuple as it is: numpy would turn [1, "1"] into ["1", "1"], [True, 1] into [1, 1]
    array = np.asarray(labels) if hasattr(labels, "dtype") else _object_array(labels)
    if array.ndim != 1:
        msg = f"{what}: expected a 1-D array-like of labels, found shape {array.shape}"
        raise InputError(msg)
    missing = _missing(array)
    codes = np.full(array.size, -1, dtype=np.int64)
    present = array[~missing]
    if array.dtype.kind == "O":
        codes[~missing], values = _object_codes(present)
        return codes, values
    if array.dtype.kind == "f":  # np.unique would keep one of 0.0 and -0.0
        signs = np.signbit(present[present == 0])
        if signs.any() and not signs.all():
            raise _read_differently(what, (0.0, -0.0), ("0.0", "-0.0"))
    distinct, inverse = np.unique(present, return_inverse=True)
    codes[~missing] = inverse.reshape(-1)
    return codes, list(distinct)


def _object_codes(present: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], list[Any]]:
    """Codes into the distinct labels of an object array: by type and value, so that labels
    that are equal yet of different types (``1``, ``1.0``) stay apart to be checked."""
    pd = sys.modules.get("pandas")
    if pd is not None and pd.api.types.infer_dtype(present, skipna=False) in _UNAMBIGUOUS:
        codes, uniques = pd.factorize(present)
        return np.asarray(codes, dtype=np.int64), list(uniques)
    index: dict[tuple[type, Any], int] = {}
    keys = [(type(v), v) for v in present.tolist()]
    codes = np.array([index.setdefault(key, len(index)) for key in keys], dtype=np.int64)
    return codes, [value for _, value in index]


def _object_array(labels: Any) -> np.ndarray[Any, Any]:
    values = list(labels)
    shaped = np.asarray(values)
    if shaped.ndim != 1:  # nested sequences: refused by the caller
        return shaped
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _categorical(labels: Any) -> Any:
    """The pandas Categorical behind ``labels``, or None (pandas is not imported for this)."""
    pd = sys.modules.get("pandas")
    if pd is None:
        return None
    if isinstance(labels, pd.Series | pd.Index):
        labels = labels.array
    return labels if isinstance(labels, pd.Categorical) else None


def _missing(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A mask of missing labels: None, NaN, NaT and pandas' NA."""
    kind = array.dtype.kind
    if kind == "f":
        return np.isnan(array)
    if kind in "mM":
        return np.isnat(array)
    if kind != "O":
        return np.zeros(array.shape, dtype=bool)
    pd = sys.modules.get("pandas")
    if pd is not None:
        return np.asarray(pd.isna(array), dtype=bool)
    return np.array([v is None or (isinstance(v, float) and v != v) for v in array], bool)
