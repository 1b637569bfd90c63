"""Zarr v3 groups: write_group, read_group_attributes, and node_type for any node."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from cytepool.errors import FormatError
from cytepool.io.zarr._store import as_path, read_document, write_document
from cytepool.io.zarr.fields import json_copy
from cytepool.io.zarr.metadata import (
    METADATA_FILE,
    GroupMetadata,
    check_attributes,
    parse_document,
)
from cytepool.io.zarr.store import StorePath, Version, is_url, refuse_url, shown

__all__ = ["node_type", "read_group_attributes", "read_node_document", "write_group"]


def write_group(path: str | os.PathLike[str], attributes: Mapping[str, Any] | None = None) -> None:
    """Write a Zarr v3 group's metadata, creating its directory if needed.

    Parameters
    ----------
    path
        The group's directory; its parent must exist.
    attributes
        JSON-serialisable attributes.

    Raises
    ------
    FileExistsError
        If the directory already has a zarr.json.
    FileNotFoundError
        If the parent directory does not exist.
    ValueError, TypeError
        If an attribute cannot be written as JSON; ValueError if path is a URL (cytepool
        writes local directories only).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> write_group(tmp / "g", {"encoding-type": "dict"})
    >>> read_group_attributes(tmp / "g")
    {'encoding-type': 'dict'}
    """
    refuse_url(path, "a Zarr group")
    directory = as_path(path)
    document = GroupMetadata(check_attributes(attributes)).to_json()
    if (directory / METADATA_FILE).exists():
        msg = f"{directory} already has a {METADATA_FILE}"
        raise FileExistsError(msg)
    directory.mkdir(exist_ok=True)
    write_document(directory, document)


def read_group_attributes(
    path: str | os.PathLike[str] | StorePath, *, storage_options: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Read and check a Zarr v3 group's metadata and return its attributes.

    Consolidated metadata, if present, is not used: each node is read from its own zarr.json.

    Parameters
    ----------
    path
        The group's directory, which holds its zarr.json, its URL (``https://``, ``s3://``,
        ``gs://``, ``az://``; needs ``cytepool[remote]``), or a node of an open store
        (:class:`~cytepool.io.zarr.store.StorePath`).
    storage_options
        For a URL: credentials, endpoint, region, ``anonymous``, timeouts, retries (see
        :class:`~cytepool.io.zarr.remote.RemoteStore`).

    Returns
    -------
    The attributes.

    Raises
    ------
    FileNotFoundError
        If there is no group metadata at path.
    ValueError
        If the metadata is invalid, describes an array, or belongs to a Zarr v2 store, or
        ``storage_options`` are given for a local path or hold an unknown key.
    ImportError
        If ``path`` is a URL and obstore (``cytepool[remote]``) is not installed.
    cytepool.errors.RemoteStoreError
        If a remote store cannot be reached (an ``OSError``).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> write_group(tmp)
    >>> read_group_attributes(tmp)
    {}
    """
    node = path if isinstance(path, StorePath) or is_url(path) else as_path(path)
    groups = _parsed_groups(node)
    known = None if groups is None else groups.get(node.key)  # type: ignore[union-attr]
    if known is not None:
        return dict(json_copy(known.attributes))  # the caller's own copy
    doc, _, where = read_document(node, storage_options, shared=True)  # parsed, then copied
    if isinstance(doc, dict) and doc.get("node_type") == "array":
        msg = f"{shown(node)} is a Zarr array, not a group ({where})"
        raise FormatError(msg)
    metadata = GroupMetadata.from_json(doc, where)
    if groups is None:
        return metadata.attributes
    groups[node.key] = metadata  # type: ignore[union-attr]
    return dict(json_copy(metadata.attributes))


def _parsed_groups(node: object) -> dict[str, GroupMetadata] | None:
    """The groups' metadata a handle whose documents never change keeps, by node (see
    ConsolidatedHandle), or None."""
    groups: dict[str, GroupMetadata] | None = getattr(
        getattr(node, "handle", None), "parsed_groups", None
    )
    return groups


def read_node_document(node: StorePath) -> tuple[Any, Version, str]:
    """The parsed zarr.json of a node of an open store, its version and its name for messages
    (FileNotFoundError if absent, FormatError if not strict JSON or too large)."""
    return read_document(node)


def node_type(path: str | os.PathLike[str] | StorePath) -> Literal["array", "group"]:
    """Whether the Zarr v3 node at ``path`` is an array or a group (its metadata is checked).

    Parameters
    ----------
    path
        The node's directory, which holds its zarr.json, or a node of an open store.

    Returns
    -------
    ``"array"`` or ``"group"``.

    Raises
    ------
    FileNotFoundError
        If there is no zarr.json at path.
    ValueError
        If the metadata is invalid or uses a feature this module does not support.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> write_group(tmp)
    >>> node_type(tmp)
    'group'
    """
    node = path if isinstance(path, StorePath) else as_path(path)
    parsed = getattr(getattr(node, "handle", None), "parsed", None)  # see ConsolidatedHandle
    if parsed is not None and node.key in parsed:  # type: ignore[union-attr]
        return "array"
    groups = _parsed_groups(node)
    if groups is not None and node.key in groups:  # type: ignore[union-attr]
        return "group"
    doc, stamp, where = read_document(node, shared=True)  # only parsed
    metadata = parse_document(doc, where)
    if isinstance(metadata, GroupMetadata):
        if groups is not None:
            groups[node.key] = metadata  # type: ignore[union-attr]
        return "group"
    if parsed is not None:
        parsed[node.key] = (metadata, stamp)  # type: ignore[union-attr]
    return "array"
