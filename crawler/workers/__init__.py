"""Crawl workers: processes that fetch and judge, each owning a share of the hosts.

Imports only ``crawler.fetch`` and ``crawler.detect`` (a worker process starts in well under a
second): the store, the schedulers and the service stay in the coordinating process.
"""

from crawler.workers._pool import LOST, CrawlWorkers, host_key
from crawler.workers._process import answer_of
from crawler.workers._types import PollAnswer, PollJob

__all__ = [
    "LOST",
    "CrawlWorkers",
    "PollAnswer",
    "PollJob",
    "answer_of",
    "host_key",
]
