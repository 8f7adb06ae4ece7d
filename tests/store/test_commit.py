"""commit_slot: everything of a slot in one transaction."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from crawler.store import (
    Store,
    StoreError,
    StoreUnavailable,
    compress_snapshot,
    decompress_snapshot,
)
from crawler.store.models import changes, poll_log, slots, url_state
from tests.store._helpers import add, custom_state, poll, slot_record


def _count(store: Store, table: object) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())  # type: ignore[arg-type]


def test_commit_writes_polls_changes_and_url_counters(store: Store) -> None:
    a, b, c, d = add(store, 4)
    polls = [
        poll(a, "baseline", content_hash="h0", raw_hash="r0", etag='"1"', last_modified="x"),
        # stored as extracted (whitespace as in the page), read back as the normalized text
        poll(b, "hit", content_hash="h2", old_hash="h1", snapshot="\n  new\u00a0\t text\n\n"),
        poll(c, "not_modified"),
        poll(d, "error", error_kind="timeout", error="timed out"),
    ]
    store.commit_slot(slot_record(1, polls), polls)
    recs = store.url_records([a, b, c, d])
    assert recs[a].last_hash == "h0" and recs[a].last_raw_hash == "r0"
    assert recs[a].etag == '"1"' and recs[a].last_modified == "x"
    assert recs[b].last_hash == "h2"
    # a later miss without hashes keeps the cached hash
    polls2 = [poll(a, "miss", etag='"2"')]
    store.commit_slot(slot_record(2, polls2), polls2)
    assert store.url_records([a])[a].last_hash == "h0"
    assert store.url_records([a])[a].etag == '"2"'

    detail = store.url_detail("https://example.com/page/1")
    assert detail is not None
    assert detail.row.hits == 1 and detail.row.polls == 1
    assert detail.changes[0].old_hash == "h1" and detail.changes[0].new_hash == "h2"
    assert detail.changes[0].snapshot == "new text"
    err = store.url_detail("https://example.com/page/3")
    assert err is not None and err.row.errors == 1 and err.polls[0].error_kind == "timeout"

    st = store.stats()
    assert (st.polls, st.hits, st.misses, st.not_modified, st.errors) == (5, 1, 1, 1, 1)
    assert st.slots == 2 and st.changes == 1
    assert st.hit_rate_per_poll == pytest.approx(1 / 5)


def test_failure_mid_transaction_writes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    (a,) = add(store, 1)
    polls = [poll(a, "hit", content_hash="h")]

    def boom(*args: object) -> None:
        raise RuntimeError("crash after the polls were written")

    monkeypatch.setattr(Store, "_write_state", boom)
    with pytest.raises(RuntimeError):
        store.commit_slot(slot_record(1, polls), polls, custom_state([]))
    assert _count(store, slots) == 0
    assert _count(store, poll_log) == 0
    assert _count(store, changes) == 0
    assert store.url_records([a])[a].last_hash is None
    assert store.stats().polls == 0


def test_bad_row_rolls_back_and_raises_store_error(store: Store) -> None:
    (a,) = add(store, 1)
    # a change of an unknown URL: the changes table's foreign key refuses it
    polls = [poll(a, "miss"), poll(999_999, "hit", content_hash="h1", old_hash="h0")]
    with pytest.raises(StoreError):
        store.commit_slot(slot_record(1, polls), polls)
    assert _count(store, slots) == 0 and _count(store, poll_log) == 0


def test_unreachable_database_raises_store_unavailable(db_backend: str) -> None:
    if db_backend == "sqlite":
        url = "sqlite:////proc/no/such/dir/x.db"
    else:
        url = "postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2"
    store = Store(url)
    try:
        with pytest.raises(StoreUnavailable):
            store.commit_slot(slot_record(1, []), [])
        with pytest.raises(StoreUnavailable):
            store.active_urls()
    finally:
        store.close()


def test_prune_poll_log(store: Store) -> None:
    (a,) = add(store, 1)
    now = datetime.now(UTC)
    old = [poll(a, "miss", now - timedelta(days=10)) for _ in range(3)]
    new = [poll(a, "miss", now)]
    store.commit_slot(slot_record(1, old), old)
    store.commit_slot(slot_record(2, new), new)
    assert store.prune_poll_log(now - timedelta(days=7)) == 3
    assert store.prune_poll_log(timedelta(days=7)) == 0
    assert _count(store, poll_log) == 1
    assert store.stats().polls == 4  # lifetime counters are kept


def test_snapshots_can_be_disabled_or_truncated(database_url: str) -> None:
    store = Store(database_url, snapshot_max_bytes=4)
    try:
        a, b = add(store, 2)
        polls = [poll(a, "hit", content_hash="x", snapshot="abcdefgh")]
        store.commit_slot(slot_record(1, polls), polls)
        detail = store.url_detail("https://example.com/page/0")
        assert detail is not None and detail.changes[0].snapshot == "abcd"
    finally:
        store.close()
    off = Store(database_url, store_snapshots=False)
    try:
        polls = [poll(b, "hit", content_hash="y", snapshot="text")]
        off.commit_slot(slot_record(2, polls), polls)
        detail = off.url_detail("https://example.com/page/1")
        assert detail is not None and detail.changes[0].snapshot is None
    finally:
        off.close()


def test_unknown_outcome_is_rejected(store: Store) -> None:
    (a,) = add(store, 1)
    with pytest.raises(ValueError, match="outcome"):
        store.commit_slot(slot_record(1, []), [poll(a, "maybe")])


def saved_uniform(store: Store, n: int) -> list[int]:
    """``n`` watched URLs with a uniform scheduler's learning rows committed; their ids."""
    import numpy as np

    from crawler import schedulers

    ids = np.array(add(store, n), dtype=np.int64)
    s = schedulers.create("uniform", capacity=2, seed=3)
    s.add(ids)
    store.commit_slot(slot_record(1, []), [], s.take_delta())
    return [int(i) for i in ids]


