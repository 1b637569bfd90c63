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
from fractions import Fraction
from typing import Any

import numpy as np

from cytepool import _exact
from cytepool._parts import CubeParts
from cytepool.errors import ConstraintError, InputError, InputTypeError, UnknownIdError
from cytepool.layers import Index, LazyLayer

__all__ = ["Statistic", "fraction_detected", "mean", "variance"]

Formula = Callable[..., np.ndarray[Any, np.dtype[np.float64]]]
Locate = Callable[[int, int], str]

_EPS = float(np.finfo(np.float64).eps)


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
    """``name`` if the cube has that layer, else UnknownIdError saying what needs it
    (InputTypeError if it is no name)."""
    if not isinstance(name, str):
        msg = f"{what}: expected a layer's name (a string), found {name!r}; {hint}"
        raise InputTypeError(msg)
    if name not in parts.layers:
        msg = f"{what} needs the layer {name!r}, but the cube has layers {list(parts.layers)}"
        msg += f"; {hint}"
        raise UnknownIdError(msg, unknown=name, known=parts.layers)
    return name


def _per_cell(cells: np.ndarray[Any, Any], sums: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``sums / cells`` per profile row in float64, NaN in rows of 0 cells.

    Each value is the quotient rounded once to float64, for integer sums and cells of any
    size too: one float64 division is that only while both terms are exact in float64 (up
    to 2**53); the rare values past it are corrected (:func:`_exact_per_cell`).
    """
    n = np.asarray(cells, dtype=np.int64)[:, None]
    out = np.full(sums.shape, np.nan)
    np.divide(sums, n, out=out, where=n > 0, casting="unsafe")
    if not sums.size:
        return out
    big_sums = sums.dtype.kind in "iu" and int(sums.max()) > _exact.FLOAT_EXACT
    if big_sums or int(n.max()) > _exact.FLOAT_EXACT:
        _exact_per_cell(out, n, sums)
    return out


def _exact_per_cell(out: np.ndarray[Any, Any], n: np.ndarray[Any, Any], sums: Any) -> None:
    """Set the values of ``out`` whose sum or cells are past 2**53 to ``sums / n`` rounded
    once: a corrected int64 quotient, else a quotient of Python integers (or fractions)."""
    rows = np.broadcast_to(n, sums.shape)
    many = rows > _exact.FLOAT_EXACT
    if sums.dtype.kind == "f":
        wide = np.nonzero(many & (sums != 0))
        pairs = zip(sums[wide].tolist(), rows[wide].tolist(), strict=True)
        out[wide] = [float(Fraction(x) / r) for x, r in pairs]
        return
    big = (rows > 0) & (sums > _exact.FLOAT_EXACT)
    fine = np.nonzero(big & (sums <= _exact.INT64_MAX) & ~many)
    out[fine] = _exact.quotient(sums[fine].astype(np.int64), rows[fine])
    wide = np.nonzero((big & (sums > _exact.INT64_MAX)) | (many & (sums != 0)))
    out[wide] = (sums[wide].astype(object) / rows[wide].astype(object)).astype(np.float64)


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
    # no profile has more cells than int64 holds: a larger ddof leaves every value
    # undefined (NaN), as the largest int64 does, for every layer type
    return min(int(ddof), _exact.INT64_MAX)


def _variance(
    cells: np.ndarray[Any, Any], sums: np.ndarray[Any, Any], squares: Any, ddof: int, where: Locate
) -> np.ndarray[Any, Any]:
    """``(n Σx² − (Σx)²) / (n (n − ddof))`` per value; NaN where ``n <= ddof``.

    Integer layers give every value exactly, rounded once to float64 (:func:`_exact_variance`);
    float layers give ``Σx² − Σx (Σx / n)`` in float64, where rounding may leave a tiny
    negative value, set to 0. Each value is decided on its own, never by what is read with it.
    """
    n = np.asarray(cells, dtype=np.int64)[:, None]
    defined = np.broadcast_to(n > ddof, sums.shape)
    squares = np.asarray(squares)
    if sums.dtype.kind in "iu" and squares.dtype.kind in "iu":
        return _exact_variance(n, sums, squares, ddof, where)
    out = np.full(sums.shape, np.nan)
    if defined.any():
        numerator = _float_numerator(n, sums, squares, where)
        with np.errstate(divide="ignore", invalid="ignore"):
            values = numerator / (n - ddof).astype(np.float64)
        out[defined] = values[defined]
    return out


def _float_numerator(
    n: np.ndarray[Any, Any], sums: np.ndarray[Any, Any], squares: Any, where: Locate
) -> np.ndarray[Any, Any]:
    """``Σx² − Σx·(Σx / n)`` in float64, clamped at 0 (``n·Σx² − (Σx)²`` over ``n``).

    Where ``(Σx)²/n`` overflows float64 (then ``Σx / n > 1``), both terms are first divided
    by ``Σx / n``: ``(Σx² / (Σx/n) − Σx) · (Σx/n)``, so that the check against rounding
    still sees squares too small for the sums.
    """
    s = sums.astype(np.float64)
    q = np.asarray(squares, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        per_cell = s / n
        mean_sq = s * per_cell
    big = np.isinf(mean_sq) & (n > 0)
    scale = np.where(big, per_cell, 1.0) if big.any() else None
    if scale is not None:
        q, mean_sq = q / scale, np.where(big, s, mean_sq)
    mean_sq = np.nan_to_num(mean_sq)  # NaN and inf are left only where n = 0
    num = q - mean_sq
    tolerance = _rounding(n, sums.dtype, np.asarray(squares).dtype)
    bad = num < -tolerance * q - tolerance * mean_sq  # no sum that may overflow
    if scale is not None:
        with np.errstate(over="ignore"):
            num = num * scale
    _check_consistent(bad & (n > 0), num, where, "Σx² − (Σx)²/n")
    return np.maximum(num, 0.0)


def _rounding(n: np.ndarray[Any, Any], *dtypes: Any) -> np.ndarray[Any, Any]:
    """How far, relative to ``Σx² + (Σx)²/n``, rounding may take ``Σx² − (Σx)²/n`` below 0
    when the sums were added up from ``n`` values (``x >= 0``) in the layers' types.

    A sum of n values rounded at each addition is off by at most ``(n − 1) u`` times the sum
    of their sizes (u: half the machine epsilon of the type), whatever the order (Higham,
    *Accuracy and Stability of Numerical Algorithms*, §4.2); ``(Σx)²/n`` doubles that, and
    the float64 steps here add a few u. So ``(n + 4) ε`` of the widest-spaced type bounds it;
    a shortfall beyond is no rounding: the squares are not those of the same cells.
    """
    eps = max([_EPS] + [float(np.finfo(dtype).eps) for dtype in dtypes if dtype.kind == "f"])
    return (np.asarray(n, dtype=np.float64) + 4) * eps


def _exact_variance(
    n: np.ndarray[Any, Any],
    sums: np.ndarray[Any, Any],
    squares: np.ndarray[Any, Any],
    ddof: int,
    where: Locate,
) -> np.ndarray[Any, Any]:
    """The variance of integer layers, each value exact and rounded once to float64.

    Vectorised in int64 where ``n Σx² − (Σx)²`` is below 2**62 and ``n (n − ddof)`` at most
    2**53 (see :mod:`cytepool._exact`); the other values in Python integers. Which way a
    value goes depends on its own ``n``, ``Σx`` and ``Σx²`` only, and both give the same.
    """
    numerator, known = _exact.numerator(n, sums, squares)
    if numerator.size and numerator.min() < 0:
        _check_consistent(known & (numerator < 0), numerator, where)
    scale = np.where((n <= _exact.SQRT_FLOAT_EXACT) & (n > ddof), n * (n - ddof), 0)
    quick = known & (numerator <= _exact.FLOAT_EXACT) & (scale > 0)
    out = np.full(sums.shape, np.nan)
    np.divide(numerator, scale, out=out, where=quick, casting="unsafe")
    one_division = not numerator.size or numerator.max() <= _exact.FLOAT_EXACT
    if known is np.True_ and one_division and ((scale > 0) | (n <= ddof)).all():
        return out  # every defined value was one division: the usual case
    return _rest_of_variance(out, n, sums, squares, ddof, (numerator, known, scale), where)


def _rest_of_variance(
    out: np.ndarray[Any, Any],
    n: np.ndarray[Any, Any],
    sums: np.ndarray[Any, Any],
    squares: np.ndarray[Any, Any],
    ddof: int,
    terms: tuple[np.ndarray[Any, Any], Any, np.ndarray[Any, Any]],
    where: Locate,
) -> np.ndarray[Any, Any]:
    """Fill in the values past one float64 division: numerators past 2**53 (a corrected
    quotient) and values past int64 or with ``n (n − ddof)`` past 2**53 (Python integers)."""
    numerator, known, scale = terms
    shape = sums.shape
    big = np.nonzero(np.broadcast_to(known & (numerator > _exact.FLOAT_EXACT) & (scale > 0), shape))
    out[big] = _exact.quotient(numerator[big], np.broadcast_to(scale, shape)[big])
    wide = np.nonzero(np.broadcast_to(~known & (n > 0) | known & (scale == 0) & (n > ddof), shape))
    if wide[0].size:
        rows = np.broadcast_to(n, shape)[wide]
        out[wide] = _wide_variance(rows, sums[wide], squares[wide], ddof, wide, where)
    return out


def _wide_variance(
    n: np.ndarray[Any, Any],
    sums: np.ndarray[Any, Any],
    squares: np.ndarray[Any, Any],
    ddof: int,
    at: tuple[np.ndarray[Any, Any], ...],
    where: Locate,
) -> np.ndarray[Any, Any]:
    """The variance of some values (1-d) in Python integers; NaN where ``n <= ddof``."""
    numerator = _exact.wide_numerator(n, sums, squares)
    bad = np.flatnonzero(np.asarray(numerator < 0, dtype=bool))
    if bad.size:
        k = int(bad[0])
        _inconsistent(where(int(at[0][k]), int(at[1][k])), numerator[k])
    defined = n > ddof
    rows = n[defined].astype(object)
    out = np.full(n.shape, np.nan)
    out[defined] = (numerator[defined] / (rows * (rows - ddof))).astype(np.float64)
    return out


def _check_consistent(
    bad: np.ndarray[Any, Any], numerator: Any, where: Locate, what: str = "n·Σx² − (Σx)²"
) -> None:
    """ConstraintError at the first position of ``bad``, naming it and its numerator
    (``what``)."""
    if bad.any():
        i, j = (int(k) for k in np.argwhere(bad)[0])
        _inconsistent(where(i, j), numerator[i, j], what)


def _inconsistent(place: str, numerator: Any, what: str = "n·Σx² − (Σx)²") -> None:
    msg = (
        f"variance, {place}: the sum of squares is smaller than the square of the sum "
        f"allows ({what} = {numerator}, expected >= 0); the squares layer does "
        "not hold the sums of x² over the same cells as the sums"
    )
    raise ConstraintError(msg)
