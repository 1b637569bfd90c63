"""Labels, covariates and the axis tables of a cube pooled from cells."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cytepool import _words
from cytepool._labels import factorize_labels
from cytepool.errors import InputError, InputTypeError, UnknownIdError
from cytepool.fingerprint import canonical_column
from cytepool.io.tables.backends import check_column_names

if TYPE_CHECKING:
    import pandas as pd


from cytepool._records import ID_COLUMNS

Covariates = Sequence[str] | None

#: Why a column named as a table's id column (``sample_id``...) is not kept in that table.
ID_REASON = "named like an id column"


def check_names(names: Any, option: str) -> None:
    """InputTypeError if ``names``, the columns given as ``option=``, is one string.

    A string is a sequence of its letters: ``samples="age"`` would name the columns ``'a'``,
    ``'g'`` and ``'e'``.
    """
    if isinstance(names, str | bytes):
        of = "var" if option == "features" else "obs"
        msg = (
            f"{option}= takes a list of {of} column names, found the string {names!r}: "
            f"give a list: {option}=[{names!r}]"
        )
        raise InputTypeError(msg)


def label_codes(
    obs: pd.DataFrame, key: str, role: str, obs_name: str, cells: Any = None
) -> tuple[np.ndarray, list[str]]:
    """Codes per row and the ids: the ``str`` of the labels, sorted (as from_cells does).

    ``role`` is the argument that names ``key`` (``"sample_key"``); ``obs_name`` names
    ``obs`` in messages (``"adata.obs"``), ``cells`` its rows (None: by obs's index).
    """
    codes, ids, _ = labelled(obs, key, role, obs_name, cells)
    return codes, ids


def labelled(
    obs: pd.DataFrame, key: str, role: str, obs_name: str, cells: Any = None
) -> tuple[np.ndarray, list[str], list[Any]]:
    """As :func:`label_codes`, with a label of each id (to check the ids of several files
    against each other: :func:`cytepool._labels.check_one_to_one`)."""
    if key not in obs.columns:
        msg = (
            f"{_words.option(role)} {key!r} is not a column of {obs_name}; "
            f"its columns: {list(map(str, obs.columns))}"
        )
        raise UnknownIdError(msg, unknown=key, known=obs.columns)
    column = obs[key]
    what = f"column {key!r} of {obs_name} ({_words.option(role)})"
    missing = column.isna().to_numpy()
    if missing.any():
        first = (obs.index if cells is None else cells)[int(np.argmax(missing))]
        msg = (
            f"{what} has {int(missing.sum())} missing labels, e.g. in row {str(first)!r}: "
            f"drop those rows or fill them in"
        )
        raise InputError(msg)
    codes, ids, labels = factorize_labels(column, what)
    return codes.astype(np.intp), ids, labels


def axis_tables(
    obs: pd.DataFrame,
    keys: tuple[str, str],
    codes: tuple[np.ndarray, np.ndarray],
    ids: tuple[Sequence[str], Sequence[str]],
    columns: tuple[Covariates, Covariates],
    obs_name: str,
    *,
    exclude: Iterable[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """The sample and the group table, with their covariates from ``obs``, and what was kept.

    The report (for the provenance record): ``{"samples": [kept], "groups": [kept],
    "dropped": {column: why}}``; the keys, ``exclude`` and id columns are not covariates.
    """
    excluded = {*keys, *exclude}
    samples, why_not_sample = covariate_table(
        obs, codes[0], ids[0], columns[0], "sample", excluded, obs_name
    )
    group_excluded = excluded | (set(samples.columns) if columns[1] is None else set())
    groups, why_not_group = covariate_table(
        obs, codes[1], ids[1], columns[1], "group", group_excluded, obs_name
    )
    dropped = {}
    for name in obs.columns:
        if name not in excluded and name not in samples and name not in groups:
            dropped[str(name)] = both_reasons(why_not_sample.get(name), why_not_group.get(name))
    report = {
        "samples": [str(name) for name in samples.columns],
        "groups": [str(name) for name in groups.columns],
        "dropped": dropped,
    }
    return samples, groups, report


def both_reasons(first: str | None, second: str | None) -> str:
    """One reason of two: "varies within sample 'a' (1 and 2) and within group 'B' (...)"."""
    if not first or not second or first == second:
        return first or second or ""
    if first.startswith("varies within ") and second.startswith("varies within "):
        second = second.removeprefix("varies ")
    return f"{first} and {second}"


def covariate_table(
    obs: pd.DataFrame,
    codes: np.ndarray,
    ids: Sequence[str],
    columns: Covariates,
    axis: str,
    excluded: set[str],
    obs_name: str,
) -> tuple[pd.DataFrame, dict[str, str]]:
    """One row per id: the obs columns constant within each id (all of them, or the named).

    Also why each other column is not one (for the columns not ``excluded``).
    """
    import pandas as pd

    _, first = np.unique(codes, return_index=True)
    candidates = [c for c in obs.columns if c not in excluded]
    why_not = {}
    if columns is None:
        for name in candidates:
            reason = _variation(obs[name], codes, first, ids, axis)
            if name in {"sample_id", "group_id"}:
                reason = ID_REASON
            if reason is not None:
                why_not[name] = reason
        names = [name for name in candidates if name not in why_not]
    else:
        names = list(columns)
        for name in names:
            _check_covariate(obs, name, codes, first, ids, axis, obs_name)
        why_not = {c: f"not named as a {axis} covariate" for c in candidates if c not in names}
    table = pd.DataFrame({name: obs[name].iloc[first].to_numpy() for name in names})
    for name in names:  # keep dtypes (categoricals, nullables) that to_numpy() loses
        table[name] = obs[name].iloc[first].reset_index(drop=True)
    table.index = pd.Index(list(ids), name=ID_COLUMNS[f"{axis}s"])
    return table, why_not


def _value_codes(column: pd.Series) -> np.ndarray | None:
    import pandas as pd

    try:
        return pd.factorize(column, use_na_sentinel=False)[0]
    except TypeError:  # unhashable values: never a covariate
        return None


def _variation(
    column: pd.Series, codes: np.ndarray, first: np.ndarray, ids: Sequence[str], axis: str
) -> str | None:
    """Why ``column`` is not constant within each id (sample or group), or None if it is."""
    values = _value_codes(column)
    if values is None:
        return "holds unhashable values"
    varying = np.flatnonzero(values != values[first][codes])
    if not len(varying):
        return unstorable(column.iloc[first])
    row = varying[0]
    one, other = column.iloc[first[codes[row]]], column.iloc[row]
    both = f"{_words.brief(one)} and {_words.brief(other)}"
    return f"varies within {axis} {ids[codes[row]]!r} ({both})"


def unstorable(column: pd.Series) -> str | None:
    """Why a cube's table cannot hold ``column`` (a value per id), or None if it can."""
    import narwhals.stable.v2 as nw

    try:
        check_column_names([column.name])
    except InputError as error:
        return f"is named so that no cube file can hold it ({error})"
    series = nw.from_native(column.reset_index(drop=True), series_only=True)
    try:
        canonical_column(series, str(column.name))
    except (InputTypeError, InputError) as error:
        return f"holds values a cube's table cannot hold ({error})"
    return None


def _check_covariate(
    obs: pd.DataFrame,
    name: str,
    codes: np.ndarray,
    first: np.ndarray,
    ids: Sequence[str],
    axis: str,
    obs_name: str,
) -> None:
    if name not in obs.columns:
        msg = (
            f"{axis} covariate {name!r} ({_words.option(f'{axis}s')}) is not a column of "
            f"{obs_name}; its columns: {list(map(str, obs.columns))}"
        )
        raise UnknownIdError(msg, unknown=name, known=obs.columns)
    if name in {"sample_id", "group_id"}:
        msg = f"{name!r} cannot be a {axis} covariate: it is the name of an id column"
        raise InputError(msg)
    reason = _variation(obs[name], codes, first, ids, axis)
    if reason is not None:
        msg = (
            f"column {name!r} of {obs_name} {reason}: it cannot be a {axis} covariate "
            f"({_words.option(f'{axis}s')})"
        )
        raise InputError(msg)


def features_table(var: pd.DataFrame, columns: Covariates, var_name: str) -> pd.DataFrame:
    """The feature table from ``var`` (named ``var_name`` in messages: ``"adata.var"``)."""
    import pandas as pd

    index = var.index
    if not index.is_unique:
        duplicated = index[index.duplicated()][0]
        msg = (
            f"the names of {var_name} are not unique (e.g. {str(duplicated)!r} appears "
            f"{int((index == duplicated).sum())} times): make them unique first, e.g. with "
            f"var_names_make_unique() on a copy"
        )
        raise InputError(msg)
    if columns is not None:
        _check_feature_columns(var, columns, var_name)
    kept = [c for c in var.columns if c not in dropped_features(var, columns)]
    table = pd.DataFrame(var[kept if columns is None else list(columns)]).copy()
    table.index = _text_index(index, "feature_id")
    return table


def dropped_features(var: pd.DataFrame, columns: Covariates) -> dict[str, str]:
    """The ``var`` columns not kept in the feature table (of all, ``columns`` None), with the
    reason: the column named as the table's id column, ``feature_id``."""
    if columns is not None or ID_COLUMNS["features"] not in var.columns:
        return {}
    return {ID_COLUMNS["features"]: ID_REASON}


def features_record(var: pd.DataFrame, columns: Covariates) -> dict[str, Any]:
    """The parameters of a pooling's record on ``var``'s columns: ``{"features": {"dropped":
    {column: why}}}`` if a column is dropped, else none."""
    dropped = dropped_features(var, columns)
    return {"features": {"dropped": dropped}} if dropped else {}


def _check_feature_columns(var: pd.DataFrame, columns: Sequence[str], var_name: str) -> None:
    missing = [c for c in columns if c not in var.columns]
    if missing:
        msg = (
            f"feature column {missing[0]!r} is not a column of {var_name}; its columns: "
            f"{list(map(str, var.columns))}"
        )
        raise UnknownIdError(msg, unknown=missing[0], known=var.columns)
    if ID_COLUMNS["features"] in columns:
        msg = (
            f"{ID_COLUMNS['features']!r} cannot be a feature column (features=): it is the name "
            f"of the id column, which holds the names of {var_name}; leave it out"
        )
        raise InputError(msg)


def _text_index(index: pd.Index, name: str) -> pd.Index:
    """``index`` as the ``str`` of each label in pandas' default string type (``str`` in
    pandas 3, object before; also when empty, which pandas would make object), named
    ``name``: as it is when it already holds them so (no Python string made per label)."""
    import pandas as pd

    default = pd.Index(["a"]).dtype
    if isinstance(index.dtype, pd.StringDtype) and index.dtype == default and not index.hasnans:
        return index.rename(name)
    return pd.Index([str(label) for label in index], dtype=default, name=name)


def concat_frames(frames: list[pd.DataFrame]) -> pd.DataFrame:
    import pandas as pd

    if len(frames) == 1:
        return frames[0]
    return pd.concat(frames, ignore_index=True)
