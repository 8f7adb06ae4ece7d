"""The weblog of a forager: its best starting URLs with values (Algorithm 1 of *Selection in
Scale-Free Small World*, Palotai, Farkas and Lőrincz).

A weblog holds at most ``WEBLOG_SIZE`` URLs in descending order of value. The value of a URL
estimates the sum of rewards collected on the rest of a path after visiting it. After each
path, every URL visited on it gets the sum of the rewards from its step to the end of the path
(``cum``): a URL not yet in the weblog takes ``cum``; one already there moves toward it,
``w <- (1 - BETA) w + BETA cum`` with ``BETA = 0.3``. The list is then sorted, truncated, and
its first ``START_SIZE`` URLs are the starting URLs of the next path.

Decisions where the paper is silent: a URL visited twice on one path (possible only when the
path restarts inside itself, which our foragers never do) would be updated once per visit,
in path order. Ties keep the order of insertion (Python's sort is stable), so a seed list
given in order stays in that order until rewards separate it; with ``ties`` (a random
generator) equal values are shuffled at each update instead. That matters with more than
``START_SIZE`` seeds: all start at 0, and with stable ties only the first ten are ever tried
(``SourceCrawl`` shuffles; the simulated comparison keeps the stable order).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

WEBLOG_SIZE = 100
START_SIZE = 10
BETA = 0.3


class Weblog:
    """URLs with values in descending order of value; at most ``size`` of them."""

    def __init__(
        self,
        entries: Iterable[tuple[str, float]] = (),
        *,
        size: int = WEBLOG_SIZE,
        start_size: int = START_SIZE,
        beta: float = BETA,
        ties: random.Random | None = None,
    ) -> None:
        if size < 1 or start_size < 1 or not 0.0 < beta <= 1.0:
            raise ValueError("size and start_size must be >= 1, beta in (0, 1]")
        self.size = size
        self.start_size = start_size
        self.beta = beta
        self.ties = ties
        self._values: dict[str, float] = {}
        for url, value in entries:
            self._values.setdefault(url, float(value))
        self._order()

    @classmethod
    def from_seeds(cls, seeds: Sequence[str], ties: random.Random | None = None) -> Weblog:
        """Algorithm 10: the seed URLs enter the weblog with value 0."""
        return cls(((url, 0.0) for url in seeds), ties=ties)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, url: object) -> bool:
        return url in self._values

    def value(self, url: str) -> float:
        return self._values[url]

    def entries(self) -> list[tuple[str, float]]:
        return list(self._values.items())

    def start_list(self) -> list[str]:
        """The first ``start_size`` URLs: where the next path may start."""
        return list(self._values)[: self.start_size]

    def choose_start(self, rng: random.Random) -> str:
        """A starting URL drawn uniformly from the start list."""
        starts = self.start_list()
        if not starts:
            raise ValueError("empty weblog: no URL to start a path from")
        return starts[rng.randrange(len(starts))]

    def update(self, path: Sequence[str], rewards: Sequence[float]) -> None:
        """Algorithm 1, after a path: ``path[i]`` was visited at step i and ``rewards[i]`` is
        the sum of the rewards received for that step."""
        if len(path) != len(rewards):
            raise ValueError("one reward per step of the path")
        cum = 0.0
        tails = [0.0] * len(path)
        for i in range(len(path) - 1, -1, -1):
            cum += float(rewards[i])
            tails[i] = cum
        for url, tail in zip(path, tails, strict=True):
            old = self._values.get(url)
            if old is None:
                self._values[url] = tail
            else:
                self._values[url] = (1.0 - self.beta) * old + self.beta * tail
        self._order()

    def split(self, rng: random.Random) -> Weblog:
        """Algorithm 6: half of the entries, drawn at random, move to a new weblog (returned);
        the rest stay here."""
        urls = list(self._values)
        moving = set(rng.sample(urls, len(urls) // 2))
        child = Weblog(
            ((url, self._values[url]) for url in urls if url in moving),
            size=self.size,
            start_size=self.start_size,
            beta=self.beta,
            ties=self.ties,
        )
        self._values = {url: v for url, v in self._values.items() if url not in moving}
        return child

    def _order(self) -> None:
        items = list(self._values.items())
        if self.ties is not None:
            self.ties.shuffle(items)  # equal values then come in random order
        ranked = sorted(items, key=lambda item: -item[1])[: self.size]
        self._values = dict(ranked)
