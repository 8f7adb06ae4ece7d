"""The changing test site is the truth for the end-to-end tests: check it first."""

from __future__ import annotations

import math
import time
from email.utils import parsedate_to_datetime

import aiohttp
import numpy as np

from crawler.testsite import ChangingSite, zipf_rates


async def test_site_serves_versions_and_records_truth() -> None:
    site = ChangingSite(np.array([1.0, 0.0]), manual=True, page_size=2_000, etags=True)
    await site.start()
    try:
        async with aiohttp.ClientSession() as http:
            first = await (await http.get(site.url(1))).read()
            again = await (await http.get(site.url(1))).read()
            assert first != again  # fresh nonces on every response
            assert b"edition 0" in first
            site.tick()
            changed = await (await http.get(site.url(1))).read()
            assert b"edition 1" in changed
            response = await http.get(site.url(2), headers={"If-None-Match": 'W/"2-0"'})
            assert response.status == 304
            assert (await http.get(f"http://127.0.0.1:{site.port}/page/3")).status == 404
            truth = await (await http.get(f"http://127.0.0.1:{site.port}/_truth")).json()
    finally:
        await site.stop()
    assert truth["served"] == 4
    assert truth["baselines"] == 2
    assert truth["true_changes_seen"] == 1
    assert truth["not_modified"] == 1


async def test_site_sends_its_versions_last_change_when_asked() -> None:
    rates = np.array([1.0, 0.0, 0.02])
    site = ChangingSite(rates, manual=True, page_size=2_000, etags=True, last_modified=True)
    plain = ChangingSite(rates, manual=True, page_size=2_000, seed=0, host="127.0.0.2")
    await site.start()
    await plain.start()
    try:
        async with aiohttp.ClientSession() as http:

            async def modified(k: int, **headers: str) -> float:
                response = await http.get(site.url(k), headers=headers)
                stamp = response.headers["Last-Modified"]
                parsed = parsedate_to_datetime(stamp).timestamp()
                date = parsedate_to_datetime(response.headers["Date"]).timestamp()
                assert parsed <= date
                return parsed

            before = [await modified(k) for k in (1, 2, 3)]
            # a first version is as old as its rate makes it: a geometric number of ticks
            assert before[1] < time.time() - 1e6  # never changes: as good as forever
            site.tick()
            plain.tick()
            assert await modified(1) >= math.floor(time.time()) - 1  # changed just now
            assert await modified(2) == before[1]  # the same version, the same time
            assert await modified(2, **{"If-None-Match": 'W/"2-0"'}) == before[1]  # a 304 too
            answer = await http.get(plain.url(1))
            assert "Last-Modified" not in answer.headers  # off by default
    finally:
        await site.stop()
        await plain.stop()
    assert np.array_equal(site.versions, plain.versions)  # the same changes: the same seed


def test_zipf_rates() -> None:
    p = zipf_rates(500, 0.3, 1.5)
    assert p[0] == 0.3
    assert p[1] == 0.3 / 2**1.5
    assert np.all(np.diff(p) < 0)


def test_site_clock_changes_pages_at_their_rates() -> None:
    site = ChangingSite(np.array([0.5, 0.05]), manual=True, seed=3)
    for _ in range(4000):
        site.tick()
    assert abs(site.versions[0] / 4000 - 0.5) < 0.03
    assert abs(site.versions[1] / 4000 - 0.05) < 0.01


async def test_logged_site_serves_many_hosts_and_logs_who_asked() -> None:
    from crawler.testsite import LoggedSite

    site = LoggedSite(np.array([1.0, 0.0, 0.0]), hosts=3, manual=True, page_size=1_000)
    await site.start()
    try:
        assert [site.host_of(k) for k in (1, 2, 3)] == [1, 2, 3]
        assert site.url(3) == f"http://127.0.0.3:{site.port}/page/3"
        async with aiohttp.ClientSession() as http:
            await http.get(site.url(1), headers={"User-Agent": "w1"})
            site.tick()
            await http.get(site.url(1), headers={"User-Agent": "w2"})
            await http.get(site.url(3), headers={"User-Agent": "w1"})
            log = await (await http.get(f"http://127.0.0.2:{site.port}/_log?since=1")).json()
            bad = await http.get(f"http://127.0.0.1:{site.port}/_log?since=x")
            assert bad.status == 400
    finally:
        await site.stop()
    assert len(site.log) == 3
    assert log["page"] == [1, 3] and log["version"] == [1, 0]
    assert [log["clients"][c] for c in log["client"]] == ["w2", "w1"]
    assert log["t"][0] <= log["t"][1]
