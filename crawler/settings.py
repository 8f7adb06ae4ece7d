"""Every setting of the service in one typed place (docs/settings.md).

Each field has a default, an environment variable ``CRAWLER_<NAME>`` and may appear in a
TOML file (``--config PATH`` or ``CRAWLER_CONFIG``; top-level keys named like the fields).
Precedence: flag (``overrides``) > environment > file > default. Build with
:func:`load_settings`.

``default_min_interval_s`` defaults to 300 s (5 minutes), not to "no bound": with few
watched URLs the budget (at least one poll per slot) is far more than they need, and without
a bound a single watched page was fetched every 10 s for ever (every second at a capacity of
50). Five minutes is the usual "check every few minutes" of monitoring services, a load no
site operator objects to, and still finds a change of a page that changes hourly within a
twelfth of its interval; a large watch list's learned frequencies are far below it anyway
(1 % of URLs polled per 10 s slot is one poll per URL every 17 minutes). The scheduler is
unchanged (its simulations and benchmarks run without the bound); a deployment that wants
every slot's budget used sets 0.

``metrics_host`` defaults to ``127.0.0.1``: the metrics and health endpoints are not exposed
beyond the machine unless a deployment sets ``CRAWLER_METRICS_HOST=0.0.0.0`` on purpose.
"""

from __future__ import annotations

import contextvars
import math
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import (
    SettingsError as PydanticSettingsError,
)

ENV_PREFIX = "CRAWLER_"
CONFIG_ENV = "CRAWLER_CONFIG"
PROJECT_URL = "https://github.com/crawler-project/crawler"
DEFAULT_USER_AGENT = f"crawler/0.1 (incremental change monitor; +{PROJECT_URL})"
DATABASE_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg", "postgresql+asyncpg")

#: the Standard Webhooks schedule: at once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h
DEFAULT_RETRY_SCHEDULE: tuple[float, ...] = (0, 5, 300, 1800, 7200, 18000, 36000, 36000)
#: the polite default: a URL without a bound of its own is polled at most every 5 minutes
#: (module docstring)
DEFAULT_MIN_INTERVAL_S = 300.0
#: the default slot deadline's floor: with shorter slots a deadline of the slot defers polls
#: for the mere round trip to the crawl workers (the demo's 0.1 s slots on a machine at load
#: 40: 1,602 to 1,698 of its 1,800 polls made, 0.91-0.92 of the limit; with 1 s, 1,765, 0.97)
MIN_DEFAULT_DEADLINE_S = 1.0

#: the TOML file read by the next Settings() built in this context (set by load_settings)
_config_file: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "crawler_config_file", default=None
)


class SettingsError(ValueError):
    """Settings are invalid: the message names the setting(s) and what is wrong."""


