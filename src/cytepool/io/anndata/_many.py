"""Many files, one cube: :func:`from_anndata` and :func:`from_mudata_cells` of a list of paths.

Each file is pooled on its own -- in this process and ``jobs - 1`` worker processes, at most
``jobs`` at once, or on the workers of a dask distributed client (see
:class:`~cytepool.io.anndata._running.Runner`) -- into a small cube, and the cubes are added up
on the caller's side, aligned by id. Nothing but the cubes and the per-file covariate tables
travels back, so memory is bounded by ``jobs`` times one file's working set plus the result.

The pooling of one file is done by the caller's ``pool_file`` (a module-level function, so
that it pickles by name): :func:`cytepool.io.anndata._cells.pool_file`, given here to keep the
imports pointing one way. The steps:

1. a survey of every file (its cells, and the ids of its features per modality), so that
   features that differ are an error before any cube is added, and the progress bar knows
   how many cells there are (in this process, while the workers pool; on a client, on its
   workers);
2. the pooling of every file (a cube, and its sample and group covariate candidates);
3. the sum: samples and groups are the sorted union of the files' ids, features those of the
   first file (or those all files share), covariates merged with the single-file rules.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cytepool import _progress, _words
from cytepool._assemble import from_parts
from cytepool._labels import check_one_to_one
from cytepool._pool_sums import overflows_kept
from cytepool._records import Provenance, stamp
from cytepool.errors import InputError, InputTypeError, NotCountsWarning
from cytepool.io.anndata._covariates import (
    both_reasons,
    check_names,
    covariate_table,
    labelled,
    unstorable,
)
from cytepool.io.anndata._readers import survey_cells, survey_modalities
from cytepool.io.anndata._running import Runner, give_back_memory, naming_file, portable
from cytepool.layers import Accumulator

if TYPE_CHECKING:
    import pandas as pd

    from cytepool.cube import Cube

__all__ = ["FILE_SAMPLE", "check_single", "pool_files", "usable_cpus"]

#: The obs column that holds a file's sample id when each file is one sample.
FILE_SAMPLE = "cytepool:file"
_ANNDATA = ""  # the one "modality" of an AnnData file
_DUPLICATES = ("error", "add")
_MAY_OVERFLOW = ("counts", "squares")  # the others count cells


def check_single(options: Mapping[str, Any]) -> str:
    """Refuse the options of several files given with one input; the sample key."""
    if options["sample_ids"] is not None:
        msg = "sample_ids= names the sample of each file: give a list of paths"
        raise InputError(msg)
    if _is_intersection(options["features"]):
        msg = "features='intersection' pools the features files share: give a list of paths"
        raise InputError(msg)
    if options["sample_key"] is None:
        msg = "sample_key= is required (sample_ids= only with a list of paths)"
        raise InputError(msg)
    for name in ("samples", "groups", "features"):
        check_names(options[name], name)
    return str(options["sample_key"])


def _is_intersection(features: Any) -> bool:
    """Whether ``features`` is ``"intersection"`` (not a list or array of column names, which
    numpy or pandas would compare with it name by name)."""
    return isinstance(features, str) and features == "intersection"


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Task:
    """One file to pool: its path as given, and its sample when each file is one."""

    index: int
    path: str
    sample: tuple[str, str] | None
    options: Mapping[str, Any]
    mudata: bool
    flags: bool  # messages in the words of the command line


@dataclass
class _Part:
    """What a worker sends back for one file: small, never cells."""

    cubes: dict[str, Cube]
    cells: int
    samples: tuple[pd.DataFrame, dict[str, str]]
    groups: tuple[pd.DataFrame, dict[str, str]]
    columns: list[str]  # the obs columns, in order
    size: int  # bytes
    fingerprints: dict[str, str]
    # the ids of each axis (sample, group) and a label of each, as in the file
    labels: tuple[tuple[list[str], list[Any]], ...]
    caught: list[tuple[type[Warning], str]] = field(default_factory=list)
    # an AnnData file of whole numbers whose int64 sums of squares do not fit: its error,
    # raised unless another file makes the layers float64 (its cube holds float64 sums)
    overflow: Exception | None = None


def pool_files(
    paths: Sequence[str | os.PathLike[str]],
    pool_file: Callable[..., Any],
    *,
    mudata: bool,
    options: Mapping[str, Any],
) -> Any:
    """The cube (a cube per modality with ``mudata``) of the cells of all ``paths``."""
    tasks = _tasks(paths, pool_file, mudata, options)
    jobs = _jobs(options["jobs"], len(tasks))
    with Runner(jobs, options["client"]) as run:
        # in worker processes, the pooling starts before the surveys (in this process), so no
        # worker waits for the plan; on a client, it is queued behind them
        survey_results = run(_survey, tasks, None, here=True)
        pooled = run(_pool_one, tasks, pool_file, here=False)
        surveys = dict(survey_results)
        plan = _features(tasks, [surveys[t.index] for t in tasks], options["features"])
        total = sum(survey[0] for survey in surveys.values())
        bar = _progress.Progress(total, "pooling", "cells", enabled=options["progress"])
        try:
            parts = {}
            for index, part in pooled:
                parts[index] = part
                bar.update(part.cells)
        finally:
            bar.close()
    ordered = [parts[task.index] for task in tasks]
    _warn_again(ordered)
    cubes = _combine(tasks, ordered, plan, options)
    return cubes if mudata else cubes[_ANNDATA]


def _tasks(
    paths: Sequence[str | os.PathLike[str]],
    pool_file: Callable[..., Any],
    mudata: bool,
    options: Mapping[str, Any],
) -> list[_Task]:
    if not paths:
        msg = "expected at least one path, found an empty list"
        raise InputError(msg)
    if not all(isinstance(path, str | os.PathLike) for path in paths):
        msg = f"expected a list of paths (str or os.PathLike), found {paths!r}"
        raise InputTypeError(msg)
    texts = [os.fspath(path) for path in paths]
    seen: dict[str, int] = {}
    for i, text in enumerate(texts):
        other = texts[seen.setdefault(os.path.realpath(text), i)]
        if seen[os.path.realpath(text)] != i:
            twice = "" if other == text else f" (as {other!r} and {text!r})"
            msg = f"the file {text} is given twice{twice}"
            raise InputError(msg)
    if not isinstance(options["duplicates"], str) or options["duplicates"] not in _DUPLICATES:
        msg = f"duplicates must be 'error' or 'add', found {options['duplicates']!r}"
        raise InputError(msg)
    check_names(options["samples"], "samples")
    check_names(options["groups"], "groups")
    features = options["features"]
    if isinstance(features, str) and features != "intersection":
        msg = (
            f"features must be a list of var columns or 'intersection', found {features!r}: "
            f"give a list of columns, e.g. features=[{features!r}]"
        )
        raise InputError(msg)
    samples = _file_samples(options, len(texts))
    flags = _words.option("layer").startswith("--")
    settings = {**options, "pool_file": pool_file}
    for name in ("adata", "mdata", "client", "jobs", "progress"):
        settings.pop(name, None)
    return [
        _Task(i, text, _sample(samples, i), settings, mudata, flags) for i, text in enumerate(texts)
    ]


def _sample(samples: list[str] | None, i: int) -> tuple[str, str] | None:
    return None if samples is None else (FILE_SAMPLE, samples[i])


def _file_samples(options: Mapping[str, Any], n_files: int) -> list[str] | None:
    """The sample of each file (when each file is one), else None: samples from sample_key."""
    ids = options["sample_ids"]
    if ids is None:
        if options["sample_key"] is None:
            msg = "give sample_key= (an obs column) or sample_ids= (one sample per file)"
            raise InputError(msg)
        return None
    if options["sample_key"] is not None:
        msg = "give sample_key= or sample_ids=, not both"
        raise InputError(msg)
    if isinstance(ids, str) or not all(isinstance(i, str) for i in ids):
        msg = f"sample_ids must be a list of strings, one per file, found {ids!r}"
        raise InputTypeError(msg)
    if len(ids) != n_files:
        msg = f"sample_ids has {len(ids)} ids for {n_files} files; expected one per file"
        raise InputError(msg)
    return list(ids)


def _jobs(jobs: int | None, n_files: int) -> int:
    if jobs is None:
        jobs = usable_cpus()
    if isinstance(jobs, bool) or not isinstance(jobs, int | np.integer) or jobs < 1:
        msg = f"jobs must be a positive integer, found {jobs!r}"
        raise InputError(msg)
    return min(int(jobs), n_files)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), else the CPUs of the machine."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------------------------
# The work of one file (in a worker)
# ---------------------------------------------------------------------------------------------


def _survey(task: _Task, _: Any) -> tuple[int, dict[str, list[str]]]:
    """The cells of a file and the ids of its features, per modality."""
    options = task.options
    with _words.speaking(command_line=task.flags):
        try:
            if not task.mudata:
                layer, raw = options["layer"], options["use_raw"]
                cells, index = survey_cells(task.path, layer=layer, use_raw=raw)
                return cells, {_ANNDATA: _ids(index)}
            found = survey_modalities(task.path)
            wanted = options["modalities"] or list(found)
            missing = [name for name in wanted if name not in found]
            if missing:
                msg = f"{task.path} has no modality {missing[0]!r} (it has {list(found)})"
                raise InputError(msg)
            cells = sum(found[name][0] for name in wanted)
            return cells, {name: _ids(found[name][1]) for name in wanted}
        except Exception as error:
            raise portable(error) from None


def _ids(index: pd.Index) -> list[str]:
    """The ids of an index as strings (through numpy: iterating a pyarrow-backed index is slow)."""
    return [str(i) for i in index.to_numpy(dtype=object)]


def _pool_one(task: _Task, pool_file: Callable[..., Any]) -> _Part:
    """Pool one file: its cube(s), and its covariate candidates of both axes."""
    options = task.options
    with _words.speaking(command_line=task.flags), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with contextlib.ExitStack() as stack:  # MuData files raise it: a cube per modality
                kept = [] if task.mudata else stack.enter_context(overflows_kept())
                pooled, obs, obs_name = pool_file(
                    task.path, task.sample, options, mudata=task.mudata
                )
            cubes = pooled if task.mudata else {_ANNDATA: pooled}
            sample_key = options["sample_key"] if task.sample is None else task.sample[0]
            keys = (sample_key, options["group_key"])
            tables, labels = [], []
            for key, role, axis, named in zip(
                keys,
                ("sample_key", "group_key"),
                ("sample", "group"),
                ("samples", "groups"),
                strict=True,
            ):
                codes, ids, values = labelled(obs, key, role, obs_name)
                labels.append((ids, values))
                columns = options[named]
                tables.append(covariate_table(obs, codes, ids, columns, axis, set(keys), obs_name))
        except Exception as error:
            raise portable(error) from None
    cells = int(sum(int(np.sum(cube.cells)) for cube in cubes.values()))
    found = [(w.category, str(w.message)) for w in caught]
    columns = [str(name) for name in obs.columns if name not in keys]
    fingerprints = {name: cube.fingerprint for name, cube in cubes.items()}
    size = _file_bytes(task.path)
    give_back_memory()
    overflow = portable(kept[0]) if kept else None
    samples, groups = tables
    pairs = tuple(labels)
    return _Part(cubes, cells, samples, groups, columns, size, fingerprints, pairs, found, overflow)


def _warn_again(parts: Sequence[_Part]) -> None:
    """Warn on this side what the workers were warned of, each warning once."""
    seen = set()
    for part in parts:
        for category, message in part.caught:
            key = category if category is NotCountsWarning else (category, message)
            if key not in seen:
                seen.add(key)
                warnings.warn(message, category, stacklevel=_words.stacklevel())


def _file_bytes(path: str) -> int:
    """The size of a file, or of every file in a directory (a .zarr store)."""
    where = Path(path)
    if where.is_dir():
        return sum(p.stat().st_size for p in where.rglob("*") if p.is_file())
    return where.stat().st_size


# ---------------------------------------------------------------------------------------------
# Features: the same in every file, or those all share
# ---------------------------------------------------------------------------------------------


def _features(
    tasks: Sequence[_Task], surveys: Sequence[tuple[int, dict[str, list[str]]]], mode: Any
) -> dict[str, list[str]]:
    """The feature ids of each modality: the first file's, or (intersection) those all share."""
    first = surveys[0][1]
    plan = {}
    for task, (_, found) in zip(tasks[1:], surveys[1:], strict=True):
        if set(found) != set(first):
            msg = (
                f"{task.path} has the modalities {sorted(found)}, {tasks[0].path} has "
                f"{sorted(first)}; choose those to pool with "
                f"{_words.option('modality')}"
            )
            raise InputError(msg)
    for name, ids in first.items():
        shared = set(ids)
        for task, (_, found) in zip(tasks[1:], surveys[1:], strict=True):
            theirs = set(found[name])
            if theirs != set(ids) and not _is_intersection(mode):
                raise _different_features(tasks[0].path, task.path, ids, found[name], name)
            shared &= theirs
        plan[name] = [i for i in ids if i in shared]
        if not plan[name]:
            msg = f"the files share no feature{_of_modality(name)}: there is nothing to pool"
            raise InputError(msg)
    return plan


