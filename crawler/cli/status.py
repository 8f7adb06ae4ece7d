"""``crawler status``: ask a running service how it is, over its health/metrics port.

Synchronous HTTP from the command line is httpx's job (aiohttp stays the crawl's client):
one ``GET /healthz``, then one ``GET /metrics`` summarized (slots, polls by outcome, the
age of the last slot, the scheduler). Exit status 0 when the service answers healthy, 1
otherwise (unhealthy, unreachable, or not a crawler): the convention of container health
checks (Docker reserves 2), so ``crawler status --no-metrics`` can be an image's
HEALTHCHECK. The address defaults to the service's own settings (``metrics_host``,
``metrics_port``; a wildcard bind address is asked on loopback).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import typer
from prometheus_client.parser import text_string_to_metric_families
from rich.markup import escape

from crawler.cli._app import app
from crawler.cli._common import (
    ConfigOption,
    JsonOption,
    err_console,
    out_console,
    print_json,
    settings_from,
)

if TYPE_CHECKING:
    import httpx

UNHEALTHY = 1
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def service_url(host: str, port: int) -> str:
    """The base URL that reaches a service bound to ``host:port`` from this machine."""
    host = _WILDCARDS.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def probe(base: str, timeout_s: float, metrics: bool = True) -> dict[str, Any]:
    """The service's answer as a document: ``healthy``, ``status``, ``reason``, and
    ``metrics`` (a summary; None when not asked or not readable); never raises for
    network trouble (``error`` says what happened)."""
    import httpx  # here, not at the top: every other command would load it (0.16 s)

    doc: dict[str, Any] = {"url": base, "healthy": False, "status": None, "reason": None}
    try:
        with httpx.Client(base_url=base, timeout=timeout_s, follow_redirects=False) as client:
            health = client.get("/healthz")
            doc["status"] = health.status_code
            doc["reason"] = health.text.strip()[:500]
            doc["healthy"] = health.status_code == 200
            if health.status_code not in (200, 503):
                doc["healthy"] = False
                doc["reason"] = f"unexpected answer {health.status_code} from /healthz"
            if metrics:
                doc["metrics"] = _summary(client)
    except httpx.HTTPError as exc:
        doc["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        doc["reason"] = f"no answer from {base} ({doc['error']})"
    return doc


def _summary(client: httpx.Client) -> dict[str, Any] | None:
    """The few figures an operator looks at first, from the Prometheus exposition."""
    answer = client.get("/metrics")
    if answer.status_code != 200:
        return None
    try:
        families = list(text_string_to_metric_families(answer.text))
    except ValueError:
        return None
    out: dict[str, Any] = {"polls": {}}
    for family in families:
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "crawler_slots_total":
                out["slots"] = int(value)
            elif name == "crawler_polls_total":
                out["polls"][labels.get("outcome", "?")] = int(value)
            elif name == "crawler_watched_urls":
                out["watched_urls"] = int(value)
            elif name == "crawler_capacity_polls_per_slot":
                out["capacity_polls_per_slot"] = value
            elif name == "crawler_slot_length_seconds":
                out["slot_seconds"] = value
            elif name == "crawler_hit_ratio" and not math.isnan(value):
                out["hit_ratio"] = value
            elif name == "crawler_last_slot_timestamp_seconds" and value > 0:
                out["last_slot_age_s"] = round(max(0.0, time.time() - value), 1)
            elif name == "crawler_scheduler_info":
                out["scheduler"] = labels.get("scheduler")
            elif name == "crawler_build_info":
                out["version"] = labels.get("version")
    return out


@app.command()
def status(
    url: str | None = typer.Option(
        None, "--url", help="The service's health/metrics address (default: from the settings)."
    ),
    timeout: float = typer.Option(5.0, "--timeout", help="Seconds to wait for each answer."),
    metrics: bool = typer.Option(
        True, "--metrics/--no-metrics", help="Also summarize /metrics (--no-metrics: health only)."
    ),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Is the running service healthy? Asks its /healthz (and /metrics); exit 0 if healthy,
    1 otherwise. Usable as a container HEALTHCHECK."""
    if url is None:
        settings = settings_from(config)
        if not settings.metrics_port:
            err_console.print("[bold red]error:[/] the service serves no health port "
                              "(metrics_port = 0): pass --url", highlight=False)  # fmt: skip
            raise typer.Exit(UNHEALTHY)
        url = service_url(settings.metrics_host, settings.metrics_port)
    doc = probe(url.rstrip("/"), timeout, metrics)
    if as_json:
        print_json(doc)
    else:
        _print(doc)
    if not doc["healthy"]:
        raise typer.Exit(UNHEALTHY)


def _print(doc: dict[str, Any]) -> None:
    """The answer on stdout (it is the command's data: ``crawler status | grep`` works)."""
    verdict = "[green]healthy[/]" if doc["healthy"] else "[bold red]unhealthy[/]"
    out_console.print(
        f"{verdict}: {escape(str(doc['reason']))} ({doc['url']})", highlight=False, soft_wrap=True
    )
    summary = doc.get("metrics")
    if not summary:
        return
    polls = summary.get("polls", {})
    parts = [
        f"scheduler {summary.get('scheduler', '?')}",
        f"{summary.get('watched_urls', '?')} URLs",
        f"{summary.get('slots', '?')} slots",
        f"last slot {summary['last_slot_age_s']} s ago" if "last_slot_age_s" in summary else "",
        "polls " + ", ".join(f"{k} {v}" for k, v in sorted(polls.items())) if polls else "",
    ]
    out_console.print(escape("; ".join(p for p in parts if p)), highlight=False, soft_wrap=True)
