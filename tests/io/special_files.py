"""Special files for the store-layer tests, and a way to run a read that must not block."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SPECIAL_FILES = {
    "fifo": "a FIFO",
    "socket": "a socket",
    "directory": "a directory",
    "device": "a character device",
}
"""What can stand where a regular file should, and how a refusal names it."""


def make_special(path: Path, kind: str) -> None:
    """Put a FIFO, a socket, a directory or (a link to) a device at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        here = os.getcwd()
        os.chdir(path.parent)  # a socket's path may hold only 107 bytes
        try:
            with socket.socket(socket.AF_UNIX) as server:
                server.bind(path.name)
        finally:
            os.chdir(here)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/null")


def without_blocking(call: Callable[[], Any], fifo: Path) -> Any:
    """Run ``call``; if it blocks on the FIFO for 5 s, release it (then fail the test)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the reader sees an empty file
        thread.join(5)
        pytest.fail(f"the read blocked on the FIFO {fifo}")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
