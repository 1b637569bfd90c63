"""The cube: pooled profiles with additive layers, exact lazy sums and a content fingerprint.

A :class:`Cube` holds, for every group (cell type) x sample x feature (gene), additive layers
of sums over pooled cells, the number of cells of every profile, an optional
:class:`Normalization`, three id-keyed tables and :class:`Provenance` records. The layers may
be numpy arrays, arrays on disk (:class:`cytepool.io.zarr.ZarrArray`) or lazy layers
(:mod:`cytepool.layers`); a cube reads a layer only when a method needs its values, one group
at a time, and then only the samples and features it needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from cytepool import _combine, _derive, _filters, _stats
from cytepool._parts import CubeParts
from cytepool._records import AXES, Axis, Normalization, Provenance, json_copy, stamp
from cytepool._stats import Statistic
from cytepool.errors import InputError, InputTypeError

__all__ = ["Cube", "Normalization", "Provenance", "add", "concat"]


class Cube:
    """Pooled profiles: groups x samples x features, with additive layers.

    Parameters
    ----------
    layers
        A mapping of layer name to an array of shape ``(n_groups, n_samples, n_features)``:
        a numpy array, a :class:`cytepool.io.zarr.ZarrArray` or a lazy layer, of data type
        int32, int64, uint32, uint64, float32 or float64. Values are sums over cells:
        finite, >= 0, and 0 wherever a profile pools 0 cells. numpy layers are checked now
        and kept as read-only views (do not modify them afterwards); other layers are checked
        when read.
    samples, groups, features
        Tables (pandas, polars or pyarrow) with unique, non-null string ids in a column
        ``sample_id`` / ``group_id`` / ``feature_id`` (for pandas the ids may be the index,
        named so). Other columns are covariates. They are returned in the same backend.
    cells
        Integers ``(n_groups, n_samples)``, >= 0: the number of cells of every profile.
    normalization
        None, or a :class:`Normalization` with factors ``(n_groups, n_samples)``.
    metadata
        A JSON-serialisable mapping (not part of the fingerprint).

    Raises
    ------
    TypeError
        For a table, array or value of the wrong type (a layer data type other than int32,
        int64, uint32, uint64, float32 or float64; ids that are not strings; a numpy
        masked array as a layer or cells: fill or drop its masked values first, ...).
    ValueError
        For wrong shapes, missing, null or duplicate ids, and -- as
        :class:`cytepool.errors.ConstraintError` -- negative or non-finite layer values,
        non-zero values in profiles of 0 cells, or negative cell numbers; messages name the
        part and, for values, the layer, group and sample.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> from cytepool import Cube
    >>> cube = Cube(
    ...     {"counts": np.array([[[1, 0, 2], [0, 0, 0]], [[3, 1, 0], [4, 4, 4]]])},
    ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"], "donor": ["d1", "d2"]}),
    ...     groups=pd.DataFrame({"group_id": ["B", "T"]}),
    ...     features=pd.DataFrame({"feature_id": ["CD3E", "CD19", "MS4A1"]}),
    ...     cells=[[2, 0], [5, 6]],
    ... )
    >>> cube
    <Cube 2 groups x 2 samples x 3 features; layers: counts int64 (memory); normalization: none>
    >>> cube.profiles("T")
    array([[3, 1, 0],
           [4, 4, 4]])
    >>> cube.samples
              donor
    sample_id
    s1           d1
    s2           d2
    """

    _parts: CubeParts

    def __init__(
        self,
        layers: Mapping[str, Any],
        *,
        samples: Any,
        groups: Any,
        features: Any,
        cells: Any,
        normalization: Normalization | None = None,
        metadata: Mapping[str, Any] | None = None,
    ):
        self._parts = CubeParts.checked(
            layers,
            samples=samples,
            groups=groups,
            features=features,
            cells=cells,
            normalization=normalization,
            metadata=metadata,
        )
        params = {
            "layers": {name: layer.dtype.name for name, layer in self._parts.layers.items()},
            "shape": list(self.shape),
            "normalization": None if normalization is None else normalization.method,
        }
        self._parts.provenance = (stamp("Cube", params),)

    # ----------------------------------------------------------------------- properties

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(n_groups, n_samples, n_features)``."""
        return self._parts.shape

    @property
    def samples(self) -> Any:
        """The samples table, in the backend it was given (pandas: indexed by ``sample_id``)."""
        return self._parts.tables["samples"].native()

    @property
    def groups(self) -> Any:
        """The groups table, in the backend it was given (pandas: indexed by ``group_id``)."""
        return self._parts.tables["groups"].native()

    @property
    def features(self) -> Any:
        """The features table, in the backend it was given (pandas: indexed by ``feature_id``)."""
        return self._parts.tables["features"].native()

    @property
    def layers(self) -> Mapping[str, Any]:
        """A read-only mapping of layer name to array (numpy, ZarrArray or lazy layer)."""
        return MappingProxyType(self._parts.exposed)

    @property
    def cells(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The number of cells of every profile, read-only int64 ``(n_groups, n_samples)``."""
        return self._parts.cells

    @property
    def normalization(self) -> Normalization | None:
        """The normalization, or None."""
        return self._parts.normalization

    @property
    def metadata(self) -> dict[str, Any]:
        """A copy of the metadata."""
        return dict(json_copy(self._parts.metadata, "metadata"))

    @property
    def provenance(self) -> tuple[Provenance, ...]:
        """The records of the operations that made this cube, oldest first."""
        return self._parts.provenance

    @property
    def fingerprint(self) -> str:
        """A hash of the content: tables, cells, normalization, layers.

        ``"blake3:"`` and 64 lowercase hex digits (a BLAKE3 hash of the part digests). A cube
        read from a cube file of format 1.0 or 1.1 (and a cube derived from one) keeps the
        SHA-256 fingerprint the file stores: 64 hex digits alone. It does not depend on memory
        layout, table backend, chunking, compression or laziness. Digests not known yet are
        computed, reading lazy layers group by group.
        """
        return self._parts.fingerprint()

    def __repr__(self) -> str:
        g, s, f = self.shape
        parts = [
            f"{name} {layer.dtype.name} ({'memory' if layer.eager else 'lazy'})"
            for name, layer in self._parts.layers.items()
        ]
        norm = "none" if self._parts.normalization is None else self._parts.normalization.method
        return (
            f"<Cube {g} groups x {s} samples x {f} features; "
            f"layers: {', '.join(parts) or 'none'}; normalization: {norm}>"
        )

    # ----------------------------------------------------------------------- reading

    def profiles(self, group: str | int, layer: str = "counts") -> np.ndarray[Any, Any]:
        """One group's profiles of a layer: an array ``(n_samples, n_features)``.

        Parameters
        ----------
        group
            The group's id or position.
        layer
            The layer's name.

        Returns
        -------
        numpy.ndarray
            A new array of the layer's data type, one row per sample and one column per
            feature, in the cube's order. A lazy layer reads only this group (a sum, such as
            a merged group, is computed now), and its values are checked as they are read.

        Raises
        ------
        KeyError
            For an unknown group id or layer (:class:`~cytepool.errors.UnknownIdError`).
        IndexError
            For a position out of range.
        TypeError
            For a group that is neither a string nor an integer.
        ValueError
            As :class:`~cytepool.errors.ConstraintError`, for a value of a lazy layer that
            is negative, not finite or not 0 in a profile of 0 cells; as
            :class:`~cytepool.errors.FormatError`, for a group of a cube file whose values do
            not match their stored digest.
        OverflowError
            For a sum (merged groups, pooled samples, added cubes) that does not fit the
            layer's data type.
        RuntimeError
            As :class:`~cytepool.errors.StoreChangedError`, if the cube file was replaced
            since the cube was read from it.

        Examples
        --------
        >>> import numpy as np
        >>> import polars as pl
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.arange(12, dtype="int32").reshape(2, 2, 3)},
        ...     samples=pl.DataFrame({"sample_id": ["s1", "s2"]}),
        ...     groups=pl.DataFrame({"group_id": ["B", "T"]}),
        ...     features=pl.DataFrame({"feature_id": ["a", "b", "c"]}),
        ...     cells=[[1, 1], [1, 1]],
        ... )
        >>> cube.profiles("T")
        array([[ 6,  7,  8],
               [ 9, 10, 11]], dtype=int32)
        >>> cube.profiles(0)[1]
        array([3, 4, 5], dtype=int32)
        """
        return self._parts.read(layer, self._parts.group_position(group))

    def to_numpy(self, layer: str = "counts") -> np.ndarray[Any, Any]:
        """A layer as a numpy array ``(n_groups, n_samples, n_features)``.

        Parameters
        ----------
        layer
            The layer's name.

        Returns
        -------
        numpy.ndarray
            The layer's values in its data type. A layer held in memory is returned as a
            read-only view; any other is read group by group into a new array.

        Raises
        ------
        KeyError
            For an unknown layer (:class:`~cytepool.errors.UnknownIdError`).
        ValueError
            As :class:`~cytepool.errors.ConstraintError` or
            :class:`~cytepool.errors.FormatError`, for values of a lazy layer that break the
            cube's constraints or do not match their stored digest (see :meth:`profiles`).
        OverflowError
            For a sum that does not fit the layer's data type.

        Examples
        --------
        >>> import numpy as np
        >>> import pandas as pd
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.ones((1, 2, 2), dtype="int32")},
        ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
        ...     groups=pd.DataFrame({"group_id": ["T"]}),
        ...     features=pd.DataFrame({"feature_id": ["a", "b"]}),
        ...     cells=[[1, 1]],
        ... )
        >>> cube.select(features=["b"]).to_numpy("counts").shape
        (1, 2, 1)
        """
        return self._parts.to_numpy(layer)

    # ----------------------------------------------------------------------- new cubes

    def select(self, *, samples: Any = None, groups: Any = None, features: Any = None) -> Cube:
        """A cube of some samples, groups and features, in the order given; reads nothing.

        Parameters
        ----------
        samples, groups, features
            None (all), ids (a string or a sequence of strings), positions (integers) or a
            boolean mask, per axis.

        Returns
        -------
        Cube
            A cube whose layers are lazy: later reads touch only the chunks holding the
            selected samples and features of the selected groups.

        Raises
        ------
        KeyError
            Naming ids that are not in the cube.
        IndexError
            For positions out of range or a mask of the wrong length.
        ValueError
            If a selection repeats an id.
        TypeError
            If a selection is of another type, holds a missing value (null, NA), or mixes
            booleans and integers.

        Examples
        --------
        >>> import numpy as np
        >>> import pandas as pd
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.arange(12).reshape(2, 2, 3)},
        ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
        ...     groups=pd.DataFrame({"group_id": ["B", "T"]}),
        ...     features=pd.DataFrame({"feature_id": ["a", "b", "c"]}),
        ...     cells=[[1, 1], [1, 1]],
        ... )
        >>> sub = cube.select(groups=["T"], features=["c", "a"])
        >>> sub.shape
        (1, 2, 2)
        >>> sub.profiles("T")
        array([[ 8,  6],
               [11,  9]])
        """
        return cube_of(
            _derive.select(self._parts, samples=samples, groups=groups, features=features)
        )

    def merge_groups(self, groups: Mapping[str, Sequence[str]]) -> Cube:
        """Sum groups into new groups, lazily; the other groups are kept as they are.

        Parameters
        ----------
        groups
            A mapping of new group id to the ids of the groups it sums, such as
            ``{"T cells": ["CD4 T", "CD8 T"]}``. A merged group takes the place of its
            member that comes first in the cube; a group may be in at most one merge, and a
            new id may not be the id of a group that is kept (InputError).

        Returns
        -------
        Cube
            A cube whose layers are lazy sums and whose cells are summed. Covariates of the
            groups table constant within every merge are kept, others dropped. The
            normalization is dropped (factors are not additive).

        Raises
        ------
        KeyError
            Naming unknown group ids.
        ValueError
            For an empty merge, a group in two merges, or a new id that is already taken.

        Notes
        -----
        Integer sums are exact; a sum that does not fit the layer's data type raises
        OverflowError naming the layer and group when it is read. Float sums add the members
        in their order in the cube, whatever the order listed.

        Examples
        --------
        >>> import numpy as np
        >>> import pandas as pd
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.arange(12).reshape(3, 2, 2)},
        ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
        ...     groups=pd.DataFrame({"group_id": ["CD4 T", "B", "CD8 T"]}),
        ...     features=pd.DataFrame({"feature_id": ["a", "b"]}),
        ...     cells=[[1, 1], [1, 1], [2, 2]],
        ... )
        >>> merged = cube.merge_groups({"T": ["CD4 T", "CD8 T"]})
        >>> list(merged.groups.index)
        ['T', 'B']
        >>> merged.profiles("T")
        array([[ 8, 10],
               [12, 14]])
        >>> merged.cells.tolist()
        [[3, 3], [1, 1]]
        """
        return cube_of(_derive.merge_groups(self._parts, groups))

    def pool_samples(self, by: str) -> Cube:
        """Sum the samples that share a value of a sample covariate, lazily.

        Parameters
        ----------
        by
            A column of the samples table, such as ``"donor"``. The new samples are named
            by the ``str`` of its values, in the order they first appear; a time as Python
            writes it (``1:00:00`` for an hour; nanoseconds after the microseconds), so the
            names are the same whatever the backend.

        Returns
        -------
        Cube
            A cube whose layers are lazy sums and whose cells are summed. Covariates
            constant within every pool are kept, others dropped; the normalization is
            dropped (factors are not additive).

        Raises
        ------
        KeyError
            If ``by`` is not a column of the samples table.
        ValueError
            If a sample has no value in ``by``.

        Examples
        --------
        >>> import numpy as np
        >>> import pandas as pd
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.arange(6).reshape(1, 3, 2)},
        ...     samples=pd.DataFrame(
        ...         {"sample_id": ["a1", "b1", "a2"], "donor": ["A", "B", "A"], "run": [1, 1, 2]}
        ...     ),
        ...     groups=pd.DataFrame({"group_id": ["T"]}),
        ...     features=pd.DataFrame({"feature_id": ["x", "y"]}),
        ...     cells=[[1, 1, 1]],
        ... )
        >>> pooled = cube.pool_samples(by="donor")
        >>> pooled.samples
                  donor
        sample_id
        A             A
        B             B
        >>> pooled.profiles("T")
        array([[4, 6],
               [2, 3]])
        """
        return cube_of(_derive.pool_samples(self._parts, by))

    # ----------------------------------------------------------------------- statistics

    def mean(self, layer: str = "counts") -> Statistic:
        """The mean per cell of every profile, ``layer / cells``, as a lazy float64 layer.

        Parameters
        ----------
        layer
            The layer of the sums ``Σx`` over the cells of every profile.

        Returns
        -------
        Statistic
            A lazy, read-only float64 layer of the cube's shape ``Σx / n`` (``n`` the
            profile's cells), NaN where a profile has 0 cells. Nothing is read until it is
            indexed; a read takes one group at a time. Each value is the quotient rounded
            once to float64, also for integer sums past 2**53.

        Raises
        ------
        KeyError
            For an unknown layer (:class:`~cytepool.errors.UnknownIdError`).

        See Also
        --------
        variance, fraction_detected

        Examples
        --------
        >>> import numpy as np
        >>> import pandas as pd
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"counts": np.array([[[3, 0], [0, 0]]]), "squares": np.array([[[5, 0], [0, 0]]])},
        ...     samples=pd.DataFrame({"sample_id": ["s1", "s2"]}),
        ...     groups=pd.DataFrame({"group_id": ["T"]}),
        ...     features=pd.DataFrame({"feature_id": ["a", "b"]}),
        ...     cells=[[2, 0]],
        ... )
        >>> mean = cube.mean()
        >>> mean
        <Statistic 'mean of counts' 1 x 2 x 2 float64>
        >>> mean.profiles("T")
        array([[1.5, 0. ],
               [nan, nan]])
        """
        return _stats.mean(self._parts, layer)

    def variance(
        self, layer: str = "counts", ddof: int = 1, *, squares: str | None = None
    ) -> Statistic:
        """The variance over the cells of every profile, as a lazy float64 layer.

        For a profile of ``n`` cells with sums ``Σx`` (``layer``) and ``Σx²`` (``squares``),
        the variance is ``(n Σx² − (Σx)²) / (n (n − ddof))``: numpy's ``var(x, ddof=ddof)``
        over the profile's cells, recovered from sums that stay exact when groups are merged
        or samples pooled.

        Parameters
        ----------
        layer
            The layer of the sums ``Σx``.
        ddof
            Delta degrees of freedom, an integer >= 0: 1 for the sample variance, 0 for the
            population variance.
        squares
            The layer of the sums of squares ``Σx²`` of ``layer``; None means ``"squares"``,
            which pairs with ``"counts"`` only (as :func:`cytepool.from_cells` pools them
            with ``layers=(..., "squares")``).

        Returns
        -------
        Statistic
            A lazy, read-only float64 layer of the cube's shape, NaN where ``n <= ddof``.
            For integer layers every value is exact: ``n Σx² − (Σx)²`` is computed without
            rounding at any size (in int64, or in wider integers for the values that need
            them) and the quotient is rounded once to float64, so a value does not depend
            on the other profiles read with it. For float layers it is ``Σx² − Σx (Σx / n)``
            in float64, clamped at 0: within about ``ε (1 + mean² / variance)`` relative
            (ε = 2.2e-16).

        Raises
        ------
        KeyError
            For a missing layer (:class:`~cytepool.errors.UnknownIdError`), saying how to
            pool the squares.
        TypeError
            For a ``ddof`` that is not an integer
            (:class:`~cytepool.errors.InputTypeError`).
        ValueError
            For a negative ``ddof``, or ``squares=None`` with a layer other than
            ``"counts"`` (:class:`~cytepool.errors.InputError`); when read, as
            :class:`~cytepool.errors.ConstraintError` naming the group, sample and feature,
            for sums of squares smaller than the sums allow (``n Σx² < (Σx)²``: they do not
            come from the same cells).

        See Also
        --------
        mean

        Examples
        --------
        >>> import numpy as np
        >>> import cytepool
        >>> x = 2**30 + np.array([[1], [2], [3], [5]])  # 4 cells of one feature; (Σx)² > 2**63
        >>> labels = {"sample_labels": list("aaab"), "group_labels": list("TTTT")}
        >>> cube = cytepool.from_cells(x, **labels, layers=("counts", "squares"))
        >>> cube.variance().profiles("T")  # sample b has 1 cell: NaN for ddof=1
        array([[ 1.],
               [nan]])
        >>> cube.variance(ddof=0).profiles("T")[0], np.var(x[:3], ddof=0)
        (array([0.66666667]), np.float64(0.6666666666666666))
        """
        return _stats.variance(self._parts, layer, ddof, squares)

    def fraction_detected(self) -> Statistic:
        """The fraction of cells in which each feature is > 0, as a lazy float64 layer.

        Returns
        -------
        Statistic
            A lazy, read-only float64 layer of the cube's shape, ``detected / cells`` from
            the layer ``"detected"`` (the number of cells with a value > 0, as
            :func:`cytepool.from_cells` pools it with ``layers=(..., "detected")``), NaN
            where a profile has 0 cells.

        Raises
        ------
        KeyError
            Without a ``"detected"`` layer (:class:`~cytepool.errors.UnknownIdError`),
            saying how to pool it.

        Examples
        --------
        >>> import numpy as np
        >>> import pandas as pd
        >>> from cytepool import Cube
        >>> cube = Cube(
        ...     {"detected": np.array([[[4, 1]]])},
        ...     samples=pd.DataFrame({"sample_id": ["s1"]}),
        ...     groups=pd.DataFrame({"group_id": ["T"]}),
        ...     features=pd.DataFrame({"feature_id": ["a", "b"]}),
        ...     cells=[[8]],
        ... )
        >>> cube.fraction_detected()[0]
        array([[0.5  , 0.125]])
        """
        return _stats.fraction_detected(self._parts)

    # ----------------------------------------------------------------------- filters

    def filter_profiles(
        self, min_cells: float = 10, min_counts: float = 1000, *, layer: str = "counts"
    ) -> Cube:
        """Empty the profiles with too few cells or counts (decoupler's ``pp.filter_samples``).

        A profile passes when it has ``cells >= min_cells`` and a total over the features of
        ``layer`` ``>= min_counts``. A cube is the full grid of groups x samples, so the
        axes stay: a profile filtered out gets 0 cells and 0 in every layer.

        Parameters
        ----------
        min_cells
            The least number of cells of a profile, a finite number >= 0.
        min_counts
            The least total of a profile over the features of ``layer``, a finite number
            >= 0 (0 reads no layer).
        layer
            The layer whose totals are compared with ``min_counts``.

        Returns
        -------
        Cube
            A cube of the same axes whose failing profiles have 0 cells and 0 values in
            every layer (lazily, when read), so sums, statistics and
            :func:`~cytepool.io.anndata.to_anndata` leave them out; with a provenance record
            ``"filter_profiles"`` of the parameters. The totals are read now, one group at a
            time (only the profiles with enough cells).

        Raises
        ------
        TypeError
            For a threshold that is not a real number
            (:class:`~cytepool.errors.InputTypeError`).
        ValueError
            For a negative or non-finite threshold (:class:`~cytepool.errors.InputError`).
        KeyError
            For an unknown layer (:class:`~cytepool.errors.UnknownIdError`).

        Examples
        --------
        >>> import numpy as np
        >>> import cytepool
        >>> labels = {"sample_labels": list("aaab"), "group_labels": list("TTTT")}
        >>> cube = cytepool.from_cells(np.array([[400, 0], [300, 1], [0, 900], [5, 5]]), **labels)
        >>> cube.cells.tolist()
        [[3, 1]]
        >>> kept = cube.filter_profiles(min_cells=2, min_counts=1000)
        >>> kept.cells.tolist(), kept.shape
        ([[3, 0]], (1, 2, 2))
        >>> kept.profiles("T")
        array([[700, 901],
               [  0,   0]])
        """
        return cube_of(_filters.filter_profiles(self._parts, min_cells, min_counts, layer))

    def filter_features(
        self,
        min_count: float = 10,
        min_total_count: float = 15,
        large_n: float = 10,
        min_prop: float = 0.7,
        group: str | None = None,
        layer: str = "counts",
    ) -> Cube:
        """Keep the features expressed enough for DE: edgeR's ``filterByExpr``.

        As decoupler's ``pp.filter_by_expr``, on each group's non-empty profiles: library
        sizes are the profiles' totals; a feature needs a CPM of at least ``min_count /
        median library size · 10⁶`` in at least as many profiles as the smallest design
        group has (above ``large_n`` eased to ``large_n + (size − large_n) · min_prop``),
        and a total of at least ``min_total_count``. The cube has one feature axis, so it
        keeps the features that pass in any group: select one group first to filter it on
        its own.

        Parameters
        ----------
        min_count
            The least count, converted to CPM with the median library size; >= 0.
        min_total_count
            The least total count of a feature over the group's profiles; >= 0.
        large_n
            The number of profiles above which the minimum is eased; >= 0.
        min_prop
            The proportion of the profiles beyond ``large_n`` that count, in [0, 1].
        group
            A column of the samples table naming each sample's design group (such as
            ``"condition"``), or None for one design group.
        layer
            The layer of counts.

        Returns
        -------
        Cube
            The cube of the features that pass in at least one group, in the cube's order
            (lazy, as :meth:`select`), with a provenance record ``"filter_features"``. The
            layer is read now, one group at a time (only its non-empty profiles).

        Raises
        ------
        TypeError
            For a threshold that is not a real number, or a ``group`` that is not a string
            or None (:class:`~cytepool.errors.InputTypeError`).
        ValueError
            For a threshold out of range, or a sample with no value in ``group``
            (:class:`~cytepool.errors.InputError`).
        KeyError
            For an unknown layer or column (:class:`~cytepool.errors.UnknownIdError`).

        Examples
        --------
        >>> import numpy as np
        >>> import cytepool
        >>> counts = np.random.default_rng(0).poisson([20, 0.01], (60, 2))  # gene "1" is rare
        >>> labels = {"sample_labels": np.repeat(list("abc"), 20), "group_labels": ["T"] * 60}
        >>> list(cytepool.from_cells(counts, **labels).filter_features().features.index)
        ['0']
        """
        return cube_of(
            _filters.filter_features(
                self._parts,
                min_count=min_count,
                min_total_count=min_total_count,
                large_n=large_n,
                min_prop=min_prop,
                group=group,
                layer=layer,
            )
        )

    def filter_by_prop(self, min_prop: float = 0.1, min_samples: float = 2) -> Cube:
        """Keep the features detected in enough cells of enough profiles.

        As decoupler's ``pp.filter_by_prop``, on each group's non-empty profiles, from the
        layer ``"detected"``: a feature passes in a group when it is detected in at least
        ``min_prop`` of the cells of at least ``min_samples`` profiles. The cube keeps the
        features that pass in any group. (``min_prop=0.1`` is the default of decoupler's
        ``pl.filter_by_prop``; its ``pp.filter_by_prop`` uses 0.2.)

        Parameters
        ----------
        min_prop
            The least fraction of a profile's cells in which the feature is > 0, in [0, 1].
        min_samples
            The least number of profiles of a group in which it is, >= 0.

        Returns
        -------
        Cube
            The cube of the features that pass in at least one group, in the cube's order
            (lazy, as :meth:`select`), with a provenance record ``"filter_by_prop"``.

        Raises
        ------
        TypeError
            For a threshold that is not a real number
            (:class:`~cytepool.errors.InputTypeError`).
        ValueError
            For a threshold out of range (:class:`~cytepool.errors.InputError`).
        KeyError
            Without a ``"detected"`` layer (:class:`~cytepool.errors.UnknownIdError`).

        Examples
        --------
        >>> import numpy as np
        >>> import cytepool
        >>> labels = {"sample_labels": list("aabb"), "group_labels": list("TTTT")}
        >>> cube = cytepool.from_cells(np.eye(4, 2), **labels, layers=("counts", "detected"))
        >>> list(cube.filter_by_prop(min_prop=0.5, min_samples=1).features.index)
        ['0', '1']
        >>> list(cube.filter_by_prop(min_prop=0.5, min_samples=2).features.index)
        []
        """
        return cube_of(_filters.filter_by_prop(self._parts, min_prop, min_samples))


def cube_of(parts: CubeParts) -> Cube:
    """The cube that wraps ``parts`` (the internal seam; see :mod:`cytepool._assemble`)."""
    cube = Cube.__new__(Cube)
    cube._parts = parts
    return cube


def parts_of(cube: Cube) -> CubeParts:
    """The parts a cube wraps (the internal seam; see :mod:`cytepool._assemble`)."""
    return cube._parts


# --------------------------------------------------------------------------- several cubes


def _check_cubes(cubes: Any, operation: str) -> list[Cube]:
    if isinstance(cubes, Cube) or not isinstance(cubes, Iterable):
        msg = f"{operation}: expected a sequence of cubes, found {type(cubes).__name__}"
        raise InputTypeError(msg)
    out = list(cubes)
    if not out:
        msg = f"{operation}: expected at least one cube"
        raise InputError(msg)
    for c in out:
        if not isinstance(c, Cube):
            msg = f"{operation}: expected cubes, found {type(c).__name__}"
            raise InputTypeError(msg)
    return out


def concat(cubes: Iterable[Cube], *, axis: Axis) -> Cube:
    """Join cubes along one axis, lazily.

    Parameters
    ----------
    cubes
        The cubes, with the same layers and data types.
    axis
        ``"samples"``, ``"groups"`` or ``"features"``. The ids along it must be unique over
        all the cubes; the other two axes must hold the same ids in every cube, and are
        aligned by id to the first cube's order (whose tables they keep).

    Returns
    -------
    Cube
        A cube whose layers are lazy. Cells are joined the same way (along ``"features"``
        they must be equal). The normalization is kept if every cube has the same method
        (along ``"features"``: the same factors).

    Raises
    ------
    TypeError
        If an input is not a cube, or a layer's data type differs between cubes.
    ValueError
        For an unknown axis, different layers or ids on the other axes, repeated ids along
        ``axis``, or normalizations that cannot be joined.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> import cytepool
    >>> def tiny(samples, value):
    ...     return cytepool.Cube(
    ...         {"counts": np.full((1, len(samples), 2), value)},
    ...         samples=pd.DataFrame({"sample_id": samples}),
    ...         groups=pd.DataFrame({"group_id": ["T"]}),
    ...         features=pd.DataFrame({"feature_id": ["a", "b"]}),
    ...         cells=[[1] * len(samples)],
    ...     )
    >>> both = cytepool.concat([tiny(["s1"], 1), tiny(["s2", "s3"], 2)], axis="samples")
    >>> both.profiles("T")
    array([[1, 1],
           [2, 2],
           [2, 2]])
    """
    if axis not in AXES:
        msg = f"concat: axis must be one of {list(AXES)}, found {axis!r}"
        raise InputError(msg)
    parts = [c._parts for c in _check_cubes(cubes, "concat")]
    return cube_of(_combine.concat(parts, axis))


def add(cubes: Iterable[Cube]) -> Cube:
    """Add cubes that share all three axes (two runs of the same libraries), lazily.

    Parameters
    ----------
    cubes
        The cubes, with the same layers and data types and the same sample, group and
        feature ids (aligned by id to the first cube's order, whose tables are kept).

    Returns
    -------
    Cube
        A cube whose layers are lazy sums (exact for integers) and whose cells are summed.
        The normalization is dropped (factors are not additive).

    Raises
    ------
    TypeError
        If an input is not a cube, or a layer's data type differs between cubes.
    ValueError
        For different layers or ids.

    Notes
    -----
    A sum that does not fit the layer's data type raises OverflowError naming the layer and
    group when it is read. Float sums add each value's terms in ascending order, so the order
    of the cubes does not change them (``add([a, b, c])`` equals ``add([c, a, b])``); for
    three cubes or more a read holds the block of every cube at once.

    Examples
    --------
    >>> import numpy as np
    >>> import pandas as pd
    >>> import cytepool
    >>> run = cytepool.Cube(
    ...     {"counts": np.array([[[1, 2]]], dtype="int32")},
    ...     samples=pd.DataFrame({"sample_id": ["s1"]}),
    ...     groups=pd.DataFrame({"group_id": ["T"]}),
    ...     features=pd.DataFrame({"feature_id": ["a", "b"]}),
    ...     cells=[[3]],
    ... )
    >>> total = cytepool.add([run, run])
    >>> total.profiles("T"), total.cells
    (array([[2, 4]], dtype=int32), array([[6]]))
    """
    return cube_of(_combine.add([c._parts for c in _check_cubes(cubes, "add")]))
