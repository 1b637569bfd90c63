"""Changes to AnnData stores that tests make by hand."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any


def filter_indices(path: Path) -> None:
    """Store X/indices of the Zarr v2 AnnData store at ``path`` again, with a filter (delta)
    and zstd: cytepool's reader leaves a filtered array to anndata's. The store's
    consolidated metadata (its copy of the old ``.zarray``) is dropped."""
    import numcodecs
    import zarr

    group: Any = zarr.open_group(path / "X", mode="r+")
    indices = group["indices"][...]
    attributes = dict(group["indices"].attrs)
    shutil.rmtree(path / "X" / "indices")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python's notes on Zarr v2 codecs
        array = group.create_array(
            "indices",
            shape=indices.shape,
            dtype=indices.dtype,
            chunks=(64,),
            filters=[numcodecs.Delta(dtype=indices.dtype.str)],
            compressors=[numcodecs.Zstd()],
        )
    array[...] = indices
    array.attrs.update(attributes)
    for folder in (path / "X", path):
        (folder / ".zmetadata").unlink(missing_ok=True)
