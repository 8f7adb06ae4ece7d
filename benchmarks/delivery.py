"""Delivery throughput: events from the outbox to a signature-verifying receiver while the
crawl runs, and what delivering costs the crawl's polls per second.

    .venv/bin/python benchmarks/delivery.py                  # SQLite, 10,000 events
    .venv/bin/python benchmarks/delivery.py --db postgresql --events 10000

The site (crawler.testsite.ChangingSite in a child process, on loopback) has ``--urls``
pages that each change every second (``--change-rate`` 1.0 per tick), so a crawl with
slots back to back (``slot_seconds`` 0.01, ``--per-slot`` polls per slot) finds a change at
almost every poll: the events are all produced live by the crawl, none seeded. The
receiver (aiohttp on 127.0.0.1, in a child process of its own so that its work does not
share this process's interpreter lock) verifies every signature with the reference
``standardwebhooks`` library and notes when each event arrived.

A VM's speed drifts within minutes, so delivery on and off are compared in one run, in
interleaved phases of ``--phase-polls`` polls and at least ``--phase-min-seconds`` each:
off, on, off, on, ... (off: no deliverer, the events wait in the outbox; on: a
``DeliveryProcess``, the same one ``crawler run`` starts, draining what waited and what
the crawl writes; ``--thread``: the ``Deliverer`` as a thread of this process, as it ran
before). Each on phase's polls/s is compared with the mean of the off phases beside it.
After the phases the crawl stops and the deliverer drains the rest (its rate alone: the
deliverer's ceiling). The receiver runs in a session of its own (another service: Linux
shares the CPU between sessions first, so in the crawl's its CPU was charged to the
crawl's share); on PostgreSQL the server's CPU for the crawl's and the deliverer's
connections is measured apart.

``--bad-receiver`` measures instead whether a receiver that refuses connections, answers
500, hangs and answers 429 with Retry-After (in turn, ``--bad-cycle-s`` each) slows the
crawl: one deliverer throughout, the receiver healthy and bad in interleaved phases of
``--phase-seconds``, the crawl's slots per minute in each (paced slots: ``--slot-seconds``):

    .venv/bin/python benchmarks/delivery.py --bad-receiver --db both --slot-seconds 0.25 \
        --per-slot 50 --urls 500 --phases 7 --phase-seconds 20 --delivery-timeout 5 \
        --retry-schedule '[0, 1, 2, 2, 2, 2, 2, 2, 2, 2]'

(with the specification's schedule the events that failed twice in a bad phase wait 5
minutes, and the healthy phases after it would have next to nothing to deliver).

Delivery lag is event ``created_at`` (the slot's commit, the body's ``timestamp``) to
arrival at the receiver, for the events created during an on phase (those of off phases
wait for the next on phase by design and are reported apart).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from aiohttp import web
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.pool import NullPool
from standardwebhooks import Webhook

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_databases import database
from service_throughput import bench_settings, page_url, site_process

from crawler.delivery import Deliverer, DeliveryProcess, generate_secret
from crawler.service import CrawlService, tune_gc
from crawler.service._loop import SlotSummary
from crawler.settings import Settings
from crawler.store import DELIVERED, DestinationSpec, NewUrl, Store
from crawler.store.models import deliveries, events

# ----- the receiver (a child process) ------------------------------------------------------


#: the bad receiver's cycle (``--bad-receiver``): each for ``--bad-cycle-s`` in turn
BAD_MODES = ("refuse", "500", "hang", "429")


def _receive(secret: str, conn: Connection, count: Any, cycle_s: float) -> None:
    """Serve POST /hook; verify; note (id, created_at, arrival, verified); on "stop" send
    the notes back. On "bad", cycle through ``BAD_MODES`` (refuse: the port closed; 500;
    hang; 429 with Retry-After: 1) until "ok"."""
    # a receiver is another service: a session of its own, so that Linux's per-session
    # scheduling groups (autogroup) do not charge its CPU to the crawl's group
    os.setsid()
    notes: dict[str, tuple[float, float, bool]] = {}
    hook = Webhook(secret)
    mode = "ok"

    async def on_post(request: web.Request) -> web.Response:
        body = await request.text()
        if mode == "500":
            return web.Response(status=500, text="broken")
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "429":
            return web.Response(status=429, headers={"Retry-After": "1"})
        arrived = time.time()
        try:
            hook.verify(body, dict(request.headers))
            ok = True
        except Exception:
            ok = False
        created = datetime.fromisoformat(json.loads(body)["timestamp"]).timestamp()
        msg = request.headers["webhook-id"]
        if msg not in notes:  # at least once: the first arrival counts
            notes[msg] = (created, arrived, ok)
            count.value = len(notes)
        return web.Response(status=204)

    async def main() -> None:
        nonlocal mode
        app = web.Application()
        app.router.add_post("/hook", on_post)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server
        port = int(server.sockets[0].getsockname()[1])
        conn.send(port)
        listening = True
        loop = asyncio.get_running_loop()
        while True:
            command = await loop.run_in_executor(None, conn.recv)
            if command == "stop":
                break
            bad = command == "bad"
            k = 0
            while True:
                mode = BAD_MODES[k % len(BAD_MODES)] if bad else "ok"
                if mode == "refuse" and listening:
                    await site.stop()
                    listening = False
                elif mode != "refuse" and not listening:
                    site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=True)
                    await site.start()
                    listening = True
                if not bad:
                    break
                k += 1
                if await loop.run_in_executor(None, conn.poll, cycle_s):
                    break  # the next command: read at the top
        conn.send(notes)
        await runner.cleanup()

    asyncio.run(main())


class ProfiledDeliverer(Deliverer):
    """The deliverer's thread under cProfile (``--profile FILE``: the drain only)."""

    path = "delivery.prof"

    def _main(self) -> None:
        prof = cProfile.Profile()
        prof.enable()
        try:
            super()._main()
        finally:
            prof.disable()
            prof.dump_stats(self.path)


