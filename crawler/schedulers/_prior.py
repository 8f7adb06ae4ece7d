"""A prior of change rates learned from the population, and the posterior mean it gives.

``bayes`` keeps per URL four discounted sums of its polls: the total interval of the hits
``A``, their count ``H``, the total interval of the misses ``B`` (and their count). A URL
polled once or twice says little about its rate on its own; the population of URLs says
what rates are common. This module puts a prior on a fixed grid of rates (``GRID``:
per-slot change probabilities from 1e-3 to 0.999, evenly spaced in their logarithm),
fits its weights to the observed URLs (empirical Bayes: the maximum-likelihood mixture,
by EM) and gives a URL's posterior mean rate under it.

The likelihood of a URL's record treats its hits as polls at their mean interval ``A / H``
(stride polls come at nearly regular intervals): a hit after ``tau`` slots has probability
``1 - e^(-r tau)``, a miss ``e^(-r tau)``, so the record's log-likelihood is
``H ln(1 - e^(-r A / H)) - r B``. That needs no state beyond the four sums.

The weights move a little toward the uniform mixture at every EM step (``SMOOTHING``): the
exact maximum-likelihood mixture puts all its weight on a few grid points, and with one or
two observations per URL that overfits. Measured on the live caps benchmark's site
(simulated, 20 seeds): without it 0.896 of the capped limit, with it 0.911.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

#: the rates (changes per slot) the prior puts its weight on: change probabilities per
#: slot from 1e-3 to 0.999, evenly spaced in their logarithm
GRID: FloatArray = -np.log1p(-np.geomspace(1e-3, 0.999, 32))
#: weight added to every grid point at each EM step, before normalizing
SMOOTHING = 1e-3
#: at most this many observed URLs are fitted (evenly spaced over the rows)
SAMPLE = 2_048
#: EM steps of a first fit, and of a fit that starts from the last one
STEPS = 40
MORE_STEPS = 10


def log_likelihood(
    hit_time: NDArray[np.floating], miss_time: NDArray[np.floating], hits: NDArray[np.floating]
) -> FloatArray:
    """Each URL's log-likelihood at every rate of ``GRID`` (rows x grid), from its sums."""
    a = np.asarray(hit_time, dtype=np.float64)[:, None]
    b = np.asarray(miss_time, dtype=np.float64)[:, None]
    h = np.asarray(hits, dtype=np.float64)[:, None]
    r = GRID[None, :]
    some = h > 0
    tau = np.where(some, a / np.where(some, h, 1.0), 0.0)
    with np.errstate(divide="ignore"):
        seen = np.where(some, h * np.log(-np.expm1(-r * np.maximum(tau, 1e-12))), 0.0)
    out: FloatArray = seen - r * b
    return out


def fit(
    hit_time: NDArray[np.floating],
    miss_time: NDArray[np.floating],
    hits: NDArray[np.floating],
    start: FloatArray | None = None,
    steps: int = STEPS,
) -> FloatArray:
    """The prior's weights on ``GRID`` fitted to some observed URLs' sums by ``steps`` EM
    steps from ``start`` (None: uniform)."""
    weights = np.full(GRID.size, 1.0 / GRID.size) if start is None else start.copy()
    if np.size(hits) == 0:
        return weights
    ll = log_likelihood(hit_time, miss_time, hits)
    like = np.exp(ll - ll.max(axis=1, keepdims=True))
    for _ in range(steps):
        post = like * weights
        post /= post.sum(axis=1, keepdims=True)
        weights = post.mean(axis=0) + SMOOTHING
        weights /= weights.sum()
    return weights


def posterior_mean(
    hit_time: NDArray[np.float32],
    miss_time: NDArray[np.float32],
    hits: NDArray[np.float32],
    weights: FloatArray,
) -> NDArray[np.float32]:
    """Each URL's posterior mean rate (changes per slot) under the prior ``weights``.

    In float32 and in place on one array of rows x grid (it runs on every slot's polls of
    the capped hosts): 2.5 ms for 10,000 URLs against 9.3 ms for the float64 form of
    ``log_likelihood``. The hits' term is computed on the rows with hits only, and added
    to the misses' (t + (-m) is t - m bit for bit; a row without hits had -0.0 - m)."""
    grid = GRID.astype(np.float32)
    h = np.asarray(hits, dtype=np.float32)
    # -r B, the misses' log-likelihood; then the hits' H ln(1 - e^(-r tau)) added on the
    # rows with hits only (a URL without hits adds 0 there: its logarithms are not taken)
    z = np.multiply.outer(np.asarray(miss_time, dtype=np.float32), grid)
    np.negative(z, out=z)
    some = np.flatnonzero(h > 0)
    if some.size:
        hs = h[some]
        tau = np.asarray(hit_time, dtype=np.float32)[some] / hs
        y = np.multiply.outer(np.maximum(tau, np.float32(1e-12)), grid)
        np.negative(y, out=y)
        np.expm1(y, out=y)
        np.negative(y, out=y)
        np.log(y, out=y)  # ln(1 - e^(-r tau)): the log-likelihood of a hit
        y *= hs[:, None]
        z[some] += y
    z += np.log(weights).astype(np.float32)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    out: NDArray[np.float32] = (z @ grid) / z.sum(axis=1)
    return out
