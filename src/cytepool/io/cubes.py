"""Cube files: a cube saved as a Zarr v3 group that any Zarr v3 reader can open.

A cube file is a directory, by convention named ``*.cube.zarr``::

    example.cube.zarr/
        zarr.json          group: format, format_version, shape, layers, digests (with
                           their algorithm), fingerprint, metadata, provenance,
                           attributes_digest, tables (each column's encoding and digest)
        samples/           the sample table (anndata dataframe, index "sample_id")
        groups/            the group table (index "group_id")
        features/          the feature table (index "feature_id")
        cells              int array (n_groups, n_samples)
        normalization      float64 array (n_groups, n_samples), attribute "method" (optional)
        layers/
            <name>         array (n_groups, n_samples, n_features), chunks (1, s, f)

:func:`write_cube` builds the store in a temporary sibling directory and moves it into
place in one step (see :mod:`cytepool.io._atomic`); :func:`read_cube` opens the store once,
reads the attributes, the tables, cell numbers and normalization through that one handle,
checks them against the stored digests (a table's frame is built from what was read when it is
first used), and leaves the layers on disk as :class:`~cytepool.io.zarr.ZarrArray` objects.
The layout, every attribute, the versioning rule, what concurrent readers and writers see and
the crash behaviour are described in "Cube files and provenance records" in the documentation.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from cytepool._assemble import from_parts, parts_of
from cytepool.errors import (
    FormatError,
    InputError,
    InputTypeError,
    StoreChangedError,
    StoredTypeError,
)
from cytepool.io._atomic import replace_directory
from cytepool.io._cube_tables import (
    StoredColumn,
    column_nodes,
    parse_table_columns,
    read_cube_table,
    read_lazy_cube_table,
)
from cytepool.io.tables.backends import check_backend, check_installed
from cytepool.io.tables.gather import gather_documents
from cytepool.io.zarr import (
    DATA_TYPES,
    METADATA_FILE,
    check_compression,
    open_array,
    read_group_attributes,
    write_array,
    write_group,
)
from cytepool.io.zarr._store import locate, read_document, text_path
from cytepool.io.zarr.consolidated import (
    consolidated_documents,
    fetch_ahead,
    read_through,
    write_consolidated_group,
)
from cytepool.io.zarr.groups import read_node_document
from cytepool.io.zarr.metadata import GroupMetadata
from cytepool.io.zarr.names import node_name_problem
from cytepool.io.zarr.store import (
    LocalHandle,
    LocalStore,
    StoreHandle,
    StorePath,
    join,
    reading,
    refuse_url,
)

if TYPE_CHECKING:
    from cytepool.cube import Cube
    from cytepool.fingerprint import Digests
    from cytepool.io.zarr import ZarrArray

__all__ = ["FORMAT", "FORMAT_VERSION", "read_cube", "write_cube"]

FORMAT = "cytepool.cube"
"""The value of the ``format`` attribute of every cube file."""

FORMAT_VERSION = "1.2"
"""The format version this module writes: ``"<major>.<minor>"``.

