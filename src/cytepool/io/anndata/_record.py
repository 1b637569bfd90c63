"""The record in ``uns``, and tables in the types anndata writes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from cytepool._assemble import provenance_record, with_provenance
from cytepool.errors import InputError, InputTypeError

if TYPE_CHECKING:
    import pandas as pd

    from cytepool.cube import Cube
from cytepool._records import ID_COLUMNS
from cytepool.io.anndata._readers import eager
from cytepool.io.anndata._times import (
    datetimes_from_texts,
    durations_from_texts,
    recorded_zone,
)
from cytepool.io.tables.backends import arrow_of, date_objects, is_arrow_dictionary
from cytepool.io.tables.zones import zone_name

RECORD_KEY = "cytepool"
"""The ``uns`` key under which :func:`to_anndata` and :func:`to_mudata` store the record."""
NAN_KEY = "nan"
"""The key of a record's ``dtypes`` that lists, of each column of nullable floats (pandas'
Float32 / Float64, pyarrow's floats) holding NaN as well as missing values, the ids of the rows
holding NaN: anndata cannot write such columns, and gets NaN for both. Only the tables and
columns that need it are listed: ``{"samples": {"x": ["s3"]}}``."""
_RECORD_FORMAT = "cytepool.pseudobulk"
_RECORD_VERSION = 1


def cube_tables(cube: Cube) -> dict[str, pd.DataFrame]:
    """The cube's tables as pandas frames indexed by their id."""
    return {
        name: _pandas_table(getattr(cube, name), id_column)
        for name, id_column in ID_COLUMNS.items()
    }


def _pandas_table(table: Any, id_column: str) -> pd.DataFrame:
    import narwhals.stable.v2 as nw
    import pandas as pd

    if isinstance(table, pd.DataFrame) and table.index.name == id_column:
        frame = table.copy()
    else:
        frame = _from_arrow(nw.from_native(table, eager_only=True).to_arrow()).set_index(id_column)
    frame.index = pd.Index([str(i) for i in frame.index], dtype=object, name=id_column)
    return frame


def _from_arrow(table: Any) -> pd.DataFrame:
    """A pyarrow table (of a polars or pyarrow frame) in pandas, each column in the type
    ``read_cube`` gives it: numbers and booleans with missing values nullable (plain pandas
    would make floats and objects of them; floats keep NaN apart from missing values), strings
    objects (pandas 3 would make ``str`` of them) or, with missing values, pandas' ``string``,
    dates as pyarrow dates (not datetimes)."""
    import pandas as pd
    import pyarrow as pa

    frame = _signed_dictionaries(table).to_pandas()
    for name, column in zip(table.column_names, table.columns, strict=True):
        kind = column.type
        if pa.types.is_date(kind):
            frame[name] = pd.array(column, dtype=pd.ArrowDtype(kind))
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            frame[name] = _arrow_strings(column, frame.index)
        elif column.null_count and pa.types.is_floating(kind) and kind.bit_width > 16:
            frame[name] = _arrow_floats(column)
        elif column.null_count and (pa.types.is_integer(kind) or pa.types.is_boolean(kind)):
            arrow = column.to_pandas(types_mapper=pd.ArrowDtype)  # int32[pyarrow] -> Int32
            frame[name] = arrow.convert_dtypes(dtype_backend="numpy_nullable")
        elif pa.types.is_dictionary(kind):
            frame[name] = _zoned_categories(frame[name], kind.value_type)
    return frame


def _arrow_floats(column: Any) -> Any:
    """A pyarrow column of floats with nulls as pandas' Float32 / Float64: nulls missing, NaN
    kept as NaN (pyarrow's ``to_pandas`` makes NaN of both)."""
    import pandas as pd
    import pyarrow.compute as pc

    missing = pc.is_null(column).to_numpy(zero_copy_only=False)
    values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False)
    return pd.arrays.FloatingArray(np.array(values), missing)


