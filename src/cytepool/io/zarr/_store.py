"""Metadata documents on a local file system: reading, stamping and writing zarr.json."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cytepool.errors import FormatError, StoreChangedError
from cytepool.io.zarr.metadata import METADATA_FILE, dumps, loads

__all__ = ["Stamp", "as_path", "read_document", "write_document"]

_V2_FILES = (".zarray", ".zgroup", ".zattrs")


def as_path(path: Any, name: str = "path") -> Path:
    """``path`` as a Path (TypeError if it is not a str or os.PathLike)."""
    if not isinstance(path, str | os.PathLike):
        msg = f"{name} must be a str or os.PathLike, not {type(path).__name__}"
        raise TypeError(msg)
    return Path(path)


@dataclass(frozen=True)
class Stamp:
    """The identity of a metadata file: device, inode, size and modification time.

    Examples
    --------
    >>> a = Stamp(device=1, inode=2, size=3, mtime_ns=4)
    >>> a.matches(Stamp(device=1, inode=9, size=3, mtime_ns=4))
    False
    >>> a.matches(Stamp(device=5, inode=9, size=3, mtime_ns=4))  # another mount
    True
    """

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def from_stat(cls, result: os.stat_result) -> Stamp:
        """The stamp of a ``stat`` result."""
        return cls(result.st_dev, result.st_ino, result.st_size, result.st_mtime_ns)

    def matches(self, other: Stamp) -> bool:
        """Same size and mtime, and the same inode when on the same device."""
        same = (self.size, self.mtime_ns) == (other.size, other.mtime_ns)
        if self.device == other.device:
            return same and self.inode == other.inode
        return same

    def check(self, directory: Path) -> None:
        """Raise StoreChangedError unless ``directory/zarr.json`` still has this stamp."""
        path = directory / METADATA_FILE
        try:
            current = Stamp.from_stat(os.stat(path))
        except OSError as error:
            msg = f"the Zarr array {directory} changed since it was opened: {path} is gone"
            raise StoreChangedError(msg) from error
        if not self.matches(current):
            msg = (
                f"the Zarr array {directory} changed since it was opened: {path} is not the"
                " file it was (inode, size or modification time differ); open it again"
            )
            raise StoreChangedError(msg)


def read_document(directory: Path) -> tuple[Any, Stamp, str]:
    """Read and parse ``directory/zarr.json`` strictly.

    Returns
    -------
    The parsed JSON, the file's stamp, and its path as a string (for messages).

    Raises
    ------
    FileNotFoundError
        If there is no zarr.json (and no Zarr v2 metadata).
    FormatError
        If the file is not strict JSON, not a regular file, or the node is Zarr v2.
    """
    path = directory / METADATA_FILE
    where = str(path)
    try:
        with open(path, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                msg = f"{where} is not a regular file"
                raise FormatError(msg)
            text = file.read()
    except (FileNotFoundError, NotADirectoryError) as error:
        _check_not_v2(directory)
        msg = f"no Zarr v3 metadata at {directory}: {where} does not exist"
        raise FileNotFoundError(msg) from error
    except IsADirectoryError as error:
        msg = f"{where} is a directory, not a metadata file"
        raise FormatError(msg) from error
    return loads(text, where), Stamp.from_stat(info), where


def _check_not_v2(directory: Path) -> None:
    for name in _V2_FILES:
        if (directory / name).is_file():
            msg = (
                f"{directory} is a Zarr v2 node ({name}); only Zarr v3 (zarr.json) is supported:"
                " convert it with zarr-python"
            )
            raise FormatError(msg)


def write_document(directory: Path, document: dict[str, Any]) -> None:
    """Write ``directory/zarr.json`` (FileExistsError if it exists)."""
    text = dumps(document)
    with open(directory / METADATA_FILE, "x", encoding="ascii") as file:
        file.write(text)
