"""The hosts of the watched URLs, and the service's politeness caps per host (``host_caps``).

The service groups its URLs by host for the scheduler (``crawler.service._caps``): it needs
each watched URL's host, at start for all of them and at each watch-list change for the new
ones, without the rest of a URL's record (a lean join, scanned in chunks). It writes its
current caps to ``host_caps`` when they change, for ``crawler list`` and ``crawler stats``,
which run in other processes: ``Store.host_caps`` reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Engine, delete, insert, select

from crawler.store._engine import reading, translate_errors
from crawler.store._scan import scan
from crawler.store._sql import among
from crawler.store._upsert import upsert
from crawler.store.models import host_caps as host_caps_table
from crawler.store.models import sites, urls

_ALL_HOSTS = (
    "SELECT u.id, s.host FROM urls u JOIN sites s ON s.id = u.site_id "
    "WHERE u.removed_at IS NULL ORDER BY u.id"
)
#: ids per query when reading the hosts of some URLs
_CHUNK = 10_000


@dataclass(frozen=True, slots=True)
class HostCapRow:
    """One host's cap as the service last wrote it (``host`` is the politeness key, the host
    name without port, as ``crawler.sites.host_key`` gives it)."""

    host: str
    #: polls per slot the host may take
    cap: float
    #: polls per slot the scheduler plans for the host's URLs
    planned: float
    #: the plan reaches the cap (the host would get more polls without it)
    binding: bool
    #: what sets the cap: "delay", "crawl_delay", "response_time", "retry_after" or "robots"
    reason: str
    #: the end of a Retry-After back-off, else None
    until: datetime | None = None


def url_hosts(
    engine: Engine,
    ids: Sequence[int] | NDArray[np.int64] | None = None,
    site_list: Sequence[str] | None = None,
) -> tuple[NDArray[np.int64], list[str]]:
    """(ids, hosts as stored, ``host[:port]``) of the given URLs (unknown ids left out), or of
    every watched URL (``ids`` None) of the sites ``site_list`` (None: of every site), in id
    order."""
    out_ids: list[int] = []
    out_hosts: list[str] = []
    # a whole scan streams through a server-side cursor (a transaction); a worker's share is
    # read outside one (``reading``)
    whole = ids is None and site_list is None
    opened = engine.connect() if whole else reading(engine)
    with translate_errors("loading the hosts of URLs"), opened as conn:
        if ids is None and site_list is not None:
            query = (
                select(urls.c.id, sites.c.host)
                .join(sites, sites.c.id == urls.c.site_id)
                .where(among(conn, sites.c.host, list(site_list) or [""]))
                .where(urls.c.removed_at.is_(None))
                .order_by(urls.c.id)
            )
            for i, host in conn.execute(query):
                out_ids.append(int(i))
                out_hosts.append(str(host))
        elif ids is None:
            for rows in scan(conn, "loading the hosts of URLs", _ALL_HOSTS, _ALL_HOSTS):
                for i, host in rows:
                    out_ids.append(int(i))
                    out_hosts.append(str(host))
        else:
            wanted = sorted({int(i) for i in ids})
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start : start + _CHUNK]
                query = (
                    select(urls.c.id, sites.c.host)
                    .join(sites, sites.c.id == urls.c.site_id)
                    .where(among(conn, urls.c.id, chunk))
                    .order_by(urls.c.id)
                )
                for i, host in conn.execute(query):
                    out_ids.append(int(i))
                    out_hosts.append(str(host))
    return np.array(out_ids, dtype=np.int64), out_hosts


def save_host_caps(
    engine: Engine, rows: Sequence[HostCapRow], worker_id: str | None = None
) -> None:
    """Replace the table's rows by ``rows`` (the service's current caps), in one transaction.
    A cluster worker (``worker_id``) replaces only its own: its rows are written (a host it
    took over from another worker changes hands) and those it wrote before for hosts it no
    longer has are deleted; the other workers' rows stay."""
    now = datetime.now(UTC)
    values = [
        {
            "host": r.host,
            "cap": float(r.cap),
            "planned": float(r.planned),
            "binding": bool(r.binding),
            "reason": r.reason,
            "until": r.until,
            "updated_at": now,
        }
        for r in rows
    ]
    if worker_id is not None:
        _save_own(engine, values, worker_id)
        return
    with translate_errors("saving the host caps"), engine.begin() as conn:
        conn.execute(delete(host_caps_table))
        if values:
            conn.execute(insert(host_caps_table), values)


def _save_own(engine: Engine, values: Sequence[Mapping[str, object]], worker_id: str) -> None:
    """A cluster worker's caps: upsert its hosts' rows, delete its other rows."""
    t = host_caps_table
    hosts = [str(v["host"]) for v in values]
    with translate_errors("saving the host caps"), engine.begin() as conn:
        stale = delete(t).where(t.c.worker_id == worker_id)
        if hosts:
            stale = stale.where(~among(conn, t.c.host, hosts))
        conn.execute(stale)
        if not values:
            return
        rows = [{**v, "worker_id": worker_id} for v in values]
        upsert(conn, t, rows, ["host"], [k for k in rows[0] if k != "host"])


def host_caps(engine: Engine) -> dict[str, HostCapRow]:
    """The caps the service last wrote, by host (empty when none, or no service ran)."""
    t = host_caps_table
    query = select(t.c.host, t.c.cap, t.c.planned, t.c.binding, t.c.reason, t.c.until)
    with translate_errors("reading the host caps"), engine.connect() as conn:
        return {
            row.host: HostCapRow(
                row.host, row.cap, row.planned, bool(row.binding), row.reason, row.until
            )
            for row in conn.execute(query)
        }
