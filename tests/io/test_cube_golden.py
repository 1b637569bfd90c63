"""Golden cube files of every format version: read and verified by this cytepool on both stacks.

The files in tests/data/cube-files were written by the cytepool of their time (see make.py
there): formats 1.0 and 1.1 with SHA-256 digests, format 1.2 with BLAKE3 digests, on the
oldest stack (pandas 2) and, for 1.2, on the newest (pandas 3) too. They hold the cube of
``make.golden_cube()``.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.errors import FormatError
from cytepool.fingerprint import SHA256
from cytepool.io import read_cube, write_cube

pd = pytest.importorskip("pandas")

DATA = Path(__file__).parents[1] / "data" / "cube-files"
SHA256_FINGERPRINT = "1a305620bc92abb3b9e6e03caa5806c866386ef30eb1e81a3b2bf56736617a23"
BLAKE3_FINGERPRINT = "blake3:8ba04f6e561f6ebfaaa32089c57973371e6f38bbcd8908cb1b9d065e8fed4b32"
OLD = ["format-1.0.cube.zarr", "format-1.1.cube.zarr"]
NEW = ["format-1.2.cube.zarr", "format-1.2-pandas3.cube.zarr"]


def golden_cube() -> Any:
    spec = importlib.util.spec_from_file_location("make_golden", DATA / "make.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.golden_cube()


def root_attributes(path: Path) -> dict[str, Any]:
    return json.loads((path / "zarr.json").read_text())["attributes"]


def copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(DATA / name, target)
    return target


def assert_content(found: Any, made: Any) -> None:
    for name in made.layers:
        np.testing.assert_array_equal(found.to_numpy(name), made.to_numpy(name))
    np.testing.assert_array_equal(found.cells, made.cells)
    np.testing.assert_array_equal(found.normalization.factors, made.normalization.factors)
    for axis in ("samples", "groups", "features"):
        pd.testing.assert_frame_equal(
            getattr(found, axis).reset_index().astype("string"),
            getattr(made, axis).reset_index().astype("string"),
        )
    assert dict(found.metadata) == dict(made.metadata)


@pytest.mark.parametrize("name", OLD)
def test_old_formats_read_verify_and_keep_their_sha256_fingerprint(name: str) -> None:
    attributes = root_attributes(DATA / name)
    assert attributes["fingerprint"] == SHA256_FINGERPRINT
    assert "algorithm" not in attributes["digests"]  # SHA-256, unnamed before 1.2
    cube = read_cube(DATA / name)
    assert cube.fingerprint == SHA256_FINGERPRINT  # known from the stored digests
    assert_content(cube, golden_cube())  # every group read whole: verified with SHA-256
    assert cube.fingerprint == SHA256_FINGERPRINT
    assert golden_cube().fingerprint == BLAKE3_FINGERPRINT  # the same content in memory


@pytest.mark.parametrize("name", OLD)
def test_old_formats_detect_a_changed_layer_with_sha256(name: str, tmp_path: Path) -> None:
    path = copy(name, tmp_path)
    values = read_cube(path).to_numpy("counts")
    values[1, 0, 0] += 1  # the same codec, another value: only the digest can tell
    chunk = path / "layers" / "counts" / "c" / "1" / "0" / "0"
    chunk.write_bytes(_encoded_like(path, values[1:2]))
    with pytest.raises(FormatError, match=r"layer 'counts', group 'T cells'.*stored digest"):
        read_cube(path).to_numpy("counts")


def _encoded_like(path: Path, block: np.ndarray) -> bytes:
    """The bytes of one layer chunk holding ``block``, encoded as the file's chunks are."""
    from cytepool.io.zarr import write_array

    scratch = path.parent / "scratch"
    write_array(scratch, block, chunks=block.shape, compression="gzip", level=4)
    return (scratch / "c" / "0" / "0" / "0").read_bytes()


