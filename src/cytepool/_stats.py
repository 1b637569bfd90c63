"""Statistics per profile recovered from a cube's sums: mean, variance, fraction detected.

Each is a :class:`Statistic`: a lazy, read-only float64 layer of the cube's shape that reads
the layers it needs one group at a time (only the selected samples and features), and is NaN
wherever the statistic is undefined (a profile of 0 cells; for a variance, ``cells <= ddof``).
A statistic is not a cube layer: it is not a sum, so it does not add up when samples are
pooled or groups merged. Pool or merge the cube first, then take the statistic; since the
layers it comes from are sums, the result equals the statistic computed on the pooled cells.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cytepool._parts import CubeParts
from cytepool.errors import ConstraintError, InputError, InputTypeError, UnknownIdError
from cytepool.layers import Index, LazyLayer

__all__ = ["Statistic", "fraction_detected", "mean", "variance"]

Formula = Callable[..., np.ndarray[Any, np.dtype[np.float64]]]
Locate = Callable[[int, int], str]

_EPS = float(np.finfo(np.float64).eps)
_EXACT = 2**63 - 1  # integer numerators up to this are computed exactly in int64


class Statistic(LazyLayer):
    """A statistic per profile: a lazy float64 layer ``(n_groups, n_samples, n_features)``.

    Made by :meth:`cytepool.Cube.mean`, :meth:`cytepool.Cube.variance` and
    :meth:`cytepool.Cube.fraction_detected`. It reads the layers it needs when indexed
    (``statistic[g]``, ``statistic.oindex[...]``, ``numpy.asarray(statistic)``), one group
    at a time; :meth:`profiles` reads one group by id or position.
    """

    dtype = np.dtype(np.float64)

    def __init__(self, parts: CubeParts, name: str, layers: Sequence[str], formula: Formula):
        self.parts = parts
        self.name = name
        self.needs = tuple(layers)
        self.formula = formula
        self.shape = parts.shape
        self.group_ids = parts.tables["groups"].ids

    def read(
        self, group: int, samples: Index | None = None, features: Index | None = None
    ) -> np.ndarray[Any, np.dtype[np.float64]]:
        """Read one group's block ``(len(samples), len(features))``; None selects all."""
        row = self.parts.cells[group]
        cells = row if samples is None else row[samples]
        blocks = [self.parts.read(name, group, samples, features) for name in self.needs]
        return self.formula(cells, *blocks, where=self._locator(group, samples, features))

    def _locator(self, group: int, samples: Index | None, features: Index | None) -> Locate:
        """Names the group, sample and feature of a position ``(i, j)`` of a block."""
        tables = self.parts.tables

        def locate(i: int, j: int) -> str:
            s = i if samples is None else int(samples[i])
            f = j if features is None else int(features[j])
            return (
                f"group {tables['groups'].ids[group]!r}, sample {tables['samples'].ids[s]!r}, "
                f"feature {tables['features'].ids[f]!r}"
            )

        return locate

    def profiles(self, group: str | int) -> np.ndarray[Any, np.dtype[np.float64]]:
        """One group's values, by id or position: an array ``(n_samples, n_features)``."""
        return self.read(self.parts.group_position(group))


def _needed(parts: CubeParts, name: str, what: str, hint: str) -> str:
    """``name`` if the cube has that layer, else UnknownIdError saying what needs it."""
    if name not in parts.layers:
        msg = f"{what} needs the layer {name!r}, but the cube has layers {list(parts.layers)}"
        msg += f"; {hint}"
        raise UnknownIdError(msg, unknown=name, known=parts.layers)
    return name


