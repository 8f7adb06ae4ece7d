"""The runner against analytic values: Uniform, the Optimal oracle, switching oracles."""

from __future__ import annotations

import json

import numpy as np
import pytest

from crawler import schedulers
from crawler.sim import get_env, run
from crawler.sim.parallel import Job, run_jobs


def test_uniform_matches_its_analytic_value_on_env_a() -> None:
    res = run("uniform", get_env("A"), 20_000, seed=1)
    assert res.summary["hits_per_slot"] == pytest.approx(0.1235, abs=0.01)
    assert res.summary["limit"] == pytest.approx(0.5610, abs=5e-4)
    assert res.summary["final_ratio"] == pytest.approx(0.1235 / 0.5610, abs=0.02)
    assert res.summary["total_polls"] == 20_000
    assert len(res.series["slot"]) == 20
    json.dumps(res.to_dict(), allow_nan=False)


def test_uniform_on_a_weighted_environment() -> None:
    spec = get_env("thesis100")
    res = run("uniform", spec, 3000, seed=2)
    env = spec.build(0)
    assert env.importance is not None
    x = np.full(env.n, env.capacity / env.n)
    expected = schedulers.expected_hits(x, env.p, env.importance)
    assert res.summary["value_per_slot"] == pytest.approx(expected, rel=0.03)
    assert res.summary["hits_per_poll"] is not None


def test_runs_are_reproducible() -> None:
    a = run("uniform", get_env("service"), 2000, seed=5)
    b = run("uniform", get_env("service"), 2000, seed=5)
    assert a.series == b.series


@pytest.mark.slow
def test_optimal_oracle_reaches_the_limit_on_env_a() -> None:
    res = run("optimal", get_env("A"), 20_000, seed=3)
    assert res.summary["final_ratio"] == pytest.approx(1.0, abs=0.03)
    assert res.summary["slots_to_90"] is not None


def test_oracle_is_reinformed_after_switches() -> None:
    res = run("proportional", get_env("switch1k"), 6000, seed=4)
    assert res.summary["final_ratio"] > 0.85


def test_parallel_jobs_match_serial_ones() -> None:
    jobs = [Job("uniform", get_env("A"), 1500, seed=s) for s in (1, 2)]
    seen: list[int] = []
    parallel = run_jobs(jobs, workers=2, on_done=lambda i, r: seen.append(i))
    serial = run_jobs(jobs, workers=1)
    assert sorted(seen) == [0, 1]
    for a, b in zip(parallel, serial, strict=True):
        assert not isinstance(a, str) and not isinstance(b, str)
        assert a.series == b.series


def test_a_failing_job_reports_its_error() -> None:
    (out,) = run_jobs([Job("uniform", get_env("A"), 10, params={"bogus": 1})])
    assert isinstance(out, str) and "bogus" in out


@pytest.mark.slow
def test_every_registered_scheduler_imports_and_runs() -> None:
    from crawler.sim.lineup import importable

    ok, failed = importable(schedulers.names())
    assert not failed
    for name in ok:
        res = run(name, get_env("thesis100"), 300, seed=1)
        assert 0.95 * 3000 <= res.summary["total_polls"] <= 3000, name
