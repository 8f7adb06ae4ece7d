"""Scheduler state through the database: deltas committed slot by slot, loaded, restored."""

from __future__ import annotations

import json

import numpy as np
import pytest

from crawler import schedulers
from crawler.store import NewUrl, Store
from crawler.store.models import url_state
from tests.schedulers.test_delta import merge
from tests.store._helpers import custom_state, poll, slot_record


def _available(name: str) -> bool:
    try:
        schedulers.scheduler_class(name)
    except (ImportError, ValueError, TypeError):
        return False
    return True


NAMES = [n for n in ("uniform", "lakg", "fpa", "bayes") if _available(n)]


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_resumes_learning(store: Store, name: str) -> None:
    report = store.add_urls(
        [
            NewUrl(f"https://s{i % 3}.example/{i}", importance=0.2 + 0.8 * (i % 5) / 4)
            for i in range(40)
        ]
    )
    ids, weights = store.active_urls()
    assert ids.size == 40
    live = schedulers.create(name, capacity=4, seed=11)
    live.add(ids, importance=weights)
    deltas = [live.take_delta()]
    store.commit_slot(slot_record(0, [], name), [], deltas[-1])
    rng = np.random.default_rng(5)
    changing = set(ids[::3].tolist())
    for k in range(1, 21):
        chosen = live.select()
        hits = np.array([i in changing and rng.random() < 0.7 for i in chosen.tolist()])
        live.feedback(chosen, hits)
        polls = [
            poll(uid, "hit" if h else "miss", content_hash=f"{uid}-{k}")
            for uid, h in zip(chosen.tolist(), hits.tolist(), strict=True)
        ]
        if k == 10:  # a URL removed mid-run: gone from the store and the scheduler
            gone = report.added[0]
            store.remove_urls([gone[0]])
            live.remove([gone[1]])
        deltas.append(live.take_delta())
        store.commit_slot(slot_record(k, polls, name), polls, deltas[-1])

    state = store.load_scheduler_state(name)
    assert state is not None
    # the store's job: exactly the in-memory merge of the deltas (tests/schedulers/test_delta.py)
    merged = merge(deltas)
    keep = np.isin(merged["ids"], live.state()["ids"])  # rows of removed URLs dropped
    expected = {k: v[keep] if k == "ids" or k.startswith("url_") else v for k, v in merged.items()}
    assert np.array_equal(state["ids"], expected["ids"])
    for key in live.persistent_fields():
        assert state[key].dtype == expected[key].dtype, key
        assert np.array_equal(state[key], expected[key], equal_nan=True), key
    for key in expected:
        if key != "ids" and not key.startswith("url_"):
            assert state[key] == expected[key], key
    full = live.state()
    assert np.array_equal(state["ids"], full["ids"])
    assert state["slot"] == full["slot"] and state["rng"] == full["rng"]
    restored = schedulers.restore(state)
    ids_b, x_b = restored.frequencies()
    assert np.array_equal(x_b, schedulers.restore(expected).frequencies()[1])
    if name in ("uniform", "lakg", "fpa", "bayes"):  # all resume exactly from merged deltas
        ids_a, x_a = live.frequencies()
        assert np.array_equal(ids_a, ids_b)
        assert np.allclose(x_a, x_b, rtol=0, atol=1e-12)
    if name == "uniform":
        assert np.array_equal(live.select(), restored.select())
    freq = {r.id: r.wanted_frequency for r in store.list_urls(name)}
    assert freq == pytest.approx(dict(zip(ids_b.tolist(), x_b.tolist(), strict=True)))


def test_no_saved_state(store: Store) -> None:
    assert store.load_scheduler_state("lakg") is None
    assert store.wanted_frequencies("lakg") == {}


def test_format_change_converts_the_saved_rows(store: Store) -> None:
    """A release that adds a per-URL field keeps what was learned: the saved rows are
    re-packed, shared fields carried over, the new field zero, a dropped field gone."""
    store.add_urls([NewUrl(f"https://a.example/{i}") for i in range(4)])
    ids, _ = store.active_urls()
    old = custom_state(ids, a=np.arange(4.0), gone=np.arange(4, dtype=np.int8))
    store.commit_slot(slot_record(1, []), [], old)
    store.commit_slot(
        slot_record(2, []),
        [],
        custom_state(ids[:2], a=np.ones(2), b=np.full(2, 7, np.float16)),
    )
    state = store.load_scheduler_state("custom")
    assert state is not None
    assert state["ids"].tolist() == ids.tolist()
    assert state["url_a"].tolist() == [1.0, 1.0, 2.0, 3.0]
    assert state["url_b"].dtype == np.float16
    assert state["url_b"].tolist() == [7.0, 7.0, 0.0, 0.0]
    assert "url_gone" not in state and state["slot"] == 1


def test_format_change_drops_unreadable_rows(store: Store) -> None:
    store.add_urls([NewUrl(f"https://a.example/{i}") for i in range(3)])
    ids, _ = store.active_urls()
    store.commit_slot(slot_record(1, []), [], custom_state(ids, a=np.arange(3.0)))
    with store.engine.begin() as conn:  # one row damaged on disk
        conn.execute(url_state.update().where(url_state.c.url_id == int(ids[2])).values(data=b"xx"))
    store.commit_slot(slot_record(2, []), [], custom_state(ids[:1], a=np.ones(1), b=np.ones(1)))
    state = store.load_scheduler_state("custom")
    assert state is not None
    assert state["ids"].tolist() == ids[:2].tolist()
    assert state["url_a"].tolist() == [1.0, 1.0] and state["url_b"].tolist() == [1.0, 0.0]


def test_save_full_state_replaces(store: Store) -> None:
    store.add_urls([NewUrl(f"https://a.example/{i}") for i in range(6)])
    ids, _ = store.active_urls()
    s = schedulers.create("uniform", capacity=2, seed=1)
    s.add(ids)
    store.save_scheduler_state(s.state())
    s.remove(ids[:3])
    store.save_scheduler_state(s.state())
    state = store.load_scheduler_state("uniform")
    assert state is not None and state["ids"].tolist() == ids[3:].tolist()
    assert store.scheduler_names() == ["uniform"]
    detail = store.url_detail("https://a.example/5")
    assert detail is not None and detail.state["uniform"]["importance"] == 1.0


@pytest.mark.parametrize("name", ["uniform", "lakg", "fpa", "bayes"])
def test_saved_format_is_the_flat_dicts(name: str) -> None:
    """The typed state is saved exactly as the flat dict it replaced was: the scalars JSON
    holds every key but ids and url_*, the record dtype lists the url_* arrays in order."""
    from crawler.store import _state

    s = schedulers.create(name, capacity=2, seed=3)
    s.add(np.arange(6), importance=np.linspace(0.2, 1, 6))
    ids = s.select()
    s.feedback(ids, np.ones(ids.size, dtype=bool))
    for state in (s.state(), s.take_delta()):
        flat = dict(state.items())
        old_scalars = {
            k: _state._encode(v) for k, v in flat.items() if k != "ids" and not k.startswith("url_")
        }
        assert _state.scalars_to_json(state) == json.dumps(old_scalars, sort_keys=True)
        old_fields = [(k, np.asarray(v).dtype.str) for k, v in flat.items() if k.startswith("url_")]
        assert _state.row_dtype(state) == np.dtype(old_fields)
        again = schedulers.SchedulerState.from_mapping(flat)
        assert list(again) == list(state) and again.scalars() == state.scalars()
