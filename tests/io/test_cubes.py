"""Tests of cube files: write_cube and read_cube (cytepool.io.cubes)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from special_files import SPECIAL_FILES, make_special, without_blocking

import cytepool
from cytepool import Cube, Normalization
from cytepool._assemble import parts_of
from cytepool.errors import ConstraintError, FormatError, InputError, StoreChangedError
from cytepool.io import _atomic, cubes, read_cube, write_cube
from cytepool.io.zarr import ZarrArray, open_array, write_array
from factories import BACKENDS, make_cube, string_values

pd = pytest.importorskip("pandas")

COMPRESSIONS = [("gzip", None), ("gzip", 1), ("zstd", 3), ("zstd", 12), (None, None)]


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def stored_cube(
    *,
    n_groups: int = 3,
    n_samples: int = 4,
    n_features: int = 6,
    seed: int = 0,
    backend: str = "pandas",
    normalization: bool = True,
    dtype: type = np.int32,
    metadata: dict | None = None,
) -> Cube:
    """A small valid cube with counts and detected layers and a few covariates."""
    rng = np.random.default_rng(seed)
    cells = rng.integers(1, 6, size=(n_groups, n_samples))
    cells[0, 0] = 0
    counts = rng.integers(1, 50, size=(n_groups, n_samples, n_features)).astype(dtype)
    counts[cells == 0] = 0
    detected = np.minimum(counts, cells[..., None]).astype(dtype)
    factors = rng.uniform(0.5, 2.0, size=(n_groups, n_samples))
    return make_cube(
        {"counts": counts, "detected": detected},
        backend=backend,
        ids={
            "samples": [f"s{i}" for i in range(n_samples)],
            "groups": [f"type {chr(65 + i)}" for i in range(n_groups)],
            "features": [f"ENSG{i:05d}" for i in range(n_features)],
        },
        samples={
            "donor": [f"donor {i % 2}" for i in range(n_samples)],
            "age": [30 + i for i in range(n_samples)],
        },
        features={"symbol": [f"G{i}" for i in range(n_features)]},
        cells=cells,
        normalization=Normalization("size_factors", factors) if normalization else None,
        metadata={"study": "test", "seed": seed} if metadata is None else metadata,
    )


def as_dict(frame) -> dict[str, list]:
    """A table as plain data, with the id as a column whatever the backend."""
    import narwhals as nw

    if isinstance(frame, pd.DataFrame):
        frame = frame.reset_index()
    return nw.from_native(frame, eager_only=True).to_dict(as_series=False)


def assert_same_cube(read: Cube, expected: Cube) -> None:
    assert read.shape == expected.shape
    for axis in ("samples", "groups", "features"):
        assert as_dict(getattr(read, axis)) == as_dict(getattr(expected, axis))
    np.testing.assert_array_equal(read.cells, expected.cells)
    assert list(read.layers) == list(expected.layers)
    for name in expected.layers:
        assert read.layers[name].dtype == expected.layers[name].dtype
        np.testing.assert_array_equal(read.to_numpy(name), expected.to_numpy(name))
    if expected.normalization is None:
        assert read.normalization is None
    else:
        assert read.normalization.method == expected.normalization.method
        np.testing.assert_array_equal(read.normalization.factors, expected.normalization.factors)
    assert dict(read.metadata) == dict(expected.metadata)
    assert read.provenance == expected.provenance
    assert read.fingerprint == expected.fingerprint


def attributes(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())["attributes"]


def edit_attributes(path: Path, edit) -> None:
    """Rewrite the root group's attributes with ``edit(attributes)``."""
    document = json.loads((path / "zarr.json").read_text())
    edit(document["attributes"])
    (path / "zarr.json").write_text(json.dumps(document))


def refingerprint(attrs: dict) -> None:
    """Make the stored fingerprint match edited digests, as a careful forger would."""
    from cytepool.fingerprint import Digests

    attrs["fingerprint"] = Digests.from_json(attrs["digests"]).fingerprint()


def flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    position = len(data) // 2 if offset is None else offset
    data[position] ^= 0x01
    path.write_bytes(bytes(data))


def chunk_files(array_path: Path) -> list[Path]:
    return sorted(p for p in (array_path / "c").rglob("*") if p.is_file())


def leftovers(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir() if ".cytepool-" in p.name)


@pytest.fixture
def cube() -> Cube:
    return stored_cube()


@pytest.fixture
def other() -> Cube:
    return stored_cube(seed=1)


@pytest.fixture
def stored(tmp_path: Path, cube: Cube) -> Path:
    path = tmp_path / "stored.cube.zarr"
    write_cube(cube, path, compression=None)
    return path


def unconsolidate(path: Path) -> Path:
    """Drop the root's copy of the metadata, as cubes written before it had none: every node
    is then read from its own zarr.json (which the tests below edit)."""
    root = json.loads((path / "zarr.json").read_text())
    del root["consolidated_metadata"]
    (path / "zarr.json").write_text(json.dumps(root))
    return path


@pytest.fixture
def plain(stored: Path) -> Path:
    """A stored cube without consolidated metadata."""
    return unconsolidate(stored)


# ---------------------------------------------------------------------------------------------
# Round trips and the format
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("compression", "level"), COMPRESSIONS)
def test_round_trip(tmp_path: Path, cube: Cube, compression, level) -> None:
    path = tmp_path / "a.cube.zarr"
    assert write_cube(cube, path, compression=compression, level=level) is None
    read = read_cube(path)
    assert_same_cube(read, cube)
    assert all(isinstance(layer, ZarrArray) for layer in read.layers.values())
    assert leftovers(path) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trip_backends(tmp_path: Path, backend: str) -> None:
    cube = stored_cube(backend=backend)
    path = tmp_path / "a.cube.zarr"
    write_cube(cube, path)
    for read_backend in BACKENDS:
        read = read_cube(path, backend=read_backend)
        assert_same_cube(read, cube)
    assert isinstance(read_cube(path).samples, pd.DataFrame)
    assert read_cube(path).samples.index.name == "sample_id"


def test_a_column_of_date_objects_is_written_as_dates(tmp_path: Path) -> None:
    """A pandas column of datetime.date objects, which a cube digests as dates: write_cube
    refused it ("mixed-object"); it is stored as dates and read back as the same cube."""
    import datetime as dt

    visits = [dt.date(2020, 1, 1), None, dt.date(1900, 2, 1), dt.date(2020, 1, 1)]
    cube = make_cube(samples=pd.DataFrame({"sample_id": ["s0", "s1", "s2", "s3"], "v": visits}))
    write_cube(cube, tmp_path / "c.cube.zarr")
    read = read_cube(tmp_path / "c.cube.zarr")
    assert read.fingerprint == cube.fingerprint
    assert read.samples["v"].tolist()[::2] == visits[::2]


def test_a_dictionary_that_repeats_a_value_is_stored_with_unique_categories(
    tmp_path: Path,
) -> None:
    """A pyarrow dictionary ["x", "y", "x"] was written as it was, and read_cube refused the
    file it wrote (categories must be unique); it is stored as ["x", "y"], codes moved to the
    first "x", and reads back with every backend as the same cube."""
    pa = pytest.importorskip("pyarrow")
    batch = pa.DictionaryArray.from_arrays(
        pa.array([0, 2, 1, None], pa.int32()), pa.array(["x", "y", "x"])
    )
    samples = pa.table({"sample_id": ["s0", "s1", "s2", "s3"], "batch": batch})
    cube = make_cube(samples=samples)
    plain = make_cube(samples={"batch": pd.Categorical(["x", "x", "y", None])}, backend="pandas")
    assert cube.fingerprint == plain.fingerprint
    write_cube(cube, tmp_path / "c.cube.zarr")
    for backend in BACKENDS:
        read = read_cube(tmp_path / "c.cube.zarr", backend=backend)
        assert read.fingerprint == cube.fingerprint
    read = read_cube(tmp_path / "c.cube.zarr")
    assert list(read.samples["batch"].cat.categories) == ["x", "y"]
    assert read.samples["batch"].tolist()[:3] == ["x", "x", "y"]


def test_round_trip_without_normalization_and_float_layers(tmp_path: Path) -> None:
    cube = stored_cube(normalization=False, dtype=np.float64, metadata={})
    write_cube(cube, tmp_path / "a.cube.zarr")
    read = read_cube(tmp_path / "a.cube.zarr")
    assert_same_cube(read, cube)
    assert not (tmp_path / "a.cube.zarr" / "normalization").exists()


