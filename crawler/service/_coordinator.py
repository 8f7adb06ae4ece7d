"""The cluster's coordinator: one worker at a time packs the sites onto the
live workers and writes the leases.

Decisions:

* **Who.** Every worker runs a ``Coordinator`` thread that tries, every ``heartbeat_s``,
  for the database's "coordinator" lock (``Store.acquire_service_lock(role=
  "coordinator")``: a session advisory lock on a dedicated connection). The holder
  names itself in ``cluster_state`` (``claim_coordinator``) and runs a round each time;
  when its process or connection dies the server drops the lock and another worker's
  next try takes it. A holder that finds its lock gone (``ServiceLock.ensure`` says so,
  or its writes are refused with ``NotCoordinator``) steps down and tries again like the
  others.
* **A round** (``run_round``): the live workers (heartbeat within ``worker_timeout_s``
  by the database's clock; the others' sites are placed anew), the watched sites and
  their weights, the current leases; then ``crawler.cluster``:

  - a site's weight: its owner reports the sum of its URLs' wanted x at the owner's own
    multiplier u, and u itself (``heartbeat``); ``shared_level_weights`` turns that into
    a rate mass (x * u, exact while x < 1) and solves one shared level u* at which the
    sites' weights sum to the live capacity: what ONE scheduler over all URLs would give
    each site. A worker whose scheduler is squeezed harder than the others (higher u)
    then looks overloaded and sheds sites until the multipliers agree (the "no loss from
    partitioning" rule of docs/cluster.md, with observed rather than known rates). A site
    nobody reported yet gets the mean rate mass per URL (the uniform share at first);
  - the overload automaton (Th = ``cluster_threshold``, N = ``cluster_states``) of
    every overloaded worker (load > capacity + ``OVERLOAD_MARGIN``) chooses "move
    sites" (with probability (s/N)^2) or "shrink" (its own scheduler already keeps its
    polls at its capacity: nothing moves this round); an automaton steps only at a round
    after its worker reported new weights (every ``REPORT_EVERY_SLOTS`` slots), not at
    every round, and not while the coordinator settles after a stall (``settle_s``);
  - ``repack`` moves the least weight: the sites of dead workers and new sites are
    placed by Best Fit Decreasing, an overloaded worker that chose to move keeps the
    heaviest subset that fits; a worker that holds nothing (a join, the first rounds)
    takes sites from the fullest workers up to its share of the load (``_join``: a join
    is not drift, the automata are not asked); every other worker keeps what it holds,
    also when it is over its capacity within the margin (drift moves nothing);
  - a move between two live workers is made in two steps: the site is asked of its owner
    (``revoked_at``; owner and epoch kept, so its slot in flight's commit lands), which
    releases it in a later slot's commit (owner NULL, epoch bumped, ``released_epoch``),
    and it is given to its new owner at the next round; the old owner dead by heartbeat,
    it is placed at once (fencing makes a late commit of a presumed-dead worker
    harmless); not released within ``handover_grace_s`` (the time the old owner's slot in
    flight may still poll it), it is taken back (epoch bumped) and handed over after the
    grace. So a URL is not polled by two workers around a move. Sites of dead workers, and
    sites freed by a worker that left cleanly, are placed at once;
  - a stale heartbeat is not yet a death: see ``_suspects`` (a stall of the database
    makes every heartbeat stale at once);
  - the sites of one host (``host:80`` and ``host:8080``: one politeness key) go to one
    worker, that of the host's heaviest site (``_hosts_together``): leases are per site
    (``host[:port]``), politeness per host, and a host split over two workers would get
    each worker's whole per-host cap;
  - the shortfall (how many more workers of what capacity the weights need: with the
    weights on one shared level they sum to the live capacity, so a shortfall means the
    indivisible sites do not pack, e.g. one site alone outweighs a worker) goes to
    ``cluster_state`` with the round's figures.

  The automata live in the coordinator's memory: a new coordinator starts them at Th.
* **A long round keeps the role.** The server ends the lock's session once it has been
  idle for a worker timeout (a paused coordinator must lose the role); a thread touches
  the session every third of that while a round runs (``_keeping_the_lock``), so a round
  longer than the worker timeout (a large cluster) still commits instead of losing the
  lock midway to a successor whose round would fail the same way.
* **A round's cost sets its cadence.** After a round the coordinator waits a heartbeat,
  or three times the round's own length if that is longer (``pause_after``): it spends at
  most a quarter of its time in rounds. A round reads every site and lease row; at 1M
  sites that takes about a minute, and back to back rounds kept the database reading
  millions of rows without a pause, while the sites' weights change slowly. The price is
  the time before a dead worker's sites move, which grows with the round at that size.
* **Unassigned sites** (no live worker at all) keep their lease rows with no owner and
  are not polled until a worker is live.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np

from crawler import cluster
from crawler.service._inflight import GRACE_S
from crawler.settings import Settings
from crawler.sites import host_key
from crawler.store import (
    LeaseRow,
    NotCoordinator,
    ServiceLock,
    ServiceLockHeld,
    Store,
    StoreError,
    WorkerRow,
    owner_info,
)

log = logging.getLogger("crawler.cluster")

#: a worker is overloaded when its sites weigh more than its capacity by this share: the
#: weights sum to the live capacity (one shared level), so without a margin some worker
#: would be "over" by a rounding error at every round
OVERLOAD_MARGIN = 0.05
#: slots between two reports of a worker's sites' learned weights (the heartbeat carries
#: only their sum); and at least a heartbeat between two, but for the report right after
#: the worker's sites changed
REPORT_EVERY_SLOTS = 5
#: a worker silent for this many timeouts is deleted from cluster_workers
FORGET_AFTER_TIMEOUTS = 10
#: when most lease holders go silent together, their sites wait this many worker timeouts
#: (after the coordinator has read the database for one) before they move
MASS_STALE_HOLD_TIMEOUTS = 3
#: the largest share of its time the coordinator spends in rounds (``pause_after``)
ROUND_DUTY = 0.25


def pause_after(round_s: float, heartbeat_s: float) -> float:
    """Seconds to wait after a try that took ``round_s``: a heartbeat, or longer after a
    long round, so that rounds take at most ``ROUND_DUTY`` of the coordinator's time."""
    return max(heartbeat_s, round_s * (1.0 / ROUND_DUTY - 1.0))


