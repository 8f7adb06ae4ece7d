"""The read-only feed and JSON API of changes on the service's HTTP port (docs/api.md).

``ChangeApi(store, token=...)`` is installed on ``crawler.health``'s application by the
service; ``openapi_document()`` describes what is served.
"""

from crawler.api._diffs import ChangeDiff, DiffCache
from crawler.api._feed import entry_id, render_feed
from crawler.api._openapi import openapi_document
from crawler.api._params import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    BadParameterError,
    decode_cursor,
    encode_cursor,
    parse_query,
)
from crawler.api._routes import FEED_DEFAULT_LIMIT, FEED_MAX_LIMIT, ChangeApi

__all__ = [
    "DEFAULT_LIMIT",
    "FEED_DEFAULT_LIMIT",
    "FEED_MAX_LIMIT",
    "MAX_LIMIT",
    "BadParameterError",
    "ChangeApi",
    "ChangeDiff",
    "DiffCache",
    "decode_cursor",
    "encode_cursor",
    "entry_id",
    "openapi_document",
    "parse_query",
    "render_feed",
]
