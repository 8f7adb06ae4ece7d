"""Foragers and the reinforcing agent (*Selection in Scale-Free Small World*, §3.2-3.3).

Pure decision logic, no I/O: a caller (the simulation harness, or later the service with real
HTTP fetches) asks a forager for its next URL, fetches that page and the pages it links to,
tells the forager what it found, and lets the reinforcing agent judge what the forager sends.

One step of a forager (Algorithm 12)::

    url = forager.next_url(rng)                     # Algorithm 11 (a new path when due)
    forager.observe(url, state, links)              # links: (url, state) of the linked pages
    sent = forager.select_to_send(pages, now)       # Algorithm 5: fresh and not marked before
    rewards = [agent.receive(forager, u, published[u], now) for u in sent]   # Algorithm 7
    forager.step_done(sum(rewards))                 # Algorithm 4 (TD) when the ordering learns

and between time slices ``fleet.end_slice(rng)`` (Algorithm 8: split at ``MAX_SCORE`` while
fewer than ``MAX_FORAGER``, remove at ``MIN_SCORE`` while more than ``MIN_FORAGER``) picks the
next forager.

Decisions where the paper is silent:

- Relevance is judged twice, as in the paper: the forager sends only pages no older than
  ``MAX_AGE`` that it has not sent before (Algorithm 5); the agent rewards a page it has not
  rewarded before (from any forager) that is no older than ``MAX_AGE``. So two foragers sending
  the same new page earn +100 and -1: this is what makes the paper's *sent efficiency* measure
  how well the fleet divides the work.
- A path is its starting URL and then ``MAX_STEP`` steps chosen by the ordering (Algorithm 11
  taken literally: the start sets the step number to 1, a step is taken while it is at most
  ``MAX_STEP``).
- A path also ends early when its frontier is empty (a dead end): the next step starts a new
  path, as if ``MAX_STEP`` had been reached.
- A forager's weblog value of a step is the sum of the rewards of the pages sent at that step
  (0 when nothing was sent).
- On a split a weblog-update forager's weblog is divided at random (Algorithm 6); a forager
  that does not update its weblog (RL, Best-First, breadth-first) keeps a fixed start list, and
  its child gets a copy of it (halving a fixed list would only shrink both lists).
- The time slices go round the fleet in order of birth; a child is born at the end of the list.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence

import numpy as np

from crawler.discovery._ordering import (
    BestFirstOrdering,
    Frontier,
    Ordering,
    Vector,
    best_index,
)
from crawler.discovery._weblog import Weblog

MAX_STEP = 100
MAX_AGE = 24 * 3600.0
REWARD = 100.0
PENALTY = -1.0
INIT_SCORE = 100.0
SCORE_PER_SENT = 0.05
SCORE_PER_RELEVANT = 1.0
MAX_SCORE = 200.0
MIN_SCORE = 0.0
MAX_FORAGER = 16
MIN_FORAGER = 2

_ids = itertools.count(1)


class Forager:
    """Walks paths of at most ``max_step`` steps from its start list, ranking its frontier with
    ``ordering``; ``update_weblog`` turns on Algorithm 1 at the end of each path."""

    def __init__(
        self,
        weblog: Weblog,
        ordering: Ordering,
        *,
        update_weblog: bool,
        dimensions: int,
        max_step: int = MAX_STEP,
        max_age: float = MAX_AGE,
    ) -> None:
        if max_step < 0:
            raise ValueError("max_step must be >= 0 (0: a path is its start page alone)")
        self.ident = next(_ids)
        self.weblog = weblog
        self.ordering = ordering
        self.update_weblog = update_weblog
        self.max_step = max_step
        self.max_age = max_age
        self.score = INIT_SCORE
        self.step_number = max_step + 1  # Algorithm 10: the first call starts a path
        self.frontier = Frontier(dimensions)
        self.visited: set[str] = set()
        self.path: list[str] = []
        self.path_rewards: list[float] = []
        self.marked: set[str] = set()
        self.paths = 0
        self.sent = 0
        self.relevant = 0
        self._current_state: Vector | None = None
        self._previous_state: Vector | None = None

    @property
    def path_due(self) -> bool:
        """Whether the next step starts a new path (the last one is done or at a dead end)."""
        return self.step_number > self.max_step or not len(self.frontier)

    def next_url(self, rng: random.Random, start: str | None = None) -> str:
        """Algorithm 11: the frontier's best URL, or a new path from the start list (or from
        ``start``, when the caller chooses where paths begin)."""
        if not self.path_due:
            i = best_index(self.ordering.values(self.frontier), self.frontier.sequence)
            url, state = self.frontier.pop(i)
            self.step_number += 1
            self._previous_state = self._current_state
            self._current_state = state
        else:
            self.end_path()
            url = self.weblog.choose_start(rng) if start is None else start
            self.step_number = 1
            self._previous_state = None
            self._current_state = None
            self.paths += 1
        self.visited.add(url)
        self.path.append(url)
        self.path_rewards.append(0.0)
        return url

    def end_path(self) -> None:
        """Algorithm 1 on the path just walked (if this forager updates its weblog); then an
        empty frontier and visited set."""
        if self.update_weblog and self.path:
            self.weblog.update(self.path, self.path_rewards)
        self.path = []
        self.path_rewards = []
        self.frontier.clear()
        self.visited.clear()

    def observe(self, url: str, state: Vector, links: Iterable[tuple[str, Vector]]) -> None:
        """The page of the current step (``url``) and the linked pages, downloaded."""
        self._current_state = np.asarray(state, dtype=np.float64)
        for link, link_state in links:
            if link not in self.visited:
                self.frontier.add(link, link_state, parent=url)

    def select_to_send(self, pages: Iterable[tuple[str, float]], now: float) -> list[str]:
        """Algorithm 5: of ``(url, published)`` pairs, those no older than ``max_age`` that
        this forager has not sent before (they are marked as sent)."""
        chosen: list[str] = []
        for url, published in pages:
            if url in self.marked or now - published > self.max_age:
                continue
            self.marked.add(url)
            chosen.append(url)
        self.sent += len(chosen)
        return chosen

    def step_done(self, reward: float, relevant_states: Sequence[Vector] = ()) -> None:
        """The step's reinforcements have arrived: record them for the weblog and, for a
        learning ordering, Algorithm 4 on the step that led here."""
        self.path_rewards[-1] += reward
        if isinstance(self.ordering, BestFirstOrdering):
            for state in relevant_states:
                self.ordering.observe_relevant(state)
        if self._current_state is not None:
            self.ordering.learn(self._previous_state, self._current_state, reward)

    def multiply(self, rng: random.Random) -> Forager:
        """Algorithm 6: a child with half the weblog (or a copy of a fixed start list) and the
        ordering's offspring; both scores return to ``INIT_SCORE``."""
        if self.update_weblog:
            weblog = self.weblog.split(rng)
        else:
            weblog = Weblog(
                self.weblog.entries(),
                size=self.weblog.size,
                start_size=self.weblog.start_size,
                beta=self.weblog.beta,
                ties=self.weblog.ties,
            )
        child = Forager(
            weblog,
            self.ordering.offspring(rng),
            update_weblog=self.update_weblog,
            dimensions=self.frontier.dimensions,
            max_step=self.max_step,
            max_age=self.max_age,
        )
        self.score = INIT_SCORE
        return child


