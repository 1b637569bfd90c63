"""Lazy layers: selections and sums equal numpy, read only the chunks they need, sum exactly."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cytepool
from cytepool._assemble import parts_of
from cytepool.errors import ConstraintError
from cytepool.fingerprint import group_digest
from cytepool.layers import ArrayLayer, SelectLayer, positions
from factories import make_cube

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _positions(key: Any, n: int) -> np.ndarray[Any, Any]:
    if isinstance(key, int | np.integer):
        return np.array([int(key)])
    if isinstance(key, slice):
        return np.arange(n)[key]
    arr = np.asarray(key)
    return np.flatnonzero(arr) if arr.dtype == bool else arr


class ChunkedArray:
    """A numpy array cut into chunks that records which chunks each read touches."""

    def __init__(self, data: np.ndarray[Any, Any], chunks: tuple[int, int, int]):
        self.data = data
        self.shape = data.shape
        self.dtype = data.dtype
        self.chunks = chunks
        self.touched: set[tuple[int, ...]] = set()

    def _read(self, key: tuple[Any, ...]) -> Any:
        picks = [_positions(k, n) for k, n in zip(key, self.shape, strict=True)]
        for index in itertools.product(*picks):
            self.touched.add(tuple(int(i) // c for i, c in zip(index, self.chunks, strict=True)))
        out = self.data[np.ix_(*picks)]
        return out[tuple(0 if isinstance(k, int | np.integer) else slice(None) for k in key)]

    def __getitem__(self, key: Any) -> Any:
        return self._read(key if isinstance(key, tuple) else (key,))

    @property
    def oindex(self) -> Any:
        outer = self

        class _O:
            def __getitem__(self, key: Any) -> Any:
                return outer._read(key)

        return _O()

    def chunks_of(self, groups: Any, samples: Any, features: Any) -> set[tuple[int, ...]]:
        """The chunks holding every combination of the given positions."""
        return {
            (int(g) // self.chunks[0], int(s) // self.chunks[1], int(f) // self.chunks[2])
            for g, s, f in itertools.product(groups, samples, features)
        }


@st.composite
def chunked(draw: st.DrawFn, dtype: str = "int64") -> tuple[np.ndarray[Any, Any], ChunkedArray]:
    shape = tuple(draw(st.integers(1, n)) for n in (4, 5, 6))
    chunks = tuple(draw(st.integers(1, 3)) for _ in range(3))
    seed = draw(st.integers(0, 2**32 - 1))
    values = np.random.default_rng(seed).integers(0, 1000, shape).astype(dtype)
    return values, ChunkedArray(values, chunks)  # type: ignore[arg-type]


@st.composite
def selection(draw: st.DrawFn, n: int) -> Any:
    kind = draw(st.sampled_from(["none", "positions", "mask"]))
    if kind == "none" or n == 0:
        return None
    if kind == "mask":
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    return draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))


def _all(sel: Any, n: int) -> np.ndarray[Any, Any]:
    if sel is None:
        return np.arange(n)
    arr = np.asarray(sel)
    return np.flatnonzero(arr) if arr.dtype == bool else arr.astype(int)


# --------------------------------------------------------------------------- select


@SETTINGS
@given(data=st.data(), case=chunked())
def test_select_equals_numpy_and_reads_only_needed_chunks(data: st.DataObject, case: Any) -> None:
    values, array = case
    cube = make_cube(array)
    n_g, n_s, n_f = values.shape
    g_sel, s_sel, f_sel = (data.draw(selection(n)) for n in (n_g, n_s, n_f))
    sub = cube.select(groups=g_sel, samples=s_sel, features=f_sel)
    assert array.touched == set()
    g, s, f = _all(g_sel, n_g), _all(s_sel, n_s), _all(f_sel, n_f)
    expected = values[np.ix_(g, s, f)]
    np.testing.assert_array_equal(sub.to_numpy("counts"), expected)
    assert array.touched == array.chunks_of(g, s, f)
    # a partial read of the selection reads only the chunks of that part
    if len(g) and len(s) and len(f):
        array.touched.clear()
        sp, fp = [len(s) - 1], [0]
        block = parts_of(sub).read("counts", 0, samples=sp, features=fp)
        np.testing.assert_array_equal(block, expected[0][np.ix_(sp, fp)])
        assert array.touched == array.chunks_of([g[0]], s[sp], f[fp])


@SETTINGS
@given(data=st.data(), case=chunked())
def test_select_of_select_composes(data: st.DataObject, case: Any) -> None:
    values, array = case
    cube = make_cube(array)
    first = [data.draw(selection(n)) for n in values.shape]
    sub = cube.select(groups=first[0], samples=first[1], features=first[2])
    second = [data.draw(selection(n)) for n in sub.shape]
    subsub = sub.select(groups=second[0], samples=second[1], features=second[2])
    idx = [
        _all(a, n)[_all(b, len(_all(a, n)))]
        for a, b, n in zip(first, second, values.shape, strict=True)
    ]
    np.testing.assert_array_equal(subsub.to_numpy("counts"), values[np.ix_(*idx)])


# --------------------------------------------------------------------------- sums


@SETTINGS
@given(data=st.data(), case=chunked())
def test_merge_groups_equals_numpy(data: st.DataObject, case: Any) -> None:
    values, array = case
    cube = make_cube(array)
    n_g = values.shape[0]
    labels = data.draw(st.lists(st.integers(0, 2), min_size=n_g, max_size=n_g))
    merges: dict[str, list[str]] = {}
    for i, label in enumerate(labels):
        merges.setdefault(f"m{label}", []).append(f"g{i}")
    merged = cube.merge_groups(merges)
    assert array.touched == set()
    order = list(dict.fromkeys(labels))
    expected = np.stack([values[np.array(labels) == k].sum(axis=0) for k in order])
    np.testing.assert_array_equal(merged.to_numpy("counts"), expected)
    np.testing.assert_array_equal(
        merged.cells,
        np.stack([np.sum(np.array(labels) == k) * np.ones(values.shape[1]) for k in order]),
    )
    # one merged group, some features: only the members' chunks of those features
    array.touched.clear()
    f = [values.shape[2] - 1]
    out = merged.select(groups=[0], features=f).to_numpy("counts")
    members = np.flatnonzero(np.array(labels) == order[0])
    np.testing.assert_array_equal(out[0], values[members][:, :, f].sum(axis=0))
    assert array.touched == array.chunks_of(members, range(values.shape[1]), f)


@SETTINGS
@given(data=st.data(), case=chunked())
def test_pool_samples_equals_numpy(data: st.DataObject, case: Any) -> None:
    values, array = case
    n_s = values.shape[1]
    labels = data.draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=n_s, max_size=n_s))
    cube = make_cube(array, samples={"donor": labels})
    pooled = cube.pool_samples(by="donor")
    assert array.touched == set()
    order = list(dict.fromkeys(labels))
    expected = np.stack([values[:, np.array(labels) == k].sum(axis=1) for k in order], axis=1)
    np.testing.assert_array_equal(pooled.to_numpy("counts"), expected)
    array.touched.clear()
    pick = data.draw(st.sampled_from(order))
    f = [0]
    out = pooled.select(samples=[pick], features=f).profiles(0)
    members = np.flatnonzero(np.array(labels) == pick)
    np.testing.assert_array_equal(out[0], values[0][members][:, f].sum(axis=0))
    assert array.touched == array.chunks_of([0], members, f)


@SETTINGS
@given(data=st.data(), case=chunked())
def test_concat_equals_numpy(data: st.DataObject, case: Any) -> None:
    values, array = case
    cube = make_cube(array)
    axis = data.draw(st.sampled_from(["groups", "samples", "features"]))
    index = ["groups", "samples", "features"].index(axis)
    n = values.shape[index]
    order = data.draw(st.permutations(range(n)))
    cut = data.draw(st.integers(0, n))
    parts = [cube.select(**{axis: list(order[:cut])}), cube.select(**{axis: list(order[cut:])})]
    other = [a for a in ["groups", "samples", "features"] if a != axis]
    shuffle = {
        a: data.draw(st.permutations(range(cube.shape[["groups", "samples", "features"].index(a)])))
        for a in other
    }
    parts[1] = parts[1].select(**{a: list(p) for a, p in shuffle.items()})
    joined = cytepool.concat(parts, axis=axis)  # type: ignore[arg-type]
    np.testing.assert_array_equal(joined.to_numpy("counts"), np.take(values, order, axis=index))
    sel = data.draw(selection(n))
    if sel is not None:
        picked = np.array(order)[_all(sel, n)]
        out = joined.select(**{axis: sel}).to_numpy("counts")
        np.testing.assert_array_equal(out, np.take(values, picked, axis=index))


@SETTINGS
@given(data=st.data(), case=chunked())
def test_add_equals_numpy(data: st.DataObject, case: Any) -> None:
    values, array = case
    second = values[:, ::-1].copy() * 3
    a = make_cube(array)
    b = make_cube(second)
    s = data.draw(st.permutations(range(values.shape[1])))
    b = b.select(samples=list(s))  # aligned by id again
    total = cytepool.add([a, b, a])
    assert array.touched == set()
    np.testing.assert_array_equal(total.to_numpy("counts"), values * 2 + second)
    np.testing.assert_array_equal(total.cells, np.full(values.shape[:2], 3))
    array.touched.clear()
    block = parts_of(total).read("counts", 0, samples=[0], features=[0])
    assert block[0, 0] == 2 * values[0, 0, 0] + second[0, 0, 0]
    assert array.touched == array.chunks_of([0], [0], [0])


@SETTINGS
@given(case=chunked("float64"), data=st.data())
def test_float_sums_equal_numpy(case: Any, data: st.DataObject) -> None:
    values, array = case
    cube = make_cube(array)
    merged = cube.merge_groups({"all": [f"g{i}" for i in range(values.shape[0])]})
    np.testing.assert_allclose(merged.profiles("all"), values.sum(axis=0))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_sums_do_not_depend_on_the_order_of_their_terms(dtype: str) -> None:
    # float64 sums 2**53 + 1 + 1 to 2**53 in that order, to 2**53 + 2 in the other
    big = 2.0**53
    values = np.array([[[big, 1.0]], [[1.0, big]], [[1.0, 1.0]]], dtype=dtype)
    cube = make_cube(values)
    forward = cube.merge_groups({"T": ["g0", "g1", "g2"]})
    backward = cube.merge_groups({"T": ["g2", "g1", "g0"]})
    np.testing.assert_array_equal(forward.profiles("T"), backward.profiles("T"))
    assert forward.fingerprint == backward.fingerprint
    ones = [cube.select(groups=[g]).merge_groups({"T": [f"g{g}"]}) for g in range(3)]
    orders = [[0, 1, 2], [2, 1, 0], [1, 0, 2], [1, 2, 0]]
    added = [cytepool.add([ones[i] for i in order]) for order in orders]
    assert len({a.fingerprint for a in added}) == 1
    # add sums each value's terms in ascending order: here the sum nearest the exact one
    expected = np.full((1, 2), big + 2).astype(dtype)
    np.testing.assert_array_equal(added[0].profiles("T"), expected)


# --------------------------------------------------------------------------- exact sums


@pytest.mark.parametrize(
    ("dtype", "a", "b"),
    [
        ("int32", 2**31 - 1, 1),
        ("uint32", 2**31, 2**31),
        ("int64", 2**62, 2**62),
        ("uint64", 2**63, 2**63),
        ("float32", 3e38, 3e38),
        ("float64", 1e308, 1e308),
    ],
)
def test_sums_that_do_not_fit_raise(dtype: str, a: float, b: float) -> None:
    values = np.zeros((2, 2, 2), dtype=dtype)
    values[0, 1, 1] = a
    values[1, 1, 1] = b
    cube = make_cube(values)
    merged = cube.merge_groups({"both": ["g0", "g1"]})  # lazy: no error yet
    pattern = rf"layer 'counts', group 'both': a sum does not fit the data type {dtype}"
    with pytest.raises(OverflowError, match=pattern) as caught:
        merged.profiles("both")
    advice = {  # a wider type only where there is one
        "int32": "a wider data type",
        "uint32": "a wider data type",
        "int64": "store the layer as uint64 (sums up to 2**64 - 1) or float64 first",
        "uint64": "no integer data type holds it: store the layer as float64",
        "float32": "store the layer as float64 first",
    }
    if dtype in advice:
        assert advice[dtype] in str(caught.value)
    else:
        assert str(caught.value).endswith(")")  # float64: no advice of a wider type
    with pytest.raises(OverflowError, match=pattern):
        merged.to_numpy("counts")
    np.testing.assert_array_equal(parts_of(merged).read("counts", 0, features=[0]), [[0], [0]])
    added = cytepool.add([cube, cube])
    with pytest.raises(OverflowError, match=r"layer 'counts', group 'g0'"):
        added.profiles("g0")
    pooled = make_cube(values.transpose(1, 0, 2).copy()).pool_samples(by="sample_id")
    assert pooled.shape == (2, 2, 2)
    swapped = make_cube(values.transpose(1, 0, 2).copy(), samples={"all": ["x", "x"]})
    with pytest.raises(OverflowError, match=r"layer 'counts', group 'g1'"):
        swapped.pool_samples(by="all").profiles("g1")


@pytest.mark.parametrize(
    ("dtype", "a", "b"),
    [
        ("int32", 2**31 - 2, 1),
        ("uint32", 2**32 - 2, 1),
        ("int64", 2**63 - 2, 1),
        ("uint64", 2**64 - 2, 1),
        ("int64", 2**53 + 1, 2**53),  # not exact in float64
    ],
)
def test_integer_sums_are_exact_up_to_the_limit(dtype: str, a: int, b: int) -> None:
    values = np.zeros((2, 1, 1), dtype=dtype)
    values[0, 0, 0] = a
    values[1, 0, 0] = b
    merged = make_cube(values).merge_groups({"both": ["g0", "g1"]})
    out = merged.profiles("both")
    assert out.dtype == np.dtype(dtype)
    assert int(out[0, 0]) == a + b


@settings(max_examples=30, deadline=None)
@given(
    dtype=st.sampled_from(["int32", "uint32", "int64", "uint64"]),
    data=st.data(),
)
def test_integer_sums_exact_or_overflow(dtype: str, data: st.DataObject) -> None:
    """Near the limit, a sum is exactly the Python-int sum, or OverflowError; never a wrap."""
    top = int(np.iinfo(dtype).max)
    n = data.draw(st.integers(2, 4))
    items = data.draw(st.lists(st.integers(top // 4, top), min_size=n, max_size=n))
    values = np.array(items, dtype=dtype).reshape(n, 1, 1)
    merged = make_cube(values).merge_groups({"all": [f"g{i}" for i in range(n)]})
    added = cytepool.add([make_cube(values[i : i + 1]) for i in range(n)])
    for cube, group in ((merged, "all"), (added, "g0")):
        if sum(items) > top:
            with pytest.raises(OverflowError, match=f"group '{group}'"):
                cube.profiles(group)
        else:
            assert int(cube.profiles(group)[0, 0]) == sum(items)


def test_cells_sums_overflow() -> None:
    values = np.zeros((2, 1, 1), dtype="int64")
    cube = make_cube(values, cells=np.full((2, 1), 2**62 + 2**61))
    with pytest.raises(OverflowError, match=r"cells, group 'both'"):
        cube.merge_groups({"both": ["g0", "g1"]})
    with pytest.raises(OverflowError, match="cells"):
        cytepool.add([cube, cube])


@pytest.mark.parametrize("reader", ["cytepool", "zarr-python"])
def test_a_value_error_names_the_file_of_a_cytepool_array_only(tmp_path: Path, reader: str) -> None:
    """The path of cytepool's ZarrArray is its directory, the file to blame; zarr-python's
    ``path`` is a key in its store (``counts``), which is no path: not named."""
    import zarr

    from cytepool.io.zarr import open_array, write_array

    values = np.ones((2, 2, 2), dtype="int32")
    values[1, 0, 1] = -3
    write_array(tmp_path / "counts", values, chunks=(1, 2, 2))
    array = (
        open_array(tmp_path / "counts")
        if reader == "cytepool"
        else zarr.open_array(tmp_path / "counts", mode="r")
    )
    with pytest.raises(ConstraintError, match="value -3") as caught:
        make_cube(array).profiles("g1")
    named = f"(read from {tmp_path / 'counts'})"
    assert str(caught.value).endswith(named) == (reader == "cytepool")
    assert ("read from" in str(caught.value)) == (reader == "cytepool")


def test_lazy_sums_check_values_of_their_inputs() -> None:
    values = np.ones((2, 2, 2), dtype="int32")
    values[1, 0, 1] = -3
    cube = make_cube(ChunkedArray(values, (1, 1, 1)))
    merged = cube.merge_groups({"both": ["g0", "g1"]})
    with pytest.raises(ConstraintError, match="layer 'counts', group 'g1', sample 's0': value -3"):
        merged.profiles("both")
    floats = np.ones((2, 2, 2))
    floats[0, 1, 0] = np.nan
    pooled = make_cube(ChunkedArray(floats, (1, 1, 1)), samples={"d": ["x", "x"]})
    with pytest.raises(ConstraintError, match=r"group 'g0', sample 's1': value nan .* not finite"):
        pooled.pool_samples(by="d").profiles("g0")


SUMS_OF_A_CUBE = {
    "profiles": lambda c: c.profiles("g0"),
    "to_numpy": lambda c: c.to_numpy(),
    "merge_groups": lambda c: c.merge_groups({"both": ["g0", "g1"]}).profiles("both"),
    "pool_samples": lambda c: c.pool_samples(by="d").profiles("g0"),
    "select": lambda c: c.select(samples=["s1"]).profiles("g0"),
}


@pytest.mark.parametrize("call", list(SUMS_OF_A_CUBE))
def test_a_lazy_layer_given_to_a_cube_is_checked_against_its_cells(call: str) -> None:
    """Another cube's lazy layer holds values checked against that cube's cells, or none: a
    cube given it checks every read, its sums too (merge_groups and pool_samples read it)."""
    base = make_cube(np.full((2, 2, 1), 7), samples={"d": ["x", "x"]})
    cells = np.array([[1, 0], [1, 1]])  # g0 in s1 pools no cell, but holds 7
    cube = make_cube(base.select().layers["counts"], samples={"d": ["x", "x"]}, cells=cells)
    with pytest.raises(ConstraintError, match="group 'g0', sample 's1': the profile pools 0 cells"):
        SUMS_OF_A_CUBE[call](cube)
    values = np.full((2, 2, 1), 7)
    values[0, 1] = 0
    stat = make_cube(values, cells=cells).mean()  # NaN where no cell is pooled
    cube = make_cube(stat, samples={"d": ["x", "x"]})
    with pytest.raises(ConstraintError, match=r"group 'g0', sample 's1': value nan .* not finite"):
        SUMS_OF_A_CUBE[call](cube)


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_a_whole_read_checks_every_band_it_hashes(tmp_path: Path, dtype: str) -> None:
    from cytepool.io.zarr import open_array, write_array

    values = np.ones((2, 40, 8192), dtype=dtype)  # a group: 2 bands of about 1 MiB (int32)
    bad, message = (-3, "value -3") if dtype == "int32" else (np.inf, "value inf .* not finite")
    values[1, 37, 8000] = bad
    write_array(tmp_path / "a", values, chunks=(1, 40, 2048))
    layer = ArrayLayer(open_array(tmp_path / "a"), name="counts", group_ids=["g0", "g1"])
    out = np.empty(values.shape, dtype=dtype)
    with pytest.raises(ConstraintError, match=f"layer 'counts', group 'g1', sample #37: {message}"):
        layer.read_all(out)
    values[1, 37, 8000] = 1
    write_array(tmp_path / "b", values, chunks=(1, 40, 2048))
    digests = ArrayLayer(open_array(tmp_path / "b"), name="counts").read_all(out)
    assert digests == [group_digest(dtype, block) for block in values]
    np.testing.assert_array_equal(out, values)


# --------------------------------------------------------------------------- indexing


def test_lazy_layer_indexing() -> None:
    values = np.arange(60).reshape(3, 4, 5)
    layer = ArrayLayer(values, name="x")
    lazy = SelectLayer(layer)
    assert lazy.ndim == 3
    assert len(lazy) == 3
    assert repr(lazy) == "<SelectLayer 'x' 3 x 4 x 5 int64>"
    np.testing.assert_array_equal(np.asarray(lazy), values)
    np.testing.assert_array_equal(np.asarray(lazy, dtype="float64"), values.astype(float))
    for key in [
        0,
        -1,
        (1, 2),
        (1, 2, 3),
        (slice(None), 1),
        (..., 2),
        (0, ..., slice(1, 3)),
        slice(1, None, -1),
    ]:
        np.testing.assert_array_equal(lazy[key], values[key])
    np.testing.assert_array_equal(lazy.oindex[[2, 0], :, [4, 1]], values[[2, 0]][:, :, [4, 1]])
    mask = np.array([True, False, True, False])
    np.testing.assert_array_equal(lazy.oindex[1, mask, 0], values[1, mask, 0])
    with pytest.raises(IndexError, match=r"use \.oindex"):
        lazy[[0, 1]]
    with pytest.raises(IndexError, match="too many indices"):
        lazy[0, 0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        lazy[..., ...]
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        lazy[3]
    with pytest.raises(IndexError, match="a boolean mask needs 4 values"):
        lazy.oindex[0, [True], 0]
    with pytest.raises(IndexError, match="expected integer positions"):
        lazy.oindex[0, [0.5], 0]
    with pytest.raises(IndexError, match="expected a 1-D selection"):
        lazy.oindex[0, [[0]], 0]


def test_positions() -> None:
    assert positions(None, 3, what="x") is None
    np.testing.assert_array_equal(positions(-1, 3, what="x"), [2])
    np.testing.assert_array_equal(positions([], 3, what="x"), [])
    with pytest.raises(IndexError, match="x: position -4 is out of range for length 3"):
        positions([-4], 3, what="x")


def test_lazy_layers_from_cubes_are_arrays() -> None:
    values = np.arange(24, dtype="int32").reshape(2, 3, 4)
    lazy = make_cube(values).select(features=[3, 1]).layers["counts"]
    assert lazy.shape == (2, 3, 2)
    assert lazy.dtype == np.dtype("int32")
    np.testing.assert_array_equal(lazy[1:], values[1:][:, :, [3, 1]])


# --------------------------------------------------------------------------- real zarr arrays


def test_zarr_layers_read_only_needed_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cytepool.io.zarr import open_array, write_array
    from cytepool.io.zarr.store import LocalHandle

    values = np.random.default_rng(3).integers(1, 100, (3, 6, 8)).astype("int32")
    write_array(tmp_path / "counts", values, chunks=(1, 2, 3))
    opened: list[str] = []
    original = LocalHandle.get

    def counting(handle: LocalHandle, key: str, *, limit: int) -> Any:
        if key != "zarr.json":
            opened.append(key)
        return original(handle, key, limit=limit)

    monkeypatch.setattr(LocalHandle, "get", counting)
    cube = make_cube(open_array(tmp_path / "counts"), samples={"donor": list("aabbcc")})
    sub = cube.select(groups=["g2"], samples=["s4", "s1"], features=["f7", "f0"])
    pooled = cube.pool_samples(by="donor").select(samples=["b"], features=["f4"])
    assert opened == []
    np.testing.assert_array_equal(sub.profiles("g2"), values[2][np.ix_([4, 1], [7, 0])])
    assert sorted(opened) == ["c/2/0/0", "c/2/0/2", "c/2/2/0", "c/2/2/2"]
    opened.clear()
    np.testing.assert_array_equal(
        pooled.profiles("g1"), values[1][[2, 3]][:, [4]].sum(0, keepdims=True)
    )
    assert opened == ["c/1/1/1"]


def test_a_selection_of_a_cube_file_checks_each_block_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored layer checks what it reads against the file's cell numbers; the selection
    holds a selection of those, so its cube does not check the block again."""
    import cytepool._parts
    import cytepool.layers
    from cytepool.io import read_cube, write_cube

    values = np.arange(3 * 4 * 6, dtype=np.int32).reshape(3, 4, 6)
    write_cube(make_cube(values), tmp_path / "c.cube.zarr")
    checked: list[str] = []
    check = cytepool.layers.check_block

    def counted(block: Any, **names: Any) -> None:
        checked.append(names["group"])
        check(block, **names)

    monkeypatch.setattr(cytepool.layers, "check_block", counted)
    monkeypatch.setattr(cytepool._parts, "check_block", counted)
    selected = read_cube(tmp_path / "c.cube.zarr").select(
        groups=["g2", "g1"], features=["f4", "f1"]
    )
    np.testing.assert_array_equal(selected.profiles("g1"), values[1][:, [4, 1]])
    assert checked == ["g1"]
    twice = selected.select(samples=["s3", "s0"])
    np.testing.assert_array_equal(twice.profiles("g2"), values[2][[3, 0]][:, [4, 1]])
    assert checked == ["g1", "g2"]