@settings(max_examples=25, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 7)),
    dtype=st.sampled_from(["int32", "int64", "uint32", "uint64", "float32", "float64"]),
    compression=st.sampled_from([("gzip", 1), ("zstd", 1), (None, None)]),
    chunk_bytes=st.sampled_from([1, 8, 24, 1 << 20]),
    seed=st.integers(0, 2**32 - 1),
)
def test_round_trip_property(tmp_path_factory, shape, dtype, compression, chunk_bytes, seed):
    rng = np.random.default_rng(seed)
    n_groups, n_samples, n_features = shape
    cells = rng.integers(0, 3, size=(n_groups, n_samples))
    values = rng.integers(0, 5, size=shape).astype(dtype)
    values[cells == 0] = 0
    values[rng.random(shape) < 0.5] = 0  # zero chunks are not stored
    cube = Cube(
        {"counts": values},
        samples=pd.DataFrame({"sample_id": [f"s{i}" for i in range(n_samples)]}),
        groups=pd.DataFrame({"group_id": [f"g{i}" for i in range(n_groups)]}),
        features=pd.DataFrame({"feature_id": [f"f{i}" for i in range(n_features)]}),
        cells=cells,
    )
    path = tmp_path_factory.mktemp("property") / "a.cube.zarr"
    original = cubes._CHUNK_BYTES
    cubes._CHUNK_BYTES = chunk_bytes
    try:
        write_cube(cube, path, compression=compression[0], level=compression[1])
    finally:
        cubes._CHUNK_BYTES = original
    read = read_cube(path)
    assert read.fingerprint == cube.fingerprint
    np.testing.assert_array_equal(read.to_numpy("counts"), values)
    assert read.layers["counts"].chunks[0] == 1


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64, np.float32])
def test_layer_dtypes(tmp_path: Path, dtype) -> None:
    cube = stored_cube(dtype=dtype)
    write_cube(cube, tmp_path / "a.cube.zarr")
    assert_same_cube(read_cube(tmp_path / "a.cube.zarr"), cube)
    assert attributes(tmp_path / "a.cube.zarr")["layers"]["counts"] == np.dtype(dtype).name


def test_layout_and_attributes(stored: Path, cube: Cube) -> None:
    attrs = attributes(stored)
    assert attrs["format"] == "cytepool.cube"
    assert attrs["format_version"] == cubes.FORMAT_VERSION
    assert attrs["shape"] == list(cube.shape)
    assert attrs["layers"] == {"counts": "int32", "detected": "int32"}
    assert attrs["fingerprint"] == cube.fingerprint
    assert attrs["metadata"] == {"study": "test", "seed": 0}
    assert attrs["provenance"] == [record.to_json() for record in cube.provenance]
    assert set(attrs) == set(cubes._REQUIRED_ATTRIBUTES)
    for name in ("samples", "groups", "features", "layers"):
        assert json.loads((stored / name / "zarr.json").read_text())["node_type"] == "group"
    normalization = open_array(stored / "normalization")
    assert normalization.attributes == {"method": "size_factors"}
    layer = open_array(stored / "layers" / "counts")
    assert layer.shape == cube.shape
    assert layer.chunks == (1, 4, 6)
    assert layer.dimension_names == ("groups", "samples", "features")
    assert open_array(stored / "cells").dimension_names == ("groups", "samples")
    assert normalization.dimension_names == ("groups", "samples")


def test_tables_attribute_lists_columns_encodings_and_digests(stored: Path, cube: Cube) -> None:
    """Format 1.2: each table's columns (the id column first), each with its anndata encoding
    and its BLAKE3 column digest; the column digests combine into the table digest."""
    from cytepool.fingerprint import canonical_table, column_digest, combined_digest

    attrs = attributes(stored)
    table = parts_of(cube).tables["samples"]
    columns = attrs["tables"]["samples"]
    assert [column["name"] for column in columns] == table.frame.columns
    for column in columns:
        document = json.loads((stored / "samples" / column["name"] / "zarr.json").read_text())
        assert column["encoding"] == document["attributes"]["encoding-type"]
    canonical = canonical_table(table.frame)
    assert [c["digest"] for c in columns] == [column_digest(len(table), c) for c in canonical]
    n_samples = cube.shape[1]
    digests = [c["digest"] for c in columns]
    assert combined_digest(n_samples, digests) == attrs["digests"]["tables"]["samples"]


def test_consolidated_documents_read_as_their_bytes_and_apart(stored: Path) -> None:
    """A consolidated handle gives a node's document parsed (not written out and read again):
    the same as the bytes it serves, and a copy of its own each time."""
    from cytepool.io.zarr.consolidated import consolidated_documents, read_through
    from cytepool.io.zarr.fields import METADATA_FILE, loads
    from cytepool.io.zarr.store import LocalStore

    handle = LocalStore(stored).open()
    root = loads((stored / METADATA_FILE).read_bytes(), "root")
    documents = consolidated_documents(root, "root")
    assert documents
    through = read_through(handle, root, documents, handle.version(METADATA_FILE))
    for key in ["", *documents]:
        name = f"{key}/{METADATA_FILE}" if key else METADATA_FILE
        document, version = through.document(name)
        blob = through.get(name, limit=1 << 20)
        assert document == loads(blob.data, name)
        assert version == blob.version
        document.clear()
        assert through.document(name)[0] == loads(blob.data, name)
    assert through.document("layers/counts/c/0/0/0") is None  # a chunk: no document
    assert through.document("nowhere/zarr.json") is None


def test_readers_that_parse_shared_documents_leave_them_as_they_were(stored: Path) -> None:
    """Opening arrays and groups through a consolidated handle parses its documents without
    copying them: what the readers hand out is their own, and the documents stay intact."""
    from cytepool.io.zarr.consolidated import consolidated_documents, read_through
    from cytepool.io.zarr.fields import METADATA_FILE, loads
    from cytepool.io.zarr.groups import node_type, read_group_attributes
    from cytepool.io.zarr.store import LocalStore, StorePath

    handle = LocalStore(stored).open()
    root = loads((stored / METADATA_FILE).read_bytes(), "root")
    documents = consolidated_documents(root, "root")
    assert documents
    before = json.loads(json.dumps(documents))
    through = read_through(handle, root, documents, handle.version(METADATA_FILE))
    assert through.shared_document("samples/zarr.json")[0] is documents["samples"]
    for key, document in documents.items():
        node = StorePath(through, key)
        if node_type(node) == "group":
            attributes = read_group_attributes(node)
            for value in attributes.values():
                if isinstance(value, list | dict):
                    value.clear()
            attributes.clear()
        else:
            array = open_array(node)
            array.attributes.clear()
        assert document == before[key]
    assert documents == before


def test_a_consolidated_handle_parses_a_group_once_and_gives_copies(stored: Path) -> None:
    """Group metadata read through a consolidated handle is parsed once per handle; each
    caller gets attributes of its own, and node types stay right."""
    from cytepool.io.zarr import node_type, read_group_attributes
    from cytepool.io.zarr.consolidated import consolidated_documents, read_through
    from cytepool.io.zarr.fields import METADATA_FILE, loads
    from cytepool.io.zarr.store import LocalStore, StorePath

    handle = LocalStore(stored).open()
    root = loads((stored / METADATA_FILE).read_bytes(), "root")
    through = read_through(
        handle, root, consolidated_documents(root, "root"), handle.version(METADATA_FILE)
    )
    samples = StorePath(through) / "samples"
    first = read_group_attributes(samples)
    assert "samples" in through.parsed_groups
    first["column-order"].append("edited")
    first["_index"] = "edited"
    again = read_group_attributes(samples)
    assert again == read_group_attributes(stored / "samples")
    assert node_type(samples) == "group"
    assert node_type(StorePath(through) / "cells") == "array"
    with pytest.raises(FormatError, match="is a Zarr array, not a group"):
        read_group_attributes(StorePath(through) / "cells")


def test_layer_chunks_hold_whole_groups() -> None:
    assert cubes._layer_chunks((12, 48, 30_000), 4) == (1, 48, 5461)
    assert cubes._layer_chunks((2, 100_000, 30_000), 8) == (1, 128, 1024)
    assert cubes._layer_chunks((0, 0, 0), 4) == (1, 1, 1)
    assert cubes._layer_chunks((3, 5, 7), 4) == (1, 5, 7)


def test_chunking_follows_chunk_size(tmp_path: Path, monkeypatch, cube: Cube) -> None:
    monkeypatch.setattr(cubes, "_CHUNK_BYTES", 32)
    write_cube(cube, tmp_path / "a.cube.zarr")
    layer = open_array(tmp_path / "a.cube.zarr" / "layers" / "counts")
    assert layer.chunks == (1, 1, 6)
    assert_same_cube(read_cube(tmp_path / "a.cube.zarr"), cube)


