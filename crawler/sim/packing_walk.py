"""Where the paper's page automata settle on their own: the walk's stationary mean.

A page of the packing experiments has a walk automaton with states 1..N and x = s/N:
each slot it changes with probability p (our copy goes stale), is polled with
probability x, and the walk steps up on a hit (stale) and down on a miss (fresh), a poll
making the copy fresh. (state, stale) is a Markov chain of 2N states; its stationary
distribution gives the expected x. In the continuum this is where half of the polls hit,
x = p / (1 - p); the grid's ends pull it toward the middle (at N = 8, p = 0.05 settles
at 0.149, not 0.053, since x cannot go below 1/8).

This is the weight the learning scheme heads for when no overload interferes; the
simulator's free runs match it (tests/cluster/test_packing_sim.py), and it explains why
the domain environment needs 5 nodes of 400 (docs/cluster.md).
"""

from __future__ import annotations

import numpy as np


def walk_stationary_mean(p: float, states: int, gamma: float = 1.0) -> float:
    """Expected x = (s/N)^gamma of a page with change probability ``p`` in the long run."""
    if not 0.0 <= p <= 1.0:
        raise ValueError("p must be in [0, 1]")
    if states < 2:
        raise ValueError("the walk needs at least 2 states")
    n = 2 * states
    x = (np.arange(1, states + 1) / states) ** gamma
    moves = np.zeros((n, n))
    for s in range(states):
        for stale in (0, 1):
            here = 2 * s + stale
            for changed, chance in ((1, p), (0, 1.0 - p)):
                now_stale = stale or changed
                moves[here, 2 * s + now_stale] += chance * (1.0 - x[s])
                step = min(s + 1, states - 1) if now_stale else max(s - 1, 0)
                moves[here, 2 * step] += chance * x[s]
    # the stationary distribution: solve pi (M - I) = 0 with sum(pi) = 1
    system = np.vstack([(moves - np.eye(n)).T, np.ones(n)])
    target = np.zeros(n + 1)
    target[-1] = 1.0
    pi = np.linalg.lstsq(system, target, rcond=None)[0]
    return float(pi @ np.repeat(x, 2))