def test_a_bad_value_in_a_selection_of_a_cube_file_is_still_refused(tmp_path: Path) -> None:
    """A selection's block is checked once, by the stored layer: a value edited into the file
    is refused, named by the ids of the selection's group, sample and feature."""
    import zarr

    from cytepool.io import read_cube, write_cube

    values = np.arange(3 * 4 * 6, dtype=np.int32).reshape(3, 4, 6)
    write_cube(make_cube(values), tmp_path / "c.cube.zarr")
    zarr.open_array(tmp_path / "c.cube.zarr" / "layers" / "counts", mode="r+")[1, 2, 4] = -5
    selected = read_cube(tmp_path / "c.cube.zarr").select(groups=["g1"], features=["f4", "f1"])
    with pytest.raises(ConstraintError, match="group 'g1', sample 's2': value -5 at feature 'f4'"):
        selected.profiles("g1")


def test_profiles_of_an_in_memory_cube_is_a_new_array() -> None:
    """profiles gave a read-only view of the layer (the docstring says a new array) for a
    group read whole from an in-memory cube, also through select and a one-group merge."""
    values = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    cube = make_cube(values)
    reads = [
        cube.profiles("g1"),
        cube.select(groups=["g1"]).profiles("g1"),
        cube.merge_groups({"m": ["g1"]}).profiles("m"),
    ]
    for got in reads:
        assert got.flags.writeable
        assert not np.shares_memory(got, cube.to_numpy())
        got[...] = -1
    np.testing.assert_array_equal(cube.to_numpy(), values)
