"""Named environments and the thesis generator."""

from __future__ import annotations

import numpy as np
import pytest

from crawler.sim import ENVIRONMENTS, env_names, get_env, thesis_environment


def test_paper_environments() -> None:
    for name, (alpha, beta) in {"A": (0.3, 1.5), "B": (0.3, 1.0), "C": (0.9, 1.5)}.items():
        env = get_env(name).build(0)
        assert (env.n, env.capacity, env.model) == (500, 1.0, "overwrite")
        assert env.importance is None
        np.testing.assert_allclose(env.p, alpha / np.arange(1, 501) ** beta)
    assert get_env("switch80k").switch_every == 80_000
    assert get_env("switch1k").switch_every == 1_000
    svc = get_env("service")
    assert (svc.n, svc.capacity, svc.alpha, svc.beta) == (300, 3.0, 0.6, 1.2)


def test_thesis_environments() -> None:
    for name in ("thesis", "thesis-disappear", "thesis-switch", "thesis-switch-disappear"):
        spec = get_env(name)
        assert (spec.n, spec.capacity) == (1000, 100.0)
        assert spec.weighted
    assert get_env("thesis-disappear").model == "disappear"
    assert (get_env("thesis100").n, get_env("thesis100").capacity) == (100, 10.0)


@pytest.mark.parametrize("ratio", [1.5, 2.0, 4.0])
def test_thesis_generator(ratio: float) -> None:
    p, w = thesis_environment(1000, 100.0, ratio, seed=3)
    assert p.sum() == pytest.approx(ratio * 100, rel=1e-6)
    assert np.all(np.diff(p) <= 0) and p.max() <= 0.99 and p.min() > 0
    assert np.all((w > 0) & (w <= 1))
    assert np.corrcoef(p, w)[0, 1] > 0.2  # importance biased toward high p
    p2, w2 = thesis_environment(1000, 100.0, ratio, seed=3)
    np.testing.assert_array_equal(p, p2)
    np.testing.assert_array_equal(w, w2)
    p3, _ = thesis_environment(1000, 100.0, ratio, seed=4)
    assert not np.array_equal(p, p3)


def test_custom_and_overrides() -> None:
    spec = get_env("custom", n=50, capacity=2.0, alpha=0.5, beta=1.1, model="disappear")
    env = spec.build(1)
    assert (env.n, env.capacity, env.model) == (50, 2.0, "disappear")
    np.testing.assert_allclose(env.p, 0.5 / np.arange(1, 51) ** 1.1)
    assert get_env("A", capacity=5.0).capacity == 5.0
    assert "C=5" in get_env("A", capacity=5.0).description


def test_errors() -> None:
    with pytest.raises(ValueError, match="unknown environment 'Z'"):
        get_env("Z")
    with pytest.raises(ValueError, match="change model"):
        get_env("A", model="vanish")
    with pytest.raises(ValueError, match="alpha"):
        get_env("A", alpha=2.0)
    assert set(env_names()) == set(ENVIRONMENTS)