def _arrow_strings(column: Any, index: pd.Index) -> pd.Series:
    """A pyarrow column of strings as ``read_cube`` gives it in pandas: Python strings in an
    object column, or pandas' ``string`` (``<NA>`` for missing) when some are missing."""
    import pandas as pd

    if column.null_count:
        return pd.Series(column.to_pylist(), dtype=pd.StringDtype(na_value=pd.NA), index=index)
    return pd.Series(np.array(column.to_pylist(), dtype=object), dtype=object, index=index)


def _zoned_categories(categorical: pd.Series, values: Any) -> pd.Series:
    """``categorical``, pyarrow's pandas of a dictionary of the pyarrow type ``values``, with
    the zone of zoned timestamps back in its categories: pyarrow's ``to_pandas`` gives them
    naive (UTC times), which were written, recorded and restored so, with another
    fingerprint. Other categoricals as they are."""
    import pyarrow as pa

    if not pa.types.is_timestamp(values) or values.tz is None:
        return categorical
    zone = values.to_pandas_dtype().tz
    categories = categorical.cat.categories
    if categories.tz is None:
        categories = categories.tz_localize("UTC")
    return categorical.cat.rename_categories(categories.tz_convert(zone))


def _signed_dictionaries(table: Any) -> Any:
    """``table`` with the unsigned indices of its dictionary columns (polars' Enum and
    Categorical) made signed, which older pyarrow (18) needs to make pandas categoricals of them
    ("Converting unsigned dictionary indices to pandas not yet supported")."""
    import pyarrow as pa

    for i, kind in enumerate(table.schema.types):
        if pa.types.is_dictionary(kind) and pa.types.is_unsigned_integer(kind.index_type):
            wide = kind.index_type.bit_width > 16
            signed = pa.dictionary(
                pa.int64() if wide else pa.int32(), kind.value_type, kind.ordered
            )
            table = table.set_column(i, table.field(i).with_type(signed), table[i].cast(signed))
    return table


def profile_rows(cube: Cube, layer: str, group_rows: np.ndarray, sample_rows: np.ndarray) -> Any:
    dtype = np.dtype(cube.layers[layer].dtype)
    rows = np.zeros((len(group_rows), cube.shape[2]), dtype=dtype)
    for g in np.unique(group_rows):
        mine = np.flatnonzero(group_rows == g)
        rows[mine] = np.asarray(cube.profiles(int(g), layer=layer))[sample_rows[mine]]
    return rows


def profile_obs(
    tables: Mapping[str, pd.DataFrame],
    group_rows: np.ndarray,
    sample_rows: np.ndarray,
    cells: np.ndarray,
    counts: np.ndarray,
) -> pd.DataFrame:
    """obs of to_anndata: ids, cells (ours and decoupler's name), total counts, covariates."""
    import pandas as pd

    sample_ids, group_ids = tables["samples"].index, tables["groups"].index
    obs = pd.DataFrame(
        {
            "sample_id": pd.Categorical.from_codes(sample_rows, categories=sample_ids),
            "group_id": pd.Categorical.from_codes(group_rows, categories=group_ids),
            "n_cells": cells.astype(np.int64),
            "psbulk_cells": cells.astype(np.int64),
            "psbulk_counts": np.asarray(counts, dtype=np.float64),
        }
    )
    for axis, rows in (("sample", sample_rows), ("group", group_rows)):
        table = writable(tables[f"{axis}s"])
        for column in table.columns:
            name = free_name(column, obs.columns, f"{axis}_")
            obs[name] = table[column].iloc[rows].reset_index(drop=True)
    obs.index = _obs_names(sample_ids[sample_rows], group_ids[group_rows])
    return obs


def _obs_names(sample_ids: pd.Index, group_ids: pd.Index) -> pd.Index:
    import pandas as pd

    names = pd.Index([f"{s}_{g}" for s, g in zip(sample_ids, group_ids, strict=True)])
    if not names.is_unique:  # ids holding "_" can collide: number the profiles instead
        names = pd.Index([f"{name}_{i}" for i, name in enumerate(names)])
    return names


