"""The named environments of the papers, and custom ones.

- A, B, C: Zipf (0.3, 1.5), (0.3, 1.0), (0.9, 1.5); n = 500, C = 1 (paper 002).
- switch80k, switch1k: Zipf (0.9, 1.5), n = 500, C = 1, paper 002's switching: an
  adjacent rank swap every 80,000 / 1,000 polls.
- thesis, thesis100 (each also ``-disappear``): the thesis §7 generator below with
  importance; n = 1000, C = 100 / n = 100, C = 10.
- thesis-switch (also ``-disappear``): as thesis, and every 2,500 slots URL k trades p
  and importance with URL n + 1 - k (thesis §7.3.3).
- service: Zipf (0.6, 1.2), n = 300, C = 3 (a small service-like watch list).
- hosts: Zipf (0.5, 0.8), n = 2,000 URLs on 50 hosts of Zipf sizes (host j holds a share
  proportional to 1 / j: 445, 223, 149, ... URLs), each host capped at 1.5 polls per slot
  (politeness), C = 20. The URLs are dealt to the hosts at random (``structure_seed``), so
  a big host holds fast and slow URLs alike; the caps bind for the biggest hosts (7 of
  them at the constrained optimum). The scheduler is told the hosts and caps.
- hosts-truncated: the same, but the scheduler is not told: it allocates as if every URL
  could be polled whenever it wants, and the simulator drops each slot's polls of a host
  beyond its credit (the per-host politeness of the fetcher, with the dropped polls lost
  for the slot: no feedback). Its limit is the same constrained limit.

The thesis generator (§7.1 leaves it open; this is the project's reading): rank k = 1..n
gets an exponent theta_k drawn uniformly in [0, 2] and a raw value k^-theta_k (Zipf with
a random skew per node: a larger share of mid-range probabilities than a fixed skew);
p_k = raw_k^a with the single power a > 0 solved so that the expected change-capacity
ratio sum(p) / C equals ``change_ratio`` (thesis: 1.5 to 4; default 2), capped at 0.99;
the URLs are then ordered by decreasing p (id 0 changes most). Importance, "chosen in
relation to its probability of change in a random biased manner": with q_i in [0, 1] the
percentile of p_i and U_i uniform, w_i = 0.05 + 0.95 (q_i + U_i) / 2. The structure comes
from ``structure_seed`` (default 1), so every run seed sees the same URLs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np

from crawler.sim.environment import (
    MODELS,
    AdjacentRankSwap,
    Environment,
    FloatArray,
    IdArray,
    MirrorSwap,
    Model,
    Switch,
)

Kind = Literal["zipf", "thesis"]
SwitchKind = Literal["none", "adjacent", "mirror"]

_THESIS_P_MAX = 0.99


@dataclass(frozen=True)
class EnvSpec:
    """Everything that defines an environment; ``build(seed)`` makes a fresh one."""

    name: str
    n: int
    capacity: float
    model: Model = "overwrite"
    kind: Kind = "zipf"
    alpha: float = 0.3
    beta: float = 1.5
    change_ratio: float = 2.0
    switch: SwitchKind = "none"
    switch_every: int = 0
    structure_seed: int = 1
    description: str = ""
    #: host groups: the number of hosts (0: none), the Zipf skew of their sizes, the cap of
    #: every host in polls per slot (0: none) and whether the scheduler is told the caps
    #: (False: the simulator truncates each slot's polls per host instead)
    hosts: int = 0
    host_skew: float = 1.0
    host_cap: float = 0.0
    caps_known: bool = True

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        if not self.capacity > 0:
            raise ValueError(f"capacity must be positive, got {self.capacity}")
        if self.model not in MODELS:
            raise ValueError(f"unknown change model {self.model!r}: choose overwrite or disappear")
        if self.kind == "zipf" and not (0 < self.alpha <= 1 and self.beta >= 0):
            raise ValueError("Zipf needs 0 < alpha <= 1 and beta >= 0")
        if self.kind == "thesis" and not self.change_ratio > 0:
            raise ValueError("change_ratio must be positive")
        if self.switch != "none" and self.switch_every <= 0:
            raise ValueError("a switching environment needs a positive switch period")
        if self.hosts < 0 or self.hosts > self.n:
            raise ValueError(f"hosts must be between 0 and n, got {self.hosts}")
        if self.host_cap < 0 or self.host_skew < 0:
            raise ValueError("host_cap and host_skew must not be negative")
        if self.host_cap > 0 and self.hosts == 0:
            raise ValueError("a host cap needs hosts")

    def host_groups(self) -> tuple[IdArray | None, dict[int, float] | None]:
        """Each URL's host (None without hosts) and the caps per host (None: no caps)."""
        if self.hosts == 0:
            return None, None
        groups = host_assignment(self.n, self.hosts, self.host_skew, self.structure_seed)
        caps = {h: self.host_cap for h in range(self.hosts)} if self.host_cap > 0 else None
        return groups, caps

    @property
    def weighted(self) -> bool:
        """Whether the URLs carry importance weights."""
        return self.kind == "thesis"

    def probabilities(self) -> FloatArray:
        """The initial p of URLs 0..n-1."""
        if self.kind == "zipf":
            return zipf(self.alpha, self.beta, self.n)
        return thesis_environment(self.n, self.capacity, self.change_ratio, self.structure_seed)[0]

    def build(self, seed: int | np.random.SeedSequence | None = None) -> Environment:
        """A fresh environment; ``seed`` drives its changes and switches."""
        importance: FloatArray | None = None
        if self.kind == "zipf":
            p = zipf(self.alpha, self.beta, self.n)
        else:
            p, importance = thesis_environment(
                self.n, self.capacity, self.change_ratio, self.structure_seed
            )
        switch: Switch | None = None
        if self.switch == "adjacent":
            switch = AdjacentRankSwap(p.copy(), self.switch_every)
        elif self.switch == "mirror":
            switch = MirrorSwap(self.switch_every)
        groups, caps = self.host_groups()
        return Environment(
            p,
            self.capacity,
            model=self.model,
            importance=importance,
            switch=switch,
            seed=seed,
            name=self.name,
            groups=groups,
            caps=caps,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly description."""
        return asdict(self)


def host_assignment(n: int, hosts: int, skew: float, seed: int) -> IdArray:
    """Each of n URLs' host in 0..hosts-1: host j gets a share of the URLs proportional to
    1 / (j + 1)^skew (at least one each; the remainder of the rounding goes to the biggest),
    and the URLs are dealt to the hosts in a random order drawn from ``seed``."""
    share = 1.0 / np.arange(1, hosts + 1, dtype=np.float64) ** skew
    counts = np.maximum(np.floor(share / share.sum() * n).astype(np.int64), 1)
    while counts.sum() > n:
        counts[int(np.argmax(counts))] -= 1
    counts[: n - int(counts.sum())] += 1
    groups = np.repeat(np.arange(hosts, dtype=np.int64), counts)
    np.random.default_rng(seed).shuffle(groups)
    return groups


def zipf(alpha: float, beta: float, n: int) -> FloatArray:
    """Paper 002's change probabilities: p_k = alpha / k^beta for rank k = 1..n."""
    return np.asarray(alpha / np.arange(1, n + 1, dtype=np.float64) ** beta, dtype=np.float64)


def thesis_environment(
    n: int, capacity: float, change_ratio: float, seed: int
) -> tuple[FloatArray, FloatArray]:
    """The thesis §7.1 environment (see the module docstring): p and importance."""
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0.0, 2.0, n)
    raw = np.arange(1, n + 1, dtype=np.float64) ** -theta
    target = change_ratio * capacity
    if target >= n * _THESIS_P_MAX:
        raise ValueError(f"change_ratio {change_ratio} needs more than one change per URL")
    lo, hi = 1e-9, 64.0  # sum(raw^a) falls as a grows
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.minimum(raw**mid, _THESIS_P_MAX).sum() > target:
            lo = mid
        else:
            hi = mid
    p = np.minimum(raw ** (0.5 * (lo + hi)), _THESIS_P_MAX)
    p = np.sort(p)[::-1].copy()
    percentile = np.linspace(1.0, 0.0, n) if n > 1 else np.ones(1)
    importance = 0.05 + 0.95 * 0.5 * (percentile + rng.random(n))
    return p, np.clip(importance, 0.05, 1.0)


