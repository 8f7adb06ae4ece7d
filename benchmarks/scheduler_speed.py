"""Time per slot and memory per URL of every registered scheduler, at n = 10k, 100k, 1M.

    python -m benchmarks.scheduler_speed                       # C = n / 100
    python -m benchmarks.scheduler_speed --sizes 10000,100000 --schedulers lakg,bayes

A slot is ``select()`` plus ``feedback(ids, hits)`` with random hits (30% hit rate).
Each scheduler first runs some warm-up slots, then the median over the timed slots is
reported, next to a bare ``numpy.argpartition`` of n floats for top-C measured in the same
run (the floor of any top-k scheduler). Memory per URL: the sum of ``nbytes`` of the
NumPy arrays the scheduler holds (attributes, and those inside dicts, lists and tuples),
divided by n; and tracemalloc's count of the memory allocated while adding the URLs and
running a few slots, divided by n.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np

from crawler import schedulers
from crawler.sim.catalog import zipf
from crawler.sim.lineup import PREFERRED, importable

HIT_RATE = 0.3


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    sizes = [int(float(size)) for size in args.sizes.split(",")]
    registered = schedulers.names()
    order = [name for name in PREFERRED if name in registered]
    order += [name for name in registered if name not in order]
    if args.schedulers:
        order = [name for name in args.schedulers.split(",")]
    names, failed = importable(order)
    for name, reason in failed.items():
        _log(f"skipped {name}: {reason}")
    rows: list[dict[str, Any]] = []
    for n in sizes:
        capacity = max(1.0, n / 100)
        timed = args.slots or max(10, min(300, 3_000_000 // n))
        warmup = args.warmup if args.warmup is not None else max(5, timed // 3)
        base = _argpartition_time(n, int(capacity), timed)
        rows.append({"n": n, "scheduler": "numpy.argpartition", "median_ms": base * 1e3})
        _log(f"n={n:,}: argpartition {base * 1e3:.3f} ms")
        for name in names:
            try:
                row = _measure(name, n, capacity, timed, warmup, args.seed)
            except Exception as exc:  # report and go on with the others
                _log(f"n={n:,}: {name} FAILED {type(exc).__name__}: {exc}")
                rows.append({"n": n, "scheduler": name, "error": f"{type(exc).__name__}: {exc}"})
                continue
            row["vs_argpartition"] = row["median_ms"] / (base * 1e3)
            rows.append(row)
            _log(
                f"n={n:,}: {name} {row['median_ms']:.3f} ms/slot, "
                f"{row['array_bytes_per_url']:.0f} B/URL in arrays"
            )
    print(_markdown(rows))
    return 0


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated n")
    parser.add_argument("--schedulers", help="comma-separated names [all registered]")
    parser.add_argument("--slots", type=int, help="timed slots per scheduler [by n]")
    parser.add_argument("--warmup", type=int, help="untimed slots first [slots / 3]")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def _rates(n: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Zipf(0.9, 1.0) change probabilities, shuffled (oracles need rates)."""
    p = zipf(0.9, 1.0, n)
    return np.random.default_rng(0).permutation(p)


def _build(name: str, n: int, capacity: float, seed: int) -> schedulers.Scheduler:
    sched = schedulers.create(name, capacity=capacity, seed=seed)
    rates = _rates(n) if type(sched).needs_rates else None
    sched.add(np.arange(n, dtype=np.int64), rates=rates)
    return sched


def _slot(sched: schedulers.Scheduler, rng: np.random.Generator) -> None:
    ids = sched.select()
    sched.feedback(ids, rng.random(ids.size) < HIT_RATE)


def _measure(
    name: str, n: int, capacity: float, timed: int, warmup: int, seed: int
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    sched = _build(name, n, capacity, seed)
    add_seconds = time.perf_counter() - started
    for _ in range(warmup):
        _slot(sched, rng)
    times = []
    for _ in range(timed):
        t0 = time.perf_counter()
        _slot(sched, rng)
        times.append(time.perf_counter() - t0)
    array_bytes = _array_bytes(sched)
    del sched
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sched = _build(name, n, capacity, seed)
        for _ in range(3):
            _slot(sched, rng)
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return {
        "n": n,
        "scheduler": name,
        "median_ms": statistics.median(times) * 1e3,
        "p90_ms": float(np.percentile(times, 90)) * 1e3,
        "add_s": add_seconds,
        "array_bytes_per_url": array_bytes / n,
        "traced_bytes_per_url": traced / n,
    }


def _argpartition_time(n: int, k: int, repeats: int) -> float:
    rng = np.random.default_rng(0)
    values = rng.random(n)
    for _ in range(3):
        np.argpartition(values, n - k)
    times = []
    for _ in range(repeats):
        values = rng.random(n) if n <= 100_000 else values + 1e-9
        t0 = time.perf_counter()
        np.argpartition(values, n - k)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _array_bytes(obj: object) -> int:
    """Bytes of the NumPy arrays an object holds, one level into containers."""
    seen: set[int] = set()
    total = 0

    def visit(value: object, depth: int) -> None:
        nonlocal total
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, np.ndarray):
            total += value.nbytes if value.base is None else 0
        elif depth < 3 and isinstance(value, dict):
            for item in value.values():
                visit(item, depth + 1)
        elif depth < 3 and isinstance(value, list | tuple | set):
            for item in value:
                visit(item, depth + 1)
        elif depth < 3 and hasattr(value, "__dict__") and not isinstance(value, type):
            for item in vars(value).values():
                visit(item, depth + 1)

    visit(obj, 0)
    return total


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "Time per slot (select + feedback, random hits), median over timed slots; C = n/100.",
        "",
        "| n | scheduler | ms/slot (median) | p90 ms | x argpartition | add() s "
        "| array B/URL | traced B/URL |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(
                f"| {row['n']:,} | {row['scheduler']} | failed: {row['error'][:60]} | | | | | |"
            )
        elif row["scheduler"] == "numpy.argpartition":
            lines.append(
                f"| {row['n']:,} | numpy.argpartition | {row['median_ms']:.3f} | | 1.0 | | | |"
            )
        else:
            lines.append(
                f"| {row['n']:,} | {row['scheduler']} | {row['median_ms']:.3f} "
                f"| {row['p90_ms']:.3f} | {row['vs_argpartition']:.1f} | {row['add_s']:.2f} "
                f"| {row['array_bytes_per_url']:.0f} | {row['traced_bytes_per_url']:.0f} |"
            )
    return "\n".join(lines)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
