"""The database schema: SQLAlchemy 2 typed ORM models (the Alembic migrations mirror them).

Times are timezone-aware UTC datetimes (SQLite stores them as UTC text). Primary keys are
BIGINT on PostgreSQL and INTEGER (the rowid) on SQLite.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    TypeDecorator,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

#: ``snapshot_format`` of a text kept a line per block element (0: one collapsed line)
SNAPSHOT_LINES = 1

#: BIGINT, but the rowid alias on SQLite (so that it autoincrements)
BigId = BigInteger().with_variant(Integer(), "sqlite")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every database."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value
        return value.astimezone(UTC).replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Site(Base):
    """One host (``host[:port]``): the unit of politeness and, later, of packing sites
    onto workers."""

    __tablename__ = "sites"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    host: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    #: its watched URLs (``removed_at`` NULL), kept by triggers on PostgreSQL (migration
    #: 0011): the coordinator reads one row per site instead of grouping every URL
    url_count: Mapped[int] = mapped_column(Integer, server_default="0")
    #: the watch-list version of the last edit that changed which of its URLs are watched
    #: or their importance (NULL: none since migration 0015): a cluster worker re-reads, on
    #: a watch-list bump, only the URLs of its sites edited after the version it last saw
    edit_version: Mapped[int | None] = mapped_column(BigInteger, index=True)


#: the URLs with a rule of their own, and the failing ones (partial indexes of ``urls``)
RULES_WHERE = (
    "removed_at IS NULL AND (min_interval_s IS NOT NULL OR max_interval_s IS NOT NULL OR paused)"
)
FAILING_WHERE = "removed_at IS NULL AND (fail_streak > 0 OR retired)"


class Url(Base):
    """A watched URL (rows are never deleted: ``removed_at`` marks unwatched ones)."""

    __tablename__ = "urls"
    # partial indexes (migration 0011): the revived URLs, those with a rule of their own,
    # the failing ones; a worker reads those of its own sites without scanning urls
    __table_args__ = (
        Index(
            "ix_urls_revive_version",
            "revive_version",
            postgresql_where=text("revive_version IS NOT NULL"),
            sqlite_where=text("revive_version IS NOT NULL"),
        ),
        Index(
            "ix_urls_rules",
            "site_id",
            postgresql_where=text(RULES_WHERE),
            sqlite_where=text(RULES_WHERE),
        ),
        Index(
            "ix_urls_failing",
            "site_id",
            postgresql_where=text(FAILING_WHERE),
            sqlite_where=text(FAILING_WHERE),
        ),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    url: Mapped[str] = mapped_column(Text, unique=True)
    site_id: Mapped[int] = mapped_column(ForeignKey("sites.id"), index=True)
    importance: Mapped[float] = mapped_column(Float, default=1.0)
    selector: Mapped[str | None] = mapped_column(Text)
    ignore_patterns: Mapped[str | None] = mapped_column(Text)  # JSON list of strings
    added_at: Mapped[datetime] = mapped_column(UTCDateTime())
    removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    etag: Mapped[str | None] = mapped_column(Text)
    last_modified: Mapped[str | None] = mapped_column(Text)
    first_seen_hash: Mapped[str | None] = mapped_column(String(64))
    last_hash: Mapped[str | None] = mapped_column(String(64))
    # crawler.detect's raw hash is "<exact>.<skeleton>": two 32-digit hashes
    last_raw_hash: Mapped[str | None] = mapped_column(String(160))
    last_polled_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_status: Mapped[int | None] = mapped_column(Integer)
    polls: Mapped[int] = mapped_column(BigInteger, default=0)
    hits: Mapped[int] = mapped_column(BigInteger, default=0)
    misses: Mapped[int] = mapped_column(BigInteger, default=0)
    not_modified: Mapped[int] = mapped_column(BigInteger, default=0)
    errors: Mapped[int] = mapped_column(BigInteger, default=0)
    # operator bounds and pause, the failure record (migration 0004, crawler/store/_bounds.py):
    # intervals in seconds, NULL = the setting's default, 0 = none whatever the default
    min_interval_s: Mapped[float | None] = mapped_column(Float)
    max_interval_s: Mapped[float | None] = mapped_column(Float)
    paused: Mapped[bool] = mapped_column(Boolean, server_default=false())
    fail_streak: Mapped[int] = mapped_column(Integer, server_default="0")
    fail_permanent: Mapped[int] = mapped_column(Integer, server_default="0")
    retired: Mapped[bool] = mapped_column(Boolean, server_default=false())
    fail_kind: Mapped[str | None] = mapped_column(String(16))
    fail_error: Mapped[str | None] = mapped_column(Text)
    failing_since: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revive_version: Mapped[int | None] = mapped_column(BigInteger)


class UrlTag(Base):
    """The operator's tags of a URL (``crawler edit --tag``, ``crawler pause --tag``)."""

    __tablename__ = "url_tags"
    url_id: Mapped[int] = mapped_column(ForeignKey("urls.id"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


class UrlState(Base):
    """One URL's persistent scheduler fields, packed with the NumPy structured dtype
    recorded in ``scheduler_state.url_dtype``."""

    __tablename__ = "url_state"
    scheduler: Mapped[str] = mapped_column(String(64), primary_key=True)
    url_id: Mapped[int] = mapped_column(ForeignKey("urls.id"), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class SchedulerState(Base):
    """A scheduler's scalars (params, rng, slot, budget, ...) and its per-URL row format."""

    __tablename__ = "scheduler_state"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    scalars: Mapped[str] = mapped_column(Text)  # JSON object
    url_dtype: Mapped[str] = mapped_column(Text)  # JSON [[field, dtype str], ...]
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Slot(Base):
    """One slot of the service."""

    __tablename__ = "slots"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    slot: Mapped[int] = mapped_column(BigInteger)  # the scheduler's slot number
    scheduler: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    duration_s: Mapped[float] = mapped_column(Float)
    polls: Mapped[int] = mapped_column(Integer)
    hits: Mapped[int] = mapped_column(Integer)
    misses: Mapped[int] = mapped_column(Integer)
    not_modified: Mapped[int] = mapped_column(Integer)
    errors: Mapped[int] = mapped_column(Integer)
    overrun: Mapped[bool] = mapped_column(Boolean)
    lag_s: Mapped[float] = mapped_column(Float)
    capacity: Mapped[float] = mapped_column(Float)
    knapsack_fill: Mapped[float | None] = mapped_column(Float)


class PollLog(Base):
    """One poll (pruned after ``poll_log_retention_days``). Written for every poll, so it has
    no foreign key to ``urls`` (its check cost PostgreSQL as much as the row itself)."""

    __tablename__ = "poll_log"
    __table_args__ = (Index(None, "url_id", "polled_at"),)
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # no foreign key: see migration 0002 (URL rows are never deleted)
    url_id: Mapped[int] = mapped_column(BigId)
    slot: Mapped[int] = mapped_column(BigInteger)
    polled_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    status: Mapped[int | None] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(16))
    duration_s: Mapped[float] = mapped_column(Float)
    bytes: Mapped[int] = mapped_column(BigInteger)
    content_hash: Mapped[str | None] = mapped_column(String(64))
    error_kind: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    # the page was judged cut at a parse limit (bytes or open elements): a change past the cut
    # goes unseen (migration 0003; a server default, so rows written before it read false)
    truncated: Mapped[bool] = mapped_column(Boolean, server_default=false())


class Deferral(Base):
    """Polls of one host that one slot selected but could not make, for one reason
    (``crawler.workers.DEFERRED_REASONS``): one row per (slot, host, reason) that had any.
    Deferred polls are not polls (no poll-log row, no feedback, not errors); these rows say
    who was held back and why. Pruned with the poll log (``started_at`` is the slot's)."""

    __tablename__ = "deferrals"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    slot: Mapped[int] = mapped_column(BigInteger)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    host: Mapped[str] = mapped_column(String(255))
    reason: Mapped[str] = mapped_column(String(16))
    polls: Mapped[int] = mapped_column(Integer)


class Change(Base):
    """A detected change, optionally with a compressed snapshot of the new normalized text."""

    __tablename__ = "changes"
    #: (url_id, slot): how an event finds its change (``_diffs.changes_of``)
    __table_args__ = (Index(None, "url_id", "detected_at"), Index(None, "url_id", "slot"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    url_id: Mapped[int] = mapped_column(ForeignKey("urls.id"))
    slot: Mapped[int] = mapped_column(BigInteger)
    detected_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    old_hash: Mapped[str | None] = mapped_column(String(64))
    new_hash: Mapped[str | None] = mapped_column(String(64))
    snapshot: Mapped[bytes | None] = mapped_column(LargeBinary)  # zstd (earlier: zlib), UTF-8
    #: how ``snapshot`` reads (``SNAPSHOT_LINES``): 0 = as extracted before the readable text
    #: existed (read with its whitespace collapsed: one line); 1 = a line per block element
    snapshot_format: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    #: the unified diff from the text before to ``snapshot`` (zstd, UTF-8), made once by the
    #: deliverer for a first send; NULL: not made yet, or no text before (``_diffs.py``)
    diff: Mapped[bytes | None] = mapped_column(LargeBinary)


class ChangeBaseline(Base):
    """The text of a URL's version just before its oldest kept change (or its current version
    while it has none): the before of that change (docs/history.md). Written by the URL's
    baseline poll, and moved forward by the retention of ``changes``, which hands it the
    text of the newest change it deletes; ``slot`` is that version's slot, so an older text
    never replaces a newer one."""

    __tablename__ = "change_baselines"
    url_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # urls rows stay
    slot: Mapped[int] = mapped_column(BigInteger)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime())
    content_hash: Mapped[str | None] = mapped_column(String(64))
    snapshot: Mapped[bytes | None] = mapped_column(LargeBinary)
    snapshot_format: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))


class Meta(Base):
    """Small key/value facts, e.g. ``watch_version`` (bumped on every add/remove)."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    int_value: Mapped[int | None] = mapped_column(BigInteger)
    text_value: Mapped[str | None] = mapped_column(Text)


class ServiceFence(Base):
    """The fencing token of a service lock (``crawler/store/_fence.py``): ``generation``
    grows by one each time a service takes the lock of ``role``; a slot commits only while
    the generation it took is still the stored one (``checked_at``: its last such commit;
    ``released_at``: it stopped cleanly)."""

    __tablename__ = "service_fence"
    role: Mapped[str] = mapped_column(String(32), primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)
    holder: Mapped[str | None] = mapped_column(Text)  # who took it: pid, host
    taken_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    #: set by a holder that let the lock go cleanly; None while held (or after a crash)
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class HostCap(Base):
    """The service's current politeness cap of one host (``crawler.service._caps``), in polls
    per slot, and whether the scheduler's plan reaches it (the cap binds). Rewritten by the
    running service when a cap or its binding changes; read by ``crawler list``/``stats``.
    Only hosts that have a cap have a row (migration 0004b)."""

    __tablename__ = "host_caps"
    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    cap: Mapped[float] = mapped_column(Float)
    planned: Mapped[float] = mapped_column(Float)
    binding: Mapped[bool] = mapped_column(Boolean)
    # what sets the cap: "delay", "crawl_delay", "response_time", "retry_after", "robots"
    reason: Mapped[str] = mapped_column(String(16))
    # the end of a Retry-After back-off (reason "retry_after"), else None
    until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    #: the cluster worker that wrote the row (NULL: a single service): a worker replaces
    #: only its own rows
    worker_id: Mapped[str | None] = mapped_column(String(32), index=True)


class Source(Base):
    """A URL to discover new pages from (migration 0005; see crawler/store/_discovery.py).
    JSON lists in ``allowed_domains``, ``include``, ``exclude``; ``state``: learned state."""

    __tablename__ = "sources"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    url: Mapped[str] = mapped_column(Text, unique=True)
    scope: Mapped[str] = mapped_column(String(16))  # "host" or "domain"
    allowed_domains: Mapped[str] = mapped_column(Text)
    include: Mapped[str] = mapped_column(Text)
    exclude: Mapped[str] = mapped_column(Text)
    topic: Mapped[str | None] = mapped_column(Text)
    max_depth: Mapped[int] = mapped_column(Integer)
    budget_per_slot: Mapped[int] = mapped_column(Integer)
    budget_per_run: Mapped[int | None] = mapped_column(Integer)
    auto_watch: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    state: Mapped[str | None] = mapped_column(Text)
    polls: Mapped[int] = mapped_column(BigInteger)
    found: Mapped[int] = mapped_column(BigInteger)


class Discovered(Base):
    """A page found new by discovery (one row per URL: the first source to find it)."""

    __tablename__ = "discovered"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    url: Mapped[str] = mapped_column(Text, unique=True)
    source_id: Mapped[int] = mapped_column(BigId, ForeignKey("sources.id"), index=True)
    found_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    depth: Mapped[int] = mapped_column(Integer)
    path_length: Mapped[int] = mapped_column(Integer)
    lastmod: Mapped[datetime | None] = mapped_column(UTCDateTime())
    on_topic: Mapped[float | None] = mapped_column(Float)
    watched: Mapped[bool] = mapped_column(Boolean)
    url_id: Mapped[int | None] = mapped_column(BigInteger)
    last_linked_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expired_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    expire_reason: Mapped[str | None] = mapped_column(String(16))


_tables = Base.metadata.tables
sites: Table = _tables["sites"]
urls: Table = _tables["urls"]
url_state: Table = _tables["url_state"]
scheduler_state: Table = _tables["scheduler_state"]
slots: Table = _tables["slots"]
poll_log: Table = _tables["poll_log"]
changes: Table = _tables["changes"]
change_baselines: Table = _tables["change_baselines"]
deferrals: Table = _tables["deferrals"]
meta: Table = _tables["meta"]
#: the ``meta`` key of the watch-list version (bumped by every watch-list edit)
WATCH_VERSION = "watch_version"
host_caps: Table = _tables["host_caps"]
url_tags: Table = _tables["url_tags"]
service_fence: Table = _tables["service_fence"]


# ----- the cluster: several workers on one PostgreSQL (crawler/store/_cluster.py) ---------


class ClusterWorker(Base):
    """A ``crawler run --cluster`` worker: registered at start, heartbeated (with the
    DATABASE clock, so the workers' clocks do not matter), deleted when it stops. A worker
    whose heartbeat is older than ``worker_timeout_s`` is dead."""

    __tablename__ = "cluster_workers"
    worker_id: Mapped[str] = mapped_column(String(32), primary_key=True)  # uuid4 hex
    name: Mapped[str] = mapped_column(Text)  # worker_name, or host:pid
    capacity: Mapped[float] = mapped_column(Float)  # polls per slot: its bin
    metrics_url: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime())
    state: Mapped[str] = mapped_column(String(16))  # live | stopping
    sites: Mapped[int] = mapped_column(Integer, default=0)
    weight: Mapped[float] = mapped_column(Float, default=0.0)  # its sites' weight
    multiplier: Mapped[float | None] = mapped_column(Float)  # its scheduler's level
    slot: Mapped[int] = mapped_column(BigInteger, default=0)


class ClusterLease(Base):
    """Which worker polls a site (``sites.host``), under which fencing token: ``epoch``
    only grows, bumped on every change of owner; a commit made under an older epoch lands
    nothing for the site."""

    __tablename__ = "cluster_leases"
    site: Mapped[str] = mapped_column(String(255), primary_key=True)
    worker_id: Mapped[str | None] = mapped_column(String(32), index=True)
    epoch: Mapped[int] = mapped_column(BigInteger, default=0)
    weight: Mapped[float] = mapped_column(Float, default=0.0)  # wanted polls per slot
    assigned_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    #: the revoked epoch the old owner acknowledged: it no longer polls the site (hand-over)
    released_epoch: Mapped[int | None] = mapped_column(BigInteger)
    #: since when the owner is asked to give the site up (a move between live workers;
    #: migration 0011): it releases it in a later slot's commit (``Fence.release``)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ClusterState(Base):
    """The cluster's one row (id 1): the coordinator, the assignment's version (bumped
    when any lease changes) and the last packing's figures."""

    __tablename__ = "cluster_state"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    coordinator: Mapped[str | None] = mapped_column(String(32))
    coordinator_since: Mapped[datetime | None] = mapped_column(UTCDateTime())
    version: Mapped[int] = mapped_column(BigInteger, default=0)
    live_workers: Mapped[int] = mapped_column(Integer, default=0)
    total_weight: Mapped[float] = mapped_column(Float, default=0.0)
    total_capacity: Mapped[float] = mapped_column(Float, default=0.0)
    shortfall_workers: Mapped[int] = mapped_column(Integer, default=0)
    shortfall_capacity: Mapped[float] = mapped_column(Float, default=0.0)
    overloads_total: Mapped[int] = mapped_column(BigInteger, default=0)
    moves_total: Mapped[int] = mapped_column(BigInteger, default=0)
    threshold: Mapped[int | None] = mapped_column(Integer)
    states: Mapped[int | None] = mapped_column(Integer)
    updated_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


cluster_workers: Table = _tables["cluster_workers"]
cluster_leases: Table = _tables["cluster_leases"]
cluster_state: Table = _tables["cluster_state"]
sources: Table = _tables["sources"]
discovered: Table = _tables["discovered"]


# ----- delivery: the outbox and its destinations (crawler/store/_outbox.py) -----------------


class Event(Base):
    """One event of the outbox (``page.changed``, ``page.discovered``, ...), written in the
    transaction that commits what it reports. Its id, with the prefix ``msg_``, is the
    webhook id every destination receives; ids of one URL grow in commit order.
    ``fanned_out`` turns true once the deliverer has made the event's ``deliveries`` rows."""

    __tablename__ = "events"
    #: (url_id, type): a URL's events of a type (a gained site's health state, migration
    #: 0015), without scanning the outbox's whole history
    __table_args__ = (Index(None, "fanned_out", "id"), Index(None, "url_id", "type"))
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    type: Mapped[str] = mapped_column(String(64))
    url_id: Mapped[int | None] = mapped_column(BigInteger)
    slot: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    payload: Mapped[str] = mapped_column(Text)  # JSON object: the facts known at commit
    fanned_out: Mapped[bool] = mapped_column(Boolean, server_default=false())


class Destination(Base):
    """Where events go: a webhook URL, its ``whsec_`` secret and its filters (JSON lists of
    tags and event types, empty = all; an RE2 pattern the URL must match, or none).
    ``disabled_at`` is set when it answered 410 Gone; ``paused_until`` by 429/503 with
    Retry-After (nothing is sent to it before)."""

    __tablename__ = "destinations"
    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(Text)
    tags: Mapped[str] = mapped_column(Text)
    event_types: Mapped[str] = mapped_column(Text)
    url_pattern: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    paused_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    #: an apprise destination's body format (text, markdown, html); null for a webhook
    body_format: Mapped[str | None] = mapped_column(String(16))
    #: an apprise destination's body template (string.Template fields); null: the default
    template: Mapped[str | None] = mapped_column(Text)


class Delivery(Base):
    """One event for one destination: ``pending`` (due at ``next_attempt_at``; a claimed
    one is pushed past the send's timeout, so a deliverer that dies leaves it due again),
    ``delivered`` or ``dead`` (the retry schedule ran out: listable, replayable).

    ``head`` marks the pending delivery a destination may send next for its URL: the one
    with the smallest event id among the URL's pending deliveries to that destination
    (every pending delivery of an event without a URL is a head). It is maintained by
    the writes that change what is pending (``crawler/store/_heads.py``), so a claim reads
    only the due heads through ``(destination_id, head, next_attempt_at, event_id)``."""

    __tablename__ = "deliveries"
    __table_args__ = (
        Index(None, "status", "next_attempt_at"),
        Index(None, "destination_id", "url_id", "status", "event_id"),
        Index(None, "destination_id", "head", "next_attempt_at", "event_id"),
    )
    event_id: Mapped[int] = mapped_column(BigId, ForeignKey("events.id"), primary_key=True)
    destination_id: Mapped[int] = mapped_column(
        BigId, ForeignKey("destinations.id"), primary_key=True
    )
    url_id: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    #: set while a deliverer sends it; a new deliverer (the one lock holder) makes such
    #: deliveries due at once: their sender died with them
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    head: Mapped[bool] = mapped_column(Boolean, server_default=false())


events: Table = _tables["events"]
destinations: Table = _tables["destinations"]
deliveries: Table = _tables["deliveries"]