def test_no_features(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    cube = Cube(
        {"counts": np.zeros((2, 3, 0), dtype=np.int32)},
        samples=pl.DataFrame({"sample_id": ["s1", "s2", "s3"]}),
        groups=pl.DataFrame({"group_id": ["A", "B"]}),
        features=pl.DataFrame({"feature_id": []}, schema={"feature_id": pl.String}),
        cells=np.ones((2, 3), dtype=np.int64),
    )
    write_cube(cube, tmp_path / "a.cube.zarr")
    assert_same_cube(read_cube(tmp_path / "a.cube.zarr", backend="polars"), cube)


def test_select_reads_only_needed_chunks(tmp_path: Path, monkeypatch) -> None:
    cube = stored_cube(n_groups=2, n_samples=3, n_features=40)
    monkeypatch.setattr(cubes, "_layer_chunks", lambda shape, itemsize: (1, shape[1], 10))
    write_cube(cube, tmp_path / "a.cube.zarr")
    read = read_cube(tmp_path / "a.cube.zarr")
    for path in chunk_files(tmp_path / "a.cube.zarr" / "layers" / "counts"):
        if path.parts[-3:] != ("1", "0", "2"):
            path.unlink()  # a read of any other chunk now gives zeros
    selected = read.select(groups=["type B"], features=["ENSG00021", "ENSG00025"])
    expected = cube.to_numpy("counts")[1][:, [21, 25]]
    np.testing.assert_array_equal(selected.profiles("type B"), expected)


def test_overwrite_self_with_selection(tmp_path: Path, cube: Cube) -> None:
    path = tmp_path / "a.cube.zarr"
    write_cube(cube, path)
    selection = read_cube(path).select(samples=["s3", "s1"], features=[0, 2, 4])
    expected = selection.fingerprint
    write_cube(selection, path, overwrite=True)
    read = read_cube(path)
    assert read.fingerprint == expected
    np.testing.assert_array_equal(
        read.to_numpy("counts"), cube.to_numpy("counts")[:, [3, 1]][..., [0, 2, 4]]
    )
    assert leftovers(path) == []


# ---------------------------------------------------------------------------------------------
# Fingerprint stability
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("compression", "level"), COMPRESSIONS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("chunk_bytes", [16, 1 << 20])
def test_fingerprint_stable(
    tmp_path: Path, monkeypatch, compression, level, backend, chunk_bytes
) -> None:
    cube = stored_cube(backend=backend)
    in_memory = cube.fingerprint
    monkeypatch.setattr(cubes, "_CHUNK_BYTES", chunk_bytes)
    path = tmp_path / "a.cube.zarr"
    write_cube(cube, path, compression=compression, level=level)
    assert attributes(path)["fingerprint"] == in_memory
    for read_backend in BACKENDS:
        assert read_cube(path, backend=read_backend).fingerprint == in_memory
    assert in_memory == stored_cube(backend="pandas").fingerprint


def test_fingerprint_stable_through_rewrites(tmp_path: Path, monkeypatch, cube: Cube) -> None:
    write_cube(cube, tmp_path / "1.cube.zarr", compression="zstd", level=1)
    monkeypatch.setattr(cubes, "_CHUNK_BYTES", 24)
    write_cube(read_cube(tmp_path / "1.cube.zarr", backend="polars"), tmp_path / "2.cube.zarr")
    assert read_cube(tmp_path / "2.cube.zarr").fingerprint == cube.fingerprint
    assert (
        attributes(tmp_path / "2.cube.zarr")["digests"]
        == attributes(tmp_path / "1.cube.zarr")["digests"]
    )


def test_fingerprint_of_a_lazy_cube_needs_no_second_pass(tmp_path: Path, cube: Cube, monkeypatch):
    from cytepool import fingerprint

    write_cube(cube, tmp_path / "1.cube.zarr")
    lazy = read_cube(tmp_path / "1.cube.zarr").select(groups=["type C", "type A"])
    hashed = []
    original = fingerprint.group_digest

    def counting(dtype, block):
        hashed.append(block.shape)
        return original(dtype, block)

    monkeypatch.setattr(fingerprint, "group_digest", counting)
    write_cube(lazy, tmp_path / "2.cube.zarr")
    assert len(hashed) <= 2 * 2  # each group of each layer hashed at most once
    monkeypatch.undo()
    assert attributes(tmp_path / "2.cube.zarr")["fingerprint"] == lazy.fingerprint
    assert read_cube(tmp_path / "2.cube.zarr").fingerprint == lazy.fingerprint


# ---------------------------------------------------------------------------------------------
# Streaming: lazy layers checked while written, memory of one group
# ---------------------------------------------------------------------------------------------


def lazy_cube_with(tmp_path: Path, values: np.ndarray, *, cells: np.ndarray | None = None) -> Cube:
    """A cube whose only layer is a ZarrArray holding ``values`` (never checked eagerly)."""
    write_array(tmp_path / "raw", values, chunks=(1, *values.shape[1:]))
    n_groups, n_samples, n_features = values.shape
    return Cube(
        {"counts": open_array(tmp_path / "raw")},
        samples=pd.DataFrame({"sample_id": [f"s{i}" for i in range(n_samples)]}),
        groups=pd.DataFrame({"group_id": [f"g{i}" for i in range(n_groups)]}),
        features=pd.DataFrame({"feature_id": [f"f{i}" for i in range(n_features)]}),
        cells=np.ones((n_groups, n_samples), dtype=np.int64) if cells is None else cells,
    )


def test_lazy_layer_constraint_fails_write(tmp_path: Path, stored: Path, cube: Cube) -> None:
    values = np.ones((3, 2, 4), dtype=np.int64)
    values[2, 1, 3] = -5
    lazy = lazy_cube_with(tmp_path, values)
    with pytest.raises(ValueError, match="counts"):
        write_cube(lazy, tmp_path / "new.cube.zarr")
    assert not (tmp_path / "new.cube.zarr").exists()
    assert leftovers(tmp_path / "new.cube.zarr") == []
    with pytest.raises(ValueError, match="counts"):
        write_cube(lazy, stored, overwrite=True)
    assert_same_cube(read_cube(stored), cube)
    assert leftovers(stored) == []


def test_lazy_sum_overflow_fails_write(tmp_path: Path, stored: Path, cube: Cube) -> None:
    values = np.full((2, 2, 3), np.iinfo(np.int32).max - 1, dtype=np.int32)
    lazy = lazy_cube_with(tmp_path, values)
    total = cytepool.add([lazy, lazy])
    with pytest.raises(OverflowError, match="counts"):
        write_cube(total, stored, overwrite=True)
    assert_same_cube(read_cube(stored), cube)
    assert leftovers(stored) == []


def test_write_reads_one_group_at_a_time(tmp_path: Path, inflate: str) -> None:
    n_groups, n_samples, n_features = 4, 64, 16384
    rng = np.random.default_rng(3)
    values = rng.integers(0, 1000, size=(n_groups, n_samples, n_features), dtype=np.int32)
    lazy = lazy_cube_with(tmp_path, values)
    group_bytes = n_samples * n_features * 4  # 4 MiB, in chunks of 1 MiB
    assert cubes._layer_chunks(values.shape, 4) == (1, 64, 4096)
    tracemalloc.start()
    try:
        write_cube(lazy, tmp_path / "a.cube.zarr", compression=None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One group of one layer, a chunk being encoded (a copy and its bytes), and small parts;
    # never a second group (the whole layer is 16 MiB). libdeflate also inflates each gzip
    # chunk of the lazy layer (here a whole group, 4 MiB) into a buffer of its size.
    decoded = group_bytes if inflate == "fast" else 0
    bound = group_bytes + decoded + 3 * 2**20 + 1.5 * 2**20
    assert peak < bound, (peak / 2**20, group_bytes / 2**20)
    np.testing.assert_array_equal(read_cube(tmp_path / "a.cube.zarr").to_numpy("counts"), values)


# ---------------------------------------------------------------------------------------------
# write_cube: arguments
# ---------------------------------------------------------------------------------------------


def test_write_type_errors(tmp_path: Path, cube: Cube) -> None:
    path = tmp_path / "a.cube.zarr"
    with pytest.raises(TypeError, match="Cube"):
        write_cube({"counts": np.zeros((1, 1, 1))}, path)
    with pytest.raises(TypeError, match="path"):
        write_cube(cube, 42)
    with pytest.raises(TypeError, match="path"):
        write_cube(cube, os.fsencode(path))
    with pytest.raises(TypeError, match="overwrite"):
        write_cube(cube, path, overwrite="yes")
    with pytest.raises(TypeError):
        write_cube(cube, path, compression=4)
    with pytest.raises(TypeError):
        write_cube(cube, path, level="4")
    assert not path.exists()


@pytest.mark.parametrize(
    ("compression", "level"), [("lz4", None), ("gzip", 10), ("gzip", -1), (None, 3)]
)
def test_write_invalid_compression(tmp_path: Path, cube: Cube, compression, level) -> None:
    with pytest.raises(ValueError, match=r"compression|level"):
        write_cube(cube, tmp_path / "a.cube.zarr", compression=compression, level=level)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "url", ["s3://bucket/a.cube.zarr", "file:///tmp/a.cube.zarr", "https://x/y"]
)
def test_urls_refused(cube: Cube, url: str) -> None:
    with pytest.raises(ValueError, match=r"URL .*write it locally, then upload"):
        write_cube(cube, url)


def test_unsupported_url_schemes_refused() -> None:
    with pytest.raises(ValueError, match="scheme file:// are not supported"):
        read_cube("file:///tmp/a.cube.zarr")


def test_write_missing_parent(tmp_path: Path, cube: Cube) -> None:
    with pytest.raises(FileNotFoundError, match=r"parent directory .* does not exist"):
        write_cube(cube, tmp_path / "missing" / "a.cube.zarr")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"parent directory .* is not a directory"):
        write_cube(cube, tmp_path / "file" / "a.cube.zarr")


