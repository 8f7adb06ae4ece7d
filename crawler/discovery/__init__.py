"""Discovery: finding the pages that did not exist yesterday by following links.

Pure decision logic (no I/O): the weblog-update foragers of *Selection in Scale-Free Small
World* and their comparators (TD reinforcement-learning ordering, Best-First, breadth-first),
the topical score of *Focused Crawling using Asynchronous Cellular Learning Automata*, link
canonicalization, scope rules and per-source budgets. ``crawler.discovery._simulate`` runs the
paper's comparison on a generated site (``crawler.testsite._graph``). See docs/discovery.md.
"""

from crawler.discovery._driver import START_CHOICES, Discovery, SourceCrawl
from crawler.discovery._features import text_state, words
from crawler.discovery._fleets import STRATEGIES, make_fleet
from crawler.discovery._forager import MAX_AGE, Fleet, Forager, ReinforcingAgent
from crawler.discovery._lastmod import (
    LastmodTracker,
    Listed,
    Listing,
    looks_like_listing,
    read_listing,
)
from crawler.discovery._links import extract_links, page_text
from crawler.discovery._ordering import (
    BestFirstOrdering,
    BreadthFirstOrdering,
    Frontier,
    ValueOrdering,
)
from crawler.discovery._pacing import StartPacer
from crawler.discovery._pages import TOPIC_MIN, page_date, topic_score
from crawler.discovery._patterns import PatternError, UrlPattern, compile_pattern
from crawler.discovery._relisting import ListingPacer
from crawler.discovery._seeds import SeedBandit
from crawler.discovery._sessions import (
    SESSION_PARAMETERS,
    OneOffLearner,
    looks_like_token,
    strip_sessions,
)
from crawler.discovery._sitemaps import SitemapError
from crawler.discovery._state import (
    MIN_DISCOVERY_CAPACITY,
    SourceState,
    StartFigures,
    discovery_polls,
    start_report,
    starved_reason,
)
from crawler.discovery._urls import Refusal, Scope, SourceBudget, canonical_url, url_template
from crawler.discovery._weblog import Weblog

__all__ = [
    "MAX_AGE",
    "MIN_DISCOVERY_CAPACITY",
    "SESSION_PARAMETERS",
    "START_CHOICES",
    "STRATEGIES",
    "TOPIC_MIN",
    "BestFirstOrdering",
    "BreadthFirstOrdering",
    "Discovery",
    "Fleet",
    "Forager",
    "Frontier",
    "LastmodTracker",
    "Listed",
    "Listing",
    "ListingPacer",
    "OneOffLearner",
    "PatternError",
    "Refusal",
    "ReinforcingAgent",
    "Scope",
    "SeedBandit",
    "SitemapError",
    "SourceBudget",
    "SourceCrawl",
    "SourceState",
    "StartFigures",
    "StartPacer",
    "UrlPattern",
    "ValueOrdering",
    "Weblog",
    "canonical_url",
    "compile_pattern",
    "discovery_polls",
    "extract_links",
    "looks_like_listing",
    "looks_like_token",
    "make_fleet",
    "page_date",
    "page_text",
    "read_listing",
    "start_report",
    "starved_reason",
    "strip_sessions",
    "text_state",
    "topic_score",
    "url_template",
    "words",
]
