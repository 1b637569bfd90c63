"""Damaged .h5ad files and Zarr stores that hung or blew up memory (issue 23, the fuzz run).

Each test writes a small file with anndata, damages one structure the way
benchmarks/fuzz_cell_files.py found it damaged, and pools it by path: the result must be a
FormatError naming the file and what is damaged. libhdf5 itself loops forever on the first
kind, so those cases are pooled in a child process with a time limit: a regression fails the
test instead of hanging it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
h5py = pytest.importorskip("h5py")
sparse = pytest.importorskip("scipy.sparse")

from cytepool.errors import FormatError, InputError  # noqa: E402
from cytepool.io.anndata import from_anndata  # noqa: E402

KEYS = {"sample_key": "sample", "group_key": "cell_type"}


def cells() -> Any:
    rng = np.random.default_rng(3)
    obs = pd.DataFrame(
        {"sample": rng.choice(["a", "b"], 50), "cell_type": rng.choice(["x", "y"], 50)},
        index=[f"cell{i}" for i in range(50)],
    )
    var = pd.DataFrame(index=[f"gene{j}" for j in range(6)])
    return ad.AnnData(rng.integers(0, 5, (50, 6)).astype(np.float32), obs=obs, var=var)


def written(tmp_path: Path) -> Path:
    path = tmp_path / "c.h5ad"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cells().write_h5ad(path)
    return path


def collections(data: bytes) -> list[int]:
    """Byte offsets of the global heap collections (signature GCOL) of an HDF5 file."""
    return [match.start() for match in re.finditer(b"GCOL", data)]


def patched(path: Path, at: int, new: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[at : at + len(new)] = new
    path.write_bytes(bytes(data))


def pooled_in_child(path: Path) -> tuple[str, str]:
    """The error type and message of pooling ``path`` in a child process (600 s at most)."""
    code = (
        "import json, sys, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from cytepool.io.anndata import from_anndata\n"
        "try:\n"
        f"    from_anndata(sys.argv[1], **{KEYS!r})\n"
        "    print(json.dumps(['cube', '']))\n"
        "except Exception as error:\n"
        "    print(json.dumps([type(error).__name__, str(error)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    kind, message = json.loads(done.stdout.splitlines()[-1])
    return kind, message


def test_global_heap_with_empty_free_space_is_a_format_error(tmp_path: Path) -> None:
    """An object of index 0 and size 0 (free space that does not advance): libhdf5 would read
    the collection forever when it reads the first attribute."""
    path = written(tmp_path)
    first = collections(path.read_bytes())[0] + 16  # the collection's first object
    patched(path, first, bytes(2))  # index 0
    patched(path, first + 8, bytes(8))  # size 0
    kind, message = pooled_in_child(path)
    assert kind == "FormatError"
    expected = r"c\.h5ad is damaged: its global heap collection at byte \d+ lists object 0 .*"
    assert re.search(expected + "as empty free space", message), message


@pytest.fixture(params=["python", "numba"])
def heap_walker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each walk of the global heap: in Python (small files) and the numba kernel."""
    from cytepool.io.anndata import _hdf5_heap

    monkeypatch.setattr(_hdf5_heap, "walker", lambda sizes: request.param)
    return str(request.param)


def test_global_heap_object_past_its_collection_is_a_format_error(
    tmp_path: Path, heap_walker: str
) -> None:
    path = written(tmp_path)
    first = collections(path.read_bytes())[0] + 16
    patched(path, first + 8, (1 << 40).to_bytes(8, "little"))
    with pytest.raises(FormatError, match=r"c\.h5ad is damaged: .* of 1099511627776 bytes, past"):
        from_anndata(path, **KEYS)


def test_heap_signature_in_a_dataset_is_no_collection(tmp_path: Path) -> None:
    """Any dataset may hold the bytes of a collection's signature (here uns, 64 bytes: ``GCOL``,
    version 1, a size, then zeros, as a collection whose object 0 is empty free space): the
    search once walked them as one and refused the file."""
    path = tmp_path / "c.h5ad"
    adata = cells()
    blob = b"GCOL\x01\0\0\0" + (64).to_bytes(8, "little") + bytes(48)
    adata.uns["blob"] = np.frombuffer(blob, np.uint8).copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path)
    assert blob in path.read_bytes()
    pooled, expected = from_anndata(path, **KEYS), from_anndata(cells(), **KEYS)
    np.testing.assert_array_equal(pooled.layers["counts"], expected.layers["counts"])