def test_write_to_an_unwritable_directory_names_the_path(
    unwritable_directory: Path, cube: Cube
) -> None:
    """Not the hidden temporary directory the write makes first (a name nobody gave)."""
    target = unwritable_directory / "c.cube.zarr"
    with pytest.raises(PermissionError) as info:
        write_cube(cube, target)
    assert info.value.filename == str(target)
    assert "cytepool-tmp" not in str(info.value)
    assert list(unwritable_directory.iterdir()) == []


def test_write_exists(stored: Path, cube: Cube, other: Cube) -> None:
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_cube(other, stored)
    assert_same_cube(read_cube(stored), cube)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "__x", "a:b", "a\0b", "x" * 256, "é" * 128])
def test_unstorable_layer_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="layer name"):
        cubes._check_layer_names([name])


@pytest.mark.parametrize("names", [("a:b",), ("__x",), ("counts", "Counts"), ("y" * 300,)])
def test_write_refuses_unstorable_layer_names(tmp_path: Path, names) -> None:
    cube = stored_cube()
    layers = {name: cube.to_numpy("counts") for name in names}
    renamed = Cube(
        layers, samples=cube.samples, groups=cube.groups, features=cube.features, cells=cube.cells
    )
    with pytest.raises(ValueError, match="layer name"):
        write_cube(renamed, tmp_path / "a.cube.zarr")
    assert list(tmp_path.iterdir()) == []


def test_layer_names_differing_in_case() -> None:
    with pytest.raises(ValueError, match="differ only in case"):
        cubes._check_layer_names(["Counts", "counts"])


