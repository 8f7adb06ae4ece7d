"""Scheduler names and how to build them."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from crawler.schedulers._base import Scheduler
from crawler.schedulers._state import SchedulerState

# name -> "module:Class"; imported on first use so that one broken module cannot hide the rest.
_REGISTRY: dict[str, str] = {
    "lakg": "crawler.schedulers.lakg:LAKG",
    "fpa": "crawler.schedulers.fpa:FPA",
    "uniform": "crawler.schedulers.uniform:Uniform",
    "proportional": "crawler.schedulers.oracles:Proportional",
    "optimal": "crawler.schedulers.oracles:Optimal",
    "weighted_proportional": "crawler.schedulers.oracles:WeightedProportional",
    "estimator": "crawler.schedulers.estimator:Estimator",
    "adaptive": "crawler.schedulers.adaptive:AdaptiveInterval",
    "bayes": "crawler.schedulers.bayes:BayesRate",
}


def names() -> list[str]:
    """The registered scheduler names."""
    return sorted(_REGISTRY)


def scheduler_class(name: str) -> type[Scheduler]:
    """The class registered under ``name``."""
    try:
        target = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown scheduler {name!r}: choose one of {', '.join(names())}"
        ) from None
    module_name, _, class_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise TypeError(f"{target} is not a Scheduler")
    return cls


def create(name: str, capacity: float, seed: int | None = None, **params: Any) -> Scheduler:
    """Build the scheduler registered under ``name``."""
    cls = scheduler_class(name)
    try:
        return cls(capacity, seed=seed, **params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for scheduler {name!r}: {exc}") from None


def restore(st: Mapping[str, Any]) -> Scheduler:
    """Rebuild a scheduler from ``Scheduler.state()`` (a ``SchedulerState``, or its flat
    mapping form)."""
    state = SchedulerState.from_mapping(st)
    return scheduler_class(state.scheduler).from_state(state)
