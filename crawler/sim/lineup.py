"""Which schedulers to run: those that import, and the default line-up for an environment."""

from __future__ import annotations

from collections.abc import Iterable

from crawler import schedulers

#: display order of the default line-up; registered names not listed here come last
PREFERRED = (
    "uniform",
    "proportional",
    "weighted_proportional",
    "optimal",
    "estimator",
    "adaptive",
    "lakg",
    "fpa",
    "bayes",
)


def importable(names: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """Split names into the ones whose class imports and the rest (name -> reason)."""
    ok: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        try:
            schedulers.scheduler_class(name)
        except Exception as exc:  # a broken or missing module must not hide the rest
            failed[name] = f"{type(exc).__name__}: {exc}"
        else:
            ok.append(name)
    return ok, failed


def default_lineup(capacity: float, weighted: bool = False) -> tuple[list[str], dict[str, str]]:
    """Every registered scheduler that imports, in a readable order. FPA is left out when
    C < 2: it is made for many polls per slot and degenerates at C = 1 (docs/schedulers.md);
    weighted_proportional is left out when the URLs carry no importance (it is then
    exactly proportional)."""
    registered = schedulers.names()
    ordered = [name for name in PREFERRED if name in registered]
    ordered += [name for name in registered if name not in ordered]
    ok, failed = importable(ordered)
    if capacity < 2 and "fpa" in ok:
        ok.remove("fpa")
    if not weighted and "weighted_proportional" in ok and "proportional" in ok:
        ok.remove("weighted_proportional")
    return ok, failed