1.1 added ``attributes_digest``; files of format 1.0, which lack it, are read as before.
1.2 made every digest, and the fingerprint, with BLAKE3 instead of SHA-256, named in
``digests["algorithm"]``; files of formats 1.0 and 1.1 are read and verified with SHA-256,
and a cube read from one keeps the SHA-256 fingerprint the file stores.
"""

_MAJOR, _MINOR = (int(part) for part in FORMAT_VERSION.split("."))
_ATTRIBUTES_1_0 = (
    "format",
    "format_version",
    "shape",
    "layers",
    "digests",
    "fingerprint",
    "metadata",
    "provenance",
)
_ATTRIBUTES_1_1 = (*_ATTRIBUTES_1_0, "attributes_digest")
_REQUIRED_ATTRIBUTES = (*_ATTRIBUTES_1_1, "tables")  # format 1.2
_TABLES = (("samples", "sample_id"), ("groups", "group_id"), ("features", "feature_id"))
_TABLE_AXES = {"groups": 0, "samples": 1, "features": 2}  # the axis of the shape each describes
_LAYER_DTYPES = frozenset({"int32", "int64", "uint32", "uint64", "float32", "float64"})
_CHUNK_BYTES = 1 << 20  # the decoded size a layer chunk aims at
_PROFILE_AXES: dict[str, Any] = {"dimension_names": ("groups", "samples")}
_WINDOWS_CHARACTERS = ':*?"<>|'
_ATTEMPTS = 16
_PARTS = ("samples", "groups", "features", "cells", "normalization")  # read when opening

# ---------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------


def write_cube(
    cube: Cube,
    path: str | os.PathLike[str],
    *,
    compression: str | None = "gzip",
    level: int | None = None,
    overwrite: bool = False,
) -> None:
    """Save a cube as a cube file, a Zarr v3 group (see the module documentation).

    The store appears at ``path`` only once it is complete, so a write that fails leaves
    no store there; with ``overwrite=True`` it leaves the old store as it was. When two
    writers write the same path at the same time, with ``overwrite=True`` both succeed and
    the path holds one of the two cubes, complete; with ``overwrite=False`` one of them
    raises FileExistsError. Lazy layers are read, and their values checked, one group at a
    time. Each group is hashed as it is
    written, and the digests are stored with the file, so the fingerprint of the saved cube
    needs no further pass over its values.

    Parameters
    ----------
    cube
        The cube to save.
    path
        The directory to create, by convention ending in ``.cube.zarr``. Its parent must
        exist.
    compression
        ``"gzip"`` (the default), ``"zstd"`` (Python 3.14 or newer, or the
        ``backports.zstd`` package cytepool depends on for older Pythons) or None for no
        compression.
    level
        The compression level: 0 to 9 for gzip (default 4), -131072 to 22 for zstd
        (default 3); None without compression.
    overwrite
        Replace what is at ``path``, the whole directory, if it is a cube file (a Zarr
        group whose format is ``"cytepool.cube"``) or an empty directory. Nothing else is
        ever replaced, nor the working directory or one that holds it.

    Raises
    ------
    TypeError
        If ``cube`` is not a Cube, or an argument has the wrong type.
    ValueError
        If ``compression`` or ``level`` is invalid, ``path`` is a URL, or a lazy layer
        gives a value that breaks a constraint. Also if a layer name cannot name a Zarr
        node on every file system: empty, ``.`` or ``..``, starting with ``__``, holding
        one of ``/ \\ : * ? " < > |`` or NUL, taking more than 255 bytes of UTF-8, or
        differing from another only in case.
    OverflowError
        If a sum of a derived lazy layer does not fit (see "Sums" in Cube).
    FileExistsError
        If ``path`` exists and ``overwrite`` is False, or it is not something
        ``overwrite`` replaces.
    FileNotFoundError
        If the parent directory of ``path`` does not exist.

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool import Cube
    >>> from cytepool.io import read_cube, write_cube
    >>> cube = Cube(
    ...     {"counts": np.array([[[3, 0, 1], [2, 5, 0]]], dtype=np.int32)},
    ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
    ...     groups=pd.DataFrame({"group_id": ["B cells"]}),
    ...     features=pd.DataFrame({"feature_id": ["CD19", "MS4A1", "CD3E"]}),
    ...     cells=np.array([[4, 6]]),
    ... )
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_cube(cube, f"{tmp}/pbmc.cube.zarr")
    ...     read_cube(f"{tmp}/pbmc.cube.zarr").fingerprint == cube.fingerprint
    True
    """
    from cytepool.cube import Cube

    if not isinstance(cube, Cube):
        message = f"write_cube expects a cytepool.Cube, found {type(cube).__name__}"
        raise InputTypeError(message)
    target = _local_target(path)
    level = check_compression(compression, level)
    if not isinstance(overwrite, bool):
        message = f"overwrite must be True or False, found {overwrite!r}"
        raise InputTypeError(message)
    _check_layer_names(list(cube.layers))

    def build(temporary: Path) -> None:
        _build(cube, temporary, compression=compression, level=level)

    replace_directory(
        target,
        build,
        overwrite=overwrite,
        replaceable=is_cube_file,
        what="a cube file",
        hint="pass overwrite=True to replace a cube file or an empty directory",
    )


def read_cube(
    path: str | os.PathLike[str],
    *,
    backend: str = "pandas",
    storage_options: Mapping[str, Any] | None = None,
) -> Cube:
    """Open a cube file.

    The metadata and the sample, group and feature tables are read now (each table's frame
    is built from what was read when it is first used). The layers stay on disk: when a
    method needs a group of a layer, the cube reads the chunks that hold the samples and
    features it needs, and checks those values then (see "Lazy layers" in Cube). Opening a
    cube therefore takes little memory, whatever its size, and a cube derived with
    ``select()`` reads only the chunks that hold the selected features of the selected
    groups.

    The digests stored with the file give the cube's fingerprint without reading the
    layers. The tables (of a file of format 1.2, each column against its own digest, from
    its stored values), cell numbers and normalization are checked against theirs now, and
    each group of a layer whenever a read covers all of it; the metadata and provenance are
    checked against their digest (files of format 1.0 have none). Files of formats 1.0 and
    1.1 are verified with the SHA-256 digests they store, and the cube keeps their SHA-256
    fingerprint (64 hex digits, without the ``"blake3:"`` of a newer one).

    The directory is opened once and every part is read relative to it, so the parts come
    from one store even while a writer replaces the path; each later read of a layer opens it
    again and checks that it is still the same store. A read during a replacement raises
    StoreChangedError rather than return a mix of two stores.

    Parameters
    ----------
    path
        The cube file's directory.
    backend
        The frame library of the tables: ``"pandas"`` (the default), ``"polars"`` or
        ``"pyarrow"``. A frame holds each column as the file does (pandas holds dates as
        pyarrow dates). A backend that cannot (polars: datetimes in seconds, categories of
        numbers) is refused when the table's frame is made, with a ValueError
        (:class:`~cytepool.errors.InputError`) that names the column and the backends that
        hold it: a table held in another type would not be the file's.
    storage_options
        For a URL only: obstore's configuration keys for the scheme (credentials, endpoint,
        region, ...), its client options (``timeout``, ``connect_timeout``, ...: durations
        as strings such as ``"30s"``, numbers of seconds or ``datetime.timedelta``) and
        cytepool's own ``anonymous``, ``max_retries``, ``retry_timeout`` and
        ``max_in_flight`` (see :class:`~cytepool.io.zarr.remote.RemoteStore` and
        docs/remote.md). They travel with the cube when it is pickled.

    Returns
    -------
    Cube
        A cube whose layers are :class:`~cytepool.io.zarr.ZarrArray` objects.

    Raises
    ------
    FileNotFoundError
        If there is no store at ``path``.
    PermissionError
        If the store may not be read: a local file this process may not read, or a server
        that refuses the request (401, 403); the message names the URL and says how to give
        credentials.
    ImportError
        If ``path`` is a URL and obstore (``cytepool[remote]``) is not installed.
    cytepool.errors.RemoteStoreError
        If a remote store cannot be reached or keeps failing beyond the retries (an
        ``OSError``), or this process was forked after its parent read by URL (use the
        ``"spawn"`` or ``"forkserver"`` start method).
    ValueError
        If the store is not a cube file, has another format version, is corrupt, uses a
        Zarr feature this reader does not support, or holds tables, cell numbers, a
        normalization, metadata or provenance that do not match its stored digests
        (:class:`~cytepool.errors.FormatError`, every error about the file's content), or
        ``storage_options`` are given for a local path, hold an unknown key or a value of
        the wrong type or range (:class:`~cytepool.errors.InputError`, naming the option).
    TypeError
        If a stored value has a type the cube does not accept
        (:class:`~cytepool.errors.StoredTypeError`, also a FormatError).
    RuntimeError
        If the store was replaced while it was being read
        (:class:`~cytepool.errors.StoreChangedError`).

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool import Cube
    >>> from cytepool.io import read_cube, write_cube
    >>> cube = Cube(
    ...     {"counts": np.array([[[3, 0, 1], [2, 5, 0]]], dtype=np.int32)},
    ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
    ...     groups=pd.DataFrame({"group_id": ["B cells"]}),
    ...     features=pd.DataFrame({"feature_id": ["CD19", "MS4A1", "CD3E"]}),
    ...     cells=np.array([[4, 6]]),
    ... )
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_cube(cube, f"{tmp}/pbmc.cube.zarr")
    ...     opened = read_cube(f"{tmp}/pbmc.cube.zarr")
    ...     type(opened.layers["counts"]).__name__, opened.profiles("B cells").tolist()
    ('ZarrArray', [[3, 0, 1], [2, 5, 0]])
    """
    check_backend(backend)
    store = locate(path, storage_options)
    root = store.where("")
    try:
        handle = store.open()
    except FileNotFoundError as error:  # a local store (a remote one opens without a request)
        message = f"there is no cube file at {root}"
        raise FileNotFoundError(errno.ENOENT, message, root) from error
    except NotADirectoryError as error:
        message = f"{root} is not a cube file: it is not a directory"
        raise FormatError(message) from error
    try:
        with reading(handle):
            return _read(handle, backend)
    except StoreChangedError as error:
        changed = "was replaced" if isinstance(store, LocalStore) else "changed"
        message = f"the cube file {root} {changed} while it was being read; open it again"
        raise StoreChangedError(message) from error


# ---------------------------------------------------------------------------------------------
# Paths and arguments
# ---------------------------------------------------------------------------------------------


def _local_path(path: object) -> Path:
    """Return ``path`` as a Path, refusing URLs and anything that is not a path."""
    refuse_url(path, "a cube file")
    return text_path(path)


def _local_target(path: object) -> Path:
    """The real parent directory of ``path`` joined with its last component.

    The last component is kept as given (not resolved), so that a symbolic link there
    can be seen and refused.
    """
    given = _local_path(path)
    name = given.name
    if name in ("", ".."):  # ".", "..", "/" or "a/..": name the directory itself
        resolved = Path(os.path.realpath(given))
        parent, name = resolved.parent, resolved.name
    else:
        parent = given.parent
    if not parent.is_dir():
        found = "is not a directory" if parent.exists() else "does not exist"
        message = f"the parent directory of {os.fspath(given)!r} {found}: {parent}"
        raise FileNotFoundError(errno.ENOENT, message, str(parent))
    return Path(os.path.realpath(parent)) / name


def _check_layer_names(names: list[str]) -> None:
    """Refuse layer names that cannot be Zarr node names on every file system.

    A layer name must pass :func:`~cytepool.io.zarr.names.node_name_problem` as a new name
    (the rule every node name of a table or cube follows), and, besides, hold none of the
    characters Windows refuses in names, and not differ from another only in case.
    """
    seen: dict[str, str] = {}
    for name in names:
        problem = node_name_problem(name, new=True)
        if problem is None and any(character in name for character in _WINDOWS_CHARACTERS):
            problem = f"it contains one of {' '.join(_WINDOWS_CHARACTERS)}"
        if problem is not None:
            message = (
                f"layer name {name!r} cannot be stored in a cube file: {problem}. A name must"
                " be a non-empty string without / \\ : * ? \" < > | or NUL, not '.' or '..',"
                " not starting with '__' and of at most 255 bytes of UTF-8"
            )
            raise InputError(message)
        other = seen.setdefault(name.casefold(), name)
        if other != name:
            message = (
                f"layer names {other!r} and {name!r} differ only in case, so they would "
                "share a directory on case-insensitive file systems"
            )
            raise InputError(message)


# ---------------------------------------------------------------------------------------------
# Writing the store
# ---------------------------------------------------------------------------------------------


def _build(cube: Cube, root: Path, *, compression: str | None, level: int | None) -> None:
    """Write every node of the cube file into the empty directory ``root``, zarr.json last."""
    from cytepool.fingerprint import Digests
    from cytepool.io.tables.frames import build_table

    known = _blake3_digests(cube)
    options: dict[str, Any] = {"compression": compression, "level": level}
    tables: dict[str, list[dict[str, str]]] = {}
    for axis, index in _TABLES:
        build_table(getattr(cube, axis), root / axis, index=index, **options)
        tables[axis] = _table_columns(parts_of(cube).tables[axis].column_digests(), root / axis)
    cells = np.asarray(cube.cells)
    write_array(root / "cells", cells, chunks=_small_chunks(cells), **_PROFILE_AXES, **options)
    if cube.normalization is not None:
        factors = np.asarray(cube.normalization.factors)
        write_array(
            root / "normalization",
            factors,
            chunks=_small_chunks(factors),
            attributes={"method": cube.normalization.method},
            **_PROFILE_AXES,
            **options,
        )
    write_group(root / "layers")
    layers: dict[str, tuple[str | None, ...]] = {}
    for name in cube.layers:
        layers[name] = _write_layer(cube, name, root / "layers" / name, **options)
    digests = Digests(
        tables=dict(known.tables),
        cells=known.cells,
        normalization=known.normalization,
        layers=layers,
        dtypes={name: np.dtype(cube.layers[name].dtype).name for name in cube.layers},
    )
    write_consolidated_group(root, {**_attributes(cube, digests), "tables": tables})


def _table_columns(digests: Sequence[str], directory: Path) -> list[dict[str, str]]:
    """The ``tables`` entry of a table just written at ``directory``: each column (the index
    first) with its anndata encoding and its BLAKE3 column digest."""
    attributes = read_group_attributes(directory)
    names = [attributes["_index"], *attributes["column-order"]]
    return [
        {"name": name, "encoding": _encoding(directory / name), "digest": digest}
        for name, digest in zip(names, digests, strict=True)
    ]


def _encoding(node: Path) -> str:
    document, _, _ = read_document(node)
    return str(document["attributes"]["encoding-type"])


def _blake3_digests(cube: Cube) -> Digests:
    """The cube's known digests made with BLAKE3: those it holds, or, for a cube of a file of
    format 1.0 or 1.1 (SHA-256), those of its tables, cells and normalization made again."""
    from cytepool import fingerprint as fp

    parts = parts_of(cube)
    if parts.algorithm == fp.BLAKE3:
        return parts.digests(compute=False)
    return fp.Digests(
        tables={name: parts.tables[name].digest(fp.BLAKE3) for name in fp.TABLE_NAMES},
        cells=fp.cells_digest(parts.cells),
        normalization=fp.normalization_digest(parts.normalization),
    )


def _small_chunks(array: np.ndarray) -> tuple[int, ...]:
    """One chunk for a small 2-D array (cells, normalization), split along groups if large."""
    n_groups, n_samples = array.shape
    rows = max(1, min(n_groups, _CHUNK_BYTES // max(1, n_samples * array.dtype.itemsize)))
    return (rows, max(1, n_samples))


def _layer_chunks(shape: tuple[int, int, int], itemsize: int) -> tuple[int, int, int]:
    """Chunks (1, s, f) of about ``_CHUNK_BYTES``: a group is a set of whole chunks."""
    _, n_samples, n_features = shape
    samples = min(n_samples, max(1, _CHUNK_BYTES // (itemsize * max(1, min(n_features, 1024)))))
    features = min(n_features, max(1, _CHUNK_BYTES // (itemsize * max(1, samples))))
    return (1, max(1, samples), max(1, features))


class _GroupSource:
    """A layer as ``write_array`` reads it: ``source[start:stop]`` reads those groups.

    Each group is read whole through the cube, which checks its values and verifies its
    known digest or computes and keeps it, as the group passes. A cube whose digests are not
    BLAKE3 (read from a file of format 1.0 or 1.1) has each group hashed with BLAKE3 here too,
    into ``digests``.
    """

    def __init__(self, cube: Cube, name: str) -> None:
        from cytepool.fingerprint import BLAKE3

        self._cube = cube
        self._name = name
        layer = cube.layers[name]
        self.shape = tuple(int(size) for size in layer.shape)
        self.dtype = np.dtype(layer.dtype)
        self.digests: list[str | None] | None = None
        if parts_of(cube).algorithm != BLAKE3:
            self.digests = [None] * self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, step = key.indices(self.shape[0])
        blocks = [self._read(group) for group in range(start, stop, step)]
        if len(blocks) == 1:
            return blocks[0][np.newaxis]
        return np.stack(blocks) if blocks else np.empty((0, *self.shape[1:]), self.dtype)

    def _read(self, group: int) -> np.ndarray:
        from cytepool.fingerprint import group_digest

        block = parts_of(self._cube).read(self._name, group)
        if self.digests is not None:
            self.digests[group] = group_digest(self.dtype, block)
        return block


def _write_layer(
    cube: Cube, name: str, path: Path, *, compression: str | None, level: int | None
) -> tuple[str, ...]:
    """Write one layer group by group; return the digest of each group."""
    from cytepool.fingerprint import group_digest

    source = _GroupSource(cube, name)
    n_groups, n_samples, n_features = source.shape
    chunks = _layer_chunks((n_groups, n_samples, n_features), source.dtype.itemsize)
    write_array(
        path,
        source,
        chunks=chunks,
        compression=compression,
        level=level,
        dimension_names=("groups", "samples", "features"),
    )
    # The cube kept the digest of every group read whole; hash again only what it did not.
    known = source.digests or parts_of(cube).digests(compute=False).layers[name]
    return tuple(
        digest or group_digest(source.dtype, parts_of(cube).read(name, group))
        for group, digest in enumerate(known)
    )


def _attributes(cube: Cube, digests: Digests) -> dict[str, Any]:
    # metadata and provenance as the JSON they are stored as, which their digest covers
    metadata = json.loads(json.dumps(dict(cube.metadata), allow_nan=False))
    provenance = [record.to_json() for record in cube.provenance]
    provenance = json.loads(json.dumps(provenance, allow_nan=False))
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "shape": [int(size) for size in cube.shape],
        "layers": dict(digests.dtypes),
        "digests": digests.to_json(),
        "fingerprint": digests.fingerprint(),
        "metadata": metadata,
        "provenance": provenance,
        "attributes_digest": _attributes_digest(metadata, provenance),
    }


def _attributes_digest(metadata: Any, provenance: Any, algorithm: str = "blake3") -> str:
    """The hash (BLAKE3; SHA-256 for format 1.1) of the canonical JSON of
    ``{"metadata": ..., "provenance": ...}``, in lowercase hex.

    Canonical: keys sorted, no spaces, ASCII only, as ``json.dumps`` writes it. Parsing the
    stored attributes and writing them again gives the same text, so a reader recomputes it.

    Examples
    --------
    >>> _attributes_digest({"study": "demo"}, [], "sha256")[:16]
    'dacbc997e1d60c40'
    """
    from cytepool.fingerprint import hasher

    document = {"metadata": metadata, "provenance": provenance}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return str(hasher(algorithm, text.encode("ascii")).hexdigest())


# ---------------------------------------------------------------------------------------------
# Reading the store
# ---------------------------------------------------------------------------------------------


def is_cube_file(path: Path) -> bool:
    """Whether ``path`` holds a cube file (of any version); asked again while another writer
    replaces it."""
    for _ in range(_ATTEMPTS):
        try:
            attributes = read_group_attributes(path)
        except StoreChangedError:
            continue
        except (OSError, ValueError):
            return False
        return attributes.get("format") == FORMAT
    return False


@dataclass(frozen=True)
class _Header:
    """The attributes of a cube file's root group, checked."""

    shape: tuple[int, int, int]
    layers: dict[str, str]
    digests: Digests
    metadata: dict[str, Any]
    provenance: tuple[Any, ...]
    tables: dict[str, tuple[StoredColumn, ...]] | None  # the columns of each table (1.2)


def _parse_header(attributes: Mapping[str, Any], root: Path | StorePath) -> _Header:
    """Check the root attributes; I/O-free, so every rule is testable without files."""
    if attributes.get("format") != FORMAT:
        message = (
            f"{root} is not a cube file: its format attribute is "
            f"{attributes.get('format')!r}, expected {FORMAT!r}"
        )
        raise FormatError(message)
    minor = _check_version(attributes.get("format_version"), root)
    known = (_ATTRIBUTES_1_0, _ATTRIBUTES_1_1, _REQUIRED_ATTRIBUTES)[min(minor, 2)]
    missing = [key for key in known if key not in attributes]
    unknown = [key for key in attributes if key not in known]
    if missing or (unknown and minor <= _MINOR):
        problem = f"lacks {missing}" if missing else f"has unknown attributes {unknown}"
        message = f"the cube file {root} is corrupt: its root group {problem}"
        raise FormatError(message)
    shape = _parse_shape(attributes["shape"], root)
    layers = _parse_layers(attributes["layers"], root)
    digests = _parse_digests(attributes, layers, shape[0], root, minor)
    metadata = attributes["metadata"]
    if not isinstance(metadata, dict):
        _corrupt(root, f"metadata must be an object, found {type(metadata).__name__}")
    provenance = _parse_provenance(attributes, root)
    if minor > 0:
        _check_attributes_digest(attributes, digests.algorithm, root)
    tables = None
    if minor >= 2:
        rows = {axis: shape[_TABLE_AXES[axis]] for axis, _ in _TABLES}
        tables = parse_table_columns(attributes["tables"], rows, digests.tables, root)
    return _Header(shape, layers, digests, metadata, provenance, tables)


def _check_algorithm(digests: Digests, minor: int, root: Path | StorePath) -> None:
    """Formats 1.0 and 1.1 hash with SHA-256 (unnamed); 1.2 and later name their algorithm,
    BLAKE3 for 1.2."""
    from cytepool.fingerprint import BLAKE3, SHA256

    expected = SHA256 if minor < 2 else BLAKE3
    if minor <= _MINOR and digests.algorithm != expected:
        given = "no algorithm (SHA-256)" if digests.algorithm == SHA256 else digests.algorithm
        version = f"{_MAJOR}.{minor}"
        _corrupt(root, f"its digests are made with {given}; format {version} uses {expected}")


def _check_attributes_digest(
    attributes: Mapping[str, Any], algorithm: str, root: Path | StorePath
) -> None:
    stored = attributes["attributes_digest"]
    computed = _attributes_digest(attributes["metadata"], attributes["provenance"], algorithm)
    if stored != computed:
        problem = (
            "its metadata or provenance was edited: their digest (attributes_digest) is "
            f"{stored!r}, expected {computed!r}"
        )
        _corrupt(root, problem)


def _corrupt(root: Path | StorePath, problem: str) -> NoReturn:
    message = f"the cube file {root} is corrupt: {problem}"
    raise FormatError(message)


def _check_version(version: object, root: Path | StorePath) -> int:
    """Apply the versioning rule; return the file's minor version."""
    match = re.fullmatch(r"([0-9]+)\.([0-9]+)", version) if isinstance(version, str) else None
    if match is None:
        message = f"the cube file {root} has an invalid format_version {version!r}"
        raise FormatError(message)
    major, minor = int(match.group(1)), int(match.group(2))
    if major > _MAJOR:
        message = (
            f"the cube file {root} has format version {version}, newer than the {FORMAT_VERSION} "
            "this cytepool reads; upgrade cytepool to read it"
        )
        raise FormatError(message)
    if major < _MAJOR:
        message = (
            f"the cube file {root} has format version {version}, which this cytepool "
            f"(format {FORMAT_VERSION}) does not read"
        )
        raise FormatError(message)
    return minor


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_shape(shape: object, root: Path | StorePath) -> tuple[int, int, int]:
    if not (isinstance(shape, list) and len(shape) == 3 and all(map(_is_count, shape))):
        _corrupt(root, f"shape must be 3 non-negative integers, found {shape!r}")
    n_groups, n_samples, n_features = shape
    return (n_groups, n_samples, n_features)


def _parse_layers(layers: object, root: Path | StorePath) -> dict[str, str]:
    if not isinstance(layers, dict) or not all(
        isinstance(name, str) and isinstance(dtype, str) for name, dtype in layers.items()
    ):
        _corrupt(root, f"layers must map names to data type names, found {layers!r}")
    try:
        _check_layer_names(list(layers))
    except ValueError as error:
        _corrupt(root, str(error))
    for name, dtype in layers.items():
        if dtype not in DATA_TYPES and dtype != "string":
            _corrupt(root, f"layer {name!r} has the unknown data type {dtype!r}")
        if dtype not in _LAYER_DTYPES:
            message = (
                f"layer {name!r} of the cube file {root} has data type {dtype!r}; a cube "
                f"accepts {', '.join(sorted(_LAYER_DTYPES))}"
            )
            raise StoredTypeError(message)
    return dict(layers)


def _parse_digests(
    attributes: Mapping[str, Any],
    layers: dict[str, str],
    n_groups: int,
    root: Path | StorePath,
    minor: int,
) -> Digests:
    from cytepool.fingerprint import Digests

    try:
        digests = Digests.from_json(attributes["digests"])
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        message = f"the cube file {root} is corrupt: invalid digests ({error})"
        raise FormatError(message) from error
    _check_algorithm(digests, minor, root)
    if dict(digests.dtypes) != layers or set(digests.layers) != set(layers):
        _corrupt(root, "the digests do not describe the layers the attributes list")
    if any(len(groups) != n_groups for groups in digests.layers.values()):
        _corrupt(root, f"the digests do not hold one digest per group ({n_groups})")
    if not digests.complete:
        _corrupt(root, "a group digest is missing (null)")
    if attributes["fingerprint"] != digests.fingerprint():
        _corrupt(root, "the stored fingerprint does not match the stored digests")
    return digests


def _parse_provenance(attributes: Mapping[str, Any], root: Path | StorePath) -> tuple[Any, ...]:
    from cytepool._records import Provenance

    records = attributes["provenance"]
    if not isinstance(records, list):
        _corrupt(root, f"provenance must be a list, found {type(records).__name__}")
    try:
        return tuple(Provenance.from_json(record) for record in records)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        message = f"the cube file {root} is corrupt: invalid provenance record ({error})"
        raise FormatError(message) from error


def _read(handle: StoreHandle, backend: str) -> Cube:
    """Read and check everything but the layers' values, through ``handle``; open the layers.

    The root document is read first. If it holds the hierarchy's metadata (consolidated),
    every other document comes from it, and the chunks opening reads are then all asked for
    at once (a remote handle fetches them concurrently). Otherwise a remote handle fetches the
    documents opening needs together, the tables' columns and their parts named by the
    ``tables`` attribute (files of format 1.0 and 1.1: a level at a time), and the chunks
    opening reads as their arrays' documents come (see :mod:`cytepool.io.tables.gather`).
    """
    root = StorePath(handle)
    try:
        document, version, where = read_node_document(root)
    except FileNotFoundError as error:
        message = f"{root} is not a cube file: it has no Zarr group metadata ({METADATA_FILE})"
        raise FormatError(message) from error
    attributes = GroupMetadata.from_json(document, where).attributes
    header = _parse_header(attributes, root)
    documents = consolidated_documents(document, where)
    if documents is not None:
        root = StorePath(read_through(handle, document, documents, version))
        fetch_ahead(root.handle, documents, _PARTS)  # every chunk of the parts opening reads
    else:  # a remote handle fetches those chunks as their documents come
        layers = [f"layers/{name}" for name in header.layers]
        opened = [*_opened(header), "layers", *layers]
        gather_documents(handle, opened, version, fetch=lambda _: _PARTS)
    return _read_parts(root, backend, header)


def _opened(header: _Header) -> list[str]:
    """The nodes opening reads: the tables (of a file of format 1.2, each table and every
    column with its parts, which its ``tables`` attribute names with their encodings), the
    cells and the normalization."""
    if header.tables is None:
        return list(_PARTS)
    tables = header.tables.items()
    columns = [node for axis, listed in tables for node in [axis, *column_nodes(axis, listed)]]
    return [*columns, "cells", "normalization"]


def _read_parts(root: StorePath, backend: str, header: _Header) -> Cube:
    """Read the tables, cells and normalization and open the layers."""
    check_installed(backend)  # now, though a frame may be built later
    try:  # each table verified from its stored values, its frame made when used (or a frame)
        tables = {axis: _read_table(root, axis, backend, header) for axis, _ in _TABLES}
        cells = _read_cells(root, header)
        normalization = _read_normalization(root, header)
        read_group_attributes(root / "layers")
        layers = {
            name: _open_layer(root, name, dtype, header) for name, dtype in header.layers.items()
        }
        _check_layer_folders(root, list(layers))
    except FileNotFoundError as error:
        message = f"the cube file {root} is corrupt: a part is missing ({error})"
        raise FormatError(message) from error
    except (ValueError, TypeError):  # a part read as fill values: say if its folder is gone
        _check_folders(root)
        raise
    return _assemble(root, header, tables, cells, normalization, layers)


_FOLDERS = {
    "samples": "the sample table",
    "groups": "the group table",
    "features": "the feature table",
    "cells": "the cell numbers",
}


def _check_layer_folders(root: StorePath, names: list[str]) -> None:
    """Raise FormatError if the zarr.json of a layer of a local cube file read through its
    consolidated metadata is gone (its folder deleted, say): the copy in the root document
    still describes the layer, whose chunks, all absent, would read as zeros; a read of a
    whole group would find its digest differ, a selection would not. One ``stat`` a layer; a
    remote store (a request a layer) is not asked."""
    gone = _gone_folder(root, [f"layers/{name}" for name in names], remote=False)
    if gone is not None:
        layer = gone.removeprefix("layers/")
        _corrupt(root, f"the folder {gone}/ (layer {layer!r}) or its {METADATA_FILE} is missing")


def _check_folders(root: StorePath) -> None:
    """Raise FormatError if the folder of a table (or of the cell numbers) is gone.

    The consolidated metadata in the root document still lists such a part, and its arrays
    then read as their fill value (empty strings, zeros): the error found in them (ids that
    repeat, a digest that differs) would not say what happened. Asked only after an error,
    so an intact file costs no request.
    """
    gone = _gone_folder(root, list(_FOLDERS), remote=True)
    if gone is not None:
        _corrupt(root, f"the folder {gone}/ ({_FOLDERS[gone]}) is missing")


def _gone_folder(root: StorePath, folders: list[str], *, remote: bool) -> str | None:
    """The first of ``folders`` whose zarr.json the store lacks, though the root document's
    copy of the metadata (read through, when the handle has an ``inner`` store) lists it; None
    if each is there, if the store cannot be asked, if the file is not read through such a
    copy (a missing part is missing then), or if the store is remote and not ``remote``."""
    inner = getattr(root.handle, "inner", None)
    if inner is None or not (remote or isinstance(inner, LocalHandle)):
        return None
    for folder in folders:
        try:
            if inner.version(join(root.key, f"{folder}/{METADATA_FILE}")) is None:
                return folder
        except OSError:  # the store cannot be asked: the error found stands
            return None
    return None


def _assemble(
    root: StorePath,
    header: _Header,
    tables: dict[str, Any],
    cells: np.ndarray,
    normalization: Any,
    layers: dict[str, ZarrArray],
) -> Cube:
    """The cube of the parts read; every error about them is an error about the file."""
    try:  # compares the tables, cells and normalization with their digests
        return from_parts(
            layers,
            **tables,
            cells=cells,
            normalization=normalization,
            metadata=header.metadata,
            provenance=header.provenance,
            digests=header.digests,
        )
    except TypeError as error:
        message = f"the cube file {root} holds a value of a type a cube does not accept: {error}"
        raise StoredTypeError(message) from error
    except ValueError as error:  # FormatError, ConstraintError and the checks of the tables
        _check_folders(root)
        message = f"the cube file {root} is corrupt or was edited: {error}"
        raise FormatError(message) from error


def _read_table(root: StorePath, axis: str, backend: str, header: _Header) -> Any:
    rows = header.shape[_TABLE_AXES[axis]]
    if header.tables is not None:
        return read_lazy_cube_table(root, axis, backend, rows, header.tables[axis])
    return read_cube_table(root, axis, backend, rows, header.digests.algorithm)


def _open_small(root: StorePath, name: str, header: _Header, kinds: str, what: str) -> ZarrArray:
    array = open_array(root / name)
    if array.dtype.kind not in kinds:
        message = f"the {what} of the cube file {root} have data type {array.dtype}, expected " + (
            "integers" if kinds == "iu" else "floating-point numbers"
        )
        raise StoredTypeError(message)
    if array.shape != header.shape[:2]:
        _corrupt(root, f"{name} has shape {array.shape}, expected {header.shape[:2]}")
    return array


def _read_cells(root: StorePath, header: _Header) -> np.ndarray:
    return np.asarray(_open_small(root, "cells", header, "iu", "cell numbers"))


def _read_normalization(root: StorePath, header: _Header) -> Any:
    from cytepool._records import Normalization

    if root.handle.version(join(root.key, f"normalization/{METADATA_FILE}")) is None:
        return None
    array = _open_small(root, "normalization", header, "f", "normalization factors")
    method = array.attributes.get("method")
    if not isinstance(method, str):
        message = (
            f"the normalization of the cube file {root} has method {method!r}, expected a string"
        )
        raise StoredTypeError(message)
    try:
        return Normalization(method, np.asarray(array))
    except ValueError as error:
        message = f"the cube file {root} is corrupt: invalid normalization ({error})"
        raise FormatError(message) from error


def _open_layer(root: StorePath, name: str, dtype: str, header: _Header) -> ZarrArray:
    array = open_array(root / "layers" / name)
    if array.shape != header.shape:
        _corrupt(root, f"layer {name!r} has shape {array.shape}, expected {header.shape}")
    if array.dtype != np.dtype(dtype):
        _corrupt(root, f"layer {name!r} is stored as {array.dtype}, its attributes say {dtype}")
    return array
