"""The delivery's parts on their own: signatures checked by the reference library, secrets,
filters, the retry schedule, the payload's caps, the address policy, the settings."""

from __future__ import annotations

import base64
import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError

from crawler.delivery import (
    RetryPolicy,
    WebhookSender,
    check_secret,
    event_body,
    generate_secret,
    masked_url,
    matches,
    parse_message_id,
    signed_headers,
)
from crawler.delivery._payload import Context
from crawler.detect import cap_diff
from crawler.fetch import AddressPolicy
from crawler.settings import DEFAULT_RETRY_SCHEDULE, SettingsError, load_settings
from crawler.store import DestinationRow, DestinationSpec, EventRow


def event(**kw: object) -> EventRow:
    values: dict[str, object] = {
        "id": 7, "type": "page.changed", "url_id": 3, "slot": 12,
        "created_at": datetime(2026, 11, 26, 12, 0, tzinfo=UTC),
        "payload": {"detected_at": "2026-11-26T12:00:00+00:00", "old_hash": "a", "new_hash": "b"},
        "url": "https://example.org/prices/1", "tags": ("prices",),
    }  # fmt: skip
    values.update(kw)
    return EventRow(**values)  # type: ignore[arg-type]


def destination(**kw: object) -> DestinationRow:
    spec = DestinationSpec("https://hooks.example.org/x", generate_secret(), **kw)  # type: ignore[arg-type]
    return DestinationRow(1, spec, datetime.now(UTC), None, None, None)


