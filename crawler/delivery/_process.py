"""The deliverer in a process of its own, started and stopped by the service and dying
with it.

>>> delivery = DeliveryProcess(settings, metrics, exclusive_lock=settings.cluster)
>>> delivery.start()   # ... delivery.stop()

Why a process: as a thread of the service, the deliverer shared the crawl's interpreter
lock. Sampled with py-spy (``--gil``: who holds the lock) while it drained a backlog
beside the crawl, 44 % of the lock's samples were the deliverer's: httpx's request
machinery alone 35 % of them, reading the contexts (change texts, learned rates) 24 %,
claims 7 %, difflib 4 %. ``benchmarks/delivery.py`` measured the crawl's polls/s 24 % to
50 % lower with the thread delivering (docs/results.md). In a process of its own (with its
own interpreter, database engine and HTTP client) none of that takes the crawl's lock; the
crawl and the deliverer share only the database, as before.

- **Started and stopped by the service**: ``start`` forks it from the fork server the crawl
  workers start from (``crawler.ipc.start_context``; spawned where there is none): a fork of
  a fresh interpreter, so no copy of the service's threads, connections or event loop. It
  then imports what only it needs (the store: 1.2-1.9 s of CPU); spawned, it imported the
  crawler anew: ready 2.0-2.9 s after its start instead of 3.5-3.9 s, with 1.2-1.9 s of CPU
  instead of 2.2-2.5 s (load 11, 2026-11-27, the crawl workers started first, as in the
  service). Preloaded by the fork server it was ready in 0.2 s, but the crawl workers then
  waited for those imports at the server's start: the same start in all, so it is not.
  ``stop`` asks it to stop (sends in flight are abandoned: their claims are released by the
  next deliverer and sent again, same ids), waits ``timeout``, then terminates it. At nice
  19 on a busy machine the child's own end takes longer (measured 3.6 to 22 s, 2.7 to 5.8 s
  at nice 0, load 18): its threads share one interpreter lock, so a watcher thread at the
  service's priority cannot end it sooner.
- **Dies with the service**: the child blocks on a pipe from the service; when the service
  dies (a kill -9 included) the pipe closes and the child exits at once (``os._exit``), so
  no orphan keeps sending while the next service starts its own deliverer.
- **Metrics** are counted in the child and sent to the service over a second pipe, where a
  thread applies them to the service's registry (``crawler_delivery_*`` stay on the
  service's metrics port).
- **A lower scheduling priority** (``delivery_nice``, 19 by default: the lowest; 0 keeps
  the service's): the child lowers its priority once it has imported what it runs (the
  service waits for its start; imports at the lowest priority on a busy machine would
  make it wait longer) and before the deliverer starts, so every thread the deliverer
  starts runs at that priority (Linux: a thread's niceness is its own, inherited by the
  threads it starts). Delivery then uses the CPU the crawl leaves and never takes the
  crawl's. Measured (benchmarks/delivery.py, docs/results.md): at the service's priority,
  on a 2-core machine kept busy by other jobs, the delivery process's CPU (about 3 to 8
  ms per event) came out of the crawl's share and cost it 25 % to 66 % of its polls/s;
  at nice 19 the crawl keeps its share. The price is delivery's speed while the crawl
  keeps every core busy: events then wait in the outbox (in the database, never in
  memory) until the crawl leaves CPU, which a paced crawl (a slot every
  ``slot_seconds``) does between slots.
- **A CPU budget while the machine is busy** (``delivery_busy_share``, ``_pace.py``): the
  niceness above did not keep delivery out of the crawl's way (measured on an idle 2-core
  machine: the niced process took a third of a core in the crawl's gaps and the crawl lost
  14 % to 19 % of its polls/s), so the deliverer also keeps its own CPU under a share of
  one core while the other processes keep the machine busy.
- **Logs**: the child logs to stderr (inherited) at the service's level and format.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from multiprocessing.connection import Connection
from typing import Any

from crawler.delivery._deliverer import Deliverer
from crawler.delivery._pace import CpuPace
from crawler.ipc import main_not_imported, start_context
from crawler.logs import configure_logging
from crawler.metrics import CrawlerMetrics
from crawler.settings import Settings

log = logging.getLogger("crawler.delivery")


class _Counter:
    def __init__(self, send: Any) -> None:
        self._send = send

    def inc(self, amount: float = 1) -> None:
        self._send(("written", amount))


class PipeMetrics:
    """The part of ``CrawlerMetrics`` the deliverer uses, sent to the service's process."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.delivery_events_written_total = _Counter(self._send)

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._lock, contextlib.suppress(OSError):  # the service is gone: we exit soon
            self._conn.send(message)

    def observe_delivery_attempt(self, destination: int, outcome: str) -> None:
        self._send(("attempt", destination, outcome))

    def set_outbox(self, depth: int, oldest_age_s: float) -> None:
        self._send(("outbox", depth, oldest_age_s))

    def observe_delivery_paced(self, seconds: float) -> None:
        self._send(("paced", seconds))


