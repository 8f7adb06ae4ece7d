"""Simulate the paper's packing scheme: page automata, site weights, nodes, overloads.

Each slot, in the paper's order (Yazidi, *Solving the bin packing problem*, §4.3):

1. every page changes with its probability p (our copy becomes stale);
2. every page is downloaded with probability x = (s/N)^gamma (independent sampling, as
   the paper's simulator does); a download of a stale page is a hit and the page's
   automaton steps up (s + 1, at most N), of a fresh page a miss and it steps down
   (s - 1, at least 1); the outcome enters the page's register;
3. site weights (sum of x) and node loads are recomputed; every overloaded node (load >
   capacity) asks its overload automaton (``crawler.cluster.OverloadAutomata``): move
   sites (the subset that fits by subset sum stays, the rest are collected) or shrink
   the frequencies of its most-penalized pages until it fits; shrinking falls back to
   moving when every page is already at state 1;
4. the automata learn from the slot (overloaded or not);
5. the collected sites are re-packed by Best Fit Decreasing into the nodes' room, a new
   node opening when one fits nowhere (``fixed_nodes`` = K: exactly K nodes, never a new
   one; what does not fit goes to the node with most room and overloads it).

Counted per slot (the paper reports none of these): overloaded nodes, moves chosen,
shrinks chosen, sites and weight moved, pages stepped down by shrinking, hits, polls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from crawler.cluster import (
    IntArray,
    OverloadAutomata,
    best_fit_decreasing,
    partition_value,
    penalties,
    record_outcomes,
    shared_multiplier_split,
    shrink_to_fit,
    site_weights,
    subset_sum,
)
from crawler.sim.packing_catalog import PackingSpec

Progress = Callable[[int], None]

_PROGRESS_EVERY = 500
#: a node is overloaded when its load exceeds the capacity by more than this
_TOLERANCE = 1e-9

_COUNTS = (
    "nodes",
    "total_weight",
    "overloads",
    "moves",
    "shrinks",
    "moved_sites",
    "moved_weight",
    "shrunk_pages",
    "new_nodes",
    "hits",
    "polls",
)


@dataclass
class PackingResult:
    """One run: per-slot counts, the final packing and the paper's figures to compare."""

    spec: PackingSpec
    slots: int
    seed: int
    seconds: float
    #: per-slot series, one list per name in ``_COUNTS``
    series: dict[str, list[float]]
    #: final load of every node that holds a site, largest first
    final_loads: list[float]
    #: the packing at slot 0 (every page at its initial state), largest first
    initial_loads: list[float]
    #: final weight of every site
    site_weights: list[float]
    #: the paper's optimum: x = p per page, packed by BFD
    optimum_loads: list[float]
    pages: int
    #: the capacity split over the final nodes (``split_figures``)
    split: dict[str, float]

    def at(self, slot: int) -> tuple[int, float]:
        """Nodes used and total weight at the end of ``slot`` (1-based)."""
        if not 1 <= slot <= self.slots:
            raise ValueError(f"slot {slot} is outside 1..{self.slots}")
        return int(self.series["nodes"][slot - 1]), float(self.series["total_weight"][slot - 1])

    @property
    def summary(self) -> dict[str, float | int | None]:
        """Totals over the run and the state at its end."""
        s = self.series
        half = self.slots // 2
        paper = self.spec.paper
        return {
            "nodes": len(self.final_loads),
            "total_weight": float(sum(self.final_loads)),
            "optimum_nodes": len(self.optimum_loads),
            "optimum_weight": float(sum(self.optimum_loads)),
            "paper_nodes": None if paper is None else paper.nodes,
            "paper_total_weight": None if paper is None else paper.total_weight,
            "mean_nodes_2nd_half": float(np.mean(s["nodes"][half:])),
            "mean_weight_2nd_half": float(np.mean(s["total_weight"][half:])),
            "overloads": int(sum(s["overloads"])),
            "moves": int(sum(s["moves"])),
            "shrinks": int(sum(s["shrinks"])),
            "moved_sites": int(sum(s["moved_sites"])),
            "moved_weight": float(sum(s["moved_weight"])),
            "shrunk_pages": int(sum(s["shrunk_pages"])),
            "new_nodes": int(sum(s["new_nodes"])),
            "overloads_2nd_half": int(sum(s["overloads"][half:])),
            "moved_sites_2nd_half": int(sum(s["moved_sites"][half:])),
            "hits_per_slot_2nd_half": float(np.mean(s["hits"][half:])),
            "update_rate_2nd_half": float(np.mean(s["hits"][half:])) / self.pages,
            "paper_update_rate": None if paper is None else paper.update_rate,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict."""
        return {
            "env": self.spec.to_dict(),
            "slots": self.slots,
            "seed": self.seed,
            "seconds": self.seconds,
            "summary": self.summary,
            "final_loads": self.final_loads,
            "initial_loads": self.initial_loads,
            "optimum_loads": self.optimum_loads,
            "site_weights": self.site_weights,
            "split": self.split,
            "series": self.series,
        }


def optimum_loads(spec: PackingSpec) -> list[float]:
    """The paper's optimum: every page at x = p, the sites packed by BFD (loads, largest
    first)."""
    p, site, domains = spec.build()
    weights = site_weights(p, site, len(domains))
    packing = best_fit_decreasing(weights, np.zeros(0), new_capacity=spec.capacity)
    return sorted(packing.loads.tolist(), reverse=True)


def split_figures(spec: PackingSpec, node_of_site: IntArray) -> dict[str, float]:
    """No loss from partitioning, on the final nodes: expected hits per slot (regular
    polling, true p) of one scheduler over all pages with the nodes' total capacity
    (``limit``), of the shared-multiplier split with its budgets (``shared``) and with
    each node spending its whole capacity (``shared_full``), and of the run's own
    packing with each node at its local optimum (``learned``)."""
    p, site_of_page, domains = spec.build()
    used, compact = np.unique(node_of_site, return_inverse=True)
    caps = np.full(used.size, spec.capacity)
    split = shared_multiplier_split(p, site_of_page, caps, n_sites=len(domains))
    return {
        "nodes": float(used.size),
        "limit": split.limit,
        "shared": split.value,
        "shared_full": partition_value(p, site_of_page, split.assignment, caps),
        "packed_total": split.packed_total,
        "learned": partition_value(p, site_of_page, compact, caps),
    }


def run_packing(
    spec: PackingSpec,
    slots: int | None = None,
    *,
    seed: int = 0,
    progress: Progress | None = None,
) -> PackingResult:
    """Simulate ``spec`` for ``slots`` slots (default: the paper's run length)."""
    slots = spec.slots if slots is None else int(slots)
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    env_seed, scheme_seed = np.random.SeedSequence(seed).spawn(2)
    rng_env = np.random.default_rng(env_seed)
    rng = np.random.default_rng(scheme_seed)
    p, site_of_page, domains = spec.build()
    n_pages, n_sites = p.size, len(domains)
    cap = spec.capacity
    levels = (np.arange(spec.states + 1, dtype=np.float64) / spec.states) ** spec.gamma
    levels[0] = 0.0
    state = np.ones(n_pages, dtype=np.int64)
    stale = np.zeros(n_pages, dtype=np.bool_)
    register = np.zeros(n_pages, dtype=np.uint16)
    first_page = np.searchsorted(site_of_page, np.arange(n_sites + 1))

    weights = site_weights(levels[state], site_of_page, n_sites)
    if spec.fixed_nodes:
        start = best_fit_decreasing(weights, np.full(spec.fixed_nodes, cap))
        node_of_site = start.onto_workers()
        n_nodes = spec.fixed_nodes
    else:
        start = best_fit_decreasing(weights, np.zeros(0), new_capacity=cap)
        node_of_site = start.assignment.copy()
        n_nodes = start.loads.size
    initial = np.bincount(node_of_site, weights=weights, minlength=n_nodes)
    automata = OverloadAutomata(
        n_nodes, threshold=spec.threshold, states=spec.overload_states, seed=rng
    )
    rec = {name: np.zeros(slots) for name in _COUNTS}
    started = time.perf_counter()
    for t in range(slots):
        # 1-2: changes, downloads, page automata
        stale |= rng_env.random(n_pages) < p
        polled = np.flatnonzero(rng.random(n_pages) < levels[state])
        hit = stale[polled]
        now = state[polled]
        state[polled] = np.where(hit, np.minimum(now + 1, spec.states), np.maximum(now - 1, 1))
        stale[polled] = False
        record_outcomes(register, polled, ~hit, spec.register)
        rec["hits"][t] = np.count_nonzero(hit)
        rec["polls"][t] = polled.size
        # 3: weights, loads, overloads
        weights = site_weights(levels[state], site_of_page, n_sites)
        loads = np.bincount(node_of_site, weights=weights, minlength=n_nodes)
        overloaded = loads > cap + _TOLERANCE
        rec["overloads"][t] = np.count_nonzero(overloaded)
        move = automata.decide(overloaded)
        collected: list[int] = []
        for node in np.flatnonzero(overloaded).tolist():
            sites = np.flatnonzero(node_of_site == node)
            if not move[node]:
                rec["shrinks"][t] += 1
                pages = np.concatenate(
                    [np.arange(first_page[s], first_page[s + 1]) for s in sites.tolist()]
                )
                new, fits = shrink_to_fit(state[pages], penalties(register[pages]), levels, cap)
                rec["shrunk_pages"][t] += int(np.count_nonzero(new != state[pages]))
                state[pages] = new
                if fits:
                    continue
                weights[sites] = site_weights(levels[state[pages]], site_of_page[pages], n_sites)[
                    sites
                ]
            else:
                rec["moves"][t] += 1
            keep = subset_sum(weights[sites], cap)
            collected.extend(sites[~keep].tolist())
        automata.update(overloaded)
        # 5: re-pack the collected sites by BFD at the end of the slot
        if collected:
            out = np.asarray(collected, dtype=np.int64)
            node_of_site[out] = -1
            weights = site_weights(levels[state], site_of_page, n_sites)
            placed_on = node_of_site >= 0
            loads = np.bincount(
                node_of_site[placed_on], weights=weights[placed_on], minlength=n_nodes
            )
            packing = best_fit_decreasing(
                weights[out],
                np.full(n_nodes, cap),
                loads=np.minimum(loads, cap),
                new_capacity=cap,
            )
            if spec.fixed_nodes:
                target = packing.onto_workers()
            else:
                target = packing.assignment
                if packing.opened:
                    automata.add(packing.opened)
                    rec["new_nodes"][t] = packing.opened
                    n_nodes += packing.opened
            node_of_site[out] = target
            rec["moved_sites"][t] = out.size
            rec["moved_weight"][t] = float(weights[out].sum())
        weights = site_weights(levels[state], site_of_page, n_sites)
        rec["total_weight"][t] = float(weights.sum())
        rec["nodes"][t] = np.unique(node_of_site).size
        if progress is not None and (t + 1) % _PROGRESS_EVERY == 0:
            progress(t + 1)
    seconds = time.perf_counter() - started
    if progress is not None:
        progress(slots)
    final = np.bincount(node_of_site, weights=weights, minlength=n_nodes)
    return PackingResult(
        spec=spec,
        slots=slots,
        seed=seed,
        seconds=seconds,
        series={name: values.tolist() for name, values in rec.items()},
        final_loads=sorted(final[final > 0].tolist(), reverse=True),
        initial_loads=sorted(initial[initial > 0].tolist(), reverse=True),
        site_weights=weights.tolist(),
        optimum_loads=optimum_loads(spec),
        pages=n_pages,
        split=split_figures(spec, node_of_site),
    )
