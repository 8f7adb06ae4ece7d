"""The overload automaton's transitions, the outcome register and shrinking."""

from __future__ import annotations

import numpy as np
import pytest

from crawler.cluster import OverloadAutomata, penalties, record_outcomes, shrink_to_fit


def test_transitions_follow_the_rules() -> None:
    auto = OverloadAutomata(3, threshold=2, states=8, seed=0)
    assert auto.state.tolist() == [2, 2, 2]
    auto.update([True, False, True])
    assert auto.state.tolist() == [4, 2, 4]  # +2 on overload; never below Th
    auto.update([True, True, False])
    assert auto.state.tolist() == [6, 4, 3]
    auto.update([True, False, False])
    assert auto.state.tolist() == [8, 3, 2]  # 6 < N - 1 = 7: +2 reaches N
    auto.update([True, False, False])
    assert auto.state.tolist() == [8, 2, 2]  # at N: unchanged
    auto.state[:] = [7, 2, 2]
    auto.update([True, False, False])
    assert auto.state.tolist() == [7, 2, 2]  # N - 1: +2 would pass N, unchanged


def test_move_probability_is_s_over_n_squared() -> None:
    auto = OverloadAutomata(2, threshold=1, states=4, seed=1)
    auto.state[:] = [2, 4]
    np.testing.assert_allclose(auto.move_probability(), [0.25, 1.0])
    draws = np.array([auto.decide([True, True]) for _ in range(4000)])
    assert draws[:, 1].all()
    assert abs(draws[:, 0].mean() - 0.25) < 0.03
    assert not auto.decide([False, False]).any()


def test_add_and_remove_workers() -> None:
    auto = OverloadAutomata(2, threshold=3, states=8)
    auto.update([True, True])
    auto.add(2)
    assert auto.state.tolist() == [5, 5, 3, 3]
    auto.remove([0])
    assert auto.workers == 3


@pytest.mark.parametrize(("th", "n"), [(0, 8), (9, 8), (1, 1)])
def test_bad_settings(th: int, n: int) -> None:
    with pytest.raises(ValueError):
        OverloadAutomata(1, threshold=th, states=n)


def test_register_keeps_the_last_outcomes() -> None:
    reg = np.zeros(3, dtype=np.uint16)
    for missed in ([True, False, True], [True, True, False], [False, True, True]):
        record_outcomes(reg, [0, 1, 2], missed, 2)
    assert penalties(reg).tolist() == [1, 2, 1]  # only the last two outcomes count
    record_outcomes(reg, [1], [True], 2)
    assert penalties(reg).tolist() == [1, 2, 1]


def test_shrink_lowers_the_most_penalized_first() -> None:
    levels = np.arange(9) / 8
    states = [8, 8, 4, 2]
    new, fits = shrink_to_fit(states, [3, 0, 5, 1], levels, 2.25)
    # excess 0.5: page 2 (5 misses), page 0 (3), page 3 (1), page 1 (0), one step each
    assert new.tolist() == [7, 7, 3, 1]
    assert fits
    assert levels[new].sum() <= 2.25


def test_shrink_takes_several_rounds_and_reports_failure() -> None:
    levels = np.arange(9) / 8
    new, fits = shrink_to_fit([8, 1], [0, 9], levels, 0.5)
    assert new.tolist() == [3, 1] and fits
    new, fits = shrink_to_fit([8, 8], [0, 0], levels, 0.1)
    assert new.tolist() == [1, 1] and not fits
