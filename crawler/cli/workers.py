"""``crawler workers``: the cluster of workers as the database sees it.

Reads only: ``cluster_workers`` (heartbeat ages by the DATABASE's clock, so this machine's
clock does not matter), ``cluster_leases`` and ``cluster_state``, through the store's
cluster API. A worker is *live* when its heartbeat is younger than ``worker_timeout_s``
(the same setting the coordinator uses; ``--timeout`` overrides it) and it is not stopping.
Per worker: heartbeat age, live/dead, the sites it holds by the leases (and what it last
reported), its sites' weight against its capacity, and its lease epochs (min..max; every
site with ``--leases``). Then the coordinator and, when the learned weights exceed what the
live workers can poll, the shortfall line: how many more workers of which capacity.

Clustering needs PostgreSQL (advisory locks, one server for all workers): on SQLite the
command says so and exits 2.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from crawler.cli._app import app
from crawler.cli._common import (
    USAGE,
    ConfigOption,
    DatabaseOption,
    JsonOption,
    err_console,
    fail,
    out_console,
    print_json,
    settings_from,
    store_errors,
)

if TYPE_CHECKING:
    from crawler.store import ClusterStateRow, LeaseRow, WorkerRow

NEEDS_POSTGRES = (
    "clustering needs PostgreSQL: several `crawler run --cluster` workers share one "
    "PostgreSQL database (advisory locks, one server); {url} is SQLite, which stays "
    "single-worker"
)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def shortfall_line(state: ClusterStateRow | None, capacity: float | None) -> str | None:
    """The operator's sentence when the learned weights need more workers, else None."""
    if state is None or state.shortfall_workers <= 0:
        return None
    each = f" of capacity {capacity:g}" if capacity else ""
    return (
        f"the learned weights need {state.shortfall_workers} more worker(s){each} "
        f"(weight {state.total_weight:.1f} polls/slot against {state.total_capacity:.1f} "
        f"of live capacity; short by {state.shortfall_capacity:.1f})"
    )


def cluster_document(
    workers: list[WorkerRow],
    leases: list[LeaseRow],
    state: ClusterStateRow | None,
    timeout_s: float,
    per_site: bool,
) -> dict[str, Any]:
    """What ``crawler workers --json`` prints (also the table's source)."""
    held: dict[str | None, list[LeaseRow]] = defaultdict(list)
    for lease in leases:
        held[lease.worker_id].append(lease)
    rows = []
    for w in workers:
        mine = held.get(w.worker_id, [])
        epochs = [lease.epoch for lease in mine]
        weight = sum(lease.weight for lease in mine)
        row: dict[str, Any] = {
            "worker_id": w.worker_id,
            "name": w.name,
            "live": w.heartbeat_age_s <= timeout_s and w.state == "live",
            "state": w.state,
            "heartbeat_age_s": round(w.heartbeat_age_s, 3),
            "started_at": _iso(w.started_at),
            "capacity": w.capacity,
            "sites": len(mine),
            "weight": round(weight, 4),
            "load": round(weight / w.capacity, 4) if w.capacity > 0 else None,
            "reported_sites": w.sites,
            "reported_weight": w.weight,
            "multiplier": w.multiplier,
            "slot": w.slot,
            "epoch_min": min(epochs) if epochs else None,
            "epoch_max": max(epochs) if epochs else None,
            "metrics_url": w.metrics_url,
            "coordinator": state is not None and state.coordinator == w.worker_id,
        }
        if per_site:
            row["leases"] = {lease.site: lease.epoch for lease in mine}
        rows.append(row)
    live = [r for r in rows if r["live"]]
    capacities = sorted({float(r["capacity"]) for r in live} or {0.0})
    doc: dict[str, Any] = {
        "workers": rows,
        "live_workers": len(live),
        "dead_workers": len(rows) - len(live),
        "sites": len(leases),
        "unassigned_sites": len(held.get(None, [])),
        "weight": round(sum(lease.weight for lease in leases), 4),
        "live_capacity": sum(float(r["capacity"]) for r in live),
        "timeout_s": timeout_s,
        "coordinator": None,
        "state": None,
        "shortfall": None,
    }
    if state is not None:
        names = {w.worker_id: w.name for w in workers}
        doc["coordinator"] = (
            None
            if state.coordinator is None
            else {
                "worker_id": state.coordinator,
                "name": names.get(state.coordinator),
                "since": _iso(state.coordinator_since),
            }
        )
        doc["state"] = {
            "version": state.version,
            "live_workers": state.live_workers,
            "total_weight": state.total_weight,
            "total_capacity": state.total_capacity,
            "shortfall_workers": state.shortfall_workers,
            "shortfall_capacity": state.shortfall_capacity,
            "overloads_total": state.overloads_total,
            "moves_total": state.moves_total,
            "threshold": state.threshold,
            "states": state.states,
            "updated_at": _iso(state.updated_at),
        }
        line = shortfall_line(state, capacities[-1] or None)
        if line is not None:
            doc["shortfall"] = {
                "workers": state.shortfall_workers,
                "capacity_each": capacities[-1] or None,
                "capacity_missing": state.shortfall_capacity,
                "message": line,
            }
    return doc


