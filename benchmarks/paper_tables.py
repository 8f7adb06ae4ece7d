"""The papers' experiments as Markdown tables: mean ratio to the limit and convergence.

Paper 002's environments (A, B, C with changes overwriting, switch80k, switch1k) with
every registered scheduler (FPA only where C >= 2: it degenerates at C = 1; and not
weighted_proportional, which equals proportional without importance), and the
thesis environments with the thesis's contestants (fpa, lakg = CGLA with importance,
bayes, weighted_proportional, plus uniform and optimal for reference), and the host-group
environments (hosts: the scheduler is told the hosts' politeness caps; hosts-truncated: it
is not, and each slot's polls over a host's cap are dropped as a polite fetcher would),
both measured against the constrained limit, with every registered scheduler.

    python -m benchmarks.paper_tables                 # 400,000 slots, 3 seeds, 2 processes
    python -m benchmarks.paper_tables --quick         # 40,000 slots, 2 seeds
    python -m benchmarks.paper_tables --envs A,C --schedulers lakg,bayes --json out.json
    python -m benchmarks.paper_tables --envs hosts,hosts-truncated --host-slots 20000
    python -m benchmarks.paper_tables --envs thesis-switch-disappear --schedulers bayes \
        --param bayes.model=disappear      # rows labelled "bayes (model=disappear)"

Per (environment, scheduler): the mean over seeds of the ratio to the limit over the
second half of the run (weighted hits when the URLs carry importance), its standard
deviation across seeds, the thesis's retrieved importance, and the slots needed to reach
90% and 95% of the limit (first slot whose trailing window average reaches it; median
over the seeds that got there, with a count when some never did).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from crawler import schedulers
from crawler.sim.catalog import EnvSpec, get_env
from crawler.sim.lineup import PREFERRED, importable
from crawler.sim.parallel import Job, run_jobs
from crawler.sim.runner import RunResult

PAPER_ENVS = ("A", "B", "C", "switch80k", "switch1k")
THESIS_ENVS = (
    "thesis",
    "thesis-disappear",
    "thesis100",
    "thesis100-disappear",
    "thesis-switch",
    "thesis-switch-disappear",
)
THESIS_SCHEDULERS = ("uniform", "weighted_proportional", "optimal", "fpa", "lakg", "bayes")
HOST_ENVS = ("hosts", "hosts-truncated")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    slots = args.slots or (40_000 if args.quick else 400_000)
    thesis_slots = args.thesis_slots or slots
    host_slots = args.host_slots or (20_000 if args.quick else 100_000)
    seeds = list(range(1, (args.seeds or (2 if args.quick else 3)) + 1))
    envs = args.envs.split(",") if args.envs else [*PAPER_ENVS, *THESIS_ENVS, *HOST_ENVS]
    wanted = args.schedulers.split(",") if args.schedulers else None
    jobs, notes = _plan(envs, wanted, slots, thesis_slots, seeds, args.window, host_slots)
    jobs = _with_params(jobs, args.param or [])
    for note in notes:
        _log(note)
    if not jobs:
        _log("nothing to run")
        return 1
    total_slots = sum(job.slots for job in jobs)
    _log(f"{len(jobs)} runs, {total_slots:,} slots in all, on {args.workers} process(es)")
    started = time.perf_counter()
    finished = 0

    def on_done(index: int, result: RunResult | str) -> None:
        nonlocal finished
        finished += 1
        job = jobs[index]
        elapsed = time.perf_counter() - started
        eta = elapsed / finished * (len(jobs) - finished)
        what = f"{job.scheduler} on {job.env.name}, seed {job.seed}"
        if isinstance(result, str):
            _log(f"[{finished}/{len(jobs)}] {what}: FAILED {result}")
        else:
            _log(
                f"[{finished}/{len(jobs)}] {what}: ratio {result.summary['final_ratio']:.4f} "
                f"({result.seconds:.0f} s; elapsed {elapsed:.0f} s, about {eta:.0f} s left)"
            )

    outcomes = run_jobs(jobs, workers=args.workers, on_done=on_done)
    rows = _aggregate(jobs, outcomes)
    hosts_run = any(job.env.hosts for job in jobs)
    print(_markdown(rows, slots, thesis_slots, len(seeds), host_slots if hosts_run else None))
    loss = _truncation_loss(rows)
    if loss:
        print("\n" + loss)
    for note in notes:
        print(f"\n_{note}_")
    if args.json:
        document = {
            "slots": slots,
            "thesis_slots": thesis_slots,
            "host_slots": host_slots,
            "seeds": seeds,
            "notes": notes,
            "rows": rows,
            "runs": [
                out.to_dict() if isinstance(out, RunResult) else {"error": out} for out in outcomes
            ],
        }
        Path(args.json).write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
        _log(f"JSON written to {args.json}")
    return 0


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="40,000 slots and 2 seeds")
    parser.add_argument("--slots", type=int, help="slots per run [400,000]")
    parser.add_argument("--thesis-slots", type=int, help="slots per thesis run [--slots]")
    parser.add_argument(
        "--host-slots", type=int, help="slots per host-group run [100,000; --quick 20,000]"
    )
    parser.add_argument("--seeds", type=int, help="seeds per (env, scheduler) [3]")
    parser.add_argument("--workers", type=int, default=2, help="processes [2]")
    parser.add_argument("--window", type=int, help="moving-average window [max(1000, S/200)]")
    parser.add_argument("--envs", help="comma-separated environments [all]")
    parser.add_argument("--schedulers", help="comma-separated schedulers [per env, see doc]")
    parser.add_argument(
        "--param",
        action="append",
        metavar="NAME.KEY=VALUE",
        help="a scheduler parameter (repeatable; VALUE read as JSON, else text); its rows "
        "are labelled with it",
    )
    parser.add_argument("--json", metavar="FILE", help="also write every run's summary here")
    return parser.parse_args(argv)


def _plan(
    envs: list[str],
    wanted: list[str] | None,
    slots: int,
    thesis_slots: int,
    seeds: list[int],
    window: int | None,
    host_slots: int | None = None,
) -> tuple[list[Job], list[str]]:
    registered = schedulers.names()
    order = [name for name in PREFERRED if name in registered]
    order += [name for name in registered if name not in order]
    usable, failed = importable(order)
    notes = [f"skipped {name}: it does not import ({reason})" for name, reason in failed.items()]
    if wanted:
        unknown = [name for name in wanted if name not in registered]
        notes += [f"skipped {name}: not a registered scheduler" for name in unknown]
    jobs: list[Job] = []
    fpa_skipped: list[str] = []
    for env_name in envs:
        spec = get_env(env_name)
        names = list(THESIS_SCHEDULERS) if spec.weighted else list(order)
        if wanted:
            names = [name for name in names if name in wanted]
        names = [name for name in names if name in usable]
        if spec.capacity < 2 and "fpa" in names and not (wanted and "fpa" in wanted):
            names.remove("fpa")
            fpa_skipped.append(env_name)
        if not spec.weighted and "weighted_proportional" in names and "proportional" in names:
            names.remove("weighted_proportional")  # identical to proportional without weights
        run_slots = thesis_slots if spec.weighted else slots
        if spec.hosts and host_slots:
            run_slots = host_slots
        jobs += [
            Job(name, spec, run_slots, seed=seed, window=window) for name in names for seed in seeds
        ]
    if fpa_skipped:
        notes.append(
            f"fpa left out on {', '.join(fpa_skipped)} (C = 1: it needs several polls per "
            "slot; ask for it with --schedulers to run it anyway)"
        )
    return jobs, notes


def _with_params(jobs: list[Job], specs: list[str]) -> list[Job]:
    """The jobs with ``NAME.KEY=VALUE`` parameters given to scheduler NAME's runs."""
    params: dict[str, dict[str, Any]] = {}
    for spec in specs:
        target, sep, value = spec.partition("=")
        name, dot, key = target.partition(".")
        if not sep or not dot or not name or not key:
            raise SystemExit(f"--param wants NAME.KEY=VALUE, got {spec!r}")
        try:
            parsed: Any = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        params.setdefault(name, {})[key] = parsed
    return [
        replace(job, params={**job.params, **params[job.scheduler]})
        if job.scheduler in params
        else job
        for job in jobs
    ]


