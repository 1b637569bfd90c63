"""The `cytepool` command line: in-process, and once through a real subprocess."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ad = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sparse = pytest.importorskip("scipy.sparse")

from cytepool.cli import main  # noqa: E402
from cytepool.io import read_cube  # noqa: E402
from cytepool.io.anndata import from_anndata  # noqa: E402

COMMANDS = ["pool", "info", "export", "demo"]


@pytest.fixture
def h5ad(tmp_path: Path) -> Path:
    """A small .h5ad of whole-number counts, its repeated strings already categorical."""
    rng = np.random.default_rng(1)
    n_cells = 150
    obs = pd.DataFrame(
        {
            "donor": pd.Categorical(rng.choice(["D1", "D2", "D3"], n_cells)),
            "cell_type": pd.Categorical(rng.choice(["B", "CD4 T", "NK"], n_cells)),
        },
        index=[f"c{i}" for i in range(n_cells)],
    )
    counts = rng.poisson(0.8, (n_cells, 9)).astype(np.float32)
    adata = ad.AnnData(sparse.csr_matrix(counts), obs=obs)
    adata.var_names = [f"g{j}" for j in range(9)]
    adata.layers["counts"] = adata.X.copy()
    path = tmp_path / "cells.h5ad"
    adata.write_h5ad(path)
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, pattern: str, status: int = 1) -> None:
    assert code == status
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert pattern in err, err


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help(command: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([command, "--help"] if command else ["--help"], capsys)
    assert code == 0
    assert "usage: cytepool" in out
    if command is None:
        assert all(name in out for name in COMMANDS)
    examples = out[out.index("\nexamples:\n") :].splitlines()
    assert any(line.startswith(f"  cytepool {command or ''}") for line in examples), out


def test_level_help_reads_as_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["pool", "--help"], capsys)
    text = " ".join(out.split())
    assert "gzip from 0 to 9 (default 4), zstd from -131072 to 22 (default 3)" in text


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0
    assert out.startswith("cytepool ")


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["pool", "in.h5ad"], capsys)
    assert code == 2
    assert err.count("\n") == 1
    assert "required" in err
    assert "see cytepool pool --help" in err
    code, _, err = run(["frobnicate"], capsys)
    assert code == 2
    assert err.count("\n") == 1
    for args in (
        ["pool", "a", "b", "--sample-key", "x", "--group-key", "y", "--bogus"],
        ["info", "x", "y"],
    ):
        code, _, err = run(args, capsys)
        command = args[0]  # the command's parser tells, as for its other usage errors
        expected = f"cytepool {command}: error: unrecognized arguments: {args[-1]} "
        assert (code, err) == (2, f"{expected}(see cytepool {command} --help)\n")


_POOL_OPTIONS = ["--sample-key", "donor", "--group-key", "cell_type", "--no-progress"]
_ORDERS = {  # where the options go among the positionals (INPUT... OUTPUT)
    "before": lambda positionals, options: [*options, *positionals],
    "between": lambda positionals, options: [*positionals[:-1], *options, positionals[-1]],
    "after": lambda positionals, options: [*positionals, *options],
    "split": lambda positionals, options: [
        positionals[0],
        *options[:2],
        *positionals[1:],
        *options[2:],
    ],
}


@pytest.mark.parametrize("inputs", [["a.h5ad"], ["a.h5ad", "b.h5ad"], ["a.h5ad", "b", "c"]])
@pytest.mark.parametrize("order", list(_ORDERS))
def test_options_go_anywhere_among_the_positionals(
    inputs: list[str],
    order: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`pool IN1 IN2 --sample-key K --group-key G OUT` said "unrecognized arguments: OUT"
    (IN2 was taken for OUTPUT), while one INPUT, or OUTPUT before the options, worked."""
    import cytepool.cli.export
    import cytepool.cli.pool

    parsed: list[Any] = []
    monkeypatch.setattr(cytepool.cli.pool, "run", parsed.append)
    monkeypatch.setattr(cytepool.cli.export, "run", parsed.append)
    argv = _ORDERS[order]([*inputs, "out.cube.zarr"], _POOL_OPTIONS)
    assert run(["pool", *argv], capsys) == (0, "", "")
    args = parsed.pop()
    assert (args.input, args.output) == (inputs, "out.cube.zarr")
    assert (args.sample_key, args.group_key, args.no_progress) == ("donor", "cell_type", True)
    argv = _ORDERS[order](["c.cube.zarr", "out.h5ad"], ["--layer", "detected", "--overwrite"])
    assert run(["export", *argv], capsys) == (0, "", "")
    args = parsed.pop()
    assert (args.cube, args.output, args.layer, args.overwrite) == (
        "c.cube.zarr",
        "out.h5ad",
        "detected",
        True,
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["info", "--", "-c.cube.zarr"], {"cube": "-c.cube.zarr"}),
        (["export", "--overwrite", "--", "-c.cube.zarr", "-x.h5ad"], {"output": "-x.h5ad"}),
        (
            ["pool", *_POOL_OPTIONS, "--", "-a.h5ad", "b.h5ad", "-out.cube.zarr"],
            {"input": ["-a.h5ad", "b.h5ad"], "output": "-out.cube.zarr"},
        ),
    ],
)
def test_names_after_a_double_dash_are_positionals(
    argv: list[str],
    expected: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--` ends the options, so a name starting with `-` can follow it (intermixed parsing
    dropped the `--` and took `-c.cube.zarr` for an option)."""
    import cytepool.cli.export
    import cytepool.cli.info
    import cytepool.cli.pool

    parsed: list[Any] = []
    for module in (cytepool.cli.pool, cytepool.cli.export, cytepool.cli.info):
        monkeypatch.setattr(module, "run", parsed.append)
    assert run(argv, capsys) == (0, "", "")
    args = parsed.pop()
    assert {name: getattr(args, name) for name in expected} == expected


def pool(h5ad: Path, out: Path, *extra: str) -> list[str]:
    keys = ["--sample-key", "donor", "--group-key", "cell_type", "--no-progress"]
    return ["pool", str(h5ad), str(out), *keys, *extra]


@pytest.mark.interop
def test_pool_info_export(tmp_path: Path, h5ad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cube_path = tmp_path / "cells.cube.zarr"
    code, out, err = run(pool(h5ad, cube_path, "--compression", "none"), capsys)
    assert (code, err) == (0, "")
    assert "into 3 groups x 3 samples x 9 features" in out
    expected = from_anndata(ad.read_h5ad(h5ad), sample_key="donor", group_key="cell_type")
    cube = read_cube(cube_path)
    assert cube.fingerprint == expected.fingerprint

    code, out, _ = run(["info", str(cube_path)], capsys)
    assert code == 0
    assert "3 groups x 3 samples x 9 features" in out
    assert "counts (int64)" in out
    assert cube.fingerprint in out
    assert "from_anndata" in out
    code, out, _ = run(["info", str(cube_path), "--json"], capsys)
    info = json.loads(out)
    assert info["shape"] == {"groups": 3, "samples": 3, "features": 9}
    assert info["fingerprint"] == cube.fingerprint
    assert info["cells"] == 150
    assert sum(item["cells"] for item in info["cells_per_group"].values()) == 150
    assert [record["operation"] for record in info["provenance"]][-1] == "from_anndata"

    code, out, _ = run(
        ["export", str(cube_path), str(tmp_path / "nk.h5ad"), "--group", "NK"], capsys
    )
    assert code == 0
    exported = ad.read_h5ad(tmp_path / "nk.h5ad")
    assert set(exported.obs["group_id"]) == {"NK"}
    assert exported.X.dtype == np.int64
    nk = cube.profiles("NK")
    np.testing.assert_array_equal(
        exported.X, nk[cube.cells[list(cube.groups.index).index("NK")] > 0]
    )
    long_name = tmp_path / ("x" * 250 + ".h5ad")  # 255 bytes: the temporary name fits too
    code, _, err = run(["export", str(cube_path), str(long_name)], capsys)
    assert (code, err) == (0, "")
    assert ad.read_h5ad(long_name).n_vars == 9


@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_zarr_input_and_output(
    tmp_path: Path, h5ad: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cytepool.io.anndata import from_pseudobulk

    cells = ad.read_h5ad(h5ad)
    with warnings.catch_warnings():  # the setting is deprecated in anndata 0.13 (v3 default)
        warnings.simplefilter("ignore", DeprecationWarning)
        with ad.settings.override(zarr_write_format=3):
            cells.write_zarr(tmp_path / "cells.zarr")
    cube_path = tmp_path / "z.cube.zarr"
    code, _, err = run(pool(tmp_path / "cells.zarr", cube_path, "--layer", "counts"), capsys)
    assert (code, err) == (0, "")
    cube = read_cube(cube_path)
    assert (
        cube.fingerprint
        == from_anndata(cells, sample_key="donor", group_key="cell_type").fingerprint
    )
    code, _, _ = run(["export", str(cube_path), str(tmp_path / "pb.zarr")], capsys)
    assert code == 0
    assert (tmp_path / "pb.zarr" / "zarr.json").is_file()  # Zarr v3
    assert from_pseudobulk(ad.read_zarr(tmp_path / "pb.zarr")).fingerprint == cube.fingerprint


def test_progress_bar_only_on_a_terminal(
    tmp_path: Path, h5ad: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = pool(h5ad, tmp_path / "a.cube.zarr")[:-1]  # without --no-progress
    code, _, err = run(args, capsys)
    assert (code, err) == (0, "")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    code, _, err = run([*args[:2], str(tmp_path / "b.cube.zarr"), *args[3:]], capsys)
    assert code == 0
    assert "pooling [" in err


@pytest.mark.interop
def test_errors_are_one_line(
    tmp_path: Path, h5ad: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cube_path = tmp_path / "c.cube.zarr"
    cases = [
        (pool(tmp_path / "missing.h5ad", cube_path), "no such file or store"),
        (
            ["pool", str(h5ad), str(cube_path), "--sample-key", "x", "--group-key", "cell_type"],
            f"--sample-key 'x' is not a column of obs of {h5ad}; its columns: ['donor', ",
        ),
        (
            [*pool(h5ad, cube_path), "--layer", "spliced"],
            f"{h5ad} has no layer 'spliced'; its layers are ['counts']",
        ),
        ([*pool(h5ad, cube_path), "--raw"], f"{h5ad} has no raw.X"),
        (["info", str(tmp_path / "nothing.cube.zarr")], "nothing.cube.zarr"),
        (["info", str(h5ad)], "cells.h5ad"),
        (["export", str(tmp_path / "nothing.cube.zarr"), str(tmp_path / "o.h5ad")], "nothing"),
        (pool(h5ad, tmp_path / "no" / "dir" / "c.cube.zarr"), "does not exist"),
    ]
    for args, message in cases:
        code, out, err = run(args, capsys)
        assert_one_line_error(code, err, message)
        assert out == ""
    code, out, err = run(["export", str(cube_path), str(tmp_path / "o.csv")], capsys)
    assert_one_line_error(code, err, "must end in .h5ad or .zarr", status=2)  # a bad argument
    assert "(see cytepool export --help)" in err
    assert not cube_path.exists()
    assert run(pool(h5ad, cube_path), capsys)[0] == 0
    code, _, err = run(pool(h5ad, cube_path), capsys)
    assert_one_line_error(code, err, "exists; pass --overwrite")
    assert run([*pool(h5ad, cube_path), "--overwrite"], capsys)[0] == 0
    (tmp_path / "o.h5ad").write_text("mine")
    code, _, err = run(["export", str(cube_path), str(tmp_path / "o.h5ad")], capsys)
    assert_one_line_error(code, err, "exists; pass --overwrite")
    assert (tmp_path / "o.h5ad").read_text() == "mine"
    code, _, err = run(["export", str(cube_path), str(tmp_path / "o.h5ad"), "--group", "Z"], capsys)
    assert_one_line_error(code, err, "exists")
    code, _, err = run(["export", str(cube_path), str(tmp_path / "p.h5ad"), "--group", "Z"], capsys)
    assert_one_line_error(code, err, "Z")
    assert not (tmp_path / "p.h5ad").exists()


def test_unexpected_errors_are_one_line_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import cytepool.cli.info

    def boom(args: Any) -> None:
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(cytepool.cli.info, "run", boom)
    code, _, err = run(["info", "x"], capsys)
    assert_one_line_error(code, err, "cytepool info: error: something broke")


def test_demo_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "demo"
    code, out, err = run(["demo", str(directory), "--cells", "2000", "--no-progress"], capsys)
    assert (code, err) == (0, "")
    assert "fingerprint" in out
    assert "matches" in out
    for name in ("cells.h5ad", "cells.cube.zarr", "CD4_T.h5ad"):
        assert (directory / name).exists()
    exported = ad.read_h5ad(directory / "CD4_T.h5ad")
    assert set(exported.obs["group_id"]) == {"CD4 T"}
    assert exported.n_obs == 16
    assert {"donor", "condition"} <= set(exported.obs.columns)
    cube = read_cube(directory / "cells.cube.zarr")
    assert cube.shape == (6, 16, 2000)
    # a second run replaces the earlier demo's files, and leaves other files alone
    (directory / "notes.txt").write_text("mine")
    assert run(["demo", str(directory), "--cells", "2000"], capsys)[0] == 0
    assert (directory / "notes.txt").read_text() == "mine"


def test_demo_refuses_to_clobber(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.txt").write_text("precious")
    code, _, err = run(["demo", str(tmp_path)], capsys)
    assert_one_line_error(code, err, "not empty and was not written by `cytepool demo`")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
    (tmp_path / "file").write_text("x")
    code, _, err = run(["demo", str(tmp_path / "file")], capsys)
    assert_one_line_error(code, err, "not a directory")


def _demo_outputs(directory: Path) -> dict[str, bytes]:
    """The bytes of every file the demo wrote in ``directory``, by relative path."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != ".cytepool-demo"
    }


@pytest.mark.parametrize("failing", ["simulate", "write the cells", "write the cube"])
def test_a_failed_demo_leaves_the_earlier_demos_outputs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
) -> None:
    """A rerun deleted the earlier demo's outputs before it simulated anything, so a run
    interrupted or failing midway left DIR without them; cells.h5ad was written in place."""
    import anndata

    import cytepool._demo
    import cytepool.io

    directory = tmp_path / "demo"
    assert run(["demo", str(directory), "--cells", "100", "--no-progress"], capsys)[0] == 0
    before = _demo_outputs(directory)
    assert {"cells.h5ad", "CD4_T.h5ad", "cells.cube.zarr/zarr.json"} <= set(before)

    def broken(*args: Any, **kwargs: Any) -> Any:
        if failing == "write the cells":
            Path(args[1]).write_bytes(b"half an h5ad")  # written where anndata was told to
        raise OSError(5, "Input/output error")

    if failing == "simulate":
        monkeypatch.setattr(cytepool._demo, "simulate_cells", broken)
    elif failing == "write the cells":
        monkeypatch.setattr(anndata.AnnData, "write_h5ad", lambda *a, **k: broken(*a, **k))
    else:
        monkeypatch.setattr(cytepool.io, "write_cube", broken)
    code, _, err = run(["demo", str(directory), "--cells", "100", "--no-progress"], capsys)
    assert_one_line_error(code, err, "Input/output error")
    after = _demo_outputs(directory)
    assert set(after) == set(before)  # no temporary files left either
    for name in ("CD4_T.h5ad", "cells.cube.zarr/zarr.json"):
        assert after[name] == before[name]
    if failing != "write the cube":  # else cells.h5ad is the new one, as whole
        assert after["cells.h5ad"] == before["cells.h5ad"]


def test_the_demo_deletes_nothing_its_marker_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The marker file was taken as a list of names to delete: "..", "../x" or "a/b"
    deleted outside the demo's outputs (DIR's parent, with all in it)."""
    directory = tmp_path / "outer" / "demo"
    (directory / "a").mkdir(parents=True)
    (directory / "a" / "b").write_text("mine")
    (tmp_path / "outer" / "victim.txt").write_text("precious")
    names = ["..", "../victim.txt", "a/b", "a", "cells.h5ad"]
    (directory / ".cytepool-demo").write_text(json.dumps(names))
    assert run(["demo", str(directory), "--cells", "100", "--no-progress"], capsys)[0] == 0
    assert (tmp_path / "outer" / "victim.txt").read_text() == "precious"
    assert (directory / "a" / "b").read_text() == "mine"
    assert (directory / "cells.h5ad").is_file()


def cytepool(command: list[str] | str, cwd: Path, **options: Any) -> Any:
    """Run a command (a shell line if a string) in a real process; its output as text."""
    return subprocess.run(
        command,
        shell=isinstance(command, str),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        **options,
    )


def test_subprocess_demo_and_errors(tmp_path: Path) -> None:
    """`python -m cytepool`: the README's demo as a user runs it, and a failing command."""
    result = cytepool([sys.executable, "-m", "cytepool", "demo", "--no-progress"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "cytepool demo -> cytepool-demo/" in result.stdout
    assert (tmp_path / "cytepool-demo" / "cells.cube.zarr" / "zarr.json").is_file()
    result = cytepool([sys.executable, "-m", "cytepool", "info", "missing.cube.zarr"], tmp_path)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


_TERMINATED_MIDWAY = """
import os, shutil, signal, sys, time
import cytepool.io.cubes as cubes
from cytepool.cli import run

built = cubes._build

def build_then_terminated(*args, **kwargs):  # the new cube is whole, not yet in place
    built(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)  # the signal's handler raises here

def removed_then_terminated_again(path, *args, **kwargs):  # a second SIGTERM, while
    if "cytepool-tmp" in str(path):  # the temporary cube is removed
        os.kill(os.getpid(), signal.SIGTERM)
    return removed(path, *args, **kwargs)

removed = shutil.rmtree
shutil.rmtree = removed_then_terminated_again
cubes._build = build_then_terminated
sys.argv = ["cytepool", *sys.argv[1:]]
run()
"""


@pytest.mark.parametrize("existing", [False, True])
def test_sigterm_leaves_what_was_there(tmp_path: Path, h5ad: Path, existing: bool) -> None:
    """SIGTERM while a cube is being written, and again while it is cleaned up (`timeout`
    passes one on): exit status 143 with one line, the cube the output held before (or
    nothing) left as it was, no temporary directory beside it."""
    out = tmp_path / "out.cube.zarr"
    if existing:
        assert main(pool(h5ad, out)) == 0
        before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    script = tmp_path / "terminated.py"
    script.write_text(_TERMINATED_MIDWAY)
    result = cytepool([sys.executable, str(script), *pool(h5ad, out, "--overwrite")], tmp_path)
    assert result.returncode == 143, result.stderr
    assert result.stderr == "cytepool: terminated\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["cells.h5ad", "terminated.py", *(["out.cube.zarr"] if existing else [])]
    )
    if existing:
        assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
        assert read_cube(out).shape[1] == 3


_OLD = b"the output written before"

_STOPPED_REPLACING = """
import os, shutil, signal, sys, time
from pathlib import Path
from cytepool.cli import run

removed = shutil.rmtree
stop = signal.SIGKILL if sys.argv[1] == "kill" else signal.SIGTERM
OLD = None

def olds(path):
    path = Path(path)
    return [p for p in [path, *path.rglob("*")] if p.is_file() and p.read_bytes() == OLD]

def stopped_while_removing(path, *args, **kwargs):  # what OUTPUT held is being removed:
    found = olds(path)  # stopped once its first file is gone
    if found and not getattr(stopped_while_removing, "done", False):
        stopped_while_removing.done = True
        found[0].unlink()
        os.kill(os.getpid(), stop)
        time.sleep(30)  # SIGTERM's handler raises here
    return removed(path, *args, **kwargs)

shutil.rmtree = stopped_while_removing
sys.argv = ["cytepool", *sys.argv[2:]]
run()
""".replace("OLD = None", f"OLD = {_OLD!r}")


def _old_output(path: Path, kind: str) -> dict[str, bytes]:
    """Make what an earlier write left at ``path``: a Zarr store or a file; its files."""
    if kind == "file":
        path.write_bytes(_OLD)
        return {"": _OLD}
    path.mkdir()
    (path / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    for name in ("a", "b/c", "b/d"):
        (path / name).parent.mkdir(exist_ok=True)
        (path / name).write_bytes(_OLD)
    return _files(path)


def _files(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _assert_old_or_new(path: Path, old: dict[str, bytes], n_obs: int) -> str:
    """OUTPUT holds the old output whole, or the new AnnData whole; which one."""
    if _files(path) == old:
        return "old"
    new = ad.read_h5ad(path) if path.suffix == ".h5ad" else ad.read_zarr(path)
    assert new.n_obs == n_obs
    return "new"


@pytest.fixture
def exported_cube(tmp_path: Path, h5ad: Path) -> Path:
    """A directory holding a cube file, ``c.cube.zarr``, to export."""
    from cytepool.io import write_cube

    directory = tmp_path / "work"
    directory.mkdir()
    write_cube(
        from_anndata(str(h5ad), sample_key="donor", group_key="cell_type"),
        directory / "c.cube.zarr",
    )
    return directory


REPLACED = [
    ("store", "out.zarr"),
    ("file", "out.h5ad"),
    ("store", "out.h5ad"),
    ("file", "out.zarr"),
]


@pytest.mark.parametrize(
    ("how", "kind", "name"),
    [*(("kill", kind, name) for kind, name in REPLACED), ("term", "store", "out.zarr")],
)
def test_export_stopped_while_replacing_loses_nothing(
    exported_cube: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    kind: str,
    name: str,
) -> None:
    """export --overwrite removed the old output (rmtree), then moved the new one in: SIGKILL
    or SIGTERM while it was removed left neither. Now the old output is removed only once the
    new one is in place; what is left beside it, the next write removes."""
    out = exported_cube / name
    old = _old_output(out, kind)
    script = exported_cube.parent / "stopped.py"
    script.write_text(_STOPPED_REPLACING)
    args = [sys.executable, str(script), how, "export", "c.cube.zarr", name, "--overwrite"]
    result = cytepool(args, exported_cube)
    assert result.returncode == (-signal.SIGKILL if how == "kill" else 143), result.stderr
    assert _assert_old_or_new(out, old, n_obs=9) == "new"
    monkeypatch.chdir(exported_cube)
    assert run(["export", "c.cube.zarr", name, "--overwrite"], capsys)[0] == 0
    assert sorted(p.name for p in exported_cube.iterdir()) == ["c.cube.zarr", name]


class _OsReplaceInterrupted:
    """The module os, but for os.replace, interrupted (os itself is left alone: threads of
    zarr use it)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def replace(self, *_: Any, **__: Any) -> None:
        raise KeyboardInterrupt


@pytest.mark.parametrize(("kind", "name"), REPLACED)
@pytest.mark.parametrize("exchange", [True, False])
def test_export_interrupted_before_the_new_output_is_in_place(
    exported_cube: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    name: str,
    exchange: bool,
) -> None:
    """Ctrl-C as the new output is moved in (by an exchange, or where there is none by two
    renames): the old output is left whole, and nothing beside it."""
    from cytepool.io import _atomic

    monkeypatch.chdir(exported_cube)
    out = exported_cube / name
    old = _old_output(out, kind)
    if not exchange:
        monkeypatch.setattr(_atomic, "_renameat2", lambda source, destination, flags: False)

    def interrupted(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt

    for step in ("_exchange", "_rename_noreplace"):
        monkeypatch.setattr(_atomic, step, interrupted)
    monkeypatch.setattr(_atomic, "os", _OsReplaceInterrupted())  # a file by a file
    code, _, err = run(["export", "c.cube.zarr", name, "--overwrite"], capsys)
    assert (code, err) == (130, "cytepool: interrupted\n")
    assert _files(out) == old
    assert sorted(p.name for p in exported_cube.iterdir()) == ["c.cube.zarr", name]


@pytest.mark.parametrize(("kind", "name"), REPLACED)
def test_export_puts_back_an_output_left_aside(
    exported_cube: Path, capsys: pytest.CaptureFixture[str], kind: str, name: str
) -> None:
    """Where there is no exchange, a write killed between its two renames leaves the old
    output aside (a hidden -old- sibling, a file or a directory): the next write puts it back
    first, and without --overwrite does not replace it."""
    from cytepool.io import _atomic

    aside = exported_cube / f".{name}.cytepool-old-{'0' * 16}"
    old = _old_output(aside, kind)
    code, _, err = run(
        ["export", str(exported_cube / "c.cube.zarr"), str(exported_cube / name)], capsys
    )
    assert_one_line_error(code, err, "exists; pass --overwrite to replace it")
    assert _files(exported_cube / name) == old
    assert sorted(p.name for p in exported_cube.iterdir()) == ["c.cube.zarr", name]
    assert _atomic._sibling_pattern(exported_cube / name).fullmatch(aside.name)


def test_a_fifo_under_a_leftover_name_never_blocks_a_write(tmp_path: Path) -> None:
    """A lock opens what it locks without blocking: a FIFO that took a leftover's name
    (between the listing and the lock) is refused, not waited on for a writer forever."""
    import threading

    from cytepool.io import _atomic

    fifo = tmp_path / f".out.h5ad.cytepool-old-{'0' * 16}"
    os.mkfifo(fifo)
    found: list[object] = []
    locking = threading.Thread(target=lambda: found.append(_atomic._lock(fifo)), daemon=True)
    locking.start()
    locking.join(30)
    assert found == [None]


def test_a_leftover_file_its_owner_may_not_read_is_locked_for_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An -old- leftover that was an .h5ad of mode 0200 cannot be opened for reading: locked
    through a descriptor for writing, it is put back by the next write, not taken for one a
    live writer holds (as root, which reads every file, the refusal is played here)."""
    from cytepool.io import _atomic

    leftover = tmp_path / f".out.h5ad.cytepool-old-{'0' * 16}"
    leftover.write_text("OLD")
    real = os.open

    def refuse_reading(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(path) == leftover and flags & os.O_ACCMODE == os.O_RDONLY:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse_reading)
    lock = _atomic._lock(leftover)
    assert lock is not None
    assert _atomic._lock(leftover, wait=False) is None  # held: another cannot take it
    lock.close()


_STOPPED_BEFORE = """
import os, signal, sys, time
import cytepool.cli as cli

def stopped():  # while the parser is made, before any command runs
    if sys.argv[1] == "int":
        raise KeyboardInterrupt
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)

cli._parser = stopped
cli.run()
"""


@pytest.mark.parametrize(
    ("how", "status", "said"), [("int", 130, "interrupted"), ("term", 143, "terminated")]
)
def test_stopped_before_a_command_runs(tmp_path: Path, how: str, status: int, said: str) -> None:
    """Ctrl-C or SIGTERM before a command runs (while modules import, say): the documented
    status and one line, no traceback (Python's own exit for KeyboardInterrupt is -2)."""
    script = tmp_path / "stopped.py"
    script.write_text(_STOPPED_BEFORE)
    result = cytepool([sys.executable, str(script), how], tmp_path)
    assert (result.returncode, result.stderr) == (status, f"cytepool: {said}\n")


# ---------------------------------------------------------------------------------------------
# The command's own vocabulary
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def log_h5ad(tmp_path: Path, h5ad: Path) -> Path:
    """The cells with log-normalized X (the counts in the layer 'counts') and a varying column."""
    cells = ad.read_h5ad(h5ad)
    cells.X = sparse.csr_matrix(np.log1p(cells.layers["counts"].toarray()))
    rng = np.random.default_rng(2)
    cells.obs["batch"] = "b1"
    cells.obs["n_genes"] = rng.integers(100, 200, cells.n_obs)
    donor_sex = {"D1": "F", "D2": "M", "D3": "F"}
    cells.obs["sex"] = cells.obs["donor"].map(donor_sex).astype(str)
    path = tmp_path / "log.h5ad"
    cells.write_h5ad(path)
    return path


@pytest.mark.interop
def test_not_counts_is_one_warning_line_in_flags(
    tmp_path: Path,
    log_h5ad: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(pool(Path("log.h5ad"), Path("log.cube.zarr")), capsys)
    assert code == 0
    assert err.count("\n") == 1, err
    assert err.startswith("cytepool pool: warning: X of log.h5ad: not every value is a count")
    assert "(cell 'c" in err
    assert "with --layer or --raw; if these values are meant, pass --allow-float" in err
    assert "layer=" not in err
    assert "use_raw" not in err
    assert read_cube("log.cube.zarr").layers["counts"].dtype == np.float64
    code, _, err = run([*pool(Path("log.h5ad"), Path("a.cube.zarr")), "--allow-float"], capsys)
    assert (code, err) == (0, "")
    code, _, err = run([*pool(Path("log.h5ad"), Path("c.cube.zarr")), "--layer", "counts"], capsys)
    assert (code, err) == (0, "")
    assert read_cube("c.cube.zarr").layers["counts"].dtype == np.int64


@pytest.mark.interop
def test_pool_reports_and_chooses_covariates(
    tmp_path: Path, log_h5ad: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cube_path = tmp_path / "c.cube.zarr"
    code, out, _ = run([*pool(log_h5ad, cube_path), "--layer", "counts"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[1] == "sample covariates: batch, sex"
    assert lines[2] == "group covariates: (none)"
    assert re.fullmatch(
        r"dropped: n_genes \(varies within sample 'D\d' \(\d+ and \d+\) and within group '[^']+' "
        r"\(\d+ and \d+\)\)",
        lines[3],
    )
    recorded = read_cube(cube_path).provenance[-1].parameters["covariates"]
    assert recorded["samples"] == ["batch", "sex"]
    assert list(recorded["dropped"]) == ["n_genes"]

    code, out, _ = run(["info", str(cube_path)], capsys)
    assert code == 0
    assert "samples    batch (Categorical), sex (Categorical)" in out
    assert "dropped    n_genes (varies within sample 'D" in out
    info = json.loads(run(["info", str(cube_path), "--json"], capsys)[1])
    assert info["covariates"]["samples"] == {"batch": "Categorical", "sex": "Categorical"}
    assert list(info["dropped"]) == ["n_genes"]

    args = [*pool(log_h5ad, cube_path), "--layer", "counts", "--overwrite"]
    code, out, _ = run([*args, "--sample-covariates", "sex", "--group-covariates", "batch"], capsys)
    assert code == 0
    assert out.splitlines()[1:4] == [
        "sample covariates: sex",
        "group covariates: batch",
        "dropped: n_genes (not named as a sample covariate and not named as a group covariate)",
    ]
    assert list(read_cube(cube_path).groups.columns) == ["batch"]
    code, out, _ = run([*args, "--sample-covariates", "", "--group-covariates", ""], capsys)
    assert code == 0
    assert out.splitlines()[1:3] == ["sample covariates: (none)", "group covariates: (none)"]
    code, _, err = run([*args, "--sample-covariates", "n_genes"], capsys)
    assert_one_line_error(
        code,
        err,
        f"column 'n_genes' of obs of {log_h5ad} varies within sample 'D",
    )
    assert err.rstrip().endswith("it cannot be a sample covariate (--sample-covariates)")


@pytest.mark.interop
def test_errors_name_what_exists_with_paths_as_typed(
    tmp_path: Path, h5ad: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a file").write_text("x")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("x")
    keys = ["--sample-key", "donor", "--group-key", "cell_type"]
    cases = [
        (
            ["pool", "./cells.h5ad", "o.cube.zarr", "--sample-key", "nope", "--group-key", "x"],
            "error: --sample-key 'nope' is not a column of obs of ./cells.h5ad; its columns",
        ),
        (
            ["pool", "cells.h5ad", "a file", *keys, "--overwrite"],
            "error: a file exists and is not a cube file or an empty directory; --overwrite "
            "replaces only a cube file or an empty directory",
        ),
        (["pool", "cells.h5ad", "other", *keys, "--overwrite"], "error: other exists and is not"),
        (["pool", "cells.h5ad", "a file", *keys], "error: a file exists; pass --overwrite"),
        (
            ["pool", "cells.h5ad", "pseudobulk.h5ad", *keys],
            "error: pseudobulk.h5ad: OUTPUT (the last argument) is the cube file to write, a "
            "Zarr directory (*.cube.zarr), not an .h5ad file; for a pseudobulk AnnData, write "
            "the cube, then run: cytepool export CUBE pseudobulk.h5ad",
        ),
        (["pool", "cells.h5ad", "cells.h5ad", *keys, "--overwrite"], "not an .h5ad file"),
        (["pool", "cells.h5ad", "x.H5MU", *keys], "error: x.H5MU: OUTPUT (the last argument)"),
        (["info", "missing.cube.zarr"], "error: there is no cube file at missing.cube.zarr\n"),
        (["info", "other"], "error: other is not a cube file"),
        (["export", "missing.cube.zarr", "x.h5ad"], "error: there is no cube file at missing"),
    ]
    for args, message in cases:
        code, out, err = run(args, capsys)
        assert_one_line_error(code, err, message)
        assert out == ""
        assert "[Errno" not in err
        assert str(tmp_path) not in err  # paths as typed, not resolved
        assert ".X.obs" not in err
        assert ":X" not in err
    assert run(["pool", "cells.h5ad", "c.cube.zarr", *keys], capsys)[0] == 0
    code, _, err = run(["export", "c.cube.zarr", "b.h5ad", "--group", "Z"], capsys)
    assert_one_line_error(
        code, err, "error: --group 'Z': the cube has no such group; its groups are ['B', 'CD4 T'"
    )


def test_output_cut_short_by_the_reader_is_quiet(tmp_path: Path, h5ad: Path) -> None:
    """`cytepool info CUBE | head -1`: the reader is gone before the output is written."""
    cube = from_anndata(ad.read_h5ad(h5ad), sample_key="donor", group_key="cell_type")
    from cytepool.io import write_cube

    write_cube(cube, tmp_path / "c.cube.zarr")
    read_end, write_end = os.pipe()
    os.close(read_end)  # writing into the pipe now fails with EPIPE, every time
    try:
        result = subprocess.run(
            [sys.executable, "-m", "cytepool", "info", str(tmp_path / "c.cube.zarr")],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (0, "")
    shell = cytepool(
        f"{shlex.quote(sys.executable)} -m cytepool info c.cube.zarr | head -1", tmp_path
    )
    assert (shell.stdout, shell.stderr) == ("cube       c.cube.zarr\n", "")


def test_demo_hint_runs_after_the_readmes_first_command(tmp_path: Path) -> None:
    """The README runs `.venv/bin/cytepool demo` with cytepool not on PATH: the hint must work."""
    script = Path(sys.executable).parent / "cytepool"
    if not script.is_file():
        pytest.skip("cytepool is not installed as a console script next to this Python")
    typed = os.path.relpath(script, tmp_path)
    path = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if Path(d) != script.parent
    )
    environment = {**os.environ, "PATH": path}
    demo = cytepool([typed, "demo", "--cells", "300", "--no-progress"], tmp_path, env=environment)
    assert demo.returncode == 0, demo.stderr
    hint = demo.stdout.splitlines()[-1]
    assert hint == f"next: {typed} info cytepool-demo/cells.cube.zarr"
    info = cytepool(hint.removeprefix("next: "), tmp_path, env=environment)
    assert (info.returncode, info.stderr) == (0, "")
    assert "6 groups x 16 samples x 2,000 features" in info.stdout


def test_info_of_a_cube_without_a_covariates_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cube files written before covariates were recorded, or pooled by from_cells, read as ever."""
    import cytepool
    from cytepool.io import write_cube

    samples = pd.DataFrame({"sample_id": ["s1", "s2"], "age": [30, 41]})
    cube = cytepool.from_cells(
        np.ones((4, 2), dtype=np.int64),
        sample_labels=["s1", "s2", "s2", "s1"],
        group_labels=["B", "B", "T", "T"],
        samples=samples,
    )
    assert all("covariates" not in record.parameters for record in cube.provenance)
    write_cube(cube, tmp_path / "c.cube.zarr")
    code, out, _ = run(["info", str(tmp_path / "c.cube.zarr")], capsys)
    assert code == 0
    assert "samples    age (Int64)" in out
    assert "groups     (ids only)" in out
    assert "dropped" not in out
    info = json.loads(run(["info", str(tmp_path / "c.cube.zarr"), "--json"], capsys)[1])
    assert info["dropped"] == {}


@pytest.mark.interop
@pytest.mark.parametrize(
    ("flags", "layers"),
    [
        ([], ["counts"]),
        (["--detected"], ["counts", "detected"]),
        (["--layers", "counts,detected,squares"], ["counts", "detected", "squares"]),
        (["--layers", "squares,counts"], ["squares", "counts"]),
    ],
)
def test_pool_layers(
    tmp_path: Path, h5ad: Path, flags: list[str], layers: list[str], capsys: Any
) -> None:
    cube_path = tmp_path / "cells.cube.zarr"
    code, _, err = run(pool(h5ad, cube_path, *flags), capsys)
    assert (code, err) == (0, "")
    cube = read_cube(cube_path)
    assert list(cube.layers) == layers
    expected = from_anndata(
        ad.read_h5ad(h5ad), sample_key="donor", group_key="cell_type", layers=layers
    )
    assert cube.fingerprint == expected.fingerprint


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--layers", "counts,sum"], "expected distinct names among counts, detected, squares"),
        (["--layers", "counts,counts"], "expected distinct names among"),
        (["--layers", ""], "expected distinct names among"),
        (["--layers", "counts", "--detected"], "not allowed with argument"),
    ],
)
def test_pool_layers_usage_errors(flags: list[str], message: str, capsys: Any) -> None:
    code, _, err = run(pool(Path("in.h5ad"), Path("out.cube.zarr"), *flags), capsys)
    assert code == 2
    assert err.count("\n") == 1
    assert message in err


# ---------------------------------------------------------------------------------------------
# Arguments, outputs and messages
# ---------------------------------------------------------------------------------------------


KEYS = ["--sample-key", "donor", "--group-key", "cell_type"]


@pytest.mark.interop
def test_what_an_input_that_is_not_anndata_is(
    tmp_path: Path,
    h5ad: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cube file and an HDF5 file that is not AnnData said only "... has no X"; --layer X
    said the file has no layer X (X is read without --layer)."""
    import h5py

    from cytepool.io import write_cube

    monkeypatch.chdir(tmp_path)
    write_cube(from_anndata(str(h5ad), sample_key="donor", group_key="cell_type"), "c.cube.zarr")
    with h5py.File(tmp_path / "plain.h5ad", "w") as file:
        file["a"] = [1, 2]
    cases = [
        (
            ["pool", "c.cube.zarr", "x.cube.zarr", *KEYS],
            "error: c.cube.zarr is a cube file (cells already pooled), not AnnData cells; to "
            "make a pseudobulk AnnData of it, run: cytepool export CUBE OUTPUT.h5ad",
        ),
        (
            ["pool", "plain.h5ad", "x.cube.zarr", *KEYS],
            "error: plain.h5ad is not an AnnData file or store: it has neither obs nor var (it "
            "holds 'a')",
        ),
        (
            ["pool", "cells.h5ad", "x.cube.zarr", *KEYS, "--layer", "X"],
            "error: cells.h5ad has no layer 'X'; its layers are ['counts']; --layer names a "
            "layer of adata.layers, and X is read when --layer is not given",
        ),
    ]
    for args, message in cases:
        code, out, err = run(args, capsys)
        assert_one_line_error(code, err, message)
        assert out == ""
    _, out, _ = run(["pool", "--help"], capsys)
    assert "without --layer (or --raw), X is pooled" in " ".join(out.split())
    with pytest.raises(ValueError, match=r"is a cube file .* open it with cytepool\.io\.read_cube"):
        from_anndata("c.cube.zarr", sample_key="donor", group_key="cell_type")
    with pytest.raises(KeyError, match=r"layer= names a layer of adata\.layers"):
        from_anndata("cells.h5ad", sample_key="donor", group_key="cell_type", layer="X")


@pytest.mark.interop
def test_info_shows_columns_named_as_another_tables_ids(
    tmp_path: Path, h5ad: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sample covariate named feature_id, a feature column named group_id: each table
    drops only its own id column."""
    from cytepool.cli._shared import without_ids

    cells = ad.read_h5ad(h5ad)
    cells.obs["feature_id"] = cells.obs["donor"].map({"D1": "a", "D2": "b", "D3": "c"})
    cells.var["group_id"] = "g"
    cells.write_h5ad(tmp_path / "ids.h5ad")
    cube_path = tmp_path / "ids.cube.zarr"
    assert run(pool(tmp_path / "ids.h5ad", cube_path), capsys)[0] == 0
    code, out, _ = run(["info", str(cube_path)], capsys)
    assert code == 0
    assert "samples    feature_id (Categorical)" in out
    assert "features   group_id (Categorical)" in out
    info = json.loads(run(["info", str(cube_path), "--json"], capsys)[1])
    assert info["covariates"]["samples"] == {"feature_id": "Categorical"}
    assert info["covariates"]["features"] == {"group_id": "Categorical"}
    schema = {"sample_id": "String", "group_id": "String", "feature_id": "Int64"}
    assert without_ids(schema, "samples") == {"group_id": "String", "feature_id": "Int64"}
    assert without_ids(schema, "features") == {"sample_id": "String", "group_id": "String"}


@pytest.fixture
def no_pooling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pooling fails the test: what is checked must be refused before it."""
    import cytepool.io.anndata

    def pooled(*_: Any, **__: Any) -> None:
        pytest.fail("pooled before the arguments and the output were checked")

    monkeypatch.setattr(cytepool.io.anndata, "from_anndata", pooled)
    monkeypatch.setattr(cytepool.io.anndata, "from_mudata_cells", pooled)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["pool", "--level", "42", *KEYS],
            "error: --level: the gzip level must be from 0 to 9, not 42",
        ),
        (
            ["pool", "--compression", "none", "--level", "3", *KEYS],
            "error: --level needs --compression gzip or zstd",
        ),
        (["pool", "--compression", "zstd", "--level", "23", *KEYS], "error: --level: the zstd"),
        (["pool", "--jobs", "0", *KEYS], "error: argument --jobs: expected a positive integer"),
        (
            ["demo", "--cells", "50"],
            "error: argument --cells: expected a whole number of at least 100",
        ),
        (["demo", "--cells", "many"], "error: argument --cells: expected a whole number"),
        (["export", "--group", "B", "--group", "B"], "error: --group B is given twice"),
    ],
)
def test_bad_values_of_arguments_exit_with_status_2(
    tmp_path: Path,
    h5ad: Path,
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_pooling: None,
) -> None:
    """Out of range, not going together, repeated: status 2, as argparse's usage errors
    (they exited 1, but --jobs 0 2); checked before anything is read or written."""
    from cytepool.io import write_cube

    monkeypatch.chdir(tmp_path)
    write_cube(from_anndata(str(h5ad), sample_key="donor", group_key="cell_type"), "c.cube.zarr")
    paths = {
        "pool": ["cells.h5ad", "q.cube.zarr"],
        "demo": ["d"],
        "export": ["c.cube.zarr", "b.h5ad"],
    }
    command, *flags = args
    code, out, err = run([command, *paths[command], *flags], capsys)
    assert_one_line_error(code, err, message, status=2)
    assert err.endswith(f" (see cytepool {command} --help)\n")
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.cube.zarr", "cells.h5ad"]


def test_help_states_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["--help"], capsys)
    text = " ".join(out.split())
    assert "Exit status: 0 on success, 1 on an error, 2 for bad arguments" in text


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["pool", "", "out.cube.zarr", *KEYS], "INPUT"),
        (["pool", "cells.h5ad", "", *KEYS], "OUTPUT"),
        (["pool", "cells.h5ad", "", "out.cube.zarr", *KEYS], "INPUT"),
        (["info", ""], "CUBE"),
        (["export", "", "b.h5ad"], "CUBE"),
        (["export", "c.cube.zarr", ""], "OUTPUT"),
        (["demo", ""], "DIR"),
    ],
)
def test_an_empty_name_is_no_path(
    tmp_path: Path,
    h5ad: Path,
    args: list[str],
    name: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_pooling: None,
) -> None:
    """An empty INPUT pooled every file of the working directory (Path('') is '.'), an
    empty OUTPUT said "error:  exists"."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(args, capsys)
    message = f"error: argument {name}: expected a path, found an empty name ('')"
    assert_one_line_error(code, err, message, status=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cells.h5ad"]


def test_overwrite_never_replaces_the_working_directory(
    tmp_path: Path,
    h5ad: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_pooling: None,
) -> None:
    """write_cube's rules, before pooling and in the command's words (it said so after
    pooling, in the words of write_cube: overwrite=True)."""
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "empty")
    for output in (".", "../empty"):
        code, out, err = run(["pool", "../cells.h5ad", output, *KEYS, "--overwrite"], capsys)
        assert_one_line_error(
            code, err, f"error: {output} is the working directory or holds it; --overwrite never"
        )
        assert "overwrite=True" not in err
        assert out == ""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["export", "c.cube.zarr", "empty.zarr", "--overwrite"], capsys)
    assert_one_line_error(code, err, "there is no cube file at c.cube.zarr")


def test_an_output_in_an_unwritable_directory_is_refused_first(
    tmp_path: Path,
    h5ad: Path,
    unwritable_directory: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_pooling: None,
) -> None:
    """Before pooling, naming the path as typed (the error came after pooling and named a
    hidden temporary directory, absolute)."""
    from cytepool.io import write_cube

    monkeypatch.chdir(tmp_path)
    write_cube(from_anndata(str(h5ad), sample_key="donor", group_key="cell_type"), "c.cube.zarr")
    cases = [
        (["pool", "cells.h5ad", "unwritable/x.cube.zarr", *KEYS], "unwritable/x.cube.zarr"),
        (["export", "c.cube.zarr", "unwritable/x.h5ad"], "unwritable/x.h5ad"),
        (["demo", "unwritable"], "unwritable"),
        (["demo", "unwritable/new/demo"], "unwritable/new/demo"),
    ]
    for args, typed in cases:
        code, out, err = run(args, capsys)
        message = f"error: cannot write {typed}: the directory unwritable is not writable ("
        assert_one_line_error(code, err, message)
        assert "cytepool-tmp" not in err
        assert str(tmp_path) not in err
        assert out == ""
    assert list(unwritable_directory.iterdir()) == []


def test_an_anndata_not_written_is_named_as_given(
    tmp_path: Path, unwritable_directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the temporary directory it is built in, whether that cannot be made or a write
    into it fails."""
    import errno

    from cytepool.cli._shared import write_anndata

    adata = ad.AnnData(np.ones((2, 3), dtype=np.float32))
    output = unwritable_directory / "x.h5ad"
    with pytest.raises(PermissionError, match=rf"{re.escape(str(output))} could not be written: "):
        write_anndata(adata, output, overwrite=False)

    def full(self: Any, path: Path, *_: Any, **__: Any) -> None:
        raise OSError(errno.ENOSPC, f"No space left on device: {path}")

    monkeypatch.setattr(ad.AnnData, "write_h5ad", full)
    output = tmp_path / "y.h5ad"
    with pytest.raises(OSError, match=r"y\.h5ad could not be written: No space") as info:
        write_anndata(adata, output, overwrite=False)
    assert str(info.value).endswith(f"No space left on device: {output}")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_an_output_is_never_what_is_read(
    tmp_path: Path,
    h5ad: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """export CUBE CUBE --overwrite replaced the cube with an AnnData; the same, spelled
    otherwise, inside it or holding it, and pool's OUTPUT as one of its INPUTs."""
    from cytepool.io import write_cube

    monkeypatch.chdir(tmp_path)
    cube = from_anndata(str(h5ad), sample_key="donor", group_key="cell_type")
    write_cube(cube, "c.cube.zarr")
    (tmp_path / "link.cube.zarr").symlink_to("c.cube.zarr")
    (tmp_path / "sub").mkdir()
    write_cube(cube, (tmp_path / "big.zarr").mkdir() or "big.zarr/c.cube.zarr")
    (tmp_path / "sub" / "cells.h5ad").hardlink_to(h5ad)
    (tmp_path / "cells.zarr").mkdir()  # an AnnData store, as far as the checks look
    (tmp_path / "cells.zarr" / "zarr.json").write_text("{}")
    (tmp_path / "same.zarr").symlink_to("cells.zarr")
    cases = [
        (["export", "c.cube.zarr", "c.cube.zarr"], "OUTPUT c.cube.zarr is CUBE c.cube.zarr"),
        (
            ["export", "link.cube.zarr", "./c.cube.zarr"],
            "OUTPUT ./c.cube.zarr is CUBE link.cube.zarr",
        ),
        (
            ["export", "c.cube.zarr", "c.cube.zarr/x.zarr"],
            "OUTPUT c.cube.zarr/x.zarr is inside CUBE c.cube.zarr",
        ),
        (["export", "big.zarr/c.cube.zarr", "big.zarr"], "OUTPUT big.zarr holds CUBE big."),
        (["pool", "cells.zarr", "cells.zarr", *KEYS], "OUTPUT cells.zarr is INPUT cells.zarr"),
        (["pool", "cells.zarr", "same.zarr", *KEYS], "OUTPUT same.zarr is INPUT cells.zarr"),
        (
            ["pool", "cells.zarr", "cells.zarr/c.cube.zarr", *KEYS],
            "OUTPUT cells.zarr/c.cube.zarr is inside INPUT",
        ),
        (["pool", "sub/cells.h5ad", "sub", *KEYS], "OUTPUT sub holds INPUT sub/cells.h5ad"),
        (["pool", "sub", "sub", *KEYS], "OUTPUT sub holds INPUT sub/cells.h5ad"),
    ]
    for args, message in cases:
        for overwrite in ([], ["--overwrite"]):
            code, out, err = run([*args, *overwrite], capsys)
            assert_one_line_error(code, err, f"error: {message}")
            assert err.rstrip().endswith(
                "writing it would change what is read; name another OUTPUT"
            )
            assert out == ""
    assert read_cube("c.cube.zarr").fingerprint == cube.fingerprint
    assert ad.read_h5ad("sub/cells.h5ad").n_obs == 150
    assert sorted(p.name for p in (tmp_path / "cells.zarr").iterdir()) == ["zarr.json"]