def test_collection_the_search_skips_is_walked_when_strings_name_it(
    tmp_path: Path, heap_walker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection that strings name is walked even where the search for signatures does not
    look (the range a damaged chunk index claims for a dataset: here no range is searched)."""
    from cytepool.io.anndata import _hdf5_heap

    path = written(tmp_path)
    first = collections(path.read_bytes())[0] + 16
    patched(path, first + 8, (1 << 40).to_bytes(8, "little"))
    monkeypatch.setattr(_hdf5_heap, "_gaps", lambda ranges, size: [])
    with pytest.raises(FormatError, match=r"c\.h5ad is damaged: .* of 1099511627776 bytes, past"):
        from_anndata(path, **KEYS)


def test_strings_naming_bytes_without_a_signature_name_no_collection(tmp_path: Path) -> None:
    """A descriptor that names a place holding what a collection holds but its signature
    (here a byte array in uns: ``XXXX``, then a collection of one object, the first var name):
    no collection is there, as libhdf5 finds it (by the signature)."""
    path = tmp_path / "c.h5ad"
    adata = cells()
    first = str(adata.var_names[0]).encode()
    item = (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + bytes(4)
    item += len(first).to_bytes(8, "little") + first.ljust(8, b"\0")
    rest = (0).to_bytes(2, "little") + bytes(6) + (24).to_bytes(8, "little")
    blob = (b"XXXX\x01\0\0\0" + (64).to_bytes(8, "little") + item + rest).ljust(64, b"\0")
    adata.uns["blob"] = np.frombuffer(blob, np.uint8).copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata.write_h5ad(path)
    with h5py.File(path, "r") as file:
        at = int(file["uns/blob"].id.get_offset())
    name, offset = string_dataset(path)
    patched(path, offset + 4, at.to_bytes(8, "little"))  # the first name's heap and index
    patched(path, offset + 12, (1).to_bytes(4, "little"))
    message = rf"dataset '{name}' lists strings in a global heap collection at byte {at}, not one"
    with pytest.raises(FormatError, match=rf"c\.h5ad: {message}"):
        from_anndata(path, **KEYS)


def string_dataset(path: Path) -> tuple[str, int]:
    """The name and byte offset of the var names (variable-length strings, contiguous)."""
    with h5py.File(path, "r") as file:
        node = file["var/_index"]
        dataset = node["values"] if isinstance(node, h5py.Group) else node
        return dataset.name, int(dataset.id.get_offset())


def test_string_length_that_lies_allocates_nothing(tmp_path: Path) -> None:
    """A descriptor claiming a 1 GiB string: libhdf5 would allocate it before it compares it
    with the heap object."""
    path = written(tmp_path)
    name, offset = string_dataset(path)
    patched(path, offset, (1 << 30).to_bytes(4, "little"))
    message = rf"dataset '{name}' lists a value of 1073741824 bytes as object \d+ .* holds one of"
    with pytest.raises(FormatError, match=rf"c\.h5ad: {message}"):
        from_anndata(path, **KEYS)


def test_string_in_no_collection_is_a_format_error(tmp_path: Path) -> None:
    path = written(tmp_path)
    name, offset = string_dataset(path)
    patched(path, offset + 4, (24).to_bytes(8, "little"))
    message = rf"dataset '{name}' lists strings in a global heap collection at byte 24, not one"
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)


def test_string_past_the_objects_of_its_collection_is_a_format_error(tmp_path: Path) -> None:
    path = written(tmp_path)
    name, offset = string_dataset(path)
    patched(path, offset + 12, (60_000).to_bytes(4, "little"))  # the index, after n and heap
    message = rf"dataset '{name}' lists a value of \d+ bytes as object 60000 .* holds none"
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)


def checked_one_collection_at_a_time(
    descriptors: Any, itemsize: int, heaps: dict[int, Any], base: int
) -> str | None:
    """The message of the check of string descriptors against heaps as cytepool made it
    before (a pass per collection), or None: the reference of the test below."""
    used = descriptors[descriptors["n"] != 0]
    for heap in np.unique(used["heap"]).tolist():
        mine = used[used["heap"] == heap]
        sizes = heaps.get(int(heap) + base)
        if sizes is None:
            return f"w lists strings in a global heap collection at byte {heap}, not one"
        index = mine["index"].astype(np.int64)
        found = np.where(index < sizes.size, sizes[np.minimum(index, sizes.size - 1)], -1)
        wrong = np.flatnonzero(found != mine["n"].astype(np.int64) * itemsize)
        if wrong.size:
            k = wrong[0]
            stored = "none" if found[k] < 0 else f"one of {found[k]} bytes"
            return (
                f"w lists a value of {int(mine['n'][k]) * itemsize} bytes as object "
                f"{int(index[k])} of the global heap collection at byte {heap}, which holds "
                f"{stored}"
            )
    return None


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_descriptors_are_checked_as_one_collection_at_a_time(data: st.DataObject) -> None:
    """All descriptors looked up at once report what a pass per collection reported: the
    first wrong one of the collection of the lowest address (base: a user block)."""
    from cytepool.io.anndata._hdf5_heap import _check_against_heaps

    base = data.draw(st.sampled_from([0, 512]))
    sizes = st.lists(st.sampled_from([-1, 0, 3, 8]), min_size=1, max_size=5)
    tables = data.draw(st.dictionaries(st.sampled_from([96, 200, 4096]), sizes, max_size=3))
    heaps = {at + base: np.array([-1, *found], np.int64) for at, found in tables.items()}
    dtype = np.dtype([("n", "<u4"), ("heap", "<u8"), ("index", "<u4")])
    rows = st.tuples(
        st.sampled_from([0, 1, 3, 8]), st.sampled_from([96, 200, 4096, 24]), st.integers(0, 7)
    )
    descriptors = np.array(data.draw(st.lists(rows, max_size=12)), dtype=dtype)
    itemsize = data.draw(st.sampled_from([1, 4]))
    expected = checked_one_collection_at_a_time(descriptors, itemsize, heaps, base)
    if expected is None:
        _check_against_heaps(descriptors, itemsize, heaps, base, "w")
        return
    with pytest.raises(FormatError) as raised:
        _check_against_heaps(descriptors, itemsize, heaps, base, "w")
    assert str(raised.value) == expected


def walked(data: bytes) -> list[tuple[tuple[int, int], list[tuple[int, int]]]]:
    """What each walker (Python, numba) finds in the collection ``data``: (count, where it
    would not end), and the (index, size) of the objects found."""
    from cytepool.io.anndata._hdf5_heap import heap_objects_walked
    from cytepool.io.anndata._hdf5_kernels import heap_objects

    array = np.frombuffer(data, np.uint8)
    results = []
    for walk in (heap_objects_walked, heap_objects):
        found = np.zeros((len(data) // 16 + 1, 2), np.int64)
        count, bad = walk(array, 16, 16, found)
        results.append(((int(count), int(bad)), [tuple(map(int, row)) for row in found[:count]]))
    return results


def test_the_python_and_numba_heap_walks_agree(tmp_path: Path) -> None:
    """On the intact collection of an anndata file and on 300 one-byte changes of it, the
    Python walk finds what the kernel finds."""
    data = written(tmp_path).read_bytes()
    at = collections(data)[0]
    size = int.from_bytes(data[at + 8 : at + 16], "little")
    collection = data[at : at + size]
    python, kernel = walked(collection)
    assert python == kernel
    assert python[0] == (len(python[1]), -1)  # intact: walked to its end
    assert python[1]
    rng = np.random.default_rng(11)
    for _ in range(300):
        mutated = bytearray(collection)
        mutated[int(rng.integers(16, len(mutated)))] = int(rng.integers(0, 256))
        python, kernel = walked(bytes(mutated))
        assert python == kernel, python[0]


def test_the_heap_is_walked_in_python_until_numba_is_loaded_or_it_is_large(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file's heap up to PYTHON_WALK_BYTES (the names of some 30,000 cells and genes) does
    not start numba; a larger one, or any once numba's kernels are loaded, is walked by the
    kernel."""
    from cytepool.io.anndata import _hdf5_heap

    for name in _hdf5_heap._KERNELS:
        monkeypatch.delitem(sys.modules, name, raising=False)
    most = _hdf5_heap.PYTHON_WALK_BYTES
    assert most >= 32 * 60_000  # 30,000 cells and 30,000 genes of short names
    assert _hdf5_heap.walker([most // 2, most // 2]) == "python"
    assert _hdf5_heap.walker([most // 2, most // 2 + 1]) == "numba"
    monkeypatch.setitem(sys.modules, _hdf5_heap._KERNELS[1], sys)  # numba's kernels loaded
    assert _hdf5_heap.walker([8]) == "numba"


def attribute_string(path: Path, name: str, attribute: str) -> int:
    """The byte offset of the string descriptor (length, collection, object index) of the
    variable-length string ``attribute`` of object ``name``, in its object header (addresses
    count from the end of the file's user block)."""
    with h5py.File(path, "r") as file:
        base = file.id.get_create_plist().get_userblock()
        header = base + h5py.h5o.get_info(file[name].id).addr
        value = str(file[name].attrs[attribute]).encode()
    data = path.read_bytes()
    descriptors = [
        len(value).to_bytes(4, "little") + (at - base).to_bytes(8, "little")
        for at in collections(data)
    ]
    return min(
        data.index(descriptor, header) for descriptor in descriptors if descriptor in data[header:]
    )


def test_attribute_string_of_no_heap_object_is_a_format_error(tmp_path: Path) -> None:
    """An attribute's string naming an object its global heap collection does not hold (the
    fuzz run: one changed byte of the object index): libhdf5 1.14.2 (h5py 3.11) read past the
    collection's list of objects and crashed the process; the descriptor is checked first."""
    path = written(tmp_path)
    at = attribute_string(path, "obs/_index", "encoding-type")
    index = int.from_bytes(path.read_bytes()[at + 12 : at + 16], "little")
    patched(path, at + 12, (index | 0xEA000000).to_bytes(4, "little"))
    kind, message = pooled_in_child(path)
    assert kind == "FormatError", message
    expected = r"c\.h5ad: attribute 'encoding-type' of '/obs/_index' lists a value of \d+ bytes"
    assert re.search(expected + r" as object \d+ of the global heap .*, which holds none", message)


def written_with(tmp_path: Path, libver: str, track_order: bool) -> Path:
    """cells() written by anndata into an HDF5 file of object headers of version 1
    (``libver="earliest"``) or 2 (``"latest"``; ``track_order``: attribute creation order
    kept, a field more per message)."""
    path = tmp_path / "c.h5ad"
    options = {"libver": libver, "track_order": track_order}
    with warnings.catch_warnings(), h5py.File(path, "w", **options) as file:
        warnings.simplefilter("ignore")
        ad.io.write_elem(file, "/", cells())
    return path


HEADERS = pytest.mark.parametrize(
    ("libver", "track_order"),
    [("earliest", False), ("latest", False), ("latest", True)],
    ids=["header-v1", "header-v2", "header-v2-ordered"],
)


@HEADERS
def test_attribute_string_length_that_lies_allocates_nothing(
    tmp_path: Path, libver: str, track_order: bool
) -> None:
    """An attribute's string claiming 3.6 GiB (the fuzz run: one changed byte of its length):
    libhdf5 allocated and filled 3.9 GiB, for 9 s, before it failed. In a header of version 1
    cytepool finds it; a header of version 2 has a checksum, which libhdf5 checks first."""
    path = written_with(tmp_path, libver, track_order)
    at = attribute_string(path, "obs", "encoding-version")  # "0.2.0" (5 bytes), from obs on
    patched(path, at + 3, bytes([0xE7]))
    where = r"c\.h5ad: attribute 'encoding-version' of '/obs[^']*'"
    message = rf"{where} lists a value of \d{{10}} bytes as object \d+ .* holds one of 5 bytes"
    if libver != "earliest":
        message = r"c\.h5ad cannot be read as AnnData, it is damaged: .*incorrect metadata checksum"
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)


def string_attribute_lengths(path: Path) -> list[tuple[str, dict[str, list[int]], Any]]:
    """For every object of the HDF5 file at ``path``: its name, the byte length of each string
    of each of its variable-length string attributes as h5py reads them, and as the header
    reader finds them stored."""
    from cytepool.io.anndata._hdf5_headers import string_attributes

    data = path.read_bytes()
    nodes: list[Any] = []
    result = []
    with h5py.File(path, "r") as file:
        file.visititems(lambda _, node: nodes.append(node))
        plist = file.id.get_create_plist()
        sizes, base = plist.get_sizes(), plist.get_userblock()
        descriptor = [("n", "<u4"), ("at", f"<u{sizes[0]}"), ("i", "<u4")]
        for node in [file, *nodes]:
            expected = {}
            for name in node.attrs:
                kind = h5py.h5a.open(node.id, name.encode()).get_type()
                if isinstance(kind, h5py.h5t.TypeStringID) and kind.is_variable_str():
                    values = np.atleast_1d(node.attrs[name])
                    expected[name] = [len(str(v).encode()) for v in values]
            header = h5py.h5o.get_info(node.id).addr
            found = string_attributes(data, header, sizes, base)
            lengths = {name: np.frombuffer(raw, descriptor)["n"].tolist() for name, raw in found}
            result.append((node.name, expected, lengths))
    return result


@HEADERS
def test_every_string_attribute_is_found_in_its_object_header(
    tmp_path: Path, libver: str, track_order: bool
) -> None:
    """What the header reader finds is, for every object of an anndata file, its
    variable-length string attributes (name and stored length of each string); nothing in a
    header of version 2, which libhdf5 checks against its checksum."""
    path = written_with(tmp_path, libver, track_order)
    objects = string_attribute_lengths(path)
    for name, expected, found in objects:
        assert found == (expected if libver == "earliest" else {}), name
    seen = sum(len(found) for _, _, found in objects)
    assert seen > 20 if libver == "earliest" else seen == 0


CORPUS = Path(__file__).parents[1] / "data" / "anndata-corpus"


@pytest.mark.parametrize(
    "name", sorted(p.name for p in CORPUS.iterdir() if p.suffix in (".h5ad", ".h5mu"))
)
def test_every_string_attribute_of_the_corpus_is_found(name: str) -> None:
    """Files of anndata 0.6 to 0.13 and MuData (whose user block of 512 bytes shifts every
    address, continuation blocks' too): every string attribute is found where it is stored."""
    objects = string_attribute_lengths(CORPUS / name)
    for node, expected, found in objects:
        assert found == expected, node
    assert sum(len(found) for _, _, found in objects) >= 2


@given(changes=st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), max_size=8))
@settings(max_examples=300, deadline=None)
def test_the_header_reader_stays_in_bounds_on_damaged_headers(
    tmp_path_factory: pytest.TempPathFactory, changes: list[tuple[int, int]]
) -> None:
    """Any bytes of a header changed: the reader gives strings of at most the message they are
    in, or none; it raises nothing and reads nothing past the file."""
    from cytepool.io.anndata._hdf5_headers import string_attributes

    path = written_with(tmp_path_factory.mktemp("h"), "earliest", False)
    with h5py.File(path, "r") as file:
        header = h5py.h5o.get_info(file["obs"].id).addr
    data = bytearray(path.read_bytes())
    for offset, value in changes:
        data[(header + offset) % len(data)] = value
    for name, raw in string_attributes(bytes(data), header, (8, 8)):
        assert isinstance(name, str)
        assert len(raw) % 16 == 0
        assert len(raw) <= 1 << 16


def test_attribute_of_variable_length_sequences_is_a_format_error(tmp_path: Path) -> None:
    """An attribute whose datatype became a variable-length sequence (the fuzz run: one
    changed byte of an encoding-type's datatype) crashed the process in h5py."""
    path = written(tmp_path)
    with h5py.File(path, "a") as file:
        kind = h5py.vlen_dtype(np.dtype("int32"))
        sequences = np.empty(1, dtype=kind)
        sequences[0] = np.arange(3, dtype=np.int32)
        file["obs/cell_type"].attrs.create("odd", sequences, dtype=kind)
    where = r"c\.h5ad: attribute 'odd' of '/obs/cell_type'"
    with pytest.raises(FormatError, match=rf"{where} is a variable-length sequence"):
        from_anndata(path, **KEYS)


def test_chunk_libhdf5_cannot_decode_is_a_format_error_naming_the_file(tmp_path: Path) -> None:
    """A gzip chunk of obs that libhdf5 cannot inflate: h5py's OSError ("filter returned
    failure during read" from HDF5 2.0, "inflate() failed" from 1.14) named no file; it
    becomes a FormatError naming it."""
    path = tmp_path / "c.h5ad"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cells().write_h5ad(path, compression="gzip")
    with h5py.File(path, "r") as file:
        node = file["obs/cell_type"]
        codes = node["codes"] if isinstance(node, h5py.Group) else node
        chunk = codes.id.get_chunk_info(0)
    patched(path, chunk.byte_offset, bytes(range(7, 7 + min(chunk.size, 64))))
    where = r"c\.h5ad cannot be read as AnnData, it is damaged: "
    libhdf5 = r"Can't synchronously read data \((filter returned failure|inflate\(\) failed)"
    with pytest.raises(FormatError, match=where + libhdf5) as caught:
        from_anndata(path, **KEYS)
    assert isinstance(caught.value.__cause__, OSError)


def written_behind_a_user_block(tmp_path: Path) -> Path:
    """cells() written by anndata into an HDF5 file with a user block of 512 bytes (as MuData's
    .h5mu has one), from whose end the file's addresses count."""
    path = tmp_path / "u.h5ad"
    with h5py.File(path, "w", userblock_size=512):
        pass
    with warnings.catch_warnings(), h5py.File(path, "a") as file:
        warnings.simplefilter("ignore")
        ad.io.write_elem(file, "/", cells())
    return path


def test_attribute_string_that_lies_behind_a_user_block_is_found(tmp_path: Path) -> None:
    """A lying length of an attribute's string is found behind a user block too."""
    path = written_behind_a_user_block(tmp_path)
    at = attribute_string(path, "obs", "encoding-version")
    patched(path, at + 3, bytes([0xE7]))
    message = r"u\.h5ad: attribute 'encoding-version' of '/obs[^']*' lists a value of \d{10} bytes"
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)


def test_intact_file_with_a_user_block_pools(tmp_path: Path) -> None:
    """Heap addresses count from the end of a user block (as MuData's .h5mu has one)."""
    cube = from_anndata(written_behind_a_user_block(tmp_path), **KEYS)
    assert cube.cells.sum() == 50


@pytest.mark.parametrize("user_block", [False, True])
def test_a_file_cut_short_is_a_format_error_naming_it(tmp_path: Path, user_block: bool) -> None:
    """An .h5ad cut short (by a copy, a download) holds HDF5's signature but does not open:
    h5py's OSError with no error number is damage, a FormatError naming the file (it was an
    InputError saying the file is no HDF5 file), behind a user block too."""
    path = written_behind_a_user_block(tmp_path) if user_block else written(tmp_path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    message = rf"^{re.escape(str(path))} cannot be read as AnnData, it is damaged: .*truncated"
    with pytest.raises(FormatError, match=message) as caught:
        from_anndata(path, **KEYS)
    assert type(caught.value.__cause__) is OSError
    assert caught.value.__cause__.errno is None


def test_a_file_without_the_hdf5_signature_is_no_h5ad(tmp_path: Path) -> None:
    """Bytes with no HDF5 signature at 0, 512, 1024, ...: not an .h5ad, an InputError."""
    path = tmp_path / "c.h5ad"
    path.write_bytes(b"\x89HDF\r\n\x1a\n"[:7] + bytes(3000))
    with pytest.raises(InputError, match=r"c\.h5ad is not an \.h5ad \(HDF5\) file") as caught:
        from_anndata(path, **KEYS)
    assert not isinstance(caught.value, FormatError)


def test_a_file_the_system_refuses_passes_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError of the system (its error number set), such as a file that may not be read,
    passes as it is when h5py opens the file (it was an InputError)."""
    path = written(tmp_path)

    def refused(*_: Any, **__: Any) -> Any:
        raise PermissionError(13, "Unable to synchronously open file (Permission denied)")

    monkeypatch.setattr(h5py, "File", refused)
    with pytest.raises(PermissionError, match="Permission denied"):
        from_anndata(path, **KEYS)


@pytest.mark.parametrize("text", ['{"zarr_format": "x"}', "{not json"])
def test_damaged_zarr_group_metadata_is_a_format_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cells().write_zarr(path)
    root = next(path / name for name in ("zarr.json", ".zgroup") if (path / name).exists())
    root.write_text(text)
    with pytest.raises(FormatError, match=r"c\.zarr cannot be read as AnnData, its group is"):
        from_anndata(path, **KEYS)


@pytest.mark.parametrize("element", ["X", "X/data"])
def test_an_element_gone_from_a_zarr_store_is_a_format_error(tmp_path: Path, element: str) -> None:
    """The store's metadata (consolidated) still lists it: the store is damaged, whichever Zarr
    version anndata wrote (the message said "no Zarr v3 metadata", a FileNotFoundError)."""
    path = tmp_path / "c.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adata = cells()
        adata.X = sparse.csr_matrix(adata.X)
        adata.write_zarr(path)
    shutil.rmtree(path / element)
    with pytest.raises(FormatError, match=r"X/data of .*c\.zarr is missing from the store \("):
        from_anndata(path, **KEYS)


def zarr_v2(tmp_path: Path) -> Path:
    """A Zarr v2 store of cells(), without consolidated metadata (so an edit is read)."""
    path = tmp_path / "c.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(ad.settings, "zarr_write_format"):
            with ad.settings.override(zarr_write_format=2):
                cells().write_zarr(path)
        else:
            cells().write_zarr(path)
    (path / ".zmetadata").unlink(missing_ok=True)
    return path


def without_column_order(path: Path) -> None:
    """Delete the attribute ``column-order`` of obs of the file or Zarr v2 store ``path``."""
    if path.is_dir():
        attributes = path / "obs" / ".zattrs"
        attrs = json.loads(attributes.read_text())
        del attrs["column-order"]
        attributes.write_text(json.dumps(attrs))
        return
    with h5py.File(path, "r+") as file:
        del file["obs"].attrs["column-order"]


@pytest.mark.parametrize("kind", ["h5ad", "zarr"])
def test_obs_without_its_column_order_is_a_format_error(tmp_path: Path, kind: str) -> None:
    """anndata requires the list of a dataframe's columns (a KeyError without it); cytepool
    read obs without columns, then said the sample key was not one."""
    path = written(tmp_path) if kind == "h5ad" else zarr_v2(tmp_path)
    without_column_order(path)
    message = (
        rf"c\.{kind} cannot be read as AnnData, it is damaged: the dataframe '/obs' has no "
        r"attribute 'column-order' \(the list of its columns, which anndata requires\), only "
        r"\['_index', 'encoding-type', 'encoding-version'\]: write the file again"
    )
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)


def claim(array: Path, length: int) -> None:
    meta = json.loads((array / ".zarray").read_text())
    meta["shape"] = [length]
    (array / ".zarray").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("array", "length", "message"),
    [
        ("obs/sample/codes", 10**9, r"obs of .*c\.zarr, sample/codes has 1000000000 entries"),
        ("obs/sample/codes", 49, r"sample/codes has 49 entries, expected one per row \(50\)"),
        ("var/_index", 10**9, r"var of .*c\.zarr, .*_index.* has 1000000000 entries"),
        ("obs/sample/categories", 10**12, r"sample/categories claims 1000000000000 entries"),
    ],
)
def test_obs_and_var_lengths_that_lie_allocate_nothing(
    tmp_path: Path, array: str, length: int, message: str
) -> None:
    """Every array of obs and var is checked against the rows of X (the categories against
    the size of the store) before anndata reads it."""
    path = zarr_v2(tmp_path)
    target = path / array
    if not (target / ".zarray").exists():  # anndata >= 0.13: the index is nullable strings
        target = target / "values"
    claim(target, length)
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS)


def with_matrices(tmp_path: Path, kind: str, element: str, shape: tuple[int, int]) -> Path:
    """cells() with a layer 'counts' and raw, written as ``kind``; the matrix at ``element``
    then stored again with ``shape`` (obs, var and the other matrices intact)."""
    adata = cells()
    adata.layers["counts"] = adata.X.copy()
    adata.raw = adata.copy()
    path = tmp_path / f"c.{kind}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "h5ad":
            adata.write_h5ad(path)
        else:
            with ad.settings.override(zarr_write_format=2):
                adata.write_zarr(path)
    values = np.ones(shape, dtype=np.float32)
    if kind == "h5ad":
        with h5py.File(path, "a") as f:
            attributes = dict(f[element].attrs)
            del f[element]
            f.create_dataset(element, data=values).attrs.update(attributes)
        return path
    import zarr

    (path / ".zmetadata").unlink(missing_ok=True)
    parent, name = element.rsplit("/", 1) if "/" in element else ("", element)
    group: Any = zarr.open_group(path / parent, mode="r+")
    attributes = dict(group[name].attrs)
    del group[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python's notes on Zarr v2
        group.create_array(name, data=values).attrs.update(attributes)
    return path


@pytest.mark.parametrize("kind", ["h5ad", "zarr"])
@pytest.mark.parametrize(
    ("element", "shape", "source", "message"),
    [
        ("layers/counts", (51, 6), {"layer": "counts"}, r"layers/counts of .*has shape \(51, 6\)"),
        ("layers/counts", (50, 7), {"layer": "counts"}, r"layers/counts of .*has shape \(50, 7\)"),
        ("raw/X", (51, 6), {"use_raw": True}, r"raw/X of .*has shape \(51, 6\)"),
        ("X", (51, 6), {}, r"X of .*has shape \(51, 6\)"),
    ],
)
def test_a_matrix_of_the_wrong_shape_is_blamed_not_obs_or_var(
    tmp_path: Path, kind: str, element: str, shape: Any, source: Any, message: str
) -> None:
    """A matrix whose shape disagrees with obs and var, which agree with themselves (and
    with X): the FormatError names the matrix, its shape and their lengths (it said that
    the intact obs or var was damaged, and never named the matrix)."""
    path = with_matrices(tmp_path, kind, element, shape)
    var = "raw/var" if source.get("use_raw") else "var"
    message += rf", but obs has 50 rows and {var} 6 \(one per cell and one per feature\): "
    message += "the matrix is damaged$"
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS, **source)


@pytest.mark.parametrize("kind", ["h5ad", "zarr"])
@pytest.mark.parametrize(
    ("element", "source", "var"), [("X", {}, "var"), ("raw/X", {"use_raw": True}, "raw/var")]
)
def test_a_matrix_and_an_index_alone_that_disagree_are_both_named(
    tmp_path: Path, kind: str, element: str, source: Any, var: str
) -> None:
    """var holds its index alone (no column): when the matrix's width disagrees with it,
    nothing tells which of the two is damaged, and the FormatError names both (it said the
    intact var was damaged)."""
    path = with_matrices(tmp_path, kind, element, (50, 7))
    message = rf"{element} of .*has shape \(50, 7\), but {var} has 6 entries in its one array of "
    message += r"a row \(one per feature\): one of the two is damaged$"
    with pytest.raises(FormatError, match=message):
        from_anndata(path, **KEYS, **source)


def test_a_layer_of_the_wrong_width_is_blamed_when_files_are_surveyed(tmp_path: Path) -> None:
    """Pooling several files reads each one's shape and var first: there too the matrix is
    named, not var."""
    path = with_matrices(tmp_path, "h5ad", "layers/counts", (50, 7))
    other = shutil.copyfile(path, tmp_path / "d.h5ad")
    message = r"layers/counts of .*c\.h5ad has shape \(50, 7\), but obs has 50 rows and var 6"
    with pytest.raises(FormatError, match=message):
        from_anndata([path, other], **KEYS, layer="counts")


def recoded_strings(chunk: Path, change: Any) -> None:
    """Decode a chunk of Zarr v2 strings (blosc), ``change`` its bytes, encode it again."""
    import numcodecs

    blosc = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    decoded = bytearray(blosc.decode(chunk.read_bytes()))
    change(decoded)
    chunk.write_bytes(blosc.encode(bytes(decoded)))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda chunk: chunk.write_bytes(chunk.read_bytes()[:14]), "too few for a blosc frame"),
        (
            lambda chunk: recoded_strings(chunk, lambda b: b.__setitem__(3, 0xFD)),
            r"claims 4244635650 strings; a chunk holds 2",
        ),
    ],
    ids=["cut-short", "count-that-lies"],
)
def test_string_chunk_that_lies_allocates_nothing(
    tmp_path: Path, damage: Any, message: str
) -> None:
    """A chunk of obs strings cut short (the fuzz run: blosc read past it, and numcodecs then
    allocated 4 billion strings, 32 GiB) or claiming more strings than its chunk holds."""
    path = zarr_v2(tmp_path)
    meta = json.loads((path / "obs" / "sample" / "categories" / ".zarray").read_text())
    assert meta["filters"] == [{"id": "vlen-utf8"}]
    damage(path / "obs" / "sample" / "categories" / "0")
    where = r"obs of .*c\.zarr, sample/categories, chunk 0"
    with pytest.raises(FormatError, match=rf"{where}: .*{message}"):
        from_anndata(path, **KEYS)


def zarr_v3(tmp_path: Path) -> Path:
    """A Zarr v3 store of cells(), without consolidated metadata (so an edit is read)."""
    path = tmp_path / "c.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata 0.13 deprecates the setting: v3 is its default
        with ad.settings.override(zarr_write_format=3):
            cells().write_zarr(path)
    meta = json.loads((path / "zarr.json").read_text())
    meta.pop("consolidated_metadata", None)
    (path / "zarr.json").write_text(json.dumps(meta))
    return path


def test_zarr_v3_string_chunk_that_lies_allocates_nothing(tmp_path: Path) -> None:
    """A Zarr v3 chunk of obs strings claiming 4 billion strings: zarr-python decodes it with
    numcodecs, which allocated them (32 GiB) before checking; cytepool's reader refuses it."""
    path = zarr_v3(tmp_path)
    array = path / "obs" / "sample" / "categories"
    meta = json.loads((array / "zarr.json").read_text())
    meta["codecs"] = [{"name": "vlen-utf8", "configuration": {}}]  # unsharded, uncompressed
    (array / "zarr.json").write_text(json.dumps(meta))
    for chunk in (array / "c").iterdir():
        chunk.unlink() if chunk.is_file() else None
    (array / "c" / "0").write_bytes((0xFFFFFFF0).to_bytes(4, "little") + bytes(4))
    where = r"obs of .*c\.zarr, sample/categories: corrupt chunk .*categories/c/0"
    with pytest.raises(FormatError, match=rf"{where}: .*holds 4294967280 items, expected"):
        from_anndata(path, **KEYS)


@given(
    data=st.binary(max_size=64),
    sub=st.binary(min_size=1, max_size=4),
    start=st.integers(0, 70),
    stop=st.integers(0, 70),
    piece=st.integers(1, 9),
)
@settings(max_examples=300, deadline=None)
def test_the_heap_check_reads_the_file_as_bytes_would_give_it(
    tmp_path_factory: pytest.TempPathFactory,
    data: bytes,
    sub: bytes,
    start: int,
    stop: int,
    piece: int,
) -> None:
    # the global-heap check reads the file with os.pread, in pieces, not through a map
    from cytepool.io.anndata._hdf5_chunk_tree import FileBytes

    path = tmp_path_factory.mktemp("bytes") / "f.bin"
    path.write_bytes(data)
    with path.open("rb") as handle:
        view = FileBytes(handle.fileno(), len(data), path)
        view.PIECE = piece
        stop = min(stop, len(data))
        assert view.find(sub, start, stop) == data.find(sub, start, stop)
        assert view[start:stop] == data[start:stop]
        if start < len(data):
            assert view[start] == data[start]
        path.write_bytes(data[: len(data) // 2])  # cut short while open
        if stop > len(data) // 2 and stop > start:
            with pytest.raises(FormatError, match=r"f\.bin was cut short while read"):
                view[start:stop]
