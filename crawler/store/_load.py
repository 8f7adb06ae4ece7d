"""Loading a scheduler's saved state: one streamed query, the blobs viewed by NumPy."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, select

from crawler.store import _state
from crawler.store.models import scheduler_state, url_state, urls

log = logging.getLogger(__name__)

STREAM = 50_000


def load_state(conn: Connection, name: str, problems: list[str] | None) -> dict[str, Any] | None:
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
        state = _state.scalars_from_json(found[0])
        dtype = _state.dtype_from_json(found[1])
    except (ValueError, TypeError) as exc:
        issues.append(f"scheduler {name}: saved state is unreadable ({exc}); starting afresh")
        _report(issues, problems)
        return None
    size = dtype.itemsize
    query = (
        select(url_state.c.url_id, url_state.c.data)
        .join(urls, urls.c.id == url_state.c.url_id)
        .where(url_state.c.scheduler == name, urls.c.removed_at.is_(None))
        .order_by(url_state.c.url_id)
    )
    id_parts: list[NDArray[np.int64]] = []
    blobs: list[bytes] = []
    bad: list[int] = []
    result = conn.execution_options(stream_results=True, yield_per=STREAM).execute(query)
    for part in result.partitions():
        good = [r for r in part if r[1] is not None and len(r[1]) == size]
        if len(good) != len(part):
            bad.extend(int(r[0]) for r in part if r[1] is None or len(r[1]) != size)
        id_parts.append(np.fromiter((r[0] for r in good), np.int64, len(good)))
        blobs.append(b"".join(bytes(r[1]) for r in good))  # one buffer per partition
    if bad:
        issues.append(
            f"scheduler {name}: {len(bad)} corrupt per-URL state row(s) skipped (those URLs "
            f"restart learning), e.g. url ids {bad[:5]}"
        )
    ids = np.concatenate(id_parts) if id_parts else np.empty(0, np.int64)
    state["ids"] = ids
    state.update(_state.unpack_rows(b"".join(blobs), dtype))
    _report(issues, problems)
    return state


def _report(issues: list[str], problems: list[str] | None) -> None:
    for issue in issues:
        log.warning("%s", issue)
    if problems is not None:
        problems.extend(issues)
