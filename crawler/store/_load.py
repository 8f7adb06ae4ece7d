"""Loading a scheduler's saved state: one streamed query (driver rows), the blobs viewed by
NumPy; or the saved rows of some URLs only (a cluster worker's gained URLs), through the same
header, row checks and assembly."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, select

from crawler.schedulers import SchedulerState
from crawler.store import _state
from crawler.store._scan import scan
from crawler.store._sql import among
from crawler.store.models import scheduler_state, url_state

log = logging.getLogger(__name__)
_first, _second = itemgetter(0), itemgetter(1)

_ROWS = (
    "SELECT s.url_id, s.data FROM url_state s JOIN urls u ON u.id = s.url_id "
    "WHERE s.scheduler = {} AND u.removed_at IS NULL ORDER BY s.url_id"
)
_SQLITE_ROWS = _ROWS.format("?")
_PG_ROWS = _ROWS.format("%s")
#: URL ids per query of ``load_states_of``
_CHUNK = 10_000


def load_state(conn: Connection, name: str, problems: list[str] | None) -> SchedulerState | None:
    """The merged state of scheduler ``name`` over the watched URLs (see Store)."""
    header = _header(conn, name, problems)
    if header is None:
        return None
    scalars, dtype = header
    id_parts: list[NDArray[np.int64]] = []
    blobs: list[bytes] = []
    bad: list[int] = []
    for rows in scan(conn, "loading the scheduler state", _SQLITE_ROWS, _PG_ROWS, (name,)):
        rows = _sized(rows, dtype.itemsize, bad)
        id_parts.append(np.fromiter(map(_first, rows), np.int64, len(rows)))
        blobs.append(b"".join(map(_second, rows)))  # one buffer per chunk
    _report(_corrupt(name, bad), problems)
    ids = np.concatenate(id_parts) if id_parts else np.empty(0, np.int64)
    return _assemble(scalars, dtype, ids, blobs)


def load_states_of(
    conn: Connection, name: str, ids: Sequence[int], problems: list[str] | None
) -> SchedulerState | None:
    """The saved state of scheduler ``name`` restricted to ``ids`` (a cluster worker's
    gained URLs; those with a usable saved row), the scalars as saved: the same header,
    row checks and assembly as ``load_state``, over the URLs asked for only."""
    header = _header(conn, name, problems)
    if header is None:
        return None
    scalars, dtype = header
    rows: list[tuple[int, bytes]] = []
    bad: list[int] = []
    wanted = sorted({int(i) for i in ids})
    for start in range(0, len(wanted), _CHUNK):
        chunk = wanted[start : start + _CHUNK]
        found = conn.execute(
            select(url_state.c.url_id, url_state.c.data).where(
                url_state.c.scheduler == name, among(conn, url_state.c.url_id, chunk)
            )
        )
        rows.extend(_sized([(int(i), d) for i, d in found], dtype.itemsize, bad))
    _report(_corrupt(name, bad), problems)
    rows.sort(key=_first)
    got = np.fromiter(map(_first, rows), np.int64, len(rows))
    return _assemble(scalars, dtype, got, [b"".join(map(_second, rows))])


def _header(
    conn: Connection, name: str, problems: list[str] | None
) -> tuple[dict[str, Any], np.dtype[Any]] | None:
    """Scheduler ``name``'s saved scalars and per-URL row type; None if it was never saved
    or they cannot be read (then reported)."""
    found = conn.execute(
        select(scheduler_state.c.scalars, scheduler_state.c.url_dtype).where(
            scheduler_state.c.name == name
        )
    ).first()
    if found is None:
        return None
    try:
        return _state.scalars_from_json(found[0]), _state.dtype_from_json(found[1])
    except (ValueError, TypeError) as exc:
        _report([f"scheduler {name}: saved state is unreadable ({exc}); starting afresh"], problems)
        return None


def _sized(rows: Sequence[Any], size: int, bad: list[int]) -> list[Any]:
    """The (url id, blob) rows whose blob is ``size`` bytes; the others' ids go to ``bad``."""
    if _all_sized(list(map(_second, rows)), size):
        return list(rows)
    bad.extend(int(i) for i, d in rows if d is None or len(d) != size)
    return [(i, d) for i, d in rows if d is not None and len(d) == size]


def _corrupt(name: str, bad: list[int]) -> list[str]:
    if not bad:
        return []
    return [
        f"scheduler {name}: {len(bad)} corrupt per-URL state row(s) skipped (those URLs "
        f"restart learning), e.g. url ids {bad[:5]}"
    ]


def _assemble(
    scalars: dict[str, Any], dtype: np.dtype[Any], ids: NDArray[np.int64], blobs: list[bytes]
) -> SchedulerState:
    """The state from its scalars and its rows' ids and blobs (in id order). A state that
    is not this release's (another format) is an error for the caller, as restoring it
    would be: starting afresh would overwrite what was learned."""
    return SchedulerState.from_mapping(
        {**scalars, "ids": ids, **_state.unpack_rows(b"".join(blobs), dtype)}
    )


def _all_sized(data: list[Any], size: int) -> bool:
    """Every blob is ``size`` bytes long (none is NULL)."""
    try:
        lengths = set(map(len, data))
    except TypeError:  # a NULL
        return False
    return not lengths or lengths == {size}


def _report(issues: list[str], problems: list[str] | None) -> None:
    for issue in issues:
        log.warning("%s", issue)
    if problems is not None:
        problems.extend(issues)
