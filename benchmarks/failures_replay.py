"""The live failures run replayed on the scheduler alone: what pages back from an outage get.

    python -m benchmarks.failures_replay               # 8 seeds
    python -m benchmarks.failures_replay --seeds 20

``benchmarks/failures_live.py`` runs the service for minutes per figure; this replays its
plan on ``bayes`` directly, in a second per seed: 50 pages of Zipf(0.6, 1.0) change
probabilities, C = 3 polls per slot; from slot 150 five pages fail (``FAILURES``: two 404,
one 410, two time-outs); at slot 800 (the slot the live test revives them at) one timed-out
page answers again by itself and the operator revives the retired (410) one; then 450
slots. The same seed's run without failures is
the reference. Reported per page back: its polls in those 450 slots and its learned change
probability at the end, with and without the failures, over the seeds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence

import numpy as np

from benchmarks.failures_live import BACK_BY_ITSELF as BY_ITSELF
from benchmarks.failures_live import BACK_BY_OPERATOR as BY_OPERATOR
from benchmarks.failures_live import FAILURES
from crawler import schedulers
from crawler.schedulers import FailureKind, classify_failure
from crawler.schedulers.bayes import BayesRate
from crawler.testsite import zipf_rates

#: each failing page's kind as the service classifies its answers
KINDS: dict[int, FailureKind] = {
    page: classify_failure(error="timeout") if how == "timeout" else classify_failure(int(how))
    for page, how in FAILURES.items()
}
#: as tests/service/test_failures_live.py runs it: learn 150, settle 250, measure 400, 450 on
LEARN, BACK, AFTER = 150, 800, 450


def replay(seed: int, failures: bool) -> tuple[dict[int, int], dict[int, float]]:
    """One run: each back page's polls after ``BACK`` and its learned rate at the end."""
    p = zipf_rates(50, 0.6, 1.0)
    rng = np.random.default_rng(seed)
    s = schedulers.create("bayes", capacity=3.0, seed=seed)
    s.add(np.arange(1, 51))
    s.set_failure_floor(1 / 200)  # failures_live's back-off stops at a poll every 200 slots
    version = np.zeros(51, dtype=np.int64)
    seen: dict[int, int] = {}
    polls = {BY_ITSELF: 0, BY_OPERATOR: 0}
    for slot in range(1, BACK + AFTER + 1):
        version[1:] += rng.random(50) < p
        good: list[int] = []
        hits: list[bool] = []
        bad: list[int] = []
        for uid in s.select().tolist():
            back = slot > BACK and uid in polls
            if failures and uid in KINDS and slot >= LEARN and not back:
                bad.append(uid)
                continue
            if uid in seen:
                good.append(uid)
                hits.append(bool(version[uid] != seen[uid]))
            seen[uid] = int(version[uid])
            if back:
                polls[uid] += 1
        if good:
            s.feedback(good, hits)
        if bad:
            s.report_failures(bad, [KINDS[u] for u in bad])
        if failures and slot == BACK:
            s.revive([BY_OPERATOR])
    assert isinstance(s, BayesRate)
    ids, rates = s.rates()
    learned = dict(zip(ids.tolist(), rates.tolist(), strict=True))
    return polls, {k: learned[k] for k in polls}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args(argv)
    rows: dict[tuple[int, bool], list[tuple[int, float]]] = {}
    for seed in range(args.seeds):
        for failures in (False, True):
            polls, rates = replay(seed, failures)
            for page in polls:
                rows.setdefault((page, failures), []).append((polls[page], rates[page]))
        print(f"seed {seed} done", file=sys.stderr, flush=True)
    truth = zipf_rates(50, 0.6, 1.0)
    print(f"{args.seeds} seeds; polls in the {AFTER} slots after slot {BACK}, learned p at the end")
    print()
    print("| page | true p | run | polls (median) | range | learned p (median) |")
    print("|---|---:|---|---:|---|---:|")
    for page, how in ((BY_ITSELF, "back by itself"), (BY_OPERATOR, "revived by the operator")):
        for failures in (False, True):
            got = rows[(page, failures)]
            counts = [c for c, _ in got]
            run = f"failed, {how}" if failures else "no failures"
            print(
                f"| {page} | {truth[page - 1]:.3f} | {run} | {statistics.median(counts):g} "
                f"| {min(counts)}-{max(counts)} | {statistics.median(r for _, r in got):.3f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
