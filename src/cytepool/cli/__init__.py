"""The ``cytepool`` command: pool AnnData files into cube files, inspect and export cubes.

Commands (each has ``--help``, with examples)::

    cytepool pool INPUT... OUTPUT.cube.zarr --sample-key K --group-key K [--layer L | --raw]
    cytepool info CUBE [--json]
    cytepool export CUBE OUTPUT.h5ad|OUTPUT.zarr [--layer L] [--group G]
    cytepool demo [DIR]

Each command is a module of this package (``pool``, ``info``, ``export``, ``demo``) with an
``add`` that adds it to the parser and a ``run`` that runs it; what they share (the parser,
the help formatter, one-line errors, output checks) is in ``_shared``.

The command speaks its own language: an error is one line on stderr, in the words of its
flags (``--layer``, not ``layer=``), with paths as they were given, and exit status 1, never a
traceback; bad arguments (an unknown flag, a value out of range, flags that do not go
together, an empty path) exit with status 2, whether argparse finds them or a command does
(:class:`~cytepool.cli._shared.UsageError`). A warning is one line too. Output cut short by
the reader (``cytepool info CUBE | head -1``) ends quietly with status 0. It starts quickly:
this package imports the standard library only (``--help`` needs no numpy).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from cytepool.cli import demo, export, info, pool
from cytepool.cli._shared import (
    CommandParser,
    Formatter,
    Parser,
    UsageError,
    Version,
    as_typed,
    one_line,
)

__all__ = ["main", "run"]

_EXAMPLES = """
    examples:

      cytepool demo
      cytepool pool cells.h5ad cells.cube.zarr --sample-key donor --group-key cell_type
      cytepool info cells.cube.zarr
      cytepool export cells.cube.zarr b_cells.h5ad --group B

    Each command has --help.

    Exit status: 0 on success, 1 on an error, 2 for bad arguments (an unknown flag, a value
    out of range, flags that do not go together), 130 when interrupted (Ctrl-C), 143 when
    terminated (SIGTERM); an interrupted or terminated write leaves what was there before.
    """


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``cytepool`` command line.

    Parameters
    ----------
    argv
        The arguments, without the program name; None reads ``sys.argv``.

    Returns
    -------
    int
        The exit status: 0 on success, 1 on an error, 2 for bad arguments, 130 when
        interrupted, 143 when terminated (SIGTERM, in the process of :func:`run`).

    Examples
    --------
    >>> from cytepool.cli import main
    >>> main(["--version"])  # doctest: +ELLIPSIS
    cytepool ...
    0
    """
    from cytepool import _words
    from cytepool.errors import NotCountsWarning

    parser, commands = _parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # reported by the command's parser, as its other usage errors are
            commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as stop:  # --help, --version, or a usage error (already printed)
        return stop.code if isinstance(stop.code, int) else 0
    with _words.speaking(command_line=True), warnings.catch_warnings():
        warnings.showwarning = _warning_printer(args.command)
        warnings.simplefilter("default", NotCountsWarning)  # a line to read, not a failure
        return _run(args)


def run() -> None:
    """The ``cytepool`` program (its console script, and ``python -m cytepool``): :func:`main`
    in a process of its own, which exits with its status.

    First it marks dask absent (unless already imported), so that nothing imports it: no
    command uses dask, and anndata would import ``dask.array`` for nothing. :func:`main`,
    called from Python, leaves the calling process as it was.
    """
    from cytepool._unused import hide_unused

    hide_unused()
    signal.signal(signal.SIGTERM, _terminate)  # this process's own: main() leaves it alone
    try:
        status = main()
    except KeyboardInterrupt:  # before or after a command ran (while importing, say)
        print("cytepool: interrupted", file=sys.stderr)
        status = 130
    except _Terminated:
        print("cytepool: terminated", file=sys.stderr)
        status = _TERMINATED
    sys.exit(status)


_TERMINATED = 128 + signal.SIGTERM  # 143, as a shell reports a process SIGTERM ended


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread: what a command is writing is cleaned up (the
    ``finally`` of an atomic write runs) before the process exits."""


def _terminate(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: another (`timeout` passes one on,
    raise _Terminated  # a process group gets one each) would cut the clean-up short


def _parser() -> tuple[Parser, dict[str, CommandParser]]:
    """The program's parser and each command's, by name."""
    parser = Parser(
        prog="cytepool",
        description="Pool single cells into pseudobulk cubes; inspect and export cube files.",
        epilog=_EXAMPLES,
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action=Version, nargs=0, help="show the version and exit")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
    )
    for command in (pool, info, export, demo):
        command.add(commands)
    return parser, commands.choices


def _run(args: argparse.Namespace) -> int:
    try:
        args.run(args)
        sys.stdout.flush()  # now, so that a closed pipe is met here and not at exit
    except BrokenPipeError:  # the reader has had enough (| head): not an error
        _discard_stdout()
        return 0
    except KeyboardInterrupt:
        print("cytepool: interrupted", file=sys.stderr)
        return 130
    except UsageError as error:  # a bad argument, as argparse reports one
        message = as_typed(one_line(error), args)
        see = f"see cytepool {args.command} --help"
        print(f"cytepool {args.command}: error: {message} ({see})", file=sys.stderr)
        return 2
    except Exception as error:  # every failure is one line, never a traceback
        message = as_typed(one_line(error), args)
        print(f"cytepool {args.command}: error: {message}", file=sys.stderr)
        return 1
    return 0


def _warning_printer(command: str) -> Callable[..., None]:
    def show(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
        print(f"cytepool {command}: warning: {one_line(message)}", file=sys.stderr)

    return show


def _discard_stdout() -> None:
    """Point stdout at the null device, so that flushing it at exit fails no more."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture it)
        pass
