"""Which ``Poller`` the service runs, from its settings (the one place that names them).

``fetch_workers = 0``: ``InProcessPoller`` (fetch here, judge in ``normalize_workers``
processes); otherwise ``CrawlWorkers`` with that many processes (-1: one per usable CPU, up
to a cap), each making an equal share of the service's requests. The crawl loop only sees the
``Poller`` contract.
"""

from __future__ import annotations

from collections.abc import Callable

from crawler.detect import ChangeDetector, snapshot_limit
from crawler.fetch import FetchConfig
from crawler.settings import Settings
from crawler.workers import CrawlWorkers, InProcessPoller, Poller


def fetch_config(settings: Settings, share: int = 1) -> FetchConfig:
    """The fetcher's configuration from the service settings, for a fetcher that makes one of
    ``share`` equal shares of the service's requests (one of that many crawl workers)."""
    return FetchConfig(
        total_concurrency=max(1, -(-settings.fetch_concurrency // share)),
        user_agent=settings.user_agent,
        timeout_s=settings.fetch_timeout_s,
        max_body_bytes=settings.fetch_max_body_bytes,
        max_redirects=settings.fetch_max_redirects,
        per_host_concurrency=settings.per_host_concurrency,
        per_host_min_delay_s=settings.per_host_min_delay_s,
        allow_private_addresses=settings.allow_private_addresses,
        respect_robots=settings.respect_robots,
        retries=settings.fetch_retries,
    )


def _text_bytes(settings: Settings) -> int | None:
    return snapshot_limit(settings.store_snapshots, settings.snapshot_max_bytes)


def in_process(settings: Settings) -> Poller:
    detector = ChangeDetector(workers=settings.normalize_workers or None)
    return InProcessPoller(fetch_config(settings), _text_bytes(settings), detector)


def crawl_workers(settings: Settings) -> Poller:
    n = settings.effective_fetch_workers()
    return CrawlWorkers(n, fetch_config(settings, share=n), _text_bytes(settings))


#: the pollers by name, and which one the settings choose
POLLERS: dict[str, Callable[[Settings], Poller]] = {
    "in-process": in_process,
    "crawl-workers": crawl_workers,
}


def poller_kind(settings: Settings) -> str:
    return "crawl-workers" if settings.effective_fetch_workers() else "in-process"


def build_poller(settings: Settings) -> Poller:
    """The poller the settings choose."""
    return POLLERS[poller_kind(settings)](settings)
