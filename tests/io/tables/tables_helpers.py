"""Helpers for the table tests: comparisons of frames of every backend."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np

from factories import BACKENDS

__all__ = ["BACKENDS"]  # re-exported for the table tests


def inferred_strings_encoding() -> str:
    """How a pandas column of strings made without a dtype is stored.

    pandas 2 makes it an object column (``string-array``), pandas 3 a ``str`` column, which is
    stored as anndata 0.13 stores it (``nullable-string-array`` with ``na-value`` "NaN").
    """
    import pandas as pd

    return "string-array" if int(pd.__version__.split(".")[0]) < 3 else "nullable-string-array"


def library_of(frame: Any) -> str:
    """The backend a native frame belongs to."""
    return type(frame).__module__.split(".")[0]


def assert_frames_equal(result: Any, expected: Any) -> None:
    """Exact equality of two frames of one library: values, missing values, dtypes, names."""
    library = library_of(expected)
    assert library_of(result) == library
    if library == "pandas":
        import pandas as pd

        pd.testing.assert_frame_equal(result, expected, check_exact=True)
        for name in expected.columns:  # NaN and missing differ for nullable floats
            _assert_same_missing(result[name], expected[name])
    elif library == "polars":
        from polars.testing import assert_frame_equal

        assert_frame_equal(result, expected, check_exact=True)
        for name in expected.columns:
            assert result[name].is_null().to_list() == expected[name].is_null().to_list()
    else:
        assert result.schema == expected.schema, f"{result.schema}\n!=\n{expected.schema}"
        assert python_values(result) == python_values(expected)


def _assert_same_missing(result: Any, expected: Any) -> None:
    import pandas as pd

    if isinstance(expected.dtype, pd.api.extensions.ExtensionDtype) and expected.dtype.kind == "f":
        assert result.isna().tolist() == expected.isna().tolist()
        assert (
            np.isnan(result.to_numpy(dtype=float, na_value=0)).tolist()
            == np.isnan(expected.to_numpy(dtype=float, na_value=0)).tolist()
        )


def python_values(frame: Any) -> dict[str, list[Any]]:
    """Columns as lists of normalised Python values (a named pandas index becomes a column)."""
    library = library_of(frame)
    if library == "pandas":
        data = {}
        if frame.index.name is not None:
            data[frame.index.name] = _pandas_values(frame.index)
        data.update({name: _pandas_values(frame[name]) for name in frame.columns})
    elif library == "polars":
        data = frame.to_dict(as_series=False)
    else:
        data = frame.to_pydict()
    return {name: [_normalise(v) for v in values] for name, values in data.items()}


def _pandas_values(values: Any) -> list[Any]:
    if isinstance(values.dtype, np.dtype) and values.dtype.kind == "f":
        return list(values)  # NaN is a value, as in polars and pyarrow
    missing = values.isna()
    return [None if m else v for v, m in zip(values.astype(object), missing, strict=True)]


def _normalise(value: Any) -> Any:
    import pandas as pd

    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime(warn=False)
    if isinstance(value, pd.Timedelta):
        return value.to_pytimedelta()
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return dt.datetime(value.year, value.month, value.day)
    return value
