"""``crawler destinations add/list/remove/test`` and ``crawler events`` / ``events replay``
on a real database (SQLite and PostgreSQL) and, for ``test``, a real receiver."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from crawler.cli import app
from crawler.store import DeliveryOutcome, Store
from tests.delivery.conftest import Receiver, running
from tests.store._helpers import add, poll, slot_record


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("CRAWLER_DATABASE_URL", database_url)
    monkeypatch.delenv("CRAWLER_CONFIG", raising=False)
    monkeypatch.delenv("CRAWLER_ALLOW_PRIVATE_ADDRESSES", raising=False)
    return CliRunner()


def test_destinations_add_list_remove(cli: CliRunner) -> None:
    made = cli.invoke(app, ["destinations", "add", "https://hooks.example.org/a", "--json"])
    assert made.exit_code == 0, made.output
    doc = json.loads(made.stdout)
    assert doc["secret"].startswith("whsec_") and doc["url"] == "https://hooks.example.org/a"
    given = "whsec_" + "A" * 32
    filtered = cli.invoke(app, ["destinations", "add", "https://hooks.example.org/b",
                                "--secret", given, "--tag", "prices", "--event", "page.changed",
                                "--url-pattern", r"/prices/\d+"])  # fmt: skip
    assert filtered.exit_code == 0, filtered.output
    listed = json.loads(cli.invoke(app, ["destinations", "list", "--json"]).stdout)
    rows = listed["destinations"]
    assert [r["url"] for r in rows] == [
        "https://hooks.example.org/a",
        "https://hooks.example.org/b",
    ]
    assert rows[1]["tags"] == ["prices"] and rows[1]["events"] == ["page.changed"]
    assert all(r["secret"] is None for r in rows)  # never printed by list
    assert cli.invoke(app, ["destinations", "remove", str(doc["id"])]).exit_code == 0
    gone = cli.invoke(app, ["destinations", "remove", str(doc["id"])])
    assert gone.exit_code == 1 and "no destination" in gone.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["http://127.0.0.1:9/hook"], "refuses 127.0.0.1"),
        (["https://h.example.org/", "--secret", "nope"], "whsec_"),
        (["https://h.example.org/", "--event", "page.exploded"], "unknown event type"),
        (["https://h.example.org/", "--url-pattern", "(a"], "RE2"),
        (["ftp://h.example.org/"], "ftp"),
    ],
)
def test_destinations_add_refuses_bad_input(cli: CliRunner, args: list[str], message: str) -> None:
    result = cli.invoke(app, ["destinations", "add", *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert json.loads(cli.invoke(app, ["destinations", "list", "--json"]).stdout) == {
        "destinations": []
    }


def test_events_list_and_replay(cli: CliRunner, database_url: str) -> None:
    with Store(database_url) as store:
        ids = add(store, 2)
        polls = [poll(i, "hit", content_hash=f"h{i}") for i in ids]
        store.commit_slot(slot_record(1, polls), polls)
        outbox = store.outbox
        dest = int(json.loads(cli.invoke(app, ["destinations", "add", "https://h.example.org/",
                                               "--json"]).stdout)["id"])  # fmt: skip
        outbox.fan_out(lambda d, e: True)
        due = outbox.claim_due(10, timedelta(seconds=60))
        outbox.record([DeliveryOutcome(due[0].event.id, dest, "dead", None, 500, "HTTP 500")])
    listed = json.loads(cli.invoke(app, ["events", "--json"]).stdout)["deliveries"]
    assert {d["status"] for d in listed} == {"dead", "pending"}
    failed = json.loads(cli.invoke(app, ["events", "--failed", "--json"]).stdout)["deliveries"]
    assert [d["id"] for d in failed] == [f"msg_{due[0].event.id}"]
    assert failed[0]["last_error"] == "HTTP 500"
    assert cli.invoke(app, ["events"]).exit_code == 0  # the table
    for bad in ([], ["msg_1", "--failed"], ["msg_x"]):
        assert cli.invoke(app, ["events", "replay", *bad]).exit_code == 2
    missing = cli.invoke(app, ["events", "replay", "msg_999"])
    assert missing.exit_code == 1 and "no delivery of msg_999" in missing.output
    replayed = cli.invoke(app, ["events", "replay", "--failed"])
    assert replayed.exit_code == 0 and "1 delivery queued again" in replayed.output
    assert json.loads(cli.invoke(app, ["events", "--failed", "--json"]).stdout) == {
        "deliveries": []
    }
    again = cli.invoke(app, ["events", "replay", f"msg_{due[1].event.id}"])
    assert again.exit_code == 0, again.output


@pytest.fixture
async def hook() -> AsyncIterator[Receiver]:
    async with running(Receiver()) as r:
        yield r


def crawler(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler", *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


@pytest.mark.slow
async def test_destinations_test_sends_a_signed_ping(database_url: str, hook: Receiver) -> None:
    receiver = hook
    env = dict(os.environ) | {
        "CRAWLER_DATABASE_URL": database_url,
        "CRAWLER_ALLOW_PRIVATE_ADDRESSES": "true",
    }
    env.pop("CRAWLER_CONFIG", None)
    made = await asyncio.to_thread(
        crawler, env, "destinations", "add", receiver.url, "--secret", receiver.secret, "--json"
    )
    assert made.returncode == 0, made.stderr
    dest = str(json.loads(made.stdout)["id"])
    ok = await asyncio.to_thread(crawler, env, "destinations", "test", dest, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["status"] == 204
    [ping] = receiver.received
    assert ping.verified and ping.body["type"] == "test"
    assert ping.body["data"]["destination_id"] == int(dest)
    receiver.mode = "500"
    broken = await asyncio.to_thread(crawler, env, "destinations", "test", dest)
    assert broken.returncode == 1 and "500" in broken.stdout
    env["CRAWLER_ALLOW_PRIVATE_ADDRESSES"] = "false"
    refused = await asyncio.to_thread(crawler, env, "destinations", "test", dest)
    assert refused.returncode == 1 and "address policy" in refused.stdout