def _thesis(name: str, n: int, capacity: float, model: Model, switch: bool) -> EnvSpec:
    what = "2,500-slot mirror swaps, " if switch else ""
    return EnvSpec(
        name=name,
        n=n,
        capacity=capacity,
        model=model,
        kind="thesis",
        switch="mirror" if switch else "none",
        switch_every=2500 if switch else 0,
        description=f"thesis §7: n={n}, C={capacity:g}, importance, {what}changes {model}",
    )


def _hosts(name: str, *, caps_known: bool) -> EnvSpec:
    how = "caps told to the scheduler" if caps_known else "polls over a cap dropped per slot"
    return EnvSpec(
        name=name,
        n=2000,
        capacity=20.0,
        alpha=0.5,
        beta=0.8,
        hosts=50,
        host_skew=1.0,
        host_cap=1.5,
        caps_known=caps_known,
        description=f"Zipf(0.5, 0.8), n=2000 on 50 Zipf-sized hosts capped at 1.5, C=20, {how}",
    )


ENVIRONMENTS: dict[str, EnvSpec] = {
    spec.name: spec
    for spec in (
        EnvSpec("A", 500, 1.0, alpha=0.3, beta=1.5, description="Zipf(0.3, 1.5), n=500, C=1"),
        EnvSpec("B", 500, 1.0, alpha=0.3, beta=1.0, description="Zipf(0.3, 1.0), n=500, C=1"),
        EnvSpec("C", 500, 1.0, alpha=0.9, beta=1.5, description="Zipf(0.9, 1.5), n=500, C=1"),
        EnvSpec(
            "switch80k",
            500,
            1.0,
            alpha=0.9,
            beta=1.5,
            switch="adjacent",
            switch_every=80_000,
            description="Zipf(0.9, 1.5), n=500, C=1, adjacent rank swap every 80,000 polls",
        ),
        EnvSpec(
            "switch1k",
            500,
            1.0,
            alpha=0.9,
            beta=1.5,
            switch="adjacent",
            switch_every=1_000,
            description="Zipf(0.9, 1.5), n=500, C=1, adjacent rank swap every 1,000 polls",
        ),
        _thesis("thesis", 1000, 100.0, "overwrite", False),
        _thesis("thesis-disappear", 1000, 100.0, "disappear", False),
        _thesis("thesis100", 100, 10.0, "overwrite", False),
        _thesis("thesis100-disappear", 100, 10.0, "disappear", False),
        _thesis("thesis-switch", 1000, 100.0, "overwrite", True),
        _thesis("thesis-switch-disappear", 1000, 100.0, "disappear", True),
        EnvSpec("service", 300, 3.0, alpha=0.6, beta=1.2, description="Zipf(0.6, 1.2), n=300, C=3"),
        _hosts("hosts", caps_known=True),
        _hosts("hosts-truncated", caps_known=False),
    )
}


