"""The generalization lattice ``L = L_1 × ... × L_k`` of §II-A and the counts ``|ρ(x, Θ)|``.

For a record ``a`` the chain product ``a^+`` is indexed by a *level vector* ``ℓ ∈ Π{0..h_i}``:
``x = (anc_i(a_i, ℓ_i))_i``. The join of two elements of ``a^+`` is the componentwise max of
their level vectors and the meet the componentwise min (:func:`join`, :func:`meet`), and the
set of level vectors is the same for every record, so one pass over the ``Π(h_i+1)`` level
vectors evaluates every record's whole chain product at once.

``|ρ(x, Θ)|`` (records of Θ that ``x`` generalizes) for ``x ∈ a^+`` at level vector ``ℓ`` is
the size of ``a``'s equivalence class when Θ is generalized to ``ℓ``. :func:`iter_class_sizes`
computes it for all records and all level vectors by a depth-first walk over the attributes:
the class id of a prefix of attributes is refined with the next attribute's code by a dense
``bincount`` relabelling (no sorting, no per-record Python loop), so a level vector costs
``O(m + classes·|L_i|)`` for ``m`` distinct records.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from searchveil.tabular.hierarchy import EncodedTable, Hierarchy

__all__ = [
    "Lattice",
    "join",
    "meet",
    "DistinctRecords",
    "distinct_records",
    "iter_class_sizes",
    "class_sizes_at",
    "meet_levels",
    "refine_classes",
]


def join(x: npt.ArrayLike, y: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Least upper bound of two elements of a chain product (level vectors)."""
    return np.maximum(np.asarray(x, np.int64), np.asarray(y, np.int64))


