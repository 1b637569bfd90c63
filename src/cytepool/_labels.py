"""Labels to ids: the one rule :func:`cytepool.from_cells` and :mod:`cytepool.io.anndata` share.

An id is the text (``str``) of its labels, so the labels of a column and their texts must
correspond one to one: two labels that differ but read the same (``1`` and ``"1"``), or that
are equal but read differently (``1`` and ``1.0``, ``0.0`` and ``-0.0``), are an error rather
than a silent merge or split; labels that are equal and read the same (``1.0`` and
``numpy.float32(1.0)``) are one id. Equal means equal as numbers: numpy finds ``0.1`` equal
to ``numpy.float32(0.1)`` (compared in float32), which is not. Ids are sorted by code point,
whatever the order of the cells.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from cytepool._arrays import refuse_masked
from cytepool._utf8 import is_unicode, not_unicode
from cytepool._words import brief
from cytepool.errors import InputError, InputTypeError

__all__ = ["check_one_to_one", "factorize", "factorize_labels"]

# pandas' inferred types of object arrays whose equal values always read the same
_UNAMBIGUOUS = frozenset({"string", "integer", "boolean", "empty"})
# types whose equal values (of the one type) always read the same
_PLAIN = frozenset(
    {str, bytes, int, bool, np.str_, np.bytes_, np.bool_}
    | {np.dtype(code).type for code in np.typecodes["AllInteger"]}
)
# float types: their equal values read the same but for zeros (0.0 and -0.0)
_FLOATS = frozenset({float} | {np.dtype(code).type for code in np.typecodes["Float"]})


def factorize(labels: Any, what: str) -> tuple[np.ndarray[Any, Any], list[str]]:
    """Codes (int64, one per cell) into the sorted ids of the labels that occur.

    ``what`` names the labels in messages (``"sample_labels"``, ``"obs column 'donor'"``).
    Raises ValueError for a missing label, labels that are not 1-D or that do not match their
    texts one to one, and TypeError for a label that cannot be hashed.
    """
    codes, texts, _ = factorize_labels(labels, what)
    return codes, texts


def factorize_labels(labels: Any, what: str) -> tuple[np.ndarray[Any, Any], list[str], list[Any]]:
    """As :func:`factorize`, with a label of each id (the first of its labels, as it is): to
    check ids made apart, such as those of several files, with :func:`check_one_to_one`."""
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
    # labels of one text are equal (checked): one id, such as 1.0 and numpy.float32(1.0)
    names = np.array(_texts(values, what), dtype=object)
    ids, first, rank = np.unique(names, return_index=True, return_inverse=True)
    texts = [str(name) for name in ids]
    codes = rank.reshape(-1).astype(np.int64)[codes]
    if not is_unicode("".join(texts)):  # every text at once: one call in C
        cells = np.unique(codes, return_index=True)[1]  # each id's first cell
        raise not_unicode(texts, what, cells, "cell")
    return codes, texts, [values[i] for i in first.tolist()]


def check_one_to_one(
    values: Sequence[Any], texts: Sequence[str], what: str, sources: Sequence[str], kind: str
) -> None:
    """Raise InputError unless ``values`` and their ``texts`` (the labels and ids of several
    sources, such as files) match one to one, as :func:`factorize` requires of the labels of
    one: the message names the two labels that do not and their ``sources`` (one per label,
    each a ``kind``, such as ``"file"``)."""
    pair = _mismatch(values, texts)
    if pair is not None:
        i, j = pair
        where = (f" in {sources[i]}", f" in {sources[j]}")
        raise _mismatch_error(what, values, texts, pair, where, f"in every {kind}")


def _texts(values: Sequence[Any], what: str) -> list[str]:
    """The text of each distinct label, checked to be one to one with the labels."""
    texts = [str(value) for value in values]
    pair = _mismatch(values, texts)
    if pair is not None:
        raise _mismatch_error(what, values, texts, pair)
    return texts


def _mismatch(values: Sequence[Any], texts: Sequence[str]) -> tuple[int, int] | None:
    """The first two labels (their positions) that do not match their texts one to one:
    that differ but read the same, or that are equal but read differently; else None."""
    by_text: dict[str, int] = {}
    by_value: dict[Any, int] = {}  # -0.0 is 0.0 here, as 1.0 is 1 and True
    for i, (value, text) in enumerate(zip(values, texts, strict=True)):
        j = by_text.setdefault(text, i)
        if values[j] is not value and not _equal(values[j], value):
            return j, i
        try:
            j = by_value.setdefault(value, i)
        except TypeError:  # unhashable: equal only to itself here
            continue
        if texts[j] != text:
            return j, i
    return None


def _mismatch_error(
    what: str,
    values: Sequence[Any],
    texts: Sequence[str],
    pair: tuple[int, int],
    where: tuple[str, str] = ("", ""),
    advice: str = "",
) -> InputError:
    """The error for the labels at ``pair`` (see :func:`_mismatch`), placed by ``where``."""
    i, j = pair
    if texts[i] == texts[j]:
        return _read_the_same(what, (values[i], values[j]), texts[i], where, advice)
    return _read_differently(what, (values[i], values[j]), (texts[i], texts[j]), where, advice)


def _read_the_same(
    what: str,
    values: tuple[Any, Any],
    text: str,
    where: tuple[str, str] = ("", ""),
    advice: str = "",
) -> InputError:
    one, other = values
    msg = (
        f"{what}: the labels {one!r} ({type(one).__name__}){where[0]} and {other!r} "
        f"({type(other).__name__}){where[1]} differ but read the same, {text!r}; an id is the "
        f"text of its labels: make them one type first{_in(advice)} (e.g. .astype(str))"
    )
    return InputError(msg)


def _read_differently(
    what: str,
    values: tuple[Any, Any],
    texts: tuple[str, str],
    where: tuple[str, str] = ("", ""),
    advice: str = "",
) -> InputError:
    msg = (
        f"{what}: the labels {values[0]!r}{where[0]} and {values[1]!r}{where[1]} "
        f"are equal but read differently ({texts[0]!r} and {texts[1]!r}); an id is the text "
        f"of its labels: make them one type first{_in(advice)} (e.g. .astype(int) or "
        f".astype(str))"
    )
    return InputError(msg)


def _in(advice: str) -> str:
    return f" {advice}" if advice else ""


def _equal(a: Any, b: Any) -> bool:
    """Whether two labels are equal, exactly: numpy compares ``0.1 == numpy.float32(0.1)``
    in float32 (True), so its numbers are compared as Python's."""
    try:
        return bool(_exact(a) == _exact(b))
    except (TypeError, ValueError):
        return False