def apply_metric(metrics: CrawlerMetrics, message: tuple[Any, ...]) -> None:
    """One message of ``PipeMetrics``, applied to the service's metrics."""
    kind = message[0]
    if kind == "written":
        metrics.delivery_events_written_total.inc(message[1])
    elif kind == "attempt":
        metrics.observe_delivery_attempt(message[1], message[2])
    elif kind == "outbox":
        metrics.set_outbox(message[1], message[2])
    elif kind == "paced":
        metrics.observe_delivery_paced(message[1])


def lower_priority(niceness: int) -> None:
    """Add ``niceness`` to the calling thread's priority (before the deliverer starts its
    threads, which inherit it); where the system has no ``os.nice``, or refuses, delivery
    runs at the service's."""
    if niceness <= 0 or not hasattr(os, "nice"):
        return
    try:
        os.nice(niceness)
    except OSError as exc:
        log.warning("delivery process: cannot lower its priority (%s)", exc)


def _child(
    settings: Settings,
    control: Connection,
    metrics_conn: Connection | None,
    exclusive_lock: bool,
    log_level: int,
) -> None:
    """The delivery process: the deliverer's loop in its main thread; a watcher thread
    stops it when asked, and exits the process when the service is gone."""
    configure_logging(logging.getLevelName(log_level), settings.log_format)
    metrics = PipeMetrics(metrics_conn) if metrics_conn is not None else None
    with contextlib.suppress(ImportError):  # the notify extra: seconds to import, not at a send
        import apprise  # noqa: F401

    def ready() -> None:  # imported and started: ``wait_ready`` returns
        with contextlib.suppress(OSError):
            control.send("ready")

    pace = CpuPace(settings.delivery_busy_share, settings.delivery_busy_above)
    deliverer = Deliverer(
        settings, metrics, exclusive_lock=exclusive_lock, on_ready=ready, pace=pace
    )

    def watch() -> None:
        try:
            control.recv()  # "stop"
        except (EOFError, OSError):  # the service died: so do we, sends and all
            os._exit(0)
        deliverer.stop(timeout=0)

    threading.Thread(target=watch, name="crawler-delivery-watch", daemon=True).start()
    lower_priority(settings.delivery_nice)  # imported at the service's: a prompt start
    deliverer.run_here()


class DeliveryProcess:
    """``start()`` runs the deliverer in a child process; ``stop()`` ends it."""

    def __init__(
        self, settings: Settings, metrics: CrawlerMetrics | None = None, *, exclusive_lock: bool
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.exclusive_lock = exclusive_lock
        self._proc: Any = None
        self._control: Connection | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else int(self._proc.pid)

    @property
    def exitcode(self) -> int | None:
        """0 when it stopped as asked; negative: the signal that ended it."""
        return None if self._proc is None else self._proc.exitcode

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Until the child has imported what it runs and released a stopped deliverer's
        claims (in a cluster: until it waits for the delivery lock). A benchmark's timing
        starts then: the service pays that once, at its start."""
        if self._control is None or not self._control.poll(timeout):
            return False
        with contextlib.suppress(EOFError, OSError):
            return bool(self._control.recv() == "ready")
        return False

    def start(self) -> None:
        ctx = start_context(_child)
        control, child_control = ctx.Pipe()
        metrics_in: Connection | None = None
        metrics_out: Connection | None = None
        if self.metrics is not None:
            metrics_in, metrics_out = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_child,
            args=(
                self.settings,
                child_control,
                metrics_out,
                self.exclusive_lock,
                log.getEffectiveLevel(),
            ),
            name="crawler-delivery",
            daemon=True,
        )
        with main_not_imported():
            self._proc.start()
        child_control.close()
        self._control = control
        if metrics_in is not None and metrics_out is not None:
            metrics_out.close()
            self._reader = threading.Thread(
                target=self._read_metrics, args=(metrics_in,), name="crawler-delivery-metrics"
            )
            self._reader.daemon = True
            self._reader.start()

    def _read_metrics(self, conn: Connection) -> None:
        assert self.metrics is not None
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the child ended
                return
            try:
                apply_metric(self.metrics, message)
            except Exception:  # a metric must never stop the reading
                log.exception("delivery metric %r", message)

    def stop(self, timeout: float = 30.0) -> None:
        if self._proc is None:
            return
        if self._control is not None:
            with contextlib.suppress(OSError):
                self._control.send("stop")
        self._proc.join(timeout)
        if self._proc.is_alive():
            log.warning("delivery process did not stop within %.0f s: terminating it", timeout)
            self._proc.terminate()
            self._proc.join(5)
        if self._control is not None:
            self._control.close()
        if self._reader is not None:
            self._reader.join(5)
