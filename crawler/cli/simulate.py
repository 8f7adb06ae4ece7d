"""``crawler simulate``: schedulers against the papers' change environments, and the
packing of sites onto crawler nodes (``--env pack-...``, crawler.sim.packing_runner)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from crawler import schedulers
from crawler.cli._app import app
from crawler.sim.catalog import EnvSpec, env_names, get_env
from crawler.sim.lineup import default_lineup, importable
from crawler.sim.packing_catalog import PARAMS as PACKING_PARAMS
from crawler.sim.packing_catalog import get_packing_env, packing_env_names
from crawler.sim.packing_runner import PackingResult, run_packing
from crawler.sim.parallel import Job, default_workers, run_jobs
from crawler.sim.params import parse_params, route_params
from crawler.sim.plot import PlotUnavailableError, require_matplotlib
from crawler.sim.runner import RunResult

#: show a progress bar when a command simulates at least this many slots in all
_PROGRESS_FROM = 50_000
_TABLE_ROWS = 5
#: table width when stdout is not a terminal
_PIPE_WIDTH = 110

_ENV_HELP = (
    f"Environment: {', '.join(env_names())}, or custom (Zipf, set with --n/--capacity/"
    "--alpha/--beta/--model). Those options also override a named environment. Packing "
    f"of sites onto crawler nodes (paper 003): {', '.join(packing_env_names())}, with "
    f"-p {'/'.join(PACKING_PARAMS)}=VALUE."
)
#: the scheduler runs' default length (a packing environment has its own)
_DEFAULT_SLOTS = 20_000
#: the slots at which the paper's packing tables report, plus the run's last
_CHECKPOINTS = (50, 200, 500, 1000, 5000, 10_000)


@app.command()
def simulate(
    env: Annotated[str, typer.Option("--env", "-e", help=_ENV_HELP)] = "A",
    scheduler: Annotated[
        list[str] | None,
        typer.Option(
            "--scheduler",
            "-s",
            help="Scheduler to run (repeatable). Default: every registered one that imports "
            "(fpa only when C >= 2, weighted_proportional only with importance).",
        ),
    ] = None,
    slots: Annotated[
        int | None,
        typer.Option(
            "--slots",
            min=1,
            help=f"Slots to simulate [{_DEFAULT_SLOTS:,}; packing: the paper's run length].",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the changes and schedulers.")] = 0,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            "-p",
            help="KEY=VALUE for every scheduler that takes KEY, or SCHEDULER.KEY=VALUE "
            "(repeatable), e.g. N=2500 or lakg.gamma=1.3.",
        ),
    ] = None,
    window: Annotated[
        int | None,
        typer.Option("--window", min=1, help="Window of the series, in slots [max(1000, S/200)]."),
    ] = None,
    n: Annotated[int | None, typer.Option("--n", min=1, help="Number of URLs.")] = None,
    capacity: Annotated[
        float | None, typer.Option("--capacity", "-C", help="Polls per slot.")
    ] = None,
    alpha: Annotated[float | None, typer.Option("--alpha", help="Zipf magnitude.")] = None,
    beta: Annotated[float | None, typer.Option("--beta", help="Zipf skew.")] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Change model: overwrite or disappear.")
    ] = None,
    change_ratio: Annotated[
        float | None,
        typer.Option("--change-ratio", help="Thesis environments: sum(p) / C [2]."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document on stdout, nothing else.")
    ] = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write ratio-to-limit curves to this PNG.")
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help="Processes to run schedulers on [one per core]."),
    ] = None,
) -> None:
    """Run schedulers on a simulated environment and compare them with the analytic limit."""
    err = Console(stderr=True)
    out = Console(width=None if sys.stdout.isatty() else _PIPE_WIDTH)
    if env in packing_env_names():
        _simulate_packing(
            env,
            slots,
            seed,
            param or [],
            capacity,
            given={
                "--scheduler": scheduler,
                "--n": n,
                "--alpha": alpha,
                "--beta": beta,
                "--model": model,
                "--change-ratio": change_ratio,
                "--window": window,
                "--plot": plot,
                "--jobs": jobs,
            },
            as_json=as_json,
            out=out,
            err=err,
        )
        return
    if slots is None:
        slots = _DEFAULT_SLOTS
    if plot is not None:
        try:
            require_matplotlib()  # before the simulation, not after it
        except PlotUnavailableError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
    try:
        spec = get_env(
            env,
            n=n,
            capacity=capacity,
            alpha=alpha,
            beta=beta,
            model=model,
            change_ratio=change_ratio,
        )
        chosen, skipped = _choose(scheduler, spec)
        shared, scoped = parse_params(param or [])
        per_scheduler = route_params(chosen, shared, scoped)
        results = _run_all(chosen, spec, slots, seed, per_scheduler, window, jobs, err)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    for name, reason in skipped.items():
        err.print(f"skipped {name}: {reason}", highlight=False, soft_wrap=True)
    if plot is not None:
        from crawler.sim.plot import plot_ratios

        try:
            written = plot_ratios(results, plot, title=f"{spec.name}: {spec.description}")
        except OSError as exc:
            err.print(f"[red]error:[/red] cannot write the plot: {exc}", soft_wrap=True)
            raise typer.Exit(1) from None
        err.print(f"plot written to {written}", highlight=False)
    if as_json:
        document = {
            "env": spec.to_dict(),
            "slots": slots,
            "seed": seed,
            "skipped": skipped,
            "runs": [res.to_dict() for res in results],
        }
        sys.stdout.write(json.dumps(document, allow_nan=False) + "\n")
        return
    _print_tables(out, spec, results)


def _simulate_packing(
    env: str,
    slots: int | None,
    seed: int,
    params: list[str],
    capacity: float | None,
    *,
    given: dict[str, Any],
    as_json: bool,
    out: Console,
    err: Console,
) -> None:
    try:
        used = [flag for flag, value in given.items() if value is not None]
        if used:
            raise ValueError(f"{used[0]} does not apply to the packing environment {env}")
        shared, scoped = parse_params(params)
        if scoped:
            raise ValueError(f"packing environments take KEY=VALUE, not {next(iter(scoped))}.KEY")
        spec = get_packing_env(env, capacity=capacity, **shared)
        total = spec.slots if slots is None else slots
        show_bar = err.is_terminal and not as_json
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:>9,.0f}/{task.total:,.0f} slots"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=err,
            transient=True,
            disable=not show_bar,
        )
        task = progress.add_task(spec.name, total=total)
        with progress:
            result = run_packing(
                spec,
                total,
                seed=seed,
                progress=lambda done: progress.update(task, completed=done),
            )
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if as_json:
        document = result.to_dict()
        document["checkpoints"] = [
            {"slot": slot, "nodes": nodes, "total_weight": weight}
            for slot in _checkpoints(result.slots)
            for nodes, weight in [result.at(slot)]
        ]
        sys.stdout.write(json.dumps(document, allow_nan=False) + "\n")
        return
    _print_packing(out, result)


def _checkpoints(slots: int) -> list[int]:
    return sorted({s for s in _CHECKPOINTS if s <= slots} | {slots})


def _print_packing(out: Console, result: PackingResult) -> None:
    spec, summary = result.spec, result.summary
    out.print(f"[bold]{spec.name}[/bold]: {spec.description}", highlight=False)
    out.print(
        f"page automata N={spec.states}, gamma={spec.gamma:g}; overload automaton "
        f"Th={spec.threshold}, N={spec.overload_states}; register {spec.register}; "
        + (f"{spec.fixed_nodes} fixed nodes" if spec.fixed_nodes else "new nodes opened")
        + f"; seed {result.seed}",
        highlight=False,
    )
    series = Table(title="nodes used and total weight over time", title_justify="left")
    for column in ("slot", "nodes", "total weight"):
        series.add_column(column, justify="right")
    series.add_row("0", str(len(result.initial_loads)), f"{sum(result.initial_loads):.2f}")
    for slot in _checkpoints(result.slots):
        nodes, weight = result.at(slot)
        series.add_row(f"{slot:,}", str(nodes), f"{weight:.2f}")
    out.print(series)
    table = Table(title="against the paper", title_justify="left")
    for column in ("", "nodes", "total weight", "node loads"):
        table.add_column(column, justify="left" if not column else "right")

    def loads(values: list[float]) -> str:
        return ", ".join(f"{v:.2f}" for v in values)

    table.add_row(
        f"ours after {result.slots:,} slots",
        str(summary["nodes"]),
        f"{summary['total_weight']:.2f}",
        loads(result.final_loads),
    )
    if spec.paper is not None:
        table.add_row(
            f"paper after {spec.paper.slots:,} slots",
            str(spec.paper.nodes),
            f"{spec.paper.total_weight:.2f}",
            "",
        )
    table.add_row(
        "ours at slot 0",
        str(len(result.initial_loads)),
        f"{sum(result.initial_loads):.2f}",
        loads(result.initial_loads),
    )
    table.add_row(
        "optimum (x = p, BFD)",
        str(summary["optimum_nodes"]),
        f"{summary['optimum_weight']:.2f}",
        loads(result.optimum_loads),
    )
    out.print(table)
    counts = Table(title="overloads and moves (the paper reports none)", title_justify="left")
    for column in ("", "whole run", "2nd half"):
        counts.add_column(column, justify="left" if not column else "right")
    counts.add_row(
        "node-slots overloaded", f"{summary['overloads']:,}", f"{summary['overloads_2nd_half']:,}"
    )
    counts.add_row(
        "moves chosen / shrinks chosen", f"{summary['moves']:,} / {summary['shrinks']:,}", ""
    )
    counts.add_row(
        "sites moved", f"{summary['moved_sites']:,}", f"{summary['moved_sites_2nd_half']:,}"
    )
    counts.add_row("weight moved", f"{summary['moved_weight']:.2f}", "")
    counts.add_row("page steps down by shrinking", f"{summary['shrunk_pages']:,}", "")
    counts.add_row("nodes opened", f"{summary['new_nodes']:,}", "")
    rate = summary["update_rate_2nd_half"]
    paper_rate = summary["paper_update_rate"]
    counts.add_row(
        "hits per slot / pages",
        "",
        f"{rate:.4f}" + ("" if paper_rate is None else f" (paper {paper_rate:g})"),
    )
    out.print(counts)
    split = result.split
    shares = Table(
        title=f"capacity split over the final {int(split['nodes'])} nodes: expected hits per "
        "slot (regular polling, true p)",
        title_justify="left",
    )
    shares.add_column("")
    shares.add_column("hits/slot", justify="right")
    shares.add_column("of the limit", justify="right")
    for label, key in (
        ("one scheduler over all pages (the limit)", "limit"),
        (f"shared multiplier, budgets (total {split['packed_total']:.2f})", "shared"),
        ("shared multiplier, each node at full capacity", "shared_full"),
        ("the run's packing, each node at its optimum", "learned"),
    ):
        shares.add_row(label, f"{split[key]:.2f}", f"{split[key] / split['limit']:.4%}")
    out.print(shares)


def _choose(requested: list[str] | None, spec: EnvSpec) -> tuple[list[str], dict[str, str]]:
    if not requested:
        chosen, skipped = default_lineup(spec.capacity, spec.weighted)
        if not chosen:
            raise ValueError("no scheduler could be imported")
        return chosen, skipped
    unknown = [name for name in requested if name not in schedulers.names()]
    if unknown:
        raise ValueError(
            f"unknown scheduler {unknown[0]!r}: choose from {', '.join(schedulers.names())}"
        )
    chosen, failed = importable(dict.fromkeys(requested))
    if failed:
        name, reason = next(iter(failed.items()))
        raise ValueError(f"scheduler {name!r} cannot be loaded: {reason}")
    return chosen, {}


def _run_all(
    chosen: list[str],
    spec: EnvSpec,
    slots: int,
    seed: int,
    per_scheduler: dict[str, dict[str, Any]],
    window: int | None,
    workers: int | None,
    err: Console,
) -> list[RunResult]:
    jobs = [
        Job(name, spec, slots, seed=seed, params=per_scheduler.get(name, {}), window=window)
        for name in chosen
    ]
    long_run = slots * len(chosen) >= _PROGRESS_FROM
    show_bar = long_run and err.is_terminal
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:>11,.0f}/{task.total:,.0f} slots"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not show_bar,
    )
    task = progress.add_task(f"{len(jobs)} run(s) on {spec.name}", total=slots * len(jobs))

    def on_progress(done: Sequence[int]) -> None:
        progress.update(task, completed=sum(done))

    def on_done(index: int, result: RunResult | str) -> None:
        if long_run and isinstance(result, RunResult):
            progress.console.print(
                f"{result.scheduler}: {slots:,} slots in {result.seconds:.1f} s, "
                f"ratio {_fmt(result.summary['final_ratio'])}",
                highlight=False,
            )

    count = default_workers(len(jobs)) if workers is None else max(1, workers)
    with progress:
        outcomes = run_jobs(jobs, workers=count, on_progress=on_progress, on_done=on_done)
    results: list[RunResult] = []
    for job, outcome in zip(jobs, outcomes, strict=True):
        if isinstance(outcome, str):
            raise ValueError(f"{job.scheduler} failed: {outcome}")
        results.append(outcome)
    return results


def _print_tables(out: Console, spec: EnvSpec, results: list[RunResult]) -> None:
    weighted = spec.weighted
    out.print(f"[bold]{spec.name}[/bold]: {spec.description}", highlight=False)
    for res in results:
        out.print(_run_table(res, weighted))
    out.print(_summary_table(spec, results))


def _run_table(res: RunResult, weighted: bool) -> Table:
    params = ", ".join(f"{k}={v}" for k, v in sorted(res.params.items()))
    title = f"{res.scheduler}" + (f" ({params})" if params else "")
    table = Table(title=title, title_justify="left")
    table.add_column("slots", justify="right")
    table.add_column("hits/slot", justify="right")
    table.add_column("hits/poll", justify="right")
    table.add_column("retrieved imp.", justify="right")
    table.add_column("limit" + (" (w)" if weighted else ""), justify="right")
    table.add_column("ratio", justify="right")
    series = res.series
    count = len(series["slot"])
    rows = sorted({round(i * (count - 1) / max(1, _TABLE_ROWS - 1)) for i in range(_TABLE_ROWS)})
    for i in rows:
        table.add_row(
            f"{series['slot'][i]:,.0f}",
            _fmt(series["hits_per_slot"][i]),
            _fmt(series["hits_per_poll"][i]),
            _fmt(series["retrieved_importance"][i]),
            _fmt(series["limit"][i]),
            _fmt(series["ratio"][i]),
        )
    summary = res.summary
    table.add_section()
    table.add_row(
        "2nd half",
        _fmt(summary["hits_per_slot"]),
        _fmt(summary["hits_per_poll"]),
        _fmt(summary["retrieved_importance"]),
        _fmt(summary["limit"]),
        f"[bold]{_fmt(summary['final_ratio'])}[/bold]",
    )
    table.caption = f"windows of {res.window:,} slots; ratio = value per slot / limit"
    return table


def _summary_table(spec: EnvSpec, results: list[RunResult]) -> Table:
    table = Table(
        title=f"{spec.name}, {results[0].slots:,} slots, seed {results[0].seed}: second half",
        title_justify="left",
    )
    for column in ("scheduler", "hits/slot", "hits/poll", "retrieved imp.", "ratio"):
        table.add_column(column, justify="left" if column == "scheduler" else "right")
    table.add_column("to 90%", justify="right")
    table.add_column("to 95%", justify="right")
    table.add_column("seconds", justify="right")
    for res in sorted(results, key=lambda r: -_num(r.summary["final_ratio"])):
        s = res.summary
        table.add_row(
            res.scheduler,
            _fmt(s["hits_per_slot"]),
            _fmt(s["hits_per_poll"]),
            _fmt(s["retrieved_importance"]),
            _fmt(s["final_ratio"]),
            _slots(s["slots_to_90"]),
            _slots(s["slots_to_95"]),
            f"{res.seconds:.1f}",
        )
    table.caption = (
        f"limit {_fmt(results[0].summary['limit'])} "
        + ("weighted hits" if spec.weighted else "hits")
        + f" per slot; 'to 90%': first slot whose trailing {results[0].window:,}-slot "
        "average reaches 90% of the limit (- = never)"
    )
    return table


def _num(value: float | int | None) -> float:
    return float("-inf") if value is None or value != value else float(value)


def _fmt(value: float | int | None) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.2f}"


def _slots(value: float | int | None) -> str:
    return "-" if value is None else f"{int(value):,}"
