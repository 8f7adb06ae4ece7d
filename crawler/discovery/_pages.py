"""What discovery reads of a page besides its links: its date and its share of a topic.

Pure functions of a page's HTML (decoding its bytes is the detector's job, done by the
service before it calls these). A page's date is what the "no older than 24 h" rule of a new
page compares with the clock: ``article:published_time`` when the page says it, else its
``Last-Modified``; none when it has neither.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from selectolax.lexbor import LexborHTMLParser

from crawler.discovery._features import words
from crawler.discovery._links import page_text

#: share of a topic's keywords a new page must contain to be recorded (with a topic)
TOPIC_MIN = 0.5


def page_date(html: str, last_modified: str | None) -> float | None:
    """The page's date as a POSIX time: ``article:published_time``, else its
    ``Last-Modified`` header; None."""
    try:
        node = LexborHTMLParser(html).css_first('meta[property="article:published_time"]')
        content = node.attributes.get("content") if node is not None else None
        if content:
            when = datetime.fromisoformat(content)
            return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    except (ValueError, TypeError):
        pass
    if last_modified:
        try:
            return parsedate_to_datetime(last_modified).timestamp()
        except (ValueError, TypeError):
            return None
    return None


def topic_score(topic: frozenset[str], html: str | None) -> float:
    """The share of the topic's keywords that occur in the page's text."""
    if not topic or html is None:
        return 0.0
    present = set(words(page_text(html)))
    return len(topic & present) / len(topic)
