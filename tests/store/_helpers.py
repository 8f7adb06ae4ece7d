"""Helpers shared by the store tests."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.schedulers import SchedulerState
from crawler.store import NewUrl, PollRecord, SlotRecord, Store


def add(store: Store, n: int, host: str = "example.com") -> list[int]:
    report = store.add_urls([NewUrl(f"https://{host}/page/{i}") for i in range(n)])
    return [uid for _, uid in report.added]


def slot_record(no: int, polls: Sequence[PollRecord], scheduler: str = "test") -> SlotRecord:
    outcomes = [p.outcome for p in polls]
    return SlotRecord(
        slot=no,
        scheduler=scheduler,
        started_at=datetime.now(UTC),
        duration_s=0.5,
        polls=len(polls),
        hits=outcomes.count("hit"),
        misses=outcomes.count("miss"),
        not_modified=outcomes.count("not_modified"),
        errors=outcomes.count("error"),
        capacity=float(len(polls)),
    )


def poll(uid: int, outcome: str, when: datetime | None = None, **kw: object) -> PollRecord:
    return PollRecord(
        url_id=uid,
        outcome=outcome,  # type: ignore[arg-type]
        polled_at=when or datetime.now(UTC),
        status=None if outcome == "error" else 200,
        **kw,  # type: ignore[arg-type]
    )


def custom_state(ids: ArrayLike, slot: int = 1, **rows: NDArray[Any]) -> SchedulerState:
    """A state of a made-up scheduler "custom" with the given per-URL arrays."""
    return SchedulerState(
        scheduler="custom",
        params="{}",
        rng="{}",
        budget=0.0,
        slot=slot,
        ids=np.asarray(ids, dtype=np.int64),
        rows=rows,
    )