def make_deliverer(settings: Settings, args: argparse.Namespace) -> Deliverer | DeliveryProcess:
    if not args.thread:
        return DeliveryProcess(settings, exclusive_lock=False)
    if args.profile:
        deliverer = ProfiledDeliverer(settings, exclusive_lock=False)
        deliverer.path = args.profile
        return deliverer
    return Deliverer(settings, exclusive_lock=False)


class PhaseCpu:
    """CPU seconds of each process of the run during a phase, and the machine's busy time:
    whether the crawl lost polls/s because it did more work per poll (contention: lock
    waits show as less CPU with idle cores) or because it got less of a shared core."""

    NAMES = ("crawl", "deliverer", "receiver", "site", "machine", "pg-crawl", "pg-deliverer")

    def __init__(self, pids: dict[str, int | None], database_url: str | None = None) -> None:
        self.procs = {k: psutil.Process(v) for k, v in pids.items() if v is not None}
        self.me = psutil.Process()
        self._start: dict[str, float] = {}
        self.used: dict[str, float] = {}
        self.pg = (
            PgBackends(database_url) if database_url and "postgresql" in database_url else None
        )
        self._pg_start: dict[int, float] = {}

    def _now(self) -> dict[str, float]:
        def cpu(p: psutil.Process) -> float:
            try:
                t = p.cpu_times()
            except psutil.Error:
                return 0.0
            return float(t.user + t.system)

        others = {p.pid for p in self.procs.values()}
        kids = [c for c in self.me.children(recursive=True) if c.pid not in others]
        out = {k: cpu(p) for k, p in self.procs.items()}
        out["crawl"] = cpu(self.me) + sum(cpu(c) for c in kids)  # with the detector's pool
        t = psutil.cpu_times()
        out["machine"] = float(sum(t)) - t.idle - getattr(t, "iowait", 0.0)
        return out

    def start(self) -> None:
        self._start = self._now()
        if self.pg is not None:
            self._pg_start = self.pg.cpu()

    def stop(self) -> None:
        end = self._now()
        self.used = {k: end[k] - self._start.get(k, end[k]) for k in end}
        if self.pg is not None:
            pg_end = self.pg.cpu()
            deliverer = self.procs.get("deliverer")
            owners = self.pg.owners(self.me, deliverer)
            for pid, cpu in pg_end.items():
                owner = owners.get(pid)
                if owner is not None:
                    key = f"pg-{owner}"
                    self.used[key] = self.used.get(key, 0.0) + cpu - self._pg_start.get(pid, 0.0)
            self.pg.close()


