"""Hostile soak: ordinary URLs next to hostile ones, for minutes, in the real service.

    python -m benchmarks.hostile_soak                 # 10 minutes
    python -m benchmarks.hostile_soak --minutes 2     # a quick look

Two real services (``python -m crawler run``, each on its own SQLite file, default crawl
workers) run AT THE SAME TIME against the same ordinary site: the *control* watches the 100
ordinary pages only, the *soak* watches the same 100 pages plus hostile URLs of every class
the service must hold up against. Running both at once is what "the same run, interleaved"
means here: this machine's speed drifts by tens of percent within a minute, and both services
see the same drift. Each service's capacity is its number of URLs, so a service that nothing
holds back polls every URL every slot, and the ordinary pages' polls per slot say directly how
much the hostile URLs held the others back.

The hostile classes (one server on its own loopback hosts, 127.0.0.20-24):

* bodies: a gzip bomb, an endless chunked body, an oversized body, a corrupt gzip stream;
* text: declared charsets that are Python codecs but not text encodings (rot13, hex,
  base64), a CJK charset on 250 KB of escape-heavy bytes, 100,000 nested elements;
* time: headers trickled a byte a second, a body trickled, a redirect loop, a host whose
  robots.txt never answers, a host with a long Crawl-delay, several URLs on that polite
  host, a host that accepts connections and never answers;
* operator input: an ignore pattern with catastrophic backtracking in a backtracking engine
  (refused at ``add`` or run in linear time: both are acceptable, the soak says which).

The discovery classes (``benchmarks/_hostile_discovery.py``, hosts 127.0.0.25-28), added to the
soak service with the real ``crawler sources add``: a source whose ``--include`` backtracks
catastrophically on its page's links, a valid 49 MB sitemap served as a ~110 KB ``.xml.gz``, a
4 MB RSS feed of 100,000 items, and a session-id trap (fresh ids in every link on every fetch)
added with ``--watch``. Both services read at most 10 links of a source page as its start
pages (``discovery_seed_links``), and the soak's capacity has room for its sources' start
pages and discovery's share, so that a service that nothing holds back still polls every
ordinary page every slot.

Printed: the ordinary pages' polls per slot in both services (ratio; the target is >= 0.9),
the ordinary pages' polls in the window, that is per minute (ratio; target >= 0.9: a service
whose slots a hostile host stretches runs fewer of them),
every process's RSS at the start of the measured window and its peak (target: within 150 MB
of the start), the main process's peak over the whole run, warm-up included (target: the
soak's within 100 MB of the control's), restarts (service exits, crawl worker
replacements; target 0), how the hostile polls ended (outcome and error kind counts), and
for the discovery classes each source's polls and pages found, the watched URLs and
``discovered`` rows at the end (the trap's share of each: a trap held by its caps stays
small).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import math
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil  # type: ignore[import-untyped]
from aiohttp import web

from benchmarks._hostile_discovery import TRAP, DiscoveryHostileSite, DiscoverySource
from crawler.testsite import ChangingSite, zipf_rates

ORDINARY_HOSTS = 10
ORDINARY_PAGES = 100
HOSTILE_HOSTS = ("127.0.0.20", "127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.24")
GENERAL, SLOW_ROBOTS, CRAWL_DELAY, SILENT, TRICKLE = HOSTILE_HOSTS
RSS_LIMIT_MB = 150.0
#: the soak's main process's peak over the whole run (warm-up included) above the control's
WHOLE_RUN_RSS_LIMIT_MB = 100.0
POLLS_RATIO_TARGET = 0.9
DISCOVERY_SHARE = 0.1  # the setting's default, set explicitly: the soak's capacity uses it
SEED_LINKS = 10  # links of a source page that become its start pages (watched)


# ----- the hostile server ----------------------------------------------------------------


def _gzip_bomb(decompressed_mb: int) -> bytes:
    """A gzip stream of ``decompressed_mb`` MB of zeros (about 1,000 times smaller)."""
    return gzip.compress(b"\0" * (decompressed_mb * 1024 * 1024), compresslevel=9)


class HostileSite:
    """One aiohttp application on the hostile hosts; what it does depends on the path and
    on which host was asked (robots.txt differs per host)."""

    def __init__(self) -> None:
        self.bomb = _gzip_bomb(200)
        self.corrupt = bytearray(gzip.compress(b"<html><body>" + b"x" * 200_000))
        self.corrupt[len(self.corrupt) // 2 : len(self.corrupt) // 2 + 64] = b"\xff" * 64
        deep = b"<div>" * 100_000
        self.deep = b"<html><body>" + deep + b"deep</body></html>"
        self.escapes = b"<html><body>" + b"\x1b$B" * 80_000 + b"</body></html>"
        self.backtrack = b"<html><body>" + b"a" * 50_000 + b"!</body></html>"
        self.port = 0
        self._runner: web.AppRunner | None = None
        self.requests: Counter[str] = Counter()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/robots.txt", self._robots)
        app.router.add_get("/{name}", self._page)
        app.router.add_get("/{name}/{k}", self._page)
        return app

    async def _robots(self, request: web.Request) -> web.StreamResponse:
        host = request.host.partition(":")[0]
        if host == SLOW_ROBOTS:
            await asyncio.sleep(3600)
        if host == CRAWL_DELAY:
            return web.Response(text="User-agent: *\nCrawl-delay: 30\n")
        return web.Response(text="User-agent: *\nAllow: /\n")

    async def _page(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        self.requests[name] += 1
        html = "text/html; charset=utf-8"
        if name == "gzip-bomb":
            return web.Response(
                body=self.bomb, headers={"Content-Encoding": "gzip", "Content-Type": html}
            )
        if name == "corrupt-gzip":
            return web.Response(
                body=bytes(self.corrupt),
                headers={"Content-Encoding": "gzip", "Content-Type": html},
            )
        if name in ("endless", "oversized", "trickle-body"):
            response = web.StreamResponse(headers={"Content-Type": html})
            if name == "oversized":
                response.content_length = 500 * 1024 * 1024
            await response.prepare(request)
            chunk = b"<p>" + b"y" * 65_533
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                for _ in range(100_000):
                    if name == "trickle-body":
                        await response.write(b"z")
                        await asyncio.sleep(1.0)
                    else:
                        await response.write(chunk)
            return response
        if name.startswith("charset-"):
            label = name.removeprefix("charset-")
            body = self.escapes if label == "iso-2022-jp" else b"<html><body>plain</body></html>"
            return web.Response(body=body, headers={"Content-Type": f"text/html; charset={label}"})
        if name == "deep":
            return web.Response(body=self.deep, headers={"Content-Type": html})
        if name == "backtrack":
            return web.Response(body=self.backtrack, headers={"Content-Type": html})
        if name == "redirect-loop":
            raise web.HTTPFound(f"/redirect-loop/{request.query_string or '1'}")
        # the polite host's ordinary-looking pages (and anything else)
        return web.Response(
            text=f"<html><body>page {request.path}</body></html>", content_type="text/html"
        )

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        first = web.TCPSite(self._runner, GENERAL, 0)
        await first.start()
        server = first._server
        assert server is not None
        self.port = int(getattr(server, "sockets", [])[0].getsockname()[1])
        for host in (SLOW_ROBOTS, CRAWL_DELAY):
            await web.TCPSite(self._runner, host, self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class RawServer:
    """A TCP server on one host: ``silent`` accepts and never answers; ``trickle`` sends a
    status line and then one header byte a second."""

    def __init__(self, host: str, mode: str) -> None:
        self.host, self.mode, self.port = host, mode, 0
        self._server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.mode == "trickle":
                writer.write(b"HTTP/1.1 200 OK\r\n")
                for _ in range(3600):
                    writer.write(b"X")
                    await writer.drain()
                    await asyncio.sleep(1.0)
            else:
                await reader.read(65536)
                await asyncio.sleep(3600)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def start(self, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)


@dataclass(frozen=True)
class HostileUrl:
    url: str
    kind: str
    ignore: str | None = None


def hostile_urls(port: int, raw_port: int) -> list[HostileUrl]:
    """The 20 hostile URLs: every class at least once."""
    g = f"http://{GENERAL}:{port}"
    urls = [
        HostileUrl(f"{g}/gzip-bomb", "body: gzip bomb"),
        HostileUrl(f"{g}/endless", "body: endless chunked"),
        HostileUrl(f"{g}/oversized", "body: oversized"),
        HostileUrl(f"{g}/corrupt-gzip", "body: corrupt gzip"),
        HostileUrl(f"{g}/charset-rot13", "text: non-text codec"),
        HostileUrl(f"{g}/charset-hex", "text: non-text codec"),
        HostileUrl(f"{g}/charset-base64", "text: non-text codec"),
        HostileUrl(f"{g}/charset-iso-2022-jp", "text: slow decoder"),
        HostileUrl(f"{g}/deep", "text: nesting"),
        HostileUrl(f"{g}/trickle-body", "time: trickled body"),
        HostileUrl(f"{g}/redirect-loop", "time: redirect loop"),
        HostileUrl(f"{g}/backtrack", "input: catastrophic pattern", ignore="(a+)+$"),
        HostileUrl(f"http://{SLOW_ROBOTS}:{port}/page/1", "time: robots.txt never answers"),
        HostileUrl(f"http://{SLOW_ROBOTS}:{port}/page/2", "time: robots.txt never answers"),
        HostileUrl(f"http://{CRAWL_DELAY}:{port}/page/1", "time: Crawl-delay 30"),
        HostileUrl(f"http://{CRAWL_DELAY}:{port}/page/2", "time: Crawl-delay 30"),
        HostileUrl(f"http://{CRAWL_DELAY}:{port}/page/3", "time: Crawl-delay 30"),
        HostileUrl(f"http://{CRAWL_DELAY}:{port}/page/4", "time: Crawl-delay 30"),
        HostileUrl(f"http://{SILENT}:{raw_port}/", "time: never answers"),
        HostileUrl(f"http://{TRICKLE}:{raw_port}/", "time: trickled headers"),
    ]
    return urls


# ----- the services ----------------------------------------------------------------------


def service_env(
    database: Path, capacity: int, slot_s: float, deadline_s: float | None
) -> dict[str, str]:
    env = dict(os.environ)
    if deadline_s is not None:
        env["CRAWLER_SLOT_DEADLINE_S"] = str(deadline_s)
    env.update(
        {
            "CRAWLER_DATABASE_URL": f"sqlite:///{database}",
            "CRAWLER_CAPACITY": str(capacity),
            "CRAWLER_SLOT_SECONDS": str(slot_s),
            "CRAWLER_METRICS_PORT": "0",
            "CRAWLER_ALLOW_PRIVATE_ADDRESSES": "true",
            "CRAWLER_PER_HOST_MIN_DELAY_S": "0.1",
            "CRAWLER_FETCH_TIMEOUT_S": "20",
            "CRAWLER_LOG_LEVEL": "WARNING",
            "CRAWLER_SEED": "7",
            "CRAWLER_DISCOVERY_SHARE": str(DISCOVERY_SHARE),
            "CRAWLER_DISCOVERY_SEED_LINKS": str(SEED_LINKS),
            "CRAWLER_DEFAULT_MIN_INTERVAL_S": "0",  # as measured: no polite bound
        }
    )
    return env


def crawler(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawler", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@dataclass
class Service:
    name: str
    env: dict[str, str]
    database: Path
    ordinary: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    exits: list[int] = field(default_factory=list)
    start_rss: dict[int, float] = field(default_factory=dict)
    peak_rss: dict[int, float] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    children_seen: set[int] = field(default_factory=set)
    #: the main process's RSS at its first sample and its peak over the whole run (warm-up
    #: included: a source's first read, a large listing, happens there)
    whole_run_rss: list[float] = field(default_factory=list)

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "crawler", "run"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def check_alive(self) -> None:
        """A service that exited is counted and started again."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            self.exits.append(code)
            self.start()

    def processes(self) -> list[psutil.Process]:
        assert self.proc is not None
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def sample_rss(self, baseline: bool) -> None:
        for p in self.processes():
            try:
                rss = p.memory_info().rss / 2**20
                name = "service" if p.ppid() == os.getpid() else f"child of {p.ppid()}"
            except psutil.Error:
                continue
            self.children_seen.add(p.pid)
            self.names.setdefault(p.pid, name)
            if baseline or p.pid not in self.start_rss:
                self.start_rss.setdefault(p.pid, rss)
            self.peak_rss[p.pid] = max(self.peak_rss.get(p.pid, 0.0), rss)

    def sample_main_rss(self) -> None:
        assert self.proc is not None
        try:
            rss = psutil.Process(self.proc.pid).memory_info().rss / 2**20
        except psutil.Error:
            return
        if not self.whole_run_rss:
            self.whole_run_rss = [rss, rss]
        self.whole_run_rss[1] = max(self.whole_run_rss[1], rss)

    def stop(self) -> float:
        assert self.proc is not None
        t0 = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return time.monotonic() - t0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def soak(
    minutes: float,
    slot_s: float,
    warmup_s: float,
    deadline_s: float | None,
    with_discovery: bool = True,
) -> int:
    site = ChangingSite(
        zipf_rates(ORDINARY_PAGES, 0.9, 1.0), tick_seconds=slot_s, page_size=20_000, seed=3
    )
    await site.start()
    port = site.port
    assert site._runner is not None
    for h in range(2, ORDINARY_HOSTS + 1):
        await web.TCPSite(site._runner, f"127.0.0.{h}", port).start()
    ordinary = [
        f"http://127.0.0.{(k - 1) % ORDINARY_HOSTS + 1}:{port}/page/{k}"
        for k in range(1, ORDINARY_PAGES + 1)
    ]
    hostile = HostileSite()
    await hostile.start()
    raw_port = _free_port()
    raws = [RawServer(SILENT, "silent"), RawServer(TRICKLE, "trickle")]
    for raw in raws:
        await raw.start(raw_port)
    bad = hostile_urls(hostile.port, raw_port)
    discovery = DiscoveryHostileSite()
    await discovery.start()
    sources = discovery.sources() if with_discovery else []
    print(
        f"discovery classes: sitemap {len(discovery.sitemap) / 1024:.0f} KB gzip,"
        f" feed {len(discovery.feed) / 2**20:.1f} MB",
        flush=True,
    )

    work = Path(tempfile.mkdtemp(prefix="hostile-soak-"))
    services: list[Service] = []
    refused: list[tuple[HostileUrl, str]] = []
    refused_sources: list[tuple[DiscoverySource, str]] = []
    for name, extra in (("control", []), ("soak", bad)):
        db = work / f"{name}.db"
        capacity = ORDINARY_PAGES + len(extra)
        if extra and sources:  # room for the sources' start pages and discovery's share
            starts = len(sources) * (1 + SEED_LINKS)
            capacity = math.ceil((capacity + starts) / (1 - DISCOVERY_SHARE))
        env = service_env(db, capacity, slot_s, deadline_s)
        for step in (("db", "upgrade"),):
            done = crawler(env, *step)
            if done.returncode:
                print(f"crawler {' '.join(step)} failed: {done.stderr}", file=sys.stderr)
                return 2
        done = crawler(env, "add", "--file", "-", stdin="\n".join(ordinary) + "\n")
        if done.returncode:
            print(f"adding the ordinary pages failed: {done.stderr}", file=sys.stderr)
            return 2
        added = 0
        for bad_url in extra:
            args = ["add", bad_url.url]
            if bad_url.ignore:
                args += ["--ignore", bad_url.ignore]
            done = crawler(env, *args)
            if done.returncode:
                why = (done.stderr or done.stdout or "?").strip().splitlines()[-1]
                refused.append((bad_url, why))
            else:
                added += 1
        for source in sources if extra else []:
            done = crawler(env, "sources", "add", source.url, *source.options)
            if done.returncode:
                why = (done.stderr or done.stdout or "?").strip().splitlines()[-1]
                refused_sources.append((source, why))
        print(f"{name}: capacity {capacity} polls per slot", flush=True)
        svc = Service(name, env, db, ORDINARY_PAGES, work / f"{name}.log")
        services.append(svc)
    for svc in services:
        svc.start()
    print(f"work dir {work}; slots of {slot_s:g} s; warming up {warmup_s:.0f} s", flush=True)
    warm_end = time.monotonic() + warmup_s
    while time.monotonic() < warm_end:
        await asyncio.sleep(min(1.0, max(0.0, warm_end - time.monotonic())))
        for svc in services:
            svc.sample_main_rss()
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    for svc in services:
        svc.check_alive()
        svc.sample_rss(baseline=True)
    t_end = time.monotonic() + minutes * 60
    ordinary_set = set(ordinary)
    next_report = time.monotonic() + 60
    while time.monotonic() < t_end:
        await asyncio.sleep(5)
        for svc in services:
            svc.check_alive()
            svc.sample_rss(baseline=False)
            svc.sample_main_rss()
        if time.monotonic() >= next_report:
            next_report += 60
            line = []
            for svc in services:
                slots, polls, _ = await asyncio.to_thread(
                    window_counts, svc.database, since, ordinary_set
                )
                line.append(
                    f"{svc.name}: {slots} slots, {polls / max(slots, 1):.1f} ordinary polls/slot"
                )
            left = max(0.0, t_end - time.monotonic())
            print(f"  {'; '.join(line)}; {left / 60:.1f} min left", flush=True)
    stop_s = {svc.name: svc.stop() for svc in services}
    for raw in raws:
        await raw.stop()
    await hostile.stop()
    await discovery.stop()
    await site.stop()

    results: dict[str, tuple[int, int, Counter[str]]] = {}
    for svc in services:
        results[svc.name] = window_counts(svc.database, since, ordinary_set)
    print()
    print(f"window: {minutes:g} min after {warmup_s:.0f} s of warm-up; both services at once")
    per_slot = {}
    for name, (slots, polls, _) in results.items():
        per_slot[name] = polls / max(slots, 1)
        print(
            f"  {name:8s} {slots:5d} slots  {polls:7d} ordinary polls"
            f"  {per_slot[name]:6.1f} per slot"
        )
    ratio = per_slot["soak"] / per_slot["control"] if per_slot["control"] else float("nan")
    print(
        f"  ordinary polls per slot, soak / control: {ratio:.3f} (target >= {POLLS_RATIO_TARGET})"
    )
    control_slots, soak_slots = results["control"][0], results["soak"][0]
    per_minute = results["soak"][1] / max(results["control"][1], 1)
    print(
        f"  slots run, soak / control: {soak_slots / max(control_slots, 1):.3f}; ordinary polls"
        f" in the window (per minute), soak / control: {per_minute:.3f} (target >="
        f" {POLLS_RATIO_TARGET}: a slot the hostile hosts stretched would run fewer a minute)"
    )
    ok = ratio >= POLLS_RATIO_TARGET and per_minute >= POLLS_RATIO_TARGET
    print("\nRSS (MB) at the start of the window -> peak:")
    for svc in services:
        for pid, start in sorted(svc.start_rss.items()):
            grow = svc.peak_rss[pid] - start
            flag = "" if grow <= RSS_LIMIT_MB else "  OVER"
            ok &= grow <= RSS_LIMIT_MB
            print(
                f"  {svc.name:8s} pid {pid:7d} {svc.names[pid]:20s} {start:7.1f} ->"
                f" {svc.peak_rss[pid]:7.1f} (+{grow:.1f}){flag}"
            )
    print("main process RSS (MB) over the whole run, warm-up included (first sample -> peak):")
    for svc in services:
        if svc.whole_run_rss:
            first, peak = svc.whole_run_rss
            print(f"  {svc.name:8s} {first:7.1f} -> {peak:7.1f} (+{peak - first:.1f})")
    control_run, soak_run = (svc.whole_run_rss for svc in services)
    if control_run and soak_run:
        above = soak_run[1] - control_run[1]
        ok &= above <= WHOLE_RUN_RSS_LIMIT_MB
        print(
            f"  soak's peak above the control's: {above:+.1f} MB (target <= "
            f"{WHOLE_RUN_RSS_LIMIT_MB:g}: a source's first read falls in the warm-up)"
        )
    print("\nrestarts:")
    for svc in services:
        replaced = len(svc.children_seen) - len(svc.start_rss)
        print(
            f"  {svc.name:8s} service exits {len(svc.exits)} {svc.exits or ''};"
            f" processes first seen after the start: {replaced}"
        )
        ok &= not svc.exits
    print("\nSIGTERM to exit: " + ", ".join(f"{k} {v:.1f} s" for k, v in stop_s.items()))
    print("\nhostile URLs refused at add:")
    for bad_url, why in refused:
        print(f"  {bad_url.kind:32s} {bad_url.url}: {why}")
    print("hostile polls in the window (outcome:error kind):")
    for key, count in results["soak"][2].most_common():
        print(f"  {count:6d} {key}")
    print("\nhostile server requests:", dict(hostile.requests))
    if sources:
        print_discovery(services[1].database, sources, refused_sources, discovery)
    print("\nRESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def print_discovery(
    database: Path,
    sources: list[DiscoverySource],
    refused: list[tuple[DiscoverySource, str]],
    site: DiscoveryHostileSite,
) -> None:
    """The discovery classes at the end of the soak: each source's polls and finds, and the
    watch list and ``discovered`` table with the session-id trap's share of each."""
    with contextlib.closing(
        sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
    ) as db:
        rows = {u: (p, f) for u, p, f in db.execute("SELECT url, polls, found FROM sources")}
        watched = db.execute("SELECT count(*) FROM urls WHERE removed_at IS NULL").fetchone()[0]
        trap_watched = db.execute(
            "SELECT count(*) FROM urls WHERE removed_at IS NULL AND url LIKE ?",
            (f"http://{TRAP}:%",),
        ).fetchone()[0]
        found = db.execute("SELECT count(*) FROM discovered").fetchone()[0]
        trap_found = db.execute(
            "SELECT count(*) FROM discovered WHERE url LIKE ?", (f"http://{TRAP}:%",)
        ).fetchone()[0]
    print("\ndiscovery sources (soak):")
    why = {s.url: reason for s, reason in refused}
    for source in sources:
        if source.url in why:
            print(f"  {source.kind:32s} refused at sources add: {why[source.url]}")
            continue
        polls, finds = rows.get(source.url, (0, 0))
        print(f"  {source.kind:32s} {polls:6d} polls {finds:7d} found  {source.url}")
    print("discovery server requests:", dict(site.requests))
    print(
        f"session-id trap (--watch), at the end: watched URLs {watched} ({trap_watched} on the"
        f" trap's host); discovered rows {found} ({trap_found} on the trap's host)"
    )


