"""The modality names :func:`~cytepool.io.anndata.to_mudata` gives the groups of a cube.

A modality's name is a group in an ``.h5mu`` file and a directory in a MuData ``.zarr`` store
(``mod/<name>``, ``obsm/<name>``...), so it must be a name HDF5, Zarr and file systems take,
whatever the group id is (a cube takes any text as an id: ``""``, ``"."``, ``"a/b"``, a NUL, a
thousand letters). The rule, applied to each group id in the order of the groups:

1. each ``/`` and ``\\`` (path separators of HDF5, Zarr or Windows) and each control character
   (NUL, line breaks, tabs: Unicode category ``Cc``) becomes ``_``;
2. a name that is empty, only dots (``.``, ``..``: "this" and "parent" in a path), or the name
   of a Zarr metadata file (``zarr.json``, ``.zarray``, ``.zattrs``, ``.zgroup``,
   ``.zmetadata``, in any case) gets a leading ``_`` (``"."`` becomes ``"_."``);
3. a name longer than :data:`MAX_NAME_BYTES` bytes of UTF-8 keeps its first letters and ends
   in ``~`` and 8 hex digits of the BLAKE2b digest of the group id, within that length;
4. a name an earlier group has already taken gets a ``_`` appended, as many as needed (when
   that would pass the length, the first letters and ``~`` and the digest of the group id with
   the number of the attempt).

So a plain id (none of the above) is its own modality name, a ``/`` becomes ``_`` as it always
did, and the same group ids always give the same names. The record ``uns["cytepool"]``
lists the modality name of each group, from which :func:`~cytepool.io.anndata.from_mudata`
takes each group's id back exactly.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable

MAX_NAME_BYTES = 128
"""The most bytes of UTF-8 a modality name holds: a file name may hold 255 on most file
systems (143 on eCryptfs), and a shorter name leaves room for a path around it."""

_SEPARATORS = str.maketrans({"/": "_", "\\": "_"})
_ZARR_FILES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
_DIGITS = 8  # hex digits of the digest that ends a shortened name


def modality_names(group_ids: Iterable[object]) -> list[str]:
    """The modality name of each group id, unique, by the rule of this module."""
    names: list[str] = []
    taken: set[str] = set()
    for group in map(str, group_ids):
        name = _unique(_writable(group), taken, group)
        taken.add(name)
        names.append(name)
    return names


def _writable(group: str) -> str:
    """``group`` with the letters no store takes replaced, prefixed if no store takes it as
    a name, shortened if too long (rules 1 to 3)."""
    name = "".join(
        "_" if unicodedata.category(letter) == "Cc" else letter
        for letter in group.translate(_SEPARATORS)
    )
    if not name.strip(".") or name.casefold() in _ZARR_FILES:
        name = f"_{name}"
    if _fits(name):
        return name
    return _shortened(name, group)


def _unique(name: str, taken: set[str], group: str) -> str:
    """``name``, or with ``_`` appended until no earlier group has it (rule 4)."""
    attempt = 0
    candidate = name
    while candidate in taken:
        attempt += 1
        candidate = name + "_" * attempt
        if not _fits(candidate):
            candidate = _shortened(name, f"{group}\0{attempt}")
    return candidate


def _fits(name: str) -> bool:
    return len(name.encode("utf-8")) <= MAX_NAME_BYTES


def _shortened(name: str, key: str) -> str:
    """The first letters of ``name`` and ``~`` and the digest of ``key``, in the length."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=_DIGITS // 2).hexdigest()
    room = MAX_NAME_BYTES - len(digest) - 1
    head = name.encode("utf-8")[:room].decode("utf-8", errors="ignore")
    return f"{head}~{digest}"
