"""The RL URL ordering: greedy by V = weight . state, TD(0) with gamma 0.9 and alpha 0.1."""

from __future__ import annotations

import random

import numpy as np
import pytest

from crawler.discovery import Forager, ValueOrdering, Weblog


def test_td_update_arithmetic() -> None:
    ordering = ValueOrdering(np.array([0.5, -0.5]), learning=True)
    current, following = np.array([1.0, 0.0]), np.array([0.6, 0.8])
    # V(current) = 0.5, V(following) = 0.3 - 0.4 = -0.1; delta = 100 + 0.9 * -0.1 - 0.5
    delta = 100.0 + 0.9 * -0.1 - 0.5
    assert ordering.td_error(current, following, 100.0) == pytest.approx(delta)
    ordering.learn(current, following, 100.0)
    assert ordering.weights == pytest.approx([0.5 + 0.1 * delta, -0.5])


def test_no_update_without_learning_or_at_a_path_start() -> None:
    fixed = ValueOrdering(np.array([0.5, -0.5]), learning=False)
    fixed.learn(np.array([1.0, 0.0]), np.array([0.0, 1.0]), 100.0)
    assert fixed.weights == pytest.approx([0.5, -0.5])
    learner = ValueOrdering(np.array([0.5, -0.5]), learning=True)
    learner.learn(None, np.array([0.0, 1.0]), 100.0)
    assert learner.weights == pytest.approx([0.5, -0.5])


def test_forager_is_greedy_and_learns_from_its_steps() -> None:
    rng = random.Random(0)
    ordering = ValueOrdering(np.array([1.0, 0.0]), learning=True)
    forager = Forager(Weblog.from_seeds(["s"]), ordering, update_weblog=False, dimensions=2)
    assert forager.next_url(rng) == "s"
    forager.observe(
        "s", np.array([0.0, 1.0]), [("lo", np.array([0.0, 1.0])), ("hi", np.array([1.0, 0.0]))]
    )
    forager.step_done(0.0)  # path start: no previous step, no update
    assert ordering.weights == pytest.approx([1.0, 0.0])
    assert forager.next_url(rng) == "hi"  # the larger V
    forager.observe("hi", np.array([1.0, 0.0]), [])
    forager.step_done(-1.0)
    # step s -> hi: delta = -1 + 0.9 * 1 - 0 = -0.1; weight += 0.1 * -0.1 * state(s)
    assert ordering.weights == pytest.approx([1.0, -0.01])


def test_td_converges_on_a_fixed_chain() -> None:
    """On a two-state loop with unit states the values approach the discounted returns."""
    ordering = ValueOrdering(np.zeros(2), learning=True)
    a, b = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    for _ in range(2_000):
        ordering.learn(a, b, 1.0)
        ordering.learn(b, a, 0.0)
    # V(a) = 1 + 0.9 V(b), V(b) = 0.9 V(a)  ->  V(a) = 1 / 0.19
    assert ordering.value(a) == pytest.approx(1 / 0.19, rel=1e-3)
    assert ordering.value(b) == pytest.approx(0.9 / 0.19, rel=1e-3)