class Settings(BaseSettings):
    """The service's settings. Build with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", validate_default=True, frozen=True
    )

    # storage
    database_url: str = "sqlite:///crawler.db"
    poll_log_retention_days: float = Field(7.0, gt=0)
    store_snapshots: bool = True
    snapshot_max_bytes: int = Field(256 * 1024, ge=0)
    changes_keep_per_url: int = Field(
        100,
        ge=0,
        description="newest changes kept per URL, with their texts (0 = all); older ones are "
        "pruned hourly, the oldest kept change keeping its before (docs/history.md)",
    )
    changes_max_age_days: float = Field(
        90.0,
        ge=0,
        description="days a change is kept, with its texts (0 = for ever); pruned hourly, the "
        "URL's last text kept as the before of its next change (docs/history.md)",
    )
    # scheduling
    scheduler: str = "bayes"
    scheduler_params: dict[str, Any] = Field(default_factory=dict)
    capacity: float | None = Field(None, description="polls per slot; None = auto_capacity(n)")
    slot_seconds: float = Field(10.0, ge=0.01, le=86400)
    seed: int | None = None
    # observability
    metrics_port: int = Field(9410, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"
    api_token: str | None = Field(
        None,
        repr=False,
        description="bearer token the change feed and API (`/feed`, `/api` on the metrics "
        "port, docs/api.md) want when set; a secret: set it in the environment, never logged "
        "nor recorded",
    )
    api_feed_diff_cache: int = Field(
        1024,
        ge=1,
        le=1_000_000,
        description="diffs the feed and API keep in memory (least recently used out), each "
        "cut at delivery_diff_max_bytes",
    )
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # fetching
    allow_private_addresses: bool = False
    user_agent: str = DEFAULT_USER_AGENT
    fetch_timeout_s: float = Field(20.0, gt=0, le=600)
    fetch_max_body_bytes: int = Field(5 * 1024 * 1024, gt=0)
    fetch_max_redirects: int = Field(5, ge=0, le=30)
    fetch_retries: int = Field(1, ge=0, le=10)
    per_host_concurrency: int = Field(2, ge=1, le=256)
    fetch_concurrency: int = Field(
        100,
        ge=1,
        le=10_000,
        description="requests in flight at once in all, split evenly over the crawl workers "
        "(more connections than the network needs cost CPU per request on both ends)",
    )
    per_host_min_delay_s: float = Field(1.0, ge=0)
    respect_robots: bool = True
    normalize_workers: int = Field(0, ge=0, le=256, description="0 = auto (CPU count)")
    fetch_workers: int = Field(
        -1,
        ge=-1,
        le=64,
        description="crawl worker processes that fetch and judge, each owning a share of the "
        "hosts: -1 = auto (one per usable CPU, at most 8), 0 = fetch in the service's own process",
    )
    slot_deadline_s: float | None = Field(
        None,
        gt=0,
        le=86400,
        description="seconds a slot's polls may take; what is queued then is deferred (not "
        "polled, not an error), what is in flight goes on (within fetch_timeout_s) and lands "
        "in the slot in which it ends; None = slot_seconds, at least 1 s",
    )
    host_caps: bool = Field(
        True,
        description="cap each host's polls per slot at what its politeness allows (the delay "
        "between requests, robots.txt Crawl-delay, Retry-After, its response time) and let the "
        "scheduler allocate under those caps; false = the scheduler ignores hosts",
    )
    # operator bounds (crawler edit): what a URL without its own bound gets
    default_min_interval_s: float | None = Field(
        DEFAULT_MIN_INTERVAL_S,
        ge=0,
        description="seconds at least between two polls of a URL without its own "
        "--min-interval (0 or None = no bound): a small watch list is not polled every slot "
        "just because the budget allows it",
    )
    retired_probe_interval_s: float = Field(
        10_800.0,
        gt=0,
        description="seconds between two probes of a retired URL (one that answered 410, or "
        "404 three times in a row): it is polled again only that often until it answers",
    )
    failure_max_interval_s: float = Field(
        10_800.0,
        gt=0,
        description="seconds at most between two polls of a URL whose polls keep failing "
        "without retiring it (timeouts, 5xx, refused connections): each failure halves its "
        "rate down to one poll in this long, so a page that answers again is found again",
    )
    default_max_interval_s: float | None = Field(
        None,
        ge=0,
        description="seconds at most between two polls of a URL without its own "
        "--max-interval (None = no bound)",
    )

    # cluster (several workers on one PostgreSQL; docs/cluster.md)
    cluster: bool = Field(
        False,
        description="run as one worker of a cluster on a PostgreSQL database: sites are "
        "leased to the live workers by a coordinator (needs capacity set)",
    )
    worker_name: str | None = Field(
        None, description="this worker's name in the cluster; None = host:pid"
    )
    heartbeat_s: float = Field(
        2.0, gt=0, le=3600, description="seconds between a cluster worker's heartbeats"
    )
    worker_timeout_s: float | None = Field(
        None,
        gt=0,
        le=86400,
        description="a cluster worker not heard from for this long is dead and its sites "
        "move; None = 3 heartbeats + 2 s",
    )
    renew_deadline_s: float | None = Field(
        None,
        gt=0,
        le=86400,
        description="a cluster worker whose last successful heartbeat was sent longer ago "
        "than this (its own monotonic clock) stops polling until it renews and re-reads its "
        "leases; below the worker timeout, above the heartbeat; None = 2/3 of the worker "
        "timeout",
    )
    stall_timeout_s: float | None = Field(
        None,
        gt=0,
        le=86400,
        description="a cluster worker whose crawl loop has not reached a slot start for this "
        "long stops heartbeating, so that its sites move (liveness is the loop's progress, "
        "not the heartbeat thread's); None = the larger of 60 s and 3 x (slot + slot "
        "deadline + 5 s)",
    )
    cluster_threshold: int = Field(
        1, ge=1, le=1024, description="the overload automaton's lowest state Th"
    )
    cluster_states: int = Field(
        32, ge=2, le=1024, description="the overload automaton's number of states N"
    )
    # discovery (crawler/service/_discovery.py, docs/discovery.md "In the service")
    discovery_share: float = Field(
        0.1,
        ge=0,
        le=0.9,
        description="share of each slot's capacity given to discovery polls when sources "
        "exist: floor(share x capacity) polls, at least 1 from a capacity of 2, taken from "
        "the re-polling side; 0 = off",
    )
    discovery_expire_days: float = Field(
        30.0,
        ge=0,
        description="a page found by discovery expires when no page fetched by discovery has "
        "linked it for this many days (0 = never by age), or at once on a 404 or 410",
    )
    discovery_strategy: Literal["weblog", "rl", "best_first", "breadth_first"] = Field(
        "weblog", description="how a source's foragers choose links (docs/discovery.md)"
    )
    discovery_max_step: int = Field(
        1,
        ge=0,
        le=100,
        description="steps per forager path after its start page (0: a start page and the "
        "unknown pages it links to)",
    )
    discovery_seed_links: int = Field(
        50,
        ge=0,
        le=1000,
        description="in-scope links of a source page that become its foragers' start pages "
        "(read at its first fetch; 0 = the source page only)",
    )
    # where the foragers' paths start (crawler/discovery/_seeds.py)
    discovery_start_choice: Literal["weblog", "bandit", "round_robin"] = Field(
        "bandit",
        description="how a source's start pages are chosen: bandit = by the new links expected "
        "to wait on each (learned), weblog = the paper's start list, round_robin = in turn",
    )
    # the re-polling scheduler reads the start pages (crawler/service/_discovery_leads.py)
    discovery_watch_starts: bool = Field(
        True,
        description="add each source's start pages to the watch list: the scheduler reads them, "
        "at least every discovery_start_interval_slots while they yield new pages, and a changed "
        "one's new links go to discovery, which polls only those (false: discovery polls the "
        "start pages itself, chosen by discovery_start_choice)",
    )
    # crawler/discovery/_pacing.py: how often the scheduler must read watched start pages
    discovery_start_interval_slots: int = Field(
        3,
        ge=1,
        le=10_000,
        description="with discovery_watch_starts: a start page that yields new pages is read by "
        "the scheduler at least every this many slots (a new page it lists is found at most "
        "one slot later)",
    )
    discovery_start_min_yield: float = Field(
        0.02,
        gt=0,
        le=100,
        description="with discovery_watch_starts: new pages per slot a start page must yield "
        "to be read every discovery_start_interval_slots; below it the interval grows as the "
        "yield falls (up to 100 slots)",
    )
    # crawler/listings.py, crawler/discovery/_relisting.py: sitemaps and feeds, hostile or not
    discovery_listing_max_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1024,
        le=50 * 1024 * 1024,
        description="the most a sitemap or feed may inflate to (gzip) or weigh; past it the "
        "read fails as too_large (the protocol allows 50 MB; real sitemaps of 50,000 URLs take "
        "5-8 MB, and this bounds what a small hostile body may cost)",
    )
    discovery_listing_entries: int = Field(
        1_000,
        ge=1,
        le=50_000,
        description="the most recent entries of a sitemap or feed a source's crawl reads (a "
        "sitemap is read to 50,000 entries to find them; a feed is cut at this many items)",
    )
    discovery_listing_timeout_s: float = Field(
        5.0,
        gt=0,
        le=600,
        description="a sitemap or feed not read within this many seconds (in the listing "
        "worker process) is abandoned and counted a failed read of that listing",
    )
    discovery_listing_max_interval_slots: int = Field(
        16,
        ge=1,
        le=100_000,
        description="a sitemap or feed is read again 1 slot after it changed, at doubling "
        "intervals up to this many slots while it does not change (a 304 or the same body) "
        "or fails (refused, unreadable, looping)",
    )

    # delivery (crawler/delivery, docs/delivery.md): the outbox's events to webhooks
    delivery: bool = Field(
        True,
        description="deliver the outbox's events to the destinations (crawler destinations "
        "add) from a process beside the crawl; false = events wait in the outbox",
    )
    delivery_retry_schedule: list[float] = Field(
        default_factory=lambda: list(DEFAULT_RETRY_SCHEDULE),
        description="seconds before each attempt to deliver an event, a JSON list (the "
        "first is the first attempt's); after the last the event is dead-lettered",
    )
    delivery_timeout_s: float = Field(
        15.0, gt=0, le=300, description="seconds a destination has to answer one event"
    )
    delivery_concurrency: int = Field(
        32, ge=1, le=1024, description="events being sent at once, all destinations together"
    )
    delivery_batch: int = Field(
        200, ge=1, le=10_000, description="outbox rows read at a time (bounded memory)"
    )
    delivery_poll_s: float = Field(
        0.5, gt=0, le=60, description="seconds between looks at an idle outbox"
    )
    delivery_nice: int = Field(
        19,
        ge=0,
        le=19,
        description="niceness added to the delivery process's scheduling priority (0: the "
        "service's own; 19: the lowest): delivery takes mostly the CPU the crawl leaves "
        "(docs/delivery.md)",
    )
    delivery_busy_share: float = Field(
        0.05,
        ge=0,
        le=64,
        description="while other processes keep the machine busy (delivery_busy_above), the "
        "delivery process keeps its CPU under this share of one core and events wait in the "
        "outbox (0: no limit; docs/delivery.md)",
    )
    delivery_busy_above: float = Field(
        0.6,
        ge=0,
        le=1,
        description="the machine counts as busy for delivery_busy_share while the other "
        "processes use more than this share of all its cores",
    )
    health_failing_after: int = Field(
        3,
        ge=1,
        le=1000,
        description="consecutive failed polls of a URL that raise a page.failing event "
        "(page.recovered follows its next good poll)",
    )
    health_stopped_alpha: float = Field(
        1e-4,
        gt=0,
        lt=1,
        description="page.stopped_changing is raised when the probability of a URL's "
        "silence under its learned change rate falls below this: at most this many false "
        "alarms per change of a healthy URL (docs/delivery.md)",
    )
    health_stopped_min_changes: int = Field(
        10,
        ge=1,
        description="changes a URL must have shown before its silence is tested",
    )
    delivery_diff_max_bytes: int = Field(
        64 * 1024,
        ge=0,
        description="longest diff in a page.changed payload, in bytes (a longer one is cut "
        "and marked diff_truncated)",
    )

    # per-source caps that keep a trap (fresh session ids, an endless calendar) from growing
    # the discovered table and the watch list without bound (crawler/service/_trap_caps.py)
    discovery_max_new_per_slot: int = Field(
        20,
        ge=0,
        le=1_000_000,
        description="new pages one source may record per slot; its further finds that slot are "
        "counted (crawler_discovery_capped_total) and dropped, not recorded",
    )
    discovery_max_new_per_day: int = Field(
        1_000,
        ge=0,
        le=100_000_000,
        description="new pages one source may record per UTC day (counted from the database "
        "at start); past it its finds are counted and dropped until the next day",
    )
    discovery_max_auto_watched: int = Field(
        1_000,
        ge=0,
        le=100_000_000,
        description="pages of one auto-watch source on the watch list at once (added by "
        "discovery, not expired); past it its new pages are recorded but not watched",
    )
    discovery_max_auto_watched_per_slot: int = Field(
        10,
        ge=0,
        le=1_000_000,
        description="pages one auto-watch source may add to the watch list per slot",
    )
    discovery_watched_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="the most of the scheduler's polls per slot the URLs discovery put on the "
        "watch list (start pages and auto-watched pages, all sources together) may take: share x "
        "capacity split into upper bounds by weight 1 / their number + a start page's floor "
        "(1 = no bound; more when the operator's URLs could not use the rest)",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlSource(settings_cls, _config_file.get()))

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str) -> str:
        scheme = value.partition("://")[0].lower()
        if "://" not in value or scheme not in DATABASE_SCHEMES:
            raise ValueError(
                f"unsupported database URL {value!r}: use sqlite:///PATH, postgresql://..., "
                "postgresql+psycopg://... or postgresql+asyncpg://..."
            )
        return value

    @field_validator("scheduler")
    @classmethod
    def _check_scheduler(cls, value: str) -> str:
        from crawler.schedulers import names

        if value not in names():
            raise ValueError(f"unknown scheduler {value!r}: choose one of {', '.join(names())}")
        return value

    @field_validator("capacity")
    @classmethod
    def _check_capacity(cls, value: float | None) -> float | None:
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise ValueError("capacity must be a positive number of polls per slot (or unset)")
        return value

    @field_validator("delivery_retry_schedule")
    @classmethod
    def _check_retry_schedule(cls, value: list[float]) -> list[float]:
        if not 1 <= len(value) <= 50:
            raise ValueError("the retry schedule needs 1 to 50 delays, e.g. [0, 5, 300]")
        if any(not math.isfinite(v) or v < 0 or v > 7 * 86400 for v in value):
            raise ValueError("each retry delay must be 0 to 604800 seconds")
        return value

    @field_validator("user_agent")
    @classmethod
    def _check_user_agent(cls, value: str) -> str:
        if not value.strip() or any(c in value for c in "\r\n"):
            raise ValueError("user_agent must be one non-empty line")
        return value

    @model_validator(mode="after")
    def _check_cluster(self) -> Settings:
        if not self.cluster:
            return self
        if not self.database_url.lower().startswith("postgresql"):
            raise ValueError(
                "cluster mode needs PostgreSQL (several workers share one database; SQLite "
                "runs one worker): set database_url to postgresql://..."
            )
        if self.capacity is None:
            raise ValueError(
                "cluster mode needs capacity set: the polls per slot this worker can make "
                "(its share of the sites is packed against it)"
            )
        if self.cluster_threshold > self.cluster_states:
            raise ValueError("cluster_threshold must be at most cluster_states")
        renew, timeout = self.effective_renew_deadline(), self.effective_worker_timeout()
        if not self.heartbeat_s < renew < timeout:
            raise ValueError(
                f"renew_deadline_s ({renew:g} s) must lie between heartbeat_s "
                f"({self.heartbeat_s:g} s) and the worker timeout ({timeout:g} s): a worker "
                "stops polling before the others may take its sites; set renew_deadline_s, "
                "heartbeat_s or worker_timeout_s so that they do"
            )
        return self

    def effective_worker_timeout(self) -> float:
        """Seconds after which a silent cluster worker is dead."""
        if self.worker_timeout_s is not None:
            return self.worker_timeout_s
        return 3 * self.heartbeat_s + 2.0

    def effective_renew_deadline(self) -> float:
        """Seconds a cluster worker may poll after its last successful heartbeat was sent
        (crawler/service/_renewal.py)."""
        if self.renew_deadline_s is not None:
            return self.renew_deadline_s
        return 2.0 / 3.0 * self.effective_worker_timeout()

    def effective_stall_timeout(self) -> float:
        """Seconds a cluster worker's loop may go without reaching a slot start before the
        worker stops heartbeating (crawler/service/_cluster.py)."""
        if self.stall_timeout_s is not None:
            return self.stall_timeout_s
        return max(60.0, 3 * (self.slot_seconds + self.effective_slot_deadline() + 5.0))

    def effective_fetch_workers(self) -> int:
        """Crawl worker processes to start (0 = fetch in the service's own process)."""
        if self.fetch_workers >= 0:
            return self.fetch_workers
        return max(1, min(MAX_AUTO_FETCH_WORKERS, usable_cpus()))

    def effective_slot_deadline(self) -> float:
        """Seconds a slot's polls may take: a poll still in flight then is not cut but goes
        on in the background (``effective_poll_linger``), so the default is the slot, and at
        least ``MIN_DEFAULT_DEADLINE_S``."""
        if self.slot_deadline_s is not None:
            return self.slot_deadline_s
        return max(self.slot_seconds, MIN_DEFAULT_DEADLINE_S)

    def effective_poll_linger(self) -> float:
        """Seconds a poll in flight at its slot's deadline may go on: the fetcher's own
        budget (``fetch_timeout_s``), which ends it first."""
        return self.fetch_timeout_s

    def effective_capacity(self, n_urls: int) -> float:
        """Polls per slot: the configured capacity, or :func:`auto_capacity`."""
        return self.capacity if self.capacity is not None else auto_capacity(n_urls)


#: the most crawl workers "auto" starts (each is a process of ~45 MB)
MAX_AUTO_FETCH_WORKERS = 8


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def auto_capacity(n_urls: int) -> float:
    """A sensible polls-per-slot for ``n_urls`` watched URLs: 1 % of them, at least one."""
    return max(1.0, n_urls / 100.0)


class _TomlSource(PydanticBaseSettingsSource):
    """The TOML file's top-level keys (an optional ``[crawler]`` table is merged in)."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self._data: dict[str, Any] = _read_toml(path) if path is not None else {}

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise SettingsError(f"config file {path} does not exist") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None
    section = data.pop("crawler", None)
    if isinstance(section, dict):
        data.update(section)
    return data


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    config_file: str | os.PathLike[str] | None = None,
) -> Settings:
    """Settings from CLI flags (``overrides``: None values are ignored) > environment >
    TOML file (``config_file``, else ``$CRAWLER_CONFIG``) > defaults.

    Raises :class:`SettingsError` with one line per invalid setting.
    """
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    path = config_file if config_file is not None else os.environ.get(CONFIG_ENV) or None
    token = _config_file.set(Path(path) if path is not None else None)
    try:
        return Settings(**flags)
    except ValidationError as exc:
        raise SettingsError(_describe(exc)) from None
    except PydanticSettingsError as exc:  # an environment value that is not JSON
        name = re.search(r'field "(\w+)"', str(exc))
        field = name[1] if name else "settings"
        raise SettingsError(
            f"invalid setting {field} ({ENV_PREFIX}{field.upper()}): not valid JSON, "
            'e.g. [0, 5, 300] for a list or {"N": 64} for an object'
        ) from None
    finally:
        _config_file.reset(token)


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        name = ".".join(str(p) for p in err["loc"]) or "settings"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown setting"
        lines.append(f"invalid setting {name} ({ENV_PREFIX}{name.upper()}): {msg}")
    return "; ".join(lines)