def _different_features(
    first: str, other: str, mine: list[str], theirs: list[str], modality: str
) -> InputError:
    extra = [i for i in theirs if i not in set(mine)]
    missing = [i for i in mine if i not in set(theirs)]
    msg = (
        f"the files do not have the same features{_of_modality(modality)}: {other} has "
        f"{len(extra)} that {first} lacks {_some(extra)} and lacks {len(missing)} of its "
        f"{_some(missing)}; features are aligned by id, in any order; to pool the "
        f"{len(set(mine) & set(theirs))} they share, pass {_words.option('intersection')}"
    )
    return InputError(msg)


def _some(ids: list[str]) -> str:
    return "(" + ", ".join(map(repr, ids[:5])) + (", ...)" if len(ids) > 5 else ")")


def _of_modality(name: str) -> str:
    return f" in modality {name!r}" if name else ""


# ---------------------------------------------------------------------------------------------
# The sum
# ---------------------------------------------------------------------------------------------


def _combine(
    tasks: Sequence[_Task],
    parts: Sequence[_Part],
    plan: Mapping[str, list[str]],
    options: Mapping[str, Any],
) -> dict[str, Cube]:
    """One cube per modality: the parts added up, with merged tables and provenance."""
    names = [task.path for task in tasks]
    _check_labels(tasks, parts, names)
    _check_overflows(tasks, parts)
    every = [cube for part in parts for cube in part.cubes.values()]
    sample_ids = sorted({str(i) for cube in every for i in cube.samples.index})
    group_ids = sorted({str(i) for cube in every for i in cube.groups.index})
    samples, why_sample = _merged(
        [part.samples for part in parts], names, "sample", options["samples"], set(), sample_ids
    )
    exclude = set(samples.columns) if options["groups"] is None else set()
    groups, why_group = _merged(
        [part.groups for part in parts], names, "group", options["groups"], exclude, group_ids
    )
    columns = list(dict.fromkeys(name for part in parts for name in part.columns))
    dropped = {
        name: both_reasons(why_sample.get(name), why_group.get(name))
        for name in columns
        if name not in samples.columns and name not in groups.columns
    }
    report = {
        "samples": [str(c) for c in samples.columns],
        "groups": [str(c) for c in groups.columns],
        "dropped": dropped,
    }
    cubes = {}
    for modality, feature_ids in plan.items():
        mine = [part.cubes[modality] for part in parts]
        features, feature_report = _merged_features(mine, names, feature_ids, options)
        layers, cells = _summed(mine, names, (group_ids, sample_ids, feature_ids), options)
        records = _records(tasks, parts, modality, report, feature_report)
        cubes[modality] = from_parts(
            layers,
            samples=samples,
            groups=groups,
            features=features,
            cells=cells,
            provenance=records,
        )
    return cubes