def _exact(value: Any) -> Any:
    """A numpy number as the Python number of the same value (exact), else ``value``."""
    return value.item() if isinstance(value, np.number) else value


def _raw_codes(labels: Any, what: str) -> tuple[np.ndarray[Any, Any], list[Any]]:
    """Codes (-1: missing) into the distinct labels, from a Categorical or any array-like."""
    not_one_per_cell = isinstance(labels, str | bytes | set | frozenset | dict)
    array_like = any(hasattr(labels, name) for name in ("__iter__", "__array__", "shape"))
    if not_one_per_cell or not array_like:  # None, a number (a ZarrArray is array-like)
        found = f"a {type(labels).__name__}" if not_one_per_cell else _found(labels)
        msg = (
            f"{what}: expected a 1-D array-like of labels, one per cell, in the cells' order; "
            f"found {found}"
        )
        raise InputTypeError(msg)
    refuse_masked(labels, what)
    # asked of the type: a pandas Series would look the names up in its index (slow)
    if hasattr(type(labels), "compute") and hasattr(type(labels), "dask"):
        labels = labels.compute()
    labels = _from_arrow(labels)
    categorical = _categorical(labels)
    if categorical is not None:
        return np.asarray(categorical.codes, dtype=np.int64), list(categorical.categories)
    # a list or tuple as it is: numpy would turn [1, "1"] into ["1", "1"], [True, 1] into [1, 1]
    array = np.asarray(labels) if hasattr(labels, "dtype") else _object_array(labels, what)
    if array.ndim != 1:
        msg = f"{what}: expected a 1-D array-like of labels, found shape {array.shape}"
        raise InputError(msg)
    missing = _missing(array)
    codes = np.full(array.size, -1, dtype=np.int64)
    present = array[~missing]
    if array.dtype.kind == "O":
        codes[~missing], values = _object_codes(present, what)
        return codes, values
    if array.dtype.kind == "f":  # np.unique would keep one of 0.0 and -0.0
        signs = np.signbit(present[present == 0])
        if signs.any() and not signs.all():
            raise _read_differently(what, (0.0, -0.0), ("0.0", "-0.0"))
    distinct, inverse = np.unique(present, return_inverse=True)
    codes[~missing] = inverse.reshape(-1)
    return codes, list(distinct)


