"""Fetching: a polite, SSRF-safe aiohttp client with robots.txt and conditional GET.

Takes a plain ``FetchConfig``; imports nothing else of the project.
"""

from crawler.fetch._addresses import AddressPolicy, blocked_reason
from crawler.fetch._client import Fetcher
from crawler.fetch._errors import parse_retry_after
from crawler.fetch._types import (
    ERROR_KINDS,
    ErrorKind,
    FetchConfig,
    FetchRequest,
    FetchResult,
    Outcome,
)
from crawler.fetch._urls import UnsupportedSchemeError, validate_url

__all__ = [
    "ERROR_KINDS",
    "AddressPolicy",
    "ErrorKind",
    "FetchConfig",
    "FetchRequest",
    "FetchResult",
    "Fetcher",
    "Outcome",
    "UnsupportedSchemeError",
    "blocked_reason",
    "parse_retry_after",
    "validate_url",
]
