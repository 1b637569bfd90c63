"""The exception hierarchy: every deliberate raise is a CytepoolError and keeps its builtin."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import cytepool
from cytepool import errors
from cytepool.errors import CytepoolError, InputError, InputTypeError, UnknownIdError

SRC = Path(cytepool.__file__).parent
# builtins that cytepool refines; the OSError family and ImportError stay builtin (errors.py)
BARE = {"ValueError", "TypeError", "KeyError", "IndexError", "RuntimeError", "OverflowError"}


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        pytest.param(InputError, ValueError, id="InputError"),
        pytest.param(InputTypeError, TypeError, id="InputTypeError"),
        pytest.param(errors.InputIndexError, IndexError, id="InputIndexError"),
        pytest.param(errors.SumOverflowError, OverflowError, id="SumOverflowError"),
        pytest.param(UnknownIdError, KeyError, id="UnknownIdError"),
        pytest.param(errors.FormatError, ValueError, id="FormatError"),
        pytest.param(errors.UnsupportedFeatureError, ValueError, id="UnsupportedFeatureError"),
        pytest.param(errors.StoredTypeError, TypeError, id="StoredTypeError"),
        pytest.param(errors.StoreChangedError, RuntimeError, id="StoreChangedError"),
        pytest.param(errors.ConstraintError, ValueError, id="ConstraintError"),
    ],
)
def test_every_error_is_a_cytepool_error_and_its_builtin(cls: type, builtin: type) -> None:
    assert issubclass(cls, CytepoolError)
    assert issubclass(cls, builtin)


def _bare_raises(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        value = node.exc if isinstance(node, ast.Raise) else None
        value = node.value if isinstance(node, ast.Return) else value
        name = (
            value.func.id
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            else ""
        )
        if name in BARE:
            found.append(f"{path.relative_to(SRC)}:{node.lineno} {name}")
    return found


def test_no_deliberate_raise_of_a_bare_builtin() -> None:
    found = [hit for path in sorted(SRC.rglob("*.py")) for hit in _bare_raises(path)]
    assert found == []


def test_unknown_id_error_prints_without_quotes_and_hints() -> None:
    error = UnknownIdError("no layer 'count'", unknown="count", known=["counts", "umis"])
    assert str(error) == "no layer 'count'; did you mean 'counts'?"
    assert error.args == ("no layer 'count'; did you mean 'counts'?",)


def test_unknown_id_error_without_a_close_name_has_no_hint() -> None:
    assert str(UnknownIdError("no layer 'x'", unknown="x", known=["counts"])) == "no layer 'x'"


def test_unknown_id_error_survives_pickling_unchanged() -> None:
    error = UnknownIdError("no group 'Tcell'", unknown="Tcell", known=["T cell", "B cell"])
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is UnknownIdError
    assert str(again) == str(error)


def _cube() -> cytepool.Cube:
    return cytepool.Cube(
        {"counts": np.zeros((1, 1, 2), dtype=np.int64)},
        samples=pd.DataFrame({"sample_id": ["s1"]}),
        groups=pd.DataFrame({"group_id": ["T cell"]}),
        features=pd.DataFrame({"feature_id": ["CD3E", "CD19"]}),
        cells=[[1]],
    )


def test_an_unknown_layer_is_a_readable_key_error_with_a_hint() -> None:
    with pytest.raises(KeyError) as info:
        _cube().profiles("T cell", layer="count")
    assert (
        str(info.value)
        == "no layer 'count'; the cube has layers ['counts']; did you mean 'counts'?"
    )


def test_an_unknown_id_hints_at_the_closest() -> None:
    with pytest.raises(UnknownIdError, match=r"unknown ids \['CD3'\]; did you mean 'CD3E'\?"):
        _cube().select(features=["CD3"])


@pytest.mark.parametrize(
    ("call", "cls"),
    [
        pytest.param(lambda c: c.select(samples=["s1", "s1"]), InputError, id="repeated-id"),
        pytest.param(lambda c: c.profiles(1.5), InputTypeError, id="bad-group-type"),
        pytest.param(lambda c: c.pool_samples(by="donor"), UnknownIdError, id="unknown-column"),
    ],
)
def test_bad_arguments_are_caught_as_cytepool_errors(call, cls: type) -> None:
    with pytest.raises(cls):
        call(_cube())
    with pytest.raises(CytepoolError):
        call(_cube())
