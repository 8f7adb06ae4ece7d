"""Fetch-and-judge: the ``Poller`` contract and its two implementations.

``InProcessPoller`` fetches in the calling process; ``CrawlWorkers`` runs processes that fetch
and judge, each owning a share of the hosts. Imports only ``crawler.fetch``, ``crawler.detect``
and ``crawler.ipc`` (a worker process starts in well under a second): the store, the
schedulers and the service stay in the coordinating process.
"""

from crawler.workers._answers import answer_of, deferred_answer
from crawler.workers._local import JUDGE_BATCH, InProcessPoller
from crawler.workers._poller import Poller
from crawler.workers._pool import LOST, CrawlWorkers
from crawler.workers._types import DEFERRED_REASONS, PollAnswer, PollJob

__all__ = [
    "DEFERRED_REASONS",
    "JUDGE_BATCH",
    "LOST",
    "CrawlWorkers",
    "InProcessPoller",
    "PollAnswer",
    "PollJob",
    "Poller",
    "answer_of",
    "deferred_answer",
]