def _per_cell(cells: np.ndarray[Any, Any], sums: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``sums / cells`` per profile row in float64, NaN in rows of 0 cells."""
    n = np.asarray(cells, dtype=np.float64)[:, None]
    out = np.full(sums.shape, np.nan)
    np.divide(sums, n, out=out, where=n > 0, casting="unsafe")
    return out


def mean(parts: CubeParts, layer: str) -> Statistic:
    """The statistic of ``Cube.mean``: ``layer / cells``."""
    name = _needed(parts, layer, "mean", "name one of them")

    def formula(cells: Any, sums: Any, *, where: Locate) -> np.ndarray[Any, Any]:
        return _per_cell(cells, sums)

    return Statistic(parts, f"mean of {name}", (name,), formula)


def fraction_detected(parts: CubeParts) -> Statistic:
    """The statistic of ``Cube.fraction_detected``: ``detected / cells``."""
    hint = "pool with layers=(..., 'detected') to count the cells in which a feature is > 0"
    name = _needed(parts, "detected", "fraction_detected", hint)

    def formula(cells: Any, detected: Any, *, where: Locate) -> np.ndarray[Any, Any]:
        return _per_cell(cells, detected)

    return Statistic(parts, "fraction detected", (name,), formula)


def variance(parts: CubeParts, layer: str, ddof: Any, squares: str | None) -> Statistic:
    """The statistic of ``Cube.variance``: from ``layer``, its squares and the cells."""
    ddof = _check_ddof(ddof)
    if squares is None:
        if layer != "counts":
            msg = (
                f"variance: name the layer holding the sums of squares of {layer!r} with "
                "squares=...; only 'counts' pairs with 'squares' by default"
            )
            raise InputError(msg)
        squares = "squares"
    name = _needed(parts, layer, "variance", "name one of them")
    hint = "pool with layers=(..., 'squares') to keep the sum of x² of every profile"
    squares = _needed(parts, squares, "variance", hint)

    def formula(cells: Any, sums: Any, sq: Any, *, where: Locate) -> np.ndarray[Any, Any]:
        return _variance(cells, sums, sq, ddof, where)

    return Statistic(parts, f"variance of {name}", (name, squares), formula)


def _check_ddof(ddof: Any) -> int:
    if not isinstance(ddof, numbers.Integral) or isinstance(ddof, bool | np.bool_):
        msg = f"variance: ddof must be an integer >= 0, found {ddof!r}"
        raise InputTypeError(msg)
    if ddof < 0:
        msg = f"variance: ddof must be >= 0, found {ddof}"
        raise InputError(msg)
    return int(ddof)


def _variance(
    cells: np.ndarray[Any, Any], sums: np.ndarray[Any, Any], squares: Any, ddof: int, where: Locate
) -> np.ndarray[Any, Any]:
    """``(n Σx² − (Σx)²) / (n (n − ddof))`` per value; NaN where ``n <= ddof``.

    Integer sums give the numerator exactly (in int64, when it fits); otherwise it is
    ``Σx² − Σx (Σx / n)`` in float64, where rounding may leave a tiny negative value, set to 0.
    """
    n = np.asarray(cells, dtype=np.int64)[:, None]
    defined = np.broadcast_to(n > ddof, sums.shape)
    out = np.full(sums.shape, np.nan)
    if not defined.any():
        return out
    numerator, scale = _numerator(n, sums, squares, where)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = numerator / (scale * (n - ddof))
    out[defined] = values[defined]
    return out


def _numerator(
    n: np.ndarray[Any, Any], sums: np.ndarray[Any, Any], squares: Any, where: Locate
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The numerator over a scale: ``(n Σx² − (Σx)², n)`` exactly, or ``(Σx² − Σx·mean, 1)``."""
    if _exact(n, sums, squares):
        num = n * squares.astype(np.int64) - sums.astype(np.int64) ** 2
        _check_consistent(num < 0, num, where)
        return num.astype(np.float64), np.maximum(n, 1).astype(np.float64)
    s = sums.astype(np.float64)
    q = np.asarray(squares, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_sq = s * (s / n)
    num = q - mean_sq
    # rounding leaves at most a few ulps of q and (Σx)²/n; more is not rounding
    bad = num < -8 * _EPS * (q + np.nan_to_num(mean_sq))
    _check_consistent(bad & (n > 0), num, where)
    return np.maximum(num, 0.0), np.ones_like(n, dtype=np.float64)


def _exact(n: np.ndarray[Any, Any], sums: np.ndarray[Any, Any], squares: Any) -> bool:
    """Whether ``n Σx² − (Σx)²`` fits int64 for integer layers (checked in Python integers)."""
    if sums.dtype.kind not in "iu" or squares.dtype.kind not in "iu" or sums.size == 0:
        return sums.size == 0
    top_s, top_q, top_n = int(sums.max()), int(squares.max()), int(n.max())
    return top_s * top_s <= _EXACT and top_n * top_q <= _EXACT


def _check_consistent(bad: np.ndarray[Any, Any], numerator: Any, where: Locate) -> None:
    if bad.any():
        i, j = (int(k) for k in np.argwhere(bad)[0])
        msg = (
            f"variance, {where(i, j)}: the sum of squares is smaller than the square of the sum "
            f"allows (n·Σx² − (Σx)² = {numerator[i, j]}, expected >= 0); the squares layer does "
            "not hold the sums of x² over the same cells as the sums"
        )
        raise ConstraintError(msg)
