"""Exact statistics of integer sums, each rounded once to float64, at any size.

A quotient of integers is rounded once (to the nearest float64, ties to even) whatever the
size of its terms, so a statistic of integer layers is the exact value of its formula and
does not depend on what is computed with it. The work is vectorised in int64 for the values
whose terms allow it (all values of realistic cubes), with a correction step for quotients
of numerators past 2**53, and falls back to Python integers for the rest:

* ``n Σx² − (Σx)²`` is computed in int64 arithmetic, which is exact modulo 2**64; it is the
  true value wherever the true value is known to be below 2**62 in magnitude (from the terms
  themselves, or from a float64 estimate with a bound on its error);
* ``a / b`` for such a numerator and a divisor up to 2**53 is first divided in float64, then
  moved to the correctly rounded neighbour by comparing ``a`` with ``b`` times the midpoints
  between float64 neighbours, exactly, in int64 arithmetic modulo 2**64 (the differences
  compared are far below 2**63, so their sign is right).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["numerator", "quotient", "wide_numerator"]

Array = np.ndarray[Any, Any]

INT64_MAX = 2**63 - 1
FLOAT_EXACT = 2**53  # every integer up to this is exact in float64
SQRT_FLOAT_EXACT = math.isqrt(FLOAT_EXACT)  # n (n − ddof) <= 2**53 up to this n
_SQRT_INT64 = math.isqrt(INT64_MAX)  # (Σx)² fits int64 up to this Σx
_KNOWN = 2.0**62  # a numerator known below this in magnitude is its int64 value mod 2**64
_ERROR = 2.0**-49  # bound on the relative error of the float64 estimate of n Σx² − (Σx)²


def numerator(n: Array, sums: Array, squares: Array) -> tuple[Array, Any]:
    """``n Σx² − (Σx)²`` in int64, and where that is its true value (a mask, or numpy True).

    ``n`` is int64 ``(rows, 1)``; ``sums`` and ``squares`` are integer arrays ``(rows,
    cols)`` of values >= 0. Elsewhere (magnitudes of 2**62 and more) the int64 value is
    meaningless: take those values from :func:`wide_numerator`.
    """
    s = sums.astype(np.int64)  # uint64 past int64 wraps: the same value modulo 2**64
    q = squares.astype(np.int64)
    value = n * q - s * s  # modulo 2**64
    if _all_fit(n, sums, squares):  # the usual case, known from the maxima alone
        return value, np.True_
    fits = (s <= _SQRT_INT64) & (q <= INT64_MAX // np.maximum(n, 1))
    if sums.dtype == np.uint64 or squares.dtype == np.uint64:
        fits &= (s >= 0) & (q >= 0)
    rest = np.nonzero(~fits)
    rows = np.broadcast_to(n, sums.shape)[rest].astype(np.float64)
    s_f, q_f = sums[rest].astype(np.float64), squares[rest].astype(np.float64)
    estimate = rows * q_f - s_f * s_f
    fits[rest] = np.abs(estimate) + _ERROR * (rows * q_f + s_f * s_f) < _KNOWN
    return value, fits


def _all_fit(n: Array, sums: Array, squares: Array) -> bool:
    """Whether ``n Σx²`` and ``(Σx)²`` fit int64 for every value (so their difference does)."""
    if sums.size == 0:
        return True
    top_s, top_q, top_n = int(sums.max()), int(squares.max()), int(n.max())
    return top_s <= _SQRT_INT64 and top_q * max(top_n, 0) <= INT64_MAX


def wide_numerator(n: Array, sums: Array, squares: Array) -> Array:
    """``n Σx² − (Σx)²`` of some values (1-d arrays) in Python integers (an object array)."""
    return n.astype(object) * squares.astype(object) - sums.astype(object) ** 2


def quotient(a: Array, b: Array) -> Array:
    """``a / b`` rounded once to float64 (ties to even), for int64 ``a`` in [0, 2**63) and
    ``b`` in [1, 2**53]: one float64 division when ``a <= 2**53``, else corrected."""
    out = a.astype(np.float64) / b
    big = np.nonzero(a > FLOAT_EXACT)
    if big[0].size:
        out[big] = _corrected(a[big], b[big], out[big])
    return out


def _corrected(a: Array, b: Array, q: Array) -> Array:
    """The float64 nearest ``a / b`` from an estimate ``q`` a few units in the last place off.

    ``q`` is right when ``a / b`` lies between the midpoints below and above it (a midpoint
    itself goes to the neighbour whose last bit is 0); otherwise it moves one step.
    """
    for _ in range(4):  # an estimate of a / b rounded twice is at most 2 steps off
        below = np.nextafter(q, -np.inf)
        over = _above_midpoint(a, b, q)  # sign of a − b · (midpoint above q)
        under = _above_midpoint(a, b, below)  # sign of a − b · (midpoint below q)
        odd = _odd(q)
        up = (over > 0) | ((over == 0) & odd)
        down = (under < 0) | ((under == 0) & odd)
        if not (up | down).any():
            break
        q = np.where(up, np.nextafter(q, np.inf), np.where(down, below, q))
    return q


def _above_midpoint(a: Array, b: Array, x: Array) -> Array:
    """The sign of ``a − b · (x + ulp(x) / 2)``, exactly, for floats ``x`` near ``a / b``.

    With ``x = m · 2**e`` (``m`` an integer of 53 bits) the midpoint is ``(2m + 1) · 2**(e −
    1)``; both sides are scaled by a power of 2 to integers and subtracted modulo 2**64. The
    true difference is a few times ``b`` at most, so its int64 value is exact.
    """
    fraction, exponent = np.frexp(x)
    m = (fraction * 2.0**53).astype(np.uint64)
    e = exponent.astype(np.int64) - 53
    left = a.astype(np.uint64) << np.maximum(1 - e, 0).astype(np.uint64)
    right = b.astype(np.uint64) * (2 * m + 1) << np.maximum(e - 1, 0).astype(np.uint64)
    return np.sign((left - right).view(np.int64))


def _odd(x: Array) -> Array:
    """Whether the last bit of each float64's significand is 1."""
    return (x.view(np.uint64) & np.uint64(1)).astype(bool)
