"""The parameters of ``bayes`` (``BayesRate``), named once: each is a field of
``BayesParams`` with its default and its check, and the scheduler's constructor, its
validation and ``params()`` (what a saved state recreates it from) all read these fields.
What each one does is in ``crawler/schedulers/bayes.py``'s docstring."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any

import numpy as np

#: the change models the adaptation can be tuned for (docs/schedulers.md)
MODELS = ("overwrite", "disappear")
#: how a host whose cap binds chooses its polls (see "Capped hosts" in bayes.py):
#: "changed", the URLs most likely to have changed since their last poll, on rates under
#: a prior learned from the population; "stride", by the stride credit as any other host
CAPPED_RULES = ("changed", "stride")


def _check_real(
    what: str,
    value: Any,
    *,
    low: float,
    high: float = math.inf,
    open_low: bool = False,
) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < low or (open_low and v == low) or v > high:
        bound = f"({low}, {high}]" if open_low else f"[{low}, {high}]"
        raise ValueError(f"{what} must be in {bound}, got {value!r}")
    return v


def _check_count(what: str, value: Any, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        kind = "a positive" if low > 0 else "a non-negative"
        raise ValueError(f"{what} must be {kind} integer, got {value!r}")
    return int(value)


def _check_choice(what: str, value: Any, *, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _real(default: float, *, low: float, high: float = math.inf, open_low: bool = False) -> Any:
    check = partial(_check_real, low=low, high=high, open_low=open_low)
    return field(default=default, metadata={"check": check})


def _count(default: int, *, low: int) -> Any:
    return field(default=default, metadata={"check": partial(_check_count, low=low)})


@dataclass(frozen=True)
class BayesParams:
    """``bayes``'s parameters, checked (ValueError when out of range)."""

    forget: float = _real(0.99, low=0.0, high=1.0, open_low=True)
    prior_hits: float = _real(0.5, low=0.0, open_low=True)
    prior_misses: float = _real(0.5, low=0.0, open_low=True)
    new_rate: float = _real(1.0, low=0.0, open_low=True)
    optimism: float = _real(0.0, low=0.0)
    resolve_every: int = _count(64, low=1)
    tolerance: float = _real(0.02, low=0.0, open_low=True)
    whole_intervals: int = _count(0, low=0)
    shift_factor: float = _real(4.0, low=1.0, open_low=True)
    #: 0 turns the shift test off
    shift_threshold: float = _real(8.0, low=0.0)
    shift_keep: float = _real(0.1, low=0.0, high=1.0)
    drop_factor: float = _real(10.0, low=1.0, open_low=True)
    #: 0 turns the drop test off
    drop_threshold: float = _real(8.0, low=0.0)
    drop_keep: float = _real(0.0, low=0.0, high=1.0)
    model: str = field(
        default="overwrite", metadata={"check": partial(_check_choice, choices=MODELS)}
    )
    disappear_shift_factor: float = _real(16.0, low=1.0, open_low=True)
    #: under host caps or bounds: a URL with no miss on record has its allocation rate
    #: doubled per hit, up to this factor (1 turns it off; see "Probing" in bayes.py)
    probe_hits: float = _real(32.0, low=1.0)
    capped_rule: str = field(
        default="changed", metadata={"check": partial(_check_choice, choices=CAPPED_RULES)}
    )

    def __post_init__(self) -> None:
        for spec in fields(self):
            check: Callable[[str, Any], Any] = spec.metadata["check"]
            object.__setattr__(self, spec.name, check(spec.name, getattr(self, spec.name)))
