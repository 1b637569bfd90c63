"""What the commands of ``cytepool`` share: the parser, the help formatter, one-line errors,
the checks of an output path, and writing an AnnData atomically.

This module imports the standard library only (``--help`` needs no numpy); the libraries a
command needs are imported inside the functions that use them.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import re
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from cytepool.errors import InputError

if TYPE_CHECKING:
    import anndata

    from cytepool.cube import Cube

__all__ = [
    "CommandParser",
    "Formatter",
    "Parser",
    "UsageError",
    "Version",
    "add_command",
    "as_typed",
    "check_output",
    "check_writable",
    "one_line",
    "path_argument",
    "pooled_covariates",
    "without_ids",
    "write_anndata",
]

_ZARR_JSON = "zarr.json"


def one_line(error: BaseException | str) -> str:
    """The message of an error (or a warning) as one line, without error numbers."""
    if isinstance(error, ImportError) and error.name in {"anndata", "mudata", "h5py", "scipy"}:
        return (
            f"this command needs {error.name}: install cytepool's extra 'anndata' (in a checkout "
            f"of cytepool: pip install -e '.[anndata]')"
        )
    if isinstance(error, OSError) and error.strerror:  # without "[Errno 17]"
        text = error.strerror
        if error.filename is not None and os.fspath(error.filename) not in text:
            text = f"{text}: {os.fspath(error.filename)}"
    elif isinstance(error, KeyError) and error.args:
        text = str(error.args[0])
    else:
        text = str(error)
    text = " ".join(text.split())
    return text or type(error).__name__


# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------


class UsageError(InputError):
    """A bad argument found after the arguments were parsed (a value out of range, flags that
    do not go together): the command exits with status 2, as for argparse's usage errors."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class CommandParser(Parser):
    """A command's parser: its options may come before, between or after its positionals, as
    its usage line says (``pool IN1 IN2 --sample-key K --group-key G OUT``), whatever their
    number; argparse's own parsing took IN2 for OUTPUT there, OUT for an extra argument.
    Arguments with ``--`` among them are parsed as argparse parses them: intermixed parsing
    drops the ``--`` in its first pass, and would then take a name after it that starts with
    ``-`` (``cytepool info -- -c.cube.zarr``) for an option."""

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        given = sys.argv[1:] if args is None else args
        if self._intermixing or "--" in given:  # a pass of parse_known_intermixed_args
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