def shared_level_weights(
    urls: np.ndarray, reported: np.ndarray, multiplier: np.ndarray, total: float
) -> np.ndarray:
    """Site weights at one shared multiplier, summing to ``min(total, urls.sum())``.

    A site's owner reported its weight ``reported[s]`` (sum of its URLs' x = min(1, r / u)
    at the owner's multiplier ``multiplier[s]``; NaN when the owner's scheduler has none:
    then u = 1). Its rate mass is ``R_s = reported * u`` (exact while none of its URLs is
    capped at one poll per slot); a site not reported yet gets the mean rate mass per URL
    of the reported ones (the uniform share when none is). The shared level u* solves
    ``sum_s min(urls_s, R_s / u*) = min(total, sum urls)`` (bisection on log u*), and the
    weights are ``min(urls_s, R_s / u*)``: what each site gets from one scheduler over all
    URLs at the cluster's capacity. Pure NumPy."""
    n = np.asarray(urls, dtype=np.float64)
    target = min(float(total), float(n.sum()))
    if n.size == 0 or target <= 0:
        return np.zeros(n.size)
    if target >= float(n.sum()) - 1e-12:
        return n.copy()
    u = np.where(np.isfinite(multiplier) & (multiplier > 0), multiplier, 1.0)
    known = np.isfinite(reported) & (reported > 0)
    if not known.any():
        return n * (target / float(n.sum()))
    mass = np.where(known, reported * u, 0.0)
    per_url = float(mass[known].sum() / n[known].sum())
    mass = np.where(known, mass, n * per_url)

    def fill(log_level: float) -> float:
        return float(np.minimum(n, mass / np.exp(log_level)).sum())

    hi = float(np.log(mass.sum() / target))  # no cap binds: the fill is exactly the target
    lo = hi - 1.0
    while fill(lo) < target:  # a lower level fills more, up to every URL at one poll
        lo -= 2.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if fill(mid) > target:
            lo = mid
        else:
            hi = mid
    return np.asarray(np.minimum(n, mass / np.exp(hi)), dtype=np.float64)


