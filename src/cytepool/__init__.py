"""cytepool: pseudobulk cubes between the single-cell tools you already use.

A cube holds, for every group (cell type) x sample x feature (gene), additive layers of
sums over pooled cells, the number of cells per profile, an optional normalization, three
id-keyed tables and provenance records. See :class:`cytepool.Cube`.
"""

from __future__ import annotations

from cytepool._version import __version__
from cytepool.cube import Cube, Normalization, Provenance, add, concat
from cytepool.pooling import from_cells

__all__ = ["Cube", "Normalization", "Provenance", "__version__", "add", "concat", "from_cells"]
