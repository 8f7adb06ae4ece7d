"""Window series, moving averages, the limit cache, parameter routing."""

from __future__ import annotations

import numpy as np
import pytest

from crawler.sim import LimitTracker, get_env
from crawler.sim.metrics import (
    SlotRecord,
    default_window,
    first_reach,
    moving_average,
    summarize,
    window_series,
)
from crawler.sim.params import parse_params, parse_value, route_params


def test_default_window() -> None:
    assert default_window(20_000) == 1000
    assert default_window(400_000) == 2000
    assert default_window(300) == 300


def test_moving_average_and_first_reach() -> None:
    values = np.array([0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    avg = moving_average(values, 2)
    np.testing.assert_allclose(avg, [0.0, 0.5, 1.0, 1.0, 1.0])
    assert first_reach(avg, 0.9, 2) == 4  # slots 3-4 are the first window at 1.0
    assert first_reach(avg, 1.1, 2) is None


def test_series_and_summary() -> None:
    rec = SlotRecord.empty(10)
    rec.polls[:] = 1
    rec.hits[5:] = 1
    rec.value[5:] = 0.5
    rec.limit[:] = 0.5
    rec.changes[:] = 2.0
    series = window_series(rec, 4)
    assert series["slot"] == [4.0, 8.0, 10.0]
    assert series["hits_per_slot"] == [0.0, 0.75, 1.0]
    assert series["ratio"] == [0.0, 0.75, 1.0]
    summary = summarize(rec, 2)
    assert summary["final_ratio"] == 1.0
    assert summary["hits_per_poll"] == 1.0
    assert summary["retrieved_importance"] == 0.25
    assert summary["slots_to_90"] == 7


def test_limit_tracker_caches_permutations() -> None:
    env = get_env("switch1k").build(0)
    tracker = LimitTracker()
    assert tracker.value(env) == pytest.approx(0.9770, abs=5e-4)
    env.set_values(np.array([0, 1]), env.p[[1, 0]].copy())
    assert tracker.value(env) == pytest.approx(0.9770, abs=5e-4)
    assert len(tracker._by_key) == 1
    assert LimitTracker().value(get_env("A").build(0)) == pytest.approx(0.5610, abs=5e-4)


def test_parse_params() -> None:
    assert parse_value("2500") == 2500
    assert parse_value("1.3") == 1.3
    assert parse_value("true") is True
    assert parse_value("stride") == "stride"
    shared, scoped = parse_params(["N=64", "lakg.gamma=1.3"])
    assert shared == {"N": 64}
    assert scoped == {"lakg": {"gamma": 1.3}}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_params(["N"])


def test_route_params() -> None:
    routed = route_params(["uniform"], {"realization": "sampling"}, {})
    assert routed == {"uniform": {"realization": "sampling"}}
    with pytest.raises(ValueError, match="no scheduler among uniform takes a parameter 'N'"):
        route_params(["uniform"], {"N": 3}, {})
    with pytest.raises(ValueError, match="takes no parameter"):
        route_params(["uniform"], {}, {"uniform": {"N": 3}})
