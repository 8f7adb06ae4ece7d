"""Scheduler parameters from the command line: ``KEY=VALUE`` or ``NAME.KEY=VALUE``.

A plain ``KEY=VALUE`` goes to every chosen scheduler whose constructor takes KEY (it is
an error if none does); ``NAME.KEY=VALUE`` goes to scheduler NAME only. Values are read
as int, float, true/false, none, or else kept as strings.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any

from crawler import schedulers

Params = dict[str, Any]


def parse_value(text: str) -> Any:
    """'2500' -> 2500, '1.3' -> 1.3, 'true' -> True, 'none' -> None, else the text."""
    lowered = text.strip().lower()
    if lowered in ("true", "yes"):
        return True
    if lowered in ("false", "no"):
        return False
    if lowered in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_params(items: Iterable[str]) -> tuple[Params, dict[str, Params]]:
    """Split ``KEY=VALUE`` items into shared parameters and per-scheduler ones."""
    shared: Params = {}
    scoped: dict[str, Params] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"bad --param {item!r}: expected KEY=VALUE or SCHEDULER.KEY=VALUE")
        name, dot, sub = key.rpartition(".")
        if dot:
            if not name or not sub:
                raise ValueError(f"bad --param {item!r}: expected SCHEDULER.KEY=VALUE")
            scoped.setdefault(name, {})[sub] = parse_value(value)
        else:
            shared[key] = parse_value(value)
    return shared, scoped


def accepted(name: str) -> set[str] | None:
    """Keyword parameters of a scheduler's constructor (None: it takes any)."""
    init = schedulers.scheduler_class(name).__init__
    keys: set[str] = set()
    for param in inspect.signature(init).parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if param.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            keys.add(param.name)
    keys -= {"self", "capacity", "seed"}
    return keys


def route_params(
    chosen: Sequence[str], shared: Params, scoped: dict[str, Params]
) -> dict[str, Params]:
    """The parameters of each chosen scheduler; ValueError for one nobody takes."""
    out: dict[str, Params] = {name: {} for name in chosen}
    for name, params in scoped.items():
        if name not in out:
            raise ValueError(f"--param for {name!r}, which is not among the schedulers run")
        keys = accepted(name)
        for key, value in params.items():
            if keys is not None and key not in keys:
                raise ValueError(
                    f"scheduler {name!r} takes no parameter {key!r} "
                    f"(it takes: {', '.join(sorted(keys)) or 'none'})"
                )
            out[name][key] = value
    for key, value in shared.items():
        takers = [name for name in chosen if _takes(name, key)]
        if not takers:
            raise ValueError(f"no scheduler among {', '.join(chosen)} takes a parameter {key!r}")
        for name in takers:
            out[name].setdefault(key, value)
    return out


def _takes(name: str, key: str) -> bool:
    keys = accepted(name)
    return keys is None or key in keys
