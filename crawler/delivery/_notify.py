"""Notifications through apprise (email, Slack, Matrix, Telegram, ntfy, ...): the optional
``notify`` extra (``pip install 'crawler[notify]'``).

Decisions:

* **Which destinations**: an ``http``/``https`` URL is a Standard Webhooks destination; any
  other scheme apprise knows (``mailto://``, ``slack://``, ``ntfy://``, ``json://``, ...)
  is a notification (``kind``). Unknown schemes are refused at ``crawler destinations add``,
  and so is an apprise URL when the extra is not installed.
* **The body** is a ``string.Template`` (``$url``, ``$diff``, ...: ``FIELDS``) filled with
  ``safe_substitute`` from a fixed mapping: no expression is ever evaluated, an unknown
  ``$name`` stays as written. In ``html`` every value is HTML-escaped first.
* **Sending**: apprise's ``notify()`` is blocking and answers only True/False, so it runs
  in a thread pool of the sender's own (bounded: a hanging provider cannot take the
  database's threads) under ``asyncio.timeout``; False or a timeout is a failed attempt, so
  the deliverer's retries, back-off and dead letters apply. A thread that hangs past the
  timeout runs on until apprise's own socket timeouts end it (the residual risk).
* **Address policy**: for the schemes whose host is where the notification is posted
  (``json``, ``form``, ``xml`` and their ``s`` forms) the host is checked as for a
  webhook; the other schemes talk to their provider's servers, named by apprise.
"""

from __future__ import annotations

import asyncio
import html
from concurrent.futures import ThreadPoolExecutor
from string import Template
from typing import Any
from urllib.parse import urlsplit

from crawler.delivery._payload import Context
from crawler.delivery._sender import Answer, WebhookSender
from crawler.detect import cap_diff
from crawler.store import PAGE_CHANGED, EventRow

FORMATS = ("text", "markdown", "html")
WEBHOOK_SCHEMES = ("http", "https")
#: apprise schemes that post to the URL's own host (checked by the address policy)
HOST_SCHEMES = ("json", "jsons", "form", "forms", "xml", "xmls")
INSTALL_HINT = "apprise URLs need the notify extra: pip install 'crawler[notify]'"

#: the fields a template may use
FIELDS = (
    "type", "url", "event_id", "timestamp", "tags", "diff", "old_hash", "new_hash",
    "change_rate", "expected_interval_s",
)  # fmt: skip
TITLE = "$type: $url"
DEFAULT_TEMPLATES = {
    "text": "$type: $url\n\n$diff",
    "markdown": "**$type**: <$url>\n\n```diff\n$diff\n```",
    "html": '<p><b>$type</b>: <a href="$url">$url</a></p><pre>$diff</pre>',
}


def is_webhook(url: str) -> bool:
    return urlsplit(url).scheme.lower() in WEBHOOK_SCHEMES


def check_notify_url(url: str) -> str:
    """``url`` if apprise is installed and accepts it, else ValueError saying what to do."""
    scheme = urlsplit(url).scheme.lower()
    if not scheme:
        raise ValueError(f"{url!r} has no scheme: use https://... (a webhook) or an apprise URL")
    try:
        import apprise
    except ImportError:
        raise ValueError(f"{scheme}:// is not http(s); {INSTALL_HINT}") from None
    if not apprise.Apprise().add(url):
        raise ValueError(
            f"{scheme}:// is neither http(s) nor a URL apprise accepts (see "
            "https://github.com/caronc/apprise/wiki for its schemes)"
        )
    return url


def check_template(template: str) -> str:
    """``template`` if every ``$field`` it names is known, else ValueError."""
    try:
        names = Template(template).get_identifiers()
    except ValueError as exc:
        raise ValueError(f"the template is not a string.Template: {exc}") from None
    unknown = [n for n in names if n not in FIELDS]
    if unknown:
        raise ValueError(f"unknown template field ${unknown[0]}: use {', '.join(FIELDS)}")
    return template


def notification(
    event: EventRow, context: Context, body_format: str, template: str | None, max_bytes: int
) -> tuple[str, str]:
    """(title, body) of ``event`` for an apprise destination (pure)."""
    diff = ""
    if event.type == PAGE_CHANGED and context.diff is not None:
        diff, truncated = cap_diff(context.diff, max_bytes)
        if truncated:
            diff += "\n[diff truncated]\n"
    values: dict[str, Any] = {
        "type": event.type,
        "url": event.url or "",
        "event_id": f"msg_{event.id}",
        "timestamp": event.created_at.isoformat(),
        "tags": ", ".join(event.tags),
        "diff": diff,
        "old_hash": event.payload.get("old_hash") or "",
        "new_hash": event.payload.get("new_hash") or "",
        "change_rate": "" if context.change_rate is None else f"{context.change_rate:.3g}",
        "expected_interval_s": ""
        if context.expected_interval_s is None
        else f"{context.expected_interval_s:.0f}",
    }
    title = Template(TITLE).safe_substitute(values)
    if body_format == "html":
        values = {k: html.escape(str(v)) for k, v in values.items()}
    body = Template(template or DEFAULT_TEMPLATES[body_format]).safe_substitute(values)
    return title, body


class NotifySender:
    """Sends notifications with apprise, ``threads`` at once, ``timeout_s`` each."""

    def __init__(self, webhooks: WebhookSender, timeout_s: float, threads: int) -> None:
        self.webhooks = webhooks  # its address policy check
        self.timeout_s = timeout_s
        self.pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="crawler-notify")

    async def send(self, url: str, title: str, body: str, body_format: str) -> Answer:
        parts = urlsplit(url)
        if parts.scheme.lower() in HOST_SCHEMES:
            scheme = "https" if parts.scheme.lower().endswith("s") else "http"
            refused = await self.webhooks.refusal(parts._replace(scheme=scheme).geturl())
            if refused is not None:
                return Answer(None, refused)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout_s):
                ok, error = await loop.run_in_executor(
                    self.pool, _notify, url, title, body, body_format
                )
        except TimeoutError:
            return Answer(None, f"apprise: no answer within {self.timeout_s:g} s")
        return Answer(200, None) if ok else Answer(None, f"apprise: {error}")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _notify(url: str, title: str, body: str, body_format: str) -> tuple[bool, str]:
    try:
        import apprise
    except ImportError:
        return False, INSTALL_HINT
    sender = apprise.Apprise()
    if not sender.add(url):
        return False, "apprise does not accept the destination's URL"
    kind = {
        "text": apprise.NotifyFormat.TEXT,
        "markdown": apprise.NotifyFormat.MARKDOWN,
        "html": apprise.NotifyFormat.HTML,
    }[body_format]
    try:
        ok = bool(sender.notify(body=body, title=title, body_format=kind))
    except Exception as exc:  # a plugin's bug is a failed attempt, never the deliverer's end
        return False, f"{type(exc).__name__}: {exc}"
    return ok, "" if ok else "the notification was not sent (apprise's log says why)"
