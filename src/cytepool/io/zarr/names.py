"""Node names: the one rule that writers and readers of tables, cubes and arrays share.

A child node of a Zarr group is a directory named after it, so its name must be one path
component that every common file system can hold and that means the same everywhere. Readers
refuse what this rule refuses (with :class:`~cytepool.errors.FormatError`), and writers refuse
the same names (with ``ValueError``) and, besides, the names the Zarr v3 specification reserves
(see :func:`node_name_problem`), so that a writer never stores what a reader refuses.
"""

from __future__ import annotations

__all__ = ["MAX_NAME_BYTES", "node_name_problem"]

MAX_NAME_BYTES = 255
"""The longest node name, in bytes of UTF-8: the limit of ext4, APFS, XFS and others."""

_SEPARATORS = ("/", "\\", "\0")
_METADATA_FILE = "zarr.json"


def node_name_problem(name: object, *, new: bool = False) -> str | None:
    """Say why ``name`` cannot name a Zarr node, or return None if it can.

    Every name must be a non-empty string other than ``.``, ``..`` and ``zarr.json``, without
    ``/``, ``\\`` or NUL, that encodes to UTF-8 in at most :data:`MAX_NAME_BYTES` bytes. A
    ``new`` name (one about to be written) must not, besides, start with ``__`` (reserved by the
    Zarr v3 specification) or consist only of periods (Windows drops trailing periods); readers
    accept such names, which zarr-python and anndata write.

    Parameters
    ----------
    name
        The candidate name.
    new
        Whether the name is about to be written.

    Returns
    -------
    None if the name is valid, else what is wrong with it (to put in a message).

    Examples
    --------
    >>> node_name_problem("donor") is None
    True
    >>> node_name_problem("a/b")
    "it contains '/'"
    >>> node_name_problem("__x") is None, node_name_problem("__x", new=True)
    (True, "it starts with '__', which Zarr reserves")
    """
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a string"
    if name in ("", ".", "..", _METADATA_FILE):
        return "it is empty" if not name else f"it is {name!r}"
    for separator in _SEPARATORS:
        if separator in name:
            return f"it contains {separator!r}"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid Unicode (it holds a lone surrogate)"
    if size > MAX_NAME_BYTES:
        return f"it takes {size} bytes of UTF-8, more than {MAX_NAME_BYTES}"
    if new and name.startswith("__"):
        return "it starts with '__', which Zarr reserves"
    if new and set(name) == {"."}:
        return "it consists only of periods"
    return None
