"""Notifications through apprise (real apprise, real HTTP to a loopback receiver): one per
change with the diff in the body; failures are retried; ``destinations add`` tells
webhooks, apprise URLs and unknown schemes apart."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from crawler.delivery import Context, notification
from crawler.service import CrawlService
from crawler.store import EventRow, NewUrl, Store
from crawler.testsite import ChangingSite, zipf_rates
from tests.delivery._receivers import JsonReceiver
from tests.delivery.test_retries import committed_changes
from tests.delivery.test_webhooks_e2e import wait_delivered
from tests.service.conftest import service_settings


def cli(
    env: dict[str, str], *args: str, block_apprise: bool = False
) -> subprocess.CompletedProcess[str]:
    code = "import sys\n"
    if block_apprise:  # as if the notify extra were not installed
        code += "sys.modules['apprise'] = None\n"
    code += "from crawler.cli import main\nsys.argv = ['crawler', *sys.argv[1:]]\nmain()\n"
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow
async def test_notifications_carry_the_diff_and_are_retried(
    database_url: str, json_receiver: JsonReceiver
) -> None:
    site = ChangingSite(zipf_rates(6, 0.9, 0.5), tick_seconds=0.05, page_size=1_000, seed=4)
    await site.start()
    env = dict(os.environ) | {"CRAWLER_DATABASE_URL": database_url}
    try:
        with Store(database_url) as store:
            store.upgrade()
            store.add_urls([NewUrl(u) for u in site.urls()])
        target = f"json://127.0.0.1:{json_receiver.port}/notify"
        added = await asyncio.to_thread(
            cli, env, "destinations", "add", target, "--format", "markdown", "--json"
        )
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout)["secret"] is None
        json_receiver.failing = True  # the first attempts fail: retried on the schedule
        settings = service_settings(
            database_url, delivery=True, delivery_retry_schedule=[0, 0.3, 0.3, 0.3, 5]
        )
        async with CrawlService(settings) as service:
            await service.run(asyncio.Event(), 20)
            for _ in range(600):  # until the delivery process has tried (and failed) once
                if json_receiver.attempts:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
            json_receiver.failing = False
            await service.run(asyncio.Event(), 20)
            await wait_delivered(database_url, timeout=60)
        n = committed_changes(database_url)
    finally:
        await site.stop()
    assert json_receiver.attempts > len(json_receiver.received)  # failures happened
    changed = [r for r in json_receiver.received if r["title"].startswith("page.changed")]
    assert n > 3 and len(changed) == n
    with_diff = [r for r in changed if "```diff\n--- before\n+++ after\n" in r["message"]]
    assert with_diff, changed[0]["message"]
    assert all(r["title"].split(": ", 1)[1] in site.urls() for r in changed)


@pytest.mark.slow
def test_destinations_add_tells_schemes_apart(database_url: str) -> None:
    with Store(database_url) as store:
        store.upgrade()
    env = dict(os.environ) | {"CRAWLER_DATABASE_URL": database_url}
    unknown = cli(env, "destinations", "add", "nosuch://example.org/x")
    assert unknown.returncode != 0 and "apprise accepts" in unknown.stderr
    missing = cli(env, "destinations", "add", "ntfy://topic", block_apprise=True)
    assert missing.returncode != 0 and "pip install 'crawler[notify]'" in missing.stderr
    bad_field = cli(env, "destinations", "add", "ntfy://topic", "--template", "$secret")
    assert bad_field.returncode != 0 and "unknown template field $secret" in bad_field.stderr
    ok = cli(env, "destinations", "add", "ntfy://topic", "--format", "html", "--json")
    assert ok.returncode == 0, ok.stderr
    listed = json.loads(cli(env, "destinations", "list", "--json").stdout)["destinations"]
    # listed in apprise's privacy form (secrets masked; ntfy's default is its https mode)
    assert [(d["url"].split("://")[1], d["format"]) for d in listed] == [("topic", "html")]
    webhook_format = cli(env, "destinations", "add", "http://127.0.0.1:9/x", "--format", "html")
    assert webhook_format.returncode != 0 and "apprise URLs" in webhook_format.stderr


def test_html_body_escapes_every_field_and_evaluates_nothing() -> None:
    event = EventRow(
        7, "page.changed", 1, 3, datetime(2026, 11, 26, tzinfo=UTC),
        {"old_hash": "a", "new_hash": "b"}, "http://x.test/<p>", ("t",),
    )  # fmt: skip
    diff = "--- before\n+++ after\n-<b>old</b>\n+{__import__('os')}\n"
    title, body = notification(
        event, Context(diff=diff), "html", "$url|$diff|${event_id}|$missing|{url}", 10_000
    )
    assert title == "page.changed: http://x.test/<p>"
    assert body == (
        "http://x.test/&lt;p&gt;|--- before\n+++ after\n-&lt;b&gt;old&lt;/b&gt;\n"
        "+{__import__(&#x27;os&#x27;)}\n|msg_7|$missing|{url}"
    )
    _, text = notification(event, Context(diff=diff), "text", None, 30)
    assert text.endswith("[diff truncated]\n") and "+{__import__" not in text