def _label(job: Job) -> str:
    """A row's scheduler column: the name, and the parameters it was given if any."""
    if not job.params:
        return job.scheduler
    given = ", ".join(f"{key}={value}" for key, value in sorted(job.params.items()))
    return f"{job.scheduler} ({given})"


def _whole_slot_share(env: EnvSpec) -> float | None:
    """The whole-slot limit as a share of the analytic limit (1.0 when updates disappear:
    the optimum then polls the best URLs every slot, already whole intervals). Under host
    caps, the constrained whole-slot bound over the constrained limit."""
    if env.model != "overwrite":
        return 1.0
    if env.host_cap > 0:
        built = env.build(0)
        p = built.p.copy()
        w = None if built.importance is None else built.importance.copy()
        caps = schedulers.Limits.build(p.size, built.groups, built.caps)
        fractional = schedulers.constrained_limit(p, built.capacity, w, limits=caps)
        bound = schedulers.constrained_whole_slot_limit(p, built.capacity, w, limits=caps)
        return bound / fractional
    built = env.build(0)
    p, w = built.p.copy(), None if built.importance is None else built.importance.copy()
    fractional = schedulers.limit(p, built.capacity, w)
    return schedulers.whole_slot_limit(p, built.capacity, w) / fractional


def _aggregate(jobs: list[Job], outcomes: list[RunResult | str]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[RunResult | str]] = {}
    shares: dict[str, float | None] = {}
    for job, outcome in zip(jobs, outcomes, strict=True):
        groups.setdefault((job.env.name, _label(job)), []).append(outcome)
        if job.env.name not in shares:
            shares[job.env.name] = _whole_slot_share(job.env)
    rows: list[dict[str, Any]] = []
    for (env_name, name), outs in groups.items():
        done = [out for out in outs if isinstance(out, RunResult)]
        errors = [out for out in outs if isinstance(out, str)]
        ratios = [float(out.summary["final_ratio"] or 0.0) for out in done]
        row: dict[str, Any] = {
            "env": env_name,
            "scheduler": name,
            "runs": len(done),
            "errors": errors[:1],
            "ratio": statistics.fmean(ratios) if ratios else None,
            "ratio_sd": statistics.stdev(ratios) if len(ratios) > 1 else None,
            "retrieved_importance": _mean(out.summary["retrieved_importance"] for out in done),
            "value_per_slot": _mean(out.summary["value_per_slot"] for out in done),
            "limit": _mean(out.summary["limit"] for out in done),
            "whole_slot_share": shares[env_name],
            "seconds": _mean(out.seconds for out in done),
        }
        for level in ("90", "95"):
            reached = [
                int(v) for out in done if (v := out.summary[f"slots_to_{level}"]) is not None
            ]
            row[f"to_{level}"] = statistics.median(reached) if reached else None
            row[f"reached_{level}"] = len(reached)
        rows.append(row)
    return rows


