"""Numpy masked arrays are refused: their mask would be lost.

``numpy.asarray`` of a masked array gives its data with the masked values in place, so a mask
would be dropped without a word: a masked label pooled under its hidden value, a masked count
summed, a masked layer's hidden values fingerprinted. Every argument that takes an array
refuses one instead, and says to fill or drop the masked values first (as
:func:`cytepool.io.zarr.write_array` does).
"""

from __future__ import annotations

import sys
from typing import Any

from cytepool.errors import InputTypeError

__all__ = ["refuse_masked"]


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
