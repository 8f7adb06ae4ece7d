"""The crawler's database: watched URLs, poll log, changes and the scheduler's learned state.

>>> from crawler.store import Store
>>> store = Store("sqlite:///crawler.db"); store.upgrade()

Sync SQLAlchemy 2 (SQLite with WAL, or PostgreSQL via psycopg 3); the service calls it from
a worker thread. Migrations ship in ``crawler/store/migrations`` (see ``migrations/README.md``).

One pattern, two layers. ``Store`` owns the engine and the core (URLs, the slot's commit,
the scheduler's state, history); each other part is a class over the same engine reached
from it: ``store.cluster`` (workers, leases, fencing), ``store.discovery`` (sources and the
pages they found), ``store.outbox`` (events, destinations, deliveries). A method of the
store or of a part is one transaction. Below them, the private modules hold the SQL as
functions that take a ``Connection`` (or the engine), so that several compose inside one
transaction: the slot's commit writes its polls, changes, fenced leases and outbox events
together.
"""

from crawler.store._bounds import UrlRules, check_tag
from crawler.store._cluster import (
    JOINING,
    LIVE,
    ClusterStateRow,
    Fence,
    LeaseRow,
    NotCoordinator,
    WorkerRow,
    session_name,
)
from crawler.store._diffs import ChangeKey, StoredDiff, decompress_diff
from crawler.store._discovery import (
    DiscoveredRow,
    DiscoveryStore,
    Found,
    SlotDiscovery,
    SourceRow,
    SourceSpec,
)
from crawler.store._engine import sync_url
from crawler.store._fence import FencedOut
from crawler.store._history import ChangeInfo, ChangeText, PruneReport
from crawler.store._host_caps import HostCapRow
from crawler.store._lock import ServiceLock, ServiceLockHeld, ServiceLockLost, owner_info
from crawler.store._migrate import alembic_config, head_revision
from crawler.store._outbox import PAGE_CHANGED, PAGE_DISCOVERED, OutboxStore, change_key
from crawler.store._outbox_types import (
    DEAD,
    DELIVERED,
    PENDING,
    DeliveryOutcome,
    DeliveryRow,
    DestinationRow,
    DestinationSpec,
    DueDelivery,
    EventRow,
)
from crawler.store._store import (
    Store,
    change_texts_in,
    compress_snapshot,
    decompress_snapshot,
    site_host,
)
from crawler.store._types import (
    OUTCOMES,
    AddReport,
    ChangeRow,
    DeferredHost,
    FailureRow,
    HealthEvent,
    NewUrl,
    Outcome,
    PollRecord,
    PollRow,
    SlotRecord,
    Stats,
    StoreError,
    StoreUnavailable,
    UrlDetail,
    UrlRecord,
    UrlRow,
)

__all__ = [
    "DEAD",
    "DELIVERED",
    "JOINING",
    "LIVE",
    "OUTCOMES",
    "PAGE_CHANGED",
    "PAGE_DISCOVERED",
    "PENDING",
    "AddReport",
    "ChangeInfo",
    "ChangeKey",
    "ChangeRow",
    "ChangeText",
    "ClusterStateRow",
    "DeferredHost",
    "DeliveryOutcome",
    "DeliveryRow",
    "DestinationRow",
    "DestinationSpec",
    "DiscoveredRow",
    "DiscoveryStore",
    "DueDelivery",
    "EventRow",
    "FailureRow",
    "Fence",
    "FencedOut",
    "Found",
    "HealthEvent",
    "HostCapRow",
    "LeaseRow",
    "NewUrl",
    "NotCoordinator",
    "OutboxStore",
    "Outcome",
    "PollRecord",
    "PollRow",
    "PruneReport",
    "ServiceLock",
    "ServiceLockHeld",
    "ServiceLockLost",
    "SlotDiscovery",
    "SlotRecord",
    "SourceRow",
    "SourceSpec",
    "Stats",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoredDiff",
    "UrlDetail",
    "UrlRecord",
    "UrlRow",
    "UrlRules",
    "WorkerRow",
    "alembic_config",
    "change_key",
    "change_texts_in",
    "check_tag",
    "compress_snapshot",
    "decompress_diff",
    "decompress_snapshot",
    "head_revision",
    "owner_info",
    "session_name",
    "site_host",
    "sync_url",
]
