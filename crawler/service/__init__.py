"""The crawl service: slot clock, crawl loop, health, shutdown."""

from crawler.gc_policy import tune_gc
from crawler.service._clock import SlotClock, Tick
from crawler.service._discovery_parts import source_problem
from crawler.service._loop import CrawlLoop, SlotSummary
from crawler.service._pollers import build_poller, fetch_config
from crawler.service._service import CrawlService, serve

__all__ = [
    "CrawlLoop",
    "CrawlService",
    "SlotClock",
    "SlotSummary",
    "Tick",
    "build_poller",
    "fetch_config",
    "serve",
    "source_problem",
    "tune_gc",
]