def meet(x: npt.ArrayLike, y: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Greatest lower bound of two elements of a chain product (level vectors)."""
    return np.minimum(np.asarray(x, np.int64), np.asarray(y, np.int64))


@dataclass(frozen=True)
class Lattice:
    """The product of chains ``Π{0..h_i}`` (level vectors), enumerated lexicographically."""

    heights: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod([h + 1 for h in self.heights], dtype=np.int64))

    def levels(self) -> npt.NDArray[np.int64]:
        """All level vectors, ``(size, k)``, in lexicographic order (index = mixed radix)."""
        if not self.heights:
            return np.zeros((1, 0), dtype=np.int64)
        grids = np.meshgrid(*[np.arange(h + 1) for h in self.heights], indexing="ij")
        return np.stack([g.ravel() for g in grids], axis=1).astype(np.int64)

    def index(self, level: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Mixed-radix index of level vector(s)."""
        lv = np.asarray(level, np.int64)
        idx = np.zeros(lv.shape[:-1], np.int64)
        for i, h in enumerate(self.heights):
            idx = idx * (h + 1) + lv[..., i]
        return idx

    def up_neighbours(self, level: npt.ArrayLike) -> list[tuple[int, ...]]:
        lv = [int(v) for v in np.asarray(level)]
        return [
            tuple(lv[:i] + [lv[i] + 1] + lv[i + 1 :])
            for i, h in enumerate(self.heights)
            if lv[i] < h
        ]

    def down_neighbours(self, level: npt.ArrayLike) -> list[tuple[int, ...]]:
        lv = [int(v) for v in np.asarray(level)]
        return [tuple(lv[:i] + [lv[i] - 1] + lv[i + 1 :]) for i in range(len(lv)) if lv[i] > 0]


@dataclass(frozen=True)
class DistinctRecords:
    """Distinct quasi-identifier tuples of a table: ``leaves`` (``(m, k)``), ``count`` (records
    per tuple) and ``inverse`` (row → tuple)."""

    leaves: npt.NDArray[np.int32]
    count: npt.NDArray[np.int64]
    inverse: npt.NDArray[np.int64]

    @property
    def m(self) -> int:
        return int(self.leaves.shape[0])


def distinct_records(leaves: npt.NDArray[np.int32]) -> DistinctRecords:
    if leaves.shape[0] == 0:
        return DistinctRecords(leaves, np.zeros(0, np.int64), np.zeros(0, np.int64))
    u, inv, cnt = np.unique(leaves, axis=0, return_inverse=True, return_counts=True)
    return DistinctRecords(
        u.astype(np.int32), cnt.astype(np.int64), inv.reshape(-1).astype(np.int64)
    )


def refine_classes(
    pid: npt.NDArray[np.int64], n_pid: int, code: npt.NDArray[np.int64], n_code: int
) -> tuple[npt.NDArray[np.int64], int]:
    """Refine class ids ``pid`` (``n_pid`` classes) by a code column: dense new ids and their
    number (a bincount relabelling, no sort)."""
    return _refine(pid, n_pid, code, n_code)


def _refine(
    pid: npt.NDArray[np.int64], n_pid: int, code: npt.NDArray[np.int64], n_code: int
) -> tuple[npt.NDArray[np.int64], int]:
    key = pid * n_code + code
    present = np.bincount(key, minlength=n_pid * n_code) > 0
    dense = np.cumsum(present) - 1
    return dense[key], int(present.sum())


def iter_class_sizes(
    leaves: npt.NDArray[np.int32],
    weights: npt.NDArray[np.int64],
    hierarchies: tuple[Hierarchy, ...] | list[Hierarchy],
) -> Iterator[tuple[int, npt.NDArray[np.int64]]]:
    """Yield ``(lattice index, sizes)`` for every level vector in lexicographic order, where
    ``sizes[j] = Σ weights[r]`` over rows ``r`` whose generalization at that level vector
    equals row ``j``'s (``|ρ(x, Θ)|`` when the weights are Θ's multiplicities; rows of the
    released table that are not in Θ get weight 0)."""
    k = len(hierarchies)
    m = leaves.shape[0]
    w = np.asarray(weights, np.float64)
    if k == 0:
        yield 0, np.full(m, int(w.sum()), np.int64)
        return
    codes = [
        [h.codes[leaves[:, i], lv].astype(np.int64) for lv in range(h.height + 1)]
        for i, h in enumerate(hierarchies)
    ]
    ncodes = [[len(h.labels[lv]) for lv in range(h.height + 1)] for h in hierarchies]
    heights = [h.height for h in hierarchies]
    # stack[i] = (pid, n_pid) after refining with attributes < i
    stack: list[tuple[npt.NDArray[np.int64], int]] = [(np.zeros(m, np.int64), 1)]
    prev: tuple[int, ...] | None = None
    for idx, lv in enumerate(itertools.product(*[range(h + 1) for h in heights])):
        start = 0
        if prev is not None:
            while lv[start] == prev[start]:
                start += 1
        del stack[start + 1 :]
        for i in range(start, k - 1):
            pid, n_pid = stack[i]
            stack.append(_refine(pid, n_pid, codes[i][lv[i]], ncodes[i][lv[i]]))
        pid, n_pid = stack[k - 1]
        key = pid * ncodes[k - 1][lv[k - 1]] + codes[k - 1][lv[k - 1]]
        sizes = np.bincount(key, weights=w, minlength=int(key.max()) + 1 if m else 0)[key]
        prev = lv
        yield idx, np.rint(sizes).astype(np.int64)


def class_sizes_at(
    leaves: npt.NDArray[np.int32],
    weights: npt.NDArray[np.int64],
    hierarchies: tuple[Hierarchy, ...] | list[Hierarchy],
    level: npt.ArrayLike,
) -> npt.NDArray[np.int64]:
    """Class sizes at one level vector (see :func:`iter_class_sizes`)."""
    lv = [int(v) for v in np.asarray(level)]
    m = leaves.shape[0]
    pid, n_pid = np.zeros(m, np.int64), 1
    for i, h in enumerate(hierarchies):
        pid, n_pid = _refine(
            pid, n_pid, h.codes[leaves[:, i], lv[i]].astype(np.int64), len(h.labels[lv[i]])
        )
    return np.bincount(pid, weights=np.asarray(weights, np.float64))[pid].round().astype(np.int64)


def meet_levels(
    a: npt.NDArray[np.int32], others: npt.NDArray[np.int32], hierarchies: tuple[Hierarchy, ...]
) -> npt.NDArray[np.int64]:
    """For record ``a`` (leaf indices) and rows ``others``: the lowest level per attribute at
    which the two values share an ancestor, so ``t ∈ ρ(x)`` for ``x ∈ a^+`` iff
    ``meet_levels ≤ ℓ(x)`` componentwise (the basis of Prop. 2(i))."""
    out = np.empty(others.shape, np.int64)
    for i, h in enumerate(hierarchies):
        same = h.codes[others[:, i], :] == h.codes[a[i], :][None, :]
        out[:, i] = np.argmax(same, axis=1)  # the root always matches
    return out


def table_records(table: EncodedTable) -> DistinctRecords:
    return distinct_records(table.leaves)