def _truncation_loss(rows: list[dict[str, Any]]) -> str:
    """One line per scheduler run on both host environments: its ratio with the caps told
    and with its polls truncated per host, and the difference (what telling it saves)."""
    by = {(row["env"], row["scheduler"]): row["ratio"] for row in rows}
    lines = []
    for (env, name), told in by.items():
        if env != "hosts" or told is None:
            continue
        cut = by.get(("hosts-truncated", name))
        if cut is None:
            continue
        lines.append(
            f"- {name}: {told:.4f} with the caps, {cut:.4f} truncated per host: "
            f"{told - cut:+.4f} of the constrained limit"
        )
    if not lines:
        return ""
    return "Host caps told to the scheduler vs its polls truncated per host:\n" + "\n".join(lines)


def _mean(values: Any) -> float | None:
    clean = [float(v) for v in values if v is not None and v == v]
    return statistics.fmean(clean) if clean else None


def _markdown(
    rows: list[dict[str, Any]],
    slots: int,
    thesis_slots: int,
    seeds: int,
    host_slots: int | None = None,
) -> str:
    lines = [
        f"Ratio to the limit over the second half of each run (mean ± sd over {seeds} "
        f"seed(s)); {slots:,} slots per run"
        + (f" ({thesis_slots:,} on the thesis environments)" if thesis_slots != slots else "")
        + (f" ({host_slots:,} on the host environments)" if host_slots else "")
        + ". 'to 90%' / 'to 95%': median slot at which the trailing-window average first "
        "reaches that share of the limit (k/n: only k of n seeds got there; - : none). "
        "'bound': the best any schedule polling at whole-slot intervals can do, as a share of "
        "the limit (whole_slot_limit / limit; no scheduler can exceed it). On the host "
        "environments the limit and the bound are the constrained ones.",
        "",
        "| env | scheduler | ratio | ± sd | bound | retrieved imp. | value/slot | limit "
        "| to 90% | to 95% | s/run |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row["errors"] and not row["runs"]:
            lines.append(
                f"| {row['env']} | {row['scheduler']} | failed: {row['errors'][0][:60]} "
                "| | | | | | | | |"
            )
            continue
        lines.append(
            f"| {row['env']} | {row['scheduler']} | {_fmt(row['ratio'])} "
            f"| {_fmt(row['ratio_sd'])} | {_fmt(row['whole_slot_share'])} "
            f"| {_fmt(row['retrieved_importance'])} "
            f"| {_fmt(row['value_per_slot'])} | {_fmt(row['limit'])} "
            f"| {_reach(row, '90')} | {_reach(row, '95')} | {_fmt(row['seconds'], 0)} |"
        )
    return "\n".join(lines)


def _reach(row: dict[str, Any], level: str) -> str:
    value, count = row[f"to_{level}"], row[f"reached_{level}"]
    if value is None:
        return "-"
    text = f"{value:,.0f}"
    return text if count == row["runs"] else f"{text} ({count}/{row['runs']})"


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return ""
    return f"{value:.{digits}f}" if abs(value) < 10 else f"{value:,.{min(digits, 1)}f}"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