class PgBackends:
    """The PostgreSQL server's CPU spent for the crawl's connections and for the
    deliverer's (the server runs on this machine): backends found by their client port."""

    def __init__(self, database_url: str) -> None:
        self.engine = create_engine(database_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)

    @staticmethod
    def cpu() -> dict[int, float]:
        out: dict[int, float] = {}
        for p in psutil.process_iter(["name", "cpu_times"]):
            if p.info["name"] == "postgres" and p.info["cpu_times"] is not None:
                t = p.info["cpu_times"]
                out[p.pid] = float(t.user + t.system)
        return out

    def owners(self, crawl: psutil.Process, deliverer: psutil.Process | None) -> dict[int, str]:
        def ports(p: psutil.Process | None) -> set[int]:
            if p is None:
                return set()
            try:
                return {c.laddr.port for c in p.net_connections(kind="tcp") if c.laddr}
            except psutil.Error:
                return set()

        mine, theirs = ports(crawl), ports(deliverer)
        with self.engine.connect() as conn:
            me = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
            rows = conn.execute(
                text("SELECT pid, client_port FROM pg_stat_activity WHERE client_port > 0")
            ).all()
        out: dict[int, str] = {}
        for pid, port in rows:
            if pid == me:
                continue
            if port in theirs:
                out[int(pid)] = "deliverer"
            elif port in mine:
                out[int(pid)] = "crawl"
        return out

    def close(self) -> None:
        self.engine.dispose()


class CommitTimer:
    """Wall and CPU time of the crawl's slot commits (``Store.commit_slot``, in its
    thread): a commit that waits for the database's write lock shows as wall time
    without CPU time."""

    def __init__(self, store: Store) -> None:
        self.count = 0
        self.wall = 0.0
        self.cpu = 0.0
        inner = store.commit_slot

        def timed(*args: Any, **kwargs: Any) -> int:
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - w0
                self.cpu += time.thread_time() - c0
                self.count += 1

        store.commit_slot = timed  # type: ignore[method-assign]

    def totals(self) -> tuple[int, float, float]:
        return self.count, self.wall, self.cpu


@dataclass
class Phase:
    delivering: bool
    polls: int = 0
    seconds: float = 0.0
    started: float = 0.0  # wall clock (time.time), for the events' created_at
    ended: float = 0.0
    delivered: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    #: the crawl's slot commits in the phase: (count, wall seconds, CPU seconds)
    commits: tuple[int, float, float] = (0, 0.0, 0.0)

    def commit_line(self) -> str:
        n, wall, cpu = self.commits
        if not n:
            return ""
        return (
            f"; slot commits {n}: {wall / n * 1e3:,.1f} ms wall, {cpu / n * 1e3:,.1f} ms CPU "
            f"each, {wall / max(self.seconds, 1e-9):.0%} of the phase"
        )

    def cpu_line(self) -> str:
        c, s = self.cpu, max(self.seconds, 1e-9)
        per_poll = (
            f"{c.get('crawl', 0) / self.polls * 1e6:,.0f} us CPU/poll, " if self.polls else ""
        )
        return (
            f"crawl {per_poll}{c.get('crawl', 0) / s:.0%} of a core; "
            f"deliverer {c.get('deliverer', 0) / s:.0%}"
            + (
                f" ({c['deliverer'] / self.delivered * 1e3:.2f} ms CPU/event)"
                if self.delivered and "deliverer" in c
                else ""
            )
            + (
                f"; PostgreSQL for the crawl {c['pg-crawl'] / s:.0%}, for the deliverer "
                f"{c.get('pg-deliverer', 0) / s:.0%}"
                if "pg-crawl" in c
                else ""
            )
            + f"; receiver {c.get('receiver', 0) / s:.0%}; site {c.get('site', 0) / s:.0%}; "
            f"machine busy {c.get('machine', 0) / s / (os.cpu_count() or 1):.0%} of "
            f"{os.cpu_count()} cores{self.commit_line()}"
        )

    @property
    def rate(self) -> float:
        return self.polls / self.seconds if self.seconds else 0.0


