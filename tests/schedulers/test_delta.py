"""Incremental persistence: take_delta() rows merged into a state resume the learning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crawler import schedulers


def merge(deltas: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    rows: dict[int, dict[str, object]] = {}
    merged: dict[str, Any] = {}
    for delta in deltas:
        url_keys = [k for k in delta if k.startswith("url_")]
        for j, uid in enumerate(delta["ids"].tolist()):
            rows[uid] = {k: delta[k][j] for k in url_keys}
        merged.update({k: v for k, v in delta.items() if k != "ids" and k not in url_keys})
        keys = url_keys
    ids = np.array(sorted(rows), dtype=np.int64)
    merged["ids"] = ids
    for k in keys:
        merged[k] = np.array([rows[i][k] for i in ids.tolist()])
    return merged


def test_delta_carries_added_and_polled_rows_only() -> None:
    s = schedulers.create("uniform", capacity=2, seed=1)
    s.add(np.arange(10))
    first = s.take_delta()
    assert first["ids"].tolist() == list(range(10))
    assert "url_credit" not in first
    polled = s.select()
    s.feedback(polled, np.array([True, False]))
    second = s.take_delta()
    assert sorted(second["ids"].tolist()) == sorted(polled.tolist())
    assert s.take_delta()["ids"].size == 0


def test_merged_deltas_restore_the_schedule_state() -> None:
    s = schedulers.create("uniform", capacity=3, seed=4)
    s.add(np.arange(20), importance=np.linspace(0.1, 1, 20))
    deltas = [s.take_delta()]
    for _ in range(5):
        ids = s.select()
        s.feedback(ids, np.zeros(ids.size, dtype=bool))
        deltas.append(s.take_delta())
    restored = schedulers.restore(merge(deltas))
    ids_a, x_a = s.frequencies()
    ids_b, x_b = restored.frequencies()
    assert np.array_equal(ids_a, ids_b)
    assert np.array_equal(x_a, x_b)
    assert np.array_equal(s.select(), restored.select())