def _object_codes(
    present: np.ndarray[Any, Any], what: str
) -> tuple[np.ndarray[Any, Any], list[Any]]:
    """Codes into the distinct labels of an object array: by type and value, so that labels
    that are equal yet of different types (``1``, ``1.0``) stay apart to be checked."""
    pd = sys.modules.get("pandas")
    if pd is not None and pd.api.types.infer_dtype(present, skipna=False) in _UNAMBIGUOUS:
        codes, uniques = pd.factorize(present)
        return np.asarray(codes, dtype=np.int64), list(uniques)
    labels = present.tolist()
    index: dict[tuple[type, Any], int] = {}
    try:
        found = [index.setdefault((type(v), v), len(index)) for v in labels]
    except TypeError:  # a value that cannot be hashed: a list, a dict, a set, ...
        label = next((label for label in labels if not _hashable(label)), None)
        if label is None:
            raise
        raise _unhashable(label, what) from None
    codes = np.array(found, dtype=np.int64)
    values = [value for _, value in index]
    _check_same_texts(labels, codes, values, what)
    return codes, values


def _check_same_texts(
    labels: list[Any], codes: np.ndarray[Any, Any], values: list[Any], what: str
) -> None:
    """Raise if labels of one code (of one type, equal) read differently: ``0.0`` and
    ``-0.0``, ``Decimal("1.0")`` and ``Decimal("1.00")``. Only the labels whose type may do
    so are read: zeros of floats, and values of types other than strings and integers."""
    suspect = np.array([_may_read_differently(value) for value in values], dtype=bool)
    first: dict[int, tuple[Any, str]] = {}
    for i in np.flatnonzero(suspect[codes]).tolist():
        label, text = labels[i], str(labels[i])
        other, other_text = first.setdefault(int(codes[i]), (label, text))
        if other_text != text:
            raise _read_differently(what, (other, label), (other_text, text))


def _may_read_differently(value: Any) -> bool:
    """Whether a value equal to ``value``, of its type, may read differently."""
    kind = type(value)
    if kind in _FLOATS:
        return bool(value == 0)
    return kind not in _PLAIN


def _unhashable(label: Any, what: str) -> InputTypeError:
    """The error for a label that cannot be hashed."""
    text = repr(label)
    text = text if len(text) <= 40 else text[:37] + "..."
    msg = (
        f"{what}: expected hashable labels (strings, numbers, ...), found a label of type "
        f"{type(label).__name__}, {text}; give one string or number per cell (e.g. the "
        f"text of each label)"
    )
    return InputTypeError(msg)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _from_arrow(labels: Any) -> Any:
    """A pyarrow Array or ChunkedArray as a numpy array (nulls as None, NaN or NaT: missing
    labels); anything else as it is. pyarrow is not imported for this."""
    pa = sys.modules.get("pyarrow")
    if pa is None or not isinstance(labels, pa.Array | pa.ChunkedArray):
        return labels
    return labels.to_numpy(zero_copy_only=False)


def _object_array(labels: Any, what: str) -> np.ndarray[Any, Any]:
    values = list(labels)
    try:
        shaped = np.asarray(values)
    except ValueError:  # numpy: nested sequences of different lengths
        msg = (
            f"{what}: expected a 1-D array-like of labels, found nested sequences of "
            f"different lengths; give one string or number per cell"
        )
        raise InputError(msg) from None
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


def _found(value: Any) -> str:
    """A value that is not a collection, for messages: ``None``, ``3 (int)``."""
    return brief(value) if value is None else f"{brief(value)} ({type(value).__name__})"