def window_counts(database: Path, since: str, ordinary: set[str]) -> tuple[int, int, Counter[str]]:
    """(slots, ordinary polls, hostile outcomes) committed after ``since`` (UTC, ISO)."""
    with contextlib.closing(
        sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
    ) as db:
        slots = db.execute("SELECT count(*) FROM slots WHERE started_at > ?", (since,)).fetchone()[
            0
        ]
        rows = db.execute(
            "SELECT u.url, p.outcome, p.error_kind FROM poll_log p JOIN urls u ON u.id = p.url_id"
            " WHERE p.slot IN (SELECT slot FROM slots WHERE started_at > ?)",
            (since,),
        ).fetchall()
    polls = 0
    hostile: Counter[str] = Counter()
    for url, outcome, kind in rows:
        if url in ordinary:
            polls += outcome not in ("error", "deferred")
        else:
            hostile[f"{outcome}:{kind}" if kind else outcome] += 1
    return int(slots), polls, hostile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--slot-seconds", type=float, default=5.0)
    parser.add_argument("--warmup-seconds", type=float, default=30.0)
    parser.add_argument(
        "--slot-deadline",
        type=float,
        default=None,
        help="the services' slot_deadline_s (default: the setting's default, the slot's length;"
        " polls in flight then go on and land in a later slot)",
    )
    parser.add_argument(
        "--no-discovery",
        action="store_true",
        help="without the discovery classes (to tell their effect from the other classes')",
    )
    args = parser.parse_args()
    sys.exit(
        asyncio.run(
            soak(
                args.minutes,
                args.slot_seconds,
                args.warmup_seconds,
                args.slot_deadline,
                with_discovery=not args.no_discovery,
            )
        )
    )


if __name__ == "__main__":
    main()
