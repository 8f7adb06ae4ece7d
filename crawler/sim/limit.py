"""The analytic limit of an environment, recomputed only when its values really change.

The limit (crawler.schedulers.limit) depends on the multiset of (p_i, w_i) pairs only, not
on which URL holds which pair, so the switches of the papers (rank swaps, mirror swaps)
leave it unchanged: the cache is keyed by the sorted pairs.

With host groups and caps the limit is the constrained one (``constrained_limit``: the best
any policy that respects the caps can do); it then depends on which URL is on which host,
so the key is the values in id order with the groups.
"""

from __future__ import annotations

import hashlib

import numpy as np

from crawler import schedulers
from crawler.sim.environment import Environment


class LimitTracker:
    """``value(env)``: the limit for the environment's current p (and importance)."""

    def __init__(self) -> None:
        self._version = -1
        self._env_id = -1
        self._value = 0.0
        self._by_key: dict[bytes, float] = {}

    def value(self, env: Environment) -> float:
        """Expected (weighted) hits per slot of the optimal policy, for the current p."""
        if env.version == self._version and id(env) == self._env_id:
            return self._value
        key = _key(env)
        cached = self._by_key.get(key)
        if cached is None and env.caps is not None:
            cached = schedulers.constrained_limit(
                env.p.copy(),
                env.capacity,
                None if env.importance is None else env.importance.copy(),
                limits=schedulers.Limits.build(env.p.size, env.groups, env.caps),
                model=env.model,
            )
        elif cached is None:
            cached = schedulers.limit(
                env.p.copy(),
                env.capacity,
                None if env.importance is None else env.importance.copy(),
                model=env.model,
            )
            self._by_key[key] = cached
        self._version, self._env_id, self._value = env.version, id(env), cached
        return cached


def _key(env: Environment) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{env.model}:{env.capacity!r}:".encode())
    if env.caps is not None and env.groups is not None:
        digest.update(repr(sorted(env.caps.items())).encode())
        digest.update(env.groups.tobytes())
        digest.update(env.p.tobytes())
        if env.importance is not None:
            digest.update(env.importance.tobytes())
        return digest.digest()
    if env.importance is None:
        digest.update(np.sort(env.p).tobytes())
    else:
        order = np.lexsort((env.importance, env.p))
        digest.update(env.p[order].tobytes())
        digest.update(env.importance[order].tobytes())
    return digest.digest()
