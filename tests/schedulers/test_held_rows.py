"""The waiting rows of held hosts, kept from slot to slot, rank exactly as the full arrays do.

``bayes`` keeps the rate, last poll and host of the rows that wait in hosts held at their
cap (``_held.HeldRows``), so that the next slot gathers only the newcomers'. A kept value
that went stale would rank a row by an old rate or an old last poll: these tests compare
the kept columns with the full arrays, and a scheduler that keeps them with one that
gathers every row in every slot, through the operations that move rates, last polls and
groups (feedback, failures, a pause, additions, removals, new groups, new caps, a restore).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from crawler import schedulers
from crawler.schedulers import bayes
from crawler.schedulers._held import HeldRows


def test_kept_columns_are_the_full_arrays_through_touches_and_clears() -> None:
    rng = np.random.default_rng(7)
    n = 5_000
    rate = rng.random(n).astype(np.float32)
    last = rng.integers(0, 100, n).astype(np.int32)
    group = rng.integers(-1, 40, n).astype(np.int16)
    held = HeldRows()
    kept_some = 0
    for step in range(60):
        # about nine in ten of the last waiting rows wait again, a few newcomers join
        stay = held.rows[rng.random(held.rows.size) < 0.9]
        due = np.union1d(stay, rng.choice(n, 300, replace=False)).astype(np.intp)
        rate_c, last_c, group_c = held.columns(due, rate, last, group)
        np.testing.assert_array_equal(rate_c, rate[due])
        np.testing.assert_array_equal(last_c, last[due])
        np.testing.assert_array_equal(group_c, group[due])
        kept_some += int(np.isin(stay, due).sum())
        # the scheduler's writes: touched rows change, and so does every row at a clear
        moved = rng.choice(n, 200, replace=False).astype(np.intp)
        held.touch(moved)
        rate[moved] = rng.random(moved.size).astype(np.float32)
        last[moved] = step + 100
        if step % 17 == 16:
            held.clear()
            rate[:] = rng.random(n).astype(np.float32)
            group[:] = rng.integers(-1, 40, n).astype(np.int16)
    assert kept_some > 10_000  # the kept columns were used, not only gathered


class _GatherEveryRow(HeldRows):
    """The plain form: every waiting row's columns read from the full arrays."""

    def columns(self, due: Any, rate: Any, last: Any, group: Any) -> Any:
        return rate[due], last[due], group[due]


def _run(monkeypatch: pytest.MonkeyPatch, plain: bool) -> tuple[list[bytes], int]:
    if plain:
        monkeypatch.setattr(bayes, "HeldRows", _GatherEveryRow)
    # between scheduled solves, the relevel (as at a million URLs), not a solve every slot:
    # a solve refreshes the unobserved rows' rate and so clears the kept rows each time
    monkeypatch.setattr(bayes, "RELEVEL_FROM", 1_000)
    rng = np.random.default_rng(11)
    n, hosts = 3_000, 80
    ids = np.arange(n, dtype=np.int64)
    s = schedulers.create("bayes", capacity=n / 50, seed=4)
    s.add(ids)
    share = 1.0 / np.arange(1, hosts + 1)
    s.set_groups(ids, rng.choice(hosts, size=n, p=share / share.sum()))
    s.set_group_caps({h: 1.5 for h in range(hosts)})
    picks, most_kept, seen = [], 0, set()
    for slot in range(75):
        chosen = s.select()
        picks.append(chosen.tobytes())
        assert isinstance(s, bayes.BayesRate)
        most_kept = max(most_kept, s._held_rows.rows.size)
        hits = rng.random(chosen.size) < 0.3
        if slot % 4 == 1:  # some polls fail; their next good answer restarts the interval
            s.report_failures(chosen[:10], "transient")
            chosen, hits = chosen[10:], hits[10:]
        # as in the service, a URL's first answer is its baseline: nothing to compare with
        answered = np.isin(chosen, list(seen))
        seen.update(chosen.tolist())
        s.feedback(chosen[answered], hits[answered])
        if slot == 30:
            s.pause(chosen[:5])
        elif slot == 40:
            new = np.arange(n, n + 300, dtype=np.int64)
            s.add(new)
            s.set_groups(new, rng.integers(0, hosts, new.size))
        elif slot == 50:
            gone = rng.choice(n, 200, replace=False)
            s.remove(ids[gone])
            ids = np.delete(ids, gone)
        elif slot == 60:
            s.set_groups(ids[:300], rng.integers(0, hosts, 300))
            s.set_group_caps({0: 2.5, 1: 0.8})
        elif slot == 65:
            s = schedulers.restore(s.state())
    return picks, most_kept


def test_a_scheduler_keeping_the_waiting_rows_selects_as_one_gathering_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kept_picks, most_kept = _run(monkeypatch, plain=False)
    plain_picks, _ = _run(monkeypatch, plain=True)
    assert most_kept > 100, "no rows waited in a held host: the test exercises nothing"
    differ = [i for i, (a, b) in enumerate(zip(kept_picks, plain_picks, strict=True)) if a != b]
    assert not differ, (
        f"keeping the waiting rows' columns changed the picks in slots {differ[:5]}: a write "
        "to bayes's rates or last polls that does not touch HeldRows, or a rewrite of many "
        "rows that does not clear it"
    )