def test_string_and_pathlike_paths(tmp_path: Path, cube: Cube, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_cube(cube, "relative.cube.zarr")
    assert read_cube("relative.cube.zarr").fingerprint == cube.fingerprint
    write_cube(cube, str(tmp_path / "absolute.cube.zarr"))
    assert read_cube(tmp_path / "absolute.cube.zarr").fingerprint == cube.fingerprint


# ---------------------------------------------------------------------------------------------
# write_cube: the overwrite rules
# ---------------------------------------------------------------------------------------------


def test_overwrite_cube_file(stored: Path, other: Cube) -> None:
    write_cube(other, stored, overwrite=True)
    assert_same_cube(read_cube(stored), other)
    assert leftovers(stored) == []


def test_overwrite_empty_directory(tmp_path: Path, cube: Cube) -> None:
    (tmp_path / "empty").mkdir()
    write_cube(cube, tmp_path / "empty", overwrite=True)
    assert_same_cube(read_cube(tmp_path / "empty"), cube)


def test_overwrite_cube_file_of_another_version(stored: Path, other: Cube) -> None:
    edit_attributes(stored, lambda attrs: attrs.update(format_version="7.0"))
    write_cube(other, stored, overwrite=True)
    assert_same_cube(read_cube(stored), other)


def test_no_overwrite_empty_directory(tmp_path: Path, cube: Cube) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_cube(cube, tmp_path / "empty")


def test_overwrite_refuses_non_cube_directory(tmp_path: Path, cube: Cube) -> None:
    target = tmp_path / "data"
    target.mkdir()
    (target / "notes.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="neither a cube file nor an empty directory"):
        write_cube(cube, target, overwrite=True)
    assert (target / "notes.txt").read_text() == "precious"
    assert leftovers(target) == []


def test_overwrite_refuses_other_zarr_group(tmp_path: Path, cube: Cube) -> None:
    from cytepool.io.zarr import write_group

    target = tmp_path / "other.zarr"
    write_group(target, attributes={"format": "something else"})
    with pytest.raises(FileExistsError, match="neither a cube file"):
        write_cube(cube, target, overwrite=True)
    assert attributes(target) == {"format": "something else"}


def test_overwrite_refuses_a_file(tmp_path: Path, cube: Cube) -> None:
    target = tmp_path / "a.cube.zarr"
    target.write_text("precious")
    with pytest.raises(FileExistsError, match="not a directory"):
        write_cube(cube, target, overwrite=True)
    assert target.read_text() == "precious"


@pytest.mark.parametrize("spelling", ["cwd", ".", ""])
def test_overwrite_refuses_working_directory(tmp_path: Path, cube: Cube, monkeypatch, spelling):
    working = tmp_path / "work"
    working.mkdir()
    monkeypatch.chdir(working)
    target = working if spelling == "cwd" else spelling
    with pytest.raises(FileExistsError, match="working directory"):
        write_cube(cube, target, overwrite=True)
    assert working.is_dir()
    assert list(working.iterdir()) == []


@pytest.mark.parametrize("spelling", ["absolute", ".."])
def test_overwrite_refuses_ancestor_of_working_directory(
    stored: Path, other: Cube, monkeypatch, spelling
) -> None:
    before = attributes(stored)
    monkeypatch.chdir(stored / "layers")
    target = stored if spelling == "absolute" else ".."
    with pytest.raises(FileExistsError, match="working directory or holds it"):
        write_cube(other, target, overwrite=True)
    assert attributes(stored) == before


def test_overwrite_refuses_symlink(tmp_path: Path, stored: Path, cube: Cube, other: Cube) -> None:
    link = tmp_path / "link.cube.zarr"
    link.symlink_to(stored, target_is_directory=True)
    with pytest.raises(FileExistsError, match="symbolic link"):
        write_cube(other, link, overwrite=True)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_cube(other, link)
    assert link.is_symlink()
    assert_same_cube(read_cube(link), cube)  # reading follows the link
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError, match="symbolic link"):
        write_cube(other, dangling, overwrite=True)
    assert not (tmp_path / "nowhere").exists()


def test_write_through_symlinked_parent(tmp_path: Path, cube: Cube) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    write_cube(cube, tmp_path / "alias" / "a.cube.zarr")
    write_cube(cube, tmp_path / "alias" / "a.cube.zarr", overwrite=True)
    assert_same_cube(read_cube(tmp_path / "real" / "a.cube.zarr"), cube)


def test_target_replaced_during_write_is_left_alone(
    tmp_path: Path, stored: Path, other: Cube, monkeypatch
) -> None:
    original = cubes._build

    def build_then_swap(*args, **kwargs):
        original(*args, **kwargs)
        shutil.rmtree(stored)
        stored.mkdir()
        (stored / "notes.txt").write_text("precious")

    monkeypatch.setattr(cubes, "_build", build_then_swap)
    with pytest.raises(FileExistsError):
        write_cube(other, stored, overwrite=True)
    assert (stored / "notes.txt").read_text() == "precious"
    assert leftovers(stored) == []


def test_target_appearing_during_write_is_left_alone(
    tmp_path: Path, cube: Cube, monkeypatch
) -> None:
    target = tmp_path / "a.cube.zarr"
    original = cubes._build

    def build_then_create(*args, **kwargs):
        original(*args, **kwargs)
        target.mkdir()

    monkeypatch.setattr(cubes, "_build", build_then_create)
    with pytest.raises(FileExistsError, match="appeared"):
        write_cube(cube, target)
    assert list(target.iterdir()) == []
    assert leftovers(target) == []


def test_directory_put_there_before_the_exchange_is_swapped_back(
    tmp_path: Path, stored: Path, cube: Cube, other: Cube, monkeypatch
) -> None:
    original = _atomic._exchange
    calls: list[Path] = []

    def exchange_after_a_swap(first: Path, second: Path) -> bool:
        if not calls:  # between the last check and the exchange, someone else's directory
            shutil.rmtree(second)
            second.mkdir()
            (second / "notes.txt").write_text("precious")
        calls.append(second)
        return original(first, second)

    monkeypatch.setattr(_atomic, "_exchange", exchange_after_a_swap)
    with pytest.raises(FileExistsError, match="replaced while"):
        write_cube(other, stored, overwrite=True)
    assert calls == [stored, stored]  # the exchange, and the exchange back
    assert (stored / "notes.txt").read_text() == "precious"
    assert leftovers(stored) == []


def test_failed_build_leaves_old_store(stored: Path, cube: Cube, other: Cube, monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cubes, "write_array", fail)
    with pytest.raises(OSError, match="No space"):
        write_cube(other, stored, overwrite=True)
    assert_same_cube(read_cube(stored), cube)
    assert leftovers(stored) == []


# ---------------------------------------------------------------------------------------------
# Leftovers, locks and the two-rename fallback
# ---------------------------------------------------------------------------------------------


def test_leftovers_removed_by_next_write(tmp_path: Path, cube: Cube) -> None:
    target = tmp_path / "a.cube.zarr"
    for kind, token in (("tmp", "0" * 16), ("tmp", "1" * 16), ("old", "2" * 16)):
        leftover = tmp_path / f".a.cube.zarr.cytepool-{kind}-{token}"
        leftover.mkdir()
        (leftover / "junk").write_text("x")
    keep = [
        ".a.cube.zarr.cytepool-tmp-short",
        ".b.cube.zarr.cytepool-tmp-" + "3" * 16,
        ".a.cube.zarr.cytepool-tmp-" + "4" * 16 + ".cytepool-tmp-" + "5" * 16,
    ]
    for name in keep:
        (tmp_path / name).mkdir()
    (tmp_path / (".a.cube.zarr.cytepool-tmp-" + "6" * 16)).write_text("a file, not ours")
    write_cube(cube, target)
    assert leftovers(target) == sorted([*keep, ".a.cube.zarr.cytepool-tmp-" + "6" * 16])
    assert_same_cube(read_cube(target), cube)


@pytest.mark.parametrize("n_bytes", [224, 225, 255])
def test_a_name_of_up_to_255_bytes_is_written(tmp_path: Path, cube: Cube, n_bytes: int) -> None:
    """Names of 225 to 255 bytes raised "File name too long", naming the target, since the
    temporary sibling adds 31 bytes: a long name's siblings hold its first bytes and a hash
    of the whole, and are still found as leftovers of that target, and only of it."""
    name = "é" + "x" * (n_bytes - len("é".encode()) - len(".cube.zarr")) + ".cube.zarr"
    target = tmp_path / name
    assert len(os.fsencode(name)) == n_bytes
    stem = _atomic._stem(name)
    leftover = tmp_path / f".{stem}.cytepool-tmp-{'0' * 16}"
    other = tmp_path / f".{_atomic._stem('y' + name[1:])}.cytepool-tmp-{'1' * 16}"
    for sibling in (leftover, other):
        assert len(os.fsencode(sibling.name)) <= 255
        sibling.mkdir()
    write_cube(cube, target)
    write_cube(cube, target, overwrite=True)
    assert_same_cube(read_cube(target), cube)
    assert not leftover.exists()  # removed as this target's leftover
    assert other.exists()  # another long name's: kept
    assert (stem == name) == (n_bytes <= 224)


@pytest.mark.parametrize("n_bytes", [30, 255])
def test_an_error_in_the_temporary_directory_names_the_target(tmp_path: Path, n_bytes: int) -> None:
    """An OSError (its file name) or another error (its message) about the hidden directory a
    store is built in names the target instead, for long names too (their siblings hold a
    hash)."""
    target = tmp_path / ("x" * (n_bytes - len(".zarr")) + ".zarr")

    def failing(kind: type[Exception]) -> Callable[[Path], None]:
        def build(temporary: Path) -> None:
            (temporary / "a").mkdir()
            if kind is OSError:
                raise OSError(errno.ENOSPC, "No space left on device", str(temporary / "a"))
            raise InputError(f"cannot write the string array {temporary / 'a'}: a problem")

        return build

    for kind in (OSError, InputError):
        with pytest.raises(kind) as caught:
            _atomic.replace_directory(
                target, failing(kind), overwrite=False, replaceable=lambda p: False, what="a"
            )
        assert "cytepool-tmp" not in str(caught.value)
        assert str(target) in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_locked_leftover_of_a_live_writer_is_kept(tmp_path: Path, cube: Cube) -> None:
    target = tmp_path / "a.cube.zarr"
    live = tmp_path / (".a.cube.zarr.cytepool-tmp-" + "7" * 16)
    live.mkdir()
    with _atomic._locked(live) as acquired:
        assert acquired
        write_cube(cube, target)
        assert live.is_dir()
    write_cube(cube, target, overwrite=True)
    assert not live.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")
def test_lock_is_exclusive(tmp_path: Path) -> None:
    with _atomic._locked(tmp_path) as first:
        code = (
            "import fcntl, os, sys\n"
            "descriptor = os.open(sys.argv[1], os.O_RDONLY)\n"
            "try:\n"
            "    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "except BlockingIOError:\n"
            "    print(False)\n"
            "else:\n"
            "    print(True)"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
        )
        assert first
        assert result.stdout.strip() == "False"
    with _atomic._locked(tmp_path / "missing") as acquired:
        assert not acquired


def test_two_rename_fallback(stored: Path, other: Cube, monkeypatch) -> None:
    monkeypatch.setattr(_atomic, "_renameat2", lambda source, destination, flags: False)
    write_cube(other, stored, overwrite=True)
    assert_same_cube(read_cube(stored), other)
    assert leftovers(stored) == []
    write_cube(other, stored.with_name("new.cube.zarr"))
    assert_same_cube(read_cube(stored.with_name("new.cube.zarr")), other)


def test_two_rename_fallback_failure_puts_old_back(
    stored: Path, cube: Cube, other: Cube, monkeypatch
) -> None:
    monkeypatch.setattr(_atomic, "_renameat2", lambda source, destination, flags: False)
    original = _atomic._rename_noreplace

    def interrupted(source, destination):
        if ".cytepool-tmp-" in source.name:
            raise KeyboardInterrupt
        original(source, destination)

    monkeypatch.setattr(_atomic, "_rename_noreplace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_cube(other, stored, overwrite=True)
    assert_same_cube(read_cube(stored), cube)
    assert leftovers(stored) == []


def test_next_write_recovers_from_the_window(stored: Path, cube: Cube, other: Cube) -> None:
    # A writer using two renames was killed between them: the old store waits aside and a
    # complete new store sits in its temporary directory.
    aside = stored.with_name(f".{stored.name}.cytepool-old-" + "a" * 16)
    stored.rename(aside)
    write_cube(other, stored.with_name(f".{stored.name}.cytepool-tmp-" + "b" * 16))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_cube(other, stored)
    assert_same_cube(read_cube(stored), cube)  # the old store is back
    assert leftovers(stored) == []
    write_cube(other, stored, overwrite=True)
    assert_same_cube(read_cube(stored), other)


def test_renameat2_unsupported_platform(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(_atomic.sys, "platform", "darwin")
    (tmp_path / "a").mkdir()
    assert _atomic._renameat2(tmp_path / "a", tmp_path / "b", _atomic._RENAME_EXCHANGE) is False


@pytest.mark.skipif(sys.platform != "linux", reason="renameat2 is Linux only")
def test_renameat2_exchange_and_noreplace(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one").touch()
    (tmp_path / "b").mkdir()
    assert _atomic._exchange(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "b" / "one").exists()
    assert not (tmp_path / "a" / "one").exists()
    assert not _atomic._rename_noreplace(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "a").is_dir()
    assert (tmp_path / "b" / "one").exists()
    with pytest.raises(FileNotFoundError):
        _atomic._renameat2(tmp_path / "missing", tmp_path / "c", _atomic._RENAME_NOREPLACE)


# ---------------------------------------------------------------------------------------------
# read_cube: errors
# ---------------------------------------------------------------------------------------------


def test_read_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no cube file"):
        read_cube(tmp_path / "missing.cube.zarr")


def test_read_argument_errors(stored: Path) -> None:
    with pytest.raises(TypeError, match="path"):
        read_cube(3.5)
    with pytest.raises(TypeError, match="backend"):
        read_cube(stored, backend=None)
    with pytest.raises(ValueError, match="backend"):
        read_cube(stored, backend="duckdb")


def test_read_not_a_cube(tmp_path: Path) -> None:
    from cytepool.io.zarr import write_group

    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="not a cube file"):
        read_cube(tmp_path / "plain")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a cube file"):
        read_cube(tmp_path / "file")
    write_group(tmp_path / "group", attributes={"encoding-type": "anndata"})
    with pytest.raises(ValueError, match="not a cube file"):
        read_cube(tmp_path / "group")
    write_array(tmp_path / "array", np.zeros(3), chunks=(3,))
    with pytest.raises(ValueError, match=r"array|group"):
        read_cube(tmp_path / "array")


@pytest.mark.parametrize(
    ("version", "match"),
    [
        ("2.0", "upgrade cytepool"),
        ("0.9", "does not read"),
        ("1", "invalid format_version"),
        (1.0, "invalid format_version"),
        (None, "invalid format_version"),
    ],
)
def test_read_other_format_version(stored: Path, version, match: str) -> None:
    edit_attributes(stored, lambda attrs: attrs.update(format_version=version))
    with pytest.raises(ValueError, match=match):
        read_cube(stored)


def test_read_newer_minor_version_ignores_unknown_attributes(stored: Path, cube: Cube) -> None:
    edit_attributes(stored, lambda attrs: attrs.update(format_version="1.7", future={"x": 1}))
    assert_same_cube(read_cube(stored), cube)


def test_read_same_version_refuses_unknown_attributes(stored: Path) -> None:
    edit_attributes(stored, lambda attrs: attrs.update(future=1))
    with pytest.raises(ValueError, match="unknown attributes"):
        read_cube(stored)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda a: a.pop("digests"), "lacks"),
        (lambda a: a.update(shape=[3, 4]), "shape"),
        (lambda a: a.update(shape=[3, 4, -6]), "shape"),
        (lambda a: a.update(shape=[3, 4, 7]), "shape"),
        (lambda a: a.update(layers=["counts"]), "layers"),
        (lambda a: a.update(layers={"counts": "int32"}), "digests"),
        (lambda a: a.update(layers={"counts": "int32", "detected": "bogus"}), "bogus"),
        (lambda a: a.update(layers={"counts": "int32", "../x": "int32"}), "layer name"),
        (lambda a: a.update(digests={"tables": 3}), "digests"),
        (lambda a: a.update(fingerprint="0" * 64), "fingerprint"),
        (lambda a: a.update(metadata=[1]), "metadata"),
        (lambda a: a.update(provenance={}), "provenance"),
        (lambda a: a.update(provenance=[{"operation": 3}]), "provenance"),
    ],
)
def test_read_corrupt_attributes(stored: Path, edit, match: str) -> None:
    edit_attributes(stored, edit)
    with pytest.raises(ValueError, match=match):
        read_cube(stored)


