"""The cube's records: the axes and their id columns, :class:`Normalization`, :class:`Provenance`.

Below the model: it imports only the errors and the version, so every module (the cube, the
fingerprint, pooling, cube files, converters) can use the records without importing upward.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from cytepool._arrays import as_array
from cytepool.errors import (
    FormatError,
    InputError,
    InputTypeError,
    check_keys,
    check_string_keys,
)

__all__ = [
    "AXES",
    "FINGERPRINT",
    "HEX",
    "ID_COLUMNS",
    "Axis",
    "Normalization",
    "Provenance",
    "json_copy",
    "stamp",
]

AXES = ("groups", "samples", "features")
ID_COLUMNS = MappingProxyType(
    {"samples": "sample_id", "groups": "group_id", "features": "feature_id"}
)
HEX = re.compile(r"[0-9a-f]{64}")
FINGERPRINT = re.compile(
    r"(blake3:)?[0-9a-f]{64}"
)  # a bare hex one is a SHA-256 (formats 1.0, 1.1)

Axis = Literal["samples", "groups", "features"]


@dataclass(frozen=True, eq=False)
class Normalization:
    """How a cube's profiles are normalized: a method name and one factor per profile.

    Parameters
    ----------
    method
        The method's name, such as ``"size_factors"`` or ``"cpm"``.
    factors
        Positive, finite factors, shape ``(n_groups, n_samples)``; kept as a read-only
        float64 copy.

    Raises
    ------
    TypeError
        If ``method`` is not a string or the factors are not real numbers.
    ValueError
        If ``method`` is empty, or the factors are not 2-D, positive and finite.

    Examples
    --------
    >>> import numpy as np
    >>> from cytepool import Normalization
    >>> n = Normalization("size_factors", [[1.0, 0.5]])
    >>> n.factors.shape
    (1, 2)
    >>> n == Normalization("size_factors", np.array([[1.0, 0.5]]))
    True
    """

    method: str
    factors: np.ndarray[Any, np.dtype[np.float64]]

    def __post_init__(self) -> None:
        if not isinstance(self.method, str):
            msg = f"normalization: method must be a string, found {type(self.method).__name__}"
            raise InputTypeError(msg)
        if not self.method:
            msg = "normalization: method must not be empty"
            raise InputError(msg)
        raw = as_array(self.factors, "normalization: factors")
        if raw.dtype.kind not in "iuf":
            msg = f"normalization: factors must be real numbers, found data type {raw.dtype}"
            raise InputTypeError(msg)
        if raw.ndim != 2:
            msg = f"normalization: factors must be 2-D (groups, samples), found shape {raw.shape}"
            raise InputError(msg)
        factors = np.array(raw, dtype=np.float64)
        bad = ~(np.isfinite(factors) & (factors > 0))
        if bad.any():
            g, s = np.argwhere(bad)[0]
            msg = (
                f"normalization: factor {factors[g, s]} at group #{g}, sample #{s} is not "
                "positive and finite"
            )
            raise InputError(msg)
        factors.flags.writeable = False
        object.__setattr__(self, "factors", factors)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Normalization):
            return NotImplemented
        return self.method == other.method and bool(np.array_equal(self.factors, other.factors))

    def __hash__(self) -> int:
        return hash((self.method, self.factors.shape, self.factors.tobytes()))

    def __repr__(self) -> str:
        shape = " x ".join(map(str, self.factors.shape))
        return f"Normalization(method={self.method!r}, factors=<{shape} float64>)"


def json_copy(value: Any, what: str) -> Any:
    check_string_keys(value, what, f"{what}: keys")  # JSON would make other keys strings
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except RecursionError as err:  # Python's JSON encoder or decoder recurses per level
        msg = f"{what}: nested too deeply to be written as JSON ({err}); flatten it"
        raise InputError(msg) from None
    except (TypeError, ValueError) as err:
        msg = f"{what}: expected JSON-serialisable values (no NaN or infinity): {err}"
        raise (InputTypeError if isinstance(err, TypeError) else InputError)(msg) from err


@dataclass(frozen=True)
class Provenance:
    """One step in a cube's history.

    Parameters
    ----------
    operation
        What made the cube: ``"Cube"``, ``"select"``, ``"merge_groups"``, ``"concat"``, ...
    parameters
        The operation's parameters, JSON-serialisable.
    version
        The cytepool version that ran it.
    time
        When, as an ISO 8601 UTC time.
    inputs
        The fingerprints of the input cubes, ``None`` where not known then (a lazy layer is
        never read to learn it).

    Examples
    --------
    >>> from cytepool import Provenance
    >>> p = Provenance("select", {"groups": ["T"]}, "0.1.0", "2025-01-01T00:00:00+00:00")
    >>> Provenance.from_json(p.to_json()) == p
    True
    """

    operation: str
    parameters: dict[str, Any]
    version: str
    time: str
    inputs: tuple[str | None, ...] = ()

    def __post_init__(self) -> None:
        for key in ("operation", "version", "time"):
            if not isinstance(getattr(self, key), str):
                found = type(getattr(self, key)).__name__
                msg = f"provenance: {key} must be a string, found {found}"
                raise InputTypeError(msg)
        if not isinstance(self.parameters, Mapping):
            found = type(self.parameters).__name__
            msg = f"provenance: parameters must be a mapping, found {found}"
            raise InputTypeError(msg)
        params = json_copy(dict(self.parameters), "provenance parameters")
        inputs = tuple(self.inputs)
        for value in inputs:
            if value is not None and not FINGERPRINT.fullmatch(str(value)):
                msg = f"provenance: inputs must be fingerprints or None, found {value!r}"
                raise InputError(msg)
        object.__setattr__(self, "parameters", params)
        object.__setattr__(self, "inputs", inputs)

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-serialisable dict."""
        return {
            "operation": self.operation,
            "parameters": json_copy(self.parameters, "provenance parameters"),
            "version": self.version,
            "time": self.time,
            "inputs": list(self.inputs),
        }

    @classmethod
    def from_json(cls, data: Any) -> Provenance:
        """A record from the dict :meth:`to_json` gives.

        Raises
        ------
        FormatError
            If ``data`` is not such a dict (a ValueError).
        """
        check_keys("provenance", data, {"operation", "parameters", "version", "time", "inputs"})
        if not isinstance(data["inputs"], list):
            msg = f"provenance: inputs must be a list, found {data['inputs']!r}"
            raise FormatError(msg)
        try:
            return cls(
                data["operation"],
                data["parameters"],
                data["version"],
                data["time"],
                tuple(data["inputs"]),
            )
        except (TypeError, ValueError) as err:
            raise FormatError(str(err)) from err


def stamp(
    operation: str, parameters: Mapping[str, Any], inputs: Iterable[str | None] = ()
) -> Provenance:
    """A provenance record of ``operation`` stamped now with this version of cytepool."""
    from cytepool._version import __version__  # importlib.metadata: only when stamping

    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds")
    return Provenance(operation, dict(parameters), __version__, now, tuple(inputs))