def test_corrupt_state_row_is_skipped(store: Store) -> None:
    from crawler import schedulers

    ids = saved_uniform(store, 5)
    with store.engine.begin() as conn:
        conn.execute(update(url_state).where(url_state.c.url_id == ids[2]).values(data=b"x"))
    problems: list[str] = []
    state = store.load_scheduler_state("uniform", problems)
    assert state is not None
    assert state["ids"].tolist() == [i for i in ids if i != ids[2]]
    assert len(problems) == 1 and "corrupt" in problems[0]
    restored = schedulers.restore(state)
    assert restored.size == 4


def test_from_settings(database_url: str) -> None:
    from crawler.settings import load_settings

    st = Store.from_settings(
        load_settings({"database_url": database_url, "store_snapshots": False})
    )
    try:
        assert st.store_snapshots is False and st.revision() is not None
    finally:
        st.close()


def test_every_state_row_corrupt_restarts_learning(store: Store) -> None:
    from crawler import schedulers

    saved_uniform(store, 3)
    with store.engine.begin() as conn:
        conn.execute(update(url_state).values(data=b"short"))
    problems: list[str] = []
    state = store.load_scheduler_state("uniform", problems)
    assert state is not None and state["ids"].tolist() == []
    assert "3 corrupt" in problems[0]
    assert schedulers.restore(state).size == 0


def test_poll_times_are_stored_as_sqlalchemy_stores_them(store: Store, db_backend: str) -> None:
    """The SQLite fast path binds times as the column type's own text (a zero microsecond
    part included), so they read back, sort and compare like rows SQLAlchemy wrote."""
    (a,) = add(store, 1)
    whole_second = datetime(2026, 11, 23, 1, 2, 3, tzinfo=UTC)
    store.commit_slot(
        slot_record(1, [poll(a, "miss", whole_second)]), [poll(a, "miss", whole_second)]
    )
    with store.engine.connect() as conn:
        assert conn.execute(select(poll_log.c.polled_at)).scalar() == whole_second
        if db_backend == "sqlite":
            raw = conn.exec_driver_sql("SELECT polled_at, last_polled_at FROM poll_log, urls")
            assert raw.one() == ("2026-11-23 01:02:03.000000",) * 2


def test_snapshots_are_zstd_and_older_zlib_snapshots_still_read() -> None:
    blob = compress_snapshot("a\n\n changed   page\u00a0text", None)
    assert blob[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame
    assert decompress_snapshot(blob) == "a changed page text"
    assert decompress_snapshot(zlib.compress(b"written  by\n an older version")) == (
        "written by an older version"
    )
    assert decompress_snapshot(b"\x28\xb5\x2f\xfd not a frame") is None
    assert decompress_snapshot(b"neither format") is None