def _multi_site_hosts(site_list: list[str]) -> list[list[int]]:
    """The indexes of the sites of each host that has more than one site; ``site_list``
    sorted. Only a site with a port (or a bracketed address) can share its host with
    another, so only those are looked at, and the port-less site of the same host is found
    by bisection: at 1M sites without ports this is one pass of substring tests."""
    by_host: dict[str, list[int]] = {}
    for k, site in enumerate(site_list):
        if ":" in site or "[" in site:
            key = host_key(site)
            if key != site:
                by_host.setdefault(key, []).append(k)
    for key, members in by_host.items():
        at = bisect.bisect_left(site_list, key)
        if at < len(site_list) and site_list[at] == key:
            members.append(at)
    return [sorted(m) for m in by_host.values() if len(m) > 1]


def _revoked_within(lease: LeaseRow, seconds: float) -> bool:
    """The lease lost its owner less than ``seconds`` ago (a clean leave sets no time)."""
    age = lease.assigned_age_s
    return lease.worker_id is None and age is not None and age < seconds


@dataclass(frozen=True)
class Round:
    """What one round decided."""

    live_workers: int
    sites: int
    moved: int
    overloaded: int
    total_weight: float
    total_capacity: float
    shortfall_workers: int
    shortfall_capacity: float


class Coordinator:
    """Tries for the coordinator lock; while it holds it, packs every ``heartbeat_s`` (less
    often when a round is long: ``pause_after``)."""

    def __init__(self, settings: Settings, store: Store, worker_id: str) -> None:
        self.settings = settings
        self.store = store
        self.worker_id = worker_id
        self.rounds = 0
        #: seconds a site revoked from a live worker waits before it is given to another:
        #: that worker's slot in flight may still poll it (its deadline, the loop's grace
        #: for a stuck poller, a slot until its next sync, a heartbeat of lag)
        self.handover_grace_s = (
            settings.effective_slot_deadline() + GRACE_S + settings.slot_seconds
            + settings.heartbeat_s
        )  # fmt: skip
        #: seconds after (re)gaining the database (a new coordinator, a failed round: a
        #: stall) during which nothing held moves: every worker has renewed and reported its
        #: weights afresh by then (a report every REPORT_EVERY_SLOTS slots, or every
        #: heartbeat if that is longer: the worker timeout is longer than a heartbeat)
        self.settle_s = max(
            settings.effective_worker_timeout(), (REPORT_EVERY_SLOTS + 1) * settings.slot_seconds
        )
        self.last: Round | None = None
        self.moves_total = 0  # running totals of this process's rounds (for the metrics)
        self.overloads_total = 0
        self._lock: ServiceLock | None = None
        self._automaton: dict[str, int] = {}
        #: what each live worker had reported at the last round (its automaton steps when
        #: that changes)
        self._seen: dict[str, tuple[float | None, int, float]] = {}
        #: where each revoked site goes once its hand-over grace has passed
        self._destined: dict[str, str] = {}
        #: whom each revoked site was taken from (a dead one need not be waited for)
        self._revoked_from: dict[str, str] = {}
        #: the hosts with several sites (their indexes in the round's site list), for
        #: the site list they were computed from
        self._grouped_sites: list[str] = []
        self._groups: list[list[int]] = []
        #: each site's last rate mass (weight x its owner's multiplier), for while it has
        #: no live owner
        self._mass: dict[str, float] = {}
        self._rng = np.random.default_rng(settings.seed)
        #: monotonic time since which this coordinator's rounds have read the database
        #: without a gap (None: not yet, or a round failed)
        self._observing_since: float | None = None
        #: monotonic time since which most lease holders have been silent together
        self._mass_since: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()

    @property
    def is_coordinator(self) -> bool:
        return self._lock is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="crawler-coordinator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.step_down()

    def step_down(self) -> None:
        """Give the role up (the lock's connection is closed)."""
        with self._mutex:
            if self._lock is not None:
                self._lock.release()
                self._lock = None
                log.info("worker %s is no longer the coordinator", self.worker_id)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.tick()
            except Exception:  # a bug in a round must not end the thread: log, go on
                log.exception("coordination round failed unexpectedly")
            self._stop.wait(pause_after(time.monotonic() - began, self.settings.heartbeat_s))

    def tick(self) -> Round | None:
        """One try: take (or check) the lock; if held, run a round."""
        with self._mutex:
            if not self._hold():
                return None
            try:
                with self._keeping_the_lock():
                    result = self.run_round()
            except NotCoordinator as exc:
                log.warning("%s; stepping down", exc)
                self._release()
                return None
            except StoreError as exc:
                log.warning("coordination round failed: %s", exc)
                self._observing_since = None  # staleness seen next is not evidence
                return None
            except ValueError as exc:  # bad numbers from the tables: say so, keep going
                log.error("coordination round refused its input: %s", exc)
                return None
            self.rounds += 1
            self.last = result
            self.moves_total += result.moved  # crawler_cluster_moves_total
            self.overloads_total += result.overloaded
            return result

    @contextlib.contextmanager
    def _keeping_the_lock(self) -> Iterator[None]:
        """Touch the lock's session every third of a worker timeout while a round runs:
        the server ends it once idle for a worker timeout (so that a paused coordinator
        loses the role), and a round at a large size may take longer than that. A paused
        process pauses this thread too, so a paused coordinator still loses the lock."""
        lock = self._lock
        if lock is None:
            yield
            return
        done = threading.Event()
        every = self.settings.effective_worker_timeout() / 3

        def touch() -> None:
            while not done.wait(every):
                try:
                    if not lock.ensure():
                        return  # taken by another: the round's write is refused
                except StoreError as exc:
                    log.warning("coordinator lock not touched during the round: %s", exc)

        toucher = threading.Thread(target=touch, name="crawler-coordinator-lock", daemon=True)
        toucher.start()
        try:
            yield
        finally:
            done.set()
            toucher.join(timeout=2 * every)  # a touch hung on a dead connection: go on

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _hold(self) -> bool:
        if self._lock is not None:
            try:
                if self._lock.ensure():
                    return True
            except StoreError:
                pass
            log.warning("worker %s lost the coordinator lock", self.worker_id)
            self._release()
            return False  # try again next time, like everybody else
        try:
            lock = self.store.acquire_service_lock(
                owner_info("crawler coordinator"), role="coordinator"
            )
        except ServiceLockHeld:
            return False
        except StoreError as exc:
            log.warning("cannot try for the coordinator lock: %s", exc)
            return False
        try:
            self.store.cluster.claim_coordinator(self.worker_id)
        except StoreError as exc:
            lock.release()
            log.warning("cannot claim the coordinator role: %s", exc)
            return False
        # a paused (SIGSTOP) or hung coordinator must not keep the role: the server ends
        # its lock session once idle for a worker timeout (it touches it every round)
        lock.end_session_when_idle(self.settings.effective_worker_timeout())
        self._lock = lock
        self._automaton = {}
        self._seen = {}
        self._destined = {}
        self._revoked_from = {}
        self._observing_since = None
        self._mass_since = None
        log.info("worker %s is the coordinator", self.worker_id)
        return True

    # ----- one round ---------------------------------------------------------------------

    def run_round(self) -> Round:
        """Read, pack, write (see the module docstring)."""
        timeout = self.settings.effective_worker_timeout()
        now = time.monotonic()
        if self._observing_since is None:
            self._observing_since = now  # (again) able to read the database from now on
        registered = self.store.cluster.cluster_workers()
        live = [w for w in registered if w.ready and w.heartbeat_age_s <= timeout]
        counts = self.store.cluster.site_url_counts()
        leases = {lease.site: lease for lease in self.store.cluster.leases()}
        site_list = sorted(counts)
        suspects = self._suspects(registered, live, leases, timeout, now)
        # the sites of a worker that is silent but not yet presumed dead stay where they are;
        # while any holder is such a suspect (a stall is possible), and for the first
        # ``settle_s`` this coordinator reads the database (after a stall every worker first
        # renews and reports afresh), nothing held moves at all and no automaton learns:
        # the weights the packing would move by are as stale as the heartbeats
        settling = now - self._observing_since < self.settle_s
        holding = suspects | {w.worker_id for w in live} if suspects or settling else set()
        pinned = np.array(
            [s in leases and leases[s].worker_id in holding for s in site_list], dtype=np.bool_
        )
        if not live and not suspects:
            return self._write_unassigned(site_list, leases, counts)
        index = {w.worker_id: k for k, w in enumerate(live)}
        self._end_dead_sessions(leases, index.keys() | suspects)
        if not live:  # every holder silent: nothing to move, nobody to give sites to
            return Round(0, len(site_list), 0, 0, 0.0, 0.0, 0, 0.0)
        caps = np.array([w.capacity for w in live], dtype=np.float64)
        weights = self._weights(site_list, leases, counts, live, index, float(caps.sum()))
        prev = np.array(
            [index.get(leases[s].worker_id or "", -1) if s in leases else -1 for s in site_list],
            dtype=np.int64,
        )
        # sites revoked from a live worker lately: that worker may still be polling them
        # (its slot in flight), so nobody gets them before it has acknowledged, it is dead,
        # or (neither known) the hand-over grace has passed
        waiting = np.array([self._waiting(s, leases, index) for s in site_list], dtype=np.bool_)
        # sites asked of a live owner (a move between live workers): they stay with it until
        # it releases them in a commit, or (not released within the grace) are taken back
        asked = np.array(
            [
                s in leases and leases[s].revoked_age_s is not None and leases[s].worker_id in index
                for s in site_list
            ],
            dtype=np.bool_,
        )
        overdue = asked & np.array(
            [
                s in leases and (leases[s].revoked_age_s or 0.0) >= self.handover_grace_s
                for s in site_list
            ],
            dtype=np.bool_,
        )
        kept = pinned | (asked & ~overdue)
        waiting |= kept | overdue
        held = prev >= 0
        loads = np.bincount(prev[held], weights=weights[held], minlength=caps.size)
        over = loads > caps * (1 + OVERLOAD_MARGIN)
        automata = cluster.OverloadAutomata(
            caps.size,
            threshold=self.settings.cluster_threshold,
            states=self.settings.cluster_states,
            seed=self._rng,
        )
        automata.state[:] = [
            self._automaton.get(w.worker_id, self.settings.cluster_threshold) for w in live
        ]
        # a worker's automaton steps once per piece of evidence: at a round after that
        # worker reported its weights anew (every REPORT_EVERY_SLOTS slots, while the rounds
        # run every heartbeat; another worker's report moves every load a little, through
        # the shared level, and is no evidence about this one); while settling, the loads
        # are as stale as the weights
        fresh = self._fresh_reports(live, leases)
        if settling:
            fresh[:] = False
        move = automata.decide(over & fresh)
        kept_states = automata.state.copy()
        automata.update(over)
        automata.state[~fresh] = kept_states[~fresh]
        self._automaton = {
            w.worker_id: int(s) for w, s in zip(live, automata.state.tolist(), strict=True)
        }
        fill = 1.0
        if site_list and not held.any():  # nothing is held yet: spread from the start
            fill = cluster.balanced_fill(weights, caps)
        # only a worker over its capacity by more than the margin that chose to move sheds
        # sites; every other keeps what it holds (its target is at least its load): drift
        # within the margin moves nothing, however often the weights wobble
        targets = np.where(move, caps, np.maximum(caps, loads / fill))
        # a site whose hand-over grace has passed goes where it was sent when revoked (if
        # that worker is still live): repack sees it as already there
        start = prev.copy()
        for k in np.flatnonzero(~waiting & ~held).tolist():
            dest = self._destined.get(site_list[k])
            if dest is not None and dest in index:
                start[k] = index[dest]
        assignment = np.full(len(site_list), cluster.UNASSIGNED, dtype=np.int64)
        shortfall = None
        todo = ~waiting
        if todo.any():
            packed = cluster.repack(
                start[todo], weights[todo], targets, fill=fill, new_capacity=float(caps.max())
            )
            assignment[todo] = packed.assignment
            shortfall = packed.shortfall
            if shortfall is not None and fill < 1.0:  # against the full capacities
                shortfall = cluster.best_fit_decreasing(weights[todo], caps).shortfall
        incoming = {self._destined[s] for k, s in enumerate(site_list) if waiting[k]
                    and s in self._destined}  # fmt: skip
        self._join(assignment, weights, caps, waiting, [w.worker_id in incoming for w in live])
        self._hosts_together(site_list, assignment, weights, waiting)
        # a move between live workers is made in two steps: revoked now (the owner drops
        # the site at its next slot; the epoch bump fences what it still commits), given
        # to the new owner once the hand-over grace has passed
        # a move between live workers: the site is asked of its owner (owner and epoch
        # kept), which stops polling it at its next slot start and releases it in a later
        # slot's commit, once the polls of its slot in flight have landed (commit, then
        # release); it is handed to its new owner at the round after the release
        moving = held & ~waiting & (assignment != prev)
        owners: dict[str, str | None] = {}
        revoke: set[str] = set()
        for k, s in enumerate(site_list):
            if kept[k]:
                owners[s] = leases[s].worker_id
            elif overdue[k]:  # not released in time: taken back (fenced), after the grace
                owners[s] = None
                self._revoked_from[s] = str(leases[s].worker_id)
                log.warning("site %s not released by its owner in %g s: revoked", s,
                            self.handover_grace_s)  # fmt: skip
            elif waiting[k]:
                owners[s] = None
            elif moving[k]:
                owners[s] = live[int(prev[k])].worker_id
                revoke.add(s)
                self._destined[s] = live[int(assignment[k])].worker_id
                self._revoked_from[s] = live[int(prev[k])].worker_id
            else:
                owners[s] = live[int(assignment[k])].worker_id
                self._destined.pop(s, None)
                self._revoked_from.pop(s, None)
        moved_live = int(np.count_nonzero(moving))
        orphans = {  # placed anew because their owner is presumed dead (or has left)
            s: leases[s].worker_id
            for s, owner in owners.items()
            if owner is not None
            and s in leases
            and leases[s].worker_id is not None
            and leases[s].worker_id not in index
            and owner != leases[s].worker_id  # (a suspect's site stays its own)
        }
        if orphans:
            log.warning(
                "coordinator: %d site(s) of %d worker(s) presumed dead placed anew",
                len(orphans),
                len(set(orphans.values())),
            )
        figures = {
            "live_workers": len(live),
            "total_weight": float(weights.sum()),
            "total_capacity": float(caps.sum()),
            "shortfall_workers": shortfall.workers if shortfall is not None else 0,
            "shortfall_capacity": shortfall.capacity if shortfall is not None else 0.0,
            "threshold": self.settings.cluster_threshold,
            "states": self.settings.cluster_states,
            "overloads_total": int(over.sum()),
            "moves_total": moved_live,
        }
        site_weight = {s: float(w) for s, w in zip(site_list, weights.tolist(), strict=True)}
        changed = self.store.cluster.assign_leases(
            owners, self.worker_id, weights=site_weight, figures=figures, revoke=revoke
        )
        if changed:
            log.info(
                "coordinator: %d site(s) assigned anew or moved over %d live worker(s) "
                "(weight %.3g of capacity %.3g)%s",
                changed,
                len(live),
                figures["total_weight"],
                figures["total_capacity"],
                f"; {shortfall.message()}" if shortfall is not None else "",
            )
        if now - self._observing_since >= FORGET_AFTER_TIMEOUTS * timeout:
            # (only once this coordinator has seen them silent that long: a long stall of
            # the database must not forget every worker and so free every lease)
            self.store.cluster.forget_workers(FORGET_AFTER_TIMEOUTS * timeout)
        return Round(
            live_workers=len(live),
            sites=len(site_list),
            moved=moved_live,
            overloaded=int(over.sum()),
            total_weight=float(weights.sum()),
            total_capacity=float(caps.sum()),
            shortfall_workers=int(figures["shortfall_workers"]),
            shortfall_capacity=float(figures["shortfall_capacity"]),
        )

    def _fresh_reports(self, live: list[WorkerRow], leases: dict[str, LeaseRow]) -> np.ndarray:
        """Per live worker: whether it reported anew since the last round (its multiplier,
        or its sites' reported weights, or its sites, changed)."""
        mine: dict[str, list[float]] = {}
        for lease in leases.values():
            if lease.worker_id is not None:
                mine.setdefault(lease.worker_id, []).append(float(lease.weight))
        now = {
            w.worker_id: (w.multiplier, len(mine.get(w.worker_id, ())),
                          round(sum(mine.get(w.worker_id, ())), 9))
            for w in live
        }  # fmt: skip
        fresh = np.array([self._seen.get(w) != now[w] for w in now], dtype=np.bool_)
        self._seen = now
        return fresh

    def _suspects(
        self,
        registered: list[WorkerRow],
        live: list[WorkerRow],
        leases: dict[str, LeaseRow],
        timeout: float,
        now: float,
    ) -> set[str]:
        """The lease holders whose heartbeat is stale but which are not presumed dead yet
        (their sites stay put this round). A heartbeat is stale for two reasons: the
        worker died, or nobody could reach the database (a stall, a restart). Every
        heartbeat is stale at once after a stall, and moving every lease then would
        reshuffle the whole cluster for nothing. So a stale holder is presumed dead only
        once this coordinator has itself read the database for a whole worker timeout (in
        which the worker could have renewed), and, when most holders went silent
        together, only after ``MASS_STALE_HOLD_TIMEOUTS`` timeouts more (Kubernetes'
        node controller stops evicting in the same way when most nodes of a zone are
        unhealthy at once)."""
        holders = {lease.worker_id for lease in leases.values() if lease.worker_id is not None}
        live_ids = {w.worker_id for w in live}
        stale = {
            w.worker_id
            for w in registered
            if w.worker_id in holders and w.worker_id not in live_ids
        }
        assert self._observing_since is not None
        if not stale:
            self._mass_since = None
            return set()
        if now - self._observing_since < timeout:
            return stale  # it cannot tell a stall of the database from deaths yet
        if len(stale) > len(live_ids & holders):
            if self._mass_since is None:
                self._mass_since = now
                log.warning(
                    "%d of %d workers holding sites went silent together (a stall of the "
                    "database or the network?): their sites wait up to %g s before they move",
                    len(stale),
                    len(holders),
                    MASS_STALE_HOLD_TIMEOUTS * timeout,
                )
            if now - self._mass_since < MASS_STALE_HOLD_TIMEOUTS * timeout:
                return stale
            return set()
        self._mass_since = None
        return set()

    def _end_dead_sessions(self, leases: dict[str, LeaseRow], alive: AbstractSet[str]) -> None:
        """End the database sessions of dead workers that still hold leases: a paused
        one may sit in a commit holding their rows FOR SHARE, which would block the
        re-assignment (the idle-in-transaction timeout does not fire while the server
        waits on the stopped client). ``alive``: the workers not presumed dead."""
        owners = {lease.worker_id for lease in leases.values()}
        dead = sorted(w for w in owners if w is not None and w not in alive)
        if not dead:
            return
        try:
            ended = self.store.cluster.end_worker_sessions(dead)
        except StoreError as exc:
            log.warning("could not end the sessions of dead worker(s): %s", exc)
            return
        if ended:
            log.info("ended %d database session(s) of %d dead worker(s)", ended, len(dead))

    def _waiting(self, site: str, leases: dict[str, LeaseRow], index: dict[str, int]) -> bool:
        """Whether a revoked ``site`` must still wait before it is given to a new owner."""
        lease = leases.get(site)
        if lease is None or not _revoked_within(lease, self.handover_grace_s):
            return False
        if lease.released:  # its old owner's polls of it are over
            return False
        source = self._revoked_from.get(site)
        # revoked by this coordinator from a worker now dead: nothing to wait for
        return source is None or source in index

    def _hosts_together(
        self,
        site_list: list[str],
        assignment: np.ndarray,
        weights: np.ndarray,
        waiting: np.ndarray,
    ) -> None:
        """The sites of one host (``a.test:80`` and ``a.test:8080``: one politeness key,
        ``crawler.sites.host_key``) go to one worker, that of the host's heaviest placed
        site: a lease is per site (``host[:port]``, the unit of packing), while the
        per-host cap, delay and back-off are kept by the worker that polls the host, and
        two workers polling one host would each give it the whole cap. In place; the
        sites waiting for a hand-over are left as they are (they follow once handed
        over). A host with one site, the usual case, costs a dictionary lookup."""
        if site_list != self._grouped_sites:  # sites come and go rarely: cached
            self._grouped_sites = list(site_list)
            self._groups = _multi_site_hosts(site_list)
        for members in self._groups:
            placed = [k for k in members if not waiting[k] and assignment[k] >= 0]
            if not placed:
                continue
            target = assignment[max(placed, key=lambda k: (weights[k], -k))]
            for k in placed:
                assignment[k] = target

    @staticmethod
    def _join(
        assignment: np.ndarray,
        weights: np.ndarray,
        caps: np.ndarray,
        waiting: np.ndarray,
        incoming: list[bool],
    ) -> None:
        """A worker that holds nothing (and has nothing on its way) takes sites from the
        fullest workers, the heaviest that fits its share first, up to its share of the
        load (the cluster's mean load ratio times its capacity). In place."""
        placed = assignment >= 0
        loads = np.bincount(assignment[placed], weights=weights[placed], minlength=caps.size)
        counts = np.bincount(assignment[placed], minlength=caps.size)
        ratio_all = float(weights.sum() / caps.sum()) if caps.sum() > 0 else 0.0
        for e in range(caps.size):
            if counts[e] > 0 or incoming[e]:
                continue
            room = caps[e] * min(1.0, ratio_all) + 1e-9
            while room > 0:
                donors = counts >= 2  # a donor keeps at least one site
                donors[e] = False
                fits = ~waiting & (weights <= room) & (assignment >= 0)
                fits[fits] = donors[assignment[fits]]
                candidates = np.flatnonzero(fits)
                if candidates.size == 0:
                    break
                ratio = loads[assignment[candidates]] / caps[assignment[candidates]]
                # from the fullest donor, its heaviest site that fits
                k = int(candidates[np.lexsort((-weights[candidates], -ratio))[0]])
                donor = int(assignment[k])
                assignment[k] = e
                room -= weights[k]
                loads[donor] -= weights[k]
                loads[e] += weights[k]
                counts[donor] -= 1
                counts[e] += 1

    def _weights(
        self,
        site_list: list[str],
        leases: dict[str, LeaseRow],
        counts: dict[str, int],
        live: list[WorkerRow],
        index: dict[str, int],
        total_capacity: float,
    ) -> np.ndarray:
        """Each site's weight at one shared multiplier (see the module docstring)."""
        n = np.array([counts[s] for s in site_list], dtype=np.float64)
        reported = np.array(
            [leases[s].weight if s in leases else 0.0 for s in site_list], dtype=np.float64
        )
        multiplier = np.full(len(site_list), np.nan)
        for k, s in enumerate(site_list):
            owner = leases[s].worker_id if s in leases else None
            if owner is not None and owner in index:
                m = live[index[owner]].multiplier
                if m is not None:
                    multiplier[k] = m
                if reported[k] > 0:
                    self._mass[s] = float(reported[k]) * (m if m is not None else 1.0)
            else:
                # no live owner (revoked, in hand-over, or its owner died): its weight was
                # reported at a multiplier that is not known any more, and read at u = 1
                # it would be off by that factor (hundreds of times too heavy with short
                # slots), drawing the packing to and fro; its last rate mass stands in
                # (u = 1), else the mean per URL
                reported[k] = self._mass.get(s, 0.0)
        return shared_level_weights(n, reported, multiplier, total_capacity)

    def _write_unassigned(
        self, site_list: list[str], leases: dict[str, LeaseRow], counts: dict[str, int]
    ) -> Round:
        """No live worker: every site loses its owner (it stays unpolled until one is)."""
        owners: dict[str, str | None] = dict.fromkeys(site_list)
        owners.update({s: None for s, lease in leases.items() if lease.worker_id is not None})
        self.store.cluster.assign_leases(
            owners, self.worker_id, figures={"live_workers": 0, "total_capacity": 0.0}
        )
        return Round(0, len(site_list), 0, 0, 0.0, 0.0, 0, 0.0)
