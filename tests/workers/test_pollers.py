"""The two ``Poller``s answer the same jobs alike, and the service picks one by its settings."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from crawler.detect import ChangeDetector
from crawler.fetch import FetchConfig
from crawler.service import build_poller
from crawler.settings import load_settings
from crawler.testsite import ChangingSite
from crawler.workers import CrawlWorkers, InProcessPoller, PollAnswer, Poller, PollJob

CONFIG = FetchConfig(
    user_agent="crawler-tests/1.0",
    timeout_s=5.0,
    per_host_concurrency=4,
    per_host_min_delay_s=0.0,
    allow_private_addresses=True,
    retries=0,
)


@pytest.fixture
async def site() -> AsyncIterator[ChangingSite]:
    async with ChangingSite(np.zeros(70), page_size=2_000, manual=True, seed=4) as changing:
        yield changing


def jobs_for(site: ChangingSite, previous: dict[int, PollAnswer]) -> list[PollJob]:
    jobs = []
    for k, url in enumerate(site.urls()):
        p = previous.get(k + 1)
        jobs.append(
            PollJob(
                k + 1,
                url,
                url.split("/")[2],
                None,
                None,
                None,
                (),
                p.content_hash if p else None,
                p.raw_hash if p else None,
            )
        )
    jobs.append(
        PollJob(99, "http://127.0.0.1:9/closed", "127.0.0.1:9", None, None, None, (), None, None)
    )
    return jobs


async def two_rounds(poller: Poller, site: ChangingSite) -> list[dict[int, PollAnswer]]:
    await poller.start()
    try:
        rounds: list[dict[int, PollAnswer]] = []
        previous: dict[int, PollAnswer] = {}
        for _ in range(2):
            got: dict[int, PollAnswer] = {}
            async for chunk in poller.poll_chunks(jobs_for(site, previous)):
                assert chunk  # no empty chunks
                for a in chunk:
                    assert type(a) is PollAnswer and a.url_id not in got
                    got[a.url_id] = a
            rounds.append(got)
            previous = got
            site.versions[3] += 1  # page 4 changes between the rounds
        return rounds
    finally:
        await poller.aclose()


@pytest.mark.parametrize("kind", ["in-process", "crawl-workers"])
async def test_both_pollers_answer_every_job_with_the_same_verdicts(
    site: ChangingSite, kind: str
) -> None:
    poller: Poller = (
        InProcessPoller(CONFIG, 100, ChangeDetector(workers=1))
        if kind == "in-process"
        else CrawlWorkers(2, CONFIG, 100, chunk=16)
    )
    first, second = await two_rounds(poller, site)
    assert set(first) == set(second) == set(range(1, 71)) | {99}
    assert first[99].outcome == "error" and first[99].error_kind == "connect"
    assert all(first[k].changed is None for k in range(1, 71))  # baselines
    assert [k for k in range(1, 71) if second[k].changed] == [4]
    assert second[4].text is not None and len(second[4].text) <= 100
    assert all(second[k].changed is False for k in range(1, 71) if k != 4)


def test_the_settings_choose_the_poller() -> None:
    base = {"database_url": "sqlite://", "normalize_workers": 1}
    assert type(build_poller(load_settings({**base, "fetch_workers": 0}))) is InProcessPoller
    workers = build_poller(load_settings({**base, "fetch_workers": 3}))
    assert type(workers) is CrawlWorkers and workers.size == 3


def test_a_verdicts_truncated_and_error_flags_reach_the_answer() -> None:
    from dataclasses import dataclass

    from crawler.detect import Verdict
    from crawler.fetch import FetchResult
    from crawler.workers import answer_of

    @dataclass(frozen=True)
    class Flagged(Verdict):  # the fields a detector may set on a verdict
        truncated: bool = False
        error: str | None = None
        message: str | None = None

    result = FetchResult(
        1, "http://a.example/", "http://a.example/", "ok", 200, b"<p>x</p>", "text/html",
        None, None, None, None, 0.01, 8,
    )  # fmt: skip
    cut = answer_of(result, Flagged("h", "r", False, None, True, truncated=True), None)
    assert cut.outcome == "ok" and cut.truncated and cut.content_hash == "h"
    slow = answer_of(result, Flagged("", "", None, error="judge_timeout", message="too slow"), 9)
    assert slow.outcome == "error" and slow.error_kind == "judge_timeout"
    assert slow.error == "too slow" and slow.content_hash is None
    plain = answer_of(result, Verdict("h", "r", None), None)
    assert plain.truncated is False and plain.outcome == "ok"
