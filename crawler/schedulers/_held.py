"""The waiting rows of the hosts whose cap binds, kept from slot to slot with what ranks them.

Why it exists: under host caps ``bayes`` lets into each slot, of every held host's due
rows, the few that most likely changed since their last poll, ranked by ``rate * (slot -
last poll)``; the rest wait, due, for a later slot. Under the benchmark's heavy mix at a
million URLs about 30,000 rows wait so, one in about 33 of all rows, and nine in ten of
them waited in the slot before with the same rate and last poll. Gathering the rate, the
last poll and the host of rows that sparse reads nearly every cache line of what holds
them (the rates, 4 MB; the 24-byte statistics records with the last poll, 24 MB; the
hosts, 2 MB), which the slot's pass over the credits has just pushed out of the cache:
1.6-2.0 ms a slot for a ranking whose own work, on compact columns, is 0.2-0.4 ms (an AMD
EPYC with 32 MB of L3, 2026-11-29). ``HeldRows`` keeps the three columns of the waiting
rows, compact, and gathers only the newcomers' (about 2,500 a slot).

A kept row is good while its rate and last poll stand: the scheduler calls ``touch`` with
every row whose rate or last poll it writes (a poll's feedback, a baseline, a restarted
interval), and ``clear`` when it rewrites many at once (the unobserved rows' rate, an
addition, a removal, a restore, new groups). What the ranking reads is then exactly what
the full arrays hold (the picks are the same to the last row: tests/schedulers).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from crawler.schedulers._kernels import _compiled

IndexArray = NDArray[np.intp]


class HeldRows:
    """The rate, last poll and group of the rows that waited in held hosts at the last
    ranking, and which rows were touched since (one bit per row)."""

    def __init__(self) -> None:
        self.rows: IndexArray = np.empty(0, dtype=np.intp)
        self.rate: NDArray[np.float32] = np.empty(0, dtype=np.float32)
        self.last: NDArray[np.int32] = np.empty(0, dtype=np.int32)
        self.group: NDArray[Any] = np.empty(0, dtype=np.int16)
        self.touched: NDArray[np.uint8] = np.zeros(0, dtype=np.uint8)

    def clear(self) -> None:
        """Forget every kept row (their rates, last polls or groups may have moved)."""
        self.rows = np.empty(0, dtype=np.intp)
        self.rate = np.empty(0, dtype=np.float32)
        self.last = np.empty(0, dtype=np.int32)
        self.group = self.group[:0]
        self.touched[:] = 0

    def touch(self, rows: IndexArray) -> None:
        """Rows whose rate or last poll is about to change: not taken from the kept ones."""
        if self.rows.size and rows.size:
            mark_rows(self.touched, rows)

    @staticmethod
    def warm_up(group: NDArray[Any]) -> None:
        """Compile (or load from numba's cache) the kernels for ``group``'s type, on no rows."""
        none = np.empty(0, dtype=np.intp)
        rate, last = np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int32)
        touched = np.zeros(1, dtype=np.uint8)
        carry_rows(none, none, rate, last, group[:0], touched, rate, last, group[:0])
        mark_rows(touched, none)

    def columns(
        self,
        due: IndexArray,
        rate: NDArray[np.float32],
        last: NDArray[np.int32],
        group: NDArray[Any],
    ) -> tuple[NDArray[np.float32], NDArray[np.int32], NDArray[Any]]:
        """``rate[due]``, ``last[due]`` and ``group[due]`` for the waiting rows ``due``
        (ascending), the kept rows' from the kept columns; these become the kept ones."""
        bytes_needed = (rate.size + 7) // 8
        if self.touched.size != bytes_needed or self.group.dtype != group.dtype:
            self.touched = np.zeros(bytes_needed, dtype=np.uint8)
            self.clear()
            self.group = group[:0]
        kept = (self.rows, self.rate, self.last, self.group)
        out_rate, out_last, out_group = carry_rows(due, *kept, self.touched, rate, last, group)
        if self.rows.size:
            self.touched[:] = 0
        self.rows, self.rate, self.last, self.group = due, out_rate, out_last, out_group
        return out_rate, out_last, out_group


@_compiled
def mark_rows(touched: NDArray[np.uint8], rows: NDArray[np.intp]) -> None:
    """Set the bit of each of ``rows`` in ``touched`` (bit ``row & 7`` of byte ``row >> 3``)."""
    for j in range(rows.size):
        row = rows[j]
        touched[row >> 3] |= np.uint8(1 << (row & 7))


@_compiled
def carry_rows(
    due: NDArray[np.intp],
    kept_rows: NDArray[np.intp],
    kept_rate: NDArray[np.float32],
    kept_last: NDArray[np.int32],
    kept_group: NDArray[Any],
    touched: NDArray[np.uint8],
    rate: NDArray[np.float32],
    last: NDArray[np.int32],
    group: NDArray[Any],
) -> tuple[NDArray[np.float32], NDArray[np.int32], NDArray[Any]]:
    """The columns of rows ``due`` (ascending): a row among ``kept_rows`` (ascending) and
    not ``touched`` from the kept columns, any other from the full ones. One merge of the
    two sorted lists."""
    m = due.size
    out_rate = np.empty(m, dtype=np.float32)
    out_last = np.empty(m, dtype=np.int32)
    out_group = np.empty(m, dtype=group.dtype)
    k, kept = 0, kept_rows.size
    for j in range(m):
        row = due[j]
        while k < kept and kept_rows[k] < row:
            k += 1
        if k < kept and kept_rows[k] == row and not (touched[row >> 3] >> (row & 7)) & 1:
            out_rate[j] = kept_rate[k]
            out_last[j] = kept_last[k]
            out_group[j] = kept_group[k]
        else:
            out_rate[j] = rate[row]
            out_last[j] = last[row]
            out_group[j] = group[row]
    return out_rate, out_last, out_group
