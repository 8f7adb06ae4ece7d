"""Time per slot and memory per URL of every registered scheduler, at n = 10k, 100k, 1M.

    python -m benchmarks.scheduler_speed                       # C = n / 100
    python -m benchmarks.scheduler_speed --sizes 10000,100000 --schedulers lakg,bayes
    python -m benchmarks.scheduler_speed --sizes 1000000 --schedulers bayes --constraints
    python -m benchmarks.scheduler_speed --sizes 1000000 --schedulers bayes \
        --constraints --mix heavy

A slot is ``select()`` plus ``feedback(ids, hits)`` with random hits (30% hit rate).
Each scheduler first runs its warm-up slots, at least n / C of them: a fresh crawl polls
every URL once for its baseline in about that many slots, and those slots are not the ones
a crawl lives in (at a million URLs under the realistic constraints, slots 5-15 cost 2.1x
the argpartition and the slots after 100 3.1-4.0x: 2026-11-28). Then the median over the
timed slots (at least 50: the due URLs come in waves tens of slots long) is
reported, next to a bare ``numpy.argpartition`` of n floats for top-C timed just before
each of the scheduler's slots (interleaved, so that a shared, noisy machine slows both
alike; the floor of any top-k scheduler). Both are timed twice: wall clock, and the CPU
time of the thread (``time.thread_time``), which leaves out the time the process waits
for a core while other jobs run: on a loaded machine the wall-clock ratio swings several
fold from run to run, the CPU-time one far less. ``--constraints`` also measures every scheduler
under constraints, in one of two mixes (``--mix``):

- ``realistic`` (default): the URLs dealt onto n / 1,000 hosts of Zipf sizes (host j holds
  a share proportional to 1 / j), every URL in its host's group as the service sets them,
  the 100 largest hosts capped at 1.5 polls per slot (the service gives the scheduler only
  the caps that can bind), and 1% of the URLs bounded (0.5% with a lower bound of 0.01,
  0.5% with an upper bound of 0.1 polls per slot);
- ``heavy``: n / 40 hosts of Zipf sizes, every one capped at 1.5, and 2% of the URLs
  bounded (1% lower, 1% upper).

Memory per URL: the sum of ``nbytes`` of the
NumPy arrays the scheduler holds (attributes, and those inside dicts, lists and tuples),
divided by n; and tracemalloc's count of the memory allocated while adding the URLs and
running a few slots, divided by n.
"""

from __future__ import annotations

