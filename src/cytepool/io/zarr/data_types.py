"""Zarr data types and fill values: the numpy dtype of each, and their JSON forms.

:class:`DataType` maps a data type of the Zarr core specification (and the ``string``,
``numpy.datetime64`` and ``numpy.timedelta64`` extensions) to the numpy dtype reads return;
:func:`fill_value_from_json` / :func:`fill_value_to_json` convert fill values, strictly.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from cytepool.errors import FormatError, InputTypeError
from cytepool.io.zarr.fields import (
    check_config_keys,
    fail,
    is_int,
    named_configuration,
    unsupported,
)

__all__ = [
    "DATA_TYPES",
    "DATETIME",
    "STRING",
    "TIMEDELTA",
    "TIME_UNITS",
    "DataType",
    "fill_value_from_json",
    "fill_value_to_json",
]

_CORE_NAMES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
DATA_TYPES: Mapping[str, np.dtype[Any]] = types.MappingProxyType(
    {name: np.dtype(name) for name in _CORE_NAMES}
)

STRING = "string"
DATETIME = "numpy.datetime64"
TIMEDELTA = "numpy.timedelta64"
TIME_UNITS = (
    "Y",
    "M",
    "W",
    "D",
    "h",
    "m",
    "s",
    "ms",
    "us",
    "μs",
    "ns",
    "ps",
    "fs",
    "as",
    "generic",
)
_MAX_SCALE_FACTOR = 2**31 - 1
_HEX_DIGITS = re.compile(r"[0-9a-fA-F]+")
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

# ---------------------------------------------------------------------------------------------
# Data types


@dataclass(frozen=True)
class DataType:
    """A Zarr data type and the numpy dtype that reads return (native byte order).

    Examples
    --------
    >>> DataType.from_json("float32", "zarr.json").dtype
    dtype('float32')
    >>> DataType.from_numpy(np.dtype("M8[ms]")).to_json()
    {'name': 'numpy.datetime64', 'configuration': {'unit': 'ms', 'scale_factor': 1}}
    """

    name: str
    dtype: np.dtype[Any]
    unit: str | None = None
    scale_factor: int | None = None

    @property
    def is_string(self) -> bool:
        """Whether this is the variable-length ``string`` type."""
        return self.name == STRING

    @property
    def is_time(self) -> bool:
        """Whether this is ``numpy.datetime64`` or ``numpy.timedelta64``."""
        return self.name in (DATETIME, TIMEDELTA)

    @property
    def itemsize(self) -> int:
        """Bytes per element once decoded (4, the minimal vlen-utf8 item, for strings)."""
        return 4 if self.is_string else self.dtype.itemsize

    @classmethod
    def from_json(cls, value: Any, where: str) -> DataType:
        """Parse the ``data_type`` field."""
        if isinstance(value, str):
            name, config = value, None
        else:
            name, config = named_configuration(value, where, "data_type")
        if name in DATA_TYPES or name == STRING:
            check_config_keys(config, [], [], where, f"data type {name!r}")
            dtype = DATA_TYPES.get(name, np.dtypes.StringDType())
            return cls(name, dtype)
        if name in (DATETIME, TIMEDELTA):
            return cls._time_from_json(name, config, where)
        raise unsupported(where, f"the data type {name!r} (supported: {_supported_types()})")

    @classmethod
    def _time_from_json(cls, name: str, config: dict[str, Any] | None, where: str) -> DataType:
        if config is None:
            raise fail(where, f'the data type {name!r} needs a "configuration"')
        config = check_config_keys(config, ["unit", "scale_factor"], [], where, name)
        unit, scale = config["unit"], config["scale_factor"]
        if unit not in TIME_UNITS:
            raise fail(where, f"the unit of {name!r} must be one of {TIME_UNITS}, not {unit!r}")
        if not is_int(scale) or not 1 <= scale <= _MAX_SCALE_FACTOR:
            problem = f"the scale_factor of {name!r} must be an integer in 1..2**31-1"
            raise fail(where, f"{problem}, not {scale!r}")
        if unit == "generic" and scale != 1:
            raise fail(where, f"the generic unit of {name!r} takes no scale_factor {scale}")
        return cls(name, _time_dtype(name, unit, scale), unit, scale)

    @classmethod
    def from_numpy(cls, dtype: np.dtype[Any]) -> DataType:
        """The data type write_array stores for a numpy dtype (TypeError if there is none).

        datetime64 and timedelta64 need a unit: numpy's generic unit (``np.dtype("M8")``),
        which zarr-python 3.1 cannot open, is refused (an array that has it still reads).
        """
        if dtype.kind in "TU" or dtype == np.dtype(object):
            return cls(STRING, np.dtypes.StringDType())
        if dtype.kind in "mM":
            unit, scale = np.datetime_data(dtype)
            name = DATETIME if dtype.kind == "M" else TIMEDELTA
            if unit == "generic":
                raise _generic_unit(dtype)
            return cls(name, _time_dtype(name, unit, scale), unit, scale)
        native = dtype.newbyteorder("=")
        for name, core in DATA_TYPES.items():
            if native == core and dtype.fields is None:
                return cls(name, core)
        msg = f"the data type {dtype} is not one of the Zarr data types {_supported_types()}"
        raise InputTypeError(msg)

    def to_json(self) -> str | dict[str, Any]:
        """The ``data_type`` field."""
        if not self.is_time:
            return self.name
        config = {"unit": self.unit, "scale_factor": self.scale_factor}
        return {"name": self.name, "configuration": config}


def _generic_unit(dtype: np.dtype[Any]) -> InputTypeError:
    kind = "datetime64" if dtype.kind == "M" else "timedelta64"
    msg = (
        f"the data type {dtype} has no unit (numpy's generic unit), which zarr-python 3.1 "
        f"cannot open: give the data a unit first, e.g. data.astype('{kind}[s]')"
    )
    return InputTypeError(msg)


def _supported_types() -> str:
    return ", ".join([*DATA_TYPES, STRING, DATETIME, TIMEDELTA])


def _time_dtype(name: str, unit: str, scale: int) -> np.dtype[Any]:
    code = "M8" if name == DATETIME else "m8"
    if unit == "generic":
        return np.dtype(code)
    unit = "us" if unit == "μs" else unit
    return np.dtype(f"{code}[{scale}{unit}]" if scale != 1 else f"{code}[{unit}]")


# ---------------------------------------------------------------------------------------------
# Fill values


def fill_value_from_json(value: Any, data_type: DataType, where: str) -> Any:
    """Parse a ``fill_value`` in any form the Zarr v3 specification permits.

    Parameters
    ----------
    value
        The JSON value.
    data_type
        The array's data type.
    where
        The file, for error messages.

    Returns
    -------
    A numpy scalar of ``data_type.dtype`` (``numpy.str_`` for strings).

    Raises
    ------
    FormatError
        If the value is not a valid fill value of the data type.

    Examples
    --------
    >>> f32 = DataType.from_json("float32", "zarr.json")
    >>> fill_value_from_json("0x7fc00001", f32, "zarr.json").tobytes().hex()
    '0100c07f'
    >>> fill_value_from_json([1.0, "-Infinity"], DataType.from_json("complex64", "z"), "z")
    np.complex64(1-infj)
    """
    dtype = data_type.dtype
    if data_type.is_string:
        return _string_fill(value, where)
    if data_type.is_time:
        return _time_fill(value, dtype, where)
    parser = {"b": _bool_fill, "i": _int_fill, "u": _int_fill, "f": _float_fill}.get(dtype.kind)
    if parser is None:
        return _complex_fill(value, dtype, where)
    return parser(value, dtype, where)


def _bad_fill(where: str, value: Any, dtype: Any, expected: str) -> FormatError:
    return fail(where, f"the fill_value {value!r} is not valid for {dtype}: expected {expected}")


def _string_fill(value: Any, where: str) -> np.str_:
    if not isinstance(value, str):
        raise _bad_fill(where, value, STRING, "a JSON string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad_fill(where, value, STRING, "valid Unicode (no lone surrogate)") from None
    return np.str_(value)


def _bool_fill(value: Any, dtype: np.dtype[Any], where: str) -> np.bool_:
    if not isinstance(value, bool):
        raise _bad_fill(where, value, dtype, "true or false")
    return np.bool_(value)


def _int_fill(value: Any, dtype: np.dtype[Any], where: str) -> Any:
    info = np.iinfo(dtype)
    if not is_int(value) or not info.min <= value <= info.max:
        raise _bad_fill(where, value, dtype, f"an integer from {info.min} to {info.max}")
    return dtype.type(value)


def _float_fill(value: Any, dtype: np.dtype[Any], where: str) -> Any:
    expected = (
        'a number, "NaN", "Infinity", "-Infinity" or "0x" and'
        f" {2 * dtype.itemsize} hex digits of the bit pattern"
    )
    if isinstance(value, str):
        return _float_string_fill(value, dtype, where, expected)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _bad_fill(where, value, dtype, expected)
    try:
        with np.errstate(over="ignore"):
            result = dtype.type(float(value))
    except OverflowError:
        result = dtype.type(math.inf)
    if np.isinf(result):
        raise _bad_fill(where, value, dtype, f"{expected}, within the range of {dtype}")
    return result


def _float_string_fill(value: str, dtype: np.dtype[Any], where: str, expected: str) -> Any:
    if value in _SPECIAL_FLOATS:
        return dtype.type(_SPECIAL_FLOATS[value])
    digits = value[2:]
    n_digits = 2 * dtype.itemsize
    if not value.startswith("0x") or len(digits) != n_digits or not _HEX_DIGITS.fullmatch(digits):
        raise _bad_fill(where, value, dtype, expected)
    return np.frombuffer(bytes.fromhex(digits), dtype=dtype.newbyteorder(">"))[0].astype(dtype)


def _complex_fill(value: Any, dtype: np.dtype[Any], where: str) -> Any:
    part = np.dtype(f"f{dtype.itemsize // 2}")
    if not isinstance(value, list) or len(value) != 2:
        raise _bad_fill(where, value, dtype, "a list [real, imaginary] of two float fill values")
    real, imag = (_float_fill(item, part, where) for item in value)
    result = np.zeros((), dtype=dtype)
    result.real, result.imag = real, imag
    return result[()]


def _time_fill(value: Any, dtype: np.dtype[Any], where: str) -> Any:
    info = np.iinfo(np.int64)
    if value == "NaT":
        value = info.min
    if not is_int(value) or not info.min <= value <= info.max:
        raise _bad_fill(where, value, dtype, f'"NaT" or an integer from {info.min} to {info.max}')
    return np.array(value, dtype=np.int64).view(dtype)[()]


def fill_value_to_json(value: Any, data_type: DataType) -> Any:
    """Serialise a fill value (the inverse of :func:`fill_value_from_json`).

    Parameters
    ----------
    value
        A numpy scalar of ``data_type.dtype``.
    data_type
        The array's data type.

    Returns
    -------
    The JSON value.

    Examples
    --------
    >>> fill_value_to_json(np.float32("nan"), DataType.from_json("float32", "z"))
    'NaN'
    >>> fill_value_to_json(np.complex64(1 + 2j), DataType.from_json("complex64", "z"))
    [1.0, 2.0]
    """
    kind = data_type.dtype.kind
    if data_type.is_string:
        return str(value)
    if data_type.is_time:
        return int(np.asarray(value).view(np.int64))
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    if kind == "c":
        return [_float_to_json(value.real), _float_to_json(value.imag)]
    return _float_to_json(value)


def _float_to_json(value: Any) -> Any:
    if np.isnan(value):
        canonical = value.dtype.type(math.nan)
        if value.tobytes() == canonical.tobytes():
            return "NaN"
        return "0x" + np.asarray(value).astype(value.dtype.newbyteorder(">")).tobytes().hex()
    if np.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(str(value))  # the shortest text that gives back the same value
