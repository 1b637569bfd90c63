"""Arrays as users give them: numpy masked arrays and ragged nested sequences are refused.

``numpy.asarray`` of a masked array gives its data with the masked values in place, so a mask
would be dropped without a word: a masked label pooled under its hidden value, a masked count
summed, a masked layer's hidden values fingerprinted. Every argument that takes an array
refuses one instead, and says to fill or drop the masked values first (as
:func:`cytepool.io.zarr.write_array` does). Nested lists of different lengths, which numpy
refuses with "setting an array element with a sequence", are an error naming the argument.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from cytepool.errors import InputError, InputTypeError

__all__ = ["as_array", "refuse_masked"]


def as_array(value: Any, what: str) -> np.ndarray[Any, Any]:
    """``numpy.asarray(value)``, refusing a masked array and nested sequences of different
    lengths (InputTypeError, InputError) with messages naming ``what``.

    Examples
    --------
    >>> as_array([[1, 2], [3]], "cells")
    Traceback (most recent call last):
    ...
    cytepool.errors.InputError: cells: expected an array (nested lists of equal lengths), found nested sequences of different lengths
    """  # noqa: E501
    refuse_masked(value, what)
    try:
        return np.asarray(value)
    except ValueError as error:
        if "inhomogeneous" not in str(error) and "sequence" not in str(error):
            raise
    msg = (
        f"{what}: expected an array (nested lists of equal lengths), found nested sequences "
        "of different lengths"
    )
    raise InputError(msg)


def refuse_masked(value: Any, what: str) -> None:
    """Raise InputTypeError, naming ``what``, if ``value`` is a numpy masked array.

    Examples
    --------
    >>> import numpy as np
    >>> refuse_masked(np.ma.masked_array([1, 2], mask=[False, True]), "counts")
    Traceback (most recent call last):
    ...
    cytepool.errors.InputTypeError: counts: expected an array without a mask, found a numpy masked array (1 value masked); fill the masked values (.filled(value)) or drop them first
    """  # noqa: E501
    ma = sys.modules.get("numpy.ma")  # not imported: no masked array exists
    if ma is None or not isinstance(value, ma.MaskedArray):
        return
    n_masked = int(ma.count_masked(value))
    msg = (
        f"{what}: expected an array without a mask, found a numpy masked array "
        f"({n_masked} value{'' if n_masked == 1 else 's'} masked); fill the masked values "
        "(.filled(value)) or drop them first"
    )
    raise InputTypeError(msg)
