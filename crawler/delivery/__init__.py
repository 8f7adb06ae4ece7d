"""Delivery: what the crawl detected, sent out as signed webhooks, from an outbox.

>>> delivery = DeliveryProcess(settings, metrics, exclusive_lock=settings.cluster)
>>> delivery.start()   # a process beside the crawl ... delivery.stop()

Decisions (docs/delivery.md has the operator's view):

- **Outbox in the slot's transaction.** Each change's ``page.changed`` event row is written by
  ``Store.commit_slot`` beside the change row (SQLite executemany, PostgreSQL binary COPY),
  and each new page's ``page.discovered`` by ``DiscoveryStore.record_slot`` beside its
  ``discovered`` row: a kill -9 keeps the event with what it reports or loses both. The
  events of polls a cluster fence drops are never made (built from the polls it kept).
  The list of event types is open (``EVENT_TYPES``): health events are rows like any other.
- **Stable ids**: an event's id is its bigint row id with a ``msg_`` prefix: the
  ``webhook-id`` of every attempt and replay, so a receiver deduplicates by it. Ids are
  sortable; a URL's events get growing ids in commit order.
- **Delivery state: a ``deliveries`` row per (event, destination)** (status
  pending/delivered/dead, attempts, next attempt, last answer), made by fan-out: the
  deliverer turns unfanned events into rows for the destinations whose filters match
  (types, tags, an RE2 URL pattern) and flags the events, in one transaction. A cursor per
  destination was rejected: on PostgreSQL an id allocated earlier can commit later, and a
  cursor past it would skip it; a flag cannot. A new destination receives the events fanned
  out after it was added.
- **At least once, in order per URL**: a delivery is claimed (its next attempt pushed past
  the send's timeout) before it is sent and recorded after; a deliverer killed in between
  leaves the claim, which the next deliverer releases when it starts (or it expires), and
  the event is sent again with the same id. A
  delivery is due only while no earlier delivery of the same URL to the same destination is
  pending, so a URL's events arrive in order (a dead-lettered one no longer holds the next
  back). Events of different URLs go in parallel (``delivery_concurrency``; while several
  destinations are ready, at most a quarter of it per destination).
- **Beside the crawl, never in its way**: the deliverer runs in a process of its own
  (``_process.py``: as a thread it held the crawl's interpreter lock for 44 % of the
  samples and cost the crawl a quarter to a half of its polls/s), with its own event loop,
  database engine (connections) and httpx client; the crawl loop only writes rows. A
  destination that hangs holds at most its share of the sends, for ``delivery_timeout_s``.
  A destination that is down grows the ``deliveries`` table; the deliverer reads
  ``delivery_batch`` rows at a time, so memory stays bounded.
- **Retries**: the Standard Webhooks schedule (``delivery_retry_schedule``: at once, 5 s,
  5 min, 30 min, 2 h, 5 h, 10 h, 10 h) with ±20 % jitter; 429/503 with Retry-After pause
  the destination until then; 410 disables it; after the last attempt the delivery is
  dead (``crawler events --failed``; ``crawler events replay``).
- **Who delivers in a cluster**: one deliverer per database, the worker holding the
  ``delivery`` advisory lock (exclusive, session-level: it passes to another worker when the
  holder dies). Rejected: every worker claiming rows with ``FOR UPDATE SKIP LOCKED``: it
  needs the per-URL order kept across workers (a claim of a URL's head must lock the URL),
  and one deliverer's parallel sends are not the bottleneck of a webhook fan-out. A worker
  killed mid-send leaves claims that expire: the next holder sends them again, same ids.
- **Notifications** through apprise (the optional ``notify`` extra, ``_notify.py``): a
  destination whose URL is not http(s) is an apprise URL, with a body format and a
  ``string.Template``; sent from the same deliverer, so retries and dead letters apply.
- **Signatures** by the reference ``standardwebhooks`` library (``_signing.py``).
- **Health events** (``_health.py``, pure): page.failing after N failed polls in a row,
  page.recovered, and page.stopped_changing by a one-sided test of the silence against
  the learned rate with a false-alarm bound per silence spell; the service's hook
  (``crawler/service/_health.py``) feeds it and the slot commit writes its events.
- **The diff** comes from one function (``_diff.make_diff``) over the change history: the
  text before is the previous change's after or the baseline (None when not known). It is
  made once, for the change's first send, and stored with the change (``changes.diff``)
  in the transaction that writes the send's answer; later sends, the feed and the API read
  it.
"""

from crawler.delivery._deliverer import DELIVERY_ROLE, Deliverer, DeliveryMetrics
from crawler.delivery._diff import change_diff
from crawler.delivery._events import (
    EVENT_TYPES,
    PAGE_FAILING,
    PAGE_RECOVERED,
    PAGE_STOPPED_CHANGING,
    TEST,
    message_id,
    parse_message_id,
)
from crawler.delivery._filters import compile_pattern, matches
from crawler.delivery._health import (
    HealthJudge,
    HealthPolicy,
    UrlHealth,
    cautious_rate,
    silence_probability,
)
from crawler.delivery._mask import masked_url
from crawler.delivery._notify import (
    FORMATS,
    NotifySender,
    check_notify_url,
    check_template,
    is_webhook,
    notification,
)
from crawler.delivery._payload import Context, event_body, test_body
from crawler.delivery._process import DeliveryProcess
from crawler.delivery._retry import RetryPolicy
from crawler.delivery._sender import Answer, WebhookSender
from crawler.delivery._signing import check_secret, generate_secret, signed_headers
from crawler.detect import unified_diff

__all__ = [
    "DELIVERY_ROLE",
    "EVENT_TYPES",
    "FORMATS",
    "PAGE_FAILING",
    "PAGE_RECOVERED",
    "PAGE_STOPPED_CHANGING",
    "TEST",
    "Answer",
    "Context",
    "Deliverer",
    "DeliveryMetrics",
    "DeliveryProcess",
    "HealthJudge",
    "HealthPolicy",
    "NotifySender",
    "RetryPolicy",
    "UrlHealth",
    "WebhookSender",
    "cautious_rate",
    "change_diff",
    "check_notify_url",
    "check_secret",
    "check_template",
    "compile_pattern",
    "event_body",
    "generate_secret",
    "is_webhook",
    "masked_url",
    "matches",
    "message_id",
    "notification",
    "parse_message_id",
    "signed_headers",
    "silence_probability",
    "test_body",
    "unified_diff",
]
