"""Change history: each change's before and after, the export of changes, their retention.

A change row keeps only its after (``changes.snapshot``, compressed). Its before is the after
of the URL's previous change, or, for the URL's oldest kept change, the URL's baseline text
(``change_baselines``: written by the URL's first poll, and handed the text of the newest
change that retention deletes, so the oldest kept change still has its before). So each text
is stored once. A before is only given when its hash is the change's ``old_hash``: a change
that went unrecorded in between (snapshots turned off, a URL watched before this history
existed) gives no before rather than a wrong one. See docs/history.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite

from crawler.store._diffs import decompress_diff
from crawler.store._types import _plain
from crawler.store.models import SNAPSHOT_LINES, change_baselines, changes, url_tags, urls

#: a stored snapshot and its format to text (``crawler.store.decompress_snapshot``)
Decompress = Callable[[bytes | None, int], str | None]
#: rows deleted per transaction by the retention
PRUNE_BATCH = 5_000
_IN_CHUNK = 900  # ids per IN (...) list: well under every driver's limit
_BASELINE_UPDATED = ("slot", "recorded_at", "content_hash", "snapshot", "snapshot_format")


@dataclass(frozen=True, slots=True)
class ChangeInfo:
    """One committed change, without its texts (``crawler changes``)."""

    id: int
    url_id: int
    url: str
    slot: int
    detected_at: datetime
    old_hash: str | None
    new_hash: str | None
    tags: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k)) for k in self.__slots__} | {"tags": list(self.tags)}


@dataclass(frozen=True, slots=True)
class ChangeText:
    """One committed change with its texts: ``before`` (the text it replaced) and ``after``
    (the new text), each the readable text (a line per block element; snapshots written before
    the readable text existed read as one line), or None when not kept (snapshots off, a
    before older than the history, a text cut at ``snapshot_max_bytes`` is kept cut)."""

    info: ChangeInfo
    before: str | None
    after: str | None
    #: the unified diff before -> after as stored once made (``_diffs.py``); None: not
    #: made yet, or no text before
    diff: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return self.info.as_dict() | {"before": self.before, "after": self.after}


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What one retention pass did: change rows deleted, baselines moved forward."""

    deleted: int
    baselines: int


def baseline_row(
    url_id: int, slot: int, at: datetime, content_hash: str | None, snapshot: bytes
) -> dict[str, Any]:
    """A ``change_baselines`` row of a text in the readable form."""
    return {
        "url_id": url_id,
        "slot": slot,
        "recorded_at": at,
        "content_hash": content_hash,
        "snapshot": snapshot,
        "snapshot_format": SNAPSHOT_LINES,
    }


