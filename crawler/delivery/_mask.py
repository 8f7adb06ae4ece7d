"""A destination's URL as ``crawler destinations list`` prints it: secrets masked, the
scheme and host kept, so an operator still tells destinations apart.

Apprise URLs carry credentials in every part: a password (``mailto://user:pass@...``),
tokens in the path (``slack://T000/B000/XXXX``) or in the host (``tgram://BOTTOKEN/...``).
Apprise knows where each service keeps them: its own privacy form (``url(privacy=True)``:
``slack://T...0/B...0/X...X``) is used, without its query (apprise adds its defaults there,
and a query can hold a token). A webhook URL, or an apprise URL when the extra is not
installed, is masked by the same rules: a password becomes ``****``, a path segment longer
than 8 characters keeps only its first and last (``a...z``, as apprise does), the query
becomes ``***``; a scheme other than http(s) that apprise cannot read has everything after
it masked (its host may be a token).
"""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import urlsplit

#: path segments up to this long are shown whole
SHOWN = 8


def _elide(part: str) -> str:
    return part if len(part) <= SHOWN else f"{part[0]}...{part[-1]}"


def _generic(url: str) -> str:
    split = urlsplit(url)
    host = split.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    with contextlib.suppress(ValueError):
        if split.port is not None:
            host = f"{host}:{split.port}"
    user = ""
    if split.username is not None:
        user = _elide(split.username) + (":****" if split.password is not None else "") + "@"
    path = "/".join(_elide(p) for p in split.path.split("/"))
    query = "?***" if split.query else ""
    return f"{split.scheme}://{user}{host}{path}{query}"


def _apprise(url: str) -> str | None:
    try:
        import apprise
    except ImportError:
        return None
    plugin: Any = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    if not plugin:
        return None
    return str(plugin.url(privacy=True)).split("?", 1)[0]


def masked_url(url: str) -> str:
    """``url`` with its secrets masked (scheme and host kept)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("http", "https"):
        return _generic(url)
    shown = _apprise(url)
    if shown is not None:
        return shown
    return f"{scheme}://***" if scheme else "***"
