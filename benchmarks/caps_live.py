"""Live host caps: the service with and without per-host politeness caps, side by side.

    python -m benchmarks.caps_live                      # 2 s slots, 1 s per-host delay
    python -m benchmarks.caps_live --slots 600 --capacity 24
    python -m benchmarks.caps_live --slots 300 --warmup 100 --caps-only   # a short window

A changing site on 20 loopback hosts (127.0.0.1 .. 127.0.0.20, one ``ChangingSite`` per
host, ticking once per slot), where 3 hosts hold 60 % of the URLs, watched by two real
services (``python -m crawler run``, each in its own process on its own SQLite database)
at the same time: one with ``host_caps`` on (the default), one with it off (the behaviour
before caps). Each service has its own copy of the 20 hosts (same addresses, other ports,
same seeds: the same changes at the same ticks), so neither sees the other's polls. The
sites send each page's ``Last-Modified`` (the time of its version's last change, as static
sites and most CMSs do), which the service believes while its polls bear it out
(docs/detect.md); ``--no-last-modified`` leaves it out.

With a 1 s delay between a host's requests and 2 s slots a host takes 2 polls per slot;
the capacity (24 polls per slot over 400 URLs) would give each of the 3 big hosts about 5.
Reported per service: slots run and overrun (the next slot was due before the slot ended),
polls deferred by reason, the site's own count of truly new versions served, per slot of
wall time (the site changes per 2 s whatever the service does), and that against the
constrained limit (``constrained_limit`` on the site's true rates, each host capped at the
cap the service derived, read from its ``host_caps`` table) over the slots after the
warm-up (the scheduler learns the rates first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import func, select

from crawler.schedulers import Limits, constrained_limit, limit
from crawler.store import NewUrl, Store
from crawler.store.models import slots as slots_table
from crawler.testsite import ChangingSite, zipf_rates


@dataclass(frozen=True)
class Config:
    """One side-by-side run."""

    urls: int = 400
    hosts: int = 20
    #: URLs of each of the big hosts (3 hosts x 80 = 60 % of 400)
    big_hosts: int = 3
    big_share: float = 0.6
    capacity: float = 24.0
    slot_seconds: float = 2.0
    delay_s: float = 1.0
    slots: int = 400
    warmup: int = 200
    alpha: float = 0.6
    beta: float = 0.8
    seed: int = 5
    page_size: int = 4_000
    #: None: the service's default (the larger of the slot and the fetch timeout)
    slot_deadline_s: float | None = None
    #: the sites send each page's Last-Modified (its version's last change)
    last_modified: bool = True

    def layout(self) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """Each URL's change probability per slot and its host (0 .. hosts - 1)."""
        rng = np.random.default_rng(self.seed)
        p = zipf_rates(self.urls, self.alpha, self.beta)
        rng.shuffle(p)
        big = round(self.urls * self.big_share)
        small = self.urls - big
        sizes = [big // self.big_hosts + (k < big % self.big_hosts) for k in range(self.big_hosts)]
        rest = self.hosts - self.big_hosts
        sizes += [small // rest + (k < small % rest) for k in range(rest)]
        return p, np.repeat(np.arange(self.hosts, dtype=np.int64), sizes)


@dataclass
class Side:
    """What one service did."""

    caps: bool
    #: (seconds since the start, true changes seen so far on its hosts)
    samples: list[tuple[float, int]] = field(default_factory=list)
    slots: int = 0
    overruns: int = 0
    polls: int = 0
    hits: int = 0
    deferred: dict[str, int] = field(default_factory=dict)
    host_caps: dict[str, float] = field(default_factory=dict)
    binding: list[str] = field(default_factory=list)
    truth: int = 0
    #: the slots that overran: (slot, seconds it took)
    overran: list[tuple[int, float]] = field(default_factory=list)

    def per_wall_slot(self, start_slot: int, end_slot: int, slot_seconds: float) -> float:
        """True changes seen per slot of wall time between two wall-slot indexes."""
        t = np.array([s for s, _ in self.samples])
        seen = np.array([v for _, v in self.samples], dtype=float)
        lo = np.interp(start_slot * slot_seconds, t, seen)
        hi = np.interp(end_slot * slot_seconds, t, seen)
        return float((hi - lo) / max(1, end_slot - start_slot))


def service_env(database_url: str, cfg: Config, caps: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CRAWLER_DATABASE_URL": database_url,
            "CRAWLER_SCHEDULER": "bayes",
            "CRAWLER_CAPACITY": str(cfg.capacity),
            "CRAWLER_SLOT_SECONDS": str(cfg.slot_seconds),
            "CRAWLER_PER_HOST_MIN_DELAY_S": str(cfg.delay_s),
            "CRAWLER_PER_HOST_CONCURRENCY": "2",
            "CRAWLER_HOST_CAPS": "true" if caps else "false",
            "CRAWLER_METRICS_PORT": "0",
            "CRAWLER_ALLOW_PRIVATE_ADDRESSES": "true",
            "CRAWLER_FETCH_WORKERS": "1",
            "CRAWLER_DEFAULT_MIN_INTERVAL_S": "0",  # as measured: no polite bound
            "CRAWLER_NORMALIZE_WORKERS": "1",
            "CRAWLER_FETCH_RETRIES": "0",
            "CRAWLER_LOG_LEVEL": "WARNING",
            "CRAWLER_SEED": "11",
        }
    )
    if cfg.slot_deadline_s is not None:
        env["CRAWLER_SLOT_DEADLINE_S"] = str(cfg.slot_deadline_s)
    return env


async def start_sites(cfg: Config) -> list[ChangingSite]:
    p, host = cfg.layout()
    sites = [
        ChangingSite(
            p[host == k],
            tick_seconds=cfg.slot_seconds,
            page_size=cfg.page_size,
            seed=cfg.seed * 1000 + k,
            host=f"127.0.0.{k + 1}",
            last_modified=cfg.last_modified,
        )
        for k in range(cfg.hosts)
    ]
    for site in sites:
        await site.start()
    return sites


async def run_side(cfg: Config, caps: bool, sites: list[ChangingSite], tmp: Path) -> Side:
    """Run ``crawler run`` on ``sites`` for ``cfg.slots`` slots of wall time; SIGTERM it."""
    side = Side(caps)
    url = f"sqlite:///{tmp / ('caps.db' if caps else 'nocaps.db')}"
    with Store(url) as store:
        store.upgrade()
        store.add_urls([NewUrl(u) for site in sites for u in site.urls()])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "run", env=service_env(url, cfg, caps),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    began = time.monotonic()
    try:
        end = began + cfg.slots * cfg.slot_seconds
        while time.monotonic() < end and proc.returncode is None:
            side.samples.append(
                (time.monotonic() - began, sum(s.truth.true_changes_seen for s in sites))
            )
            await asyncio.sleep(0.25)
        side.samples.append(
            (time.monotonic() - began, sum(s.truth.true_changes_seen for s in sites))
        )
        proc.send_signal(signal.SIGTERM)
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"crawler run failed: {err.decode()[-2000:]}")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    with Store(url) as store:
        stats = store.stats()
        side.slots, side.polls, side.hits = stats.slots, stats.polls, stats.hits
        side.deferred = dict(stats.deferred)
        with store.engine.connect() as conn:
            side.overruns = int(
                conn.execute(
                    select(func.count()).select_from(slots_table).where(slots_table.c.overrun)
                ).scalar_one()
            )
            rows = conn.execute(
                select(slots_table.c.slot, slots_table.c.duration_s)
                .where(slots_table.c.overrun)
                .order_by(slots_table.c.slot)
            )
            side.overran = [(int(slot), float(took)) for slot, took in rows]
        saved = store.host_caps()
    side.host_caps = {h: r.cap for h, r in saved.items()}
    side.binding = sorted(h for h, r in saved.items() if r.binding)
    side.truth = sum(s.truth.true_changes_seen for s in sites)
    return side


