"""The operator's rules of a watched URL as the CLI reads and shows them: durations, bounds,
pause, tags and the failure record (``crawler edit`` parses them; ``list`` and ``show`` print
them).

Durations ("90s", "5m", "1h30m", "1d", "2w", or plain seconds) are parsed here by a small
regular expression: pytimeparse, the usual library, has had no release since 2017, and
humanfriendly brings a large package for one function; the format is tested in
``tests/cli/test_edit.py``.
"""

from __future__ import annotations

import contextlib
import math
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from crawler.cli._common import print_json, print_rows

if TYPE_CHECKING:
    from crawler.settings import Settings
    from crawler.store import Store

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
# ASCII digits only: ``\d`` and ``float()`` also take fullwidth and other Unicode digits
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhdw])")
_WHOLE = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?\s*[smhdw]\s*)+")

DurationHelp = "e.g. 90s, 5m, 1h30m, 1d; 'none' (no bound) or 'default' (the setting's)"


def parse_duration(text: str) -> float | None:
    """Seconds of ``text``: "90", "90s", "5m", "1h30m", "1d", "2w"; "none" is 0 (no bound),
    "default" is None (the setting's default). ValueError otherwise."""
    raw = text.strip().lower()
    if raw == "none":
        return 0.0
    if raw == "default":
        return None
    try:
        if not raw.isascii():
            raise ValueError(raw)
        seconds = float(raw)
    except ValueError:
        if not _WHOLE.fullmatch(raw):
            raise ValueError(
                f"invalid duration {text!r}: use a number with a unit (s, m, h, d, w), "
                "e.g. 90s, 5m, 1h30m, 1d; or 'none' or 'default'"
            ) from None
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(raw))
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: must be more than 0 seconds")
    return seconds


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """A duration back from now (``90s``, ``15m``, ``1h30m``, ``2d``, ``1w``: the rules'
    parser, ASCII digits only) or an ISO 8601 time (without a zone: UTC), for every
    ``--since``. Raises ValueError with what is accepted."""
    now = now or datetime.now(UTC)
    if not value.isascii():  # fromisoformat and float() take other scripts' digits too
        raise ValueError(f"--since {value!r}: use ASCII digits and letters (30m, 1h, 2d)")
    if value.strip().lower() not in ("none", "default"):  # the rules' words, not times
        with contextlib.suppress(ValueError):
            seconds = parse_duration(value)
            if seconds is not None:
                return now - timedelta(seconds=seconds)
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"--since {value!r}: give a duration such as 90s, 15m, 1h, 2d, 1w, or an ISO time "
            "such as 2026-11-26T08:00:00Z"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def format_duration(seconds: float | None) -> str:
    """A short form of ``seconds`` ("-" for none)."""
    if seconds is None or seconds <= 0 or not math.isfinite(seconds):
        return "-"
    for unit in ("w", "d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def url_rules(store: Store, settings: Settings) -> dict[int, dict[str, Any]]:
    """Per watched URL with any: its bounds in seconds as stored (own, or the default of
    ``settings``: pass the service's, see ``_common.service_view``; None: no bound), pause,
    tags and failure record, for ``crawler list``. Seconds are shown as given, never
    converted through a slot length (the command's own slot length may not be the
    service's)."""
    rules = store.url_rules()
    out: dict[int, dict[str, Any]] = {}
    for j, uid in enumerate(rules.ids.tolist()):
        out[uid] = {
            "min_interval_s": _seconds(rules.min_interval_s[j], settings.default_min_interval_s),
            "max_interval_s": _seconds(rules.max_interval_s[j], settings.default_max_interval_s),
            "paused": bool(rules.paused[j]),
        }
    for uid, tags in store.url_tags().items():
        out.setdefault(uid, {})["tags"] = tags
    for _, row in store.url_failures():
        out.setdefault(row.url_id, {})["failure"] = row.as_dict()
    return out


def _seconds(stored: float, default: float | None) -> float | None:
    """A bound in seconds: the URL's own (0: none) or, stored as NaN, the default."""
    value = default if math.isnan(stored) else float(stored)
    return value if value else None


def defaults(settings: Settings) -> dict[str, Any]:
    return {
        "min_interval_s": settings.default_min_interval_s or None,
        "max_interval_s": settings.default_max_interval_s or None,
        "paused": False,
        "tags": [],
        "failure": None,
    }


def bound_text(doc: dict[str, Any]) -> str:
    low, high = doc.get("min_interval_s"), doc.get("max_interval_s")
    if not low and not high:
        return "-"
    return f"{format_duration(low)}..{format_duration(high)}"


def print_failing(store: Store, settings: Settings, as_json: bool) -> None:
    """``crawler list --failing``: streak, last error, retired."""
    rows = store.url_failures()
    if as_json:
        print_json({"failing": [{"url": url, **row.as_dict()} for url, row in rows]})
        return
    cells = [
        [
            url,
            str(row.streak),
            row.kind or "-",
            "yes" if row.retired else "",
            row.since.isoformat()[:19] if row.since else "-",
            row.error or "",
        ]
        for url, row in rows
    ]
    headers = ("url", "streak", "kind", "retired", "since", "last error")
    print_rows(f"{len(rows)} failing URLs", headers, cells)