def write_baselines(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert or replace baseline rows; an older text never replaces a newer one."""
    if not rows:
        return
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(change_baselines)
    excluded = stmt.excluded
    stmt = stmt.on_conflict_do_update(
        index_elements=[change_baselines.c.url_id],
        set_={c: excluded[c] for c in _BASELINE_UPDATED},
        where=change_baselines.c.recorded_at <= excluded.recorded_at,
    )
    conn.execute(stmt, list(rows))


def _chunks(ids: Sequence[int]) -> Iterable[Sequence[int]]:
    for i in range(0, len(ids), _IN_CHUNK):
        yield ids[i : i + _IN_CHUNK]


def _tags_of(conn: Connection, url_ids: Iterable[int]) -> dict[int, tuple[str, ...]]:
    out: dict[int, list[str]] = {}
    for chunk in _chunks(sorted(set(url_ids))):
        rows = conn.execute(
            select(url_tags.c.url_id, url_tags.c.tag)
            .where(url_tags.c.url_id.in_(chunk))
            .order_by(url_tags.c.url_id, url_tags.c.tag)
        )
        for uid, tag in rows:
            out.setdefault(int(uid), []).append(tag)
    return {uid: tuple(tags) for uid, tags in out.items()}


_INFO_COLUMNS = (
    changes.c.id,
    changes.c.url_id,
    urls.c.url,
    changes.c.slot,
    changes.c.detected_at,
    changes.c.old_hash,
    changes.c.new_hash,
)


def _info(row: Any, tags: dict[int, tuple[str, ...]]) -> ChangeInfo:
    uid = int(row.url_id)
    return ChangeInfo(
        int(row.id), uid, row.url, int(row.slot), row.detected_at, row.old_hash, row.new_hash,
        tags.get(uid, ()),
    )  # fmt: skip


def list_changes(
    conn: Connection,
    *,
    since: datetime | None = None,
    url: str | None = None,
    tag: str | None = None,
    after_id: int | None = None,
    limit: int | None = None,
    newest_first: bool = False,
) -> list[ChangeInfo]:
    """Committed changes, oldest first (by id: the order of their commits), filtered by
    detection time, URL and tag; ``after_id`` and ``limit`` page through them;
    ``newest_first`` turns the order round (a feed's newest ``limit``)."""
    query = select(*_INFO_COLUMNS).join(urls, urls.c.id == changes.c.url_id)
    if since is not None:
        query = query.where(changes.c.detected_at >= since)
    if url is not None:
        query = query.where(urls.c.url == url)
    if tag is not None:
        tagged = select(url_tags.c.url_id).where(url_tags.c.tag == tag)
        query = query.where(changes.c.url_id.in_(tagged))
    if after_id is not None:
        query = query.where(changes.c.id > after_id)
    query = query.order_by(changes.c.id.desc() if newest_first else changes.c.id)
    if limit is not None:
        query = query.limit(limit)
    rows = conn.execute(query).all()
    tags = _tags_of(conn, (int(r.url_id) for r in rows))
    return [_info(r, tags) for r in rows]


def latest_change_id(conn: Connection, url: str) -> int | None:
    """The id of the newest change of ``url`` (None: it has none, or is not watched)."""
    found = conn.execute(
        select(func.max(changes.c.id))
        .join(urls, urls.c.id == changes.c.url_id)
        .where(urls.c.url == url)
    ).scalar()
    return None if found is None else int(found)


def read_change_texts(
    conn: Connection, ids: Sequence[int], decompress: Decompress
) -> dict[int, ChangeText]:
    """The changes ``ids`` (those that exist) with their before and after (module notes)."""
    if not ids:
        return {}
    mine = changes.alias("mine")
    earlier = changes.alias("earlier")
    prev_id = (
        select(func.max(earlier.c.id))
        .where(and_(earlier.c.url_id == mine.c.url_id, earlier.c.id < mine.c.id))
        .scalar_subquery()
        .label("prev_id")
    )
    rows: list[Any] = []
    for chunk in _chunks(sorted(set(ids))):
        rows += conn.execute(
            select(
                mine.c.id,
                mine.c.url_id,
                urls.c.url,
                mine.c.slot,
                mine.c.detected_at,
                mine.c.old_hash,
                mine.c.new_hash,
                mine.c.snapshot,
                mine.c.snapshot_format,
                mine.c.diff,
                prev_id,
            )
            .join(urls, urls.c.id == mine.c.url_id)
            .where(mine.c.id.in_(chunk))
        ).all()
    prev_ids = sorted({int(r.prev_id) for r in rows if r.prev_id is not None})
    prev: dict[int, Any] = {}
    for chunk in _chunks(prev_ids):
        for p in conn.execute(
            select(
                changes.c.id,
                changes.c.detected_at,
                changes.c.new_hash,
                changes.c.snapshot,
                changes.c.snapshot_format,
            ).where(changes.c.id.in_(chunk))
        ):
            prev[int(p.id)] = p
    url_ids = sorted({int(r.url_id) for r in rows})
    base: dict[int, Any] = {}
    for chunk in _chunks(url_ids):
        for b in conn.execute(select(change_baselines).where(change_baselines.c.url_id.in_(chunk))):
            base[int(b.url_id)] = b
    tags = _tags_of(conn, url_ids)
    out: dict[int, ChangeText] = {}
    for r in rows:
        before: str | None = None
        last: Any = prev.get(int(r.prev_id)) if r.prev_id is not None else None
        first: Any = base.get(int(r.url_id))
        texts = []  # the candidates whose hash is the change's old hash, newest kept
        if last is not None and last.new_hash == r.old_hash:
            texts.append((last.detected_at, last.snapshot, int(last.snapshot_format)))
        if first is not None and first.content_hash == r.old_hash:
            # newer than the last change when the URL's text was asked for after an upgrade
            # (docs/history.md): the readable form of the same version
            texts.append((first.recorded_at, first.snapshot, int(first.snapshot_format)))
        if texts:
            _, blob, form = max(texts, key=lambda t: t[0])
            before = decompress(blob, form)
        after = decompress(r.snapshot, int(r.snapshot_format))
        out[int(r.id)] = ChangeText(_info(r, tags), before, after, decompress_diff(r.diff))
    return out


def prune_changes(
    conn: Connection, keep_per_url: int | None, older_than: datetime | None
) -> PruneReport:
    """One batch of retention (call until it deletes nothing): the oldest changes past the
    newest ``keep_per_url`` of their URL, and those detected before ``older_than``, deleted;
    the newest deleted change of each URL hands its text to the URL's baseline first, so the
    oldest kept change (or the next one) keeps its before."""
    if keep_per_url is None and older_than is None:
        return PruneReport(0, 0)
    rank = (
        func.row_number()
        .over(partition_by=changes.c.url_id, order_by=changes.c.id.desc())
        .label("rank")
    )
    ranked = select(changes.c.id, changes.c.url_id, changes.c.detected_at, rank).subquery()
    doomed = []
    if keep_per_url is not None:
        doomed.append(ranked.c.rank > keep_per_url)
    if older_than is not None:
        doomed.append(ranked.c.detected_at < older_than)
    victims = conn.execute(
        select(ranked.c.id, ranked.c.url_id).where(or_(*doomed)).order_by(ranked.c.id)
        .limit(PRUNE_BATCH)
    ).all()  # fmt: skip
    if not victims:
        return PruneReport(0, 0)
    newest: dict[int, int] = {}
    for vid, uid in victims:  # ascending ids: the last one seen per URL is its newest
        newest[int(uid)] = int(vid)
    handed: list[dict[str, Any]] = []
    for chunk in _chunks(sorted(newest.values())):
        for c in conn.execute(
            select(
                changes.c.url_id, changes.c.slot, changes.c.detected_at, changes.c.new_hash,
                changes.c.snapshot, changes.c.snapshot_format,
            ).where(changes.c.id.in_(chunk))
        ):  # fmt: skip
            if c.snapshot is None:
                continue  # nothing to hand on: the next change has no before either way
            handed.append(
                {
                    "url_id": int(c.url_id),
                    "slot": int(c.slot),
                    "recorded_at": c.detected_at,
                    "content_hash": c.new_hash,
                    "snapshot": c.snapshot,
                    "snapshot_format": int(c.snapshot_format),
                }
            )
    handed.sort(key=lambda row: row["url_id"])  # one lock order for concurrent prunes
    write_baselines(conn, handed)
    ids = [int(v) for v, _ in victims]
    for chunk in _chunks(ids):
        conn.execute(delete(changes).where(changes.c.id.in_(chunk)))
    return PruneReport(len(ids), len(handed))
