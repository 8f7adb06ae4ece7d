"""A scheduler's saved state, as one typed object between the scheduler and the store.

``Scheduler.state()`` (everything) and ``Scheduler.take_delta()`` (the rows that changed)
return a ``SchedulerState``; ``Scheduler.from_state`` and ``schedulers.restore`` take one
back. Its parts are named: the registry ``scheduler`` name and the state ``format``, the
constructor ``params`` and the generator state ``rng`` (both JSON text, as saved), the
``budget`` carried between slots and the ``slot`` count, the subclass's own scalars
(``extra``), the URL ``ids`` and one array per per-URL field (``rows``, by field name, each
aligned with ``ids``).

It is also a read-only ``Mapping`` with the flat keys a state always had (``"scheduler"``,
..., ``"ids"``, ``"url_<field>"``): a merge of deltas, an older caller or a test can read it
like the dict it used to be, and ``from_mapping`` turns such a flat mapping back into a
``SchedulerState``. The store saves the scalars (``scalars()``) as one JSON object and the
rows as fixed-size records (``crawler/store/_state.py``): the saved format is the one the
dict had.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

STATE_FORMAT = 1
URL_PREFIX = "url_"
#: the scalars every scheduler saves, in their order
CORE = ("scheduler", "format", "params", "rng", "budget", "slot")


@dataclass(frozen=True, slots=True, eq=False)
class SchedulerState(Mapping[str, Any]):
    """What resumes a scheduler (see the module docstring)."""

    scheduler: str
    params: str
    rng: str
    budget: float
    slot: int
    ids: NDArray[np.int64]
    rows: Mapping[str, NDArray[Any]]
    extra: Mapping[str, Any] = field(default_factory=dict)
    format: int = STATE_FORMAT

    # ----- the flat view -----------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        if key in CORE:
            return getattr(self, key)
        if key == "ids":
            return self.ids
        if key.startswith(URL_PREFIX) and key[len(URL_PREFIX) :] in self.rows:
            return self.rows[key[len(URL_PREFIX) :]]
        if key in self.extra:
            return self.extra[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from CORE
        yield from self.extra
        yield "ids"
        for name in self.rows:
            yield URL_PREFIX + name

    def __len__(self) -> int:
        return len(CORE) + len(self.extra) + 1 + len(self.rows)

    def scalars(self) -> dict[str, Any]:
        """Every entry that is neither ``ids`` nor a per-URL array (what the store saves as
        one JSON object), in order."""
        out: dict[str, Any] = {key: getattr(self, key) for key in CORE}
        out.update(self.extra)
        return out

    def row_keys(self) -> list[str]:
        """The flat keys of the per-URL arrays (``url_<field>``), in order."""
        return [URL_PREFIX + name for name in self.rows]

    @classmethod
    def from_mapping(cls, flat: Mapping[str, Any]) -> SchedulerState:
        """A ``SchedulerState`` from the flat form (itself when it already is one).
        ValueError for a mapping that is not a scheduler state."""
        if isinstance(flat, SchedulerState):
            return flat
        name = flat.get("scheduler")
        if not isinstance(name, str) or not name:
            raise ValueError("not a scheduler state: the 'scheduler' name is missing")
        if flat.get("format") != STATE_FORMAT:
            raise ValueError(f"unsupported scheduler state format {flat.get('format')!r}")
        missing = [k for k in (*CORE, "ids") if k not in flat]
        if missing:
            raise ValueError(f"corrupt scheduler state: {', '.join(missing)} missing")
        params, rng = flat["params"], flat["rng"]
        if not isinstance(params, str) or not isinstance(rng, str):
            raise ValueError("corrupt scheduler state: params and rng must be JSON text")
        try:
            budget, slot = float(flat["budget"]), int(flat["slot"])
        except (TypeError, ValueError):
            raise ValueError("corrupt scheduler state: budget or slot is not a number") from None
        rows = {
            key[len(URL_PREFIX) :]: np.asarray(value)
            for key, value in flat.items()
            if key.startswith(URL_PREFIX)
        }
        extra = {
            key: value
            for key, value in flat.items()
            if key not in CORE and key != "ids" and not key.startswith(URL_PREFIX)
        }
        return cls(
            scheduler=name,
            params=params,
            rng=rng,
            budget=budget,
            slot=slot,
            ids=np.asarray(flat["ids"]),
            rows=rows,
            extra=extra,
        )
