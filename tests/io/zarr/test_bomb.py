"""Decompression bombs and chunks of too many gzip members / zstd frames.

A bomb is a small chunk file whose compressed stream would inflate to at least 1 GiB, in an array
whose metadata says the chunk holds 4 KiB (1,024 float32 values, or 1,024 strings). Reading it
must fail with a ValueError after decoding little more than that. The reads run in a subprocess
that reports how far its peak resident set grew (VmHWM after resetting it through
/proc/self/clear_refs, else ru_maxrss), so the allocations of zlib and zstd outside Python count.
"""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cytepool.io.zarr import open_array, write_array

BOMB_BYTES = 1 << 30  # what every bomb stream inflates to
PIECE = 1 << 20
CHUNK_ELEMENTS = 1024  # float32: the metadata claims 4 KiB chunks
MAX_GROWTH = 100 * 2**20  # allowed growth of the peak RSS while reading every bomb


def _zstd() -> Any:
    try:
        from compression import zstd
    except ImportError:
        from backports import zstd
    return zstd


def _deflate_zeros(total: int) -> bytes:
    """Raw DEFLATE data for ``total`` zero bytes, built from one repeated full-flush segment."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    compressor.compress(bytes(PIECE))
    compressor.flush(zlib.Z_FULL_FLUSH)
    # After a full flush no block refers back, so this segment can be repeated.
    segment = compressor.compress(bytes(PIECE)) + compressor.flush(zlib.Z_FULL_FLUSH)
    return segment * (total // PIECE) + compressor.flush()


def gzip_bomb() -> bytes:
    """A valid gzip member (CRC and size included) of 1 GiB of zeros, about 1 MB long."""
    crc = 0
    zeros = bytes(PIECE)
    for _ in range(BOMB_BYTES // PIECE):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = crc.to_bytes(4, "little") + (BOMB_BYTES % 2**32).to_bytes(4, "little")
    return header + _deflate_zeros(BOMB_BYTES) + trailer


def zstd_bomb(*, declare_size: bool) -> bytes:
    """A zstd frame of 1 GiB of zeros (about 32 KB), with or without its content size."""
    zstd = _zstd()
    compressor = zstd.ZstdCompressor(level=1)
    if declare_size:
        compressor.set_pledged_input_size(BOMB_BYTES)
    zeros = bytes(PIECE)
    parts = [compressor.compress(zeros) for _ in range(BOMB_BYTES // PIECE)]
    return b"".join([*parts, compressor.flush()])


def _metadata(
    codecs: list[dict[str, object]], n: int = CHUNK_ELEMENTS, *, strings: bool = False
) -> dict[str, object]:
    serializer = (
        {"name": "vlen-utf8", "configuration": {}}
        if strings
        else {"name": "bytes", "configuration": {"endian": "little"}}
    )
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [n],
        "data_type": "string" if strings else "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [n]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "" if strings else 0.0,
        "codecs": [serializer, *codecs],
    }


GZIP = {"name": "gzip", "configuration": {"level": 1}}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}


def _store(
    root: Path,
    name: str,
    codecs: list[dict[str, object]],
    chunk: bytes,
    n: int,
    *,
    strings: bool = False,
) -> str:
    path = root / name
    (path / "c").mkdir(parents=True)
    (path / "c" / "0").write_bytes(chunk)
    (path / "zarr.json").write_text(json.dumps(_metadata(codecs, n, strings=strings)))
    return name


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("bombs")
    zstd = _zstd()
    g = gzip_bomb()
    z = zstd_bomb(declare_size=False)
    z_sized = zstd_bomb(declare_size=True)
    # 1,024 empty strings (a count, then zero lengths), then zeros: a header frame + the bomb.
    z_strings = zstd.compress(struct.pack("<I", CHUNK_ELEMENTS)) + z
    n = CHUNK_ELEMENTS
    names = [
        _store(root, "gzip", [GZIP], g, n),
        _store(root, "gzip_twice", [GZIP, GZIP], gzip.compress(g, 9), n),
        _store(root, "zstd", [ZSTD], z, n),
        _store(root, "zstd_sized", [ZSTD], z_sized, n),
        _store(root, "zstd_twice", [ZSTD, ZSTD], zstd.compress(z, 19), n),
        _store(root, "zstd_then_gzip", [ZSTD, GZIP], gzip.compress(z, 9), n),
        # A claimed 2 MiB chunk lets the 1 MB gzip bomb past the bound on bytes read from disk,
        # so the inflating itself must stop.
        _store(root, "gzip_2mib_chunk", [GZIP], g, 2**19),
        # The valid chunk first, then the bomb as a second member / frame.
        _store(root, "gzip_second_member", [GZIP], gzip.compress(bytes(4 * n)) + g, n),
        _store(root, "zstd_second_frame", [ZSTD], zstd.compress(bytes(4 * n)) + z, n),
        _store(root, "gzip_second_member_2mib", [GZIP], gzip.compress(bytes(2**21)) + g, 2**19),
        # Strings (vlen-utf8): a valid chunk has no fixed size, so the decoder must stop on
        # what the stream itself says — a count of 0 items where 1,024 are expected, or
        # 1,024 empty strings followed by a gigabyte of trailing zeros.
        _store(root, "strings_zstd", [ZSTD], z, n, strings=True),
        _store(root, "strings_gzip", [GZIP], g, n, strings=True),
        _store(root, "strings_zstd_trailing", [ZSTD], z_strings, n, strings=True),
        _store(root, "strings_huge_count", [], struct.pack("<I", 2**32 - 1), n, strings=True),
        _store(root, "strings_huge_length", [], struct.pack("<II", n, 2**31), n, strings=True),
    ]
    for name in names:  # all small files, yet each would inflate to >= 1 GiB
        assert (root / name / "c" / "0").stat().st_size < 1_100_000
    # Valid arrays read first, so imports and decoders are warm before the baseline.
    ones = np.ones(n, dtype=np.float32)
    write_array(root / "warm_gzip", ones, chunks=(n,), compression="gzip")
    write_array(root / "warm_zstd", ones, chunks=(n,), compression="zstd")
    return root, names


MEASURE = textwrap.dedent(
    """
    import json, resource, sys, time
    from pathlib import Path
    import numpy as np
    from cytepool.io.zarr import open_array

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024

    try:  # Linux: reset the peak RSS before each case, then read it back
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        status("VmHWM")
        precise = True
    except OSError:
        precise = False

    def start():
        if precise:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return status("VmRSS")
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale

    def growth(base):
        if precise:
            return status("VmHWM") - base
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale - base

    root = Path(sys.argv[1])
    for warm in ("warm_gzip", "warm_zstd"):
        np.asarray(open_array(root / warm))
    report = {}
    base = start()
    control = b"\x01" * (160 * 2**20)  # shows that the measurement sees an allocation
    report["control"] = {"outcome": "", "growth": growth(base), "seconds": 0.0}
    del control
    for name in sys.argv[2:]:
        base = start()
        t = time.perf_counter()
        try:
            np.asarray(open_array(root / name))
            outcome = "read without error"
        except ValueError as error:
            outcome = "ValueError: " + str(error)
        except BaseException as error:
            outcome = type(error).__name__ + ": " + str(error)
        seconds = time.perf_counter() - t
        report[name] = {"outcome": outcome, "growth": growth(base), "seconds": seconds}
    print(json.dumps(report))
    """
)


def test_bombs_fail_fast_with_small_peak_memory(
    bombs: tuple[Path, list[str]], inflate: str
) -> None:
    root, names = bombs
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(root), *names],
        capture_output=True,
        text=True,
        timeout=300,  # a guard against a hang, not a timing assertion
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["control"]["growth"] > MAX_GROWTH, report["control"]
    # Without /proc the peak only grows, so the first case over the limit is the culprit.
    for name in names:
        case = report[name]
        assert case["outcome"].startswith("ValueError: "), (name, case)
        assert case["growth"] < MAX_GROWTH, (name, case)


# ---------------------------------------------------------------------------------------------
# At most 1,024 gzip members or zstd frames a chunk


def _members(count: int, kind: str) -> tuple[bytes, np.ndarray]:
    values = np.arange(count, dtype="<f4")
    zstd = _zstd()
    compress = gzip.compress if kind == "gzip" else zstd.compress
    return b"".join(compress(v.tobytes()) for v in values), values


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_1024_members_or_frames_are_read(tmp_path: Path, kind: str, inflate: str) -> None:
    chunk, values = _members(1024, kind)
    name = _store(tmp_path, kind, [GZIP if kind == "gzip" else ZSTD], chunk, 1024)
    np.testing.assert_array_equal(np.asarray(open_array(tmp_path / name)), values)


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_more_than_1024_members_or_frames_are_refused(
    tmp_path: Path, kind: str, inflate: str
) -> None:
    chunk, _ = _members(1025, kind)
    name = _store(tmp_path, kind, [GZIP if kind == "gzip" else ZSTD], chunk, 1025)
    array = open_array(tmp_path / name)
    with pytest.raises(ValueError, match=r"1,?024|members|frames"):
        np.asarray(array)


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_many_empty_members_or_frames_are_refused(tmp_path: Path, kind: str, inflate: str) -> None:
    # 4 KiB of data in the first member/frame, then thousands of empty ones.
    zstd = _zstd()
    compress = gzip.compress if kind == "gzip" else zstd.compress
    chunk = compress(bytes(range(256)) * 16) + compress(b"") * 5000
    name = _store(tmp_path, kind, [GZIP if kind == "gzip" else ZSTD], chunk, 1024)
    with pytest.raises(ValueError, match=r"1,?024|members|frames"):
        np.asarray(open_array(tmp_path / name))