class Formatter(argparse.HelpFormatter):
    """Help that wraps paragraphs and keeps indented lines (the examples) as they are; a help
    text may be a function, called only when the help is shown (it may import)."""

    def _format_action(self, action: argparse.Action) -> str:
        if callable(action.help):
            action = copy.copy(action)
            action.help = action.help()
        return super()._format_action(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in textwrap.dedent(text).strip().split("\n\n"):
            if block.startswith(" "):
                blocks.append("\n".join(indent + line for line in block.splitlines()))
            else:
                blocks.append(
                    textwrap.fill(
                        " ".join(block.split()),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                    )
                )
        return "\n\n".join(blocks)


class Version(argparse.Action):
    """--version, reading the installed version (importlib.metadata) only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from cytepool._version import __version__

        print(f"cytepool {__version__}")
        parser.exit()


def path_argument(text: str) -> str:
    """A path typed on the command line (an argparse type): not an empty name, which
    ``Path`` would read as the working directory."""
    if not text:
        msg = "expected a path, found an empty name ('')"
        raise argparse.ArgumentTypeError(msg)
    return text


def add_command(
    commands: Any, name: str, text: str, examples: str, run: Callable[..., None]
) -> Any:
    """Add the command ``name`` to the subparsers ``commands``; ``run(args)`` runs it."""
    command = commands.add_parser(
        name, help=text, description=text, epilog=examples, formatter_class=Formatter
    )
    command.set_defaults(run=run)
    return command


def as_typed(text: str, args: argparse.Namespace) -> str:
    """The message with the paths of the command line as they were typed, not resolved."""
    given = [getattr(args, name, None) for name in ("input", "output", "cube", "directory")]
    for typed in (text for item in given for text in (item if isinstance(item, list) else [item])):
        if not isinstance(typed, str):
            continue
        path = Path(typed)
        forms = {str(path.absolute()), os.path.realpath(typed)}
        forms.add(os.path.join(os.path.realpath(path.parent), path.name))
        for form in sorted(forms - {typed}, key=len, reverse=True):
            text = text.replace(form, typed)
    return text


# ---------------------------------------------------------------------------------------------
# Cubes and tables
# ---------------------------------------------------------------------------------------------


def pooled_covariates(cube: Cube) -> dict[str, Any] | None:
    """What the last record of pooling says of the covariates kept and dropped, if any."""
    for record in reversed(cube.provenance):
        covariates = record.parameters.get("covariates")
        if isinstance(covariates, dict):
            return covariates
    return None


def without_ids(schema: dict[str, str], axis: str) -> dict[str, str]:
    """A schema (column name: data type) of the table ``axis`` (``"samples"``, ``"groups"``
    or ``"features"``) without its id column; a column named as another table's ids stays."""
    from cytepool._records import ID_COLUMNS

    return {name: dtype for name, dtype in schema.items() if name != ID_COLUMNS[axis]}


# ---------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------


_HDF5_SUFFIXES = (".h5ad", ".h5mu", ".h5", ".hdf5")
"""Names of HDF5 files, which a cube file (a Zarr directory) must not take."""


def check_output(
    typed: str,
    *,
    overwrite: bool,
    cube: bool,
    reading: Sequence[str] = (),
    role: str = "INPUT",
) -> None:
    """Refuse to replace something unless asked to, and then only what the command writes;
    refuse an output that is what the command reads (``reading``, named ``role`` in
    messages; see ``_check_apart``) or whose directory cannot be written. Before any long
    work.

    A cube file replaces only a cube file or an empty directory, by the rules of write_cube
    (:func:`cytepool.io._atomic.refusal`); an AnnData only a file, a Zarr store or an empty
    directory; never a symbolic link, nor the working directory or one that holds it. A
    cube file is not written under the name of an HDF5 file (``out.h5ad``: the directory
    would look like an AnnData file that nothing opens; or an input typed last, OUTPUT
    forgotten).
    """
    path = Path(typed)
    if cube and path.suffix.lower() in _HDF5_SUFFIXES:
        msg = (
            f"{typed}: OUTPUT (the last argument) is the cube file to write, a Zarr directory "
            f"(*.cube.zarr), not an {path.suffix} file; for a pseudobulk AnnData, write the "
            f"cube, then run: cytepool export CUBE {typed}"
        )
        raise InputError(msg)
    _check_apart(typed, reading, role)
    if os.path.lexists(path):
        if not overwrite:
            msg = f"{typed} exists; pass --overwrite to replace it"
            raise FileExistsError(msg)
        _check_replaceable(typed, cube=cube)
    elif not path.parent.is_dir():
        msg = f"the directory {path.parent} does not exist"
        raise FileNotFoundError(msg)
    check_writable(str(path.parent), typed)


def _check_replaceable(typed: str, *, cube: bool) -> None:
    """Refuse what ``--overwrite`` does not replace at ``typed`` (which exists)."""
    from cytepool.io._atomic import refusal

    path = Path(typed)
    if cube:
        what = "a cube file or an empty directory"
        from cytepool.io.cubes import is_cube_file  # here: the command starts without numpy

        found = refusal(path, is_cube_file)
    else:
        what = "a file or a Zarr store"
        found = refusal(path, _is_anndata_output)
    if found == "symbolic link":
        msg = f"{typed} is a symbolic link; --overwrite replaces only {what}: name its target"
    elif found == "working directory":
        msg = (
            f"{typed} is the working directory or holds it; --overwrite never replaces it "
            f"(only {what}): name another OUTPUT"
        )
    elif found is not None:
        msg = f"{typed} exists and is not {what}; --overwrite replaces only {what}"
    else:
        return
    raise FileExistsError(msg)


def check_writable(directory: str, typed: str) -> None:
    """Refuse ``typed`` (an output) if its ``directory`` cannot be written: a temporary
    directory is made there and removed, as writing makes one (permissions, a read-only
    file system, an immutable directory; root included)."""
    try:
        probe = tempfile.mkdtemp(prefix=".cytepool-probe-", dir=directory)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        msg = f"cannot write {typed}: the directory {directory} is not writable ({reason})"
        raise OSError(error.errno, msg) from error
    os.rmdir(probe)


def _check_apart(output: str, sources: Sequence[str], role: str) -> None:
    """Refuse an OUTPUT that is one of ``sources`` (the same file or directory, whatever the
    spelling or links), lies inside one, or holds one: writing it would change what is read.
    ``role`` names the sources in messages (``"CUBE"``, ``"INPUT"``)."""
    written = os.path.realpath(output)
    for source in sources:
        read = os.path.realpath(source)
        if read == written or _same_file(output, source):
            relation = "is"
        elif written.startswith(read.rstrip(os.sep) + os.sep):
            relation = "is inside"
        elif read.startswith(written.rstrip(os.sep) + os.sep):
            relation = "holds"
        else:
            continue
        msg = (
            f"OUTPUT {output} {relation} {role} {source}: writing it would change what is "
            f"read; name another OUTPUT"
        )
        raise InputError(msg)


def _same_file(first: str, second: str) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:  # either is missing
        return False


def _is_store(path: Path) -> bool:
    return any((path / name).is_file() for name in (_ZARR_JSON, ".zgroup"))


def _is_anndata_output(path: Path) -> bool:
    """Whether ``--overwrite`` replaces ``path`` (not a symbolic link) with an AnnData: a
    regular file or a Zarr store (an empty directory too, by the rules of the writes)."""
    return path.is_file() or _is_store(path)


def write_anndata(adata: anndata.AnnData, output: Path, *, overwrite: bool) -> None:
    """Write .h5ad or .zarr (Zarr v3) beside ``output``, then move it into place in one step
    (:func:`cytepool.io._atomic.replace_path`): what ``output`` held is removed only once the
    new one is there, so a write stopped at any point leaves one of them whole. An OSError
    names ``output``, not the temporary directory it is built in. With ``overwrite`` False,
    an ``output`` that appeared meanwhile is left as it is (a FileExistsError)."""
    from cytepool.io._atomic import replace_path

    built: list[Path] = []

    def build(path: Path) -> None:
        built.append(path)
        _write_anndata_at(adata, path, h5ad=output.suffix == ".h5ad")

    try:
        replace_path(
            output,
            build,
            overwrite=overwrite,  # check_output has refused what may not be replaced
            replaceable=_is_anndata_output,
            what="a file or a Zarr store",
            hint="pass --overwrite to replace it",
        )
    except OSError as error:
        raise _not_written(error, output, built[0] if built else None) from error


def _write_anndata_at(adata: anndata.AnnData, path: Path, *, h5ad: bool) -> None:
    import anndata as ad

    if h5ad:
        adata.write_h5ad(path)
        return
    with _zarr_v3(ad), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*zarr v3.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        adata.write_zarr(path)


def _not_written(error: OSError, output: Path, built: Path | None) -> OSError:
    """``error`` as the failure to write ``output``, without the path it was ``built`` at."""
    reason = error.strerror or str(error) or type(error).__name__
    if built is not None:
        reason = reason.replace(str(built), str(output))
        reason = reason.replace(str(built.parent), str(output.parent))
    message = f"{output} could not be written: {reason}"
    return OSError(message) if error.errno is None else OSError(error.errno, message)


def _zarr_v3(ad: Any) -> contextlib.AbstractContextManager[Any]:
    """Make anndata write Zarr v3: its default from 0.13 on (where the setting is deprecated)."""
    from importlib.metadata import version

    major, minor = (int(part) for part in re.findall(r"\d+", version("anndata"))[:2])
    if (major, minor) >= (0, 13):
        return contextlib.nullcontext()
    return ad.settings.override(zarr_write_format=3)
