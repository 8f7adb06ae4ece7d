"""A cluster worker's side: membership, its leased sites, fencing, moves.

``crawler run --cluster`` runs one worker of a cluster on one PostgreSQL database. This
module is what the crawl loop and the service call in that mode (``CrawlLoop.join_cluster``
makes it the loop's watch source, permit and last slot step):

* **Membership.** ``start()`` registers the worker (``cluster_workers``), then a daemon
  thread heartbeats every ``heartbeat_s`` on its own pooled connection with what the
  worker holds (sites, their weight, its scheduler's multiplier, its slot). A thread, not
  an asyncio task or an APScheduler job: a long slot (a big commit, a CPU-bound scheduler
  step) must not delay the heartbeat, or the worker would be declared dead while working.
  If its row was deleted meanwhile, it registers again under the same id.
* **The coordinator.** Every worker runs a ``Coordinator`` thread that tries for the
  coordinator lock; the holder packs (``_coordinator.py``).
* **The watch list** of a worker is the watched URLs of the sites it leases. At every
  slot start (``sync``) it reads two counters, the watch-list version and the cluster's
  assignment version (one primary-key read each; polled rather than LISTENed: a worker
  acts on a change at a slot boundary anyway, and no connection has to be held open to
  listen); when either moved it reads its leases and hands the loop an update
  (``WatchUpdate``): the sites it lost are dropped, those it gained come **with their
  saved scheduler rows**, so a moved site continues learning where its old owner left it,
  and, after a watch-list edit, the URLs of the sites it holds that the edit changed are
  read again (the sites edited since the version it last saw: ``sites.edit_version``; an
  edit costs each worker the URLs of its edited sites, not its whole share). The loop
  owns its scheduler and applies the update, constraints included
  (``crawler/service/_watch.py``); this module never changes the loop.
* **Commit, then release.** A site asked of this worker (a move between live workers:
  ``revoked_at`` set, owner and epoch kept) is polled no more from the next slot start,
  and released (owner NULL, epoch bumped) once the slots that polled it have committed:
  at once if the loop has committed its previous slot (``committed``), else in the
  transaction of this slot's commit (``Fence.release``); their polls, changes and
  learning land. A poll of it still in flight then (it outlives its slot and lands in the
  slot in which it ends) is waited for: the site's URLs stay watched (the scheduler
  learns only of URLs it watches) but are not polled (``pollable``), its lease stays in
  the fence, and it is released at the first slot start after that poll landed, as
  above. The wait ends within the coordinator's hand-over grace: once another slot of it
  would pass ``GRACE_S`` from when the site was first seen asked, what is still in
  flight is cut (deferred) and the site released (``_draining_of``). A site revoked the
  old way (epoch bumped: the coordinator took it back) is acknowledged at the next slot
  start (``ClusterStore.release_leases``). A site lost and regained between two syncs
  (its epoch changed) is a loss and a gain: its URLs are dropped and taken again with
  their saved rows (``WatchUpdate.replaced``).
* **Joining, static membership, liveness.** A worker registers as joining and is made
  live (``ready``) once loaded, taking over the sites of an earlier incarnation under the
  same name. The heartbeat renews only while the loop reaches slot starts
  (``stall_timeout_s``): liveness is the loop's progress, not the thread's.
* **Fencing.** The slot's commit carries ``fence(slot)``: this worker's id and the epochs
  of the leases it held when that slot started (noted at each sync); the store drops
  what was polled under a lease that moved (``Store.commit_slot``).
  ``fenced_polls_total`` counts the polls so dropped.
* **One slot count.** The learning rows of some schedulers hold slot numbers (``bayes``:
  the slot of a URL's last poll). A worker starting up takes the largest slot of the live
  workers (``aligned``), so rows moved between workers that tick on the same slot length
  stay consistent; a worker that skips slots (overruns) drifts by those slots.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Collection
from typing import Any

import numpy as np
from sqlalchemy import event

from crawler import schedulers
from crawler.schedulers import FloatArray, IdArray, SchedulerState
from crawler.service._coordinator import REPORT_EVERY_SLOTS, Coordinator
from crawler.service._inflight import GRACE_S
from crawler.service._renewal import RenewDeadline
from crawler.service._watch import WatchFollower, WatchUpdate
from crawler.settings import Settings
from crawler.sites import host_key, site_of
from crawler.store import JOINING, LIVE, Fence, Store, StoreError, session_name
from crawler.workers import PollJob

log = logging.getLogger("crawler.cluster")

#: seconds a gained host's jobs carry the time its old owner last asked it (longer than
#: any delay between two requests to a host: the fetcher caps a Crawl-delay at 60 s)
HANDED_OVER_KEEP_S = 120.0
#: slots whose fences are kept at most (more than the loop keeps pending, 10,000)
FENCES_KEPT = 10_010
#: a loop taking a lease change in (reading, merging and constraining the URLs and saved
#: rows of the sites gained) is making progress, not stalled, for this many stall
#: timeouts: a worker given 2M URLs at once read them for more than the 60 s stall
#: timeout under load, stopped heartbeating and lost them, again and again
TAKING_IN_STALL_TIMEOUTS = 10.0


def multiplier_of(scheduler: schedulers.Scheduler) -> float | None:
    """The scheduler's Lagrange multiplier (its water level u: x = min(1, r / u) for the
    URLs it does not poll every slot), read off its rates and frequencies; None for a
    scheduler that does not estimate rates."""
    rates = getattr(scheduler, "rates", None)
    if rates is None:
        return None
    try:
        _, p = rates()
    except (TypeError, ValueError):
        return None
    _, x = scheduler.frequencies()
    p = np.asarray(p, dtype=np.float64)
    if p.shape != x.shape or p.size == 0:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        r = -np.log1p(-np.clip(p, 0.0, 1.0 - 1e-12))
        level = r / x
    ok = (x > 1e-9) & (x < 1 - 1e-9) & np.isfinite(level) & (level > 0)
    if not ok.any():
        return None
    return float(np.median(level[ok]))


class ClusterMember:
    """This process as one worker of the cluster (see the module docstring)."""

    def __init__(self, settings: Settings, store: Store, metrics_url: str | None = None) -> None:
        if settings.capacity is None:  # the settings refuse it; say so again here
            raise ValueError("cluster mode needs capacity set")
        self.settings = settings
        self.store = store
        self.capacity = float(settings.capacity)
        self.name = settings.worker_name or f"{socket.gethostname()}:{os.getpid()}"
        self.metrics_url = metrics_url
        self.worker_id = ""
        self._pending_id = ""
        #: host key -> when (``time.time()``) the old owner of a site gained lately last
        #: asked the host
        self._handed: dict[str, float] = {}
        #: the leases the scheduler's URLs are polled under: site -> epoch (an asked site
        #: held until its polls in flight land included: ``_draining``)
        self.leases: dict[str, int] = {}
        self.fenced_polls_total = 0
        self.sites_gained_total = 0
        self.sites_lost_total = 0
        self.sites_released_total = 0
        self.rows_restored_total = 0
        #: sites held whose URLs were read again after a watch-list edit changed them
        self.sites_reread_total = 0
        self.coordinator: Coordinator | None = None
        self._site_codes: np.ndarray = np.empty(0, np.int64)
        self._site_names: list[str] = []
        self._ids: IdArray = np.empty(0, np.int64)
        self._importance: FloatArray = np.empty(0, np.float64)
        #: the sites gained at the last sync (with the URLs then leased and their sites):
        #: one URL of each is polled in the next slot (``take_probes``)
        self._gained: tuple[set[str], IdArray, list[str]] | None = None
        self._report: tuple[int, float, float | None, int] = (0, 0.0, None, 0)
        self._weights: dict[str, float] = {}
        #: scheduler slot -> the leases its polls are made under (``fence``)
        self._fences: dict[int, Fence] = {}
        #: revoked sites still held (site -> epoch), polled no more: the next slot's
        #: commit releases them (``Fence.release``)
        self._releasing: dict[str, int] = {}
        #: sites asked of this worker (site -> epoch) still held, their URLs watched and
        #: not polled, until their polls in flight land (``_draining_of``), and those URLs
        self._draining: dict[str, int] = {}
        self._held_back: IdArray = np.empty(0, np.int64)
        #: when each site asked of this worker was first seen asked (``time.monotonic()``)
        self._asked_at: dict[str, float] = {}
        #: the URLs whose polls were in flight at the loop's last slot end (``carried``)
        self._carried: set[int] = set()
        #: the last scheduler slot the loop committed (``committed``)
        self._committed_through = -1
        self._slots_since_report = 0
        #: a report is due at the next slot (the sites changed), and when the last was sent
        self._report_now = False
        self._reported_at = -math.inf
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: the worker fences itself: no poll past its renew deadline (``may_poll``)
        self.renewal = RenewDeadline(settings.effective_renew_deadline())
        #: monotonic time the crawl loop last reached a slot start (``may_poll``): the
        #: heartbeat renews only while it is recent (liveness is the loop's progress)
        self.progress_at = time.monotonic()
        self.stall_timeout_s = settings.effective_stall_timeout()
        #: monotonic time the loop began taking in a lease or watch-list change (None: not
        #: in one): until its next slot start it is making progress (``heartbeat``)
        self.taking_in_since: float | None = None
        self._stalled = False
        self._replaced_logged = False
        #: loaded and polling: the coordinator gives it sites (``ready``)
        self.is_ready = False

    # ----- lifecycle (sync: run in a thread) ---------------------------------------------

    def start(self, *, coordinate: bool = True) -> None:
        """Register, start heartbeating and (``coordinate``) trying for the coordinator
        role."""
        if not self._pending_id:  # (a start retried after the database refused keeps it)
            self._pending_id = uuid.uuid4().hex  # known before the first connection: it
            self._limit_transactions(self._pending_id)  # names the sessions
        wid = self._pending_id
        sent = time.monotonic()
        self.progress_at = sent
        self.worker_id = self.store.cluster.register_worker(
            self.capacity, name=self.name, metrics_url=self.metrics_url, worker_id=wid,
            state=JOINING,
        )  # fmt: skip
        self.renewal.renewed(sent)
        log.info("cluster worker %s (%s) registered, capacity %g", self.worker_id, self.name,
                 self.capacity)  # fmt: skip
        self._thread = threading.Thread(target=self._beat, name="crawler-heartbeat", daemon=True)
        self._thread.start()
        if coordinate:
            self.coordinator = Coordinator(self.settings, self.store, self.worker_id)
            self.coordinator.start()

    def ready(self) -> None:
        """The worker has loaded its scheduler and started its poller: the coordinator may
        give it sites from now on (a joining worker gets none: it could not poll them),
        and it takes over the leases of an earlier incarnation under the same name (static
        membership, ``ClusterStore.worker_ready``). Waits for the database, as every step does."""
        delay = 0.1
        while not self._stop.is_set():
            try:
                taken = self.store.cluster.worker_ready(self.worker_id, self.name)
            except StoreError as exc:
                log.warning("cluster worker %s not marked ready yet (retrying): %s",
                            self.worker_id, exc)  # fmt: skip
                self._stop.wait(delay)
                delay = min(2 * delay, self.settings.heartbeat_s)
                continue
            self.is_ready = True
            self.progress_at = time.monotonic()
            if taken:
                log.info("cluster worker %s (%s) took over %d site(s) of its previous "
                         "incarnation", self.worker_id, self.name, taken)  # fmt: skip
            return

    def _limit_transactions(self, worker_id: str) -> None:
        """A worker paused (SIGSTOP) inside a slot's commit holds its leases' rows FOR
        SHARE; the server ends such a session after a worker timeout, so the coordinator
        can move those sites (the commit then fails, is retried and is fenced). That timeout
        does not fire when the session is not idle (the server blocked sending a result
        the stopped client does not read, or waiting inside a pipeline): the sessions are
        therefore named after the worker (``application_name``) and the coordinator ends
        those of a worker it finds dead (``ClusterStore.end_worker_sessions``)."""
        engine = self.store.engine
        if engine.dialect.name != "postgresql":
            return
        limit = f"{int(self.settings.effective_worker_timeout() * 1000)}ms"
        app = session_name(worker_id)

        def on_connect(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            try:
                cur.execute(f"SET idle_in_transaction_session_timeout = '{limit}'")
                cur.execute(f"SET application_name = '{app}'")
            finally:
                cur.close()
            dbapi_conn.commit()

        event.listen(engine, "connect", on_connect)
        engine.pool.dispose()  # the connections opened so far, without the limit

    def stop(self) -> None:
        """Stop heartbeating and coordinating, and leave: the leases are freed at once
        (epochs bumped) so the others take the sites without waiting for a timeout."""
        self._stop.set()
        if self.coordinator is not None:
            self.coordinator.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.worker_id:
            try:
                freed = self.store.cluster.deregister_worker(self.worker_id)
                log.info("cluster worker %s left; %d site(s) freed", self.worker_id, freed)
            except StoreError as exc:
                log.warning("could not deregister (the others time this worker out): %s", exc)

    def _beat(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_s):
            try:
                self.heartbeat()
            except Exception:  # a bug must not silently end the heartbeat (then: dead)
                log.exception("heartbeat failed unexpectedly")

    def heartbeat(self) -> None:
        """One heartbeat (the thread's; tests call it directly)."""
        sites, weight, multiplier, slot = self._report
        if not self.worker_id or self._stop.is_set():
            return
        sent = time.monotonic()  # the server stamps the renewal later than this
        taking_in = self.taking_in_since
        if taking_in is not None and (
            sent - taking_in < TAKING_IN_STALL_TIMEOUTS * self.stall_timeout_s
        ):
            self.progress_at = max(self.progress_at, sent)  # reading its new share: alive
        if sent - self.progress_at > self.stall_timeout_s:
            if not self._stalled:
                log.error(
                    "cluster worker %s: its crawl loop has not reached a slot start for "
                    "%.0f s (stall_timeout_s %g): not heartbeating, so that its sites move",
                    self.worker_id,
                    sent - self.progress_at,
                    self.stall_timeout_s,
                )
                self._stalled = True
            return
        if self._stalled:
            log.warning("cluster worker %s: its crawl loop runs again", self.worker_id)
            self._stalled = False
        try:
            if not self.store.cluster.heartbeat(self.worker_id, sites, weight, multiplier, slot):
                if self._replaced():
                    return
                log.warning("cluster worker %s was forgotten; registering again", self.worker_id)
                sent = time.monotonic()
                self.store.cluster.register_worker(
                    self.capacity,
                    name=self.name,
                    metrics_url=self.metrics_url,
                    worker_id=self.worker_id,
                    slot=slot,
                    state=LIVE if self.is_ready else JOINING,
                )
        except StoreError as exc:
            log.warning("heartbeat failed: %s", exc)
            return
        self.renewal.renewed(sent)

    def _replaced(self) -> bool:
        """Whether another process registered under this worker's name took its place (a
        restart under the same name while this one still ran: two workers with one name).
        It stays out: it stops heartbeating, so it stops polling at its renew deadline."""
        try:
            others = [w for w in self.store.cluster.cluster_workers() if w.name == self.name]
        except StoreError:
            return False
        if not others:
            return False
        if not self._replaced_logged:
            log.error("cluster worker %s: another process took its place under the name %r; "
                      "it stops polling", self.worker_id, self.name)  # fmt: skip
            self._replaced_logged = True
        return True

    # ----- self-fencing (the loop's poll permit) -----------------------------------------

    async def may_poll(self, loop: WatchFollower) -> bool:
        """At a slot start, before any request: True while the last renewal is younger than
        the renew deadline. After a lapse, False until it has renewed and read its leases
        afresh (they may have moved meanwhile). Each call is the loop's progress."""
        self.progress_at = time.monotonic()
        self.taking_in_since = None  # a change taken in (if any) is done
        lapses = self.renewal.lapses_total
        if not self.renewal.valid():
            if self.renewal.lapses_total != lapses:
                log.warning(
                    "cluster worker %s has not renewed its heartbeat for %g s (its renew "
                    "deadline): not polling until it has renewed and re-read its leases",
                    self.worker_id,
                    self.renewal.deadline_s,
                )
            return False
        if not self.renewal.needs_sync:
            return True
        began = time.monotonic()
        try:
            await loop.sync_watch_list(force=True)
        except StoreError as exc:
            log.warning("leases not re-read after a lapse (not polling yet): %s", exc)
            return False
        self.renewal.synced(began)
        if self.renewal.needs_sync:
            return False
        log.warning("cluster worker %s renewed and re-read its leases: polling again",
                    self.worker_id)  # fmt: skip
        return True

    def valid(self) -> bool:
        """False once the renew deadline has passed without a renewal."""
        return self.renewal.valid()

    async def lapse(self) -> None:
        """Returns when the renew deadline passes without a renewal (a slot in flight is
        cut there)."""
        await self.renewal.lapse()

    # ----- what the crawl loop calls -----------------------------------------------------

    def fence(self, slot: int | None = None) -> Fence:
        """The leases the polls of scheduler slot ``slot`` were made under (for
        ``commit_slot``): those held when that slot started, not when it is committed. A
        commit retried after the next slot's sync would otherwise carry the new epochs of
        a site lost and regained meanwhile (a paused worker's sites come back to it when
        it wakes), and polls made under the old lease would land. An unknown slot gets no
        lease (everything fenced); None: the leases held now."""
        if slot is None:
            return Fence(self.worker_id, dict(self.leases))
        for older in [k for k in self._fences if k < slot]:  # committed: in slot order
            del self._fences[older]
        return self._fences.get(slot, Fence(self.worker_id, {}))

    def _note_fence(self, scheduler: schedulers.Scheduler) -> None:
        """At a slot start, after the sync: the leases the slot about to run polls under
        (keyed by the slot number its record will carry: select() counts it)."""
        # self.leases is replaced, never changed in place: the slots share one mapping
        self._fences[scheduler.slot + 1] = Fence(self.worker_id, self.leases, self._releasing)
        while len(self._fences) > FENCES_KEPT:
            del self._fences[next(iter(self._fences))]

    def aligned(self, state: SchedulerState) -> SchedulerState:
        """The saved ``state`` to start from: its scalars with the largest slot of the
        live workers (one slot count), and no per-URL rows: a worker starts with no site
        and loads the rows of each site it gains (``sync``)."""
        slot = state.slot
        try:
            live = self.store.cluster.live_workers(self.settings.effective_worker_timeout())
            slot = max([slot, *(w.slot for w in live if w.worker_id != self.worker_id)])
        except StoreError:
            pass
        return dataclasses.replace(
            state,
            slot=slot,
            ids=np.asarray(state.ids, np.int64)[:0],
            rows={k: np.asarray(v)[:0] for k, v in state.rows.items()},
        )

    def saved_state(self, name: str) -> SchedulerState | None:
        """The saved state of scheduler ``name`` to start from: its scalars only (read
        without a single per-URL row: a worker starts with no site, and reading the whole
        ``url_state`` would cost every worker the whole crawl's memory), ``aligned``."""
        state = self.store.cluster.load_url_states(name, [])
        return None if state is None else self.aligned(state)

    def sites(self) -> list[str]:
        """The sites this worker leases (as of the last sync): the scope of what the loop
        reads for them (rules, failures, revivals, host groups)."""
        return sorted(self.leases)

    def _versions(self) -> tuple[int, int]:
        return self.store.cluster.versions()

    def owns(self, url: str) -> bool:
        """Whether this worker leases the site of ``url`` (its discovery sources run here);
        not a site asked of it."""
        site = site_of(url)
        return site in self.leases and site not in self._draining

    def watch_list(self) -> tuple[object, IdArray, FloatArray]:
        """(version, ids, importances) of the leased sites' URLs (at start-up)."""
        version = self._versions()
        leases = self.store.cluster.leases_of(self.worker_id)
        ids, importance, site_list = self.store.cluster.active_urls_of(sorted(leases))
        self._adopt(leases, ids, site_list, importance)
        return version, ids, importance

    async def sync(
        self, scheduler: schedulers.Scheduler, version: object, *, force: bool = False
    ) -> WatchUpdate | None:
        """At a slot start: follow watch-list edits and lease changes; report weights now
        and then. The update for the loop (sites lost dropped, sites gained with their
        saved rows), or None if nothing changed since ``version``. ``scheduler`` is read,
        never changed: the loop applies the update."""
        try:
            return await self._sync(scheduler, version, force=force)
        finally:
            self._note_fence(scheduler)

    async def _sync(
        self, scheduler: schedulers.Scheduler, seen: object, *, force: bool
    ) -> WatchUpdate | None:
        import asyncio

        version = await asyncio.to_thread(self._versions)
        update: WatchUpdate | None = None
        if force or version != seen:
            # until the next slot start, the loop reads, merges and constrains the change
            # (its cost follows the share gained: minutes for millions of URLs under load)
            self.taking_in_since = time.monotonic()
            leases, revoked = await asyncio.to_thread(
                self.store.cluster.held_leases, self.worker_id
            )
            # asked sites with polls still in flight: their URLs stay watched (polled no
            # more) so that those polls land under the lease, then they are released
            draining = self._draining_of(revoked)
            held = {**leases, **draining}
            ids, importance, site_list = await self._urls_of(held, seen, version, force)
            # a site lost and regained since the last sync (its epoch changed): a loss
            # (what this worker learned of it since is fenced) and a gain (the rows saved
            # meanwhile are loaded afresh)
            regained = {s for s in held.keys() & self.leases.keys() if held[s] != self.leases[s]}
            replaced = _ids_of(ids, site_list, regained)
            saved = await self._saved_rows(scheduler, ids, replaced)
            lost = (self.leases.keys() - held.keys()) | regained
            gained = (held.keys() - self.leases.keys()) | regained
            # asked to give a site up: polled no more from this slot on, and released once
            # every slot that polled it has committed (commit, then release): at once if
            # they have, else in the commit of this slot
            # sites asked of it that it did not release in time: the coordinator took them
            # back (epoch bumped) and waits a hand-over grace more unless told that this
            # worker polls them no more, which it does not since it was asked
            taken_back = {
                s: e for s, e in self._releasing.items() if s not in leases and revoked.get(s) != e
            }
            asked = {s: e for s, e in revoked.items() if s not in draining}
            # revoked the old way (epoch bumped): acknowledged at once (hand-over at once)
            unasked = {s: self.leases[s] for s in lost - revoked.keys() - regained}
            unasked.update(taken_back)
            self._releasing = await self._release(scheduler, asked, unasked)
            update = WatchUpdate(version, ids, importance, saved, replaced)
            self._adopt(held, ids, site_list, importance)
            self._draining = draining
            self._held_back = _ids_of(ids, site_list, set(draining))
            self._gained = (gained, ids, site_list) if gained else None
            if gained:  # when the old owner last asked these hosts
                self._handed.update(await self._last_asked(gained, ids, site_list))
            self.sites_lost_total += len(lost)
            self.sites_gained_total += len(gained)
            if lost or gained:
                log.info(
                    "cluster: %d site(s) leased (+%d, -%d), %d URLs",
                    len(leases),
                    len(gained),
                    len(lost),
                    ids.size,
                )
            # report at the next slot, once the scheduler has planned with the new sites
            self._slots_since_report = REPORT_EVERY_SLOTS - 1
            self._report_now = True
        self._slots_since_report += 1
        # otherwise every REPORT_EVERY_SLOTS slots, but not more often than the coordinator's
        # rounds read them (every heartbeat): with slots tens of times a second, a report
        # per 5 slots rewrote every lease row of the worker several times a round
        if (
            self._slots_since_report >= REPORT_EVERY_SLOTS
            and update is None
            and (
                self._report_now
                or time.monotonic() - self._reported_at >= self.settings.heartbeat_s
            )
        ):
            self._slots_since_report = 0
            self._report_now = False
            self._reported_at = time.monotonic()
            weights, multiplier = self._measure(scheduler)
            self._report = (len(weights), sum(weights.values()), multiplier,
                            scheduler.slot)  # fmt: skip
            try:
                await asyncio.to_thread(
                    self.store.cluster.report_site_weights, self.worker_id, weights, multiplier
                )
            except StoreError as exc:
                log.warning("site weights not reported: %s", exc)
        return update

    async def _urls_of(
        self, leases: dict[str, int], seen: object, version: tuple[int, int], force: bool
    ) -> tuple[IdArray, FloatArray, list[str]]:
        """The URLs of the sites ``leases``: the URLs held are kept, those of the sites
        lost dropped, and those of the sites gained read; when the watch list moved too,
        the URLs of the sites held that an edit changed since the version last seen
        (``sites.edit_version``) are read again. The cost follows the change (the sites
        gained, the sites edited), not the share. Every leased site's URLs are read at
        start-up, after a lapse (``force``) and when the version seen is unknown."""
        import asyncio

        held = isinstance(seen, tuple) and isinstance(seen[0], int) and seen[0] <= version[0]
        if force or not held:
            return await asyncio.to_thread(self.store.cluster.active_urls_of, sorted(leases))
        assert isinstance(seen, tuple)
        edited: set[str] = set()
        if seen[0] != version[0]:
            edited = await asyncio.to_thread(self.store.cluster.sites_edited_since, seen[0])
            edited &= leases.keys() & self.leases.keys()
        self.sites_reread_total += len(edited)
        gained = (leases.keys() - self.leases.keys()) | edited
        dropped = (self.leases.keys() - leases.keys()) | edited
        new_ids, new_imp, new_sites = await asyncio.to_thread(
            self.store.cluster.active_urls_of, sorted(gained)
        )
        codes = [k for k, name in enumerate(self._site_names) if name not in dropped]
        keep = np.isin(self._site_codes, np.asarray(codes, dtype=np.int64))
        names = self._site_names
        kept_sites = [names[c] for c in self._site_codes[keep].tolist()]
        ids = np.concatenate([self._ids[keep], new_ids])
        importance = np.concatenate([self._importance[keep], new_imp])
        site_list = kept_sites + new_sites
        order = np.argsort(ids, kind="stable")
        return ids[order], importance[order], [site_list[k] for k in order.tolist()]

    def carried(self, url_ids: Collection[int]) -> None:
        """At a slot's end: the URLs whose polls are still in flight (carried past their
        slot). An asked site with one of them is released once they land (``sync``)."""
        self._carried = set(url_ids)

    def _draining_of(self, asked: dict[str, int]) -> dict[str, int]:
        """The sites of ``asked`` (site -> epoch) held under that lease and polled until now
        whose polls are still in flight: kept until those land (their rows, changes and
        learning commit under the lease, as the old owner's slot in flight does), then
        released. Kept only while the release still comes within the coordinator's
        hand-over grace: once another slot would take the wait past ``GRACE_S`` from when
        the site was first seen asked, its polls in flight are cut (deferred, as a lost
        site's are) and it is released; the coordinator would otherwise take it back and
        fence what lands."""
        now = time.monotonic()
        self._asked_at = {s: self._asked_at.get(s, now) for s in asked}
        if not self._carried or not self._ids.size:
            return {}
        running = np.fromiter(self._carried, np.int64, len(self._carried))
        pos = np.clip(np.searchsorted(self._ids, running), 0, self._ids.size - 1)
        ours = self._ids[pos] == running
        codes = Counter(self._site_codes[pos[ours]].tolist())
        out: dict[str, int] = {}
        for code, n in codes.items():
            site = self._site_names[code]
            epoch = asked.get(site)
            if epoch is None or self.leases.get(site) != epoch:
                continue
            waited = now - self._asked_at[site]
            if waited + self.settings.slot_seconds > GRACE_S:
                log.warning(
                    "cluster: site %s asked of this worker %.1f s ago: its %d poll(s) in "
                    "flight are cut and it is released",
                    site,
                    waited,
                    n,
                )
                continue
            if site not in self._draining:
                log.info(
                    "cluster: site %s asked of this worker with %d poll(s) in flight: "
                    "released once they land",
                    site,
                    n,
                )
            out[site] = epoch
        return out

    def pollable(self, ids: IdArray) -> IdArray:
        """``ids`` less the URLs of the sites asked of this worker that it still holds for
        their polls in flight (polled no more)."""
        held_back = self._held_back
        if not held_back.size or not ids.size:
            return ids
        return ids[~np.isin(ids, held_back)]

    def list_version(self, version: object) -> int:
        """The watch-list version within a version pair ``sync`` gave (the other half is
        the cluster's assignment version)."""
        assert isinstance(version, tuple) and isinstance(version[0], int)
        return version[0]

    def committed(self, slot: int, fenced: int = 0) -> None:
        """The loop committed scheduler slot ``slot`` (``fenced`` of its polls dropped)."""
        self._committed_through = max(self._committed_through, slot)
        self.fenced_polls_total += fenced

    async def _release(
        self, scheduler: schedulers.Scheduler, asked: dict[str, int], unasked: dict[str, int]
    ) -> dict[str, int]:
        """Tell the coordinator this worker polls some sites (site -> the epoch it polled
        them under) no more: those taken back from it (``unasked``) at once, and those
        ``asked`` of it at once too if every slot so far has committed (the last one polled
        them). Returns the asked sites left to release in this slot's commit, after the
        earlier ones (all of them when a slot is still to commit, or on a failure; the
        coordinator then waits the grace for those taken back)."""
        import asyncio

        now = dict(unasked)
        later = dict(asked)
        if asked and self._committed_through >= scheduler.slot:
            now.update(asked)
            later = {}
        if not now:
            return later
        try:
            self.sites_released_total += await asyncio.to_thread(
                self.store.cluster.release_leases, self.worker_id, now
            )
        except StoreError as exc:
            log.warning("sites polled no more not released yet (asked ones: with the next "
                        "commit; taken back: after the grace): %s", exc)  # fmt: skip
            return dict(asked)
        return later

    async def _saved_rows(
        self, scheduler: schedulers.Scheduler, ids: IdArray, replaced: IdArray
    ) -> SchedulerState | None:
        """The saved learning rows of the URLs of ``ids`` the scheduler does not watch yet,
        and of those it ``replaced`` (None: none, or not readable: those URLs restart
        learning)."""
        import asyncio

        known, _ = scheduler.frequencies()
        new = np.union1d(ids[~np.isin(ids, known, assume_unique=True)], replaced)
        if new.size == 0:
            return None
        try:
            saved = await asyncio.to_thread(
                self.store.cluster.load_url_states, scheduler.name, new.tolist()
            )
        except StoreError as exc:
            log.warning("saved rows of the gained sites not loaded (they restart): %s", exc)
            return None
        if saved is None or saved.ids.size == 0:
            return None
        self.rows_restored_total += int(saved.ids.size)  # handed to the loop to restore
        return saved

    @property
    def watched_ids(self) -> IdArray:
        """The URLs of the leased sites, as of the last sync."""
        return self._ids

    def take_probes(self, scheduler: schedulers.Scheduler) -> IdArray:
        """The most wanted URL of each site gained at the last sync, to poll in this slot
        (each once: then cleared)."""
        gained, self._gained = self._gained, None
        if gained is None:
            return np.empty(0, np.int64)
        return _probes(scheduler, *gained)

    async def _last_asked(
        self, gained: set[str], ids: IdArray, site_list: list[str]
    ) -> dict[str, float]:
        """Host key -> when (``time.time()``) the old owner of the ``gained`` sites last
        asked the host, from the poll-log rows of their URLs: a live owner releases a site
        only once every slot that polled it has committed, so its last poll is there (a
        dead one stopped at its renew deadline, a share of a worker timeout before its
        sites moved). Hosts not polled lately are left out (no wait). When the rows cannot
        be read, the hand-over itself (now): the old owner asked at the latest then."""
        import asyncio

        now = time.time()
        chosen = _ids_of(ids, site_list, gained)
        try:
            last = await asyncio.to_thread(
                self.store.cluster.last_polled, chosen.tolist(), HANDED_OVER_KEEP_S
            )
        except StoreError as exc:
            log.warning("last polls of the gained sites not read (waiting from now): %s", exc)
            return {host_key(s): now for s in gained}
        site_of_id = {
            int(i): s for i, s in zip(ids.tolist(), site_list, strict=True) if s in gained
        }
        out: dict[str, float] = {}
        for url_id, at in last.items():
            host = host_key(site_of_id[url_id])
            out[host] = min(now, max(at, out.get(host, 0.0)))
        return out

    def mark(self, jobs: list[PollJob]) -> list[PollJob]:
        """The slot's jobs, those of hosts gained lately carrying when their old owner
        last asked them: the fetcher waits the host's delay from then before its first
        request here (``PollJob.handed_over_at``)."""
        if not self._handed:
            return jobs
        now = time.time()
        self._handed = {h: at for h, at in self._handed.items() if now - at < HANDED_OVER_KEEP_S}
        handed = self._handed
        return [
            job._replace(handed_over_at=at) if (at := handed.get(host_key(job.host))) else job
            for job in jobs
        ]

    def _adopt(
        self, leases: dict[str, int], ids: IdArray, site_list: list[str], importance: FloatArray
    ) -> None:
        self.leases = dict(leases)
        self._importance = importance
        names, codes = np.unique(np.asarray(site_list, dtype=object), return_inverse=True)
        self._site_names = [str(n) for n in names.tolist()]
        self._site_codes = np.asarray(codes, dtype=np.int64).reshape(-1)
        self._ids = ids

    def _measure(self, scheduler: schedulers.Scheduler) -> tuple[dict[str, float], float | None]:
        """Each leased site's weight (sum of its URLs' wanted polls per slot) and the
        scheduler's multiplier."""
        ids, x = scheduler.frequencies()
        weights = dict.fromkeys(self.leases.keys() - self._draining.keys(), 0.0)
        if ids.size and self._ids.size:
            pos = np.searchsorted(self._ids, ids)
            pos = np.clip(pos, 0, self._ids.size - 1)
            ok = self._ids[pos] == ids
            sums = np.bincount(
                self._site_codes[pos[ok]], weights=x[ok], minlength=len(self._site_names)
            )
            for name, value in zip(self._site_names, sums.tolist(), strict=True):
                if name in weights and math.isfinite(value):
                    weights[name] = float(value)
        self._weights = weights
        return weights, multiplier_of(scheduler)


def _ids_of(ids: IdArray, site_list: list[str], chosen: set[str]) -> IdArray:
    """The URLs of ``ids`` (whose sites are ``site_list``) on the sites ``chosen``."""
    if not chosen:
        return np.empty(0, np.int64)
    mask = np.fromiter((s in chosen for s in site_list), dtype=bool, count=len(site_list))
    return np.asarray(ids[mask], dtype=np.int64)


def _probes(
    scheduler: schedulers.Scheduler, gained: set[str], ids: IdArray, site_list: list[str]
) -> IdArray:
    """The most wanted URL of each gained site among those the scheduler's guard lets be
    polled now (not paused, not within an upper bound's gap: a site whose most wanted URL is
    bounded is probed by another). A site taken over from a dead (or paused) worker is
    polled by its new owner in the very next slot, whatever its URLs' places in the new
    owner's stride: a light site would otherwise wait for its own long interval, and the
    operator (and the acceptance test) want a moved site seen again within a few slots. One
    poll per gained site, once per move."""
    candidate = np.isin(ids, scheduler.allowed(_ids_of(ids, site_list, gained)))
    ids = ids[candidate]
    site_list = [s for s, keep in zip(site_list, candidate.tolist(), strict=True) if keep]
    known, x = scheduler.frequencies()
    order = np.argsort(known, kind="stable")
    known, x = known[order], x[order]
    want = np.zeros(ids.size)
    if known.size:
        pos = np.clip(np.searchsorted(known, ids), 0, known.size - 1)
        hit = known[pos] == ids
        want[hit] = x[pos[hit]]
    best: dict[str, tuple[float, int]] = {}
    for uid, site, w in zip(ids.tolist(), site_list, want.tolist(), strict=True):
        if site in gained and (site not in best or w > best[site][0]):
            best[site] = (w, uid)
    return np.array(sorted(uid for _, uid in best.values()), dtype=np.int64)
