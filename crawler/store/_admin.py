"""Read-only queries for the admin commands (list, show, stats)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection, Row, func, select

from crawler.store import _state
from crawler.store._types import ChangeRow, DeferredHost, PollRow, Stats, UrlDetail, UrlRow
from crawler.store.models import (
    changes,
    deferrals,
    poll_log,
    scheduler_state,
    sites,
    slots,
    url_state,
    urls,
)

_ROW_COLS = (
    urls.c.id,
    urls.c.url,
    sites.c.host,
    urls.c.importance,
    urls.c.added_at,
    urls.c.removed_at,
    urls.c.last_polled_at,
    urls.c.last_changed_at,
    urls.c.last_status,
    urls.c.polls,
    urls.c.hits,
    urls.c.misses,
    urls.c.not_modified,
    urls.c.errors,
)


def parse_patterns(text: str | None) -> tuple[str, ...]:
    """The ignore patterns stored as a JSON list."""
    if not text:
        return ()
    try:
        value = json.loads(text)
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _url_row(r: Row[Any], wanted: float | None = None) -> UrlRow:
    return UrlRow(
        id=int(r.id),
        url=r.url,
        host=r.host,
        importance=float(r.importance),
        added_at=r.added_at,
        removed_at=r.removed_at,
        last_polled_at=r.last_polled_at,
        last_changed_at=r.last_changed_at,
        last_status=r.last_status,
        polls=int(r.polls),
        hits=int(r.hits),
        misses=int(r.misses),
        not_modified=int(r.not_modified),
        errors=int(r.errors),
        wanted_frequency=wanted,
    )


def list_urls(
    conn: Connection,
    frequencies: dict[int, float] | None,
    include_removed: bool,
    limit: int | None,
    offset: int,
) -> list[UrlRow]:
    query = select(*_ROW_COLS).join(sites, sites.c.id == urls.c.site_id).order_by(urls.c.id)
    if not include_removed:
        query = query.where(urls.c.removed_at.is_(None))
    if limit is not None:
        query = query.limit(limit)
    if offset:
        query = query.offset(offset)
    freq = frequencies or {}
    return [_url_row(r, freq.get(int(r.id))) for r in conn.execute(query)]


def url_detail(
    conn: Connection,
    url: str,
    recent: int,
    decompress: Any,
) -> UrlDetail | None:
    row = conn.execute(
        select(
            *_ROW_COLS,
            urls.c.selector,
            urls.c.ignore_patterns,
            urls.c.etag,
            urls.c.last_modified,
            urls.c.last_hash,
        )
        .join(sites, sites.c.id == urls.c.site_id)
        .where(urls.c.url == url)
    ).first()
    if row is None:
        return None
    uid = int(row.id)
    polls = [
        PollRow(
            polled_at=p.polled_at,
            slot=int(p.slot),
            outcome=p.outcome,
            status=p.status,
            duration_s=float(p.duration_s),
            bytes=int(p.bytes),
            content_hash=p.content_hash,
            error_kind=p.error_kind,
            error=p.error,
            truncated=bool(p.truncated),
        )
        for p in conn.execute(
            select(poll_log)
            .where(poll_log.c.url_id == uid)
            .order_by(poll_log.c.polled_at.desc(), poll_log.c.id.desc())
            .limit(recent)
        )
    ]
    found = [
        ChangeRow(
            detected_at=c.detected_at,
            slot=int(c.slot),
            old_hash=c.old_hash,
            new_hash=c.new_hash,
            snapshot=decompress(c.snapshot, int(c.snapshot_format)),
        )
        for c in conn.execute(
            select(changes)
            .where(changes.c.url_id == uid)
            .order_by(changes.c.detected_at.desc(), changes.c.id.desc())
            .limit(recent)
        )
    ]
    return UrlDetail(
        row=_url_row(row),
        selector=row.selector,
        ignore_patterns=parse_patterns(row.ignore_patterns),
        etag=row.etag,
        last_modified=row.last_modified,
        last_hash=row.last_hash,
        state=url_state_fields(conn, uid),
        polls=polls,
        changes=found,
    )


def url_state_fields(conn: Connection, uid: int) -> dict[str, dict[str, Any]]:
    """Each scheduler's saved fields for one URL (``url_`` prefix dropped)."""
    return url_state_fields_many(conn, [uid]).get(uid, {})


