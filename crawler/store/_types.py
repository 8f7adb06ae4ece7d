"""The store's value types and errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Outcome = Literal["hit", "miss", "not_modified", "baseline", "error"]
OUTCOMES: tuple[str, ...] = ("hit", "miss", "not_modified", "baseline", "error")


class StoreError(Exception):
    """A database operation failed (the transaction was rolled back)."""


class StoreUnavailable(StoreError):  # noqa: N818 - the name the service catches
    """The database could not be reached or is locked/busy: retry later. Nothing of the
    failed operation was written."""


@dataclass(frozen=True, slots=True)
class NewUrl:
    """A URL to watch; ``url`` is already validated and canonicalized by the caller."""

    url: str
    importance: float = 1.0
    selector: str | None = None
    ignore_patterns: Sequence[str] = ()


@dataclass(slots=True)
class AddReport:
    """What ``Store.add_urls`` did. ``already_watched`` also lists repeats within the batch."""

    added: list[tuple[str, int]] = field(default_factory=list)  # (url, id)
    already_watched: list[str] = field(default_factory=list)
    reactivated: list[tuple[str, int]] = field(default_factory=list)  # (url, id)


@dataclass(frozen=True, slots=True)
class UrlRecord:
    """What one poll of a URL needs to know."""

    id: int
    url: str
    host: str
    etag: str | None
    last_modified: str | None
    last_hash: str | None
    last_raw_hash: str | None
    selector: str | None
    ignore_patterns: tuple[str, ...]
    #: the URL has a baseline text (``change_baselines``): the before of its next change is
    #: known. Without one (a URL watched before the change history existed), its next poll
    #: asks for the page's text even when unchanged (docs/history.md)
    has_text: bool = True


@dataclass(frozen=True, slots=True)
class SlotRecord:
    """One slot's summary row."""

    slot: int
    scheduler: str
    started_at: datetime
    duration_s: float
    polls: int
    hits: int
    misses: int
    not_modified: int
    errors: int
    overrun: bool = False
    lag_s: float = 0.0
    capacity: float = 0.0
    knapsack_fill: float | None = None
    #: (host, reason, polls) per host and reason with polls selected but not made (deferred:
    #: not polls, see ``crawler.workers.DEFERRED_REASONS``); written as ``deferrals`` rows
    deferrals: tuple[tuple[str, str, int], ...] = ()
    #: the failure record of the URLs whose record changed in this slot: written
    #: in the slot's own transaction (``crawler/store/_bounds.py``)
    failures: tuple[FailureRow, ...] = ()
    #: health events (page.failing, page.recovered, page.stopped_changing) of this slot's
    #: polls: written to the outbox in the slot's own transaction
    health_events: tuple[HealthEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class PollRecord:
    """One poll's outcome. On success (not ``error``) the URL's cached ``etag``,
    ``last_modified`` are replaced and ``content_hash``/``raw_hash`` replace the cached
    hashes when given. A ``hit`` records a change (``old_hash`` -> ``content_hash``) with
    ``snapshot`` (the new text: the readable text, a line per block element; readers see
    each line's whitespace collapsed; compressed by the store) when given. A ``baseline``'s
    ``snapshot`` is kept as the URL's baseline text, the before of its first change."""

    url_id: int
    outcome: Outcome
    polled_at: datetime
    status: int | None = None
    duration_s: float = 0.0
    bytes: int = 0
    content_hash: str | None = None
    raw_hash: str | None = None
    old_hash: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    error_kind: str | None = None
    error: str | None = None
    snapshot: str | None = None
    #: the page was judged cut at a parse limit (bytes or open elements)
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class UrlRow:
    """One watched URL for ``crawler list``."""

    id: int
    url: str
    host: str
    importance: float
    added_at: datetime
    removed_at: datetime | None
    last_polled_at: datetime | None
    last_changed_at: datetime | None
    last_status: int | None
    polls: int
    hits: int
    misses: int
    not_modified: int
    errors: int
    wanted_frequency: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k)) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class PollRow:
    polled_at: datetime
    slot: int
    outcome: str
    status: int | None
    duration_s: float
    bytes: int
    content_hash: str | None
    error_kind: str | None
    error: str | None
    truncated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k)) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class ChangeRow:
    detected_at: datetime
    slot: int
    old_hash: str | None
    new_hash: str | None
    snapshot: str | None  # decompressed: the readable text (one line if written before it)

    def as_dict(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k)) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class UrlDetail:
    """One URL for ``crawler show``: its row, scheduler fields, recent polls and changes."""

    row: UrlRow
    selector: str | None
    ignore_patterns: tuple[str, ...]
    etag: str | None
    last_modified: str | None
    last_hash: str | None
    state: dict[str, dict[str, Any]]  # scheduler name -> its fields for this URL
    polls: list[PollRow]
    changes: list[ChangeRow]

    def as_dict(self) -> dict[str, Any]:
        out = {k: _plain(getattr(self, k)) for k in self.__slots__}
        out["row"] = self.row.as_dict()
        out["polls"] = [p.as_dict() for p in self.polls]
        out["changes"] = [c.as_dict() for c in self.changes]
        return out


@dataclass(frozen=True, slots=True)
class Stats:
    """Totals for ``crawler stats`` (lifetime counters; the poll log may be pruned).

    ``hit_rate_per_poll`` = hits / polls (every poll, errors and baselines included);
    ``hits_per_slot`` = hits / slots run."""

    urls: int
    removed_urls: int
    polls: int
    hits: int
    misses: int
    not_modified: int
    errors: int
    slots: int
    hit_rate_per_poll: float
    hits_per_slot: float
    changes: int
    #: polls selected but not made, by reason, over the deferral rows kept (pruned with the
    #: poll log): not counted in ``polls``
    deferred: dict[str, int] = field(default_factory=dict)
    #: the hosts with the most deferred polls, most first: host, total and per-reason counts
    deferred_hosts: list[DeferredHost] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__slots__}
        out["deferred"] = dict(self.deferred)
        out["deferred_hosts"] = [h.as_dict() for h in self.deferred_hosts]
        return out


@dataclass(frozen=True, slots=True)
class DeferredHost:
    """One host's deferred polls (``crawler stats``): in all and by reason."""

    host: str
    deferred: int
    by_reason: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "deferred": self.deferred, "by_reason": dict(self.by_reason)}


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    return value


@dataclass(frozen=True, slots=True)
class HealthEvent:
    """An outbox event about a URL's health, decided by ``crawler.delivery``'s health judge
    and written with the slot that observed it. ``payload``: a JSON-able dict."""

    type: str
    url_id: int
    created_at: datetime
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FailureRow:
    """One URL's failure record: ``streak`` consecutive failed polls (0: none,
    the record is cleared), of which the last ``permanent`` were permanent (404, unknown
    host); ``retired`` (a 410 or repeated permanent failures: only probed now and then);
    the last failure's ``kind`` (transient, permanent, gone) and ``error``; ``since``: the
    streak's first failure."""

    url_id: int
    streak: int
    permanent: int = 0
    retired: bool = False
    kind: str | None = None
    error: str | None = None
    since: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k)) for k in self.__slots__}
