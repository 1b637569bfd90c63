"""Tables as Zarr groups in anndata's dataframe encoding, read and written through narwhals.

:func:`write_table` stores a pandas, polars or pyarrow frame so that anndata reads it, and
:func:`read_table` reads tables written by anndata or by cytepool into any of the three.
"""

from __future__ import annotations

from cytepool.io.tables.frames import read_table, write_table

__all__ = ["read_table", "write_table"]
