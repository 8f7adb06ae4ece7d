"""Run many simulations on a few processes, with live progress.

Each job is independent and seeded, so results do not depend on the number of
processes. Workers write their slots done into a shared array that the caller polls.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from crawler.sim.catalog import EnvSpec
from crawler.sim.runner import RunResult, run

#: (job index, slots done of every job)
ProgressHook = Callable[[Sequence[int]], None]
#: (job index, its result, or the error message of a failed job)
DoneHook = Callable[[int, "RunResult | str"], None]

_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class Job:
    """One simulation: a scheduler on an environment."""

    scheduler: str
    env: EnvSpec
    slots: int
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    window: int | None = None


def default_workers(jobs: int) -> int:
    """One process per core, at most one per job."""
    return max(1, min(os.cpu_count() or 1, jobs))


def run_jobs(
    jobs: Sequence[Job],
    *,
    workers: int = 1,
    on_progress: ProgressHook | None = None,
    on_done: DoneHook | None = None,
) -> list[RunResult | str]:
    """Run every job; a job that raises gives its error message instead of a result."""
    if workers <= 1 or len(jobs) <= 1:
        return _run_here(jobs, on_progress, on_done)
    return _run_pool(jobs, workers, on_progress, on_done)


def _run_here(
    jobs: Sequence[Job], on_progress: ProgressHook | None, on_done: DoneHook | None
) -> list[RunResult | str]:
    done = [0] * len(jobs)
    out: list[RunResult | str] = []
    for index, job in enumerate(jobs):

        def progress(slots: int, index: int = index) -> None:
            done[index] = slots
            if on_progress is not None:
                on_progress(done)

        result = _execute(job, progress)
        out.append(result)
        if on_done is not None:
            on_done(index, result)
    return out


_shared: Any = None


def _init_worker(shared: Any) -> None:
    global _shared
    _shared = shared


def _work(index: int, job: Job) -> tuple[int, RunResult | str]:
    def progress(slots: int) -> None:
        _shared[index] = slots

    return index, _execute(job, progress)


def _execute(job: Job, progress: Callable[[int], None]) -> RunResult | str:
    try:
        return run(
            job.scheduler,
            job.env,
            job.slots,
            seed=job.seed,
            params=job.params,
            window=job.window,
            progress=progress,
        )
    except Exception as exc:  # reported per job; the other jobs go on
        return f"{type(exc).__name__}: {exc}"


def _run_pool(
    jobs: Sequence[Job],
    workers: int,
    on_progress: ProgressHook | None,
    on_done: DoneHook | None,
) -> list[RunResult | str]:
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    shared: Any = ctx.Array("q", len(jobs), lock=False)
    results: dict[int, RunResult | str] = {}
    finished: list[tuple[int, RunResult | str]] = []
    with ctx.Pool(workers, initializer=_init_worker, initargs=(shared,)) as pool:
        pending = [
            pool.apply_async(_work, (index, job), callback=finished.append)
            for index, job in enumerate(jobs)
        ]
        while len(results) < len(jobs):
            time.sleep(_POLL_SECONDS)
            while finished:
                index, result = finished.pop(0)
                results[index] = result
                if on_done is not None:
                    on_done(index, result)
            for handle in pending:
                if handle.ready() and not handle.successful():
                    handle.get()  # re-raise a worker crash (not a job error)
            if on_progress is not None:
                on_progress(list(shared))
    return [results[index] for index in range(len(jobs))]
