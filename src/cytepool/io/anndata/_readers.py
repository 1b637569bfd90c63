"""Reading cells: whole matrices or row blocks of on-disk and dask matrices; paths; legacy files."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cytepool import _progress, _words
from cytepool.errors import (
    CytepoolError,
    FormatError,
    InputError,
    InputTypeError,
    UnknownIdError,
)
from cytepool.io.anndata._direct import (
    DenseMatrix,
    SparseMatrix,
    check_library_sparse,
    matrix_shape,
    open_matrix,
)
from cytepool.io.anndata._frame_checks import (
    check_fit,
    check_frame,
    index_key,
    misfit,
    witness,
)
from cytepool.io.anndata._frames import read_element
from cytepool.io.anndata._hdf5 import system_error
from cytepool.io.anndata._hdf5_heap import check_global_heaps

if TYPE_CHECKING:
    import anndata
    import pandas as pd


BLOCK_NONZEROS = 1 << 24  # nonzeros per row block read from a sparse matrix on disk
BLOCK_BYTES = 1 << 27  # bytes per row block read from a dense matrix on disk


def as_pandas_frame(frame: Any) -> pd.DataFrame:
    """obs or var as pandas (a lazily opened AnnData holds them as anndata's Dataset2D)."""
    return frame.to_memory() if hasattr(frame, "to_memory") else frame


def eager(value: Any) -> Any:
    """A value of uns in memory (a lazily opened AnnData holds dask arrays and Dataset2D)."""
    return value.compute() if hasattr(value, "compute") else as_pandas_frame(value)


def layer_keys(adata: anndata.AnnData) -> list[str]:
    """The names of the layers (anndata 0.13 also lists None, for X)."""
    return [name for name in adata.layers.keys() if name is not None]  # noqa: SIM118


def matrix_of(
    adata: anndata.AnnData, *, layer: str | None, use_raw: bool, owner: str = "adata"
) -> tuple[Any, pd.DataFrame, Source]:
    """The counts matrix, the var to take features from, and their names for messages."""
    _check_either(layer, use_raw)
    if use_raw:
        if adata.raw is None:
            msg = f"{_words.option('use_raw')} asks for {owner}.raw.X, but {owner}.raw is None"
            raise InputError(msg)
        return adata.raw.X, adata.raw.var, Source(owner, "raw.X")
    if layer is not None:
        if layer not in adata.layers:
            raise _no_layer(owner, layer, layer_keys(adata))
        return adata.layers[layer], adata.var, Source(owner, f"layers[{layer!r}]")
    if adata.X is None:
        msg = (
            f"{owner}.X is empty: pass {_words.option('layer')} naming the layer that holds "
            f"the counts, one of {layer_keys(adata)}"
        )
        raise InputError(msg)
    return adata.X, adata.var, Source(owner, "X")


def _check_either(layer: str | None, use_raw: bool) -> None:
    if layer is not None and use_raw:
        msg = f"pass either {_words.option('layer')} or {_words.option('use_raw')}, not both"
        raise InputError(msg)


@contextlib.contextmanager
def open_cells(
    path: str | os.PathLike[str], *, layer: str | None, use_raw: bool
) -> Iterator[tuple[Any, pd.DataFrame, pd.DataFrame, Source]]:
    """Open an ``.h5ad`` file or AnnData ``.zarr`` store read-only: matrix, obs, var."""
    _check_either(layer, use_raw)
    source = _path_source(path, layer, use_raw)
    with _open_store(Path(path)) as (root, bound):
        with damaged(path):
            legacy = _is_legacy(root)
            parts = None if legacy else _anndata_parts(root, path, source, layer, use_raw, bound)
        if parts is not None:
            try:
                yield parts
            finally:
                _close(parts[0])
            return
    with contextlib.ExitStack() as stack:
        with damaged(path):
            adata = stack.enter_context(_legacy_anndata(Path(path)))
            cells = _legacy_cells(adata, source, layer=layer, use_raw=use_raw)
        yield cells


def survey_cells(
    path: str | os.PathLike[str], *, layer: str | None, use_raw: bool
) -> tuple[int, pd.Index]:
    """The number of cells and the feature ids of an ``.h5ad`` file or AnnData ``.zarr``
    store: what planning to pool many files takes, read without obs, the matrix or var's
    other columns where the file allows (else as :func:`open_cells` reads them)."""
    _check_either(layer, use_raw)
    source = _path_source(path, layer, use_raw)
    found = None
    with _open_store(Path(path)) as (root, bound), damaged(path):
        if not _is_legacy(root):
            element, var_path = _element_paths(root, source, layer, use_raw)
            found = _shape_and_ids(root, element, var_path, source.owner, bound)
    if found is not None:
        return found
    with open_cells(path, layer=layer, use_raw=use_raw) as (matrix, _, var, _):
        return int(matrix.shape[0]), var.index


def _path_source(path: str | os.PathLike[str], layer: str | None, use_raw: bool) -> Source:
    """How messages name the matrix of the file at ``path``."""
    return Source(os.fspath(path), "raw.X" if use_raw else _layer_name(layer), path=True)


def _shape_and_ids(
    root: Any, element: str, var_path: str, owner: str, bound: int
) -> tuple[int, pd.Index] | None:
    """The rows of the matrix at ``element`` and the index of the var at ``var_path``, or
    None when either is not plain to see."""
    import pandas as pd

    shape = matrix_shape(root[element], f"{element} of {owner}")
    var = root[var_path]
    name = index_key(var)
    if shape is None or name is None:
        return None
    check_fit(shape, (root["obs"], var), witness(root, element), (element, owner, var_path), bound)
    check_frame(var, shape[1], bound, f"{var_path} of {owner}")
    return shape[0], pd.Index(read_element(var[name]))


def _check_frames(
    matrix: Any, frames: tuple[Any, Any], bound: int, names: tuple[str, str, str], root: Any
) -> None:
    """Check the ``frames`` (obs and var groups) of ``matrix`` against its shape
    (:func:`check_fit`, then :func:`check_frame`). ``names``: the matrix's element, the file
    and the var's element, as messages name them."""
    element, owner, var_name = names
    shape = (int(matrix.shape[0]), int(matrix.shape[1]))
    check_fit(shape, frames, witness(root, element), (element, owner, var_name), bound)
    check_frame(frames[0], shape[0], bound, f"obs of {owner}")
    check_frame(frames[1], shape[1], bound, f"{var_name} of {owner}")


def _element_paths(root: Any, source: Source, layer: str | None, use_raw: bool) -> tuple[str, str]:
    """Where the matrix and its var are (each checked to be there)."""
    _check_anndata(root, source)
    element = "raw/X" if use_raw else "X" if layer is None else f"layers/{layer}"
    var_path = "raw/var" if use_raw else "var"
    if layer is not None and not _is_key(layer):  # "", "./counts": no layer of adata.layers
        raise _missing_element(root, element, source)
    for needed in (element, "obs", var_path):
        if needed not in root:
            raise _missing_element(root, needed, source)
    return element, var_path


def _is_key(name: str) -> bool:
    """Whether ``name`` can be a key of a file's ``layers`` group: a path of one segment,
    nonempty, not ``.`` or ``..`` (h5py would follow ``./counts`` and ``counts/`` to ``counts``,
    zarr-python refuses them)."""
    return bool(name) and "/" not in name and name not in (".", "..")


def _anndata_parts(
    root: Any,
    path: str | os.PathLike[str],
    source: Source,
    layer: str | None,
    use_raw: bool,
    bound: int,
) -> tuple[Any, pd.DataFrame, pd.DataFrame, Source]:
    """Matrix, obs, var and their names, from a file in the layout of anndata >= 0.7
    whose file or store holds ``bound`` bytes."""
    element, var_path = _element_paths(root, source, layer, use_raw)
    matrix = _matrix(root, element, Path(path), source.owner)
    try:
        frames = (root["obs"], root[var_path])
        _check_frames(matrix, frames, bound, (element, source.owner, var_path), root)
        _check_library_matrix(matrix, source.owner)
        obs, names = _read_obs(root["obs"], int(matrix.shape[0]), Path(path))
        source = source if names is None else dataclasses.replace(source, cells=names)
        return matrix, obs, read_element(root[var_path]), source
    except BaseException:
        _close(matrix)
        raise


@contextlib.contextmanager
def damaged(path: str | os.PathLike[str]) -> Iterator[None]:
    """Errors of h5py, zarr-python or anndata met while reading a file's structure (its
    groups, obs, var) become a FormatError naming the file: the file is damaged. So do
    h5py's OSErrors, which carry no error number (libhdf5 refusing what it read: "filter
    returned failure during read", "ran off end of input buffer while decoding").

    cytepool's own errors and the OSError family of the system (a file that cannot be read,
    with its error number) pass.
    """
    try:
        yield
    except Exception as error:
        if isinstance(error, CytepoolError) or system_error(error):
            raise
        problem = str(error) if type(error) is OSError else f"{type(error).__name__}: {error}"
        msg = f"{os.fspath(path)} cannot be read as AnnData, it is damaged: {problem}"
        raise FormatError(msg) from error


def read_damaged(blocks: Iterable[Any], path: str) -> Iterator[Any]:
    """The blocks of a matrix read from the file ``path``, errors as :func:`damaged` has them."""
    with damaged(path):
        yield from blocks


def _layer_name(layer: str | None) -> str:
    return "X" if layer is None else f"layer {layer!r}"


def _missing_element(root: Any, element: str, source: Source) -> KeyError:
    """The error for an element an AnnData file lacks, named as anndata names it."""
    if element.startswith("layers/"):
        layers = sorted(root["layers"]) if "layers" in root else []
        return _no_layer(source.owner, element.removeprefix("layers/"), layers)
    what = element.replace("/", ".") if element != "raw/X" else "raw.X"
    msg = f"{source.owner} has no {what}"
    return UnknownIdError(msg)


def _no_layer(owner: str, layer: str, layers: list[str]) -> UnknownIdError:
    """The error for a layer an AnnData lacks; asked for ``"X"``, it says that X is no layer
    but what is read when no layer is named."""
    msg = f"{owner} has no layer {layer!r}; its layers are {layers}"
    if layer == "X":
        option = _words.option("layer")
        msg += f"; {option} names a layer of adata.layers, and X is read when {option} is not given"
    return UnknownIdError(msg, unknown=layer, known=layers)


def _read_obs(element: Any, n_obs: int, path: Path) -> tuple[pd.DataFrame, CellNames | None]:
    """obs, and the names of its rows when they were left in the file.

    A dataframe of anndata's encoding 0.2.0 is read without its index (its columns read as
    anndata reads them, :func:`read_element`; rows numbered from 0): nothing pooled needs the
    names of the cells, whose strings took most of the time obs took (200,000 cells: 100
    against 5 ms). They are read when a message names a cell (:class:`CellNames`). Another
    obs is read whole.
    """
    import pandas as pd

    attrs = element.attrs
    index = index_key(element)
    plain = (attrs.get("encoding-type"), attrs.get("encoding-version")) == ("dataframe", "0.2.0")
    if not plain or index is None:
        return read_element(element), None
    order = [_text(name) for name in np.atleast_1d(_column_order(element, path))]
    columns = {name: read_element(element[name]) for name in order}
    frame = pd.DataFrame(columns, index=pd.RangeIndex(n_obs), columns=order or None)
    return frame, CellNames(path, f"{element.name.strip('/')}/{index}")


def _column_order(frame: Any, path: Path) -> Any:
    """The attribute ``column-order`` of the dataframe group ``frame`` (its columns), which
    anndata requires: a FormatError naming the file and the group if it is gone."""
    if "column-order" not in frame.attrs:
        msg = (
            f"{path} cannot be read as AnnData, it is damaged: the dataframe {frame.name!r} has "
            "no attribute 'column-order' (the list of its columns, which anndata requires), "
            f"only {sorted(frame.attrs)}: write the file again from its source"
        )
        raise FormatError(msg)
    return frame.attrs["column-order"]


def _text(name: Any) -> str:
    return name.decode("utf-8") if isinstance(name, bytes) else str(name)


class CellNames:
    """The names of the cells of a file (its obs index), read as anndata reads them from
    ``key`` of the file at ``path`` when first asked for one (by an error message naming a
    cell)."""

    def __init__(self, path: Path, key: str) -> None:
        self.path, self.key = path, key
        self.names: Any = None

    def __getitem__(self, row: int) -> Any:
        if self.names is None:
            with _open_store(self.path) as (root, _), damaged(self.path):
                self.names = read_element(root[self.key])
        return self.names[row]


def _is_legacy(root: Any) -> bool:
    """Whether ``root`` is an ``.h5ad`` file in the layout of anndata < 0.7.

    Its obs and var are compound datasets (categories in ``uns``), raw is ``raw.X`` and
    ``raw.var``, sparse matrices carry ``h5sparse_format``: anndata's own reader knows it.
    """
    import h5py

    if not isinstance(root, h5py.File):
        return False
    frames = (root.get(name) for name in ("obs", "var"))
    return "raw.X" in root or any(isinstance(frame, h5py.Dataset) for frame in frames)


def _check_anndata(root: Any, source: Source) -> None:
    """Refuse a file or store that is not AnnData cells, saying what it is: a MuData, a
    cube file, or anything else without obs and var."""
    if root.attrs.get("format") == "cytepool.cube":
        msg = (
            f"{source.owner} is a cube file (cells already pooled), not AnnData cells; "
            f"{_words.option('cube_to_anndata')}"
        )
        raise InputError(msg)
    if "mod" in root and "X" not in root:
        names = ", ".join(map(repr, _modality_order(root["mod"])))
        msg = (
            f"{source.owner} is a MuData file (modalities {names}): pool one with "
            f"{_words.option('modality')}"
        )
        raise InputError(msg)
    if "obs" not in root and "var" not in root:
        held = sorted(root)
        listed = ", ".join(map(repr, held[:5])) + (", ..." if len(held) > 5 else "")
        msg = (
            f"{source.owner} is not an AnnData file or store: it has neither obs nor var "
            f"(it holds {listed or 'nothing'})"
        )
        raise InputError(msg)


@contextlib.contextmanager
def _legacy_anndata(path: Path) -> Iterator[anndata.AnnData]:
    """An ``.h5ad`` file of anndata < 0.7, opened backed by anndata, which reads its layout.

    Backed, anndata keeps X and raw.X on disk but reads the rest (obs, var, uns, layers, obsm).
    Its warnings about the old layout (which it converts) are not passed on.
    """
    import warnings

    import anndata as ad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata = ad.read_h5ad(path, backed="r")
    try:
        yield adata
    finally:
        adata.file.close()


def _legacy_cells(
    adata: anndata.AnnData, source: Source, *, layer: str | None, use_raw: bool
) -> tuple[Any, pd.DataFrame, pd.DataFrame, Source]:
    """Matrix, obs, var and their names, from an AnnData opened by :func:`_legacy_anndata`."""
    if use_raw and adata.raw is None:
        msg = f"{source.owner} has no raw.X"
        raise UnknownIdError(msg)
    if layer is not None and layer not in adata.layers:
        raise _no_layer(source.owner, layer, layer_keys(adata))
    matrix, var, _ = matrix_of(adata, layer=layer, use_raw=use_raw)
    shape = (int(matrix.shape[0]), int(matrix.shape[1]))
    lengths = (len(adata.obs), len(var))
    if shape != lengths:
        element = "raw.X" if use_raw else "X" if layer is None else f"layers/{layer}"
        names = (element, source.owner, "raw.var" if use_raw else "var")
        raise misfit(shape, lengths, names)
    _check_library_matrix(matrix, source.owner)
    return matrix, as_pandas_frame(adata.obs), as_pandas_frame(var), source


@contextlib.contextmanager
def open_modalities(
    path: str | os.PathLike[str],
) -> Iterator[tuple[pd.DataFrame, dict[str, Modality]]]:
    """Open an ``.h5mu`` file or MuData ``.zarr`` store read-only: global obs, modalities."""
    path = Path(path)
    with _open_store(path) as (root, bound):
        with damaged(path):
            everyone, modalities = _modality_parts(root, path, bound)
        try:
            yield everyone, modalities
        finally:
            for modality in modalities.values():
                _close(modality.matrix)


def _modality_parts(root: Any, path: Path, bound: int) -> tuple[pd.DataFrame, dict[str, Modality]]:
    """The global obs and the modalities of an opened MuData file of ``bound`` bytes."""
    modalities: dict[str, Modality] = {}
    try:
        for name, where, owner in _modality_places(root, path):
            modalities[name] = _modality(root, where, owner, path, bound)
        return read_element(root["obs"]), modalities
    except BaseException:  # what was opened is closed (the files its arrays hold)
        for modality in modalities.values():
            _close(modality.matrix)
        raise


def _modality(root: Any, where: str, owner: str, path: Path, bound: int) -> Modality:
    """The modality at ``where`` of an opened MuData file (its matrix closed if its obs or
    var fails)."""
    group = root[where]
    matrix = _matrix(root, f"{where}/X", path, owner)
    try:
        frames = (group["obs"], group["var"])
        _check_frames(matrix, frames, bound, (f"{where}/X", owner, "var"), root)
        _check_library_matrix(matrix, owner)
        obs, var = read_element(group["obs"]), read_element(group["var"])
    except BaseException:
        _close(matrix)
        raise
    return Modality(matrix, obs, var, Source(owner, "X", path=True, modality=True))


def survey_modalities(path: str | os.PathLike[str]) -> dict[str, tuple[int, pd.Index]]:
    """The number of cells and the feature ids of each modality of an ``.h5mu`` file or
    MuData ``.zarr`` store, in MuData's order, read as :func:`survey_cells` reads them."""
    path = Path(path)
    with _open_store(path) as (root, bound), damaged(path):
        found = {}
        for name, where, owner in _modality_places(root, path):
            one = _shape_and_ids(root, f"{where}/X", f"{where}/var", owner, bound)
            if one is None:
                break
            found[name] = one
        else:
            return found
    with open_modalities(path) as (_, modalities):
        return {name: (int(m.matrix.shape[0]), m.var.index) for name, m in modalities.items()}


def _modality_places(root: Any, path: Path) -> list[tuple[str, str, str]]:
    """Each modality of an opened MuData file: its name, its group and how messages name it
    (each checked to hold X, obs and var)."""
    if "mod" not in root:
        msg = (
            f"{path} is not a MuData file (it has no 'mod' group): {_words.option('not_modality')}"
        )
        raise InputError(msg)
    if "obs" not in root:
        msg = f"{path} has no element 'obs' (the global obs of a MuData)"
        raise UnknownIdError(msg)
    places = []
    for name in _modality_order(root["mod"]):
        where = f"mod/{name}"
        for needed in ("X", "obs", "var"):
            if f"{where}/{needed}" not in root:
                msg = f"{path} has no element {where}/{needed}"
                raise UnknownIdError(msg)
        places.append((name, where, f"modality {name!r} of {os.fspath(path)}"))
    return places


def _modality_order(mod: Any) -> list[str]:
    """The modality names in MuData's order (attribute ``mod-order``), else as stored."""
    names = [str(name) for name in mod.attrs.get("mod-order", [])]
    return [name for name in names if name in mod] or [str(name) for name in mod]


@contextlib.contextmanager
def _open_store(path: Path) -> Iterator[tuple[Any, int]]:
    """The opened file (h5py File) or store (zarr Group) at ``path`` and the bytes it holds
    (every file of a store, each checked to be a regular file)."""
    if not path.exists():
        msg = f"no such file or store: {path}"
        raise FileNotFoundError(msg)
    if path.is_dir():
        import zarr

        bound = _store_bytes(path)
        try:
            group = zarr.open_group(path, mode="r")
        except Exception as error:
            if any((path / name).is_file() for name in ("zarr.json", ".zgroup")):
                problem = f"{type(error).__name__}: {error}"
                msg = f"{path} cannot be read as AnnData, its group is damaged: {problem}"
                raise FormatError(msg) from error
            msg = f"{path} is not an AnnData zarr store: it holds no Zarr group"
            raise InputError(msg) from error
        yield group, bound
        return
    import h5py

    if not path.is_file():
        msg = f"{path} is neither a regular file nor a directory: not an .h5ad file or .zarr store"
        raise FormatError(msg)
    try:
        file = h5py.File(path, "r")
    except OSError as error:
        if system_error(error):  # a file that cannot be read (PermissionError, ...)
            raise
        if _has_hdf5_signature(path):
            msg = f"{path} cannot be read as AnnData, it is damaged: {error}"
            raise FormatError(msg) from error
        msg = f"{path} is not an .h5ad (HDF5) file: {error}"
        raise InputError(msg) from error
    with file:
        with damaged(path):
            check_global_heaps(file, path)
        yield file, path.stat().st_size


_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _has_hdf5_signature(path: Path) -> bool:
    """Whether the file at ``path`` holds HDF5's signature where HDF5 looks for it: at byte
    0, 512, 1024, 2048, ... (after a user block, as MuData writes ``.h5mu``). A file that
    has one, yet that libhdf5 does not open, is a damaged HDF5 file (cut short, say)."""
    with path.open("rb") as file:
        size, offset = os.fstat(file.fileno()).st_size, 0
        while offset + len(_HDF5_SIGNATURE) <= size:
            file.seek(offset)
            if file.read(len(_HDF5_SIGNATURE)) == _HDF5_SIGNATURE:
                return True
            offset = max(512, 2 * offset)
    return False


def _matrix(root: Any, element: str, path: Path, owner: str) -> Any:
    """The matrix at ``element``: read by cytepool's file reader where it can
    (:mod:`cytepool.io.anndata._direct`), else by anndata's backed reader (a sparse one
    checked, once its shape is, by :func:`_check_library_matrix`)."""
    return open_matrix(root, element, path, owner) or _on_disk_matrix(root[element])


def _check_library_matrix(matrix: Any, owner: str) -> None:
    """Check a sparse matrix that anndata reads as cytepool's reader checks its own (lengths
    and indptr, :func:`~cytepool.io.anndata._direct.check_library_sparse`), before it is
    read: once its shape is checked against obs and var, for a shape claiming 10**15 rows
    would let its indptr claim as many entries. (A matrix cytepool reads imports nothing of
    anndata here.)"""
    if not isinstance(matrix, SparseMatrix | DenseMatrix) and is_sparse_dataset(matrix):
        check_library_sparse(matrix, owner)


def _close(matrix: Any) -> None:
    """Close what cytepool's file reader holds open (anndata's readers close with the file)."""
    if isinstance(matrix, SparseMatrix | DenseMatrix):
        matrix.close()


def _store_bytes(path: Path) -> int:
    """The bytes of every file of the store at ``path``, each checked to be a regular file (a
    FIFO would block a read), in one walk."""
    total, folders = 0, [path]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir():  # one a link points to is not walked, as by os.walk
                    folders += [] if entry.is_symlink() else [Path(entry.path)]
                elif entry.is_file():
                    total += entry.stat().st_size
                else:
                    msg = f"{entry.path} in the store {path} is not a regular file"
                    raise FormatError(msg)
    return total


def _on_disk_matrix(element: Any) -> Any:
    from anndata.io import sparse_dataset

    encoding = element.attrs.get("encoding-type", "")
    if encoding in {"csr_matrix", "csc_matrix"}:
        return sparse_dataset(element)
    if not hasattr(element, "shape") or len(element.shape) != 2:
        msg = f"{element.name} is not a matrix (encoding {encoding!r})"
        raise InputError(msg)
    return element


def cell_rows(matrix: Any, progress: bool | None) -> Any:
    """What ``from_cells`` pools: the matrix itself if in memory, else row blocks."""
    import scipy.sparse

    if isinstance(matrix, np.ndarray) or scipy.sparse.issparse(matrix):
        return matrix
    return shown(_row_blocks(matrix), matrix.shape[0], progress)


def is_sparse_dataset(matrix: Any) -> bool:
    from anndata.abc import CSCDataset, CSRDataset

    return isinstance(matrix, CSRDataset | CSCDataset)


def _row_blocks(matrix: Any) -> Iterator[Any]:
    """Row blocks of an on-disk matrix (backed sparse, h5py/zarr dense) or a dask array."""
    if hasattr(matrix, "blocks") and hasattr(matrix, "numblocks"):  # dask
        for i in range(matrix.numblocks[0]):
            yield matrix.blocks[i, :].compute()
        return
    for start, stop in block_bounds(matrix):
        yield matrix[start:stop]


def block_bounds(matrix: Any) -> Iterator[tuple[int, int]]:
    n_rows, n_columns = matrix.shape
    if n_rows == 0:  # one empty block, which tells from_cells the number of features
        yield 0, 0
        return
    if is_sparse_dataset(matrix):
        yield from nonzero_bounds(matrix.group["indptr"], n_rows)
        return
    rows = max(1, BLOCK_BYTES // max(1, n_columns * np.dtype(matrix.dtype).itemsize))
    for start in range(0, n_rows, rows):
        yield start, min(n_rows, start + rows)


def nonzero_bounds(indptr: Any, n_major: int) -> Iterator[tuple[int, int]]:
    """Runs of rows (CSR) or columns (CSC) of about BLOCK_NONZEROS nonzeros, at least one."""
    indptr = np.asarray(indptr[...], dtype=np.int64)
    marks = np.searchsorted(indptr, np.arange(0, indptr[-1], BLOCK_NONZEROS), "right")
    starts = np.unique(np.concatenate([[0], np.maximum(marks - 1, 0)]))
    stops = np.append(starts[1:], n_major)
    yield from ((int(a), int(b)) for a, b in zip(starts, stops, strict=True) if b > a)


def shown(
    blocks: Iterator[Any], n_rows: int, progress: bool | None, unit: str = "cells"
) -> Iterator[Any]:
    """The blocks, with a progress bar of the rows (``unit``) handed on."""
    bar = _progress.Progress(n_rows, "pooling", unit, enabled=progress)
    try:
        for block in blocks:
            yield block
            bar.update(block.shape[0] if unit == "cells" else block.shape[1])
    finally:
        bar.close()


def check_values(values: np.ndarray, where: str) -> None:
    """Counts-like values: numbers, finite and non-negative."""
    if values.dtype.kind not in "biuf":
        msg = f"{where} has dtype {values.dtype}; expected numbers (counts)"
        raise InputTypeError(msg)
    if values.size == 0 or values.dtype.kind in "bu":
        return
    low = values.min()
    if not low >= 0:
        what = "NaN values" if np.isnan(low) else f"negative values (min {low})"
        msg = f"{where} holds {what}: expected sums of counts; name their layer with layer="
        raise InputError(msg)
    if values.dtype.kind == "f" and not np.isfinite(values.max()):
        msg = f"{where} holds infinite values: expected counts"
        raise InputError(msg)


@dataclass(frozen=True)
class Source:
    """How messages name the cells being pooled: ``adata.raw.X``, or ``X of cells.h5ad``."""

    owner: str  # "adata", "mdata.mod['rna']", or a path as the user gave it
    matrix_key: str  # "X", "raw.X", "layers['counts']" (or "layer 'counts'" for a path)
    path: bool = False
    modality: bool = False  # of a MuData, whose X is pooled: no other matrix can be chosen
    cells: Any = None  # the names of the cells when not obs's index (CellNames of a file)

    def part(self, name: str) -> str:
        return f"{name} of {self.owner}" if self.path else f"{self.owner}.{name}"

    def names_of_cells(self, obs: pd.DataFrame) -> Any:
        """The names of the rows of ``obs`` (the cells), for messages."""
        return obs.index if self.cells is None else self.cells

    @property
    def matrix(self) -> str:
        return self.part(self.matrix_key)

    @property
    def obs(self) -> str:
        return self.part("obs")

    @property
    def var(self) -> str:
        return self.part("raw.var" if self.matrix_key == "raw.X" else "var")

    def pick_counts(self) -> str:
        """How to pool counts instead of this matrix, in the caller's words."""
        if self.modality:
            return "put the raw counts in the X of each modality"
        layer, raw = _words.option("layer"), _words.option("use_raw")
        return f"choose the matrix that holds them with {layer} or {raw}"


@dataclass(frozen=True)
class Modality:
    """What pooling needs of a modality: its matrix (in memory or on disk), obs, var, names."""

    matrix: Any
    obs: pd.DataFrame
    var: pd.DataFrame
    source: Source