class ReinforcingAgent:
    """Judges what the foragers send (Algorithm 7) and keeps their population (Algorithm 8)."""

    def __init__(self, max_age: float = MAX_AGE) -> None:
        self.max_age = max_age
        self.relevants: set[str] = set()
        self.sent = 0

    def receive(self, forager: Forager, url: str, published: float, now: float) -> float:
        """The reinforcement for one sent URL; updates the forager's score."""
        self.sent += 1
        forager.score -= SCORE_PER_SENT
        if url in self.relevants or now - published > self.max_age:
            return PENALTY
        self.relevants.add(url)
        forager.score += SCORE_PER_RELEVANT
        forager.relevant += 1
        return REWARD


class Fleet:
    """The foragers working for one reinforcing agent, run one at a time in turn."""

    def __init__(self, foragers: Sequence[Forager], agent: ReinforcingAgent | None = None) -> None:
        if not foragers:
            raise ValueError("a fleet needs at least one forager")
        self.foragers = list(foragers)
        self.agent = agent if agent is not None else ReinforcingAgent()
        self.position = 0
        self.births = 0
        self.deaths = 0

    @property
    def active(self) -> Forager:
        return self.foragers[self.position]

    def manage(self, forager: Forager, rng: random.Random) -> None:
        """Algorithm 8 for ``forager`` (called when its time slice ends)."""
        if forager.score >= MAX_SCORE and len(self.foragers) < MAX_FORAGER:
            self.foragers.append(forager.multiply(rng))
            self.births += 1
        elif forager.score <= MIN_SCORE and len(self.foragers) > MIN_FORAGER:
            i = self.foragers.index(forager)
            del self.foragers[i]
            self.deaths += 1
            if i < self.position:
                self.position -= 1
            elif i == self.position:
                self.position -= 1  # the next forager slides into this position

    def end_slice(self, rng: random.Random) -> Forager:
        """Manage the active forager, then hand the next slice to the next forager."""
        self.manage(self.active, rng)
        self.position = (self.position + 1) % len(self.foragers)
        return self.active
