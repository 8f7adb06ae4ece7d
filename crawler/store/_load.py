"""Loading a scheduler's saved state: one streamed query (driver rows), the blobs viewed by
NumPy."""

from __future__ import annotations

import logging
from operator import itemgetter
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, select

from crawler.schedulers import SchedulerState
from crawler.store import _state
from crawler.store._scan import scan
from crawler.store.models import scheduler_state

log = logging.getLogger(__name__)
_first, _second = itemgetter(0), itemgetter(1)

_ROWS = (
    "SELECT s.url_id, s.data FROM url_state s JOIN urls u ON u.id = s.url_id "
    "WHERE s.scheduler = {} AND u.removed_at IS NULL ORDER BY s.url_id"
)
_SQLITE_ROWS = _ROWS.format("?")
_PG_ROWS = _ROWS.format("%s")


def load_state(conn: Connection, name: str, problems: list[str] | None) -> SchedulerState | None:
    """The merged state of scheduler ``name`` over the watched URLs (see Store)."""
    found = conn.execute(
        select(scheduler_state.c.scalars, scheduler_state.c.url_dtype).where(
            scheduler_state.c.name == name
        )
    ).first()
    if found is None:
        return None
    issues: list[str] = []
    try:
        scalars = _state.scalars_from_json(found[0])
        dtype = _state.dtype_from_json(found[1])
    except (ValueError, TypeError) as exc:
        issues.append(f"scheduler {name}: saved state is unreadable ({exc}); starting afresh")
        _report(issues, problems)
        return None
    size = dtype.itemsize
    id_parts: list[NDArray[np.int64]] = []
    blobs: list[bytes] = []
    bad: list[int] = []
    for rows in scan(conn, "loading the scheduler state", _SQLITE_ROWS, _PG_ROWS, (name,)):
        data = list(map(_second, rows))
        if not _all_sized(data, size):
            bad.extend(int(i) for i, d in rows if d is None or len(d) != size)
            rows = [(i, d) for i, d in rows if d is not None and len(d) == size]
            data = list(map(_second, rows))
        id_parts.append(np.fromiter(map(_first, rows), np.int64, len(rows)))
        blobs.append(b"".join(data))  # one buffer per chunk
    if bad:
        issues.append(
            f"scheduler {name}: {len(bad)} corrupt per-URL state row(s) skipped (those URLs "
            f"restart learning), e.g. url ids {bad[:5]}"
        )
    ids = np.concatenate(id_parts) if id_parts else np.empty(0, np.int64)
    _report(issues, problems)
    # a state that is not this release's (another format) is an error for the caller, as
    # restoring it would be: starting afresh would overwrite what was learned
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
