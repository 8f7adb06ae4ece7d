"""What the constrained optimum respects, validated (``Limits``: host groups per URL, bounds
sparse, only for the bounded URLs), and what it returns (``Constrained``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
IdArray = NDArray[np.int64]
IndexArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class Constrained:
    """The constrained optimum: ``x`` and what binds.

    ``level``: the global multiplier (0 when the budget does not bind: the caps and upper
    bounds leave part of it unused). ``groups``: the distinct group labels, sorted;
    ``group_level``: each group's own level (0 where its cap cannot bind);
    ``binding``: whether each group's cap binds at the optimum (its URLs are held below
    what the global multiplier alone would give them). ``feasible``: False when the lower
    bounds did not fit in a cap or in the budget (they were then scaled down, see
    ``solve_constrained``)."""

    x: FloatArray
    level: float
    groups: IdArray
    group_level: FloatArray
    binding: BoolArray
    feasible: bool


#: from this many query rows on, membership in a sorted set of rows is looked up in a
#: bitmap first (n / 8 bytes, built once per set): the binary search of every query row
#: was the largest single cost of a constrained slot at a million URLs
BITMAP_FROM = 256


def row_bits(rows: IndexArray, n: int) -> NDArray[np.uint8]:
    """A bitmap of rows 0 .. n - 1 with ``rows`` set."""
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    bits: NDArray[np.uint8] = np.packbits(mask, bitorder="little")
    return bits


def in_bits(bits: NDArray[np.uint8], rows: IndexArray) -> BoolArray:
    """Whether each row is set in a bitmap of ``row_bits``."""
    found: BoolArray = ((bits[rows >> 3] >> (rows & 7)) & 1).astype(bool)
    return found


def group_dtype(n_groups: int) -> type[np.signedinteger]:
    """The narrowest signed integer type that holds group indices 0..n_groups - 1 and -1:
    at 25,000 hosts a URL's group costs 2 bytes instead of 8."""
    for dtype in (np.int8, np.int16, np.int32):
        if n_groups <= np.iinfo(dtype).max:
            return dtype
    return np.int64


@dataclass(frozen=True)
class Limits:
    """Host groups with caps and per-URL bounds, validated.

    ``group``: per URL the index into ``labels`` (-1: no group), in the narrowest signed
    integer type that holds it; ``cap``: per group the cap in polls per slot (inf: none).
    The bounds are sparse: ``rows`` (sorted) are the URLs with a bound (lower > 0 or
    upper < 1) and ``row_lower``/``row_upper`` theirs; every other URL is in [0, 1]. A
    million URLs of which 1% are bounded hold 2-4 bytes per URL here, not 24; ``lower`` and
    ``upper`` build the dense arrays when asked (O(n), not kept)."""

    group: NDArray[np.signedinteger]
    labels: IdArray
    cap: FloatArray
    rows: IndexArray
    row_lower: FloatArray
    row_upper: FloatArray

    @classmethod
    def build(
        cls,
        n: int,
        groups: ArrayLike | None = None,
        caps: Mapping[int, float] | None = None,
        lower: ArrayLike | None = None,
        upper: ArrayLike | None = None,
    ) -> Limits:
        """Check and convert the constraints of n URLs (ValueError when malformed)."""
        if groups is None:
            group: NDArray[np.signedinteger] = np.full(n, -1, dtype=np.int8)
            labels: IdArray = np.empty(0, dtype=np.int64)
        else:
            raw = np.asarray(groups)
            if raw.shape != (n,) or (raw.size and not np.issubdtype(raw.dtype, np.integer)):
                raise ValueError("groups must be one integer label per URL (-1: no group)")
            raw = raw.astype(np.int64)
            if np.any(raw < -1):
                raise ValueError("group labels must be >= 0 (or -1 for no group)")
            labels = np.unique(raw[raw >= 0])
            group = np.full(n, -1, dtype=group_dtype(labels.size))
            grouped = raw >= 0
            group[grouped] = np.searchsorted(labels, raw[grouped])
        cap = np.full(labels.size, np.inf)
        for label, value in (caps or {}).items():
            v = float(value)
            if not (v > 0) or math.isnan(v):
                raise ValueError(f"the cap of group {label} must be positive, got {value!r}")
            at = int(np.searchsorted(labels, int(label)))
            if at < labels.size and labels[at] == int(label):
                cap[at] = v
        lo = _bound(lower, n, 0.0, "lower")
        hi = _bound(upper, n, 1.0, "upper")
        if np.any(lo > hi):
            raise ValueError("every lower bound must be at most its upper bound")
        rows = np.flatnonzero((lo > 0) | (hi < 1))
        return cls(group, labels, cap, rows, lo[rows], hi[rows])

    @property
    def n(self) -> int:
        return int(self.group.size)

    @property
    def lower(self) -> FloatArray:
        """Every URL's lower bound (a dense array built on each call)."""
        out = np.zeros(self.n)
        out[self.rows] = self.row_lower
        return out

    @property
    def upper(self) -> FloatArray:
        """Every URL's upper bound (a dense array built on each call)."""
        out = np.ones(self.n)
        out[self.rows] = self.row_upper
        return out

    def bounds_of(self, rows: IndexArray) -> tuple[FloatArray, FloatArray]:
        """The lower and upper bounds of some rows (by binary search in the bounded ones;
        for a slot's many rows only those that the bitmap of the bounded rows holds)."""
        lo, hi = np.zeros(rows.size), np.ones(rows.size)
        if self.rows.size and rows.size:
            if rows.size >= BITMAP_FROM:
                inside = np.flatnonzero(in_bits(self._bits, rows))
                at = np.searchsorted(self.rows, rows[inside])
                lo[inside], hi[inside] = self.row_lower[at], self.row_upper[at]
                return lo, hi
            at = np.minimum(np.searchsorted(self.rows, rows), self.rows.size - 1)
            hit = self.rows[at] == rows
            lo[hit], hi[hit] = self.row_lower[at[hit]], self.row_upper[at[hit]]
        return lo, hi

    @cached_property
    def _bits(self) -> NDArray[np.uint8]:
        return row_bits(self.rows, self.n)

    @property
    def bounded(self) -> tuple[NDArray[np.uint8], IndexArray, FloatArray, FloatArray]:
        """The bounds for a compiled loop: the bitmap of the bounded rows (``row_bits``;
        built at the first call, then kept), the bounded rows, their lower and upper
        bounds."""
        return self._bits, self.rows, self.row_lower, self.row_upper

    @property
    def constrained(self) -> bool:
        """Whether anything here can bind (a finite cap, a lower bound > 0 or upper < 1)."""
        return bool(np.isfinite(self.cap).any() or self.rows.size)


def _bound(values: ArrayLike | None, n: int, default: float, what: str) -> FloatArray:
    if values is None:
        return np.full(n, default)
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(f"{what} bounds must have one value per URL")
    if not np.all(np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise ValueError(f"{what} bounds must be polls per slot in [0, 1]")
    return arr
