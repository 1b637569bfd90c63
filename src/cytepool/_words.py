"""How messages name things: in the words of the Python API, or of the ``cytepool`` command.

Messages made deep inside (pooling, the AnnData bridge) ask this module for the name of the
matrix being pooled, for a cell's and a feature's name, and for how to spell an option
(``layer=`` in Python, ``--layer`` on the command line). Callers that know better say so with
:func:`speaking`, for the duration of a call, in this thread (a :class:`~contextvars.ContextVar`):
:func:`cytepool.io.anndata.from_anndata` knows it pools ``adata.raw.X``, and the command line
speaks in flags.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from cytepool.errors import CytepoolError, FormatError, InputError

__all__ = [
    "brief",
    "invalid_indices",
    "matrix",
    "option",
    "pick_counts",
    "place",
    "speaking",
    "stacklevel",
]

# An option's spelling in Python and on the command line
_OPTIONS = {
    "layer": ("layer=", "--layer"),
    "use_raw": ("use_raw=True", "--raw"),
    "allow_float": ("allow_float=True", "--allow-float"),
    "samples": ("samples=", "--sample-covariates"),
    "groups": ("groups=", "--group-covariates"),
    "sample_key": ("sample_key", "--sample-key"),
    "group_key": ("group_key", "--group-key"),
    "modality": ("from_mudata_cells(path, modalities=[NAME])", "--modality NAME"),
    "intersection": ("features='intersection'", "--features intersection"),
    "duplicates": ("duplicates='add'", "--duplicates add"),
    "not_modality": ("pool it with from_anndata", "drop --modality to pool it"),
    "cube_to_anndata": (
        "open it with cytepool.io.read_cube (to_anndata makes a pseudobulk AnnData of it)",
        "to make a pseudobulk AnnData of it, run: cytepool export CUBE OUTPUT.h5ad",
    ),
}


@dataclasses.dataclass(frozen=True)
class _Words:
    command_line: bool = False  # spell options as flags
    matrix: str = "counts"  # the matrix being pooled
    pick: str = ""  # how to pick another matrix; empty: say to pool raw counts
    cells: Sequence[Any] | None = None  # the names of its rows
    features: Sequence[Any] | None = None  # the names of its columns
    indices: str = ""  # the array of a file holding its sparse indices ("X/indices of c.h5ad")


_PYTHON = _Words()
_WORDS: ContextVar[_Words | None] = ContextVar("cytepool_words", default=None)


def _current() -> _Words:
    return _WORDS.get() or _PYTHON


@contextlib.contextmanager
def speaking(**words: Any) -> Iterator[None]:
    """Use these words in messages made inside the ``with`` block (fields of ``_Words``)."""
    token = _WORDS.set(dataclasses.replace(_current(), **words))
    try:
        yield
    finally:
        _WORDS.reset(token)


def option(name: str) -> str:
    """How to spell the option ``name``: ``"layer="`` in Python, ``"--layer"`` as a flag."""
    python, flag = _OPTIONS[name]
    return flag if _current().command_line else python


def matrix() -> str:
    """The name of the matrix being pooled: ``"counts"`` unless a caller said otherwise."""
    return _current().matrix


def pick_counts() -> str:
    """What to do to pool raw counts instead of the matrix being pooled."""
    words = _current()
    if words.pick:
        return words.pick
    return "pool the raw counts instead (such as adata.layers['counts'] or adata.raw.X)"


def invalid_indices(message: str) -> CytepoolError:
    """The error for sparse indices out of range, described by ``message``: an InputError for
    a matrix in memory; a FormatError naming the array for one read from a file, which is
    damaged."""
    stored = _current().indices
    if stored:
        return FormatError(f"{message}: {stored} is damaged")
    return InputError(message)


def brief(value: Any) -> str:
    """A short text of a value for messages: 0.585, 'ctrl', 'a very long tex...'.

    Examples
    --------
    >>> import numpy as np
    >>> brief(np.float32(0.5854321)), brief("ctrl"), brief("a very long text indeed, too long")
    ('0.585432', "'ctrl'", "'a very long text ind...")
    """
    import numpy as np  # here: the command line imports this module, and starts without numpy

    value = value.item() if isinstance(value, np.generic) else value
    text = f"{value:.6g}" if isinstance(value, float) else repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def place(row: int, column: int) -> str:
    """``"row 3, column 5"`` in the matrix being pooled, with the names of both when known."""
    words = _current()
    cell = f" (cell {str(words.cells[row])!r})" if words.cells is not None else ""
    feature = "" if words.features is None else f" (feature {str(words.features[column])!r})"
    return f"row {row}{cell}, column {column}{feature}"


def stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn``, called from cytepool, of the first caller outside.

    Call it in the function that calls ``warnings.warn``.
    """
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and _in_cytepool(frame.f_globals.get("__name__", "")):
        frame = frame.f_back
        level += 1
    return level


def _in_cytepool(module: str) -> bool:
    return module == "cytepool" or module.startswith("cytepool.")