def _print_table(doc: dict[str, Any], per_site: bool) -> None:
    table = Table(title="crawler workers")
    columns = ("name", "live", "heartbeat", "sites", "weight / capacity", "epochs", "coord.")
    for col in columns:
        table.add_column(col, justify="left" if col in ("name", "live") else "right")
    for r in doc["workers"]:
        epochs = "-" if r["epoch_min"] is None else f"{r['epoch_min']}..{r['epoch_max']}"
        table.add_row(
            escape(r["name"]),
            "[green]live[/]" if r["live"] else f"[red]dead[/] ({r['state']})",
            f"{r['heartbeat_age_s']:.1f} s ago",
            str(r["sites"]),
            f"{r['weight']:.1f} / {r['capacity']:g}",
            epochs,
            "*" if r["coordinator"] else "",
        )
    out_console.print(table)
    coord = doc["coordinator"]
    who = (
        "none" if coord is None else f"{coord['name'] or coord['worker_id']} since {coord['since']}"
    )
    out_console.print(
        f"{doc['live_workers']} live, {doc['dead_workers']} dead; {doc['sites']} sites "
        f"({doc['unassigned_sites']} unassigned); weight {doc['weight']:.1f} polls/slot against "
        f"{doc['live_capacity']:g} live capacity; coordinator: {escape(who)}",
        highlight=False,
    )
    if doc["state"] is not None:
        s = doc["state"]
        out_console.print(
            f"assignment version {s['version']}; overloads {s['overloads_total']}, moves "
            f"{s['moves_total']}; automaton Th = {s['threshold']}, N = {s['states']}",
            highlight=False,
        )
    if doc["shortfall"] is not None:
        out_console.print(f"[bold yellow]{escape(doc['shortfall']['message'])}[/]")
    if per_site:
        for r in doc["workers"]:
            for site, epoch in sorted(r.get("leases", {}).items()):
                out_console.print(f"  {escape(r['name'])}  {escape(site)}  epoch {epoch}")


@app.command()
def workers(
    config: str | None = ConfigOption,
    database_url: str | None = DatabaseOption,
    as_json: bool = JsonOption,
    leases: bool = typer.Option(False, "--leases", help="Every site's lease and epoch."),
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        min=0.0,
        help="Seconds of silence after which a worker is dead "
        "(default: the worker_timeout_s setting, or 3 heartbeats + 2 s).",
    ),
) -> None:
    """The cluster's workers: heartbeat age, live or dead, sites, weight against capacity,
    lease epochs, the coordinator, and how many more workers the learned weights need."""
    from crawler.store import Store

    settings = settings_from(config, database_url=database_url)
    if settings.database_url.lower().startswith("sqlite"):
        fail(NEEDS_POSTGRES.format(url=settings.database_url), USAGE)
    timeout_s = float(settings.effective_worker_timeout() if timeout is None else timeout)
    with store_errors():
        store = Store(settings.database_url)
        try:
            store.upgrade()
            doc = cluster_document(
                store.cluster.cluster_workers(),
                store.cluster.leases(),
                store.cluster.cluster_state(),
                timeout_s,
                leases,
            )
        finally:
            store.close()
    if as_json:
        print_json(doc)
        return
    if not doc["workers"] and not doc["sites"]:
        err_console.print("no cluster workers registered (start `crawler run --cluster`)")
        return
    _print_table(doc, leases)