async def side_by_side(cfg: Config, *, caps_only: bool = False) -> tuple[Side, Side | None]:
    """Both services at once, each on its own copy of the hosts: (with caps, without);
    ``caps_only``: the service with caps alone (without: None)."""
    copies = [await start_sites(cfg) for _ in range(1 if caps_only else 2)]
    try:
        with tempfile.TemporaryDirectory(prefix="crawler-caps-") as tmp:
            runs = [run_side(cfg, True, copies[0], Path(tmp))]
            if not caps_only:
                runs.append(run_side(cfg, False, copies[1], Path(tmp)))
            sides = await asyncio.gather(*runs)
            with_caps, without = sides[0], (sides[1] if len(sides) > 1 else None)
    finally:
        for sites in copies:
            for site in sites:
                await site.stop()
    return with_caps, without


def limits(cfg: Config, derived: dict[str, float]) -> tuple[float, float]:
    """(the constrained limit with the caps the service derived, the unconstrained limit)."""
    p, host = cfg.layout()
    names = [f"127.0.0.{k + 1}" for k in range(cfg.hosts)]
    caps = {k: derived[name] for k, name in enumerate(names) if name in derived}
    constrained = constrained_limit(p, cfg.capacity, limits=Limits.build(p.size, host, caps))
    return constrained, limit(p, cfg.capacity)