def test_signatures_verify_with_the_reference_library() -> None:
    secret = generate_secret()
    body = event_body(event(), Context(diff="-a\n+b\n"), 1000)
    headers = signed_headers(secret, "msg_7", body)
    assert Webhook(secret).verify(body, headers)["data"]["event_id"] == "msg_7"
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace("prices", "Prices"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(body, headers)
    old = signed_headers(secret, "msg_7", body, datetime.now(UTC) - timedelta(minutes=10))
    with pytest.raises(WebhookVerificationError):  # the receiver's replay window
        Webhook(secret).verify(body, old)


def test_secrets() -> None:
    secret = generate_secret()
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 24
    assert check_secret(secret) == secret
    for bad in ("abc", "whsec_!!!", "whsec_" + base64.b64encode(b"short").decode()):
        with pytest.raises(ValueError):
            check_secret(bad)
    assert parse_message_id("msg_12") == parse_message_id("12") == 12
    with pytest.raises(ValueError):
        parse_message_id("msg_x")


def test_filters_by_type_tag_and_pattern() -> None:
    e = event()
    assert matches(destination(), e)
    assert matches(destination(event_types=("page.changed",)), e)
    assert not matches(destination(event_types=("page.discovered",)), e)
    assert matches(destination(tags=("prices", "news")), e)
    assert not matches(destination(tags=("news",)), e)
    assert matches(destination(url_pattern=r"/prices/\d+$"), e)
    assert not matches(destination(url_pattern=r"^https://other\."), e)
    assert not matches(destination(url_pattern="x"), event(url=None))


def test_retry_schedule_jitter_and_retry_after() -> None:
    policy = RetryPolicy(DEFAULT_RETRY_SCHEDULE, rng=random.Random(1))
    assert policy.first_delay == 0
    for done, base in enumerate(DEFAULT_RETRY_SCHEDULE[1:], start=1):
        delay = policy.next_delay(done)
        assert delay is not None and 0.8 * base <= delay <= 1.2 * base
    assert policy.next_delay(len(DEFAULT_RETRY_SCHEDULE)) is None  # dead-lettered
    assert policy.next_delay(1, retry_after=42.0) == 42.0
    assert policy.next_delay(1, retry_after=10**9) == 36000.0  # capped at the longest step
    assert policy.next_delay(len(DEFAULT_RETRY_SCHEDULE), retry_after=1.0) is None


def test_payload_shape_and_diff_cap() -> None:
    doc = json.loads(
        event_body(event(), Context("x" * 50 + "\n" + "y" * 50 + "\n", 2.0, 43200.0), 60)
    )
    assert set(doc) == {"type", "timestamp", "data"}
    assert doc["timestamp"] == "2026-11-26T12:00:00Z"
    data = doc["data"]
    assert data["diff"] == "x" * 50 + "\n" and data["diff_truncated"] is True
    assert (data["url"], data["tags"], data["old_hash"], data["new_hash"]) == (
        "https://example.org/prices/1", ["prices"], "a", "b",
    )  # fmt: skip
    assert (data["change_rate"], data["expected_interval_s"]) == (2.0, 43200.0)
    found = event(
        type="page.discovered", url_id=None, payload={"url": "https://e.org/n", "depth": 1}
    )
    assert json.loads(event_body(found, Context(), 10))["data"]["depth"] == 1
    assert cap_diff("a\nbb\n" + "é" * 10, 8) == ("a\nbb\n", True)  # at a line end
    assert cap_diff("short", 100) == ("short", False)


async def test_the_address_policy_refuses_private_destinations() -> None:
    strict = WebhookSender(AddressPolicy(False), 1.0, "test")
    loose = WebhookSender(AddressPolicy(True), 1.0, "test")
    try:
        assert "refused" in (await strict.refusal("http://127.0.0.1:9/hook") or "")
        assert "refused" in (await strict.refusal("http://localhost:9/hook") or "")
        assert await loose.refusal("http://127.0.0.1:9/hook") is None
        # metadata stays refused even when private addresses are allowed
        assert "refused" in (await loose.refusal("http://169.254.169.254/hook") or "")
        answer = await strict.send("http://127.0.0.1:9/hook", {}, "{}")
        assert answer.status is None and "address policy" in (answer.error or "")
    finally:
        await strict.aclose()
        await loose.aclose()


def test_retry_schedule_setting_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().delivery_retry_schedule == list(DEFAULT_RETRY_SCHEDULE)
    monkeypatch.setenv("CRAWLER_DELIVERY_RETRY_SCHEDULE", "[0, 1, 2.5]")
    assert load_settings().delivery_retry_schedule == [0, 1, 2.5]
    for bad in ("[]", "[-1]", "not json"):
        monkeypatch.setenv("CRAWLER_DELIVERY_RETRY_SCHEDULE", bad)
        with pytest.raises(SettingsError, match="CRAWLER_DELIVERY_RETRY_SCHEDULE"):
            load_settings()


async def test_a_huge_answer_is_not_read_whole() -> None:
    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=500)
        await response.prepare(request)
        for _ in range(2_000):  # 128 MB if it were all read
            await response.write(b"x" * 65_536)
        return response

    app = web.Application()
    app.router.add_post("/hook", huge)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server: Any = site._server
    port = server.sockets[0].getsockname()[1]
    sender = WebhookSender(AddressPolicy(True), 5.0, "test")
    try:
        answer = await sender.send(f"http://127.0.0.1:{port}/hook", {}, "{}")
    finally:
        await sender.aclose()
        await runner.cleanup()
    assert answer.status == 500 and answer.text == "x" * 300


@pytest.mark.parametrize(
    ("url", "shown", "hidden"),
    [
        ("https://hooks.example.org/a", "https://hooks.example.org/a", ""),
        (
            "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX",
            "https://hooks.slack.com/services/T000/B000/X...X",
            "XXXXXXXXXXXXXXXXXXXXXXXX",
        ),
        (
            "https://u:pw1234@h.example.org:8443/hook?token=abc",
            "https://u:****@h.example.org:8443/hook?***",
            "pw1234",
        ),
        (
            "mailto://user:pass1234@example.org?to=ops@example.org",
            "mailto://user:****@example.org",
            "pass1234",
        ),
        (
            "slack://T000AAAAA/B000BBBBB/XXXXXXXXXXXXXXXXXXXXXXXX",
            "slack://T...A/B...B/X...X",
            "XXXXXXXX",
        ),
        ("tgram://123456789:ABCdefGhIJKlmNoPQRsTUVwxyZ/12345", "tgram://1...Z/12345", "ABCdef"),
        ("unknown://secret-token@x/y", "unknown://***", "secret-token"),
    ],
)  # fmt: skip
def test_destination_urls_are_listed_with_their_secrets_masked(
    url: str, shown: str, hidden: str
) -> None:
    masked = masked_url(url)
    assert masked.startswith(shown)
    assert not hidden or hidden not in masked
