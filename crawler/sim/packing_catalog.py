"""The packing environments: paper 003's sites, pages and crawler-node capacities.

The paper on packing web sites onto crawler nodes (Yazidi, *Solving the bin packing
problem*, §4.4) tests 20 sites from four top-level domains:

- ``pack-tld`` (N = 8, 5,000 slots) and ``pack-tld16`` (N = 16, 10,000 slots): 5,028
  pages, a fixed change probability per domain (.com 0.3, .net 0.25, .edu 0.1, .org 0.05),
  node capacity 400, every page automaton starting at state 1.
- ``pack-zipf`` (N = 16, 200 slots): 1,738 pages; page k of a site (k = 1, 2, ...)
  changes with probability 1 / k^theta, theta by domain (.com 0.75, .net 1, .edu 1.5,
  .org 2); node capacity 80.

The paper's "optimum" weighs each page at its change probability (x = p) and packs the
sites by Best Fit Decreasing: 4 nodes and 1,223.75 for the domain environment (the
paper prints 399.2, 399.01, 399.7 and 25.75; the second is 399.1 by its own page
counts), 2 nodes and 111.567 for Zipf (78.982 + 32.585: the 1 / k^theta reading
reproduces the paper's figures to the last digit). ``PaperFigures`` hold what the paper
reports for its learning scheme, to print next to ours.

The paper's Zipf result (2 nodes, 79.1875 + 29.4375 = 108.625 after 200 slots) is exactly
the packing at slot 0, every page at state 1: 1,738 pages / 16 = 108.625, and Best Fit
Decreasing of those weights gives 79.1875 and 29.4375. Its automata cannot have moved
(the pages with p = 1 climb within a few polls); the simulator prints the slot-0
packing next to it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from crawler.cluster import DEFAULT_REGISTER, DEFAULT_STATES, DEFAULT_THRESHOLD
from crawler.sim.environment import FloatArray, IdArray

Kind = Literal["tld", "zipf"]

#: (domain, per-slot change probability, page counts of its sites)
TLD_SITES: tuple[tuple[str, float, tuple[int, ...]], ...] = (
    (".com", 0.3, (131, 201, 341, 567, 531, 36, 451, 121)),
    (".net", 0.25, (124, 174, 402, 322, 49, 615)),
    (".edu", 0.1, (235, 135, 95, 343)),
    (".org", 0.05, (32, 123)),
)
#: (domain, Zipf skew theta, page counts of its sites)
ZIPF_SITES: tuple[tuple[str, float, tuple[int, ...]], ...] = (
    (".com", 0.75, (131, 91, 91, 87, 91, 46, 61, 71)),
    (".net", 1.0, (74, 84, 62, 92, 89, 105)),
    (".edu", 1.5, (75, 95, 105, 113)),
    (".org", 2.0, (82, 93)),
)


@dataclass(frozen=True)
class PaperFigures:
    """What the paper reports for a test (None where it reports nothing)."""

    nodes: int
    total_weight: float
    optimum_nodes: int
    optimum_weight: float
    slots: int
    #: the paper's "rate of updates" (hits per slot / pages), where it gives one
    update_rate: float | None = None


@dataclass(frozen=True)
class PackingSpec:
    """A packing environment and the scheme's settings (``build`` gives the pages)."""

    name: str
    kind: Kind
    capacity: float
    states: int
    slots: int
    description: str
    #: the overload automaton's threshold and states
    threshold: int = DEFAULT_THRESHOLD
    overload_states: int = DEFAULT_STATES
    #: length of each page's outcome register (misses in it = its penalty)
    register: int = DEFAULT_REGISTER
    #: the x = (s/N)^gamma discretization (the paper's lambda; 1 in its tests)
    gamma: float = 1.0
    #: 0: open a node when the sites do not fit (the paper); K: exactly K fixed workers
    fixed_nodes: int = 0
    paper: PaperFigures | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.capacity > 0:
            raise ValueError("the node capacity must be positive")
        if self.states < 2:
            raise ValueError("the page automata need at least N = 2 states")
        if not 1 <= self.threshold <= self.overload_states or self.overload_states < 2:
            raise ValueError("the overload automaton needs 1 <= Th <= N and N >= 2")
        if not 1 <= self.register <= 16:
            raise ValueError("the register length must be in 1..16")
        if not self.gamma > 0:
            raise ValueError("gamma must be positive")
        if self.fixed_nodes < 0:
            raise ValueError("fixed_nodes cannot be negative")

    def build(self) -> tuple[FloatArray, IdArray, list[str]]:
        """Per page: change probability and site index; per site: its domain."""
        table = TLD_SITES if self.kind == "tld" else ZIPF_SITES
        p: list[FloatArray] = []
        site: list[IdArray] = []
        domains: list[str] = []
        for domain, value, sizes in table:
            for pages in sizes:
                index = len(domains)
                domains.append(domain)
                if self.kind == "tld":
                    p.append(np.full(pages, value))
                else:
                    p.append(1.0 / np.arange(1, pages + 1, dtype=np.float64) ** value)
                site.append(np.full(pages, index, dtype=np.int64))
        return np.concatenate(p), np.concatenate(site), domains

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly description."""
        return asdict(self)


PACKING_ENVIRONMENTS: dict[str, PackingSpec] = {
    spec.name: spec
    for spec in (
        PackingSpec(
            "pack-tld",
            "tld",
            400.0,
            8,
            5000,
            "paper 003 §4.4: 20 sites, 5,028 pages, p by domain, C=400, N=8",
            paper=PaperFigures(4, 1323.625, 4, 1223.66, 5000),
        ),
        PackingSpec(
            "pack-tld16",
            "tld",
            400.0,
            16,
            10_000,
            "paper 003 §4.4: 20 sites, 5,028 pages, p by domain, C=400, N=16",
            paper=PaperFigures(4, 1199.5, 4, 1223.66, 10_000, update_rate=0.13),
        ),
        PackingSpec(
            "pack-zipf",
            "zipf",
            80.0,
            16,
            200,
            "paper 003 §4.4: 20 sites, 1,738 pages, Zipf 1/k^theta by domain, C=80, N=16",
            paper=PaperFigures(2, 108.625, 2, 111.566876, 200),
        ),
    )
}


def packing_env_names() -> list[str]:
    """The packing environments, in catalog order."""
    return list(PACKING_ENVIRONMENTS)


def get_packing_env(name: str, **overrides: Any) -> PackingSpec:
    """A packing environment with some settings replaced (states, threshold, ...)."""
    try:
        base = PACKING_ENVIRONMENTS[name]
    except KeyError:
        raise ValueError(
            f"unknown packing environment {name!r}: choose one of {', '.join(packing_env_names())}"
        ) from None
    changes = {key: value for key, value in overrides.items() if value is not None}
    unknown = set(changes) - set(PARAMS)
    if unknown:
        raise ValueError(
            f"packing environments take no setting {sorted(unknown)[0]!r} (they take: "
            f"{', '.join(sorted(PARAMS))})"
        )
    return replace(base, **changes) if changes else base


#: the settings ``crawler simulate -e pack-... -p KEY=VALUE`` may change
PARAMS = (
    "capacity",
    "states",
    "threshold",
    "overload_states",
    "register",
    "gamma",
    "fixed_nodes",
)