def report(cfg: Config, with_caps: Side, without: Side | None) -> list[str]:
    bound, free = limits(cfg, with_caps.host_caps)
    lines = [
        f"{cfg.urls} URLs on {cfg.hosts} hosts ({cfg.big_hosts} hold {cfg.big_share:.0%}), "
        f"Zipf({cfg.alpha}, {cfg.beta}) per {cfg.slot_seconds:g} s slot, C = {cfg.capacity:g}, "
        f"per-host delay {cfg.delay_s:g} s, {cfg.slots} slots of wall time, "
        f"warm-up {cfg.warmup}, Last-Modified {'sent' if cfg.last_modified else 'not sent'}",
        f"derived caps: {sorted(set(round(c, 3) for c in with_caps.host_caps.values()))} polls "
        f"per slot on {len(with_caps.host_caps)} hosts; binding: {', '.join(with_caps.binding)}",
        f"constrained limit {bound:.4f} true changes per slot (unconstrained {free:.4f})",
        "",
        "| host caps | slots run | overrun | polls | deferred (reason: polls) | "
        "true changes / wall slot after warm-up | of the constrained limit | "
        "per 50-slot window |",
        "|---|---:|---:|---:|---|---:|---:|---|",
    ]
    sides = [side for side in (with_caps, without) if side is not None]
    for side in sides:
        after = side.per_wall_slot(cfg.warmup, cfg.slots, cfg.slot_seconds)
        windows = " ".join(
            f"{side.per_wall_slot(a, a + 50, cfg.slot_seconds) / bound:.2f}"
            for a in range(0, cfg.slots - 49, 50)
        )
        deferred = ", ".join(f"{k}: {v}" for k, v in sorted(side.deferred.items())) or "none"
        lines.append(
            f"| {'on' if side.caps else 'off'} | {side.slots} | {side.overruns} | {side.polls} | "
            f"{deferred} | {after:.3f} | {after / bound:.3f} | {windows} |"
        )
    for side in sides:
        shown = ", ".join(f"{slot} ({took:.1f} s)" for slot, took in side.overran[:12])
        more = f" and {len(side.overran) - 12} more" if len(side.overran) > 12 else ""
        lines.append(f"caps {'on' if side.caps else 'off'}: overran {shown or 'none'}{more}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Config()
    parser.add_argument("--urls", type=int, default=d.urls)
    parser.add_argument("--capacity", type=float, default=d.capacity)
    parser.add_argument("--slot-seconds", type=float, default=d.slot_seconds)
    parser.add_argument("--delay", type=float, default=d.delay_s)
    parser.add_argument("--slots", type=int, default=d.slots)
    parser.add_argument("--warmup", type=int, default=d.warmup)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--slot-deadline", type=float, default=None)
    parser.add_argument(
        "--caps-only", action="store_true", help="run the service with caps alone (half the load)"
    )
    parser.add_argument(
        "--no-last-modified", action="store_true", help="the sites send no Last-Modified"
    )
    args = parser.parse_args(argv)
    cfg = Config(
        urls=args.urls, capacity=args.capacity, slot_seconds=args.slot_seconds,
        delay_s=args.delay, slots=args.slots, warmup=args.warmup, seed=args.seed,
        slot_deadline_s=args.slot_deadline, last_modified=not args.no_last_modified,
    )  # fmt: skip
    with_caps, without = asyncio.run(side_by_side(cfg, caps_only=args.caps_only))
    print("\n".join(report(cfg, with_caps, without)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
