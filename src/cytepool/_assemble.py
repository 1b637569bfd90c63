"""The internal seam for making cubes from parts: pooling, cube files and converters use it.

A :class:`cytepool.Cube` wraps a :class:`~cytepool._parts.CubeParts`. The public constructor
checks what a user gives and records one provenance record; the code that makes cubes from
other sources (:func:`cytepool.from_cells`, :func:`cytepool.io.read_cube`, the AnnData
converters) builds them here instead, with their own provenance and, for cube files, the
stored digests, and reads a cube's parts (its digests, a group's block) through
:func:`parts_of`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from cytepool._parts import CubeParts
from cytepool._records import Provenance, stamp
from cytepool.cube import Cube, cube_of, parts_of

if TYPE_CHECKING:
    from cytepool.fingerprint import Digests

__all__ = ["from_parts", "parts_of", "provenance_record", "with_provenance"]


def from_parts(
    layers: Mapping[str, Any],
    *,
    samples: Any,
    groups: Any,
    features: Any,
    cells: Any,
    normalization: Any = None,
    metadata: Mapping[str, Any] | None = None,
    provenance: Iterable[Provenance] = (),
    digests: Digests | None = None,
) -> Cube:
    """A cube of stored or computed parts, with ``provenance`` as given (no record added).

    Tables, cells, normalization and numpy layers are checked as by the constructor; other
    layers are not read. With ``digests``, the table, cell and normalization digests are
    compared with the parts now (FormatError naming the part), and each layer group digest
    is verified whenever that group is read whole (FormatError naming the layer and group);
    the fingerprint is known without reading any layer. A table may also be given as an
    :class:`~cytepool._table.AxisTable` already checked (a cube file's, whose frame is made
    when first used), taken as it is.
    """
    parts = CubeParts.checked(
        layers,
        samples=samples,
        groups=groups,
        features=features,
        cells=cells,
        normalization=normalization,
        metadata=metadata,
        provenance=provenance,
        digests=digests,
    )
    return cube_of(parts)


def provenance_record(
    operation: str, parameters: Mapping[str, Any], inputs: Iterable[Cube | str | None] = ()
) -> Provenance:
    """A record stamped now; ``inputs`` are cubes (fingerprint if known unread), fingerprints."""
    fingerprints = [parts_of(x).known_fingerprint() if isinstance(x, Cube) else x for x in inputs]
    return stamp(operation, parameters, fingerprints)


def with_provenance(cube: Cube, provenance: Iterable[Provenance]) -> Cube:
    """The same cube (sharing its parts) with other provenance records."""
    return cube_of(parts_of(cube).with_provenance(provenance))
