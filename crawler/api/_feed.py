"""The Atom feed (RFC 4287) of changes, written with ``xml.etree.ElementTree``.

ElementTree escapes every text and attribute, so a page's text can never break the XML;
the diff goes in ``<content type="html">`` as escaped HTML (a ``<pre>`` of the unified diff,
added lines in green, removed in red), which every feed reader renders. A feed-generator
library was not taken: feedgen (the usual one) had its last release in December 2023 and
pulls in lxml and dateutil for the dozen elements written here; feedgenerator (Django's)
writes no ``type="html"`` content element of its own choice.

An entry's id is ``urn:uuid:`` + a UUID 5 of the change's id, URL and detection time: the
same change always has the same id (a reader never shows it twice), and two databases'
changes with the same row id do not collide. ``updated`` is the detection time.
"""

from __future__ import annotations

import html
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from crawler.api._diffs import ChangeDiff
from crawler.store import ChangeInfo

__all__ = ["ATOM_NS", "entry_id", "render_feed"]

ATOM_NS = "http://www.w3.org/2005/Atom"
_ENTRY_NAMESPACE = uuid.UUID("6f0d2b1e-3c44-5d8a-9a57-0c6b2f1e9d31")
_LINE_STYLES = {"+": "color:#116329;background:#dafbe1", "-": "color:#82071e;background:#ffebe9"}


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _stamp(when: datetime) -> str:
    return _utc(when).isoformat(timespec="seconds").replace("+00:00", "Z")


def entry_id(change: ChangeInfo) -> str:
    """The stable Atom id of a change."""
    key = f"{change.id}\n{change.url}\n{_stamp(change.detected_at)}"
    return f"urn:uuid:{uuid.uuid5(_ENTRY_NAMESPACE, key)}"


def diff_html(found: ChangeDiff | None) -> str:
    """The HTML of a diff: every line escaped, in a ``<pre>``."""
    if found is None or found.diff is None:
        return "<p>No diff: the text before or after this change was not kept.</p>"
    lines = []
    for line in found.diff.splitlines():
        style = None if line.startswith(("---", "+++")) else _LINE_STYLES.get(line[:1])
        text = html.escape(line)
        lines.append(f'<span style="{style}">{text}</span>' if style else text)
    note = "<p>The diff was cut at its size limit.</p>" if found.truncated else ""
    return "<pre>" + "\n".join(lines) + "</pre>" + note


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, f"{{{ATOM_NS}}}{tag}", attrs)
    if text is not None:
        element.text = text
    return element


def render_feed(
    *,
    title: str,
    self_url: str,
    feed_id: str,
    changes: Sequence[ChangeInfo],
    diffs: Mapping[int, ChangeDiff],
) -> bytes:
    """The Atom document of ``changes`` (newest first), each entry with its diff."""
    ET.register_namespace("", ATOM_NS)
    feed = ET.Element(f"{{{ATOM_NS}}}feed")
    _sub(feed, "id", feed_id)
    _sub(feed, "title", title)
    newest = max((_utc(c.detected_at) for c in changes), default=datetime(1970, 1, 1, tzinfo=UTC))
    _sub(feed, "updated", _stamp(newest))
    _sub(feed, "link", rel="self", type="application/atom+xml", href=self_url)
    author = _sub(feed, "author")
    _sub(author, "name", "crawler")
    _sub(feed, "generator", "crawler")
    for change in changes:
        entry = _sub(feed, "entry")
        _sub(entry, "id", entry_id(change))
        _sub(entry, "title", f"Changed: {change.url}")
        _sub(entry, "updated", _stamp(change.detected_at))
        _sub(entry, "link", rel="alternate", type="text/html", href=change.url)
        for tag in change.tags:
            _sub(entry, "category", term=tag)
        _sub(entry, "summary", f"change {change.id} of {change.url}, slot {change.slot}")
        _sub(entry, "content", diff_html(diffs.get(change.id)), type="html")
    body: bytes = ET.tostring(feed, encoding="utf-8", xml_declaration=True)
    return body
