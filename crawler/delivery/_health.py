"""Health events, decided from a slot's polls: pure (no I/O), the service's hook feeds it.

>>> judge = HealthJudge(HealthPolicy(failing_after=3, stopped_alpha=1e-4, min_changes=10))
>>> judge.restore({7: UrlHealth(last_change_slot=120, changes=12, alarmed=False)})
>>> events = judge.after_slot(slot, polls, streaks_before, rate_per_slot)

Decisions (docs/delivery.md, "Health events", has the operator's view):

- **page.failing** when a URL's streak of failed polls reaches ``failing_after`` (the
  streak is the failure record's, ``crawler/service/_failures.py``, which a restart
  restores): raised once, at the poll that makes the streak exactly N. **page.recovered**
  at the first successful poll of a URL whose streak had reached N (a URL that failed
  fewer times and came back raised nothing, so it recovers silently).
- **page.stopped_changing**: a one-sided test of the silence against the learned rate.
  Under a Poisson change process of rate λ the probability that a URL shows no change for
  a silence S is ``exp(-λ S)``; λ is the scheduler's, in changes per slot, and S is counted
  in slots (not seconds: a slot that overruns its nominal length lets the page change more
  per slot, and the rate learned per slot already says so); the alarm is raised when it
  falls below ``stopped_alpha``.
  The rate tested is the scheduler's estimate λ̂ shrunk to a lower confidence bound,
  ``λ̂ (1 - 2/√n)`` for n changes observed (the relative standard error of a rate counted
  from n events is 1/√n), so that an over-estimate of the rate does not turn an ordinary
  silence into an alarm. The silence is measured from the poll that *saw* the last change
  (later than the change itself) to the poll that tests it, and tests happen only at
  polls: both make the observed silence shorter than the true one, so the test is
  conservative. **False-alarm bound**: for a URL that still changes at rate λ, and
  whenever the tested rate is at most λ, the alarm of one silence spell (the time between
  two changes) is raised with probability at most α = ``stopped_alpha``: P(S > ln(1/α)/λ')
  = exp(-λ ln(1/α)/λ') ≤ α for λ' ≤ λ. An alarm is raised at most once per spell (until
  the URL changes again), so the expected false alarms of a URL are at most α per change
  it makes; a sequential test checked at every poll needs no correction for the number of
  looks because the event "the silence passed the threshold" is one event per spell.
  Chosen over a likelihood-ratio (SPRT) test against a lower rate: the alternative
  "stopped" has rate 0, against which the SPRT's statistic is exactly this silence
  probability, and a bound per spell is what an operator can read ("one false alarm per
  1/α changes").
- Only URLs with at least ``min_changes`` changes observed are tested (fewer is not
  evidence of a rate), and only with a scheduler that learns rates (``bayes``).
- State: the last change's slot, the changes counted and the alarm flag per URL; derived
  at start from stored columns (the newest ``changes.slot``, ``urls.hits``, and whether a
  ``page.stopped_changing`` event was written in or after that slot): see
  ``Store.health_state``. A URL whose changes were all pruned by the history's retention is
  tested again from its next change.
- **Clock**: the judge counts in slots of a clock its caller gives. One service: its slot
  numbers. A cluster, where each worker numbers its own slots: a global slot clock, wall
  time over ``slot_seconds`` (the same for every worker), with the rate converted to it and
  the state read by time (``Store.health_state_at``) at start and again for the URLs of
  each site a worker gains (``refresh``), so the worker that gains a site continues its
  test where the last one left it (``crawler/service/_health.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from crawler.delivery._events import PAGE_FAILING, PAGE_RECOVERED, PAGE_STOPPED_CHANGING
from crawler.store import HealthEvent, PollRecord


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    #: consecutive failed polls that raise page.failing
    failing_after: int = 3
    #: the largest probability of a silence spell that does not raise page.stopped_changing
    stopped_alpha: float = 1e-4
    #: changes observed before a URL's silence is tested
    min_changes: int = 10


@dataclass(slots=True)
class UrlHealth:
    """What the test needs of one URL (survives a restart through stored columns)."""

    #: on the judge's clock: a slot number (one service), or a cluster's global slot clock
    last_change_slot: float | None = None
    changes: int = 0
    alarmed: bool = False


def cautious_rate(rate: float, changes: int) -> float:
    """The learned rate shrunk to a lower confidence bound (two standard errors)."""
    if changes <= 0 or not math.isfinite(rate) or rate <= 0:
        return 0.0
    return rate * max(0.0, 1.0 - 2.0 / math.sqrt(changes))


def silence_probability(rate: float, silence: float) -> float:
    """P(no change in ``silence``) under a Poisson process of ``rate`` (same time unit)."""
    return math.exp(-max(0.0, rate) * max(0.0, silence))


class HealthJudge:
    """The health events of each slot; its state is restored from the store at start."""

    def __init__(self, policy: HealthPolicy) -> None:
        self.policy = policy
        self.urls: dict[int, UrlHealth] = {}

    def restore(self, state: Mapping[int, UrlHealth]) -> None:
        self.urls = dict(state)

    def refresh(self, url_ids: Iterable[int], state: Mapping[int, UrlHealth]) -> None:
        """Replace what is known of ``url_ids`` by ``state`` (read again: a URL polled by
        another worker meanwhile); a URL absent from ``state`` has no change stored."""
        for uid in url_ids:
            found = state.get(uid)
            if found is None:
                self.urls.pop(uid, None)
            else:
                self.urls[uid] = found

    def after_slot(
        self,
        slot: float,
        polls: Iterable[PollRecord],
        streaks_before: Mapping[int, int],
        rate_per_slot: Callable[[list[int]], dict[int, float]] | None,
    ) -> tuple[HealthEvent, ...]:
        """The events of slot ``slot``'s polls (``slot``: the judge's clock, in slots).
        ``streaks_before``: the failure streak of each failing URL before the slot;
        ``rate_per_slot``: the learned rates (changes per slot of that clock) of the URLs
        asked, or None when the scheduler learns none."""
        out: list[HealthEvent] = []
        n = self.policy.failing_after
        streaks: dict[int, int] = dict(streaks_before)
        candidates: list[PollRecord] = []
        for p in polls:
            was = streaks.get(p.url_id, 0)
            if p.outcome == "error":
                streaks[p.url_id] = was + 1
                if was + 1 == n:
                    out.append(_failing(p, n))
                continue
            streaks[p.url_id] = 0
            if was >= n:
                out.append(_recovered(p, was))
            h = self.urls.setdefault(p.url_id, UrlHealth())
            if p.outcome == "hit":
                h.last_change_slot, h.alarmed = slot, False
                h.changes += 1
            elif (
                not h.alarmed
                and h.last_change_slot is not None
                and h.changes >= self.policy.min_changes
            ):
                candidates.append(p)
        if candidates and rate_per_slot is not None:
            rates = rate_per_slot([p.url_id for p in candidates])
            for p in candidates:
                h = self.urls[p.url_id]
                assert h.last_change_slot is not None
                lam = cautious_rate(rates.get(p.url_id, math.nan), h.changes)
                silence = slot - h.last_change_slot
                prob = silence_probability(lam, silence)
                if lam > 0 and prob < self.policy.stopped_alpha:
                    h.alarmed = True
                    out.append(_stopped(p, h, lam, silence, prob, self.policy.stopped_alpha))
        return tuple(out)


def _failing(p: PollRecord, n: int) -> HealthEvent:
    return HealthEvent(
        PAGE_FAILING,
        p.url_id,
        p.polled_at,
        {
            "detected_at": p.polled_at.isoformat(),
            "consecutive_failures": n,
            "status": p.status,
            "error_kind": p.error_kind,
            "error": p.error,
        },
    )


def _recovered(p: PollRecord, streak: int) -> HealthEvent:
    return HealthEvent(
        PAGE_RECOVERED,
        p.url_id,
        p.polled_at,
        {"detected_at": p.polled_at.isoformat(), "failed_polls": streak, "status": p.status},
    )


def _stopped(
    p: PollRecord, h: UrlHealth, rate: float, silence: float, prob: float, alpha: float
) -> HealthEvent:
    return HealthEvent(
        PAGE_STOPPED_CHANGING,
        p.url_id,
        p.polled_at,
        {
            "detected_at": p.polled_at.isoformat(),
            "last_change_slot": h.last_change_slot,
            "silent_slots": silence,
            "cautious_rate_per_slot": rate,
            "expected_interval_slots": 1.0 / rate,
            "changes_observed": h.changes,
            "probability": prob,
            "alpha": alpha,
        },
    )