def free_name(name: str, taken: Iterable[str], prefix: str) -> str:
    taken = set(taken)
    while name in taken:
        name = f"{prefix}{name}" if prefix else f"{name}_"
    return name


def make_record(
    cube: Cube, tables: Mapping[str, pd.DataFrame], layer: str, cells: np.ndarray
) -> dict[str, Any]:
    dtypes: dict[str, Any] = {name: _dtype_names(table) for name, table in tables.items()}
    dtypes["layers"] = {name: np.dtype(array.dtype).name for name, array in cube.layers.items()}
    nans = {name: found for name, table in tables.items() if (found := _nan_ids(table))}
    if nans:
        dtypes[NAN_KEY] = nans
    record: dict[str, Any] = {
        "format": _RECORD_FORMAT,
        "version": _RECORD_VERSION,
        "layer": layer,
        "layers": list(cube.layers),
        "dtypes": json.dumps(dtypes),
        "samples": writable(tables["samples"]),
        "groups": writable(tables["groups"]),
        "cells": cells,
        "metadata": json.dumps(dict(cube.metadata or {})),
        "provenance": json.dumps([record.to_json() for record in cube.provenance]),
    }
    if cube.normalization is not None:
        record["normalization"] = {
            "method": cube.normalization.method,
            "factors": np.asarray(cube.normalization.factors, dtype=np.float64),
        }
    return record


def _nan_ids(frame: pd.DataFrame) -> dict[str, list[str]]:
    """The ids of the rows holding NaN (not a missing value) in each column of nullable
    floats of ``frame`` that holds one: anndata gets NaN for both (:func:`writable`)."""
    found = {}
    for column in frame.columns:
        series = frame[column]
        if _is_nullable_float(series.dtype):
            values = series.to_numpy(dtype=np.float64, na_value=0.0)
            nan = np.isnan(values) & ~series.isna().to_numpy()
            if nan.any():
                found[str(column)] = [str(i) for i in frame.index[nan]]
    return found


def _is_nullable_float(dtype: Any) -> bool:
    """Whether ``dtype`` is pandas' Float32 / Float64 or a pyarrow float (whose missing values
    are apart from NaN), as a dtype or a recorded name."""
    import pandas as pd

    if isinstance(dtype, str):
        dtype = _arrow_dtype(dtype) or (dtype if dtype in ("Float32", "Float64") else None)
        return dtype is not None and _is_nullable_float(pd.api.types.pandas_dtype(dtype))
    if isinstance(dtype, pd.Float32Dtype | pd.Float64Dtype):
        return True
    arrow = getattr(dtype, "pyarrow_dtype", None)
    if arrow is None:
        return False
    import pyarrow as pa

    return bool(pa.types.is_floating(arrow))


