"""The check of chunk B-trees (cytepool.io.anndata._hdf5_chunk_tree): loops in a dataset's
version 1 chunk B-tree made libhdf5 crash or loop forever when pooling an .h5ad (the hunt of
round 20); a loop of child pointers is a FormatError, a loop of sibling pointers (which
libhdf5's reads do not follow) pools as the intact file does.

Each damaged file is pooled in a child process with a time limit: a regression crashes or
hangs the child, which fails the test instead of the test process.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
h5py = pytest.importorskip("h5py")
sparse = pytest.importorskip("scipy.sparse")

from cytepool.errors import FormatError  # noqa: E402
from cytepool.io.anndata import from_anndata  # noqa: E402
from cytepool.io.anndata._hdf5_chunk_tree import (  # noqa: E402
    check_chunk_tree,
    object_address,
    objects,
)

KEYS = {"sample_key": "sample", "group_key": "cell_type"}
KEY = 8 + 8 * 2  # a chunk key of a 1-D dataset: size, filter mask, 2 offsets
HEADER = 8 + 2 * 8  # signature, type, level, entries, left and right siblings
TIMEOUT = 60


def written(tmp_path: Path, libver: Any = "earliest") -> Path:
    """An .h5ad whose X/data has 2 values per chunk: some 150 chunks, a B-tree of two levels
    (a root over leaves of at most 64 chunks); X/indices is contiguous."""
    rng = np.random.default_rng(5)
    n, m = 60, 8
    X = sparse.csr_matrix(rng.poisson(0.7, (n, m)).astype(np.float32))
    obs = pd.DataFrame(
        {"sample": rng.choice(["a", "b"], n), "cell_type": rng.choice(["x", "y"], n)},
        index=[f"cell{i}" for i in range(n)],
    )
    path = tmp_path / "c.h5ad"
    with warnings.catch_warnings(), h5py.File(path, "w", libver=libver) as file:
        warnings.simplefilter("ignore")
        ad.io.write_elem(file, "obs", obs)
        ad.io.write_elem(file, "var", pd.DataFrame(index=[f"gene{j}" for j in range(m)]))
        matrix = file.create_group("X")
        matrix.attrs.update(
            {"encoding-type": "csr_matrix", "encoding-version": "0.1.0", "shape": X.shape}
        )
        matrix.create_dataset("data", data=X.data, chunks=(2,), compression="gzip")
        matrix.create_dataset("indices", data=X.indices)
        matrix.create_dataset("indptr", data=X.indptr)
        file.attrs.update({"encoding-type": "anndata", "encoding-version": "0.1.0"})
    return path


def root_of(path: Path) -> tuple[int, int]:
    """The byte offset and number of children of the root of X/data's chunk B-tree, the one
    chunk node (``TREE``, type 1) of a level above 0."""
    data = path.read_bytes()
    at = data.find(b"TREE")
    while at >= 0:
        if data[at + 4] == 1 and data[at + 5] > 0:
            return at, struct.unpack_from("<H", data, at + 6)[0]
        at = data.find(b"TREE", at + 1)
    pytest.fail("no internal node of a chunk B-tree")


def child_at(root: int, k: int) -> int:
    """The byte offset of the address of child ``k`` of the node at ``root``."""
    return root + HEADER + KEY + k * (8 + KEY)


def patched(path: Path, at: int, fmt: str, *values: int) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, at, *values)
    path.write_bytes(bytes(data))


def pooled_in_child(path: Path) -> tuple[str, Any]:
    """``("cube", its values as lists)`` or ``(error type, message)`` of pooling ``path`` in
    a child process; a crash or a hang of the child fails the test."""
    code = (
        "import json, sys, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from cytepool.io.anndata import from_anndata\n"
        "try:\n"
        f"    cube = from_anndata(sys.argv[1], **{KEYS!r}, progress=False)\n"
        "    print(json.dumps(['cube', cube.to_numpy().tolist()]))\n"
        "except Exception as error:\n"
        "    print(json.dumps([type(error).__name__, str(error)]))\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"pooling {path.name} did not end within {TIMEOUT} s")
    assert done.returncode == 0, f"the child ended with {done.returncode}: {done.stderr[-2000:]}"
    kind, found = json.loads(done.stdout.splitlines()[-1])
    return kind, found


def intact_cube(path: Path) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cube: list[Any] = from_anndata(path, **KEYS, progress=False).to_numpy().tolist()
    return cube


@pytest.mark.parametrize("libver", ["earliest", "v108"])
@pytest.mark.parametrize("child", ["first", "last"])
def test_a_child_that_is_its_own_node_is_a_format_error(
    tmp_path: Path, child: str, libver: str
) -> None:
    """The first child the root itself: libhdf5 crashed (visititems, chunk_iter); the last:
    it iterated the chunks forever. With ``v108``, the dataset's object header is of
    version 2."""
    path = written(tmp_path, (libver, libver) if libver != "earliest" else libver)
    root, count = root_of(path)
    patched(path, child_at(root, 0 if child == "first" else count - 1), "<Q", root)
    kind, message = pooled_in_child(path)
    assert kind == "FormatError"
    expected = (
        rf"c\.h5ad: dataset '/X/data': its chunk index \(a B-tree\) is damaged: the node at "
        rf"byte {root} lists the node at byte {root} as a child, which is reached twice"
    )
    assert re.search(expected, message), message


def test_a_child_that_is_an_ancestor_is_a_format_error(tmp_path: Path) -> None:
    """A leaf's address made that of the root: a node of the wrong level, reached again."""
    path = written(tmp_path)
    root, _ = root_of(path)
    patched(path, child_at(root, 1), "<Q", root)
    kind, message = pooled_in_child(path)
    assert kind == "FormatError"
    assert "X/data': its chunk index (a B-tree) is damaged" in message