@dataclass
class Run:
    phases: list[Phase] = field(default_factory=list)
    written: int = 0
    drain_events: int = 0
    drain_seconds: float = 0.0
    drain: Phase | None = None


def events_written(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(events)).scalar_one())


async def crawl_phase(
    service: CrawlService, phase: Phase, polls: int, min_seconds: float = 0.0
) -> None:
    """Crawl until ``polls`` polls are made and ``min_seconds`` have passed (a phase of a
    second or two is a handful of slots: too few to compare)."""
    done = 0
    stop = asyncio.Event()
    until = time.perf_counter() + min_seconds

    def on_slot(s: SlotSummary) -> None:
        nonlocal done
        done += s.polls
        if done >= polls and time.perf_counter() >= until:
            stop.set()

    phase.started, t0 = time.time(), time.perf_counter()
    await service.run(stop, on_slot=on_slot)  # returns once every slot is committed
    phase.seconds, phase.ended, phase.polls = time.perf_counter() - t0, time.time(), done


async def bench(
    settings: Settings, urls: list[str], receiver_url: str, secret: str, count: Any,
    args: argparse.Namespace, pids: dict[str, int | None],
) -> Run:  # fmt: skip
    store = Store.from_settings(settings)
    store.upgrade()
    store.add_urls([NewUrl(u) for u in urls])
    store.outbox.add_destination(DestinationSpec(receiver_url, secret))
    run = Run()
    timer = CommitTimer(store)
    async with CrawlService(settings, store=store) as service:
        baselines = 0
        warmed = asyncio.Event()

        def warm(s: SlotSummary) -> None:
            nonlocal baselines
            baselines += s.baselines
            if baselines >= len(urls):
                warmed.set()

        tune_gc()
        await service.run(warmed, on_slot=warm)
        print(f"warmed up: {len(urls):,} baselines; {events_written(store):,} events so far")
        for k in range(args.phases):
            phase = Phase(delivering=k % 2 == 1)
            before = count.value
            deliverer = make_deliverer(settings, args) if phase.delivering else None
            if deliverer is not None:
                deliverer.start()
                if isinstance(deliverer, DeliveryProcess):  # a service starts it once
                    await asyncio.to_thread(deliverer.wait_ready)
            meter = PhaseCpu(
                {
                    **pids,
                    "deliverer": deliverer.pid if isinstance(deliverer, DeliveryProcess) else None,
                },
                settings.database_url,
            )
            meter.start()
            c0 = timer.totals()
            await crawl_phase(service, phase, args.phase_polls, args.phase_min_seconds)
            meter.stop()
            phase.commits = tuple(b - a for a, b in zip(c0, timer.totals(), strict=True))  # type: ignore[assignment]
            phase.cpu = meter.used
            if deliverer is not None:
                await asyncio.to_thread(deliverer.stop)
            phase.delivered = count.value - before
            run.phases.append(phase)
            run.written = events_written(store)
            print(
                f"phase {k + 1}/{args.phases} delivery {'on ' if phase.delivering else 'off'}: "
                f"{phase.rate:,.0f} polls/s ({phase.polls:,} polls in {phase.seconds:.1f} s); "
                f"events written {run.written:,}, delivered {count.value:,} "
                f"(+{phase.delivered:,} in this phase)\n    {phase.cpu_line()}",
                flush=True,
            )
    # the crawl has stopped: drain the rest (the deliverer's rate on its own)
    deliverer = make_deliverer(settings, args)
    deliverer.start()
    if isinstance(deliverer, DeliveryProcess):
        await asyncio.to_thread(deliverer.wait_ready)
    meter = PhaseCpu(
        {**pids, "deliverer": deliverer.pid if isinstance(deliverer, DeliveryProcess) else None},
        settings.database_url,
    )
    meter.start()
    before, t0 = count.value, time.perf_counter()
    deadline = t0 + args.drain_timeout
    last_print = t0
    while count.value < run.written and time.perf_counter() < deadline:
        await asyncio.sleep(0.2)
        if time.perf_counter() - last_print > 5:
            last_print = time.perf_counter()
            print(f"draining: delivered {count.value:,} of {run.written:,}", flush=True)
    run.drain_seconds = time.perf_counter() - t0
    run.drain_events = count.value - before
    meter.stop()
    run.drain = Phase(True, 0, run.drain_seconds, delivered=run.drain_events, cpu=meter.used)
    await asyncio.to_thread(deliverer.stop)
    store.close()
    return run


