"""The slot's steps (``crawler.service._steps``): a feature added to ``CrawlLoop.steps`` sees
every hook of every slot, in the slot's order, through the real service over HTTP on
127.0.0.1, and can hold polls back or add its own, without a line in the loop."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Sequence

from crawler.schedulers import IdArray, Scheduler
from crawler.service import CrawlService
from crawler.service._steps import Alongside, Polled, SlotStep
from crawler.store import NewUrl, SlotRecord, Store, UrlRecord
from crawler.testsite import ChangingSite
from crawler.workers import PollAnswer, PollJob
from tests.service.conftest import service_settings


class Recording(SlotStep):
    """Notes each hook as it is called; holds back the polls of one URL."""

    def __init__(self, held_url: str) -> None:
        self.calls: list[str] = []
        self.held_url = held_url
        self.landed_urls: list[str] = []
        self.polls_seen: list[int] = []

    async def before_select(self, scheduler: Scheduler) -> None:
        self.calls.append("before_select")

    async def add_picks(self, scheduler: Scheduler, ids: IdArray) -> IdArray:
        self.calls.append("add_picks")
        return ids

    def admit(
        self, jobs: list[PollJob], carried: Counter[str]
    ) -> tuple[list[PollJob], list[PollJob]]:
        self.calls.append("admit")
        return [j for j in jobs if j.url != self.held_url], [
            j for j in jobs if j.url == self.held_url
        ]

    def alongside(self, slot: Alongside) -> Awaitable[object]:
        self.calls.append("alongside")

        async def work() -> None:
            await slot.repolled.wait()  # set once the slot's own polls are answered

        return work()

    def observe(self, answers: Sequence[PollAnswer], records: dict[int, UrlRecord]) -> None:
        if not self.calls or self.calls[-1] != "observe":
            self.calls.append("observe")
        self.landed_urls += [records[a.url_id].url for a in answers]

    async def after_polls(self, polled: Polled) -> None:
        self.calls.append("after_polls")
        self.polls_seen.append(len(polled.polls))

    def after_slot(self, record: SlotRecord) -> None:
        self.calls.append("after_slot")


async def test_a_step_sees_every_hook_in_order_and_may_hold_polls_back(
    database_url: str, site: ChangingSite
) -> None:
    urls = [site.url(i) for i in range(4)]
    with Store(database_url) as store:
        store.add_urls([NewUrl(u) for u in urls])
    # every hook in both slots needs each slot's polls answered: on a loaded machine the
    # first slot's start (the fetch workers') can take seconds, and the second slot's
    # deadline loses up to half its length to that lag, so the deadline is far off here
    settings = service_settings(
        database_url, capacity=4.0, default_min_interval_s=0, fetch_timeout_s=30.0,
        slot_deadline_s=30.0,
    )  # fmt: skip
    async with CrawlService(settings) as service:
        step = Recording(held_url=urls[0])
        service.loop.steps.append(step)
        summaries = []
        await service.run(asyncio.Event(), 2, summaries.append)
    per_slot = [
        "before_select", "add_picks", "admit", "alongside", "observe", "after_polls",
        "after_slot",
    ]  # fmt: skip
    # a slot that landed no poll calls no observe: say which slot and why, if it happens
    assert step.calls == per_slot * 2, (step.calls, summaries)
    # the URL the step held back is deferred ("politeness") when picked, never polled
    assert summaries[0].deferred == 1 and summaries[0].polls == 3
    assert step.polls_seen == [s.polls for s in summaries]
    assert urls[0] not in step.landed_urls
    with Store(database_url) as store:
        detail = store.url_detail(urls[0])
    assert detail is not None and not detail.polls