def url_state_fields_many(
    conn: Connection, uids: Sequence[int]
) -> dict[int, dict[str, dict[str, Any]]]:
    """``url_state_fields`` of many URLs, read in one query per chunk of ids."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    dtypes: dict[str, Any] = {}
    wanted = sorted(set(uids))
    for i in range(0, len(wanted), 900):
        rows = conn.execute(
            select(
                url_state.c.url_id,
                url_state.c.scheduler,
                url_state.c.data,
                scheduler_state.c.url_dtype,
            )
            .join(scheduler_state, scheduler_state.c.name == url_state.c.scheduler)
            .where(url_state.c.url_id.in_(wanted[i : i + 900]))
        )
        for uid, name, data, dtype_json in rows:
            if dtype_json not in dtypes:
                try:
                    dtypes[dtype_json] = _state.dtype_from_json(dtype_json)
                except ValueError:
                    dtypes[dtype_json] = None
            dtype = dtypes[dtype_json]
            if dtype is None:
                continue
            mine = out.setdefault(int(uid), {})
            if len(data) != dtype.itemsize:
                mine[name] = {"corrupt": True}
                continue
            fields = _state.unpack_rows(bytes(data), dtype)
            mine[name] = {
                k.removeprefix(_state.URL_PREFIX): _scalar(v[0]) for k, v in fields.items()
            }
    return out


def _scalar(value: Any) -> Any:
    item = value.item() if isinstance(value, np.generic) else value
    if isinstance(item, float) and not np.isfinite(item):
        return None
    return item


def stats(conn: Connection, top_hosts: int = 10) -> Stats:
    totals = conn.execute(
        select(
            func.count().filter(urls.c.removed_at.is_(None)),
            func.count().filter(urls.c.removed_at.is_not(None)),
            func.coalesce(func.sum(urls.c.polls), 0),
            func.coalesce(func.sum(urls.c.hits), 0),
            func.coalesce(func.sum(urls.c.misses), 0),
            func.coalesce(func.sum(urls.c.not_modified), 0),
            func.coalesce(func.sum(urls.c.errors), 0),
        )
    ).one()
    n_slots = int(conn.execute(select(func.count()).select_from(slots)).scalar_one())
    n_changes = int(conn.execute(select(func.count()).select_from(changes)).scalar_one())
    by_reason = {
        reason: int(n)
        for reason, n in conn.execute(
            select(deferrals.c.reason, func.sum(deferrals.c.polls))
            .group_by(deferrals.c.reason)
            .order_by(deferrals.c.reason)
        )
    }
    active, removed, polls, hits, misses, nm, errors = (int(v) for v in totals)
    return Stats(
        urls=active,
        removed_urls=removed,
        polls=polls,
        hits=hits,
        misses=misses,
        not_modified=nm,
        errors=errors,
        slots=n_slots,
        hit_rate_per_poll=hits / polls if polls else 0.0,
        hits_per_slot=hits / n_slots if n_slots else 0.0,
        changes=n_changes,
        deferred=by_reason,
        deferred_hosts=_deferred_hosts(conn, top_hosts),
    )


def _deferred_hosts(conn: Connection, top: int) -> list[DeferredHost]:
    """The ``top`` hosts with the most deferred polls (ties by host), with their counts by
    reason: one grouped query for the ranking, one for the reasons of those hosts."""
    if top <= 0:
        return []
    total = func.sum(deferrals.c.polls)
    ranked = conn.execute(
        select(deferrals.c.host, total)
        .group_by(deferrals.c.host)
        .order_by(total.desc(), deferrals.c.host)
        .limit(top)
    ).all()
    if not ranked:
        return []
    reasons: dict[str, dict[str, int]] = {host: {} for host, _ in ranked}
    for host, reason, n in conn.execute(
        select(deferrals.c.host, deferrals.c.reason, total)
        .where(deferrals.c.host.in_(list(reasons)))
        .group_by(deferrals.c.host, deferrals.c.reason)
        .order_by(deferrals.c.host, deferrals.c.reason)
    ):
        reasons[host][reason] = int(n)
    return [DeferredHost(host, int(n), reasons[host]) for host, n in ranked]