def _check_overflows(tasks: Sequence[_Task], parts: Sequence[_Part]) -> None:
    """Raise the int64 overflow of the first file whose sums of squares did not fit, unless
    another file's layers are float64: then the layers of all are, as pooling the files
    concatenated gives, and each such file's float64 sums stand."""
    pairs = zip(tasks, parts, strict=True)
    errors = [(task.path, part.overflow) for task, part in pairs if part.overflow is not None]
    if errors and not any(part.overflow is None and _is_float(part) for part in parts):
        path, error = errors[0]
        with naming_file(path):
            raise error


def _is_float(part: _Part) -> bool:
    """Whether the file's sums are float64 (of its one cube: an AnnData file's; ``detected``
    is int64 whatever the values)."""
    layers = [layer for cube in part.cubes.values() for layer in cube.layers.values()]
    return any(layer.dtype.kind == "f" for layer in layers)


def _check_labels(tasks: Sequence[_Task], parts: Sequence[_Part], names: Sequence[str]) -> None:
    """Refuse labels that do not match their ids one to one across files (``1`` in one file
    and ``1.0`` or ``"1"`` in another), as the labels of one file are refused."""
    options = tasks[0].options
    sample_key = options["sample_key"] if tasks[0].sample is None else FILE_SAMPLE
    keys = ((sample_key, "sample_key"), (options["group_key"], "group_key"))
    for axis, (key, role) in enumerate(keys):
        texts, values, sources = [], [], []
        for name, part in zip(names, parts, strict=True):
            ids, labels = part.labels[axis]
            texts += ids
            values += labels
            sources += [name] * len(ids)
        what = f"column {key!r} of the files' obs ({_words.option(role)})"
        check_one_to_one(values, texts, what, sources, "file")