def test_format_1_1_detects_edited_metadata_with_sha256(tmp_path: Path) -> None:
    path = copy("format-1.1.cube.zarr", tmp_path)
    document = json.loads((path / "zarr.json").read_text())
    document["attributes"]["metadata"]["study"] = "edited"
    document.pop("consolidated_metadata", None)
    (path / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(FormatError, match="its metadata or provenance was edited"):
        read_cube(path)


def test_format_1_0_has_no_attributes_digest(tmp_path: Path) -> None:
    path = copy("format-1.0.cube.zarr", tmp_path)
    document = json.loads((path / "zarr.json").read_text())
    document["attributes"]["metadata"]["study"] = "edited"  # not covered in format 1.0
    (path / "zarr.json").write_text(json.dumps(document))
    assert read_cube(path).metadata["study"] == "edited"
    document["attributes"]["attributes_digest"] = "0" * 64
    (path / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(FormatError, match=r"unknown attributes \['attributes_digest'\]"):
        read_cube(path)


@pytest.mark.parametrize("name", OLD)
def test_old_format_with_blake3_digests_is_refused(name: str, tmp_path: Path) -> None:
    path = copy(name, tmp_path)
    document = json.loads((path / "zarr.json").read_text())
    document["attributes"]["digests"]["algorithm"] = "blake3"
    document.pop("consolidated_metadata", None)
    (path / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(FormatError, match=r"made with blake3; format 1\.[01] uses sha256"):
        read_cube(path)


@pytest.mark.parametrize("name", OLD)
def test_an_old_file_written_again_is_format_1_2(name: str, tmp_path: Path) -> None:
    cube = read_cube(DATA / name)
    selected = cube.select(groups=["T cells"])
    assert selected.fingerprint != SHA256_FINGERPRINT  # a derived cube: its own (SHA-256) one
    write_cube(cube, tmp_path / "again.cube.zarr")
    attributes = root_attributes(tmp_path / "again.cube.zarr")
    assert attributes["format_version"] == "1.2"
    assert attributes["digests"]["algorithm"] == "blake3"
    assert attributes["fingerprint"] == BLAKE3_FINGERPRINT
    again = read_cube(tmp_path / "again.cube.zarr")
    assert again.fingerprint == BLAKE3_FINGERPRINT
    assert_content(again, golden_cube())
    assert parts_algorithm(selected) == SHA256


def parts_algorithm(cube: Any) -> str:
    from cytepool._assemble import parts_of

    return parts_of(cube).algorithm


@pytest.mark.parametrize("name", NEW)
def test_format_1_2_written_on_either_stack_verifies_on_this_one(name: str, tmp_path: Path) -> None:
    attributes = root_attributes(DATA / name)
    assert attributes["format_version"] == "1.2"
    assert attributes["digests"]["algorithm"] == "blake3"
    cube = read_cube(DATA / name)
    assert cube.fingerprint == BLAKE3_FINGERPRINT
    assert_content(cube, golden_cube())  # every group verified with BLAKE3
    write_cube(golden_cube(), tmp_path / "here.cube.zarr")
    here = root_attributes(tmp_path / "here.cube.zarr")
    # the digests this stack makes are those the other stack stored, byte for byte
    assert json.dumps(here["digests"]) == json.dumps(attributes["digests"])
    assert here["fingerprint"] == attributes["fingerprint"] == BLAKE3_FINGERPRINT


def test_format_1_2_detects_a_changed_layer(tmp_path: Path) -> None:
    path = copy("format-1.2.cube.zarr", tmp_path)
    values = read_cube(path).to_numpy("logged")
    values[0, 2, 4] = np.nextafter(values[0, 2, 4], 10)
    chunk = path / "layers" / "logged" / "c" / "0" / "0" / "0"
    chunk.write_bytes(_encoded_like(path, values[0:1]))
    with pytest.raises(FormatError, match=r"layer 'logged', group 'B cells'.*stored digest"):
        read_cube(path).to_numpy("logged")


def test_cubes_of_both_algorithms_combine_into_a_blake3_cube() -> None:
    import cytepool

    old = read_cube(DATA / "format-1.1.cube.zarr").select(groups=["B cells"])
    new = golden_cube().select(groups=["T cells"])
    joined = cytepool.concat([old, new], axis="groups")
    assert parts_algorithm(joined) == "blake3"
    expected = cytepool.concat([golden_cube().select(groups=["B cells"]), new], axis="groups")
    assert joined.fingerprint == expected.fingerprint
    assert joined.fingerprint.startswith("blake3:")


@pytest.mark.parametrize("name", OLD)
def test_cubes_added_from_an_old_file_keep_sha256(name: str) -> None:
    import cytepool

    old = read_cube(DATA / name)
    total = cytepool.add([old, old])
    assert parts_algorithm(total) == SHA256
    assert not total.fingerprint.startswith("blake3:")
    mixed = cytepool.add([old, golden_cube()])  # one old, one new: BLAKE3
    assert parts_algorithm(mixed) == "blake3"
    assert mixed.fingerprint == cytepool.add([golden_cube(), golden_cube()]).fingerprint