@pytest.mark.parametrize("dtype", ["float16", "int8", "bool", "complex64", "string"])
def test_read_layer_of_unaccepted_type(tmp_path: Path, stored: Path, dtype: str) -> None:
    edit_attributes(stored, lambda a: a["layers"].update(counts=dtype))
    with pytest.raises(TypeError, match=dtype):
        read_cube(stored)


def test_read_cells_of_unaccepted_type(plain: Path, cube: Cube) -> None:
    shutil.rmtree(plain / "cells")
    write_array(plain / "cells", np.asarray(cube.cells, dtype=np.float64), chunks=(3, 4))
    with pytest.raises(TypeError, match="cell numbers"):
        read_cube(plain)


def test_read_normalization_of_unaccepted_type(plain: Path, cube: Cube) -> None:
    factors = cube.normalization.factors
    shutil.rmtree(plain / "normalization")
    write_array(plain / "normalization", factors, chunks=(3, 4), attributes={"method": 7})
    with pytest.raises(TypeError, match="method"):
        read_cube(plain)
    shutil.rmtree(plain / "normalization")
    write_array(
        plain / "normalization",
        np.ones((3, 4), dtype=np.int64),
        chunks=(3, 4),
        attributes={"method": "size_factors"},
    )
    with pytest.raises(TypeError, match="normalization"):
        read_cube(plain)


def test_read_ids_of_unaccepted_type(plain: Path) -> None:
    shutil.rmtree(plain / "samples" / "sample_id")
    write_array(plain / "samples" / "sample_id", np.arange(4), chunks=(4,))
    with pytest.raises(TypeError, match="sample_id"):
        read_cube(plain)


def test_read_missing_normalization(stored: Path) -> None:
    shutil.rmtree(stored / "normalization")
    with pytest.raises(ValueError, match="normalization"):
        read_cube(stored)


def test_read_layer_of_wrong_shape_or_dtype(plain: Path) -> None:
    shutil.rmtree(plain / "layers" / "detected")
    write_array(plain / "layers" / "detected", np.ones((3, 4, 6), np.int64), chunks=(1, 4, 6))
    with pytest.raises(ValueError, match="detected"):
        read_cube(plain)
    shutil.rmtree(plain / "layers" / "detected")
    write_array(plain / "layers" / "detected", np.ones((3, 4, 5), np.int32), chunks=(1, 4, 5))
    with pytest.raises(ValueError, match="shape"):
        read_cube(plain)


def test_read_unsupported_zarr_feature(plain: Path) -> None:
    document = json.loads((plain / "layers" / "counts" / "zarr.json").read_text())
    document["codecs"].insert(0, {"name": "transpose", "configuration": {"order": [2, 1, 0]}})
    (plain / "layers" / "counts" / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="transpose"):
        read_cube(plain)


@pytest.mark.parametrize("part", ["features", "cells", "layers", "layers/detected"])
def test_read_missing_part(plain: Path, part: str) -> None:
    shutil.rmtree(plain / part)
    with pytest.raises(ValueError, match="is corrupt: a part is missing") as info:
        read_cube(plain)
    assert isinstance(info.value, FormatError)


@pytest.mark.parametrize("part", ["samples", "groups", "features", "cells"])
def test_read_part_whose_folder_is_gone(stored: Path, part: str) -> None:
    """The consolidated metadata still lists it and its arrays read as their fill value: the
    error said the ids repeat ('' more than once) or a digest differs."""
    shutil.rmtree(stored / part)
    with pytest.raises(FormatError, match=rf"is corrupt: the folder {part}/ \(the .*\) is missing"):
        read_cube(stored)


@pytest.mark.parametrize("gone", ["layers/counts", "layers", "layers/detected/zarr.json"])
def test_read_cube_whose_layer_folder_is_gone(stored: Path, gone: str) -> None:
    """The root's copy of the metadata still describes the layer, whose chunks, all absent,
    read as zeros: read_cube opened it, and a selection gave zeros without a word."""
    target = stored / gone
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()
    layer = "detected" if "detected" in gone else "counts"
    match = rf"is corrupt: the folder layers/{layer}/ \(layer '{layer}'\) or its zarr.json is"
    with pytest.raises(FormatError, match=match):
        read_cube(stored)


def test_store_replaced_while_read(stored: Path, other: Cube, monkeypatch) -> None:
    original = cubes._read_cells

    def replace_then_read(root, header):
        write_cube(other, stored, overwrite=True)
        return original(root, header)

    monkeypatch.setattr(cubes, "_read_cells", replace_then_read)
    with pytest.raises(RuntimeError, match="replaced while it was being read") as info:
        read_cube(stored)
    assert isinstance(info.value, StoreChangedError)


def test_store_removed_while_read(stored: Path, monkeypatch) -> None:
    original = cubes._read_cells

    def remove_then_read(root, header):
        shutil.rmtree(stored)
        return original(root, header)

    monkeypatch.setattr(cubes, "_read_cells", remove_then_read)
    with pytest.raises(RuntimeError, match="replaced while"):
        read_cube(stored)


def test_layer_read_after_store_replaced(stored: Path, other: Cube) -> None:
    read = read_cube(stored)
    write_cube(other, stored, overwrite=True)
    with pytest.raises(RuntimeError):
        read.profiles(1)
    assert read.fingerprint != other.fingerprint  # known without reading


# ---------------------------------------------------------------------------------------------
# Corruption, detected at the documented moment
# ---------------------------------------------------------------------------------------------


def test_flipped_byte_in_layer_chunk(stored: Path, cube: Cube) -> None:
    flip_byte(stored / "layers" / "counts" / "c" / "1" / "0" / "0", offset=4 * 7)
    read = read_cube(stored)  # layers are not read now
    np.testing.assert_array_equal(read.profiles(0), cube.profiles(0))
    np.testing.assert_array_equal(read.profiles(2, layer="counts"), cube.profiles(2))
    with pytest.raises(ValueError, match=r"(?s)counts.*type B|type B.*counts") as info:
        read.profiles("type B")
    assert isinstance(info.value, FormatError)
    with pytest.raises(ValueError, match="counts"):
        read.to_numpy("counts")
    with pytest.raises(ValueError, match="counts"):
        write_cube(read, stored.with_name("copy.cube.zarr"))
    assert not stored.with_name("copy.cube.zarr").exists()


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_to_numpy_verifies_every_group_as_it_arrives(
    tmp_path: Path, cube: Cube, monkeypatch: pytest.MonkeyPatch, threads: str, compression: str
) -> None:
    # to_numpy reads a stored layer in one go and hashes each group on the decoding threads
    monkeypatch.setenv("CYTEPOOL_ZARR_THREADS", threads)
    path = tmp_path / "a.cube.zarr"
    write_cube(cube, path, compression=compression)
    read = read_cube(path)
    np.testing.assert_array_equal(read.to_numpy("counts"), cube.to_numpy("counts"))
    assert read.fingerprint == cube.fingerprint
    values = cube.to_numpy("counts").copy()
    values[1, 2, 3] += 1  # group 1 no longer matches its digest; 0 and 2 still do
    chunks = open_array(path / "layers" / "counts").chunks
    shutil.rmtree(path / "layers" / "counts")
    write_array(path / "layers" / "counts", values, chunks=chunks, compression=compression)
    group = str(parts_of(cube).tables["groups"].ids[1])
    pattern = f"layer 'counts', group '{group}': the values do not match their stored digest"
    source = re.escape(f"(read from {path / 'layers' / 'counts'})")  # which file, of several
    with pytest.raises(FormatError, match=f"{pattern}.*{source}$"):
        read_cube(path).to_numpy("counts")
    with pytest.raises(FormatError, match=f"{pattern}.*{source}$"):
        read_cube(path).profiles(group)
    values[1, 2, 3] = -1  # a part of the group: checked, not verified
    shutil.rmtree(path / "layers" / "counts")
    write_array(path / "layers" / "counts", values, chunks=chunks, compression=compression)
    with pytest.raises(ConstraintError, match=f"group '{group}', .* is negative.*{source}$"):
        read_cube(path).select(samples=[2]).profiles(group)