def test_a_child_listed_twice_is_a_format_error(tmp_path: Path) -> None:
    path = written(tmp_path)
    root, _ = root_of(path)
    first = struct.unpack_from("<Q", path.read_bytes(), child_at(root, 0))[0]
    patched(path, child_at(root, 1), "<Q", first)
    kind, message = pooled_in_child(path)
    assert kind == "FormatError"
    assert f"lists the node at byte {first} as a child, which is reached twice" in message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("outside", r"the node at byte 9{12} goes past the end of the file \(\d+ bytes\)"),
        ("level", r"of level 7, expected 0 \(one less than its parent\)"),
        ("signature", "no node of a chunk B-tree"),
    ],
)
def test_a_child_that_is_no_node_of_the_tree_is_a_format_error(
    tmp_path: Path, change: str, expected: str
) -> None:
    path = written(tmp_path)
    root, _ = root_of(path)
    leaf = struct.unpack_from("<Q", path.read_bytes(), child_at(root, 0))[0]
    if change == "outside":
        patched(path, child_at(root, 0), "<Q", 999_999_999_999)
    elif change == "level":
        patched(path, leaf + 5, "<B", 7)
    else:
        patched(path, leaf, "<4s", b"EERT")
    kind, message = pooled_in_child(path)
    assert kind == "FormatError"
    assert re.search(r"c\.h5ad: dataset '/X/data': its chunk index \(a B-tree\)", message)
    assert re.search(expected, message), message


@pytest.mark.parametrize("node", ["root", "leaf"])
def test_siblings_that_loop_pool_as_the_intact_file(tmp_path: Path, node: str) -> None:
    """libhdf5 reads a file whose sibling pointers loop (anndata reads it), but computing the
    tree's size (visititems, object info) walked the siblings forever."""
    path = written(tmp_path)
    expected, matrix = intact_cube(path), read_matrix(path)
    root, _ = root_of(path)
    if node == "root":
        patched(path, root + 8, "<QQ", root, root)
    else:
        leaf = struct.unpack_from("<Q", path.read_bytes(), child_at(root, 0))[0]
        patched(path, leaf + 16, "<Q", leaf)
    assert pooled_in_child(path) == ("cube", expected)
    assert (read_matrix(path) != matrix).nnz == 0  # anndata reads the file too


def read_matrix(path: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ad.read_h5ad(path).X


def test_the_direct_reader_checks_the_tree_when_opening(tmp_path: Path) -> None:
    """DirectDataset, opened alone, checks the tree before it asks h5py for the chunks."""
    path = written(tmp_path)
    root, count = root_of(path)
    patched(path, child_at(root, count - 1), "<Q", root)
    code = (
        "import sys\n"
        "from cytepool.errors import FormatError\n"
        "from cytepool.io.anndata._hdf5 import DirectDataset\n"
        "try:\n"
        "    DirectDataset.open(sys.argv[1], 'X/data')\n"
        "except FormatError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "which is reached twice (a loop)" in done.stdout


@pytest.mark.parametrize("libver", ["earliest", "v108", "latest"])
def test_intact_trees_pass_and_objects_are_walked_as_visititems_walks_them(
    tmp_path: Path, libver: str
) -> None:
    path = written(tmp_path, libver if libver == "earliest" else (libver, libver))
    with h5py.File(path, "r") as file:
        expected: list[tuple[str, int]] = []
        file.visititems(lambda name, node: expected.append((name, h5py.h5o.get_info(node.id).addr)))
        found = [(name, object_address(node)) for name, node in objects(file)]
        assert found == expected
        assert object_address(file) == h5py.h5o.get_info(file.id).addr
        for _, node in objects(file):
            if isinstance(node, h5py.Dataset):
                check_chunk_tree(node, node.name)
    assert intact_cube(path)


def test_a_dataset_never_written_has_no_tree_to_check(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "x.h5", "w") as file:
        file.create_dataset("x", shape=(100,), chunks=(10,), dtype="f4")
    with h5py.File(tmp_path / "x.h5", "r") as file:
        check_chunk_tree(file["x"], "x")  # the tree's address is undefined


def test_the_check_raises_format_errors(tmp_path: Path) -> None:
    path = written(tmp_path)
    root, _ = root_of(path)
    patched(path, child_at(root, 0), "<Q", root)
    with h5py.File(path, "r") as file, pytest.raises(FormatError, match="reached twice"):
        check_chunk_tree(file["X/data"], "X/data")