def _summed(
    cubes: Sequence[Cube],
    names: Sequence[str],
    axes: tuple[list[str], list[str], list[str]],
    options: Mapping[str, Any],
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The layers and cells of the cubes added up on the axes ``(groups, samples, features)``."""
    import pandas as pd

    group_index, sample_index = pd.Index(axes[0]), pd.Index(axes[1])
    shape = (len(axes[0]), len(axes[1]), len(axes[2]))
    owner = np.full(shape[:2], -1, dtype=np.intp)
    cells = Accumulator(np.dtype(np.int64), shape[:2], where="cells")
    sums = {
        name: Accumulator(
            np.result_type(*(cube.layers[name].dtype for cube in cubes)),
            shape,
            where=f"layer {name!r}",
        )
        for name in cubes[0].layers
    }
    for i, cube in enumerate(cubes):
        rows: Any = np.ix_(
            group_index.get_indexer(cube.groups.index), sample_index.get_indexer(cube.samples.index)
        )
        present = np.asarray(cube.cells) > 0
        mine = owner[rows]
        if options["duplicates"] != "add":
            _check_duplicates(mine, present, cube, names, i)
        owner[rows] = np.where(present & (mine < 0), i, mine)
        cells.add(np.asarray(cube.cells, dtype=np.int64), rows)
        columns = pd.Index(cube.features.index).get_indexer(axes[2])
        for name, total in sums.items():
            block = cube.to_numpy(name)[:, :, columns]
            if name in _MAY_OVERFLOW:
                _check_room(total, block, rows, (name, names[i]), axes)
            total.add(block, rows)
    return {name: total.result() for name, total in sums.items()}, cells.result()


def _check_room(
    total: Accumulator,
    block: np.ndarray,
    rows: Any,
    what: tuple[str, str],
    axes: tuple[list[str], list[str], list[str]],
) -> None:
    """Raise SumOverflowError if adding a file's sums ``block`` at ``rows`` to ``total``
    makes a sum that does not fit the layer's type, naming (as for one file) the layer,
    group and sample, and the file: ``what`` is the layer and the file."""
    from cytepool._pool_sums import Overflow, overflow_error

    before = total.acc[rows]
    if total.dtype.kind == "f":
        with np.errstate(over="ignore"):
            over = ~np.isfinite((before + block).astype(total.dtype))
    else:  # sums of values >= 0: room for the block
        over = before > np.iinfo(total.dtype).max - block
    wrong = over.any(axis=2)
    if not wrong.any():
        return
    g, s = np.argwhere(wrong)[0]
    profile = int(rows[0][g, 0]) * len(axes[1]) + int(rows[1][0, s])
    error = Overflow(profile, what[0])
    raise overflow_error(error, axes[0], axes[1], what[1])


def _check_duplicates(
    owner: np.ndarray, present: np.ndarray, cube: Cube, names: Sequence[str], i: int
) -> None:
    both = present & (owner >= 0)
    if not both.any():
        return
    g, s = np.argwhere(both)[0]
    msg = (
        f"the profile of group {str(cube.groups.index[g])!r} and sample "
        f"{str(cube.samples.index[s])!r} is in two files, {names[owner[g, s]]} and {names[i]} "
        f"({int(both.sum())} such profiles); if a sample is split over files, pass "
        f"{_words.option('duplicates')} to add them"
    )
    raise InputError(msg)


def _merged(
    tables: Sequence[tuple[pd.DataFrame, dict[str, str]]],
    names: Sequence[str],
    axis: str,
    named: Sequence[str] | None,
    exclude: set[str],
    ids: list[str],
) -> tuple[pd.DataFrame, dict[str, str]]:
    """The covariate table of all files, and why the other columns are not covariates.

    A column is one if it is one in every file (constant within each id there) and an id
    that is in several files has the same value in each.
    """
    import pandas as pd

    from cytepool._records import ID_COLUMNS

    order = list(dict.fromkeys(c for table, _ in tables for c in table.columns))
    kept: dict[str, Any] = {}
    why: dict[str, str] = {}
    for column in order:
        if column in exclude:
            continue
        lacking = [i for i, (table, _) in enumerate(tables) if column not in table.columns]
        if lacking:
            reason = tables[lacking[0]][1].get(column)
            where = names[lacking[0]]
            why[column] = f"{reason} in {where}" if reason else f"not a column of {where}"
            continue
        values, conflict = _values(column, tables, names, axis)
        if conflict is None:
            kept[column] = values.reindex(ids).reset_index(drop=True)
        elif named is not None:
            msg = (
                f"column {column!r} {conflict}: it cannot be a {axis} covariate "
                f"({_words.option(f'{axis}s')})"
            )
            raise InputError(msg)
        else:
            why[column] = conflict
    for i, (_, reasons) in enumerate(tables):
        for column, reason in reasons.items():
            if column not in why and column not in kept and column not in exclude:
                why[column] = f"{reason} in {names[i]}"
    table = pd.DataFrame(kept, index=pd.RangeIndex(len(ids)))
    table.index = pd.Index(ids, name=ID_COLUMNS[f"{axis}s"])
    return table, why


def _values(
    column: str,
    tables: Sequence[tuple[pd.DataFrame, dict[str, str]]],
    names: Sequence[str],
    axis: str,
) -> tuple[pd.Series, str | None]:
    """One value per id of ``column`` over the files; or why the files disagree.

    The values are joined as ``anndata.concat`` joins the files' obs (categoricals unified,
    then the tables concatenated by pandas, which gives a column missing in a whole file
    the others' type or not, by its version), then each id's value taken from its first file.
    """
    first: dict[str, tuple[Any, int]] = {}
    for i, (table, _) in enumerate(tables):
        series = table[column]
        for key, value in zip(map(str, table.index), series.to_numpy(dtype=object), strict=True):
            other, j = first.setdefault(key, (value, i))
            if j != i and not _same(other, value):
                return series, (
                    f"varies within {axis} {key!r} ({_words.brief(other)} in {names[j]} and "
                    f"{_words.brief(value)} in {names[i]})"
                )
    columns = _unified([_by_id(table[column]) for table, _ in tables])
    joined = _concatenated(columns)
    joined = joined[~joined.index.duplicated()]
    reason = unstorable(joined)  # a column the cells in memory keep is kept, whatever its types
    return joined, None if reason is None else _type_conflict(joined, columns, names) or reason


def _by_id(series: pd.Series) -> pd.Series:
    """``series`` indexed by the text of its ids."""
    import pandas as pd

    return series.set_axis(pd.Index([str(k) for k in series.index]))


def _unified(columns: list[pd.Series]) -> list[pd.Series]:
    """The files' columns (one each), categoricals of one type as ``anndata.concat`` makes
    them before it concatenates (its ``unify_dtypes``); other columns as they are."""
    import pandas as pd

    if not all(isinstance(c.dtype, pd.CategoricalDtype) for c in columns):
        return columns
    target = _categories_as_concat(columns)
    if target is None:  # categories without a common order: left to pandas (objects)
        return columns
    return [c.astype(target) for c in columns]


def _concatenated(columns: list[pd.Series]) -> pd.Series:
    """The files' columns (one each) concatenated as ``anndata.concat`` concatenates obs:
    as one DataFrame (not Series: pandas < 3 then gives a column missing in a whole file the
    others' type, as in memory; numpy types are promoted: bool and int64 give int64)."""
    import pandas as pd

    with warnings.catch_warnings():
        # pandas 2.x warns that pandas 3 will not ignore the type of a column missing in a
        # whole frame: the result of this pandas is the one anndata.concat gives
        warnings.filterwarnings("ignore", "The behavior of DataFrame concatenation", FutureWarning)
        joined = pd.concat([c.to_frame() for c in columns])
    return joined.iloc[:, 0]


def _type_conflict(joined: pd.Series, columns: list[pd.Series], names: Sequence[str]) -> str | None:
    """Why a column of different types in two files (dates and numbers, text and numbers),
    which pandas joined as objects a table cannot hold, is not a covariate. A column missing
    in a whole file has no type of its own."""
    typed = [(i, c.dtype) for i, c in enumerate(columns) if not c.isna().all()]
    if joined.dtype != object or any(dtype == np.dtype(object) for _, dtype in typed):
        return None
    other = next((i for i, dtype in typed if dtype != typed[0][1]), None)
    if other is None:
        return None
    i, dtype = typed[0]
    return f"is {dtype} in {names[i]} and {columns[other].dtype} in {names[other]}"


def _categories_as_concat(pieces: list[pd.Series]) -> Any:
    """The type ``anndata.concat`` gives categorical ``pieces`` (its ``try_unifying_dtype``).

    None of them ordered: the union of their categories, in natural order, unordered. Else,
    when every piece with categories is ordered with the same ones in the same order, that
    type (ordered); otherwise ``object``. None when the categories have no common order.
    """
    import pandas as pd
    from natsort import natsorted

    dtypes = [p.dtype for p in pieces]
    union = functools.reduce(lambda a, b: a.union(b), (d.categories for d in dtypes))
    if not any(d.ordered for d in dtypes):
        try:
            return pd.CategoricalDtype(natsorted(union), ordered=False)
        except TypeError:  # categories of types without a common order
            return None
    typed = [d for d in dtypes if len(d.categories)]
    alike = all(
        d.ordered and len(d.categories) == len(union) and bool(np.all(d.categories == union))
        for d in typed
    )
    return typed[0] if typed and alike else object


def _same(a: Any, b: Any) -> bool:
    import pandas as pd

    if pd.isna(a) is True and pd.isna(b) is True:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _merged_features(
    cubes: Sequence[Cube], names: Sequence[str], ids: list[str], options: Mapping[str, Any]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The feature table: the first file's, with the columns every file has the same."""
    first = cubes[0].features.loc[ids]
    named = options.get("features")
    named = None if isinstance(named, str) else named
    dropped = []
    for column in first.columns:
        for i, cube in enumerate(cubes[1:], start=1):
            theirs = cube.features
            if column not in theirs.columns or not _same_column(
                first[column], theirs[column].loc[ids]
            ):
                if named is not None:
                    msg = (
                        f"feature column {column!r} differs between {names[0]} and {names[i]}"
                        f"{_types_of(first, theirs, column)}: a feature table column must be "
                        f"the same, values and type, in every file"
                    )
                    raise InputError(msg)
                dropped.append(str(column))
                break
    table = first.drop(columns=dropped)
    mode = "intersection" if _is_intersection(options.get("features")) else "same"
    report: dict[str, Any] = {"ids": mode, "n": len(ids), "dropped_columns": dropped}
    return table, report | _dropped_features(cubes[0])


def _same_column(mine: pd.Series, theirs: pd.Series) -> bool:
    """Whether two var columns (of the same features, in the same order) are the same as
    ``anndata.concat(merge="same")`` finds them: equal values of the same type
    (``Series.equals``: 1.0 and 1 are not)."""
    return bool(mine.reset_index(drop=True).equals(theirs.reset_index(drop=True)))


def _types_of(first: pd.DataFrame, theirs: pd.DataFrame, column: Any) -> str:
    """`` (of type float64 and int64)`` when the column is of two types in the two tables,
    else ``""``."""
    if column not in theirs.columns or first[column].dtype == theirs[column].dtype:
        return ""
    return f" (of type {first[column].dtype} and {theirs[column].dtype})"


def _dropped_features(cube: Cube) -> dict[str, Any]:
    """``{"dropped": {column: why}}``: the var columns a file's pooling left out (the one
    named ``feature_id``), from its record; else nothing."""
    features = cube.provenance[-1].parameters.get("features") if cube.provenance else None
    dropped = features.get("dropped") if isinstance(features, dict) else None
    return {"dropped": dict(dropped)} if dropped else {}


def _records(
    tasks: Sequence[_Task],
    parts: Sequence[_Part],
    modality: str,
    covariates: dict[str, Any],
    features: dict[str, Any],
) -> list[Provenance]:
    """A record per file (path, size, cells, and its cube's fingerprint), then the pooling's."""
    records = []
    for task, part in zip(tasks, parts, strict=True):
        cells = int(np.sum(part.cubes[modality].cells))
        of_file: dict[str, Any] = {"path": task.path, "bytes": part.size, "cells": cells}
        if task.sample is not None:
            of_file["sample"] = task.sample[1]
        records.append(stamp("pool_file", of_file, [part.fingerprints[modality]]))
    options = tasks[0].options
    parameters: dict[str, Any] = {"files": len(tasks)}
    if modality:
        parameters["modality"] = modality
    if tasks[0].sample is None:
        parameters["sample_key"] = options["sample_key"]
    else:
        parameters["sample_ids"] = "one sample per file"
    parameters |= {"group_key": options["group_key"], "features": features}
    parameters |= {"duplicates": options["duplicates"], "covariates": covariates}
    operation = "from_mudata_cells" if tasks[0].mudata else "from_anndata"
    inputs = [part.fingerprints[modality] for part in parts]
    records.append(stamp(operation, parameters, inputs))
    return records