async def bad_receiver_bench(
    settings: Settings, urls: list[str], receiver_url: str, secret: str, control: Connection,
    args: argparse.Namespace, pids: dict[str, int | None],
) -> list[tuple[str, int, float]]:  # fmt: skip
    """The crawl's slots per minute with the receiver healthy and bad, in interleaved
    phases of ``--phase-seconds``, one deliverer (a ``DeliveryProcess``) throughout, as a
    service runs it: (receiver mode, slots, seconds) of each phase."""
    store = Store.from_settings(settings)
    store.upgrade()
    store.add_urls([NewUrl(u) for u in urls])
    store.outbox.add_destination(DestinationSpec(receiver_url, secret))
    out: list[tuple[str, int, float]] = []
    async with CrawlService(settings, store=store) as service:
        deliverer = DeliveryProcess(settings, exclusive_lock=False)
        deliverer.start()
        await asyncio.to_thread(deliverer.wait_ready)
        tune_gc()
        warm = asyncio.Event()
        asyncio.get_running_loop().call_later(args.phase_seconds, warm.set)
        await service.run(warm)  # baselines and the first changes' events
        for k in range(args.phases):
            mode = "bad" if k % 2 == 1 else "ok"
            control.send(mode)
            slots = 0

            def on_slot(_: SlotSummary) -> None:
                nonlocal slots
                slots += 1

            stop = asyncio.Event()
            meter = PhaseCpu({**pids, "deliverer": deliverer.pid}, settings.database_url)
            meter.start()
            t0 = time.perf_counter()
            asyncio.get_running_loop().call_later(args.phase_seconds, stop.set)
            await service.run(stop, on_slot=on_slot)
            seconds = time.perf_counter() - t0
            meter.stop()
            out.append((mode, slots, seconds))
            cpu = Phase(True, 0, seconds, cpu=meter.used).cpu_line()
            print(
                f"phase {k + 1}/{args.phases} receiver {mode}: {slots / seconds * 60:,.0f} "
                f"slots/min ({slots} slots in {seconds:.1f} s); delivered "
                f"{events_delivered(store):,} of {events_written(store):,} events\n    {cpu}",
                flush=True,
            )
        control.send("ok")
        await asyncio.to_thread(deliverer.stop)
    store.close()
    return out


def events_delivered(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(deliveries).where(deliveries.c.status == DELIVERED)
            ).scalar_one()
        )


def bad_report(phases: list[tuple[str, int, float]], label: str) -> list[str]:
    rates = [slots / seconds * 60 for _, slots, seconds in phases]
    changes = []
    for i, (mode, _, _) in enumerate(phases):
        if mode != "bad":
            continue
        beside = [rates[j] for j in (i - 1, i + 1) if 0 <= j < len(phases)]
        changes.append(rates[i] / (sum(beside) / len(beside)) - 1)
    by_phase = ", ".join(f"{m} {r:,.0f}" for (m, _, _), r in zip(phases, rates, strict=True))
    return [
        f"[{label}] slots/min by receiver phase: {by_phase}; bad against the healthy phases "
        f"beside it: {', '.join(f'{c:+.1%}' for c in changes)} (target: no worse than -5%)"
    ]


