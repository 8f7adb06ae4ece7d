"""Site weights: what each site asks of a worker, in polls per slot.

A site (registrable host) is the unit of assignment: one worker polls all of its URLs, so
per-host politeness, robots.txt and back-off stay exact. Its weight is the sum of the
frequencies x_i (polls per slot) the scheduler wants for its URLs: the Lagrange
allocation when the rates are known or estimated, or a learning scheduler's current x.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from crawler.cluster._types import FloatArray, weights_array


def site_weights(x: ArrayLike, site_of_url: ArrayLike, n_sites: int | None = None) -> FloatArray:
    """Sum of the URLs' wanted polls per slot, per site.

    ``x[i]`` is URL i's frequency, ``site_of_url[i]`` its site index in 0..n_sites-1.
    Sites without URLs weigh 0."""
    xa = weights_array(x, "x")
    sites = np.asarray(site_of_url)
    if sites.shape != xa.shape:
        raise ValueError("site_of_url must give one site per URL")
    if sites.size and (not np.issubdtype(sites.dtype, np.integer) or sites.min() < 0):
        raise ValueError("site indices must be non-negative integers")
    count = int(sites.max()) + 1 if sites.size else 0
    if n_sites is not None:
        if n_sites < count:
            raise ValueError(f"site index {count - 1} is out of range for {n_sites} sites")
        count = n_sites
    return np.bincount(sites.astype(np.int64), weights=xa, minlength=count).astype(np.float64)