def test_flipped_byte_in_compressed_layer_chunk(tmp_path: Path, cube: Cube) -> None:
    path = tmp_path / "a.cube.zarr"
    write_cube(cube, path, compression="gzip")
    chunk = path / "layers" / "counts" / "c" / "1" / "0" / "0"
    flip_byte(chunk, offset=len(chunk.read_bytes()) - 6)  # in the CRC-32 of the gzip member
    read = read_cube(path)
    with pytest.raises(ValueError, match=r"(?i)crc|checksum|corrupt|digest|counts"):
        read.profiles(1)
    np.testing.assert_array_equal(read.profiles(0), cube.profiles(0))


def test_deleted_layer_chunk(stored: Path) -> None:
    (stored / "layers" / "detected" / "c" / "2" / "0" / "0").unlink()
    read = read_cube(stored)
    with pytest.raises(ValueError, match="detected"):
        read.profiles(2, layer="detected")


def test_flipped_byte_in_table(stored: Path) -> None:
    flip_byte(stored / "samples" / "age" / "c" / "0", offset=8)
    pattern = "corrupt or was edited: samples: column 'age' does not match its stored digest"
    with pytest.raises(FormatError, match=pattern):  # every column is verified at open
        read_cube(stored)


def test_a_table_comes_from_what_was_read_at_open(tmp_path: Path, cube: Cube, other: Cube) -> None:
    """A table is read, and verified, when the file is opened; its frame, made when first
    used, is built from what was read then, though the file was replaced since."""
    path = tmp_path / "a.cube.zarr"
    write_cube(cube, path)
    read = read_cube(path)
    write_cube(other.select(samples=[0, 1]), path, overwrite=True)  # other tables
    pd.testing.assert_frame_equal(read.samples, cube.samples)
    pd.testing.assert_frame_equal(read.features, cube.features)
    assert read.fingerprint == cube.fingerprint


def test_a_table_document_listing_other_columns_is_refused(plain: Path) -> None:
    document = json.loads((plain / "samples" / "zarr.json").read_text())
    order = document["attributes"]["column-order"]
    document["attributes"]["column-order"] = order[::-1]
    (plain / "samples" / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(FormatError, match=rf"samples has the columns \['sample_id', '{order[-1]}'"):
        read_cube(plain)


def test_flipped_byte_in_ids(stored: Path) -> None:
    column = stored / "groups" / "group_id"  # an array, or a group of values and mask (pandas 3)
    chunk = next(p for p in sorted(column.rglob("*")) if p.is_file() and p.name != "zarr.json")
    flip_byte(chunk, offset=8)
    with pytest.raises(ValueError, match="groups"):
        read_cube(stored)


def test_deleted_table_chunk(stored: Path) -> None:
    column = stored / "features" / "symbol"  # an array, or a group of values and mask (pandas 3)
    chunk = next(p for p in sorted(column.rglob("*")) if p.is_file() and p.name != "zarr.json")
    chunk.unlink()
    with pytest.raises(FormatError, match="features: column 'symbol' does not match"):
        read_cube(stored)


def test_flipped_byte_in_cells(stored: Path) -> None:
    flip_byte(stored / "cells" / "c" / "0" / "0", offset=8)
    with pytest.raises(ValueError, match="cell numbers"):
        read_cube(stored)


def test_flipped_byte_in_normalization(stored: Path) -> None:
    flip_byte(stored / "normalization" / "c" / "0" / "0", offset=8)
    with pytest.raises(ValueError, match="normalization"):
        read_cube(stored)


def test_edited_group_digest(stored: Path, cube: Cube) -> None:
    def edit(attrs):
        attrs["digests"]["layers"]["counts"][1] = "0" * 64

    edit_attributes(stored, edit)
    with pytest.raises(ValueError, match="fingerprint"):
        read_cube(stored)
    edit_attributes(stored, refingerprint)
    read = read_cube(stored)  # consistent digests: found when group 1 is read whole
    np.testing.assert_array_equal(read.profiles(0), cube.profiles(0))
    np.testing.assert_array_equal(
        read.select(features=[1, 2]).profiles(1), cube.profiles(1)[:, [1, 2]]
    )
    with pytest.raises(ValueError, match="counts"):
        read.profiles(1)


def test_edited_table_digest(stored: Path) -> None:
    def edit(attrs):
        attrs["digests"]["tables"]["groups"] = "0" * 64
        refingerprint(attrs)

    edit_attributes(stored, edit)
    with pytest.raises(ValueError, match=r"column digests of tables\['groups'\] do not match"):
        read_cube(stored)


def test_stored_layer_name_too_long(stored: Path) -> None:
    def edit(attrs):
        name = "z" * 256
        attrs["layers"][name] = attrs["layers"].pop("detected")
        attrs["digests"]["layers"][name] = attrs["digests"]["layers"].pop("detected")
        attrs["digests"]["dtypes"][name] = attrs["digests"]["dtypes"].pop("detected")
        refingerprint(attrs)

    edit_attributes(stored, edit)
    with pytest.raises(FormatError, match=r"layer name 'z+' cannot be stored.*256 bytes"):
        read_cube(stored)


def _id_chunk(stored: Path) -> Path:
    """The first chunk of the sample ids."""
    return string_values(stored / "samples" / "sample_id") / "c" / "0"


def test_deleted_id_chunk_is_a_format_error(stored: Path) -> None:
    _id_chunk(stored).unlink()  # the ids read as "": repeated
    with pytest.raises(FormatError, match="is corrupt or was edited"):
        read_cube(stored)


def test_edited_normalization_factors_are_a_format_error(stored: Path) -> None:
    chunk = stored / "normalization" / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[8:16] = np.float64(-1.0).tobytes()  # not a normalization factor at all
    chunk.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="normalization"):
        read_cube(stored)


@pytest.mark.parametrize("version", ["١.٠", "1.٠", "１.0", "1.0 ", "+1.0", "1.0\n"])
def test_format_version_takes_ascii_digits_only(stored: Path, version: str) -> None:
    edit_attributes(stored, lambda attrs: attrs.update(format_version=version))
    with pytest.raises(FormatError, match="invalid format_version"):
        read_cube(stored)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda a: a["metadata"].update(study="other"), id="metadata-value"),
        pytest.param(lambda a: a["metadata"].update(extra=1), id="metadata-key"),
        pytest.param(lambda a: a.update(metadata={}), id="metadata-emptied"),
        pytest.param(
            lambda a: a["provenance"][0].update(time="2000-01-01T00:00:00+00:00"), id="time"
        ),
        pytest.param(lambda a: a["provenance"][0]["parameters"].update(x=1), id="parameters"),
        pytest.param(lambda a: a.update(provenance=[]), id="provenance-removed"),
    ],
)
def test_edited_metadata_or_provenance_is_detected(stored: Path, edit) -> None:
    edit_attributes(stored, edit)
    with pytest.raises(FormatError, match="its metadata or provenance was edited"):
        read_cube(stored)


def test_attributes_digest_is_not_part_of_the_fingerprint(tmp_path: Path) -> None:
    first, second = stored_cube(metadata={"a": 1}), stored_cube(metadata={"a": 2.5, "b": [None]})
    write_cube(first, tmp_path / "first.cube.zarr")
    write_cube(second, tmp_path / "second.cube.zarr")
    one, two = attributes(tmp_path / "first.cube.zarr"), attributes(tmp_path / "second.cube.zarr")
    assert one["fingerprint"] == two["fingerprint"] == first.fingerprint == second.fingerprint
    assert one["attributes_digest"] != two["attributes_digest"]
    assert dict(read_cube(tmp_path / "second.cube.zarr").metadata) == {"a": 2.5, "b": [None]}


