"""Failures live: 10% of a site's URLs fail mid-run (404, 410, timeouts).

The real service over loopback HTTP, twice with the same seeds (one site tick per slot, so
both runs see the same changes): without failures, and with 5 of 50 pages failing from
slot 150 on. The figures are ``benchmarks/failures_live.py``'s (docs/results.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.failures_live import BACK_BY_ITSELF, BACK_BY_OPERATOR, compare, run
from crawler.store import Store


@pytest.mark.slow
async def test_failing_urls_lose_their_polls_and_the_good_ones_keep_their_rates(
    tmp_path: Path,
) -> None:
    outcomes = []
    for failures in (False, True):
        url = f"sqlite:///{tmp_path / f'{failures}.db'}"
        with Store(url) as store:
            store.upgrade()
        outcomes.append(await run(url, failures=failures, settle=250, measure=400, after=450))
    good, bad = outcomes
    # the same pages took about 12% of the polls while good (measured 12.6%)
    assert good.failing_share > 0.05
    # after a settling time of 250 slots they take < 1% (measured 0.2%)
    assert bad.polls_in_window > 1000
    assert bad.failing_share < 0.01
    # the good URLs' learned change probabilities are those of the run without failures,
    # within the noise of estimation (measured: median relative difference 0.10, the same
    # mean absolute error against the truth, 0.0072 and 0.0074)
    diff = compare(good, bad)
    assert diff["median_rel_diff"] < 0.3
    assert diff["mae_with_failures"] < 1.5 * diff["mae_without_failures"] + 0.002
    # a timed-out page that answers again is polled again and revived by itself; a retired
    # (410) one is polled again at once once the operator revives it; both keep being polled
    # (measured 17-18 and 12-13 polls in the 450 slots; 11 and 1-6 when the first answer
    # after the failures was learned as one change over the whole gap)
    assert bad.back_after[BACK_BY_ITSELF] is not None
    assert bad.back_after[BACK_BY_OPERATOR] is not None
    assert bad.back_after[BACK_BY_OPERATOR] <= 20
    assert bad.polls_after_back.get(BACK_BY_ITSELF, 0) >= 1
    assert bad.polls_after_back.get(BACK_BY_OPERATOR, 0) >= 2