import argparse
import math
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
    variants = (False, True) if args.constraints else (False,)
    rows: list[dict[str, Any]] = []
    for n in sizes:
        capacity = max(1.0, n / 100)
        timed = args.slots or max(50, min(300, 3_000_000 // n))
        first_pass = math.ceil(n / capacity)  # every URL's baseline poll
        warmup = args.warmup if args.warmup is not None else max(5, timed // 3, first_pass)
        for name in names:
            for constrained in variants:
                label = f"{name} ({args.mix} constraints)" if constrained else name
                try:
                    row = _measure(
                        name, n, capacity, timed, warmup, args.seed, constrained, args.mix
                    )
                except Exception as exc:  # report and go on with the others
                    _log(f"n={n:,}: {label} FAILED {type(exc).__name__}: {exc}")
                    rows.append(
                        {"n": n, "scheduler": label, "error": f"{type(exc).__name__}: {exc}"}
                    )
                    continue
                rows.append(row)
                _log(
                    f"n={n:,}: {label} {row['median_ms']:.3f} ms/slot "
                    f"(argpartition {row['argpartition_ms']:.3f} ms, "
                    f"{row['vs_argpartition']:.2f}x; CPU {row['cpu_ms']:.3f} ms, "
                    f"{row['cpu_vs_argpartition']:.2f}x), "
                    f"{row['array_bytes_per_url']:.1f} B/URL in arrays"
                )
    print(_markdown(rows))
    return 0


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated n")
    parser.add_argument("--schedulers", help="comma-separated names [all registered]")
    parser.add_argument("--slots", type=int, help="timed slots per scheduler [by n]")
    parser.add_argument(
        "--warmup", type=int, help="untimed slots first [n / C, at least slots / 3]"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--constraints",
        action="store_true",
        help="also measure every scheduler under host caps and bounds",
    )
    parser.add_argument(
        "--mix", choices=("realistic", "heavy"), default="realistic", help="the constraints"
    )
    return parser.parse_args(argv)


def _rates(n: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Zipf(0.9, 1.0) change probabilities, shuffled (oracles need rates)."""
    p = zipf(0.9, 1.0, n)
    return np.random.default_rng(0).permutation(p)


def _build(
    name: str, n: int, capacity: float, seed: int, constrained: bool, mix: str = "realistic"
) -> schedulers.Scheduler:
    sched = schedulers.create(name, capacity=capacity, seed=seed)
    rates = _rates(n) if type(sched).needs_rates else None
    ids = np.arange(n, dtype=np.int64)
    sched.add(ids, rates=rates)
    if constrained:
        _constrain(sched, ids, seed, mix)
    return sched


def _constrain(sched: schedulers.Scheduler, ids: np.ndarray[Any, Any], seed: int, mix: str) -> None:
    """Hosts of Zipf sizes, some capped at 1.5 polls per slot, bounds on some URLs (the
    module docstring's mixes)."""
    rng = np.random.default_rng(seed + 1)
    n = ids.size
    heavy = mix == "heavy"
    hosts = max(1, n // 40 if heavy else n // 1000)
    share = 1.0 / np.arange(1, hosts + 1)
    sched.set_groups(ids, rng.choice(hosts, size=n, p=share / share.sum()))
    sched.set_group_caps({h: 1.5 for h in range(hosts if heavy else min(100, hosts))})
    bounded = rng.permutation(n)[: max(2, n // 50 if heavy else n // 100)]
    half = bounded.size // 2
    sched.set_bounds(ids[bounded[:half]], lower=0.01)
    sched.set_bounds(ids[bounded[half:]], upper=0.1)


def _slot(sched: schedulers.Scheduler, rng: np.random.Generator) -> None:
    ids = sched.select()
    sched.feedback(ids, rng.random(ids.size) < HIT_RATE)


def _measure(
    name: str,
    n: int,
    capacity: float,
    timed: int,
    warmup: int,
    seed: int,
    constrained: bool,
    mix: str = "realistic",
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    sched = _build(name, n, capacity, seed, constrained, mix)
    add_seconds = time.perf_counter() - started
    for _ in range(warmup):
        _slot(sched, rng)
    reference = _Argpartition(n, int(capacity))
    times, floor, cpu, cpu_floor = [], [], [], []
    for _ in range(timed):
        wall_ref, cpu_ref = reference.time()
        floor.append(wall_ref)
        cpu_floor.append(cpu_ref)
        c0, t0 = time.thread_time(), time.perf_counter()
        _slot(sched, rng)
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    array_bytes = _array_bytes(sched)
    del sched, reference
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sched = _build(name, n, capacity, seed, constrained, mix)
        for _ in range(3):
            _slot(sched, rng)
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    median, base = statistics.median(times), statistics.median(floor)
    return {
        "n": n,
        "scheduler": f"{name} ({mix} constraints)" if constrained else name,
        "median_ms": median * 1e3,
        "argpartition_ms": base * 1e3,
        "vs_argpartition": median / base,
        "cpu_ms": statistics.median(cpu) * 1e3,
        "cpu_argpartition_ms": statistics.median(cpu_floor) * 1e3,
        "cpu_vs_argpartition": statistics.median(cpu) / statistics.median(cpu_floor),
        "p90_ms": float(np.percentile(times, 90)) * 1e3,
        "mean_ms": statistics.fmean(times) * 1e3,
        "add_s": add_seconds,
        "array_bytes_per_url": array_bytes / n,
        "traced_bytes_per_url": traced / n,
    }


class _Argpartition:
    """A bare top-k of n fresh random floats, timed one at a time (the reference)."""

    def __init__(self, n: int, k: int) -> None:
        self._rng = np.random.default_rng(0)
        self._values = self._rng.random(n)
        self._kth = n - k
        for _ in range(3):
            np.argpartition(self._values, self._kth)

    def time(self) -> tuple[float, float]:
        """(wall seconds, CPU seconds of this thread) of one top-k."""
        self._rng.random(out=self._values)  # fresh values, no new allocation
        c0, t0 = time.thread_time(), time.perf_counter()
        np.argpartition(self._values, self._kth)
        return time.perf_counter() - t0, time.thread_time() - c0


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
        "Time per slot (select + feedback, random hits), median over timed slots; C = n/100;",
        "argpartition: a bare top-C of n floats timed before each slot (median); CPU: the",
        "thread's CPU time (time.thread_time), the same slots.",
        "",
        "| n | scheduler | ms/slot (median) | mean ms | p90 ms | argpartition ms "
        "| x argpartition | CPU ms/slot | CPU argpartition ms | CPU x argpartition "
        "| add() s | array B/URL | traced B/URL |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(
                f"| {row['n']:,} | {row['scheduler']} | failed: {row['error'][:60]} "
                "| | | | | | | | | | |"
            )
        else:
            lines.append(
                f"| {row['n']:,} | {row['scheduler']} | {row['median_ms']:.3f} "
                f"| {row['mean_ms']:.3f} | {row['p90_ms']:.3f} | {row['argpartition_ms']:.3f} "
                f"| {row['vs_argpartition']:.2f} | {row['cpu_ms']:.3f} "
                f"| {row['cpu_argpartition_ms']:.3f} | {row['cpu_vs_argpartition']:.2f} "
                f"| {row['add_s']:.2f} "
                f"| {row['array_bytes_per_url']:.1f} | {row['traced_bytes_per_url']:.1f} |"
            )
    return "\n".join(lines)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
