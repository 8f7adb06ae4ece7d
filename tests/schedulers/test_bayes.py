"""BayesRate: the rate estimator, forgetting, allocation, exploration, state, validation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from crawler import schedulers
from crawler.schedulers import limit, optimal_allocation
from crawler.schedulers.bayes import BayesRate, estimate_rates


def zipf(alpha: float, beta: float, n: int) -> np.ndarray:
    return alpha / np.arange(1, n + 1) ** beta


def simulate(
    s: schedulers.Scheduler,
    p: np.ndarray,
    slots: int,
    rng: np.random.Generator,
    last: np.ndarray | None = None,
    start: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Overwrite model: a poll hits iff a change happened since the URL's previous poll.
    Returns the hits of every slot and the last poll slot of every URL (ids 0..n-1)."""
    last = np.zeros(p.size, dtype=np.int64) if last is None else last
    hits = np.zeros(slots)
    for t in range(start + 1, start + slots + 1):
        ids = s.select()
        h = rng.random(ids.size) < -np.expm1(np.log1p(-p[ids]) * (t - last[ids]))
        last[ids] = t
        s.feedback(ids, h)
        hits[t - start - 1] = h.sum()
    return hits, last


def censored(rate: float, tau: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Outcomes of polls after intervals tau of a Poisson change process."""
    return rng.random(tau.size) < -np.expm1(-rate * tau)


def statistics(tau: np.ndarray, hit: np.ndarray, forget: float = 1.0) -> tuple[np.ndarray, ...]:
    weight = forget ** np.arange(tau.size - 1, -1, -1)
    a = np.sum(weight * tau * hit)
    b = np.sum(weight * tau * ~hit)
    h = np.sum(weight * hit)
    m = np.sum(weight * ~hit)
    return tuple(np.array([v], dtype=np.float32) for v in (a, b, h, m))


# ----- the estimator --------------------------------------------------------------------


@pytest.mark.parametrize(("rate", "interval"), [(0.02, 30), (0.2, 4), (1.0, 1), (0.005, 400)])
def test_estimator_recovers_known_rates(rate: float, interval: int) -> None:
    rng = np.random.default_rng(11)
    tau = rng.integers(interval, interval + 2, size=4000).astype(np.float64)
    hit = censored(rate, tau, rng)
    est = estimate_rates(*statistics(tau, hit), 0.5, 0.5)[0]
    assert est == pytest.approx(rate, rel=0.08)


def test_estimator_prior_keeps_rates_finite_and_positive() -> None:
    tau = np.full(20, 5.0)
    never = estimate_rates(*statistics(tau, np.zeros(20, dtype=bool)), 0.5, 0.5)[0]
    always = estimate_rates(*statistics(tau, np.ones(20, dtype=bool)), 0.5, 0.5)[0]
    assert 0 < never < 0.01
    assert np.isfinite(always) and always > 0.5
    nothing = estimate_rates(*(np.zeros(1, dtype=np.float32),) * 4, 0.5, 0.5)
    assert np.isnan(nothing[0])


def test_scheduler_learns_rates_of_a_static_env() -> None:
    rng = np.random.default_rng(5)
    p = zipf(0.5, 1.0, 40)
    s = BayesRate(4, seed=1, forget=0.99)
    s.add(np.arange(p.size))
    simulate(s, p, 4000, rng)
    _, est = s.rates()
    r_true, r_est = -np.log1p(-p), -np.log1p(-est)
    # Only ratios matter for the allocation; the well-polled head is estimated closely.
    assert np.median(np.abs(np.log(r_est[:10] / r_true[:10]))) < 0.25
    assert np.corrcoef(np.log(r_true), np.log(r_est))[0, 1] > 0.9


def test_forgetting_tracks_a_rate_change() -> None:
    rng = np.random.default_rng(3)
    forget = 0.95
    tau = np.full(600, 2.0)
    hit = np.concatenate([censored(0.05, tau[:300], rng), censored(0.5, tau[300:], rng)])
    tracked = estimate_rates(*statistics(tau, hit, forget), 0.5, 0.5)[0]
    frozen = estimate_rates(*statistics(tau, hit, 1.0), 0.5, 0.5)[0]
    assert tracked == pytest.approx(0.5, rel=0.3)
    assert frozen < 0.35


def test_scheduler_follows_a_swap_of_rates() -> None:
    rng = np.random.default_rng(9)
    p = zipf(0.6, 1.2, 30)
    s = BayesRate(2, seed=2, forget=0.95)
    s.add(np.arange(p.size))
    _, last = simulate(s, p, 3000, rng)
    q = p.copy()
    q[[0, 20]] = q[[20, 0]]  # the hottest URL goes cold and a cold one hot
    simulate(s, q, 1500, rng, last, start=3000)
    _, x = s.frequencies()
    assert x[20] > 5 * x[0]
    assert x[20] == pytest.approx(x.max())


def test_shift_test_catches_a_cold_url_turning_hot() -> None:
    """A URL that changed rarely for a long time starts changing 400x as often: with the
    shift test its estimate reaches half the new rate within ~40 polls; forgetting alone
    needs ~330."""

    def polls_to_notice(shift_threshold: float, seed: int) -> int:
        rng = np.random.default_rng(seed)
        s = BayesRate(1, seed=0, shift_threshold=shift_threshold)
        s.add(np.arange(2))
        for _ in range(60):  # rate 0.0005, polled every 200 slots
            s._slot += 200
            s._learn(np.array([0]), np.array([rng.random() < -np.expm1(-0.0005 * 200)]))
        for k in range(1, 400):  # rate 0.2, polled every 5 slots
            s._slot += 5
            s._learn(np.array([0]), np.array([rng.random() < -np.expm1(-0.2 * 5)]))
            if s._rhat[0] > 0.1:
                return k
        return 400

    with_test = [polls_to_notice(8.0, seed) for seed in range(4)]
    without = [polls_to_notice(0.0, seed) for seed in range(4)]
    assert max(with_test) <= 80
    assert min(without) >= 3 * max(with_test)


@pytest.mark.slow
def test_shift_test_rarely_fires_on_a_static_env() -> None:
    rng = np.random.default_rng(4)
    p = zipf(0.3, 1.5, 200)
    s = BayesRate(2, seed=1)
    s.add(np.arange(p.size))
    shifts = 0
    test = s._shift_test

    def counting(pos: Any, hits: Any, tau: Any, rate: Any, seen: Any) -> Any:
        nonlocal shifts
        out = test(pos, hits, tau, rate, seen)
        shifts += int(np.count_nonzero(out))
        return out

    s._shift_test = counting  # type: ignore[method-assign]
    simulate(s, p, 20_000, rng)
    assert shifts <= 20  # of 40,000 polls


@pytest.mark.slow
def test_shift_test_recovers_a_mirror_swap_sooner() -> None:
    """The thesis's mirror switching (every 2,500 slots URL k and n+1-k trade rates and
    weights): the shift test lifts the ratio to the limit well above forgetting alone."""
    from crawler.sim import runner
    from crawler.sim.catalog import get_env

    env = get_env("thesis-switch")
    on = runner.run("bayes", env, 12_500, seed=1).summary["final_ratio"]
    off = runner.run("bayes", env, 12_500, seed=1, params={"shift_threshold": 0}).summary[
        "final_ratio"
    ]
    assert on is not None and off is not None
    assert on > off + 0.08


def test_state_saved_before_the_shift_test_restores() -> None:
    rng = np.random.default_rng(6)
    p = zipf(0.6, 1.2, 40)
    s = BayesRate(2, seed=3)
    s.add(np.arange(p.size))
    simulate(s, p, 500, rng)
    st = s.state()
    old = {k: v for k, v in st.items() if k != "url_surge"}  # as an older release saved it
    s2 = schedulers.restore(old)
    assert isinstance(s2, BayesRate)
    np.testing.assert_array_equal(s2._surge, np.zeros(p.size, dtype=np.float16))
    np.testing.assert_array_equal(s2.frequencies()[1], s.frequencies()[1])


def test_state_saved_before_the_change_model_restores() -> None:
    """A state from before ``model`` and the drop test (no url_slump, no such parameters)
    restores in overwrite mode and continues exactly as the scheduler that saved it."""
    import json

    rng = np.random.default_rng(8)
    p = zipf(0.6, 1.2, 40)
    s = BayesRate(2, seed=3)
    s.add(np.arange(p.size))
    simulate(s, p, 500, rng)
    st = s.state()
    params = json.loads(st["params"])
    for key in ("model", "drop_factor", "drop_threshold", "drop_keep", "disappear_shift_factor"):
        del params[key]
    old = {k: v for k, v in st.items() if k != "url_slump"}
    old["params"] = json.dumps(params)
    s2 = schedulers.restore(old)
    assert isinstance(s2, BayesRate) and s2.settings.model == "overwrite"
    np.testing.assert_array_equal(s2._slump, np.zeros(p.size, dtype=np.float16))
    for _ in range(200):
        a, b = s.select(), s2.select()
        np.testing.assert_array_equal(a, b)
        h = rng.random(a.size) < 0.3
        s.feedback(a, h)
        s2.feedback(b, h)


def _cold_share(model: str) -> float:
    """Disappear-like feedback: URLs 0-4 hit at every poll, the rest never; after 600
    slots the roles flip to URLs 45-49. The share of the next 150 slots' polls that go to
    the new hot URLs."""
    s = BayesRate(5, seed=1, model=model)
    s.add(np.arange(50))
    hot = np.arange(5)
    found = 0
    for t in range(750):
        if t == 600:
            hot = np.arange(45, 50)
        ids = s.select()
        s.feedback(ids, np.isin(ids, hot))
        if t >= 600:
            found += int(np.isin(ids, hot).sum())
    return found / (150 * 5)


def test_disappear_mode_follows_a_swap_sooner() -> None:
    """model="disappear" adds a test for a fall of the rate and a sharper test for a
    rise: after the hot URLs swap, the new ones get far more of the polls sooner."""
    fast, slow = _cold_share("disappear"), _cold_share("overwrite")
    assert fast > slow + 0.2, (fast, slow)


@pytest.mark.slow
def test_disappear_mode_beats_fpa_on_the_thesis_switching_env() -> None:
    """thesis-switch-disappear, the one paper-table row the default bayes loses to FPA:
    with model="disappear" bayes beats FPA there (40,000 slots, seed 1)."""
    from crawler.sim import runner
    from crawler.sim.catalog import get_env

    env = get_env("thesis-switch-disappear")
    fpa = runner.run("fpa", env, 40_000, seed=1).summary["final_ratio"]
    plain = runner.run("bayes", env, 40_000, seed=1).summary["final_ratio"]
    tuned = runner.run("bayes", env, 40_000, seed=1, params={"model": "disappear"})
    ratio = tuned.summary["final_ratio"]
    assert fpa is not None and plain is not None and ratio is not None
    assert ratio > fpa, (ratio, fpa)
    assert ratio > plain + 0.04, (ratio, plain)


def test_overwrite_mode_never_runs_the_drop_test() -> None:
    rng = np.random.default_rng(2)
    p = zipf(0.9, 1.5, 30)
    s = BayesRate(1, seed=1)
    s.add(np.arange(p.size))
    simulate(s, p, 2000, rng)
    assert not s._slump.any()


# ----- the allocation -------------------------------------------------------------------


def exact_scheduler(p: np.ndarray, capacity: float, importance: Any = None) -> BayesRate:
    """A scheduler whose statistics encode the true rates exactly (many equal-interval
    polls with the expected hit fraction), so that allocation alone is tested."""
    s = BayesRate(capacity, seed=0, forget=1.0, prior_hits=1e-6, prior_misses=1e-6)
    s.add(np.arange(p.size), importance=importance)
    r = -np.log1p(-p)
    tau = 1.0
    polls = 1e6
    hit_frac = -np.expm1(-r * tau)
    s._hit_count[:] = polls * hit_frac
    s._miss_count[:] = polls * (1 - hit_frac)
    s._hit_time[:] = s._hit_count * tau
    s._miss_time[:] = s._miss_count * tau
    s._rhat[:] = s._estimate(s._hit_time, s._miss_time, s._hit_count, s._miss_count)
    s._observed[:] = True  # as learning leaves a URL with hits or misses
    s._stale = True
    return s


@pytest.mark.parametrize(
    ("env", "capacity"), [((0.3, 1.5), 1.0), ((0.9, 1.5), 1.0), ((0.6, 1.2), 3)]
)
def test_allocation_is_the_lagrange_optimum(env: tuple[float, float], capacity: float) -> None:
    p = zipf(*env, 200)
    s = exact_scheduler(p, capacity)
    _, x = s.frequencies()
    best = optimal_allocation(p, capacity)
    assert x.sum() == pytest.approx(capacity, rel=1e-4)
    np.testing.assert_allclose(x, best, rtol=2e-3, atol=1e-6)


def test_weighted_allocation_is_the_lagrange_optimum() -> None:
    p = zipf(0.6, 1.2, 100)
    w = np.random.default_rng(1).uniform(0.2, 1.0, p.size)
    s = exact_scheduler(p, 3.0, importance=w)
    _, x = s.frequencies()
    best = optimal_allocation(p, 3.0, w)
    assert x.sum() == pytest.approx(3.0, rel=1e-3)
    np.testing.assert_allclose(x, best, rtol=5e-3, atol=2e-4)


def test_capacity_above_the_url_count_polls_everything() -> None:
    s = BayesRate(10, seed=0)
    s.add(np.arange(4))
    for _ in range(3):
        ids = s.select()
        assert sorted(ids.tolist()) == [0, 1, 2, 3]
        s.feedback(ids, np.zeros(4, dtype=bool))


# ----- exploration ----------------------------------------------------------------------


def test_all_urls_are_polled_once_early() -> None:
    rng = np.random.default_rng(0)
    p = zipf(0.9, 1.5, 100)
    s = BayesRate(2, seed=4)
    s.add(np.arange(p.size))
    _, last = simulate(s, p, 120, rng)
    assert np.all(last > 0)


def test_new_urls_mid_run_get_polls() -> None:
    rng = np.random.default_rng(1)
    p = np.concatenate([zipf(0.9, 1.5, 100), np.full(10, 0.05)])
    s = BayesRate(1, seed=4)
    s.add(np.arange(100))
    _, last = simulate(s, p, 5000, rng)
    s.add(np.arange(100, 110))
    _, x = s.frequencies()
    assert np.all(x[100:] >= np.median(x[:100]))
    _, last = simulate(s, p, 200, rng, last, start=5000)
    assert np.all(last[100:] > 5000)


def test_a_url_that_never_changes_is_still_polled_now_and_then() -> None:
    rng = np.random.default_rng(2)
    p = np.concatenate([np.full(9, 0.2), [0.0]])
    s = BayesRate(1, seed=4)
    s.add(np.arange(10))
    simulate(s, p, 1000, rng)
    counts = np.zeros(10)
    for _ in range(5000):
        ids = s.select()
        counts[ids] += 1
        s.feedback(ids, np.zeros(ids.size, dtype=bool))
    assert counts[9] >= 1
    assert counts[9] < counts[:9].min()


# ----- the API: state, removal, validation -----------------------------------------------


def test_state_round_trip_continues_bit_for_bit() -> None:
    rng = np.random.default_rng(8)
    p = zipf(0.6, 1.2, 60)
    w = np.random.default_rng(2).uniform(0.3, 1.0, 60)
    for importance, whole in ((None, 0), (w, 0), (None, 8)):
        s = schedulers.create("bayes", capacity=3, seed=5, optimism=0.2, whole_intervals=whole)
        s.add(np.arange(60), importance=importance)
        _, last = simulate(s, p, 700, rng)
        st = s.state()
        s2 = schedulers.restore(st)
        assert isinstance(s2, BayesRate)
        for t in range(701, 1200):
            ids, ids2 = s.select(), s2.select()
            np.testing.assert_array_equal(ids, ids2)
            h = rng.random(ids.size) < -np.expm1(np.log1p(-p[ids]) * (t - last[ids]))
            last[ids] = t
            s.feedback(ids, h)
            s2.feedback(ids, h)
        a, b = s.state(), s2.state()
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], np.ndarray):
                np.testing.assert_array_equal(a[key], b[key])
            else:
                assert a[key] == b[key], key


def test_remove_and_feedback_for_removed_ids() -> None:
    s = BayesRate(2, seed=0)
    s.add(np.arange(10))
    ids = s.select()
    s.remove(ids[:1])
    s.feedback(ids, np.ones(ids.size, dtype=bool))
    ids_all, x = s.frequencies()
    assert ids_all.size == 9
    assert np.all(x > 0)
    assert s._wanted_total() == pytest.approx(float(x.sum()), rel=1e-6)


@pytest.mark.parametrize(
    "params",
    [
        {"forget": 0.0},
        {"forget": 1.5},
        {"forget": "x"},
        {"prior_hits": 0},
        {"prior_misses": -1},
        {"new_rate": 0},
        {"optimism": -0.1},
        {"optimism": float("nan")},
        {"resolve_every": 0},
        {"resolve_every": 2.5},
        {"tolerance": 0},
        {"whole_intervals": -1},
        {"shift_factor": 1.0},
        {"shift_threshold": -1},
        {"shift_keep": 1.5},
        {"drop_factor": 1.0},
        {"drop_threshold": -1},
        {"drop_keep": 2},
        {"model": "auto"},
        {"model": 1},
        {"disappear_shift_factor": 0.5},
        {"realization": "magic"},
    ],
)
def test_bad_parameters(params: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        schedulers.create("bayes", capacity=1, **params)


def test_bad_input() -> None:
    s = BayesRate(1, seed=0)
    with pytest.raises(ValueError):
        BayesRate(0)
    with pytest.raises(ValueError):
        s.add(np.arange(3), importance=[1.0, 0.0, 0.5])
    s.add(np.arange(3))
    with pytest.raises(ValueError):
        s.add([1])
    ids = s.select()
    with pytest.raises(ValueError):
        s.feedback(ids, np.ones(ids.size + 1, dtype=bool))
    with pytest.raises(ValueError):
        s.feedback([99], [True])


def test_sampling_realization_works() -> None:
    rng = np.random.default_rng(4)
    p = zipf(0.6, 1.2, 50)
    s = BayesRate(2, seed=1, realization="sampling")
    s.add(np.arange(50))
    hits, _ = simulate(s, p, 1000, rng)
    assert hits.mean() > 0


# ----- performance ------------------------------------------------------------------------


def test_reaches_the_limit_on_a_small_env() -> None:
    rng = np.random.default_rng(12)
    p = zipf(0.6, 1.2, 50)
    s = schedulers.create("bayes", capacity=2, seed=3)
    s.add(np.arange(50))
    hits, _ = simulate(s, p, 4000, rng)
    assert hits[2000:].mean() / limit(p, 2) >= 0.95


@pytest.mark.slow
def test_reaches_the_limit_on_the_paper_env() -> None:
    rng = np.random.default_rng(13)
    p = zipf(0.9, 1.5, 500)
    s = schedulers.create("bayes", capacity=1, seed=3)
    s.add(np.arange(500))
    hits, _ = simulate(s, p, 40_000, rng)
    assert hits[20_000:].mean() / limit(p, 1) >= 0.97


def test_whole_intervals_round_short_intervals_and_keep_the_budget() -> None:
    p = zipf(0.9, 1.5, 200)
    s = exact_scheduler(p, 1.0)
    s.whole_intervals = 16
    s._stale = True
    _, x = s.frequencies()
    assert x.sum() == pytest.approx(1.0, rel=1e-4)
    short = x >= 1 / 16
    inverse = 1 / x[short]
    # All short intervals are whole numbers of slots but the few on the margin.
    assert np.sum(np.abs(inverse - np.round(inverse)) > 1e-3) <= 2


def test_every_unobserved_url_holds_the_new_url_value() -> None:
    """The re-solve sums the unobserved URLs' rates as their count times the new-URL value
    without reading them: that holds only while every one of them holds that value, through
    adds mid-run, removals, restores and importance changes."""
    rng = np.random.default_rng(3)

    def check(s: BayesRate) -> None:
        unseen = (s._hit_count + s._miss_count) == 0
        assert unseen.any(), "the check needs unobserved URLs"
        held = np.unique(s._rhat[unseen])
        assert held.size == 1 and held[0] == np.float32(s._new_value), (
            "an unobserved URL holds another rate than the new-URL value: the re-solve's "
            "mean of the observed rates (BayesRate._resolve) would be wrong"
        )

    s = BayesRate(5, seed=2)
    s.add(np.arange(400))
    for step in range(60):
        ids = s.select()
        s.feedback(ids, rng.random(ids.size) < 0.3)
        if step == 10:
            s.add(np.arange(1_000, 1_200))
        if step == 20:
            s.remove(np.arange(1_000, 1_050))
        if step == 30:
            restored = schedulers.restore(s.state())
            assert isinstance(restored, BayesRate)
            s = restored
        if step == 40:
            s.set_importance(np.arange(10), np.full(10, 0.5))
        if step % 10 == 1:
            s.select()  # a re-solve may come at the slot after a change
            s.feedback(np.empty(0, dtype=np.int64), np.empty(0, dtype=bool))
            check(s)


def test_the_statistics_records_and_the_observed_flags_follow_every_change() -> None:
    """The statistics a slot's feedback touches share one record per URL, and each URL's
    flag of having an observation is kept as the polls come: both hold through learning
    (first polls and ages too), additions, removals and a restore, and a URL added late
    is unobserved until its first observation."""
    rng = np.random.default_rng(4)
    s = BayesRate(20, seed=2, model="disappear")
    s.add(np.arange(1_000))

    def check(sched: BayesRate) -> None:
        counts = sched._hit_count + sched._miss_count
        assert np.array_equal(sched._observed, counts > 0)
        for name in ("hit_time", "miss_time", "hit_count", "miss_count", "last", "surge"):
            assert getattr(sched, "_" + name).base is sched._stats, name

    for slot in range(120):
        chosen = s.select()
        ago = np.where(rng.random(chosen.size) < 0.5, rng.random(chosen.size) * 9, np.nan)
        s.feedback(chosen, rng.random(chosen.size) < 0.3, changed_ago=ago)
        if slot % 10 == 5:
            s.first_polls(chosen[:3], np.full(3, 2.0))
        if slot == 40:
            s.remove(np.arange(0, 1_000, 7))
        if slot == 60:
            s.add(np.arange(1_000, 1_300))
            assert not s._observed[-300:].any()
        check(s)
    assert 0 < np.count_nonzero(~s._observed) < s._observed.size
    restored = BayesRate.from_state(s.state())
    assert isinstance(restored, BayesRate)
    check(restored)
    assert np.array_equal(restored._observed, s._observed)
