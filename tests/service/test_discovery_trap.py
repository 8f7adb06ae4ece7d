"""A session-id trap with ``auto_watch`` beside three ordinary watched pages, on a real
service over loopback HTTP: the watch list and the discovered table stay bounded by the
canonicalization and the per-source caps, the ordinary pages keep their polls, the memory
stays where it was.

The trap (127.0.0.1) lists ten links with a fresh session id on every fetch: in ``session``
mode ``/s/<hex>/item/<k>?token=<hex>`` (canonicalization folds them, with the default caps),
in ``numeric`` mode fresh ``/item/<n>`` numbers nothing can fold (the caps hold them: set
small here so they bind within the run). Three pages on 127.0.0.2..4 change on every request;
their polls per minute are compared with a control run without the trap, in the steady state:
from slot ``WARM_UP`` on (a new watched URL's first poll costs the detector a few hundred ms
once; the trap's eleven start pages pay it in one slot, which a 10 s run would otherwise
count as a tenth of its time). The whole run's figures are printed too.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.store import NewUrl, SourceSpec, Store
from crawler.testsite._session_trap import BusyPages, SessionTrapSite
from tests.service.conftest import service_settings

SLOT_S = 0.2
SLOTS = 50
WARM_UP = 10
ORDINARY_HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
#: the numeric trap's caps, small enough to bind within the run
NUMERIC_CAPS: dict[str, Any] = {
    "discovery_max_new_per_day": 20,
    "discovery_max_auto_watched": 12,
    "discovery_max_auto_watched_per_slot": 4,
}


@dataclass(frozen=True)
class Run:
    per_minute: dict[str, float]  # ordinary page -> polls per minute, from WARM_UP on
    per_slot: dict[str, float]  # ordinary page -> polls per slot, from WARM_UP on
    whole_run_per_minute: dict[str, float]
    seconds: float
    rss_growth_mb: float
    capped: float  # crawler_discovery_capped_total, all caps


def rss_mb() -> float:
    """This process's resident set size (the service runs in it: ``fetch_workers=0``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def run_service(database_url: str, pages: list[BusyPages], **overrides: Any) -> Run:
    settings = service_settings(
        database_url,
        slot_seconds=SLOT_S,
        capacity=8.0,
        discovery_share=0.25,
        fetch_workers=0,
        **overrides,
    )
    before = {p.host: sum(p.served.values()) for p in pages}
    warm: dict[str, float] = {}
    rss = rss_mb()

    slots: list[SlotSummary] = []

    def on_slot(summary: SlotSummary) -> None:
        slots.append(summary)
        if len(slots) == WARM_UP:
            warm.update({p.host: sum(p.served.values()) for p in pages})
            warm["at"] = time.monotonic()

    async with CrawlService(settings) as service:
        started = time.monotonic()
        await service.run(asyncio.Event(), SLOTS, on_slot)
        ended = time.monotonic()
        growth = rss_mb() - rss
        capped = sum(
            service.metrics.registry.get_sample_value(
                "crawler_discovery_capped_total", {"cap": cap}
            )
            or 0.0
            for cap in ("new_per_slot", "new_per_day", "auto_watched")
        )
    whole = {p.host: (sum(p.served.values()) - before[p.host]) * 60 / (ended - started)
             for p in pages}  # fmt: skip
    steady = {p.host: sum(p.served.values()) - warm[p.host] for p in pages}
    per_minute = {host: n * 60 / (ended - warm["at"]) for host, n in steady.items()}
    per_slot = {host: n / (SLOTS - WARM_UP) for host, n in steady.items()}
    return Run(per_minute, per_slot, whole, ended - started, growth, capped)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["session", "numeric"])
async def test_a_session_trap_with_auto_watch_stays_bounded_and_takes_no_ones_polls(
    database_url: str, mode: str
) -> None:
    pages = [BusyPages(host) for host in ORDINARY_HOSTS]
    trap = SessionTrapSite("127.0.0.1", mode="session" if mode == "session" else "numeric")
    for server in (*pages, trap):
        await server.start()
    caps = NUMERIC_CAPS if mode == "numeric" else {}
    try:
        with Store(database_url) as store:
            store.add_urls([NewUrl(validate_url(p.url("/page/1"))) for p in pages])
        control = await run_service(database_url, pages, **caps)
        with Store(database_url) as store:
            store.discovery.add_source(SourceSpec(trap.url("/"), auto_watch=True))
        trapped = await run_service(database_url, pages, **caps)
        with Store(database_url) as store:
            watched = [r.url for r in store.list_urls()]
            found = store.discovery.discovered()
    finally:
        for server in (*pages, trap):
            await server.stop()
    print(f"{mode}: control {control}\n{mode}: trapped {trapped}")
    print(f"{mode}: watched {len(watched)}, discovered {len(found)}, trap served {trap.served}")
    assert sum(trap.served.values()) >= SLOTS / 5  # the trap was read, and often
    trap_watched = [u for u in watched if u.startswith(trap.base)]
    auto = [d for d in found if d.watched]
    if mode == "session":
        # canonicalization folds every fresh id: the source page and its ten items, no more
        assert sorted(trap_watched) == sorted(
            [trap.url("/")] + [trap.url(f"/item/{k}") for k in range(10)]
        )
        assert len(found) <= 10
        assert all("/s/" not in d.url and "token" not in d.url for d in found)
    else:
        # the caps bind: the day's new pages, and the pages on the watch list
        assert len(found) == NUMERIC_CAPS["discovery_max_new_per_day"]
        assert len(auto) == NUMERIC_CAPS["discovery_max_auto_watched"]
        assert len(trap_watched) <= 11 + NUMERIC_CAPS["discovery_max_auto_watched"]
        assert trapped.capped > 0
    # the ordinary pages keep >= 90% of their polls per minute; the memory stays put
    for host in ORDINARY_HOSTS:
        assert trapped.per_minute[host] >= 0.9 * control.per_minute[host], (host, control, trapped)
    assert trapped.rss_growth_mb < 100
