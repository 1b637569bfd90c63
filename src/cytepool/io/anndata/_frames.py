"""obs and var read without importing anndata, exactly as anndata's ``read_elem`` reads them.

Pooling a file needs its obs and var as pandas. Importing anndata to read them took 0.2 s on
the oldest supported stack and 0.6 s on the newest (it imports zarr-python, and dask when it
is installed): a fifth of what ``cytepool pool`` took on a file of 20,000 cells. The
elements of anndata's dataframe encoding that obs and var are made of — ``dataframe`` 0.2.0,
``categorical`` 0.2.0, ``array`` and ``string-array`` 0.2.0, ``nullable-integer``,
``nullable-boolean`` and ``nullable-string-array`` 0.1.0 — are read here with the calls that
the installed anndata makes for them (h5py's or zarr-python's ``[()]``, ``asstr()``,
``pd.Categorical.from_codes``, the masked arrays, ``pd.DataFrame`` of the columns), so each
gives the very objects anndata would. Only anndata 0.12 and 0.13 are known: with another
version, and for any other element (a ``dataframe`` of 0.1.0, an attribute of another type
than anndata writes, a group where an array belongs), anndata reads the element itself.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["is_group", "read_element"]


def read_element(element: Any) -> Any:
    """The element (an h5py or zarr-python group or array) as anndata's ``read_elem`` reads it."""
    reader = _READERS.get((is_group(element), *_encoding(element)))
    if reader is None or _anndata_release() not in _KNOWN:
        return _by_anndata(element)
    return reader(element)


_KNOWN = ((0, 12), (0, 13))
"""The releases of anndata whose readers those here repeat (tested on both stacks)."""


@functools.cache
def _anndata_release() -> tuple[int, ...]:
    """The installed anndata's (major, minor), read from its metadata, not by importing it;
    () if it is not installed (then anndata's import says what is missing)."""
    from importlib.metadata import PackageNotFoundError, version  # only when a file is read

    try:
        release = version("anndata")
    except PackageNotFoundError:
        return ()
    parts = release.split(".")[:2]
    if not all(part.isascii() and part.isdigit() for part in parts):
        return ()
    return tuple(int(part) for part in parts)


def is_group(node: Any) -> bool:
    """Whether ``node`` is a group (h5py or zarr-python), not an array or dataset."""
    return hasattr(node, "keys") and not hasattr(node, "dtype")


def _encoding(node: Any) -> tuple[str | None, str | None]:
    """The element's ``encoding-type`` and ``encoding-version`` (None for an attribute that
    is not a str: no reader here takes it, anndata reads the element)."""
    return _text_attribute(node, "encoding-type", ""), _text_attribute(node, "encoding-version", "")


def _by_anndata(element: Any) -> Any:
    """An element read by anndata (files of anndata 0.7 warn of their old categories)."""
    import anndata as ad
    from anndata.io import read_elem

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ad.OldFormatWarning)
        return read_elem(element)


def _text_attribute(element: Any, name: str, default: str | None = None) -> str | None:
    """An attribute (``default`` if missing) if it is a str, which anndata reads as it is
    stored; else None (h5py gives fixed-length strings as bytes, which anndata decodes)."""
    value = element.attrs.get(name, default)
    return value if isinstance(value, str) else None


def _dataframe(group: Any) -> Any:
    """anndata's ``read_dataframe``: the columns in ``column-order``, the index at ``_index``
    (named after it unless it is ``_index``)."""
    import pandas as pd

    columns = _column_order(group)
    index_key = _text_attribute(group, "_index")
    if columns is None or index_key is None:
        return _by_anndata(group)
    frame = pd.DataFrame(
        {name: read_element(group[name]) for name in columns},
        index=read_element(group[index_key]),
        columns=columns if columns else None,
    )
    if index_key != "_index":
        frame.index.name = index_key
    return frame


def _column_order(group: Any) -> list[str] | None:
    """``column-order`` as a list of str, or None when it is missing or holds another type."""
    if "column-order" not in group.attrs:
        return None
    order = list(group.attrs["column-order"])
    return order if all(isinstance(name, str) for name in order) else None


def _categorical(group: Any) -> Any:
    """anndata's ``read_categorical``."""
    import pandas as pd

    if "ordered" not in group.attrs:
        return _by_anndata(group)
    return pd.Categorical.from_codes(
        codes=read_element(group["codes"]),
        categories=read_element(group["categories"]),
        ordered=bool(group.attrs["ordered"]),
    )


def _array(array: Any) -> Any:
    """anndata's ``read_array`` (and its ``read_string_array`` of zarr-python arrays)."""
    return array[()]


def _string_array(array: Any) -> Any:
    """anndata's ``read_string_array``: an h5py dataset's strings as str."""
    return array.asstr()[()] if hasattr(array, "asstr") else array[()]


def _masked(kind: str) -> Callable[[Any], Any]:
    """anndata's ``_read_nullable`` for pandas' masked array ``kind``."""

    def read(group: Any) -> Any:
        import pandas as pd

        values, mask = read_element(group["values"]), read_element(group["mask"])
        return getattr(pd.arrays, kind)(values, mask=mask)

    return read


def _nullable_strings(group: Any) -> Any:
    """anndata's ``_read_nullable_string``: the values as numpy's StringDType, then a pandas
    string array with the masked rows missing. anndata 0.13 takes the missing value from the
    ``na-value`` attribute (``"NA"`` unless it says ``"NaN"``); 0.12 always uses ``pd.NA``."""
    import numpy as np
    import pandas as pd

    na_value = _text_attribute(group, "na-value", "NA")
    if na_value is None:
        return _by_anndata(group)
    values, mask = read_element(group["values"]), read_element(group["mask"])
    if _anndata_release() >= (0, 13):
        dtype = pd.StringDtype(na_value=np.nan if na_value == "NaN" else pd.NA)
    else:
        dtype = pd.StringDtype()
    strings = values.astype(np.dtypes.StringDType(na_object=dtype.na_value))
    array = pd.array(strings, dtype=dtype)
    array[mask] = pd.NA
    return array


_READERS: dict[tuple[bool, str | None, str | None], Callable[[Any], Any]] = {
    (True, "dataframe", "0.2.0"): _dataframe,
    (True, "categorical", "0.2.0"): _categorical,
    (False, "array", "0.2.0"): _array,
    (False, "string-array", "0.2.0"): _string_array,
    (True, "nullable-integer", "0.1.0"): _masked("IntegerArray"),
    (True, "nullable-boolean", "0.1.0"): _masked("BooleanArray"),
    (True, "nullable-string-array", "0.1.0"): _nullable_strings,
}
"""(is a group, encoding-type, encoding-version) → reader."""
