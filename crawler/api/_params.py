"""Query parameters of the feed and the API, checked: a bad one is a ``BadParameterError`` (a
400 with a problem body), never a 500."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "BadParameterError",
    "ChangeQuery",
    "decode_cursor",
    "encode_cursor",
    "parse_query",
]

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_MAX_TEXT = 4096  # longest url or tag parameter accepted


class BadParameterError(ValueError):
    """A query parameter that cannot be used; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ChangeQuery:
    since: datetime | None
    url: str | None
    tag: str | None
    after_id: int | None
    limit: int


def encode_cursor(change_id: int) -> str:
    """The opaque cursor after ``change_id`` (base64url of ``c<id>``, unpadded)."""
    return base64.urlsafe_b64encode(f"c{change_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadParameterError("cursor: not a cursor this API returned") from None
    if not raw.startswith("c") or not raw[1:].isdigit() or len(raw) > 20:
        raise BadParameterError("cursor: not a cursor this API returned")
    return int(raw[1:])


def _since(value: str) -> datetime:
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise BadParameterError(
            "since: not an ISO 8601 time (e.g. 2026-01-31T12:00:00Z or 2026-01-31)"
        ) from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _text(query: Mapping[str, str], name: str) -> str | None:
    value = query.get(name)
    if value is None:
        return None
    if not value or len(value) > _MAX_TEXT:
        raise BadParameterError(f"{name}: must be 1 to {_MAX_TEXT} characters")
    return value


def _limit(value: str | None, default: int, maximum: int) -> int:
    if value is None:
        return default
    if not value.isdigit() or not 1 <= int(value) <= maximum:
        raise BadParameterError(f"limit: must be a whole number from 1 to {maximum}")
    return int(value)


def parse_query(
    query: Mapping[str, str], *, default_limit: int = DEFAULT_LIMIT, max_limit: int = MAX_LIMIT
) -> ChangeQuery:
    """The filters of ``?since=&url=&tag=&cursor=&limit=``."""
    since = query.get("since")
    cursor = query.get("cursor")
    return ChangeQuery(
        since=None if since is None else _since(since),
        url=_text(query, "url"),
        tag=_text(query, "tag"),
        after_id=None if cursor is None else decode_cursor(cursor),
        limit=_limit(query.get("limit"), default_limit, max_limit),
    )
