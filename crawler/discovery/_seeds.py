"""Which start page to poll next: a bandit over a source's start pages (no I/O).

With 50 section pages as start pages and 10 discovery polls per slot, the weblog's start list
(its 10 best URLs, drawn uniformly) learns too slowly which 5 sections gain new pages: measured
over HTTP (``benchmarks/discovery_http.py``), 78-84% of the new pages were found within 5
slots (99-100% with this bandit and paths of the start page alone). A section that gains pages at a
steady rate is a Poisson process, and the question each poll answers is "how many new links
wait on this page now?", so the choice is made the way a re-polling scheduler makes it:

- each start page has a Gamma posterior over its rate of *yield* per slot (new pages found on
  paths that started there, plus "lastmod moved" hints read there), from a weak prior
  (``prior_yield`` = 0.1 over ``prior_slots`` = 2 slots; measured with the benchmark on 3
  sites: a prior of 0.5 gave the 5 paying sections 33% of the polls and a mean delay of 0.97
  slots, 0.25 gave 37% and 0.87, 0.1 gave 43% and 0.76, all finding 98-100% within 5 slots);
- its priority is a rate drawn from that posterior (Thompson sampling: exploration where the
  posterior is wide) times the slots since it was last polled: the expected number of new
  links waiting;
- a page never polled comes first (each is tried once), a page hinted by a moved ``lastmod``
  comes before everything else, and a page polled in this slot is never chosen again in it.

An unproductive page's rate falls as 1/slots observed, so it is polled at growing intervals
(geometrically, about log(slots) times in all) and is still seen again if it starts to pay.
``min_yield`` > 0 lets a poll be skipped when no page is expected to hold that many new links
(the budget not spent is the download not wasted).

``policy="round_robin"`` is the baseline without learning: the page polled longest ago first
(a breadth-first re-crawl of the start pages, each in turn).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable


class SeedBandit:
    """Thompson sampling over start pages, with "moved" hints first."""

    def __init__(
        self,
        seeds: Iterable[str],
        *,
        prior_yield: float = 0.1,
        prior_slots: float = 2.0,
        rng: random.Random | None = None,
        policy: str = "thompson",
    ) -> None:
        if prior_yield <= 0 or prior_slots <= 0:
            raise ValueError("the prior must be positive")
        if policy not in ("thompson", "round_robin"):
            raise ValueError(f"unknown policy {policy!r}")
        self.policy = policy
        self._order: dict[str, int] = {}
        self._sequence: dict[str, int] = {}  # the poll number of each page's last poll
        self.prior_yield = prior_yield
        self.prior_slots = prior_slots
        self.rng = rng if rng is not None else random.Random(0)
        self.seeds: list[str] = []
        self.yields: dict[str, float] = {}
        self.exposure: dict[str, float] = {}
        self.last: dict[str, int | None] = {}
        self.added: dict[str, int] = {}
        self.hinted: set[str] = set()
        self.polls: Counter[str] = Counter()
        for seed in seeds:
            self.add(seed, 0)

    def add(self, seed: str, slot: int) -> bool:
        """A start page (False if it already was one)."""
        if seed in self.yields:
            return False
        self._order[seed] = len(self.seeds)
        self.seeds.append(seed)
        self.yields[seed] = 0.0
        self.exposure[seed] = 0.0
        self.last[seed] = None
        self.added[seed] = slot
        return True

    def hint(self, seed: str) -> None:
        """The site says this page changed: poll it first."""
        if seed in self.yields:
            self.hinted.add(seed)

    def rate(self, seed: str) -> float:
        """The posterior mean yield per slot."""
        return (self.prior_yield + self.yields[seed]) / (self.prior_slots + self.exposure[seed])

    def priority(self, seed: str, slot: int) -> float:
        if seed in self.hinted:
            return math.inf
        last = self.last[seed]
        if self.policy == "round_robin":  # in turn: the one polled longest ago first
            polled = self._sequence.get(seed)
            return float(len(self.seeds) - self._order[seed] if polled is None else -polled)
        if last is None:
            return 1e12 + self.rng.random()  # untried: each once, in random order
        shape = self.prior_yield + self.yields[seed]
        scale = 1.0 / (self.prior_slots + self.exposure[seed])
        return self.rng.gammavariate(shape, scale) * (slot - last)

    def choose(self, slot: int, exclude: set[str] | frozenset[str] = frozenset()) -> str | None:
        """The start page with the highest priority (None if all are excluded)."""
        best: str | None = None
        best_priority = -math.inf
        for seed in self.seeds:
            if seed in exclude:
                continue
            p = self.priority(seed, slot)
            if p > best_priority:
                best, best_priority = seed, p
        self.best_priority = best_priority
        return best

    best_priority: float = 0.0

    def polled(self, seed: str, slot: int) -> None:
        """The page was fetched as the start of a path in this slot."""
        if seed not in self.yields:
            return
        last = self.last[seed]
        since = self.added[seed] if last is None else last
        self.exposure[seed] += max(slot - since, 1 if last is None else 0)
        self.last[seed] = slot
        self.hinted.discard(seed)
        self.polls[seed] += 1
        self._sequence[seed] = sum(self.polls.values())

    def credit(self, seed: str, amount: float = 1.0) -> None:
        """A new page (or a moved hint) found on a path that started at ``seed``."""
        if seed in self.yields:
            self.yields[seed] += amount

    def state(self) -> dict[str, list[float]]:
        """What was learned, to be saved: per start page [yield, slots observed, polls]."""
        return {s: [self.yields[s], self.exposure[s], float(self.polls[s])] for s in self.seeds}

    def restore(self, state: dict[str, object], slot: int) -> int:
        """Take back a saved :meth:`state` (start pages not in it are left as they are;
        malformed entries are skipped); a restored page counts as polled one slot ago.
        Returns how many pages were restored."""
        restored = 0
        for seed, values in state.items():
            if seed not in self.yields or not isinstance(values, list) or len(values) != 3:
                continue
            if not all(isinstance(v, int | float) and v >= 0 for v in values):
                continue
            self.yields[seed] = float(values[0])
            self.exposure[seed] = float(values[1])
            self.polls[seed] = int(values[2])
            self.last[seed] = slot - 1
            restored += 1
        return restored

    def shares(self) -> dict[str, float]:
        """Each start page's share of the polls so far."""
        total = sum(self.polls.values())
        return {s: self.polls[s] / total for s in self.seeds} if total else {}