def report(run: Run, notes: dict[str, tuple[float, float, bool]], label: str) -> list[str]:
    on = [p for p in run.phases if p.delivering]
    costs = []
    for i, p in enumerate(run.phases):
        if p.delivering and 0 < i < len(run.phases) - 1:
            off = (run.phases[i - 1].rate + run.phases[i + 1].rate) / 2
            costs.append(1 - p.rate / off)
        elif p.delivering and i == len(run.phases) - 1:
            costs.append(1 - p.rate / run.phases[i - 1].rate)
    on_windows = [(p.started, p.ended) for p in on]
    live: list[float] = []
    waited: list[float] = []
    for created, arrived, _ in notes.values():
        lag = arrived - created
        (live if any(a <= created <= b for a, b in on_windows) else waited).append(lag)
    unverified = sum(1 for *_, ok in notes.values() if not ok)
    on_seconds = sum(p.seconds for p in on)
    on_delivered = sum(p.delivered for p in on)
    lines = [
        f"[{label}] events: {run.written:,} written by the crawl, {len(notes):,} delivered "
        f"(distinct ids), {unverified} failing signature verification",
        f"[{label}] delivery during the crawl: "
        f"{on_delivered / max(on_seconds, 1e-9):,.0f} events/s "
        f"({on_delivered:,} in {on_seconds:.1f} s of on phases); crawl stopped, draining: "
        f"{run.drain_events / max(run.drain_seconds, 1e-9):,.0f} events/s "
        f"({run.drain_events:,} in {run.drain_seconds:.1f} s)",
    ]
    if live:
        lines.append(
            f"[{label}] lag, events created while delivering ({len(live):,}): "
            f"p50 {np.percentile(live, 50) * 1000:,.0f} ms, "
            f"p99 {np.percentile(live, 99) * 1000:,.0f} ms"
        )
    if waited:
        lines.append(
            f"[{label}] lag, events created while delivery was off ({len(waited):,}, waiting "
            f"by design): p50 {np.percentile(waited, 50):,.1f} s, "
            f"p99 {np.percentile(waited, 99):,.1f} s"
        )
    if run.drain is not None:
        lines.append(f"[{label}] drain CPU: {run.drain.cpu_line()}")
    for i, p in enumerate(run.phases):
        lines.append(
            f"[{label}]   phase {i + 1} {'on ' if p.delivering else 'off'}: {p.cpu_line()}"
        )
    rates = ", ".join(f"{'on' if p.delivering else 'off'} {p.rate:,.0f}" for p in run.phases)
    lines.append(
        f"[{label}] crawl polls/s by phase: {rates}; delivery costs "
        f"{', '.join(f'{c:+.1%}' for c in costs)} (each on phase against the off phases "
        f"beside it), median {np.median(costs) if costs else np.nan:+.1%} (target at most 10%)"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="sqlite")
    parser.add_argument("--urls", type=int, default=2_000)
    parser.add_argument("--per-slot", type=int, default=500)
    parser.add_argument("--events", type=int, default=10_000, help="events to deliver at least")
    parser.add_argument("--phases", type=int, default=6, help="off/on phases, interleaved")
    parser.add_argument("--phase-polls", type=int, default=0, help="0: events/phases*1.3")
    parser.add_argument(
        "--phase-min-seconds",
        type=float,
        default=10.0,
        help="a phase lasts at least this long (and --phase-polls polls)",
    )
    parser.add_argument("--change-rate", type=float, default=1.0, help="per page per second")
    parser.add_argument("--page-bytes", type=int, default=4_000)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32, help="delivery_concurrency")
    parser.add_argument("--batch", type=int, default=200, help="delivery_batch")
    parser.add_argument(
        "--thread", action="store_true", help="deliver from a thread of this process"
    )
    parser.add_argument("--profile", help="with --thread: cProfile the deliverer to this file")
    parser.add_argument("--drain-timeout", type=float, default=300.0)
    parser.add_argument(
        "--bad-receiver",
        action="store_true",
        help="compare the crawl's slots/min with the receiver healthy and bad (refusing, "
        "500, hanging, 429 in turn), one deliverer throughout",
    )
    parser.add_argument("--bad-cycle-s", type=float, default=2.0, help="each bad mode's time")
    parser.add_argument("--phase-seconds", type=float, default=20.0, help="--bad-receiver")
    parser.add_argument("--slot-seconds", type=float, default=0.01, help="0.01: slots back to back")
    parser.add_argument("--delivery-timeout", type=float, default=15.0)
    parser.add_argument(
        "--retry-schedule",
        help="delivery_retry_schedule, a JSON list of seconds (--bad-receiver: a short one, so "
        "that the healthy phases after a bad one deliver again)",
    )
    parser.add_argument(
        "--delivery-nice",
        type=int,
        help="delivery_nice, the niceness the delivery process adds to its priority (default: "
        "the setting's default, as a service runs it)",
    )
    parser.add_argument(
        "--delivery-busy-share",
        type=float,
        help="delivery_busy_share, the share of one core the delivery process keeps to "
        "while the machine is busy (0: no limit; default: the setting's default)",
    )
    args = parser.parse_args()
    if args.phase_polls <= 0:
        args.phase_polls = int(args.events / args.phases * 1.3)
    kinds = ("sqlite", "postgresql") if args.db == "both" else (args.db,)
    nice = args.delivery_nice
    if nice is None:
        nice = Settings.model_fields["delivery_nice"].default
    share = args.delivery_busy_share
    if share is None:
        share = Settings.model_fields["delivery_busy_share"].default
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other jobs share "
        f"the machine); {args.urls:,} URLs changing {args.change_rate:g}/s; {args.phases} "
        f"phases of {args.phase_polls:,} polls; delivery_concurrency {args.concurrency}, "
        f"delivery_batch {args.batch}; deliverer in a {'thread' if args.thread else 'process'}"
        f", delivery_nice {nice}, delivery_busy_share {share:g}",
        flush=True,
    )
    summary: list[str] = []
    ctx = multiprocessing.get_context("spawn")
    with site_process(args.urls, args.change_rate, args.page_bytes, args.hosts) as (
        port,
        site_pid,
    ):
        urls = [page_url(port, args.hosts, k) for k in range(1, args.urls + 1)]
        for kind in kinds:
            secret = generate_secret()
            parent, child = ctx.Pipe()
            count = ctx.Value("q", 0)
            proc = ctx.Process(
                target=_receive, args=(secret, child, count, args.bad_cycle_s), daemon=True
            )
            proc.start()
            rport = parent.recv()
            with database(kind) as url:
                settings = bench_settings(
                    url,
                    args.per_slot,
                    host_caps=True,  # the crawl as these figures were first taken
                    slot_deadline_s=None,
                    delivery=False,  # the service starts none: the phases start their own
                    delivery_concurrency=args.concurrency,
                    delivery_batch=args.batch,
                    delivery_poll_s=0.1,
                    delivery_timeout_s=args.delivery_timeout,
                    slot_seconds=args.slot_seconds,
                    **(
                        {"delivery_retry_schedule": json.loads(args.retry_schedule)}
                        if args.retry_schedule
                        else {}
                    ),
                    **(
                        {"delivery_nice": args.delivery_nice}
                        if args.delivery_nice is not None
                        else {}
                    ),
                    delivery_busy_share=share,
                )
                pids = {"site": site_pid, "receiver": proc.pid}
                hook = f"http://127.0.0.1:{rport}/hook"
                if args.bad_receiver:
                    phases = asyncio.run(
                        bad_receiver_bench(settings, urls, hook, secret, parent, args, pids)
                    )
                else:
                    run = asyncio.run(bench(settings, urls, hook, secret, count, args, pids))
            parent.send("stop")
            notes = parent.recv()
            proc.join(10)
            if args.bad_receiver:
                summary += bad_report(phases, kind)
                print(summary[-1], flush=True)
                continue
            summary += report(run, notes, kind)
            print("\n".join(summary[-(6 + len(run.phases)) :]), flush=True)
    print("\n".join(["", "summary:", *summary]))


if __name__ == "__main__":
    main()
