"""Checks of an AnnData file's obs and var against its matrix, from metadata alone.

Before anndata reads (and allocates) a dataframe, the lengths its arrays declare are checked
against the matrix pooled (:func:`check_frame`); before that, a matrix whose shape disagrees
with obs or var is named as the damage where obs or var agree with themselves
(:func:`check_fit`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from cytepool.errors import FormatError
from cytepool.io.anndata._direct import matrix_shape
from cytepool.io.anndata._frames import is_group
from cytepool.io.anndata._sources import check_v2_strings, check_v3_strings

__all__ = ["PER_ROW", "check_fit", "check_frame", "index_key", "misfit", "row_lengths", "witness"]

PER_ROW = {"categorical": ("codes",), "nullable-integer": ("values", "mask")}
PER_ROW |= {"nullable-boolean": ("values", "mask"), "nullable-string-array": ("values", "mask")}


def check_fit(
    shape: tuple[int, int],
    frames: tuple[Any, Any],
    witness: tuple[int | None, int | None],
    names: tuple[str, str, str],
    bound: int,
) -> None:
    """Refuse a matrix of ``shape`` whose rows (columns) disagree with obs (var) where that
    frame is to be trusted: each of its columns and its index (:func:`row_lengths`) and the
    ``witness`` (X's rows and columns, for a layer, or None) agree on one length, and at
    least two say so. A :class:`FormatError` then names the matrix (``names``: its element,
    the file, the var's element), its shape and the lengths of obs and var (of their
    indexes). A frame that one array alone speaks for (an index) and disagrees with the matrix
    names both, either of which may be damaged, unless the array claims more entries than the
    file holds (``bound``, its bytes): that one, and a frame that disagrees with itself, are
    left to :func:`check_frame`, which names its array that disagrees with the matrix."""
    for axis, frame in enumerate(frames):
        extra = witness[axis]
        found = row_lengths(frame) + ([] if extra is None else [extra])
        if len(set(found)) != 1 or found[0] == shape[axis]:
            continue
        if len(found) > 1:
            raise misfit(shape, (_index_length(frames[0]), _index_length(frames[1])), names)
        if found[0] <= max(shape[axis], bound):  # one array alone: either may be damaged
            raise _either(shape, axis, found[0], names)


def _index_length(frame: Any) -> int | None:
    """The length of the index of the dataframe group ``frame`` (None if not plain to see)."""
    name = index_key(frame)
    lengths = [] if name is None else row_lengths(frame, [name])
    return lengths[0] if len(lengths) == 1 else None


def _either(
    shape: tuple[int, int], axis: int, length: int, names: tuple[str, str, str]
) -> FormatError:
    """The error for a matrix of a file whose ``shape`` disagrees with the one array of obs
    (``axis`` 0) or var (1) that holds a row, ``length`` entries: either may be damaged."""
    element, owner, var_name = names
    frame, unit = ("obs", "cell") if axis == 0 else (var_name, "feature")
    msg = (
        f"{element} of {owner} has shape {shape}, but {frame} has {length} entries in its one "
        f"array of a row (one per {unit}): one of the two is damaged"
    )
    return FormatError(msg)


def misfit(
    shape: tuple[int, int], lengths: tuple[int | None, int | None], names: tuple[str, str, str]
) -> FormatError:
    """The error for a matrix of a file (``names``: its element, the file, the var's
    element) whose ``shape`` disagrees with the ``lengths`` of obs and var (None: unknown)."""
    element, owner, var_name = names
    n_obs, n_var = ("?" if n is None else n for n in lengths)
    msg = (
        f"{element} of {owner} has shape {shape}, but obs has {n_obs} rows and {var_name} "
        f"{n_var} (one per cell and one per feature): the matrix is damaged"
    )
    return FormatError(msg)


def row_lengths(group: Any, names: Iterable[str] | None = None) -> list[int]:
    """The lengths of the columns (and index) of the dataframe group ``group``, or of those
    ``names``: one for each, or the distinct lengths of its arrays that hold one entry per
    row (as :func:`check_frame` finds them) when they disagree; none for a legacy compound
    dataset."""
    if not is_group(group):
        return []
    found: dict[str, set[int]] = {}
    for name, _, array, per_row in _arrays(group, names):
        if per_row:
            found.setdefault(name, set()).add(_length(array))
    return [length for lengths in found.values() for length in sorted(lengths)]


def _arrays(
    group: Any, names: Iterable[str] | None = None
) -> Iterator[tuple[str, str | None, Any, bool]]:
    """Each array of the dataframe group ``group`` (of its members ``names``): the member's
    name, the part's name (None: the member is the array), the array, and whether it holds
    one entry per row (a column, the index, a categorical's codes, a nullable column's values
    and mask)."""
    for name in group if names is None else names:
        node = group[name]
        if hasattr(node, "shape"):
            yield name, None, node, True
            continue
        per_row = PER_ROW.get(str(node.attrs.get("encoding-type", "")), ())
        for part in node:
            if hasattr(node[part], "shape"):
                yield name, part, node[part], part in per_row


def _length(array: Any) -> int:
    shape = tuple(array.shape)
    return int(shape[0]) if shape else 1


def witness(root: Any, element: str) -> tuple[int | None, int | None]:
    """What X's shape says of the rows of obs (and, for a layer, of the rows of var) when the
    matrix at ``element`` is not X: (None, None) if it is, or X's shape is not plain to see."""
    if element == "X" or (element.endswith("/X") and element != "raw/X") or "X" not in root:
        return None, None
    try:
        shape = matrix_shape(root["X"], "X")
    except FormatError:  # X itself damaged: it says nothing
        return None, None
    if shape is None:
        return None, None
    return shape[0], shape[1] if element.startswith("layers/") else None


def check_frame(group: Any, n_rows: int, bound: int, where: str) -> None:
    """Check the lengths of a dataframe's arrays before anndata reads (and allocates) them.

    An array of a row (the index, a column, a categorical's codes, a nullable column's values
    and mask) must have ``n_rows`` entries, the rows of the matrix; any other array (the
    categories) at most ``max(n_rows, bound)``, ``bound`` being the bytes the file or store
    holds. Else a :class:`FormatError` names the array: its metadata lies.
    """
    if not is_group(group):  # a legacy compound dataset
        return
    for name, part, array, per_row in _arrays(group):
        shown = f"array {name!r}" if part is None else f"{name}/{part}"
        most = None if part is None else max(n_rows, bound)
        _check_length(array, n_rows if per_row else None, most, f"{where}, {shown}")


def _check_length(array: Any, exact: int | None, most: int | None, where: str) -> None:
    shape = tuple(int(n) for n in array.shape)
    length = shape[0] if shape else 1
    if exact is not None and length != exact:
        msg = f"{where} has {length} entries, expected one per row ({exact}): it is damaged"
        raise FormatError(msg)
    if most is not None and math.prod(shape) > most:
        msg = f"{where} claims {math.prod(shape)} entries, more than the file holds: it is damaged"
        raise FormatError(msg)
    folder = _local_folder(array)
    if folder is not None and (folder / ".zarray").is_file():
        check_v2_strings(folder, where)
    elif folder is not None and (folder / "zarr.json").is_file():
        check_v3_strings(folder, where)


def _local_folder(array: Any) -> Path | None:
    """The folder of a zarr-python array in a local store; None for others (h5py's)."""
    store_path = getattr(array, "store_path", None)
    root = getattr(getattr(store_path, "store", None), "root", None)
    return None if root is None else Path(root) / str(getattr(store_path, "path", ""))


def index_key(frame: Any) -> str | None:
    """The member of the dataframe group ``frame`` that holds its index (anndata's attribute
    ``_index``), or None if ``frame`` is no group or names none it holds."""
    key = frame.attrs.get("_index") if is_group(frame) else None
    return key if isinstance(key, str) and key in frame else None
