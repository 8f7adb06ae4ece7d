"""URL validation and canonical form (http/https only)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from yarl import URL

_SCHEMES = ("http", "https")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HOST_OK = re.compile(r"^(?:[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?\.?)+$|^\[[0-9a-f:.]+\]$")


class UnsupportedSchemeError(ValueError):
    """The URL is well formed but not http/https."""


def validate_url(url: str) -> str:
    """The canonical form of an http(s) URL, or ``ValueError`` with a clear message.

    Canonical: lower-case scheme and host, IDNA host, default port dropped, empty path = "/",
    fragment dropped, unsafe characters percent-encoded. Query order is kept.
    """
    if not isinstance(url, str):
        raise ValueError(f"URL must be a string, not {type(url).__name__}")
    text = url.strip()
    if not text:
        raise ValueError("empty URL")
    if _CONTROL.search(text):
        raise ValueError(f"malformed URL {text!r}: contains control characters")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"malformed URL {text!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme and scheme not in _SCHEMES:
        raise UnsupportedSchemeError(
            f"unsupported scheme {scheme!r} in {text!r}: only http:// and https:// URLs"
        )
    if not scheme or (not parts.netloc and "://" not in text):
        raise ValueError(f"malformed URL {text!r}: expected http://host/... or https://host/...")
    if not parts.hostname:
        raise ValueError(f"malformed URL {text!r}: no host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"malformed URL {text!r}: credentials in URLs are not supported")
    if port == 0:
        raise ValueError(f"malformed URL {text!r}: port 0")
    try:
        parsed = URL(text)
        host = parsed.raw_host or ""
    except (ValueError, UnicodeError) as exc:
        raise ValueError(f"malformed URL {text!r}: {exc}") from None
    if not _HOST_OK.match(host.lower()) and not _is_ip(host):
        raise ValueError(f"malformed URL {text!r}: invalid host {parts.hostname!r}")
    result = str(parsed.with_fragment(None))
    if parsed.raw_path in ("", "/") and result.count("/") == 2:
        result = result.split("?", 1)[0] + "/" + result[len(result.split("?", 1)[0]) :]
    return result


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def origin(url: URL) -> str:
    """scheme://host:port of a URL (the key of robots.txt)."""
    return f"{url.scheme}://{url.raw_host}:{url.port}"