def env_names() -> list[str]:
    """The named environments, in catalog order."""
    return list(ENVIRONMENTS)


def get_env(name: str, **overrides: Any) -> EnvSpec:
    """A named environment, optionally with some fields replaced (n, capacity, model, ...).

    ``custom`` starts from Zipf(0.3, 1.5), n=500, C=1."""
    if name == "custom":
        base = EnvSpec("custom", 500, 1.0, description="custom")
    else:
        try:
            base = ENVIRONMENTS[name]
        except KeyError:
            raise ValueError(
                f"unknown environment {name!r}: choose one of {', '.join(env_names())} or custom"
            ) from None
    changes = {key: value for key, value in overrides.items() if value is not None}
    if not changes:
        return base
    spec = replace(base, **changes)
    if spec.description == base.description:
        spec = replace(spec, description=_describe(spec))
    return spec


def _describe(spec: EnvSpec) -> str:
    if spec.kind == "zipf":
        what = f"Zipf({spec.alpha:g}, {spec.beta:g})"
    else:
        what = f"thesis generator (change ratio {spec.change_ratio:g})"
    switch = "" if spec.switch == "none" else f", {spec.switch} switch every {spec.switch_every}"
    return f"{what}, n={spec.n}, C={spec.capacity:g}, changes {spec.model}{switch}"
