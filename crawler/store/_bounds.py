"""The operator's rules of each URL and its failure record: the queries.

- **Bounds and pause** are columns of ``urls`` (migration 0004): ``min_interval_s`` and
  ``max_interval_s`` in seconds (NULL: the setting's default; 0: none, whatever the default)
  and ``paused``. ``crawler edit``, ``pause`` and ``resume`` change them in place (the URL
  keeps its id, so its learned scheduler rows stay) and bump the watch-list version, so a
  running service applies them at its next slot.
- **Tags** are rows of ``url_tags`` (one per URL and tag, indexed by tag), so that
  ``--tag T`` selects its URLs with an index lookup.
- **The failure record** (consecutive failures, the trailing run of permanent ones,
  retired, the last failure's kind and error, when the streak began) is kept by the
  service and written in each slot's own transaction (``commit_slot``), so a kill -9
  loses none of it. It is stored rather than derived from ``poll_log`` at start: the poll
  log is pruned after ``poll_log_retention_days`` while a retired URL is probed only every
  1,000 slots (about 3 hours at 10 s slots, and longer with longer slots), and finding the
  trailing run of errors of every URL would scan the whole log at each start.
- **Revive**: ``crawler revive`` clears the record and sets ``revive_version`` to the
  watch-list version it bumped; the service revives, in the scheduler, the URLs whose
  ``revive_version`` is newer than the last version it saw. (Clearing the record alone
  would race with a slot of the service not yet committed, which writes it back.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, Select, and_, bindparam, delete, or_, select, update

from crawler.store._sql import among
from crawler.store._types import FailureRow
from crawler.store._upsert import upsert
from crawler.store.models import sites, url_tags, urls

#: a tag: 1 to 64 characters, letters, digits and ``_ . : / -``
TAG = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
#: the columns ``edit_urls`` may change
EDITABLE = frozenset(
    {"importance", "min_interval_s", "max_interval_s", "selector", "ignore_patterns", "paused"}
)
#: ids per statement when marking the sites of an edit
CHUNK = 10_000
#: longest failure message kept in ``urls.fail_error``
ERROR_CHARS = 500


@dataclass(frozen=True, slots=True)
class UrlRules:
    """The rules of the watched URLs that have any, aligned arrays in id order: intervals
    in seconds (NaN: the setting's default; 0: none, whatever the default) and pause."""

    ids: NDArray[np.int64]
    min_interval_s: NDArray[np.float64]
    max_interval_s: NDArray[np.float64]
    paused: NDArray[np.bool_]


def check_tag(tag: str) -> str:
    if not TAG.fullmatch(tag):
        raise ValueError(
            f"invalid tag {tag!r}: 1 to 64 characters among letters, digits and _ . : / -"
        )
    return tag


def select_urls(
    conn: Connection, url_list: Sequence[str], tags: Sequence[str]
) -> list[tuple[int, str]]:
    """(id, url) of the watched URLs among ``url_list`` or carrying one of ``tags``."""
    found: dict[int, str] = {}
    if url_list:
        rows = conn.execute(
            select(urls.c.id, urls.c.url).where(
                among(conn, urls.c.url, list(url_list)), urls.c.removed_at.is_(None)
            )
        )
        found.update((int(i), u) for i, u in rows)
    if tags:
        rows = conn.execute(
            select(urls.c.id, urls.c.url)
            .join(url_tags, url_tags.c.url_id == urls.c.id)
            .where(url_tags.c.tag.in_(list(tags)), urls.c.removed_at.is_(None))
        )
        found.update((int(i), u) for i, u in rows)
    return sorted(found.items())


def edit_urls(
    conn: Connection,
    ids: Sequence[int],
    values: Mapping[str, Any],
    add_tags: Sequence[str] = (),
    remove_tags: Sequence[str] = (),
) -> None:
    """Change columns of the URLs ``ids`` in place, add and remove tags."""
    unknown = set(values) - EDITABLE
    if unknown:
        raise ValueError(f"not editable: {sorted(unknown)}")
    if not ids:
        return
    id_list = [int(i) for i in ids]
    if values:
        conn.execute(update(urls).where(among(conn, urls.c.id, id_list)).values(**values))
    if add_tags:
        rows = [{"url_id": i, "tag": check_tag(t)} for i in id_list for t in add_tags]
        upsert(conn, url_tags, rows, ["url_id", "tag"])
    if remove_tags:
        conn.execute(
            delete(url_tags).where(
                among(conn, url_tags.c.url_id, id_list), url_tags.c.tag.in_(list(remove_tags))
            )
        )


def mark_edited_sites(conn: Connection, version: int, site_ids: Sequence[int]) -> None:
    """The sites ``site_ids`` were edited by the edit that bumped the watch list to
    ``version``: a cluster worker re-reads their URLs at its next bump (the edit made
    the bump, its version's row locked, before it writes here)."""
    for start in range(0, len(site_ids), CHUNK):
        chunk = [int(i) for i in site_ids[start : start + CHUNK]]
        conn.execute(
            update(sites).where(among(conn, sites.c.id, chunk)).values(edit_version=version)
        )


def mark_edited_urls(conn: Connection, version: int, ids: Sequence[int]) -> None:
    """The sites of the URLs ``ids``, edited by the edit of ``version``
    (``mark_edited_sites``)."""
    found: set[int] = set()
    for start in range(0, len(ids), CHUNK):
        chunk = [int(i) for i in ids[start : start + CHUNK]]
        found.update(
            int(s)
            for s in conn.execute(
                select(urls.c.site_id).where(among(conn, urls.c.id, chunk))
            ).scalars()
        )
    mark_edited_sites(conn, version, sorted(found))


def request_revive(conn: Connection, ids: Sequence[int], version: int) -> None:
    """Clear the failure record of ``ids`` and mark them revived at ``version``."""
    if ids:
        conn.execute(
            update(urls)
            .where(among(conn, urls.c.id, [int(i) for i in ids]))
            .values(revive_version=version, **_CLEARED)
        )


def of_sites(conn: Connection, query: Select[Any], site_list: Sequence[str] | None) -> Any:
    """``query`` (over ``urls``) restricted to the URLs of the sites ``site_list``
    (``sites.host``; None: every site). A cluster worker reads only its own sites' rows:
    the sites' ids first (by their unique host), then ``urls.site_id = ANY(ids)``, which
    the partial indexes of migration 0011 serve; as one statement with a sub-select the
    planner joined ``sites`` again for every URL. The cost then grows with the worker's
    rows, not with the whole watch list."""
    if site_list is None:
        return query
    found = conn.execute(
        select(sites.c.id).where(among(conn, sites.c.host, list(site_list) or [""]))
    ).scalars()
    ids = [int(i) for i in found]
    return query.where(among(conn, urls.c.site_id, ids or [-1]))


def revived_since(
    conn: Connection, version: int, site_list: Sequence[str] | None = None
) -> NDArray[np.int64]:
    """Ids of the watched URLs an operator revived after watch-list version ``version``
    (of the sites ``site_list`` only, unless None); an index of the revived URLs."""
    query = select(urls.c.id).where(urls.c.revive_version > version, urls.c.removed_at.is_(None))
    rows = conn.execute(of_sites(conn, query, site_list).order_by(urls.c.id)).scalars()
    return np.array(list(rows), dtype=np.int64)


def read_rules(conn: Connection, site_list: Sequence[str] | None = None) -> UrlRules:
    """The watched URLs with a bound of their own or paused (of the sites ``site_list``
    only, unless None)."""
    query = select(urls.c.id, urls.c.min_interval_s, urls.c.max_interval_s, urls.c.paused)
    rows = conn.execute(
        of_sites(conn, query, site_list)
        .where(
            urls.c.removed_at.is_(None),
            or_(
                urls.c.min_interval_s.is_not(None),
                urls.c.max_interval_s.is_not(None),
                urls.c.paused,
            ),
        )
        .order_by(urls.c.id)
    ).all()
    return UrlRules(
        ids=np.array([r[0] for r in rows], dtype=np.int64),
        min_interval_s=np.array([np.nan if r[1] is None else r[1] for r in rows], np.float64),
        max_interval_s=np.array([np.nan if r[2] is None else r[2] for r in rows], np.float64),
        paused=np.array([bool(r[3]) for r in rows], dtype=bool),
    )


def read_failures(
    conn: Connection, site_list: Sequence[str] | None = None
) -> list[tuple[str, FailureRow]]:
    """(url, record) of the watched URLs with a failure streak or retired, by id (of the
    sites ``site_list`` only, unless None)."""
    query = select(
        urls.c.url,
        urls.c.id,
        urls.c.fail_streak,
        urls.c.fail_permanent,
        urls.c.retired,
        urls.c.fail_kind,
        urls.c.fail_error,
        urls.c.failing_since,
    )
    rows = conn.execute(
        of_sites(conn, query, site_list)
        .where(urls.c.removed_at.is_(None), or_(urls.c.fail_streak > 0, urls.c.retired))
        .order_by(urls.c.id)
    )
    return [
        (url, FailureRow(int(i), int(s), int(p), bool(r), kind, error, since))
        for url, i, s, p, r, kind, error, since in rows
    ]


def write_failures(conn: Connection, rows: Sequence[FailureRow]) -> None:
    """Write the failure records of one slot (in its transaction)."""
    cleared = [{"b_id": r.url_id} for r in rows if r.streak == 0 and not r.retired]
    failing = [
        {
            "b_id": r.url_id,
            "b_streak": r.streak,
            "b_permanent": r.permanent,
            "b_retired": r.retired,
            "b_kind": r.kind,
            "b_error": None if r.error is None else r.error[:ERROR_CHARS],
            "b_since": r.since,
        }
        for r in rows
        if r.streak > 0 or r.retired
    ]
    if cleared:
        conn.execute(update(urls).where(urls.c.id == bindparam("b_id")).values(**_CLEARED), cleared)
    if failing:
        conn.execute(
            update(urls)
            .where(urls.c.id == bindparam("b_id"))
            .values(
                fail_streak=bindparam("b_streak"),
                fail_permanent=bindparam("b_permanent"),
                retired=bindparam("b_retired"),
                fail_kind=bindparam("b_kind"),
                fail_error=bindparam("b_error"),
                failing_since=bindparam("b_since"),
            ),
            failing,
        )


def tags_by_url(conn: Connection) -> dict[int, list[str]]:
    """Every watched URL's tags (only those that have any)."""
    out: dict[int, list[str]] = {}
    rows = conn.execute(
        select(url_tags.c.url_id, url_tags.c.tag)
        .join(urls, and_(urls.c.id == url_tags.c.url_id, urls.c.removed_at.is_(None)))
        .order_by(url_tags.c.url_id, url_tags.c.tag)
    )
    for uid, tag in rows:
        out.setdefault(int(uid), []).append(tag)
    return out


_CLEARED: dict[str, Any] = {
    "fail_streak": 0,
    "fail_permanent": 0,
    "retired": False,
    "fail_kind": None,
    "fail_error": None,
    "failing_since": None,
}