def test_format_1_1_digests_are_refused_in_a_1_2_file(stored: Path) -> None:
    # a file of format 1.2 names its algorithm; without it, the digests would be SHA-256
    edit_attributes(stored, lambda attrs: attrs["digests"].pop("algorithm"))
    with pytest.raises(FormatError, match=r"made with no algorithm \(SHA-256\); format 1\.2"):
        read_cube(stored)
    edit_attributes(stored, lambda attrs: attrs["digests"].update(algorithm="md5"))
    with pytest.raises(FormatError, match=r"invalid digests .*'md5'"):
        read_cube(stored)


@pytest.mark.parametrize(
    "part", ["zarr.json", "samples/zarr.json", "samples/sample_id/c/0", "layers/counts/zarr.json"]
)
def test_special_file_in_a_cube_is_refused_without_blocking(
    stored: Path, special: str, part: str
) -> None:
    if part.endswith("zarr.json"):
        unconsolidate(stored)  # with the root's copy, the node's own document is not read
    target = _id_chunk(stored) if part == "samples/sample_id/c/0" else stored / part
    make_special(target, special)
    with pytest.raises(FormatError, match=f"is not a regular file: it is {SPECIAL_FILES[special]}"):
        without_blocking(lambda: read_cube(stored).samples, target)  # a table's: when used


def test_special_file_as_a_layer_chunk(stored: Path, special: str) -> None:
    target = stored / "layers" / "counts" / "c" / "1" / "0" / "0"
    make_special(target, special)
    read = read_cube(stored)
    with pytest.raises(FormatError, match=f"is not a regular file: it is {SPECIAL_FILES[special]}"):
        without_blocking(lambda: read.profiles(1), target)


# ---------------------------------------------------------------------------------------------
# Interoperability
# ---------------------------------------------------------------------------------------------


@pytest.mark.interop
@pytest.mark.parametrize(("compression", "level"), [("gzip", None), (None, None), ("zstd", 5)])
def test_zarr_python_reads_every_node(tmp_path: Path, cube: Cube, compression, level) -> None:
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "a.cube.zarr"
    write_cube(cube, path, compression=compression, level=level)
    root = zarr.open_group(path, mode="r", zarr_format=3)
    assert dict(root.attrs) == attributes(path)
    members = dict(root.members(max_depth=None))
    on_disk = {str(p.parent.relative_to(path)) for p in path.rglob("zarr.json") if p.parent != path}
    assert set(members) == on_disk
    n_arrays = 0
    for name, node in members.items():
        if isinstance(node, zarr.Array):
            n_arrays += 1
            ours = np.asarray(open_array(path / name))
            np.testing.assert_array_equal(np.asarray(node[...]), ours)
        else:
            assert (
                dict(node.attrs)
                == json.loads((path / name / "zarr.json").read_text())["attributes"]
            )
    assert n_arrays >= 10
    for name in cube.layers:
        np.testing.assert_array_equal(root["layers"][name][...], cube.to_numpy(name))
        assert root["layers"][name].chunks == (1, 4, 6)
    np.testing.assert_array_equal(root["cells"][...], cube.cells)
    np.testing.assert_array_equal(root["normalization"][...], cube.normalization.factors)
    assert root["normalization"].attrs["method"] == "size_factors"


@pytest.mark.interop
def test_anndata_reads_tables(tmp_path: Path, cube: Cube) -> None:
    zarr = pytest.importorskip("zarr")
    ad = pytest.importorskip("anndata")
    path = tmp_path / "a.cube.zarr"
    write_cube(cube, path)
    root = zarr.open_group(path, mode="r", zarr_format=3)
    for axis, index in (
        ("samples", "sample_id"),
        ("groups", "group_id"),
        ("features", "feature_id"),
    ):
        frame = ad.io.read_elem(root[axis])
        assert frame.index.name == index
        assert as_dict(frame) == as_dict(getattr(cube, axis))


# ---------------------------------------------------------------------------------------------
# Crashes: a writer killed with SIGKILL never leaves a torn store
# ---------------------------------------------------------------------------------------------

ZYGOTE = textwrap.dedent(
    """
    import os, sys, time, traceback
    import numpy as np
    import pandas as pd
    from cytepool import Cube
    from cytepool.io import write_cube

    def cube(seed):
        rng = np.random.default_rng(seed)
        n_groups, n_samples, n_features = 6, 16, 5000
        counts = rng.integers(0, 100, size=(n_groups, n_samples, n_features), dtype=np.int32)
        return Cube(
            {"counts": counts, "detected": np.minimum(counts, 1)},
            samples=pd.DataFrame({"sample_id": [f"s{i}" for i in range(n_samples)]}),
            groups=pd.DataFrame({"group_id": [f"g{i}" for i in range(n_groups)]}),
            features=pd.DataFrame({"feature_id": [f"f{i}" for i in range(n_features)]}),
            cells=np.ones((n_groups, n_samples), dtype=np.int64),
            metadata={"seed": seed},
        )

    cubes = [cube(0), cube(1)]
    print(cubes[0].fingerprint, cubes[1].fingerprint, flush=True)
    for line in sys.stdin:  # one write per line, in a forked child the test may SIGKILL
        pid = os.fork()
        if pid == 0:
            try:
                print("child", os.getpid(), flush=True)
                start = time.perf_counter()
                write_cube(cubes[int(line)], sys.argv[1], overwrite=True, level=1)
                print("wrote", time.perf_counter() - start, flush=True)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("reaped", os.waitstatus_to_exitcode(status), flush=True)
    """
)


ZYGOTE_DEADLINE_S = 240


class Zygote:
    """A process that has imported cytepool and forks one writer per trial (fast to kill)."""

    def __init__(self, target: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE, str(target)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # one process group: the watchdog kills writers too
        )
        # A stuck writer must fail the test, not hang the suite: after the deadline the whole
        # group is killed, the pipes close and the next readline returns "".
        self.watchdog = threading.Timer(ZYGOTE_DEADLINE_S, self.kill)
        self.watchdog.daemon = True
        self.watchdog.start()
        self.fingerprints = self.process.stdout.readline().split()

    def kill(self) -> None:
        """SIGKILL the zygote and every writer it forked."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def write(self, seed: int, kill_after: float | None) -> float | None:
        """Write cube ``seed``; SIGKILL the writer after ``kill_after`` s, or time the write."""
        self.process.stdin.write(f"{seed}\n")
        self.process.stdin.flush()
        pid = int(self.process.stdout.readline().split()[1])
        elapsed = None
        if kill_after is None:
            elapsed = float(self.process.stdout.readline().split()[1])
        else:
            time.sleep(kill_after)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        line = self.process.stdout.readline()
        while line.startswith("wrote"):
            line = self.process.stdout.readline()
        assert line.split() in (["reaped", "0"], ["reaped", str(-signal.SIGKILL)]), line
        return elapsed

    def close(self) -> None:
        self.watchdog.cancel()
        self.process.stdin.close()
        self.process.wait()
        self.process.stdout.close()


def store_state(target: Path) -> str:
    """'nothing', or the fingerprint of the store after verifying every group; raises if torn."""
    if not os.path.lexists(target):
        return "nothing"
    read = read_cube(target)
    for layer in read.layers:
        for group in range(read.shape[0]):
            read.profiles(group, layer=layer)  # checks the group's digest
    return read.fingerprint


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and SIGKILL")
def test_sigkill_never_tears_the_store(tmp_path: Path) -> None:
    target = tmp_path / "crash.cube.zarr"
    zygote = Zygote(target)
    try:
        zygote.write(0, None)
        duration = zygote.write(1, None)  # a replacement, the slower kind of write
        shutil.rmtree(target)
        rng = random.Random(12345)
        old = "nothing"
        for trial in range(10):
            new = zygote.fingerprints[trial % 2]
            zygote.write(trial % 2, rng.uniform(0.1, 1.5) * duration)
            state = store_state(target)
            assert state in (old, new)  # nothing (before any store), the old store or the new
            old = state
            assert len(leftovers(target)) <= 1
        zygote.write(0, None)  # the next write removes the leftover
        assert leftovers(target) == []
        assert store_state(target) == zygote.fingerprints[0]
    finally:
        zygote.close()


def test_the_fingerprint_of_a_file_is_made_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening checks the stored fingerprint against the stored digests; the cube read, and
    the cubes derived from it, take that fingerprint rather than making it again."""
    from cytepool.fingerprint import Digests

    cube = make_cube()
    write_cube(cube, tmp_path / "c.cube.zarr")
    expected = cube.fingerprint
    made: list[str] = []
    make = Digests._made_fingerprint

    def counted(digests: Digests) -> str:
        made.append(digests.algorithm)
        return make(digests)

    monkeypatch.setattr(Digests, "_made_fingerprint", counted)
    read = read_cube(tmp_path / "c.cube.zarr")
    assert made == ["blake3"]
    assert read.fingerprint == expected
    selected = read.select(groups=["g1"], features=["f2", "f0"])
    assert selected.provenance[-1].inputs == (expected,)
    assert made == ["blake3"]