def read_record(uns: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """The record of ``uns``, parsed and checked, or None when there is none: InputError
    naming the field of a damaged one (of another type, shape or dtype name than
    :func:`make_record` writes)."""
    import pandas as pd

    raw = uns.get(RECORD_KEY)
    if not isinstance(raw, Mapping) or raw.get("format") != _RECORD_FORMAT:
        return None
    raw = {key: eager(value) for key, value in raw.items()}
    version: Any = raw.get("version")
    if not _is_integer(version):
        detail = f"its 'version' is {version!r}, expected the integer {_RECORD_VERSION}"
        raise _damaged(where, detail)
    if int(version) != _RECORD_VERSION:
        msg = (
            f"{where}.uns[{RECORD_KEY!r}] has version {version!r}; this cytepool "
            f"reads version {_RECORD_VERSION}: upgrade cytepool"
        )
        raise InputError(msg)
    try:
        record = {
            "layer": str(raw["layer"]),
            "layers": [str(name) for name in raw["layers"]],
            "dtypes": json.loads(str(raw["dtypes"])),
            "samples": pd.DataFrame(raw["samples"]),
            "groups": pd.DataFrame(raw["groups"]),
            "cells": np.asarray(raw["cells"]),
            "metadata": json.loads(str(raw["metadata"])),
            "provenance": json.loads(str(raw["provenance"])),
        }
        if "normalization" in raw:
            norm = {key: eager(value) for key, value in raw["normalization"].items()}
            record["normalization"] = (str(norm["method"]), np.asarray(norm["factors"], float))
        if "modalities" in raw:
            record["modalities"] = [str(name) for name in _sequence(raw["modalities"])]
        if "features" in raw:
            record["features"] = pd.DataFrame(raw["features"])
            record["features"].index = record["features"].index.astype(str)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise _damaged(where, repr(error)) from error
    problem = _record_problem(record)
    if problem is not None:
        raise _damaged(where, problem)
    record["cells"] = record["cells"].astype(np.int64)
    for name in ("samples", "groups"):
        record[name].index = record[name].index.astype(str).rename(ID_COLUMNS[name])
    return record


def _sequence(value: Any) -> Any:
    """``value``, a sequence of names (TypeError for a text, whose letters are no names)."""
    if isinstance(value, str | bytes | np.str_):
        msg = f"'modalities' is the text {value!r}, expected a list of names"
        raise InputTypeError(msg)
    return value


def _damaged(where: str, detail: str) -> InputError:
    msg = f"{where}.uns[{RECORD_KEY!r}] is damaged ({detail}): delete it or rewrite it"
    return InputError(msg)


def _is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (Python's or numpy's, a 0-d array of one), not a bool."""
    value = value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _record_problem(record: dict[str, Any]) -> str | None:
    """What is wrong with the fields of a parsed record (of other types or shapes than
    :func:`make_record` writes), naming the field; None when nothing is."""
    shape = (len(record["groups"]), len(record["samples"]))
    cells = record["cells"]
    if cells.dtype.kind not in "iu" or cells.shape != shape:
        return (
            f"its 'cells' are {cells.dtype} of shape {cells.shape}, expected integers of "
            f"shape (groups, samples) = {shape}"
        )
    if record["layer"] not in record["layers"]:
        return f"its 'layer' {record['layer']!r} is not one of its 'layers' {record['layers']}"
    modalities = record.get("modalities", [])
    if "modalities" in record and len(modalities) != shape[0]:
        return f"its 'modalities' are {len(modalities)}, expected one per group"
    if len(set(modalities)) != len(modalities):
        again = next(name for i, name in enumerate(modalities) if name in modalities[:i])
        return f"its 'modalities' name {again!r} twice, expected a name per group"
    if not isinstance(record["metadata"], dict):
        return f"its 'metadata' is a {type(record['metadata']).__name__}, expected an object"
    if not isinstance(record["provenance"], list):
        kind = type(record["provenance"]).__name__
        return f"its 'provenance' is a {kind}, expected a list"
    return _dtypes_problem(record["dtypes"], record["layers"])


def _dtypes_problem(dtypes: Any, layers: list[str]) -> str | None:
    """What is wrong with a record's ``dtypes``: an object of the dtype names of each
    table's columns (each one :func:`restore` knows) and of each layer (a numpy integer or
    float); None when nothing is."""
    if not isinstance(dtypes, dict) or not isinstance(dtypes.get("layers"), dict):
        return f"its 'dtypes' are {dtypes!r}, expected an object with the dtypes of 'layers'"
    for table in ("samples", "groups", "features", "layers"):
        names = dtypes.get(table, {})
        if not isinstance(names, dict):
            return f"its 'dtypes' of {table!r} are {names!r}, expected an object"
        for column, name in names.items():
            known = _is_layer_dtype(name) if table == "layers" else _is_restorable(name)
            if not known:
                return f"its 'dtypes' of {table!r} give {column!r} the unknown dtype {name!r}"
    missing = [name for name in layers if name not in dtypes["layers"]]
    if missing:
        return f"its 'dtypes' of 'layers' name no dtype of the layer {missing[0]!r}"
    return _nans_problem(dtypes)


def _nans_problem(dtypes: dict[str, Any]) -> str | None:
    """What is wrong with the ``nan`` of a record's ``dtypes``: an object of tables, each an
    object of its columns of nullable floats, each a list of ids; None when nothing is."""
    nans = dtypes.get(NAN_KEY, {})
    if not isinstance(nans, dict):
        return f"its 'dtypes' of {NAN_KEY!r} are {nans!r}, expected an object"
    for table, columns in nans.items():
        if table not in ("samples", "groups", "features") or not isinstance(columns, dict):
            return (
                f"its 'dtypes' of {NAN_KEY!r} give {table!r} {columns!r}, expected an object "
                f"of the columns of 'samples', 'groups' or 'features'"
            )
        for column, ids in columns.items():
            name = dtypes.get(table, {}).get(column)
            if not _is_nullable_float(name):
                return (
                    f"its 'dtypes' of {NAN_KEY!r} name the column {column!r} of {table!r}, "
                    f"whose recorded dtype is {name!r}, not one of nullable floats"
                )
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                return (
                    f"its 'dtypes' of {NAN_KEY!r} give the column {column!r} of {table!r} "
                    f"{ids!r}, expected a list of ids"
                )
    return None


def _is_layer_dtype(name: Any) -> bool:
    try:
        return isinstance(name, str) and np.dtype(name).kind in "iuf"
    except TypeError:
        return False


def _is_restorable(name: Any) -> bool:
    """Whether :func:`restore` makes a column of the dtype named ``name`` (tried on none)."""
    import pandas as pd

    if not isinstance(name, str):
        return False
    try:
        _restored(pd.Series([], dtype=object), name)
    except (TypeError, ValueError, KeyError):
        return False
    return True


_DATE_OBJECTS = "object[date]"
"""The dtype name recorded for a pandas column of ``datetime.date`` objects (which the digest
takes as dates): written as ISO texts, restored as such objects."""
_ARROW_STRING = "utf8[pyarrow]"
"""The dtype name recorded for pandas' ``ArrowDtype(pa.string())``, whose own name,
``string[pyarrow]``, is that of ``StringDtype("pyarrow")``."""
_DATETIME = re.compile(r"datetime64\[(\w+)(?:, (.+))?\]")


def _dtype_names(frame: pd.DataFrame) -> dict[str, str]:
    return {str(column): _column_dtype_name(frame[column]) for column in frame.columns}


def _column_dtype_name(series: pd.Series) -> str:
    """The recorded name of a column's dtype: its pandas name; ``object[date]`` for
    ``datetime.date`` objects; ``category[<categories' name>]`` for a categorical whose
    categories ``writable`` changes (datetimes, durations, dates, pyarrow-backed)."""
    import pandas as pd

    series = _dictionary_as_categorical(series)
    if date_objects(series):
        return _DATE_OBJECTS
    if isinstance(series.dtype, pd.CategoricalDtype):
        categories = pd.Series(series.cat.categories)
        if _writable_categories(categories) is not None:
            return f"category[{_column_dtype_name(categories)}]"
    return _dtype_name(series.dtype)


def _dtype_name(dtype: Any) -> str:
    """The name of ``dtype`` that :func:`restore` makes the dtype of again; a zone is named
    by :func:`~cytepool.io.tables.zones.zone_name` (pandas prints dateutil's and pytz's
    offsets as names no one parses)."""
    import pandas as pd

    if isinstance(dtype, pd.StringDtype):
        return f"string[{dtype.storage}]" if dtype.na_value is pd.NA else str(dtype)
    if isinstance(dtype, pd.DatetimeTZDtype):
        return f"datetime64[{dtype.unit}, {zone_name(dtype.tz)}]"
    if isinstance(dtype, pd.ArrowDtype) and str(dtype) == "string[pyarrow]":
        return _ARROW_STRING
    return str(dtype)


def writable(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy whose columns anndata can write; :func:`restore` reverts it by dtype name."""
    frame = frame.copy()
    for column in frame.columns:
        frame[column] = _writable_column(frame[column])
    return frame


def _writable_column(series: pd.Series) -> pd.Series:
    """``series`` in a type anndata writes: times as ISO texts (objects), pyarrow-backed
    columns in numpy or pandas' nullable types, nullable floats as floats with NaN, strings
    as objects (a categorical when some are missing); categoricals keep their codes."""
    import pandas as pd

    series = _dictionary_as_categorical(series)
    if isinstance(series.dtype, pd.CategoricalDtype):
        categories = _writable_categories(pd.Series(series.cat.categories))
        if categories is None:
            return series
        codes = series.cat.codes.to_numpy()
        written = pd.Categorical.from_codes(codes, pd.Index(categories), series.cat.ordered)
        return pd.Series(written, index=series.index, name=series.name)
    series = _from_arrow_backed(series)
    kind = series.dtype.kind if isinstance(series.dtype, np.dtype) else ""
    timely = isinstance(series.dtype, pd.DatetimeTZDtype) or _arrow_dates(series.dtype)
    timely = timely or date_objects(series)
    if kind in ("m", "M") or timely:  # ISO texts, as objects (not pyarrow's strings)
        texts = [None if pd.isna(value) else value.isoformat() for value in series]
        series = pd.Series(texts, index=series.index, dtype=object, name=series.name)
    if isinstance(series.dtype, pd.Float32Dtype | pd.Float64Dtype):  # anndata cannot write
        floats = series.to_numpy(dtype=series.dtype.numpy_dtype, na_value=np.nan)
        series = pd.Series(floats, index=series.index, name=series.name)  # missing: NaN
    strings = isinstance(series.dtype, pd.StringDtype) or series.dtype == object
    if strings and not _is_pandas3_str(series.dtype):
        has_null = bool(series.isna().any())
        series = series.astype("category") if has_null else series.astype(object)
    return series


def _writable_categories(categories: pd.Series) -> pd.Series | None:
    """The categories of a categorical in a type anndata writes as categories (ISO texts of
    times, numpy types of pyarrow-backed ones), or None when anndata writes them as they are."""
    import pandas as pd

    dtype = categories.dtype
    timely = isinstance(dtype, pd.DatetimeTZDtype | pd.ArrowDtype) or date_objects(categories)
    if not timely and not (isinstance(dtype, np.dtype) and dtype.kind in "mM"):
        return None
    return _writable_column(categories)


def _dictionary_as_categorical(series: pd.Series) -> pd.Series:
    """A column of pandas' ``ArrowDtype`` of a pyarrow dictionary (which anndata cannot
    write) as the pandas ``Categorical`` of the same codes, categories and order, which has
    its fingerprint: it is written, recorded and restored as one; other columns as they are."""
    import pandas as pd

    if not is_arrow_dictionary(series.dtype):
        return series
    categorical = _zoned_categories(
        arrow_of(series).to_pandas(), series.dtype.pyarrow_dtype.value_type
    )
    return pd.Series(categorical.array, index=series.index, name=series.name)


def _from_arrow_backed(series: pd.Series) -> pd.Series:
    """A pyarrow-backed column (``int64[pyarrow]``...), which anndata cannot write, in the
    numpy or pandas type of :func:`_unarrowed_name`; other columns as they are."""
    import pandas as pd

    if not isinstance(series.dtype, pd.ArrowDtype):
        return series
    name = _unarrowed_name(series.dtype)
    if name is None:
        return series
    if name.startswith("float"):  # missing: NaN, as the digest has it
        floats = series.to_numpy(dtype=np.dtype(name), na_value=np.nan)
        return pd.Series(floats, index=series.index, name=series.name)
    return series.astype(name)


def _unarrowed_name(dtype: pd.ArrowDtype) -> str | None:
    """The numpy or pandas dtype that holds the values of pandas' ``ArrowDtype`` exactly
    (nullable integers and booleans, floats, objects for strings, datetimes and durations of
    the unit and zone), or None for dates (written as such) and types a cube does not hold."""
    import pyarrow as pa

    kind = dtype.pyarrow_dtype
    if pa.types.is_integer(kind):
        return f"{'UInt' if pa.types.is_unsigned_integer(kind) else 'Int'}{kind.bit_width}"
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_floating(kind):
        return f"float{kind.bit_width}"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "object"
    if pa.types.is_timestamp(kind):
        zone = "" if kind.tz is None else f", {zone_name(kind.tz)}"
        return f"datetime64[{kind.unit}{zone}]"
    if pa.types.is_duration(kind):
        return f"timedelta64[{kind.unit}]"
    return None


def _arrow_dates(dtype: Any) -> bool:
    """Whether ``dtype`` is pandas' pyarrow dates (a cube read from a file holds dates so)."""
    pyarrow_dtype = getattr(dtype, "pyarrow_dtype", None)
    if pyarrow_dtype is None:
        return False
    import pyarrow as pa

    return bool(pa.types.is_date(pyarrow_dtype))


def _is_pandas3_str(dtype: Any) -> bool:
    """pandas 3's default ``str`` dtype, which anndata (0.13, the first for pandas 3) writes."""
    import pandas as pd

    if int(pd.__version__.split(".")[0]) < 3:
        return False
    return isinstance(dtype, pd.StringDtype) and dtype.na_value is not pd.NA


def restore(frame: pd.DataFrame, dtypes: Mapping[str, Any], table: str) -> pd.DataFrame:
    """Give the columns of ``frame``, the table ``table``, the dtypes a record's ``dtypes``
    name, and the NaN it lists back to its columns of nullable floats."""
    frame = frame.copy()
    for column, name in dtypes.get(table, {}).items():
        if column not in frame.columns or _dtype_name(frame[column].dtype) == name:
            continue
        frame[column] = _restored(frame[column], name)
    for column, ids in dtypes.get(NAN_KEY, {}).get(table, {}).items():
        if column in frame.columns:
            frame[column] = _with_nans(frame[column], frame.index.isin(ids))
    return frame


def _with_nans(series: pd.Series, where: np.ndarray) -> pd.Series:
    """``series``, nullable floats whose NaN the restoring made missing, with NaN (not
    missing) at ``where`` again."""
    import pandas as pd

    if not where.any():
        return series
    missing = series.isna().to_numpy() & ~where
    if isinstance(series.dtype, pd.ArrowDtype):
        import pyarrow as pa

        kind = series.dtype.pyarrow_dtype
        values = series.to_numpy(dtype=np.dtype(kind.to_pandas_dtype()), na_value=np.nan)
        values[where] = np.nan
        array = pd.arrays.ArrowExtensionArray(pa.array(values, type=kind, mask=missing))
        return pd.Series(array, index=series.index, name=series.name)
    values = series.to_numpy(dtype=series.dtype.numpy_dtype, na_value=0.0)
    values[where] = np.nan
    floats = pd.arrays.FloatingArray(values, missing)
    return pd.Series(floats, index=series.index, name=series.name)


def _restored(series: pd.Series, name: str) -> pd.Series:
    """``series`` as ``writable`` wrote it (and anndata read it), in the dtype named ``name``."""
    import pandas as pd

    if name == _DATE_OBJECTS:
        return _dates_from_texts(series)
    if name.startswith("category[") and name.endswith("]"):
        return _restored_categorical(series, name[len("category[") : -1])
    arrow = _arrow_dtype(name)
    if arrow is not None and (unarrowed := _unarrowed_name(arrow)) is not None:
        return _restored(series, unarrowed).astype(arrow)
    if (datetime := _DATETIME.fullmatch(name)) is not None:
        return _datetimes(series, *datetime.groups())
    if name.startswith("timedelta64[") and series.dtype.kind != "m":
        unit = name[len("timedelta64[") : -1]
        values = durations_from_texts(series.astype(object), unit, str(series.name))
        return pd.Series(values, index=series.index, name=series.name)
    if name.startswith("date") and name.endswith("[pyarrow]"):  # ISO dates: cast by arrow
        series = series.astype(object).where(series.notna(), None)
    if series.dtype == "category" and name in {"object", "str"}:
        series = series.astype(object).where(series.notna(), None)
    return series.astype(_named_dtype(name))


def _named_dtype(name: str) -> Any:
    """The dtype a recorded name names: ``str`` is pandas' ``StringDtype(na_value=NaN)``,
    pandas 3's default strings, which pandas 2.3 reads from a file pandas 3 wrote and names
    ``str`` too, but whose ``astype("str")`` makes Python strings (missing values: 'None')."""
    import pandas as pd

    return pd.StringDtype(na_value=np.nan) if name == "str" else name


def _arrow_dtype(name: str) -> pd.ArrowDtype | None:
    """The pandas ``ArrowDtype`` a recorded name names, or None (``string[pyarrow]`` is
    ``StringDtype("pyarrow")``)."""
    import pandas as pd

    if not name.endswith("[pyarrow]"):
        return None
    try:
        return pd.ArrowDtype.construct_from_string(name)
    except (TypeError, ValueError, NotImplementedError):
        return None


def _restored_categorical(series: pd.Series, categories_name: str) -> pd.Series:
    """A categorical whose categories ``writable`` wrote as texts (or in numpy types), with
    its categories in the dtype named ``categories_name`` again; codes and order kept."""
    import pandas as pd

    if not isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype("category")
    categories = _restored(pd.Series(series.cat.categories), categories_name)
    codes = series.cat.codes.to_numpy()
    restored = pd.Categorical.from_codes(codes, pd.Index(categories), series.cat.ordered)
    return pd.Series(restored, index=series.index, name=series.name)


def _datetimes(series: pd.Series, unit: str, zone: str | None) -> pd.Series:
    """Datetimes of ``unit`` (in ``zone``) from the ISO texts ``writable`` wrote, parsed
    straight into the unit (pandas' parsing goes through nanoseconds: years 1677 to 2262)."""
    import pandas as pd

    values = series  # datetimes already (not written by writable): only the unit and zone
    if series.dtype.kind != "M" and not isinstance(series.dtype, pd.DatetimeTZDtype):
        parsed = datetimes_from_texts(series.astype(object), unit, str(series.name))
        values = pd.Series(parsed, index=series.index)
    if zone is not None and values.dt.tz is None:
        values = values.dt.tz_localize("UTC")  # the texts' offsets made UTC times of them
    if zone is None:
        return values.astype(f"datetime64[{unit}]").rename(series.name)
    zoned = values.dt.tz_convert(recorded_zone(zone))
    return zoned.astype(pd.DatetimeTZDtype(unit, zoned.dt.tz)).rename(series.name)


def _dates_from_texts(series: pd.Series) -> pd.Series:
    """ISO dates (``writable`` wrote them) as ``datetime.date`` objects, None for missing."""
    import datetime as dt

    import pandas as pd

    days = [None if pd.isna(text) else dt.date.fromisoformat(str(text)) for text in series]
    return pd.Series(days, index=series.index, dtype=object, name=series.name)


def stamped(cube: Cube, history: Iterable[Any], operation: str, parameters: Any) -> Cube:
    """The cube with provenance ``history`` (records or their JSON) plus a record now."""
    from cytepool.cube import Provenance

    records = [
        item if isinstance(item, Provenance) else Provenance.from_json(item) for item in history
    ]
    records.append(provenance_record(operation, parameters, ()))
    return with_provenance(cube, records)
